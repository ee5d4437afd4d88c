//! Progress and log notifications from an upstream server, relayed to the
//! client whose call caused them, bounded like a wasm plugin's.
//!
//! rmcp gives each request a progress token of its own (it overwrites any
//! set before sending); a call that has somewhere to send events registers
//! that token once the request is sent, and the server's
//! `notifications/progress` for it reach that call's sink, which carries
//! them to the caller under the caller's own token. Log messages are not tied to a request: they reach a caller
//! only while it is the server's one call in flight (never another agent's
//! session), and always the host log at debug, escaped. Per call at most
//! [`MAX_PROGRESS`] progress reports, [`PROGRESS_INTERVAL`] apart, and
//! [`MAX_LOGS`] log lines pass; the rest are dropped, so a flooding upstream
//! cannot queue without bound for a slow client.

use crate::tool::PluginEvent;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Progress reports relayed per call, at most.
pub(super) const MAX_PROGRESS: u32 = 100;
/// Least time between two relayed progress reports of a call.
pub(super) const PROGRESS_INTERVAL: Duration = Duration::from_millis(25);
/// Log lines relayed per call, at most.
pub(super) const MAX_LOGS: u32 = 100;
/// Longest relayed log line or progress message, in characters.
const MAX_TEXT: usize = 4096;

type Sink = Arc<dyn Fn(PluginEvent) + Send + Sync>;

struct Call {
    sink: Sink,
    progress_sent: u32,
    last_progress: Option<Instant>,
    /// The latest report thinned out ([`PROGRESS_INTERVAL`]): relayed when
    /// the call ends, unless a later one went out, so that the caller
    /// always hears the server's last word before the result.
    latest: Option<Early>,
    logs_sent: u32,
}

/// How many progress reports that arrived before their call registered
/// are held, at most.
const EARLY_MAX: usize = 32;
/// How long such a report is held for its call.
const EARLY_TTL: Duration = Duration::from_secs(2);

/// A progress report held for a call that has not registered yet.
struct Early {
    token: i64,
    at: Instant,
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
}

/// The calls of one server that have somewhere to send events.
#[derive(Default)]
pub(super) struct Relay {
    calls: Mutex<HashMap<i64, Call>>,
    /// Reports for tokens no call has yet: a server can answer with
    /// progress before the request's sender has registered its token.
    early: Mutex<std::collections::VecDeque<Early>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").finish_non_exhaustive()
    }
}

/// A call's registration; dropping it ends the relay for that call.
pub(super) struct Registration<'a> {
    relay: &'a Relay,
    /// The progress token the request carries.
    token: Option<i64>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token {
            let call = self.relay.calls.lock().unwrap_or_else(|p| p.into_inner()).remove(&token);
            // The server's last report, if it was thinned out, goes now:
            // before the result, which its caller sends after this.
            if let Some(Call { sink, latest: Some(e), .. }) = call {
                sink(PluginEvent::Progress { progress: e.progress, total: e.total, message: e.message });
            }
        }
    }
}

/// A progress token as a number: rmcp's are numbers, and a server that
/// echoes one as a numeric string means the same token.
pub(super) fn token_number(token: &rmcp::model::ProgressToken) -> Option<i64> {
    match &token.0 {
        rmcp::model::NumberOrString::Number(n) => Some(*n),
        rmcp::model::NumberOrString::String(s) => s.parse().ok(),
    }
}

impl Relay {
    /// Registers a call whose request carries `token` and whose events go
    /// to `sink`; reports for it that came early are relayed now.
    pub(super) fn register(&self, token: &rmcp::model::ProgressToken, sink: Sink) -> Registration<'_> {
        let Some(token) = token_number(token) else { return Registration { relay: self, token: None } };
        let call = Call { sink, progress_sent: 0, last_progress: None, latest: None, logs_sent: 0 };
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).insert(token, call);
        let early: Vec<Early> = {
            let mut held = self.early.lock().unwrap_or_else(|p| p.into_inner());
            let (mine, rest): (Vec<Early>, Vec<Early>) = held.drain(..).partition(|e| e.token == token);
            held.extend(rest);
            mine
        };
        for e in early {
            self.progress(e.token, e.progress, e.total, e.message);
        }
        Registration { relay: self, token: Some(token) }
    }

    /// Relays a progress report for `token`, when that call is ours and
    /// within its bounds. One for no call yet is held briefly.
    pub(super) fn progress(&self, token: i64, progress: f64, total: Option<f64>, message: Option<String>) {
        let sink = {
            let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            let Some(call) = calls.get_mut(&token) else {
                drop(calls);
                let mut held = self.early.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                held.retain(|e| now.duration_since(e.at) < EARLY_TTL);
                if held.len() < EARLY_MAX {
                    let message = message.map(|m| m.chars().take(MAX_TEXT).collect());
                    held.push_back(Early { token, at: now, progress, total, message });
                }
                return;
            };
            let now = Instant::now();
            if call.progress_sent >= MAX_PROGRESS || call.last_progress.is_some_and(|t| now - t < PROGRESS_INTERVAL) {
                let message = message.map(|m| m.chars().take(MAX_TEXT).collect());
                call.latest = Some(Early { token, at: now, progress, total, message });
                return;
            }
            call.progress_sent += 1;
            call.last_progress = Some(now);
            call.latest = None;
            call.sink.clone()
        };
        sink(PluginEvent::Progress { progress, total, message: message.map(|m| m.chars().take(MAX_TEXT).collect()) });
    }

    /// Relays a log line to the one call in flight, if there is exactly one
    /// and it has lines left.
    pub(super) fn log(&self, level: &'static str, message: &str) {
        let sink = {
            let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            if calls.len() != 1 {
                return;
            }
            let Some(call) = calls.values_mut().next().filter(|c| c.logs_sent < MAX_LOGS) else { return };
            call.logs_sent += 1;
            call.sink.clone()
        };
        sink(PluginEvent::Log { level, message: message.chars().take(MAX_TEXT).collect() });
    }
}

/// Notifications admitted from one server per second; the rest are dropped
/// before any work is done for them.
pub(super) const NOTICES_PER_SECOND: u32 = 100;
/// Least time between two warnings about dropped notifications.
const DROP_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Holds one server's progress and log notifications to
/// [`NOTICES_PER_SECOND`] (a window per second), and says once a minute,
/// at `warn`, how many it dropped.
#[derive(Debug)]
pub(super) struct Gate {
    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    window: Instant,
    admitted: u32,
    dropped: u64,
    warned: Option<Instant>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate { state: Mutex::new(GateState { window: Instant::now(), admitted: 0, dropped: 0, warned: None }) }
    }
}

impl Gate {
    /// Whether one more notification from `server` is let through now.
    pub(super) fn admit(&self, server: &str) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if now.duration_since(s.window) >= Duration::from_secs(1) {
            s.window = now;
            s.admitted = 0;
        }
        if s.admitted < NOTICES_PER_SECOND {
            s.admitted += 1;
            return true;
        }
        s.dropped += 1;
        if s.warned.is_none_or(|t| now.duration_since(t) >= DROP_WARNING_INTERVAL) {
            tracing::warn!(
                server,
                dropped = s.dropped,
                "the server sends more than {NOTICES_PER_SECOND} notifications a second; the rest are dropped"
            );
            s.warned = Some(now);
            s.dropped = 0;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_admits_its_rate_and_drops_the_rest() {
        let gate = Gate::default();
        let admitted = (0..10_000).filter(|_| gate.admit("flood")).count();
        assert_eq!(admitted, NOTICES_PER_SECOND as usize);
    }

    fn collector() -> (Sink, Arc<Mutex<Vec<PluginEvent>>>) {
        let seen: Arc<Mutex<Vec<PluginEvent>>> = Arc::default();
        let s = seen.clone();
        (Arc::new(move |e| s.lock().unwrap().push(e)), seen)
    }

    fn token(n: i64) -> rmcp::model::ProgressToken {
        rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(n))
    }

    #[test]
    fn progress_reaches_only_its_own_call_and_is_bounded() {
        let relay = Relay::default();
        let (a, seen_a) = collector();
        let (b, seen_b) = collector();
        let ra = relay.register(&token(1), a);
        let rb = relay.register(&token(2), b);
        for i in 0..10_000 {
            relay.progress(1, f64::from(i), None, None);
        }
        assert_eq!(seen_a.lock().unwrap().len(), 1, "25 ms apart: a burst passes one");
        // When the call ends (before its result goes out), the last word.
        drop(ra);
        let last: Vec<f64> = seen_a
            .lock()
            .unwrap()
            .iter()
            .map(|e| match e {
                PluginEvent::Progress { progress, .. } => *progress,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(last, [0.0, 9999.0], "the first, and the last one thinned out, at the end");
        assert!(seen_b.lock().unwrap().is_empty(), "another call's token never reaches b");
        relay.progress(2, 1.0, Some(2.0), Some("x".repeat(10_000)));
        match &seen_b.lock().unwrap()[0] {
            PluginEvent::Progress { message: Some(m), .. } => assert_eq!(m.len(), MAX_TEXT),
            other => panic!("{other:?}"),
        }
        drop(rb);
        relay.progress(2, 2.0, None, None);
        assert_eq!(seen_b.lock().unwrap().len(), 1, "a finished call gets nothing");
    }

    #[test]
    fn progress_sent_before_its_call_registered_is_held_for_it_and_bounded() {
        let relay = Relay::default();
        // The server answered the request with progress before the sender
        // had registered rmcp's token; the report is the call's all the same.
        relay.progress(7, 1.0, Some(3.0), None);
        for i in 0..1000 {
            relay.progress(1000 + i, 1.0, None, None);
        }
        let (a, seen_a) = collector();
        let _ra = relay.register(&rmcp::model::ProgressToken(rmcp::model::NumberOrString::String("7".into())), a);
        assert!(
            matches!(seen_a.lock().unwrap()[..], [PluginEvent::Progress { progress, total: Some(t), .. }] if progress == 1.0 && t == 3.0)
        );
        assert!(relay.early.lock().unwrap().len() <= EARLY_MAX, "held reports are bounded");
    }

    #[test]
    fn logs_reach_the_caller_only_while_it_is_alone() {
        let relay = Relay::default();
        let (a, seen_a) = collector();
        let (b, _) = collector();
        let ra = relay.register(&token(1), a);
        for _ in 0..1000 {
            relay.log("info", "hello");
        }
        assert_eq!(seen_a.lock().unwrap().len(), MAX_LOGS as usize);
        let _rb = relay.register(&token(2), b);
        let before = seen_a.lock().unwrap().len();
        relay.log("info", "whose?");
        assert_eq!(seen_a.lock().unwrap().len(), before, "two in flight: nobody's");
        drop(ra);
    }
}
