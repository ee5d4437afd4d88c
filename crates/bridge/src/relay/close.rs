//! Why a session ends, as its client is told: the close code and reason
//! of each way a session can end.

use super::budget::Full;
use tokio_tungstenite::tungstenite;

/// Why a session ends, as the client is told.
pub(super) struct Close {
    pub(super) code: u16,
    pub(super) reason: String,
}

impl Close {
    pub(super) fn new(code: u16, reason: impl Into<String>) -> Close {
        let mut reason = reason.into();
        // A close frame's reason is at most 123 bytes.
        if reason.len() > 120 {
            let mut end = 120;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Close { code, reason }
    }
}

/// The close of a session whose messages to the upstream passed a bound.
pub(super) fn up_full(full: Full) -> Close {
    past_bound(full, "the upstream voice API is not keeping up")
}

/// The close of a session whose messages to the client passed a bound.
pub(super) fn client_full(full: Full) -> Close {
    past_bound(full, "the client is not reading its events")
}

/// The close of a session past `full`, whose own side (`side`) did not
/// keep up when the bound was the session's.
fn past_bound(full: Full, side: &str) -> Close {
    match full {
        Full::Session | Full::Gone => Close::new(1008, format!("{side} (voice.max_buffered_bytes); session closed")),
        Full::Agent => agent_full(),
        Full::Total => total_full(),
    }
}

fn agent_full() -> Close {
    Close::new(
        1008,
        "this agent's sessions hold all their share may (voice.max_buffered_total_bytes, shared as voice.max_sessions_per_agent); session closed",
    )
}

fn total_full() -> Close {
    Close::new(1008, "the relay holds all it may for every session (voice.max_buffered_total_bytes); session closed")
}

/// The close of a session when the host stops.
pub(super) fn going_away() -> Close {
    Close::new(1001, "the host is stopping; connect again to continue")
}

pub(super) fn client_error(e: &str) -> Close {
    if e.contains("too long") || e.contains("Message too big") || e.contains("size") {
        Close::new(1009, "a client message over voice.max_message_bytes")
    } else {
        Close::new(1002, format!("client protocol error: {e}"))
    }
}

pub(super) fn upstream_error(e: &tungstenite::Error) -> Close {
    match e {
        tungstenite::Error::Capacity(_) => {
            Close::new(1014, "the upstream voice API sent a message over voice.max_message_bytes; session closed")
        }
        other => Close::new(1014, format!("the upstream voice API failed: {other}")),
    }
}
