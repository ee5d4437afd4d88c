//! One catalogue of every tool, wasm or MCP, replaceable atomically.
//!
//! Readers take a snapshot ([`Registry::snapshot`], an `Arc<Catalog>`) and
//! keep using it for the whole call: a call in flight finishes on the provider
//! it started with even if that provider is replaced or removed meanwhile.
//! Writers build a new catalogue off to the side and swap it in with one
//! atomic store; writers are serialised, readers never wait.

use crate::tool::{Provider, ToolDef};
use crate::validate::Validator;
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A tool as the registry holds it: definition, compiled schema, provider.
#[derive(Debug)]
pub struct RegisteredTool {
    /// The definition.
    pub def: ToolDef,
    /// The compiled input schema.
    pub validator: Validator,
    /// Who runs it.
    pub provider: Arc<dyn Provider>,
    /// sha256 of the tool's definition as clients see it (name,
    /// description, schemas, annotations), hex: which version of the tool
    /// a call's audit record saw.
    pub schema_sha256: String,
}

/// An immutable view of the registry at one moment.
#[derive(Debug, Default)]
pub struct Catalog {
    tools: BTreeMap<String, Arc<RegisteredTool>>,
    providers: BTreeMap<String, Arc<dyn Provider>>,
    generation: u64,
}

impl Catalog {
    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.tools.get(name)
    }

    /// Every tool, sorted by name.
    pub fn tools(&self) -> impl ExactSizeIterator<Item = &Arc<RegisteredTool>> {
        self.tools.values()
    }

    /// Every provider, sorted by name.
    pub fn providers(&self) -> impl ExactSizeIterator<Item = &Arc<dyn Provider>> {
        self.providers.values()
    }

    /// The provider called `name`.
    pub fn provider(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.providers.get(name)
    }

    /// Increases by one with every change; lets clients detect list changes.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// Why a registry change was refused. The registry is unchanged after any error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two providers offer the same tool name.
    #[error("tool {tool:?} from {incoming:?} clashes with the tool of the same name from {existing:?}")]
    DuplicateTool {
        /// The clashing name.
        tool: String,
        /// The provider already registered.
        existing: String,
        /// The provider being added.
        incoming: String,
    },
    /// A provider of that name is already registered (use replace).
    #[error("a provider named {0:?} is already registered")]
    DuplicateProvider(String),
    /// No provider of that name.
    #[error("no provider named {0:?}")]
    UnknownProvider(String),
    /// A tool's input schema does not compile.
    #[error("tool {tool:?} from {provider:?} has an invalid input schema: {reason}")]
    BadSchema {
        /// The tool.
        tool: String,
        /// Its provider.
        provider: String,
        /// The schema compiler's message.
        reason: String,
    },
}

/// The live catalogue.
pub struct Registry {
    current: ArcSwap<Catalog>,
    writer: Mutex<()>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry { current: ArcSwap::default(), writer: Mutex::new(()), changes: tokio::sync::watch::Sender::new(0) }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("catalog", &*self.current.load()).finish()
    }
}

fn entries(provider: &Arc<dyn Provider>) -> Result<Vec<Arc<RegisteredTool>>, RegistryError> {
    provider
        .tools()
        .iter()
        .map(|def| {
            let validator = Validator::new(&def.input_schema).map_err(|e| RegistryError::BadSchema {
                tool: def.name.clone(),
                provider: provider.name().to_string(),
                reason: e.0,
            })?;
            Ok(Arc::new(RegisteredTool {
                schema_sha256: schema_digest(def),
                def: def.clone(),
                validator,
                provider: provider.clone(),
            }))
        })
        .collect()
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A receiver that wakes whenever the catalogue changes, or a provider
    /// says its tools became available or unavailable ([`Registry::touch`]).
    /// MCP sessions use it to send `notifications/tools/list_changed`.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Wakes every subscriber without changing the catalogue (a provider's
    /// availability changed).
    pub fn touch(&self) {
        self.changes.send_modify(|v| *v += 1);
    }

    /// The catalogue as it is now. Cheap; hold it for the duration of a call.
    pub fn snapshot(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// The wasm plugins in the catalogue now.
    pub fn wasm_plugins(&self) -> Vec<Arc<crate::runtime::WasmPlugin>> {
        self.snapshot()
            .providers()
            .filter_map(|p| {
                let any: Arc<dyn std::any::Any + Send + Sync> = p.clone();
                any.downcast::<crate::runtime::WasmPlugin>().ok()
            })
            .collect()
    }

    /// Adds a provider. Fails, changing nothing, if its name or any of its
    /// tool names is taken.
    pub fn add(&self, provider: Arc<dyn Provider>) -> Result<(), RegistryError> {
        let new = entries(&provider)?;
        let _w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let cur = self.current.load();
        if cur.providers.contains_key(provider.name()) {
            return Err(RegistryError::DuplicateProvider(provider.name().to_string()));
        }
        self.swap_in(&cur, None, provider, new)
    }

    /// Adds a provider, or replaces the provider of the same name in one
    /// atomic step. Returns the provider it replaced. Fails, changing nothing,
    /// if a tool name clashes with another provider's.
    pub fn upsert(&self, provider: Arc<dyn Provider>) -> Result<Option<Arc<dyn Provider>>, RegistryError> {
        let new = entries(&provider)?;
        let _w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let cur = self.current.load();
        let old = cur.providers.get(provider.name()).cloned();
        self.swap_in(&cur, Some(provider.name().to_string()), provider, new)?;
        Ok(old)
    }

    /// Removes a provider and its tools. Calls already running finish.
    pub fn remove(&self, name: &str) -> Result<Arc<dyn Provider>, RegistryError> {
        let _w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let cur = self.current.load();
        let old = cur.providers.get(name).cloned().ok_or_else(|| RegistryError::UnknownProvider(name.to_string()))?;
        let mut next =
            Catalog { tools: cur.tools.clone(), providers: cur.providers.clone(), generation: cur.generation + 1 };
        next.providers.remove(name);
        next.tools.retain(|_, t| t.provider.name() != name);
        self.current.store(Arc::new(next));
        self.touch();
        Ok(old)
    }

    fn swap_in(
        &self,
        cur: &Catalog,
        replacing: Option<String>,
        provider: Arc<dyn Provider>,
        new: Vec<Arc<RegisteredTool>>,
    ) -> Result<(), RegistryError> {
        let mut tools = cur.tools.clone();
        if let Some(name) = &replacing {
            tools.retain(|_, t| t.provider.name() != name);
        }
        for t in new {
            if let Some(existing) = tools.get(&t.def.name) {
                return Err(RegistryError::DuplicateTool {
                    tool: t.def.name.clone(),
                    existing: existing.provider.name().to_string(),
                    incoming: provider.name().to_string(),
                });
            }
            tools.insert(t.def.name.clone(), t);
        }
        let mut providers = cur.providers.clone();
        providers.insert(provider.name().to_string(), provider);
        self.current.store(Arc::new(Catalog { tools, providers, generation: cur.generation + 1 }));
        self.touch();
        Ok(())
    }
}

/// sha256 of what a client reads of `def`, as canonical JSON.
fn schema_digest(def: &ToolDef) -> String {
    use sha2::Digest;
    let shown = serde_json::json!({
        "name": def.name,
        "description": def.description,
        "inputSchema": def.input_schema,
        "outputSchema": def.output_schema,
        "annotations": def.annotations.as_ref().map(|a| serde_json::json!({
            "title": a.title,
            "readOnlyHint": a.read_only_hint,
            "destructiveHint": a.destructive_hint,
            "idempotentHint": a.idempotent_hint,
            "openWorldHint": a.open_world_hint,
        })),
    });
    hex::encode(sha2::Sha256::digest(crate::pipeline::canonical_json(&shown).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{CallContext, CallError, CallStats, Content, ToolMeta, ToolOutput};

    #[derive(Debug)]
    struct Fake {
        name: String,
        tools: Vec<ToolDef>,
        reply: &'static str,
    }

    impl Provider for Fake {
        fn name(&self) -> &str {
            &self.name
        }
        fn kind(&self) -> crate::tool::ProviderKind {
            crate::tool::ProviderKind::Other
        }
        fn tools(&self) -> &[ToolDef] {
            &self.tools
        }
        fn call(&self, _: &str, _: &serde_json::Value, _: &CallContext) -> Result<ToolOutput, CallError> {
            Ok(ToolOutput {
                content: vec![Content::Text(self.reply.into())],
                structured: None,
                stats: CallStats::default(),
            })
        }
    }

    fn fake(name: &str, tools: &[&str], reply: &'static str) -> Arc<dyn Provider> {
        Arc::new(Fake {
            name: name.into(),
            reply,
            tools: tools
                .iter()
                .map(|t| ToolDef {
                    name: t.to_string(),
                    description: String::new(),
                    input_schema: serde_json::json!({"type": "object"}),
                    meta: ToolMeta {
                        estimated_duration_ms: None,
                        max_duration_ms: None,
                        idempotent: true,
                        cacheable_seconds: 0,
                        ..ToolMeta::default()
                    },
                    probe_arguments: None,
                    ..ToolDef::default()
                })
                .collect(),
        })
    }

    fn reply(cat: &Catalog, tool: &str) -> String {
        let t = cat.get(tool).unwrap();
        match &t.provider.call(tool, &serde_json::json!({}), &CallContext::default()).unwrap().content[0] {
            Content::Text(s) => s.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn duplicate_tool_names_are_refused_and_change_nothing() {
        let r = Registry::new();
        r.add(fake("a", &["roll", "x"], "a")).unwrap();
        let before = r.snapshot().generation();
        let e = r.add(fake("b", &["y", "roll"], "b")).unwrap_err();
        assert_eq!(e, RegistryError::DuplicateTool { tool: "roll".into(), existing: "a".into(), incoming: "b".into() });
        let cat = r.snapshot();
        assert_eq!(cat.generation(), before);
        assert!(cat.get("y").is_none());
        assert_eq!(reply(&cat, "roll"), "a");
    }

    #[test]
    fn duplicate_provider_names_are_refused() {
        let r = Registry::new();
        r.add(fake("a", &["x"], "a")).unwrap();
        assert_eq!(r.add(fake("a", &["z"], "a")).unwrap_err(), RegistryError::DuplicateProvider("a".into()));
    }

    #[test]
    fn upsert_replaces_atomically_and_old_snapshots_keep_working() {
        let r = Registry::new();
        r.add(fake("dice", &["roll", "old_only"], "v1")).unwrap();
        let old = r.snapshot();
        let replaced = r.upsert(fake("dice", &["roll", "new_only"], "v2")).unwrap();
        assert_eq!(replaced.unwrap().name(), "dice");
        let new = r.snapshot();
        assert_eq!(reply(&old, "roll"), "v1");
        assert_eq!(reply(&new, "roll"), "v2");
        assert!(new.get("old_only").is_none());
        assert!(new.get("new_only").is_some());
        assert_eq!(new.generation(), old.generation() + 1);
    }

    #[test]
    fn upsert_that_clashes_leaves_the_old_version() {
        let r = Registry::new();
        r.add(fake("a", &["x"], "a")).unwrap();
        r.add(fake("b", &["y"], "b1")).unwrap();
        assert!(r.upsert(fake("b", &["y", "x"], "b2")).is_err());
        assert_eq!(reply(&r.snapshot(), "y"), "b1");
    }

    #[test]
    fn remove_drops_the_tools() {
        let r = Registry::new();
        r.add(fake("a", &["x"], "a")).unwrap();
        r.add(fake("b", &["y"], "b")).unwrap();
        r.remove("a").unwrap();
        let cat = r.snapshot();
        assert!(cat.get("x").is_none());
        assert!(cat.get("y").is_some());
        assert_eq!(r.remove("a").unwrap_err(), RegistryError::UnknownProvider("a".into()));
    }

    #[test]
    fn bad_schemas_are_refused() {
        #[derive(Debug)]
        struct Bad(Vec<ToolDef>);
        impl Provider for Bad {
            fn name(&self) -> &str {
                "bad"
            }
            fn kind(&self) -> crate::tool::ProviderKind {
                crate::tool::ProviderKind::Other
            }
            fn tools(&self) -> &[ToolDef] {
                &self.0
            }
            fn call(&self, _: &str, _: &serde_json::Value, _: &CallContext) -> Result<ToolOutput, CallError> {
                unreachable!()
            }
        }
        let mut def = match fake("x", &["t"], "").tools() {
            [d] => d.clone(),
            _ => unreachable!(),
        };
        def.input_schema = serde_json::json!({"type": 12});
        let e = Registry::new().add(Arc::new(Bad(vec![def]))).unwrap_err();
        assert!(matches!(e, RegistryError::BadSchema { .. }), "{e}");
    }
}
