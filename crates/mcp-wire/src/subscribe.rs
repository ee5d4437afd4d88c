//! Resource subscriptions relayed to upstream servers.
//!
//! A session's `resources/subscribe` of a URI an upstream offers is kept
//! here, on that server, under the server's own URI, with how to tell the
//! session (its `notifications/resources/updated`, under the URI the
//! session used: its own, or `<server>+<uri>`). The server is asked to
//! subscribe when its first session subscribes to a URI (and again after a
//! reconnect), and to unsubscribe when the last one leaves; a server that
//! does not declare `resources.subscribe` is not asked, and its sessions
//! simply hear nothing. At most [`PER_SESSION`] subscriptions are kept per
//! session and [`PER_SERVER`] per server; a session that has gone away is
//! dropped the first time an update finds it closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Subscriptions kept per session and server, at most.
pub const PER_SESSION: usize = 100;
/// Subscriptions kept per server, all sessions, at most.
pub const PER_SERVER: usize = 10_000;

/// Tells one session that a resource changed, under the URI it used;
/// returns false once the session is gone.
pub type Notify = Arc<dyn Fn(&str) -> bool + Send + Sync>;

struct Subscriber {
    session: Arc<str>,
    /// The URI as the session subscribed to it.
    uri: String,
    notify: Notify,
}

/// One server's subscriptions: its own URI -> who to tell.
#[derive(Default)]
pub struct Subscriptions {
    by_uri: Mutex<HashMap<String, Vec<Subscriber>>>,
}

impl std::fmt::Debug for Subscriptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriptions").finish_non_exhaustive()
    }
}

/// Why a subscription was not kept.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// The session holds too many.
    #[error("this session already holds {PER_SESSION} subscriptions on this server; unsubscribe from one first")]
    SessionFull,
    /// The server holds too many.
    #[error("the server already holds {PER_SERVER} subscriptions")]
    ServerFull,
}

impl Subscriptions {
    /// Adds `session`'s subscription to `remote` (the server's URI), told
    /// under `uri`. Returns whether it is the first for `remote` (the
    /// server is to be asked).
    pub fn add(&self, session: Arc<str>, remote: &str, uri: &str, notify: Notify) -> Result<bool, SubscribeError> {
        let mut by_uri = self.by_uri.lock().unwrap_or_else(|p| p.into_inner());
        let mine = by_uri.values().flatten().filter(|s| s.session == session).count();
        let all: usize = by_uri.values().map(Vec::len).sum();
        let list = by_uri.entry(remote.to_string()).or_default();
        if list.iter().any(|s| s.session == session && s.uri == uri) {
            return Ok(false);
        }
        if mine >= PER_SESSION {
            return Err(SubscribeError::SessionFull);
        }
        if all >= PER_SERVER {
            return Err(SubscribeError::ServerFull);
        }
        let first = list.is_empty();
        list.push(Subscriber { session, uri: uri.to_string(), notify });
        Ok(first)
    }

    /// Removes `session`'s subscription to `remote` under `uri`. Returns
    /// whether nobody is left subscribed to `remote` (the server is to be
    /// told) and someone was.
    pub fn remove(&self, session: &str, remote: &str, uri: &str) -> bool {
        let mut by_uri = self.by_uri.lock().unwrap_or_else(|p| p.into_inner());
        let Some(list) = by_uri.get_mut(remote) else { return false };
        let before = list.len();
        list.retain(|s| !(&*s.session == session && s.uri == uri));
        let emptied = list.is_empty() && before > 0;
        if list.is_empty() {
            by_uri.remove(remote);
        }
        emptied
    }

    /// Tells every session subscribed to `remote`; drops those gone.
    pub fn updated(&self, remote: &str) {
        let subscribers: Vec<(Arc<str>, String, Notify)> = {
            let by_uri = self.by_uri.lock().unwrap_or_else(|p| p.into_inner());
            by_uri
                .get(remote)
                .map(|l| l.iter().map(|s| (s.session.clone(), s.uri.clone(), s.notify.clone())).collect())
                .unwrap_or_default()
        };
        let gone: Vec<(Arc<str>, String)> =
            subscribers.into_iter().filter(|(_, uri, notify)| !notify(uri)).map(|(s, u, _)| (s, u)).collect();
        for (session, uri) in gone {
            self.remove(&session, remote, &uri);
        }
    }

    /// The server URIs someone is subscribed to (to subscribe again after
    /// a reconnect).
    pub fn uris(&self) -> Vec<String> {
        self.by_uri.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting(alive: bool) -> (Notify, Arc<AtomicUsize>) {
        let n = Arc::new(AtomicUsize::new(0));
        let c = n.clone();
        (
            Arc::new(move |_: &str| {
                c.fetch_add(1, Ordering::SeqCst);
                alive
            }),
            n,
        )
    }

    #[test]
    fn updates_reach_each_subscriber_under_its_uri_and_the_server_is_asked_once() {
        let subs = Subscriptions::default();
        let (a, seen_a) = counting(true);
        let (b, seen_b) = counting(true);
        assert!(subs.add("s1".into(), "evil://fine", "evil://fine", a).unwrap(), "the first asks the server");
        assert!(!subs.add("s2".into(), "evil://fine", "x+evil://fine", b).unwrap(), "the second does not");
        subs.updated("evil://fine");
        subs.updated("evil://other");
        assert_eq!((seen_a.load(Ordering::SeqCst), seen_b.load(Ordering::SeqCst)), (1, 1));
        assert!(!subs.remove("s1", "evil://fine", "evil://fine"), "s2 still listens");
        assert!(subs.remove("s2", "evil://fine", "x+evil://fine"), "the last one leaves: tell the server");
        assert!(subs.uris().is_empty());
    }

    #[test]
    fn a_gone_session_is_dropped_and_a_session_is_held_to_its_share() {
        let subs = Subscriptions::default();
        let (gone, _) = counting(false);
        subs.add("gone".into(), "u", "u", gone).unwrap();
        subs.updated("u");
        assert!(subs.uris().is_empty(), "dropped once found closed");
        for i in 0..PER_SESSION {
            let (n, _) = counting(true);
            subs.add("greedy".into(), &format!("u{i}"), &format!("u{i}"), n).unwrap();
        }
        let (n, _) = counting(true);
        assert!(matches!(subs.add("greedy".into(), "one-more", "one-more", n), Err(SubscribeError::SessionFull)));
    }
}
