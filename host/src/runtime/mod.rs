//! The wasm runtime: one engine, compile-once plugins, a fresh store and
//! instance per call, and hard limits on every call.
//!
//! A [`Runtime`] owns the wasmtime [`Engine`] (Cranelift, fuel, epoch
//! interruption, pooling allocator), the linker, the on-disk compile cache and
//! the epoch ticker. [`Runtime::load`] turns component bytes into a
//! [`WasmPlugin`]: validated, compiled (or loaded from the cache), checked
//! against the `tool` world, pre-instantiated, with its tool list read once.
//! [`WasmPlugin`] implements [`Provider`]: each call builds a new store with
//! the limits, instantiates, calls, and classifies any trap into a typed
//! [`CallError`].

mod bindings;
pub mod cache;
mod clock;
pub mod exercised;
pub mod limits;
mod ticker;

use crate::capabilities::{DirMode, Grants};
use crate::tool::{CallContext, CallError, CallStats, Content, PluginEvent, Provider, ToolDef, ToolMeta, ToolOutput};
pub use bindings::{CONTRACT_VERSION, TOOL_INTERFACE};
use bindings::{LogLevel, PluginPre};
pub use cache::CompileCache;
use limits::Limiter;
pub use limits::Limits;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ticker::Ticker;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("cannot load plugin {plugin:?}: {kind}")]
pub struct LoadError {
    /// The plugin (file or built-in name) that failed.
    pub plugin: String,
    /// What was wrong.
    pub kind: LoadErrorKind,
}

/// What was wrong with a component.
#[derive(Debug, thiserror::Error)]
pub enum LoadErrorKind {
    /// The file could not be read.
    #[error("cannot read file: {0}")]
    Io(#[from] std::io::Error),
    /// The file is larger than the operator allows.
    #[error("file is {size} bytes, over the {limit} byte limit for components")]
    TooLarge {
        /// File size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not WebAssembly at all.
    #[error("not a WebAssembly file (no \\0asm header)")]
    NotWasm,
    /// A core module, not a component.
    #[error(
        "this is a core WebAssembly module, not a component; build for wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule,
    /// wasmtime rejected the bytes (truncated, malformed, unsupported feature).
    #[error("invalid component: {0}")]
    Invalid(String),
    /// The component does not export the `tool` interface.
    #[error(
        "component does not implement the toolhost tool world: it must export {TOOL_INTERFACE}@{CONTRACT_VERSION}; it exports [{}]",
        exports.join(", ")
    )]
    WrongWorld {
        /// What it exports instead.
        exports: Vec<String>,
    },
    /// The component exports the `tool` interface at a version this host does not speak.
    #[error("component targets {found}; this host speaks {TOOL_INTERFACE}@0.1.x")]
    IncompatibleVersion {
        /// The export name found.
        found: String,
    },
    /// The component imports an interface the operator did not grant.
    #[error("component imports {interface}, which needs the {grant:?} capability; it was not granted")]
    NotGranted {
        /// The import.
        interface: String,
        /// The grant that would allow it.
        grant: &'static str,
    },
    /// The component imports something this host does not provide at all.
    #[error("component imports {0}, which this host does not provide")]
    UnknownImport(String),
    /// Linking or pre-instantiation failed.
    #[error("cannot link component: {0}")]
    Link(String),
    /// `list-tools` failed.
    #[error("list-tools failed: {0}")]
    ListTools(CallError),
    /// A tool declaration is unusable.
    #[error("tool {tool:?} is declared wrongly: {reason}")]
    BadTool {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
}

/// Interfaces every plugin may import: what a Rust guest's std pulls in, and
/// the host's own services. None of them exposes anything by itself: the
/// store's WASI context has no environment, arguments, preopens or network.
const ALWAYS_LINKED: &[&str] = &[
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:io/",
    "wasi:random/",
    "wasi:filesystem/",
    "toolhost:plugin/host@0.1",
    "toolhost:plugin/types@0.1",
];

/// Interfaces that reach outside the sandbox, with the grant each needs.
const NEEDS_GRANT: &[(&str, &str)] =
    &[("wasi:sockets/", "network"), ("wasi:http/", "http"), ("toolhost:plugin/memory@0.1", "memory")];

/// Per-store state: the WASI context (empty by default), the limiter and the
/// guest's bounded output.
pub(crate) struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    plugin: Arc<str>,
    tool: Arc<str>,
    logs_left: usize,
    events: Option<Arc<dyn Fn(PluginEvent) + Send + Sync>>,
    /// When the call must end; bounds guest timers (see `clock.rs`).
    deadline: Instant,
    /// The memory store, when granted.
    memory: Option<Arc<crate::memory::MemoryStore>>,
    /// Capabilities this call used (`exercised` bits).
    used: u8,
    files_granted: bool,
    env_granted: bool,
    /// Set by the socket address check when a granted connection is made.
    network_used: Arc<std::sync::atomic::AtomicBool>,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl bindings::toolhost::plugin::host::Host for State {
    fn log(&mut self, level: LogLevel, message: String) {
        if self.logs_left == 0 {
            return;
        }
        self.logs_left -= 1;
        let message: String = message.chars().take(4096).collect();
        let (plugin, tool) = (&*self.plugin, &*self.tool);
        let level = match level {
            LogLevel::Trace => {
                tracing::trace!(plugin, tool, "{message}");
                "trace"
            }
            LogLevel::Debug => {
                tracing::debug!(plugin, tool, "{message}");
                "debug"
            }
            LogLevel::Info => {
                tracing::info!(plugin, tool, "{message}");
                "info"
            }
            LogLevel::Warn => {
                tracing::warn!(plugin, tool, "{message}");
                "warn"
            }
            LogLevel::Error => {
                tracing::error!(plugin, tool, "{message}");
                "error"
            }
        };
        if let Some(sink) = &self.events {
            sink(PluginEvent::Log { level, message });
        }
    }

    fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<String>) {
        if let Some(sink) = &self.events {
            sink(PluginEvent::Progress { progress, total, message: message.map(|m| m.chars().take(1024).collect()) });
        }
    }
}

impl bindings::toolhost::plugin::types::Host for State {}

mod memory_host {
    use super::State;
    use super::bindings::toolhost::plugin::memory::{Entity, Fact, Host, Relationship, TranscriptLine};
    use crate::memory::MemoryStore;

    fn store(s: &mut State) -> Result<&MemoryStore, String> {
        s.used |= super::exercised::MEMORY;
        // Unreachable in practice: a plugin importing memory without the
        // grant is refused at load.
        s.memory.as_deref().ok_or_else(|| "the memory capability was not granted".to_string())
    }

    fn entity(e: crate::memory::Entity) -> Entity {
        Entity { id: e.id, name: e.name, kind: e.kind, attributes: serde_json::Value::Object(e.attributes).to_string() }
    }

    impl Host for State {
        fn search_sessions(
            &mut self,
            query: String,
            session_id: Option<String>,
            limit: u32,
        ) -> Result<Vec<TranscriptLine>, String> {
            let hits = store(self)?.search_sessions(&query, session_id.as_deref(), limit).map_err(|e| e.to_string())?;
            Ok(hits
                .into_iter()
                .map(|h| TranscriptLine {
                    session_id: h.session_id,
                    line: h.line,
                    speaker: h.speaker,
                    text: h.text,
                    score: h.score,
                })
                .collect())
        }

        fn query_entities(
            &mut self,
            name: Option<String>,
            kind: Option<String>,
            limit: u32,
        ) -> Result<Vec<Entity>, String> {
            let found =
                store(self)?.query_entities(name.as_deref(), kind.as_deref(), limit).map_err(|e| e.to_string())?;
            Ok(found.into_iter().map(entity).collect())
        }

        fn get_entity(&mut self, id: String) -> Result<Option<Entity>, String> {
            Ok(store(self)?.get_entity(&id).map_err(|e| e.to_string())?.map(entity))
        }

        fn relationships(&mut self, id: String) -> Result<Vec<Relationship>, String> {
            let rels = store(self)?.relationships(&id).map_err(|e| e.to_string())?;
            Ok(rels.into_iter().map(|r| Relationship { source: r.source, target: r.target, kind: r.kind }).collect())
        }

        fn search_facts(&mut self, query: String, limit: u32) -> Result<Vec<Fact>, String> {
            let hits = store(self)?.search_facts(&query, limit).map_err(|e| e.to_string())?;
            Ok(hits
                .into_iter()
                .map(|f| Fact { id: f.id, text: f.text, session_id: f.session_id, score: f.score })
                .collect())
        }
    }
}

struct Inner {
    engine: Engine,
    linker: Linker<State>,
    limits: Limits,
    cache: Option<CompileCache>,
    ticker: Ticker,
}

/// The engine, linker, limits and compile cache shared by every plugin.
/// Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("limits", &self.inner.limits).finish_non_exhaustive()
    }
}

/// Where a load's compiled code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled with Cranelift now (and stored in the cache, if any).
    Compiled,
    /// Loaded from the on-disk cache.
    Cache,
}

impl Runtime {
    /// Builds a runtime with `limits`, caching compiled code under `cache_root`
    /// (no disk cache when `None`).
    pub fn new(limits: Limits, cache_root: Option<&std::path::Path>) -> Result<Runtime, wasmtime::Error> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.consume_fuel(limits.fuel.is_some());
        config.epoch_interruption(true);
        config.max_wasm_stack(limits.max_wasm_stack);
        config.cranelift_opt_level(wasmtime::OptLevel::Speed);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(limits.max_instances)
            .total_core_instances(limits.max_instances * 8)
            .total_memories(limits.max_instances * 2)
            .total_tables(limits.max_instances * 8)
            .max_memories_per_component(8)
            .max_tables_per_component(16)
            .max_core_instances_per_component(64)
            .table_elements(limits.table_elements)
            .max_memory_size(limits.memory_bytes)
            // Reset a reused slot by rewriting only the pages the last
            // instance dirtied (Linux PAGEMAP_SCAN, kernel >= 6.7; plain
            // memset elsewhere) instead of unmapping them: a fresh instance
            // per call then costs about half as much (see BENCHMARKS.md).
            .linear_memory_keep_resident(1 << 20)
            .table_keep_resident(64 << 10)
            .pagemap_scan(wasmtime::Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        // Replace wasmtime-wasi's monotonic clock with one whose timers never
        // outlive the call's deadline.
        linker.allow_shadowing(true);
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<State, clock::HasBoundedClock>(
            &mut linker,
            |s| clock::BoundedClock { table: &mut s.table, deadline: s.deadline },
        )?;
        // Note when a call uses its file or environment grants.
        wasmtime_wasi::p2::bindings::filesystem::preopens::add_to_linker::<State, exercised::HasFs>(
            &mut linker,
            exercised::fs,
        )?;
        wasmtime_wasi::p2::bindings::cli::environment::add_to_linker::<State, exercised::HasEnv>(
            &mut linker,
            exercised::env,
        )?;
        linker.allow_shadowing(false);
        bindings::toolhost::plugin::host::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
            &mut linker,
            |s| s,
        )?;
        // Linked for every plugin, but only reachable by plugins granted
        // `memory`: the others are refused at load if they import it.
        bindings::toolhost::plugin::memory::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
            &mut linker,
            |s| s,
        )?;
        let cache = cache_root.map(|root| CompileCache::new(root, &engine));
        let ticker = Ticker::start(&engine);
        Ok(Runtime { inner: Arc::new(Inner { engine, linker, limits, cache, ticker }) })
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The compile cache, when enabled.
    pub fn cache(&self) -> Option<&CompileCache> {
        self.inner.cache.as_ref()
    }

    /// Compiles `bytes` (or loads the cached compilation) and checks what the
    /// component is, without reading its tools. Used by `inspect`.
    pub fn compile(&self, name: &str, bytes: &[u8]) -> Result<Compiled, LoadError> {
        let err = |kind| LoadError { plugin: name.to_string(), kind };
        let limit = self.inner.limits.max_component_bytes;
        if bytes.len() > limit {
            return Err(err(LoadErrorKind::TooLarge { size: bytes.len(), limit }));
        }
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(err(LoadErrorKind::NotWasm));
        }
        // Bytes 4..8: version and layer. Core modules are layer 0 (01 00 00 00);
        // components are layer 1 (0d 00 01 00).
        if bytes[6..8] == [0, 0] {
            return Err(err(LoadErrorKind::CoreModule));
        }
        let digest = hex::encode(Sha256::digest(bytes));
        let engine = &self.inner.engine;
        let (component, source) = match self.inner.cache.as_ref().and_then(|c| c.load(engine, &digest)) {
            Some(c) => (c, CompileSource::Cache),
            None => {
                let serialized =
                    engine.precompile_component(bytes).map_err(|e| err(LoadErrorKind::Invalid(format!("{e:#}"))))?;
                // SAFETY: `serialized` was produced just above by this engine.
                #[allow(unsafe_code)]
                let component = unsafe { Component::deserialize(engine, &serialized) }
                    .map_err(|e| err(LoadErrorKind::Invalid(format!("{e:#}"))))?;
                if let Some(cache) = &self.inner.cache {
                    cache.store(&digest, &serialized);
                }
                (component, CompileSource::Compiled)
            }
        };
        let ty = component.component_type();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        Ok(Compiled { name: name.to_string(), digest, size: bytes.len(), component, source, imports, exports })
    }

    /// Loads a plugin: compiles (or loads from cache), checks the world and
    /// imports, pre-instantiates, and reads its tools under the call limits.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<WasmPlugin, LoadError> {
        self.instantiate_compiled(self.compile(name, bytes)?, Grants::default())
    }

    /// [`Runtime::load`] with the operator's grants for this plugin.
    pub fn load_with(&self, name: &str, bytes: &[u8], grants: Grants) -> Result<WasmPlugin, LoadError> {
        self.instantiate_compiled(self.compile(name, bytes)?, grants)
    }

    /// Reads a component file and loads it, naming the plugin after the file stem.
    pub fn load_file(&self, path: &std::path::Path) -> Result<WasmPlugin, LoadError> {
        self.load_file_with(path, |_| Grants::default())
    }

    /// [`Runtime::load_file`] with grants looked up by the plugin's name.
    pub fn load_file_with(
        &self,
        path: &std::path::Path,
        grants: impl FnOnce(&str) -> Grants,
    ) -> Result<WasmPlugin, LoadError> {
        let name = plugin_name_from_path(path);
        let bytes = read_bounded(path, self.inner.limits.max_component_bytes)
            .map_err(|kind| LoadError { plugin: name.clone(), kind })?;
        let g = grants(&name);
        self.load_with(&name, &bytes, g)
    }

    /// Second half of [`Runtime::load`], for an already compiled component.
    pub fn instantiate_compiled(&self, compiled: Compiled, grants: Grants) -> Result<WasmPlugin, LoadError> {
        let name = compiled.name.clone();
        let err = |kind| LoadError { plugin: name.clone(), kind };
        compiled.check_world().map_err(err)?;
        for import in &compiled.imports {
            if let Some((_, grant)) = NEEDS_GRANT.iter().find(|(p, _)| import.starts_with(p)) {
                if (*grant == "memory" && grants.memory.is_some())
                    || (*grant == "network" && !grants.network.is_empty())
                {
                    continue;
                }
                return Err(err(LoadErrorKind::NotGranted { interface: import.clone(), grant }));
            }
            if !ALWAYS_LINKED.iter().any(|p| import.starts_with(p)) {
                return Err(err(LoadErrorKind::UnknownImport(import.clone())));
            }
        }
        let pre = self
            .inner
            .linker
            .instantiate_pre(&compiled.component)
            .map_err(|e| err(LoadErrorKind::Link(format!("{e:#}"))))?;
        let pre = PluginPre::new(pre).map_err(|e| err(LoadErrorKind::Link(format!("{e:#}"))))?;
        let mut plugin = WasmPlugin {
            runtime: self.clone(),
            name: Arc::from(name.as_str()),
            digest: compiled.digest,
            size: compiled.size,
            imports: compiled.imports,
            source: compiled.source,
            pre,
            tools: Vec::new(),
            grants,
        };
        let infos = plugin.list_tools().map_err(|e| err(LoadErrorKind::ListTools(e)))?;
        let mut tools: Vec<ToolDef> = Vec::with_capacity(infos.len());
        for info in infos {
            let def = tool_def(info).map_err(|(tool, reason)| err(LoadErrorKind::BadTool { tool, reason }))?;
            if tools.iter().any(|t| t.name == def.name) {
                return Err(err(LoadErrorKind::BadTool { tool: def.name, reason: "declared twice".into() }));
            }
            tools.push(def);
        }
        plugin.tools = tools;
        Ok(plugin)
    }

    /// Builds a store for one call of `tool` in `plugin`, with every limit
    /// set and exactly the granted directories and variables in its WASI
    /// context (none by default).
    fn store(
        &self,
        plugin: &Arc<str>,
        grants: &Grants,
        tool: &str,
        deadline: Duration,
        ctx: Option<&CallContext>,
    ) -> Result<Store<State>, CallError> {
        let limits = &self.inner.limits;
        let stdout = MemoryOutputPipe::new(limits.guest_output_bytes);
        let stderr = MemoryOutputPipe::new(limits.guest_output_bytes);
        let mut builder = WasiCtxBuilder::new();
        builder.stdout(stdout.clone()).stderr(stderr.clone());
        for d in &grants.dirs {
            let perms = match d.mode {
                DirMode::ReadWrite => wasmtime_wasi::FsPerms::ReadWrite,
                DirMode::ReadOnly => wasmtime_wasi::FsPerms::ReadOnly,
            };
            builder.preopened_dir(&d.host, &d.mount, perms).map_err(|e| CallError::Unavailable {
                tool: tool.to_string(),
                message: format!("granted directory {} cannot be opened: {e}", d.host.display()),
            })?;
        }
        for (k, v) in &grants.env {
            builder.env(k, v);
        }
        let network_used = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if !grants.network.is_empty() {
            // The check sees the socket address actually connected to, so
            // no header, URL or redirect can widen it.
            let allowed: Arc<[std::net::SocketAddr]> = grants.network.clone().into();
            let used = network_used.clone();
            builder.allow_tcp(true).socket_addr_check(move |addr, usage| {
                use wasmtime_wasi::sockets::SocketAddrUse;
                let ok = match usage {
                    SocketAddrUse::TcpConnect => {
                        let ok = allowed.contains(&addr);
                        if ok {
                            used.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        ok
                    }
                    // The implicit bind a connect performs (wildcard address,
                    // any port); explicit binds and listening stay refused.
                    SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                    _ => false,
                };
                Box::pin(async move { ok })
            });
        }
        let wasi = builder.build();
        let state = State {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter::new(limits),
            stdout,
            stderr,
            plugin: plugin.clone(),
            tool: Arc::from(tool),
            logs_left: limits.log_lines,
            events: ctx.and_then(|c| c.events.clone()),
            deadline: Instant::now() + deadline,
            memory: grants.memory.clone(),
            used: 0,
            files_granted: !grants.dirs.is_empty(),
            env_granted: !grants.env.is_empty(),
            network_used,
        };
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        if let Some(fuel) = limits.fuel {
            store.set_fuel(fuel).expect("fuel is enabled");
        }
        let ticks = deadline.as_nanos().div_ceil(ticker::TICK.as_nanos()) as u64;
        store.set_epoch_deadline(ticks.max(1));
        store.epoch_deadline_trap();
        Ok(store)
    }
}

/// Reads a file, refusing one larger than `limit` before reading it all.
pub fn read_bounded(path: &std::path::Path, limit: usize) -> Result<Vec<u8>, LoadErrorKind> {
    let size = std::fs::metadata(path)?.len();
    if size > limit as u64 {
        return Err(LoadErrorKind::TooLarge { size: size as usize, limit });
    }
    Ok(std::fs::read(path)?)
}

/// A plugin's name from its file name: the stem, e.g. `diceroller` for `diceroller.wasm`.
pub fn plugin_name_from_path(path: &std::path::Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// A compiled component, checked for nothing yet but its format.
pub struct Compiled {
    /// Plugin name.
    pub name: String,
    /// sha256 of the component bytes, hex.
    pub digest: String,
    /// Size of the component in bytes.
    pub size: usize,
    /// Whether it was compiled now or loaded from the cache.
    pub source: CompileSource,
    /// Names of the interfaces it imports.
    pub imports: Vec<String>,
    /// Names of what it exports.
    pub exports: Vec<String>,
    component: Component,
}

impl Compiled {
    /// Checks that the component exports a compatible `tool` interface.
    fn check_world(&self) -> Result<(), LoadErrorKind> {
        let prefix = format!("{TOOL_INTERFACE}@");
        match self.exports.iter().find(|e| e.starts_with(&prefix)) {
            Some(e) if e.starts_with(&format!("{prefix}0.1.")) => {
                let engine = self.component.engine();
                match self.component.component_type().get_export(engine, e) {
                    Some(ext) if matches!(ext.ty, ComponentItem::ComponentInstance(_)) => Ok(()),
                    _ => Err(LoadErrorKind::WrongWorld { exports: self.exports.clone() }),
                }
            }
            Some(e) => Err(LoadErrorKind::IncompatibleVersion { found: e.clone() }),
            None => Err(LoadErrorKind::WrongWorld { exports: self.exports.clone() }),
        }
    }
}

/// Tool names the model can call: ASCII letters, digits, `_`, `-`, `.`; 1-64 chars.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

fn tool_def(info: bindings::ToolInfo) -> Result<ToolDef, (String, String)> {
    let fail = |reason: String| (info.name.clone(), reason);
    if !valid_tool_name(&info.name) {
        return Err(fail("names must be 1-64 characters of letters, digits, '_', '-' or '.'".into()));
    }
    let schema: serde_json::Value =
        serde_json::from_str(&info.input_schema).map_err(|e| fail(format!("input schema is not JSON: {e}")))?;
    if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err(fail("input schema must be a JSON Schema with \"type\": \"object\"".into()));
    }
    crate::validate::Validator::new(&schema)
        .map_err(|e| fail(format!("input schema is not a valid JSON Schema: {e}")))?;
    if info.max_duration_ms < info.estimated_duration_ms {
        return Err(fail(format!(
            "max-duration-ms ({}) is below estimated-duration-ms ({})",
            info.max_duration_ms, info.estimated_duration_ms
        )));
    }
    if let Some(probe) = &info.probe_arguments {
        serde_json::from_str::<serde_json::Value>(probe)
            .map_err(|e| fail(format!("probe arguments are not JSON: {e}")))?;
    }
    Ok(ToolDef {
        name: info.name,
        description: info.description,
        input_schema: schema,
        meta: ToolMeta {
            estimated_duration_ms: Some(info.estimated_duration_ms),
            max_duration_ms: Some(info.max_duration_ms),
            idempotent: info.idempotent,
            cacheable_seconds: info.cacheable_seconds,
        },
        probe_arguments: info.probe_arguments.map(|p| serde_json::from_str(&p).expect("checked above")),
    })
}

/// A loaded wasm plugin: compiled, linked, with its tools read. Calls run in a
/// fresh instance each.
pub struct WasmPlugin {
    runtime: Runtime,
    name: Arc<str>,
    digest: String,
    size: usize,
    imports: Vec<String>,
    source: CompileSource,
    pre: PluginPre<State>,
    tools: Vec<ToolDef>,
    grants: Grants,
}

impl std::fmt::Debug for WasmPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmPlugin")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .field("tools", &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl WasmPlugin {
    /// sha256 of the component, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Component size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The interfaces the component imports (what it asks for).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// What the operator granted this plugin.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// Whether the code was compiled at load or came from the cache.
    pub fn compile_source(&self) -> CompileSource {
        self.source
    }

    fn list_tools(&self) -> Result<Vec<bindings::ToolInfo>, CallError> {
        let deadline = self.runtime.inner.limits.timeout_floor.max(Duration::from_secs(1));
        let (result, _) = self
            .run("list-tools", deadline, None, |plugin, store| plugin.toolhost_plugin_tool().call_list_tools(store));
        result
    }

    /// Instantiates in a fresh store and runs `f`, classifying failures.
    fn run<R>(
        &self,
        tool: &str,
        deadline: Duration,
        ctx: Option<&CallContext>,
        f: impl FnOnce(&bindings::Plugin, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> (Result<R, CallError>, CallStats) {
        let rt = &self.runtime.inner;
        let start = Instant::now();
        let _tick = rt.ticker.enter();
        let mut store = match self.runtime.store(&self.name, &self.grants, tool, deadline, ctx) {
            Ok(s) => s,
            Err(e) => return (Err(e), CallStats { duration: start.elapsed(), ..CallStats::default() }),
        };
        let result = self.pre.instantiate(&mut store).and_then(|instance| f(&instance, &mut store));
        let fuel_used = rt.limits.fuel.map_or(0, |fuel| fuel.saturating_sub(store.get_fuel().unwrap_or(0)));
        let data = store.data();
        let network = if data.network_used.load(std::sync::atomic::Ordering::Relaxed) { exercised::NETWORK } else { 0 };
        let stats = CallStats {
            duration: start.elapsed(),
            fuel_used,
            peak_memory_bytes: data.limiter.peak_memory,
            capabilities_used: data.used | network,
        };
        let state = store.into_data();
        let stderr = state.stderr.contents();
        let stdout = state.stdout.contents();
        if !stdout.is_empty() {
            tracing::info!(plugin = &*self.name, tool, "guest stdout: {}", String::from_utf8_lossy(&stdout).trim_end());
        }
        if !stderr.is_empty() {
            tracing::info!(plugin = &*self.name, tool, "guest stderr: {}", String::from_utf8_lossy(&stderr).trim_end());
        }
        let result = result.map_err(|e| classify(e, tool, deadline, &rt.limits, &state.limiter, &stderr));
        (result, stats)
    }
}

impl WasmPlugin {
    /// Keeps one instance alive across calls. This gives up the per-call
    /// isolation every real call has (state leaks between calls), so it exists
    /// only to measure what fresh instances cost.
    #[doc(hidden)]
    pub fn reused_instance(&self) -> Result<ReusedInstance<'_>, CallError> {
        let deadline = self.runtime.inner.limits.timeout_ceiling;
        let mut store = self.runtime.store(&self.name, &self.grants, "reused", deadline, None)?;
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| CallError::Trap { tool: "reused".into(), message: format!("{e:#}") })?;
        Ok(ReusedInstance { plugin: self, store, instance })
    }
}

/// See [`WasmPlugin::reused_instance`].
#[doc(hidden)]
pub struct ReusedInstance<'a> {
    plugin: &'a WasmPlugin,
    store: Store<State>,
    instance: bindings::Plugin,
}

impl ReusedInstance<'_> {
    /// Calls `tool` in the kept instance, with fuel and deadline reset.
    pub fn call(&mut self, tool: &str, arguments: &str) -> Result<usize, CallError> {
        let rt = &self.plugin.runtime.inner;
        let _tick = rt.ticker.enter();
        if let Some(fuel) = rt.limits.fuel {
            self.store.set_fuel(fuel).expect("fuel is enabled");
        }
        self.store.set_epoch_deadline(rt.limits.timeout_ceiling.as_millis() as u64);
        match self.instance.toolhost_plugin_tool().call_call(&mut self.store, tool, arguments) {
            Ok(Ok(content)) => Ok(content.len()),
            Ok(Err(e)) => Err(CallError::Failed { tool: tool.into(), message: format!("{e:?}") }),
            Err(e) => Err(CallError::Trap { tool: tool.into(), message: format!("{e:#}") }),
        }
    }
}

/// Turns a wasmtime error from a call into the typed error the caller sees.
fn classify(
    e: wasmtime::Error,
    tool: &str,
    deadline: Duration,
    limits: &Limits,
    limiter: &Limiter,
    stderr: &[u8],
) -> CallError {
    let tool = tool.to_string();
    // A denied memory growth makes a Rust guest abort; report the cause, not the abort.
    if limiter.memory_denied {
        return CallError::MemoryLimit { tool, limit_bytes: limits.memory_bytes };
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => CallError::Timeout { tool, limit_ms: deadline.as_millis() as u64 },
        Some(Trap::OutOfFuel) => CallError::OutOfFuel { tool, fuel: limits.fuel.unwrap_or(0) },
        Some(Trap::StackOverflow) => CallError::StackOverflow { tool },
        Some(Trap::UnreachableCodeReached) if panic_message(stderr).is_some() => {
            CallError::GuestPanic { tool, message: panic_message(stderr).unwrap_or_default() }
        }
        Some(trap) => CallError::Trap { tool, message: trap.to_string() },
        None => CallError::Trap { tool, message: format!("{e:#}") },
    }
}

/// Extracts "panicked at FILE: MESSAGE" from a Rust guest's stderr.
fn panic_message(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let start = text.find("panicked at ")?;
    let rest = &text[start + "panicked at ".len()..];
    // Format: "panicked at src/lib.rs:12:5:\nMESSAGE\nnote: ..."
    let mut lines = rest.lines();
    let location = lines.next().unwrap_or("").trim_end_matches(':');
    let message: Vec<&str> = lines.take_while(|l| !l.starts_with("note:")).collect();
    Some(format!("{} (at {location})", message.join(" ").trim()))
}

fn convert(content: Vec<bindings::Content>, tool: &str, limit: usize) -> Result<Vec<Content>, CallError> {
    let size: usize = content
        .iter()
        .map(|c| match c {
            bindings::Content::Text(s) | bindings::Content::Json(s) => s.len(),
            bindings::Content::Image(m) | bindings::Content::Audio(m) => m.data.len() + m.mime_type.len(),
            bindings::Content::Resource(r) => {
                r.uri.len()
                    + r.mime_type.as_ref().map_or(0, String::len)
                    + match &r.body {
                        bindings::ResourceBody::Text(t) => t.len(),
                        bindings::ResourceBody::Blob(b) => b.len(),
                    }
            }
        })
        .sum();
    if size > limit {
        return Err(CallError::OutputTooLarge { tool: tool.to_string(), size, limit });
    }
    content
        .into_iter()
        .map(|c| {
            Ok(match c {
                bindings::Content::Text(s) => Content::Text(s),
                bindings::Content::Json(s) => Content::Json(serde_json::from_str(&s).map_err(|e| {
                    CallError::Failed { tool: tool.to_string(), message: format!("plugin returned invalid JSON: {e}") }
                })?),
                bindings::Content::Image(m) => Content::Image { mime_type: m.mime_type, data: m.data },
                bindings::Content::Audio(m) => Content::Audio { mime_type: m.mime_type, data: m.data },
                bindings::Content::Resource(r) => Content::Resource {
                    uri: r.uri,
                    mime_type: r.mime_type,
                    body: match r.body {
                        bindings::ResourceBody::Text(t) => crate::tool::ResourceBody::Text(t),
                        bindings::ResourceBody::Blob(b) => crate::tool::ResourceBody::Blob(b),
                    },
                },
            })
        })
        .collect()
}

impl Provider for WasmPlugin {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "wasm"
    }

    fn tools(&self) -> &[ToolDef] {
        &self.tools
    }

    fn fingerprint(&self) -> String {
        self.digest.clone()
    }

    fn as_wasm(&self) -> Option<&WasmPlugin> {
        Some(self)
    }

    fn call(&self, tool: &str, arguments: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        let def = self.tools.iter().find(|t| t.name == tool).ok_or_else(|| CallError::UnknownTool(tool.to_string()))?;
        let limits = &self.runtime.inner.limits;
        // The budget's deadline already includes the floor; the operator's
        // ceiling always holds.
        let deadline = match ctx.deadline {
            Some(d) => d.min(limits.timeout_ceiling),
            None => limits.deadline_for(def.meta.max_duration_ms),
        };
        let args = arguments.to_string();
        let (result, stats) = self.run(tool, deadline, Some(ctx), |plugin, store| {
            plugin.toolhost_plugin_tool().call_call(store, tool, &args)
        });
        let tool_s = || tool.to_string();
        match result? {
            Ok(content) => {
                let content = convert(content, tool, self.runtime.inner.limits.output_bytes)?;
                Ok(ToolOutput { content, stats })
            }
            Err(bindings::ToolError::InvalidInput(message)) => Err(CallError::InvalidInput { tool: tool_s(), message }),
            Err(bindings::ToolError::NotFound(message)) => Err(CallError::NotFound { tool: tool_s(), message }),
            Err(bindings::ToolError::Forbidden(message)) => Err(CallError::Forbidden { tool: tool_s(), message }),
            Err(bindings::ToolError::Failed(message)) => Err(CallError::Failed { tool: tool_s(), message }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_is_extracted_from_rust_stderr() {
        let stderr = b"\nthread '<unnamed>' panicked at src/lib.rs:63:24:\nthe hostile plugin panicked on purpose\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(panic_message(stderr).unwrap(), "the hostile plugin panicked on purpose (at src/lib.rs:63:24)");
        assert_eq!(panic_message(b"all fine"), None);
    }

    #[test]
    fn tool_names_are_restricted() {
        assert!(valid_tool_name("roll"));
        assert!(valid_tool_name("server.tool_name-2"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name("has space"));
        assert!(!valid_tool_name(&"x".repeat(65)));
    }
}
