//! What each agent did lately, for the DM's page: its live sessions, its
//! last calls (with the error text the caller got) and how often it hit
//! its call rate or its concurrency limit. In memory only, bounded: a few
//! calls per configured agent.

use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many calls are kept per agent.
pub const LAST_CALLS: usize = 8;
/// How much of a failed call's error text is kept.
const ERROR_CHARS: usize = 400;

/// One recent call.
#[derive(Debug, Clone, Serialize)]
pub struct RecentCall {
    /// When it ended (RFC 3339).
    pub time: String,
    /// The tool called (a name breaking the tool-name rule cut to a prefix
    /// and its hash, as the audit writes it).
    pub tool: String,
    /// `ok`, `refused`, or the error's kind (`timeout`, `capacity_exceeded` ...).
    pub outcome: String,
    /// How long it took, milliseconds.
    pub duration_ms: f64,
    /// The error text the caller got (already free of the plugin's
    /// secrets), cut to 400 characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One agent's recent activity.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentActivity {
    /// Its MCP sessions open now.
    pub sessions: usize,
    /// Its last calls, newest first.
    pub last_calls: Vec<RecentCall>,
    /// Calls refused because it was over its call rate, since start.
    pub rate_limited: u64,
    /// Calls refused because it had as many running as it may, since start.
    pub capacity_exceeded: u64,
}

#[derive(Debug, Default)]
struct Agent {
    sessions: usize,
    calls: VecDeque<RecentCall>,
    rate_limited: u64,
    capacity_exceeded: u64,
}

/// Every agent's recent activity.
#[derive(Debug, Default)]
pub struct Activity {
    agents: Mutex<HashMap<String, Agent>>,
}

/// What a call came to, for [`Activity::record`].
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    /// `ok`, `refused`, or the error's kind.
    pub kind: &'a str,
    /// The error text the caller got.
    pub error: Option<&'a str>,
    /// Refused for the agent's call rate.
    pub rate_limited: bool,
}

/// An open session, counted until dropped.
#[derive(Debug)]
pub struct SessionMark {
    activity: Arc<Activity>,
    agent: String,
}

impl Drop for SessionMark {
    fn drop(&mut self) {
        if let Some(a) = self.activity.lock().get_mut(&self.agent) {
            a.sessions = a.sessions.saturating_sub(1);
        }
    }
}

impl Activity {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Agent>> {
        self.agents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a call of `tool` by `agent` (a configured agent).
    pub fn record(&self, agent: &str, tool: &str, outcome: Outcome<'_>, duration: Duration) {
        let call = RecentCall {
            time: crate::audit::now_rfc3339(),
            // A caller's name for an unknown tool may be megabytes: cut as
            // the audit cuts it, so the page's state stays small.
            tool: crate::audit::loggable_name(tool).into_owned(),
            outcome: outcome.kind.to_string(),
            duration_ms: duration.as_secs_f64() * 1000.0,
            error: outcome.error.map(|e| e.chars().take(ERROR_CHARS).collect()),
        };
        let mut agents = self.lock();
        let a = agents.entry(agent.to_string()).or_default();
        if outcome.rate_limited {
            a.rate_limited += 1;
        } else if outcome.kind == "capacity_exceeded" {
            a.capacity_exceeded += 1;
        }
        if a.calls.len() == LAST_CALLS {
            a.calls.pop_back();
        }
        a.calls.push_front(call);
    }

    /// Counts a session of `agent` as open until the mark is dropped.
    pub fn session_opened(self: &Arc<Self>, agent: &str) -> SessionMark {
        self.lock().entry(agent.to_string()).or_default().sessions += 1;
        SessionMark { activity: self.clone(), agent: agent.to_string() }
    }

    /// `agent`'s recent activity.
    pub fn of(&self, agent: &str) -> AgentActivity {
        self.lock()
            .get(agent)
            .map(|a| AgentActivity {
                sessions: a.sessions,
                last_calls: a.calls.iter().cloned().collect(),
                rate_limited: a.rate_limited,
                capacity_exceeded: a.capacity_exceeded,
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_calls_newest_first_and_counts_rate_and_capacity_apart() {
        let a = Arc::new(Activity::default());
        let ok = Outcome { kind: "ok", error: None, rate_limited: false };
        for i in 0..LAST_CALLS + 2 {
            a.record("bartok", &format!("t{i}"), ok, Duration::from_millis(3));
        }
        let busy = Outcome { kind: "capacity_exceeded", error: Some("busy"), rate_limited: false };
        a.record("bartok", "roll", busy, Duration::ZERO);
        a.record("bartok", "roll", Outcome { rate_limited: true, ..busy }, Duration::ZERO);
        let seen = a.of("bartok");
        assert_eq!(seen.last_calls.len(), LAST_CALLS);
        assert_eq!(seen.last_calls[0].error.as_deref(), Some("busy"));
        assert_eq!(seen.last_calls[2].tool, format!("t{}", LAST_CALLS + 1), "newest first");
        assert_eq!((seen.rate_limited, seen.capacity_exceeded), (1, 1));
        assert_eq!(a.of("mira").last_calls.len(), 0);

        let (one, two) = (a.session_opened("bartok"), a.session_opened("bartok"));
        assert_eq!(a.of("bartok").sessions, 2);
        drop(one);
        assert_eq!(a.of("bartok").sessions, 1);
        drop(two);
        assert_eq!(a.of("bartok").sessions, 0);
    }

    /// A 900 KB unknown tool name (which made the page's state 7.4 MB) is
    /// kept as the audit keeps it: a prefix and its hash.
    #[test]
    fn a_huge_tool_name_is_cut_as_the_audit_cuts_it() {
        let a = Activity::default();
        let huge = "x".repeat(900_000);
        let refused = Outcome { kind: "refused", error: Some(&huge), rate_limited: false };
        a.record("bartok", &huge, refused, Duration::ZERO);
        let call = &a.of("bartok").last_calls[0];
        assert_eq!(call.tool, crate::audit::loggable_name(&huge));
        assert!(call.tool.len() < 120 && call.error.as_ref().unwrap().len() <= ERROR_CHARS, "{}", call.tool);
    }
}
