//! Gemini session resumption handles, bound to the agent whose session
//! received them: a client's `setup.sessionResumption.handle` is passed
//! upstream only when the relay gave that handle to one of the same
//! agent's sessions (before, another agent holding a leaked handle resumed
//! the first agent's conversation with its history).
//!
//! The binding lives in this host's memory: a handle given out before a
//! restart, or by another host of a fleet, is refused, and the client
//! starts a new session.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a handle is remembered after the upstream gave it (Gemini
/// honours one for 2 hours after its session ends; the last handle of a
/// session is given near its end).
const REMEMBERED_FOR: Duration = Duration::from_secs(3 * 3600);

/// The most handles remembered at once, oldest forgotten first.
const REMEMBERED: usize = 32 * 1024;

/// The handles given to clients, and to which agent.
#[derive(Debug, Default)]
pub(super) struct Handles {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    agent_of: HashMap<String, (String, Instant)>,
    order: VecDeque<(String, Instant)>,
}

impl Handles {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `handle` goes to a session of `agent`.
    pub(super) fn given(&self, handle: &str, agent: &str) {
        let now = Instant::now();
        let mut inner = self.inner();
        while let Some((old, at)) = inner.order.front().cloned() {
            if inner.order.len() < REMEMBERED && at.elapsed() < REMEMBERED_FOR {
                break;
            }
            inner.order.pop_front();
            if inner.agent_of.get(&old).is_some_and(|(_, given)| *given == at) {
                inner.agent_of.remove(&old);
            }
        }
        inner.agent_of.insert(handle.to_string(), (agent.to_string(), now));
        inner.order.push_back((handle.to_string(), now));
    }

    /// Whether `handle` was given to a session of `agent` (and not long ago).
    pub(super) fn given_to(&self, handle: &str, agent: &str) -> bool {
        self.inner().agent_of.get(handle).is_some_and(|(owner, at)| owner == agent && at.elapsed() < REMEMBERED_FOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_resumes_only_for_the_agent_it_was_given_to_and_the_oldest_are_forgotten() {
        let h = Handles::default();
        h.given("h1", "Sage");
        assert!(h.given_to("h1", "Sage"));
        assert!(!h.given_to("h1", "Bartok"));
        assert!(!h.given_to("h2", "Sage"));
        for i in 0..REMEMBERED {
            h.given(&format!("x{i}"), "Bartok");
        }
        assert!(!h.given_to("h1", "Sage"), "forgotten past the bound");
        assert!(h.given_to(&format!("x{}", REMEMBERED - 1), "Bartok"));
        assert!(h.inner().agent_of.len() <= REMEMBERED);
    }
}
