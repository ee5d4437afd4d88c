//! The call pipeline every tool goes through, whatever its provider:
//! resolve the name, check visibility (allow-list and tier) when the caller
//! is an agent, check the arguments match the schema, run the tool under
//! its budget deadline, record the measurement.

use crate::audit::{self, AuditLog};
use crate::budget::{Budget, BudgetConfig, Tier, outcome_of};
use crate::builtin::BUILTINS;
use crate::capabilities::{Capability, GrantError, Grants, GrantsByPlugin, requested};
use crate::memory::MemoryStore;
use crate::package::{Provenance, TrustPolicy};
use crate::registry::{Registry, RegistryError};
use crate::runtime::{LoadError, Runtime, WasmPlugin};
use crate::tool::{CallContext, CallError, Provider as _, ToolOutput};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a plugin could not be added to the host.
#[derive(Debug, thiserror::Error)]
pub enum AddPluginError {
    /// The component did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The registry refused it (a name clash).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Its grants cannot be honoured.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The trust policy refused the package (unsigned, untrusted, tampered, not the locked digest).
    #[error(transparent)]
    Package(#[from] crate::package::PackageError),
    /// A new version asks for capabilities the running one did not, and the
    /// operator has not granted them.
    #[error(
        "plugin {plugin:?}: the new version asks for {} which the running version did not, and plugins.grants.{plugin} does not grant {}; the running version stays. Grant {} first, then add it again",
        list(.new),
        if .new.len() == 1 { "it" } else { "them" },
        if .new.len() == 1 { "it" } else { "them" }
    )]
    NewCapabilities {
        /// Plugin name.
        plugin: String,
        /// What is new.
        new: Vec<Capability>,
    },
}

fn list(c: &[Capability]) -> String {
    c.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

/// What [`Host::install_plugin_file`] did.
#[derive(Debug, Clone)]
pub struct Installed {
    /// Plugin name.
    pub name: String,
    /// Component digest.
    pub digest: String,
    /// The digest of the version it replaced, if any.
    pub replaced: Option<String>,
    /// Its tools.
    pub tools: Vec<String>,
    /// Where it comes from.
    pub provenance: Provenance,
    /// Whether the component was compiled now or came from the cache.
    pub compiled: bool,
}

/// The runtime, the registry and the budget, and the one way to call a tool.
#[derive(Debug)]
pub struct Host {
    runtime: Runtime,
    registry: Registry,
    budget: Budget,
    grants: GrantsByPlugin,
    grants_base: PathBuf,
    audit: AuditLog,
    memory: std::sync::OnceLock<Arc<MemoryStore>>,
    trust: TrustPolicy,
    provenance: std::sync::Mutex<std::collections::HashMap<String, Provenance>>,
    /// Serializes installs, so two versions of one plugin never race.
    installing: std::sync::Mutex<()>,
}

/// The results of a batch of parallel calls.
#[derive(Debug)]
pub struct Batch {
    /// One result per call, in the order given.
    pub results: Vec<Result<ToolOutput, CallError>>,
    /// The batch's latency cost: the slowest call, not the sum.
    pub cost: Duration,
}

impl Host {
    /// A host with no tools, default budget settings and no agents.
    pub fn new(runtime: Runtime) -> Host {
        Host::with_budget(runtime, Budget::new(BudgetConfig::default(), Vec::new()))
    }

    /// A host with a configured budget (agents, ceilings, selector).
    pub fn with_budget(runtime: Runtime, mut budget: Budget) -> Host {
        budget.timeout_floor = runtime.limits().timeout_floor;
        Host {
            runtime,
            registry: Registry::new(),
            budget,
            grants: GrantsByPlugin::new(),
            grants_base: PathBuf::new(),
            audit: AuditLog::disabled(),
            memory: std::sync::OnceLock::new(),
            trust: TrustPolicy::permissive(),
            provenance: Default::default(),
            installing: std::sync::Mutex::new(()),
        }
    }

    /// Which plugin files may load (default: everything, see
    /// [`TrustPolicy::permissive`]; the `toolhost` binary applies the
    /// config's `trust:` section).
    pub fn with_trust(mut self, trust: TrustPolicy) -> Host {
        self.trust = trust;
        self
    }

    /// The trust policy.
    pub fn trust(&self) -> &TrustPolicy {
        &self.trust
    }

    /// Where a loaded plugin came from (`None`: not a plugin of this host).
    pub fn provenance(&self, plugin: &str) -> Option<Provenance> {
        self.provenance.lock().unwrap_or_else(|p| p.into_inner()).get(plugin).cloned()
    }

    /// The campaign memory store behind the `memory` capability. Without
    /// one, the host uses an in-memory store holding the demo campaign.
    pub fn with_memory(self, store: Arc<MemoryStore>) -> Host {
        let _ = self.memory.set(store);
        self
    }

    /// The memory store (the in-memory demo store when none was given).
    pub fn memory(&self) -> Result<&Arc<MemoryStore>, crate::memory::MemoryError> {
        if let Some(m) = self.memory.get() {
            return Ok(m);
        }
        let store = Arc::new(MemoryStore::in_memory()?);
        Ok(self.memory.get_or_init(|| store))
    }

    /// Sends the audit trail to `audit` (by default it goes to the log only).
    pub fn with_audit(mut self, audit: AuditLog) -> Host {
        self.audit = audit;
        self
    }

    /// Sets the operator's grants (from `plugins.grants`), relative paths
    /// resolved against `base`. Applies to plugins loaded afterwards.
    pub fn with_grants(mut self, grants: GrantsByPlugin, base: &Path) -> Host {
        self.grants = grants;
        self.grants_base = base.to_path_buf();
        self
    }

    /// The resolved grants for a plugin name (empty when none configured).
    ///
    /// The built-in `memorytool` is granted `memory` by default (the operator
    /// can take it away with an explicit `plugins.grants.memorytool` entry).
    pub fn grants_for(&self, plugin: &str) -> Result<Grants, GrantError> {
        let (mut grants, memory) = match self.grants.get(plugin) {
            Some(g) => (g.resolve(plugin, &self.grants_base)?, g.memory),
            None => (Grants::default(), plugin == "memorytool"),
        };
        if memory {
            let store =
                self.memory().map_err(|e| GrantError::Memory { plugin: plugin.to_string(), reason: e.to_string() })?;
            grants.memory = Some(store.clone());
        }
        Ok(grants)
    }

    /// The wasm runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The tool registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The latency budget.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Loads and registers every built-in plugin.
    pub fn add_builtins(&self) -> Result<(), AddPluginError> {
        for b in BUILTINS {
            let plugin = self.runtime.load_with(b.name, b.bytes, self.grants_for(b.name)?)?;
            self.registry.add(Arc::new(plugin))?;
            self.provenance.lock().unwrap_or_else(|p| p.into_inner()).insert(b.name.to_string(), Provenance::Builtin);
        }
        Ok(())
    }

    /// Loads a component file (through the trust policy) and registers its
    /// tools. Fails if a provider of that name exists.
    pub fn add_plugin_file(&self, path: &Path) -> Result<Arc<WasmPlugin>, AddPluginError> {
        let name = crate::runtime::plugin_name_from_path(path);
        let bytes = self.read_plugin(path)?;
        let (component, provenance) = self.trust.admit(&name, &bytes)?;
        let plugin = Arc::new(self.runtime.load_with(&name, component, self.grants_for(&name)?)?);
        self.registry.add(plugin.clone())?;
        self.provenance.lock().unwrap_or_else(|p| p.into_inner()).insert(name, provenance);
        Ok(plugin)
    }

    /// Reads a plugin file: the component limit, plus room for a package
    /// section (manifest and signature).
    fn read_plugin(&self, path: &Path) -> Result<Vec<u8>, AddPluginError> {
        let limit = self.runtime.limits().max_component_bytes + (1 << 16);
        crate::runtime::read_bounded(path, limit)
            .map_err(|kind| LoadError { plugin: crate::runtime::plugin_name_from_path(path), kind }.into())
    }

    /// Adds or replaces a plugin from a file while the host serves: the hot
    /// path of `toolhost plugin add` and the plugins-directory watcher.
    ///
    /// The file passes the trust policy, compiles (through the on-disk
    /// cache) and instantiates before anything changes; a new version that
    /// asks for capabilities the running one did not must have them granted
    /// first. Then one atomic registry swap: calls already running finish on
    /// the version they started with, new calls get the new one. On any
    /// error the running version keeps serving. Blocking: call it off the
    /// request path.
    pub fn install_plugin_file(&self, path: &Path) -> Result<Installed, AddPluginError> {
        let _one_at_a_time = self.installing.lock().unwrap_or_else(|p| p.into_inner());
        let name = crate::runtime::plugin_name_from_path(path);
        let bytes = self.read_plugin(path)?;
        let (component, provenance) = self.trust.admit(&name, &bytes)?;
        let compiled = self.runtime.compile(&name, component)?;
        let was_compiled = matches!(compiled.source, crate::runtime::CompileSource::Compiled);
        let catalog = self.registry.snapshot();
        let old = catalog.provider(&name).cloned();
        let grants = self.grants_for(&name)?;
        if let Some(old_wasm) = old.as_ref().and_then(|p| p.as_wasm()) {
            let before = requested(old_wasm.imports());
            let new: Vec<Capability> = requested(&compiled.imports)
                .into_iter()
                .filter(|c| !before.contains(c) && !grants.grants(*c))
                .collect();
            if !new.is_empty() {
                return Err(AddPluginError::NewCapabilities { plugin: name, new });
            }
        }
        let plugin = Arc::new(self.runtime.instantiate_compiled(compiled, grants)?);
        let replaced = self.registry.upsert(plugin.clone())?;
        if let Some(old) = &replaced {
            // Measurements of the old version say nothing about the new one.
            for t in old.tools() {
                self.budget.forget(&t.name);
            }
        }
        self.provenance.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), provenance.clone());
        tracing::info!(plugin = %name, digest = %plugin.digest(), replaced = replaced.is_some(), "plugin installed");
        Ok(Installed {
            name,
            digest: plugin.digest().to_string(),
            replaced: replaced.map(|p| p.fingerprint()),
            tools: plugin.tools().iter().map(|t| t.name.clone()).collect(),
            provenance,
            compiled: was_compiled,
        })
    }

    /// Removes a plugin while the host serves. Calls already running finish.
    pub fn uninstall_plugin(&self, name: &str) -> Result<(), AddPluginError> {
        let _one_at_a_time = self.installing.lock().unwrap_or_else(|p| p.into_inner());
        match self.registry.snapshot().provider(name) {
            Some(p) if p.as_wasm().is_none() => {
                return Err(AddPluginError::Registry(RegistryError::UnknownProvider(format!(
                    "{name} (an external MCP server: use `toolhost server remove`)"
                ))));
            }
            _ => {}
        }
        self.registry.remove(name)?;
        self.provenance.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        tracing::info!(plugin = %name, "plugin removed");
        Ok(())
    }

    /// Calls `tool` as the operator: no allow-list, no tier filter, but the
    /// same validation, deadline and measurement as every call.
    pub fn call(&self, tool: &str, arguments: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        self.run(None, tool, arguments, ctx)
    }

    /// Calls `tool` on behalf of `agent` at `tier`. A tool the agent cannot
    /// see (not on its allow-list, or over the tier's budget) is refused
    /// exactly like a tool that does not exist, so the refusal reveals
    /// nothing.
    pub fn call_as(
        &self,
        agent: Option<&str>,
        tier: Tier,
        tool: &str,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        self.run(Some((agent, tier)), tool, arguments, ctx)
    }

    /// Runs several calls in parallel, each bounded by its own deadline. The
    /// batch costs the slowest call, not the sum.
    pub fn call_batch(
        &self,
        agent: Option<&str>,
        tier: Tier,
        calls: &[(String, serde_json::Value)],
        ctx: &CallContext,
    ) -> Batch {
        let start = Instant::now();
        let results = std::thread::scope(|s| {
            let handles: Vec<_> =
                calls.iter().map(|(tool, args)| s.spawn(move || self.call_as(agent, tier, tool, args, ctx))).collect();
            handles.into_iter().map(|h| h.join().expect("batch call thread")).collect()
        });
        Batch { results, cost: start.elapsed() }
    }

    fn run(
        &self,
        enforce: Option<(Option<&str>, Tier)>,
        tool: &str,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        let start = Instant::now();
        let catalog = self.registry.snapshot();
        let entry = catalog.get(tool);
        let agent = enforce.and_then(|(a, _)| a).or(ctx.agent.as_deref());
        let mut refused = false;
        let result = match entry {
            None => Err(CallError::UnknownTool(tool.to_string())),
            Some(entry) => {
                if let Some((agent, tier)) = enforce
                    && !self.budget.visible(agent, tier, entry).unwrap_or(false)
                {
                    tracing::warn!(agent = agent.unwrap_or("-"), tool, tier = %tier, "refused: tool not visible to this caller");
                    refused = true;
                    Err(CallError::UnknownTool(tool.to_string()))
                } else {
                    self.run_visible(entry, agent, arguments, ctx)
                }
            }
        };
        self.audit_call(agent, tool, entry.map(|e| &**e), arguments, &result, refused, start.elapsed());
        result
    }

    fn run_visible(
        &self,
        entry: &crate::registry::RegisteredTool,
        agent: Option<&str>,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        let tool = entry.def.name.as_str();
        if !arguments.is_object() {
            return Err(CallError::InvalidInput {
                tool: tool.to_string(),
                message: format!("arguments must be a JSON object, not {}", json_kind(arguments)),
            });
        }
        entry
            .validator
            .check(arguments)
            .map_err(|message| CallError::InvalidInput { tool: tool.to_string(), message })?;
        let deadline = self.budget.timeout_for(&entry.def);
        let ctx = CallContext {
            deadline: Some(ctx.deadline.map_or(deadline, |d| d.min(deadline))),
            agent: agent.map(str::to_string),
            ..ctx.clone()
        };
        let start = Instant::now();
        let result = entry.provider.call(tool, arguments, &ctx);
        self.budget.record(&entry.def, start.elapsed(), outcome_of(&result));
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn audit_call(
        &self,
        agent: Option<&str>,
        tool: &str,
        entry: Option<&crate::registry::RegisteredTool>,
        arguments: &serde_json::Value,
        result: &Result<ToolOutput, CallError>,
        refused: bool,
        duration: Duration,
    ) {
        let wasm = entry.and_then(|e| e.provider.as_wasm());
        let stats = result.as_ref().map(|o| o.stats).unwrap_or_default();
        let mut capabilities = Vec::new();
        if let Some(w) = wasm {
            if !w.grants().dirs.is_empty() {
                capabilities.push("files");
            }
            if !w.grants().env.is_empty() {
                capabilities.push("env");
            }
            if w.grants().memory.is_some() {
                capabilities.push("memory");
            }
            if !w.grants().network.is_empty() {
                capabilities.push("network");
            }
        }
        self.audit.write(&audit::Record {
            time_ms: audit::now_ms(),
            agent,
            tool,
            provider: entry.map(|e| e.provider.name()),
            provider_digest: entry.map(|e| e.provider.fingerprint()).filter(|f| !f.is_empty()),
            arguments_sha256: audit::hash_arguments(arguments),
            arguments: self.audit.include_arguments().then_some(arguments),
            outcome: match (result, refused) {
                (_, true) => "refused",
                (Ok(_), _) => "ok",
                (Err(e), _) => e.kind(),
            },
            error: result.as_ref().err().map(|e| e.to_string()),
            duration_ms: audit::ms(duration),
            fuel_used: stats.fuel_used,
            peak_memory_bytes: stats.peak_memory_bytes,
            capabilities_held: capabilities,
            capabilities_used: crate::runtime::exercised::names(stats.capabilities_used),
        });
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
