//! `memory`: the campaign memory store (session transcripts, facts, the
//! knowledge graph), read only, through the `toolhost:plugin/memory` WIT
//! interface. The store itself is whatever implements [`MemoryBackend`]
//! (the host's SQLite store), so the runtime depends on no database. A
//! component importing the interface is refused at load unless granted.

use super::{About, CapabilityFactor, Grants, InstanceSetup};
use crate::bindings::toolhost::plugin::memory::Host;
pub use crate::bindings::toolhost::plugin::memory::{Entity, Fact, Relationship, TranscriptLine};
use crate::state::State;
use toolhost_types::Capability;
use wasmtime::component::{HasSelf, Linker};

/// A campaign memory store, as plugins see it. Errors are messages for the
/// plugin (and so for the model).
pub trait MemoryBackend: Send + Sync + std::fmt::Debug {
    /// Full-text search over transcripts, optionally within one session.
    fn search_sessions(&self, query: &str, session_id: Option<&str>, limit: u32)
    -> Result<Vec<TranscriptLine>, String>;
    /// Entities whose name contains `name` and/or of `kind`.
    fn query_entities(&self, name: Option<&str>, kind: Option<&str>, limit: u32) -> Result<Vec<Entity>, String>;
    /// One entity by id.
    fn get_entity(&self, id: &str) -> Result<Option<Entity>, String>;
    /// Every relationship touching an entity, either direction.
    fn relationships(&self, id: &str) -> Result<Vec<Relationship>, String>;
    /// Full-text search over facts.
    fn search_facts(&self, query: &str, limit: u32) -> Result<Vec<Fact>, String>;
    /// Records a fact, durably before it returns, and returns its new id.
    fn remember(&self, text: &str, session_id: Option<&str>) -> Result<String, String>;
    /// Whether the store answered its last health check (for `/readyz`).
    /// Never blocks: a store over the network checks in the background.
    fn reachable(&self) -> bool {
        true
    }
}

/// The `memory_write` capability: `remember`, through the
/// `toolhost:plugin/memory-write` interface. Inert without the grant: a
/// plugin importing it loads, and every write is refused.
pub struct MemoryWrite;

static ABOUT_WRITE: About = About {
    capability: Capability::MemoryWrite,
    interfaces: &["toolhost:plugin/memory-write"],
    inert_without_grant: true,
    by_extension: false,
};

impl CapabilityFactor for MemoryWrite {
    fn about(&self) -> &'static About {
        &ABOUT_WRITE
    }

    fn held(&self, grants: &Grants) -> bool {
        grants.memory_write.is_some()
    }

    fn configure(&self, grants: &Grants, setup: &mut InstanceSetup) -> Result<(), String> {
        setup.memory_write = grants.memory_write.clone();
        Ok(())
    }

    fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()> {
        crate::bindings::toolhost::plugin::memory_write::add_to_linker::<State, HasSelf<State>>(linker, |s| s)
    }

    fn report(&self, grants: &Grants) -> serde_json::Value {
        serde_json::Value::Bool(grants.memory_write.is_some())
    }

    fn allows(&self, grants: &Grants) -> Vec<String> {
        match grants.memory_write {
            Some(_) => vec!["may record facts in the campaign memory (remember): writes, not idempotent".into()],
            None => Vec::new(),
        }
    }
}

impl crate::bindings::toolhost::plugin::memory_write::Host for State {
    fn remember(&mut self, text: String, session_id: Option<String>) -> Result<String, String> {
        let Some(store) = self.memory_write.as_deref() else {
            return Err("writing to the campaign memory was not granted (plugins.grants.<plugin>.memory_write)".into());
        };
        self.used.mark(Capability::MemoryWrite);
        store.remember(&text, session_id.as_deref())
    }
}

/// The `memory` capability.
pub struct Memory;

static ABOUT: About = About {
    capability: Capability::Memory,
    interfaces: &["toolhost:plugin/memory"],
    inert_without_grant: false,
    by_extension: false,
};

impl CapabilityFactor for Memory {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    fn held(&self, grants: &Grants) -> bool {
        grants.memory.is_some()
    }

    fn configure(&self, grants: &Grants, setup: &mut InstanceSetup) -> Result<(), String> {
        setup.memory = grants.memory.clone();
        Ok(())
    }

    fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()> {
        // Linked for every plugin, but only reachable by plugins granted
        // `memory`: the others are refused at load if they import it.
        crate::bindings::toolhost::plugin::memory::add_to_linker::<State, HasSelf<State>>(linker, |s| s)
    }

    fn report(&self, grants: &Grants) -> serde_json::Value {
        serde_json::Value::Bool(grants.memory.is_some())
    }

    fn allows(&self, grants: &Grants) -> Vec<String> {
        match grants.memory {
            Some(_) => {
                vec!["may search the campaign memory (session transcripts, facts, knowledge graph), read only".into()]
            }
            None => Vec::new(),
        }
    }
}

impl State {
    fn memory_store(&mut self) -> Result<&dyn MemoryBackend, String> {
        self.used.mark(Capability::Memory);
        // Unreachable in practice: a plugin importing memory without the
        // grant is refused at load.
        self.memory.as_deref().ok_or_else(|| "the memory capability was not granted".to_string())
    }
}

impl Host for State {
    fn search_sessions(
        &mut self,
        query: String,
        session_id: Option<String>,
        limit: u32,
    ) -> Result<Vec<TranscriptLine>, String> {
        self.memory_store()?.search_sessions(&query, session_id.as_deref(), limit)
    }

    fn query_entities(
        &mut self,
        name: Option<String>,
        kind: Option<String>,
        limit: u32,
    ) -> Result<Vec<Entity>, String> {
        self.memory_store()?.query_entities(name.as_deref(), kind.as_deref(), limit)
    }

    fn get_entity(&mut self, id: String) -> Result<Option<Entity>, String> {
        self.memory_store()?.get_entity(&id)
    }

    fn relationships(&mut self, id: String) -> Result<Vec<Relationship>, String> {
        self.memory_store()?.relationships(&id)
    }

    fn search_facts(&mut self, query: String, limit: u32) -> Result<Vec<Fact>, String> {
        self.memory_store()?.search_facts(&query, limit)
    }
}
