//! The campaign memory store: session transcripts, facts, and the knowledge
//! graph of entities and relationships (the WIT `memory` interface).
//!
//! Memory is a capability: the host links it only into plugins the operator
//! granted `memory`, and refuses to load a component that imports it without
//! the grant. A component imports `toolhost:plugin/memory` only when its code
//! calls one of these functions (unused imports are dropped when the
//! component is built), so plugins that never touch memory need no grant.
//!
//! Errors from the store are [`MemoryError`]s; `?` in a
//! [`Tool::call`](crate::Tool::call) turns one into
//! [`ToolError::Failed`](crate::ToolError::Failed) reading
//! `memory store: <reason>`.
//!
//! Compiled natively (unit tests), there is no store: every function returns
//! a [`MemoryError`] saying so.
//!
//! ```no_run
//! use toolhost_sdk::{Output, ToolError, memory};
//!
//! fn npc_names() -> Result<Output, ToolError> {
//!     let npcs = memory::query_entities(None, Some("npc"), 20)?;
//!     Output::json(&npcs.iter().map(|e| e.name.as_str()).collect::<Vec<_>>())
//! }
//! ```

use std::fmt;

pub use crate::bindings::toolhost::plugin::memory::{Entity, Fact, Relationship, TranscriptLine};

/// The memory store failed or is unavailable. Displays as
/// `memory store: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryError {
    reason: String,
}

impl MemoryError {
    /// What the store said.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "memory store: {}", self.reason)
    }
}

impl std::error::Error for MemoryError {}

#[cfg(target_arch = "wasm32")]
mod imp {
    pub(super) use crate::bindings::toolhost::plugin::memory::{
        get_entity, query_entities, relationships, search_facts, search_sessions,
    };
    pub(super) use crate::bindings::toolhost::plugin::memory_write::remember;
}

/// Natively there is no host, hence no store.
#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use super::{Entity, Fact, Relationship, TranscriptLine};

    const UNAVAILABLE: &str = "the memory store exists only inside toolhost (wasm32 components granted `memory`)";

    pub(super) fn search_sessions(_: &str, _: Option<&str>, _: u32) -> Result<Vec<TranscriptLine>, String> {
        Err(UNAVAILABLE.into())
    }

    pub(super) fn query_entities(_: Option<&str>, _: Option<&str>, _: u32) -> Result<Vec<Entity>, String> {
        Err(UNAVAILABLE.into())
    }

    pub(super) fn get_entity(_: &str) -> Result<Option<Entity>, String> {
        Err(UNAVAILABLE.into())
    }

    pub(super) fn relationships(_: &str) -> Result<Vec<Relationship>, String> {
        Err(UNAVAILABLE.into())
    }

    pub(super) fn search_facts(_: &str, _: u32) -> Result<Vec<Fact>, String> {
        Err(UNAVAILABLE.into())
    }

    pub(super) fn remember(_: &str, _: Option<&str>) -> Result<String, String> {
        Err(UNAVAILABLE.into())
    }
}

fn store<T>(result: Result<T, String>) -> Result<T, MemoryError> {
    result.map_err(|reason| MemoryError { reason })
}

/// Full-text search over session transcripts, optionally within one session
/// (`session-2`), best matches first, at most `limit` lines.
pub fn search_sessions(query: &str, session_id: Option<&str>, limit: u32) -> Result<Vec<TranscriptLine>, MemoryError> {
    store(imp::search_sessions(query, session_id, limit))
}

/// Entities whose name contains `name` (case-insensitive) and/or of `kind`
/// (`npc`, `pc`, `location`, `faction`, `item` ...), at most `limit`.
pub fn query_entities(name: Option<&str>, kind: Option<&str>, limit: u32) -> Result<Vec<Entity>, MemoryError> {
    store(imp::query_entities(name, kind, limit))
}

/// One entity by id (`npc-bartok`); `None` when there is none.
pub fn get_entity(id: &str) -> Result<Option<Entity>, MemoryError> {
    store(imp::get_entity(id))
}

/// Every relationship touching entity `id`, in either direction.
pub fn relationships(id: &str) -> Result<Vec<Relationship>, MemoryError> {
    store(imp::relationships(id))
}

/// Full-text search over recorded facts, best first, at most `limit`.
pub fn search_facts(query: &str, limit: u32) -> Result<Vec<Fact>, MemoryError> {
    store(imp::search_facts(query, limit))
}

/// Records a fact in the campaign memory (tied to `session_id` when
/// given) and returns its new id. Needs the `memory_write` grant: without
/// it the component still loads (it imports `toolhost:plugin/memory-write`
/// only when it calls this) and each call fails with the reason. Not
/// idempotent: declare the tool that calls it `IDEMPOTENT = false`.
pub fn remember(text: &str, session_id: Option<&str>) -> Result<String, MemoryError> {
    store(imp::remember(text, session_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolError;

    #[test]
    fn store_errors_become_failed_tool_errors() {
        let err = search_facts("dragon", 5).unwrap_err();
        assert!(err.reason().contains("only inside toolhost"), "{err}");
        let tool: ToolError = err.clone().into();
        assert_eq!(tool, ToolError::Failed(format!("memory store: {}", err.reason())));

        fn lookup() -> Result<Option<Entity>, ToolError> {
            Ok(get_entity("npc-bartok")?)
        }
        assert!(matches!(lookup(), Err(ToolError::Failed(m)) if m.starts_with("memory store: ")));
        assert!(search_sessions("x", None, 1).is_err());
        assert!(query_entities(None, Some("npc"), 1).is_err());
        assert!(relationships("npc-bartok").is_err());
    }
}
