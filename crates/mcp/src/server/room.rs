//! Turns started from outside a session: `POST /mcp/<agent>/turn`.
//!
//! A pipeline that speaks MCP through a stock client cannot put
//! `_meta["toolhost/utterance"]` on its `tools/list`; its speech-to-text
//! hook posts each transcript to the turn endpoint instead. A [`Room`] is
//! every live session of one agent's endpoint: a turn for one session (by
//! its `Mcp-Session-Id`) runs that session's own selector; a turn for the
//! agent runs the selector once, on the room's own conversation (so on one
//! anti-spam clock), and every live session follows it with the same tier.
//! Each session whose visible tools changed is told at once with
//! `notifications/tools/list_changed`.

use super::*;
use std::collections::HashMap;
use std::sync::{Mutex, Weak};
use tokio::sync::Notify;

/// The live sessions of one agent's endpoint.
#[derive(Debug)]
pub struct Room {
    /// The agent's own conversation, for turns started for every session.
    leader: Conversation,
    /// Sessions by `Mcp-Session-Id`, from their `initialized` notification.
    members: Mutex<HashMap<String, Member>>,
}

#[derive(Debug)]
struct Member {
    conversation: Weak<Conversation>,
    /// Wakes the session's watcher, which announces a changed visible set.
    nudge: Weak<Notify>,
}

impl Member {
    fn alive(&self) -> Option<(Arc<Conversation>, Option<Arc<Notify>>)> {
        Some((self.conversation.upgrade()?, self.nudge.upgrade()))
    }
}

/// What a turn came to: the tier, why, the turn's number, and the tools
/// visible at that tier.
#[derive(Debug, Clone)]
pub struct RoomTurn {
    /// The tier and why.
    pub tier: TurnTier,
    /// The sessions that took the turn.
    pub sessions: usize,
}

/// Why a turn for one session was not started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// No live session of this agent has that id.
    #[error("no live session {0:?} of this agent")]
    NoSession(String),
}

impl Room {
    /// An empty room for `agent` (`None`: the operator's endpoint).
    pub(crate) fn new(host: &Pipeline, agent: Option<&str>) -> Room {
        Room { leader: host.conversation_unchecked(agent), members: Mutex::default() }
    }

    fn members(&self) -> std::sync::MutexGuard<'_, HashMap<String, Member>> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `session` in: `id` is its `Mcp-Session-Id`.
    pub(crate) fn join(&self, id: &str, conversation: &Arc<Conversation>, nudge: &Arc<Notify>) {
        let mut members = self.members();
        members.retain(|_, m| m.conversation.strong_count() > 0);
        members.insert(
            id.to_string(),
            Member { conversation: Arc::downgrade(conversation), nudge: Arc::downgrade(nudge) },
        );
    }

    /// The conversation (turns, tier) of the live session `id`.
    pub(crate) fn conversation(&self, id: &str) -> Option<Arc<Conversation>> {
        self.members().get(id).and_then(|m| m.conversation.upgrade())
    }

    /// Whether a live session of this room has `id`.
    pub fn has(&self, id: &str) -> bool {
        self.members().get(id).is_some_and(|m| m.conversation.strong_count() > 0)
    }

    /// Starts a turn for `utterance` in the session `id`, with its own
    /// selector.
    pub fn turn_in(&self, host: &Pipeline, id: &str, utterance: &str, cues: TurnCues) -> Result<RoomTurn, TurnError> {
        let found = self.members().get(id).and_then(Member::alive);
        let Some((conversation, nudge)) = found else { return Err(TurnError::NoSession(id.to_string())) };
        let tier = host.begin_turn(&conversation, utterance, cues);
        if let Some(n) = nudge {
            n.notify_one();
        }
        Ok(RoomTurn { tier, sessions: 1 })
    }

    /// Starts a turn for `utterance` for the whole agent: the selector runs
    /// once, on the room's conversation, and every live session follows.
    /// Works with no live session too (a pipeline that lists afterwards
    /// lists at the agent's ceiling in a new session: the answer's tools are
    /// what this turn allows).
    pub fn turn_all(&self, host: &Pipeline, utterance: &str, cues: TurnCues) -> RoomTurn {
        let tier = host.begin_turn(&self.leader, utterance, cues);
        let live: Vec<(Arc<Conversation>, Option<Arc<Notify>>)> = {
            let mut members = self.members();
            members.retain(|_, m| m.conversation.strong_count() > 0);
            members.values().filter_map(Member::alive).collect()
        };
        for (conversation, nudge) in &live {
            host.follow_turn(conversation, &self.leader);
            if let Some(n) = nudge {
                n.notify_one();
            }
        }
        RoomTurn { tier, sessions: live.len() }
    }
}
