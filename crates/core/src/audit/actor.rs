//! Who asked for what the audit trail records: the actor of an operator
//! action, named in every lifecycle and action record.

use serde::Serialize;

/// Who asked for an operator action (a plugin added, a reload), as its
/// audit record names them: `who` through `via`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Actor {
    /// Who: `uid 1000`, `token 3f2a…`, `host h2`, `toolhost` ...
    #[serde(rename = "actor")]
    pub who: String,
    /// Through what: `admin_api`, `page`, `cli`, `cluster`, `signal`,
    /// `watch`, `config`.
    pub via: &'static str,
}

impl Actor {
    /// `who` through `via` (`who` cut to 120 printable characters: a
    /// client may have named itself).
    pub fn new(who: impl AsRef<str>, via: &'static str) -> Actor {
        let who = who.as_ref().chars().take(120).map(|c| if c.is_control() { '?' } else { c }).collect();
        Actor { who, via }
    }

    /// The host itself: its config at start.
    pub fn host() -> Actor {
        Actor::new("toolhost", "config")
    }
}

thread_local! {
    static ACTOR: std::cell::RefCell<Option<Actor>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `actor` named in every lifecycle record it writes on
/// this thread.
pub fn acting<R>(actor: Actor, f: impl FnOnce() -> R) -> R {
    let before = ACTOR.with(|a| a.replace(Some(actor)));
    struct Restore(Option<Actor>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            ACTOR.with(|a| *a.borrow_mut() = before);
        }
    }
    let _restore = Restore(before);
    f()
}

/// The actor of this thread's operator action ([`acting`]), else the host.
pub fn current_actor() -> Actor {
    ACTOR.with(|a| a.borrow().clone()).unwrap_or_else(Actor::host)
}

/// A record with its actor beside its own fields.
#[derive(Serialize)]
pub(super) struct Acted<'a, R: Serialize> {
    #[serde(flatten)]
    pub(super) record: &'a R,
    #[serde(flatten)]
    pub(super) actor: &'a Actor,
}

/// An operator action that is not a plugin's lifecycle (`reload`,
/// `fleet_change`, `server_add` ...), as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct ActionRecord<'a> {
    /// When, RFC 3339 in UTC with milliseconds.
    pub time: String,
    /// What was done.
    pub event: &'a str,
    /// What it changed or why it failed, in the action's own terms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// The trace it belongs to, when spans are on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}
