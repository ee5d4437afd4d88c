//! toolhost's wasm runtime: one engine, compile-once plugins, a fresh store
//! and instance per call, and hard limits on every call.
//!
//! A [`Runtime`] owns the wasmtime [`Engine`] (Cranelift, fuel, epoch
//! interruption, pooling allocator), the linker, the on-disk compile cache and
//! the epoch ticker. [`Runtime::load`] turns component bytes into a
//! [`WasmPlugin`]: validated, compiled (or loaded from the cache), checked
//! against the `tool` world and the plugin's grants, pre-instantiated, with
//! its tool list read once. [`WasmPlugin`] implements [`Provider`](toolhost_types::Provider): each call
//! builds a new store with the limits and exactly the plugin's grants,
//! instantiates, calls, and classifies any trap into a typed [`CallError`].
//!
//! What a plugin may touch is decided by [`capabilities`]: one module per
//! capability, one list ([`CAPABILITIES`]) asked by loading, linking and
//! every store.
//!
//! This crate depends on no MCP, HTTP or database crate.

#![deny(unsafe_code)]

mod bindings;
pub mod cache;
pub mod capabilities;
mod clock;
pub mod engine_settings;
mod extension;
pub mod limits;
mod plugin;
/// Private state files and directories (the `toolhost-base` crate's).
pub use toolhost_base::private;
/// Striped counters (the `toolhost-base` crate's).
pub use toolhost_base::stripes;
pub mod slots;
mod state;
mod teardown;
mod ticker;
mod values;

use bindings::PluginPre;
pub use bindings::{CONTRACT_VERSION, TOOL_INTERFACE};
pub use cache::{CacheConfig, CacheError, CompileCache};
use capabilities::InstanceSetup;
pub use capabilities::{CAPABILITIES, GrantConfig, GrantError, Grants, GrantsByPlugin, MemoryBackend, Review};
pub use extension::{Extension, ExtensionCall};
use limits::Limiter;
pub use limits::{Limits, PluginLimits};
pub use plugin::{Compiled, ReusedInstance, WasmPlugin};
use sha2::{Digest, Sha256};
pub use slots::{FairSlot, FairSlots, Refusal, Slot, Slots};
pub use state::State;
use state::Used;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use teardown::{DeferTeardowns, defer_teardowns, teardown_deferred};
use ticker::Ticker;
use toolhost_types::{CallContext, CallError, ToolDef};
pub use values::{PluginValues, REDACT_MIN_LEN};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("cannot load plugin {plugin:?}: {kind}{}", grant_key(plugin, kind))]
pub struct LoadError {
    /// The plugin (file or built-in name) that failed.
    pub plugin: String,
    /// What was wrong.
    pub kind: LoadErrorKind,
}

/// For a capability not granted, the config key that grants it.
fn grant_key(plugin: &str, kind: &LoadErrorKind) -> String {
    match kind {
        LoadErrorKind::NotGranted { grant, .. } => format!(" (plugins.grants.{plugin}.{grant} grants it)"),
        _ => String::new(),
    }
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
    /// Not a regular file (a FIFO, device, socket or directory).
    #[error("not a regular file (FIFOs, devices and sockets are never read as plugins)")]
    NotAFile,
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
        /// The capability that would allow it.
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

struct Inner {
    engine: Engine,
    linker: Linker<State>,
    /// The limits calls run under: swapped whole by [`Runtime::set_limits`].
    limits: arc_swap::ArcSwap<Limits>,
    /// The limits the engine and its instance pool were sized with.
    engine_limits: Limits,
    /// Capabilities provided from outside this crate (`wasi:http`).
    extensions: Vec<Arc<dyn Extension>>,
    /// Plugins with limits of their own: what each asked, and the limits
    /// in force for it (the operator's with its own in place). Rebuilt
    /// whole when either changes.
    plugin_limits: arc_swap::ArcSwap<HashMap<String, (PluginLimits, Arc<Limits>)>>,
    /// Each plugin's `wasi:config/store` values (config and secrets).
    plugin_values: arc_swap::ArcSwap<HashMap<String, Arc<PluginValues>>>,
    cache: Option<CompileCache>,
    /// Code precompiled by the build, by component sha256.
    precompiled: std::sync::Mutex<HashMap<String, Precompiled>>,
    /// The plugins being compiled now, and since when.
    compiling: std::sync::Mutex<std::collections::BTreeMap<String, std::time::Instant>>,
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
        f.debug_struct("Runtime").field("limits", &**self.inner.limits.load()).finish_non_exhaustive()
    }
}

/// Where a load's compiled code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled with Cranelift now (and stored in the cache, if any).
    Compiled,
    /// Loaded from the on-disk cache.
    Cache,
    /// Deserialized from code precompiled when the binary was built (the
    /// built-in plugins, see [`Runtime::offer_precompiled`]).
    Precompiled,
}

/// Code compiled ahead of time, by the build, for a component embedded in
/// the binary.
///
/// Its integrity is the compile cache's guarantee: no native code runs
/// that this host's own build did not produce, for exactly the bytes being
/// loaded. The code and the component are both in the executable's
/// read-only data (whoever could change them could change the code that
/// would check them), and the code is used only for a component whose
/// sha256 is the one the build hashed.
#[derive(Debug, Clone, Copy)]
pub struct Precompiled {
    /// The component, as embedded.
    pub component: &'static [u8],
    /// Its sha256 (lowercase hex), computed by the build: the code is
    /// used only for bytes with this digest.
    pub component_sha256: &'static str,
    /// What `Engine::precompile_component` produced for them.
    pub artifact: &'static [u8],
}

impl Runtime {
    /// Builds a runtime with `limits`, caching compiled code under `cache_root`
    /// (no disk cache when `None`) with the default size bound.
    pub fn new(limits: Limits, cache_root: Option<&std::path::Path>) -> Result<Runtime, wasmtime::Error> {
        Runtime::with_cache_dir(limits, cache_root, cache::DEFAULT_MAX_BYTES)
    }

    /// Builds a runtime with `limits` and an authenticated compile cache under
    /// `cache_root` holding at most `max_bytes` (none when `None`). A cache
    /// directory that is not private to this user is not used: the runtime
    /// compiles every component instead, and says why.
    pub fn with_cache_dir(
        limits: Limits,
        cache_root: Option<&std::path::Path>,
        max_bytes: u64,
    ) -> Result<Runtime, wasmtime::Error> {
        Runtime::with_extensions(limits, cache_root, max_bytes, Vec::new())
    }

    /// [`Runtime::with_cache_dir`], with `extensions` linked: capabilities
    /// whose host side lives outside this crate (one per capability).
    pub fn with_extensions(
        limits: Limits,
        cache_root: Option<&std::path::Path>,
        max_bytes: u64,
        extensions: Vec<Arc<dyn Extension>>,
    ) -> Result<Runtime, wasmtime::Error> {
        let cache = cache_root.and_then(|root| match CacheConfig::in_dir(root, max_bytes) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "compile cache disabled: every plugin is compiled at load");
                None
            }
        });
        let mut config = Config::new();
        engine_settings::apply_code_settings(&mut config, limits.fuel.is_some());
        config.max_wasm_stack(limits.max_wasm_stack);
        let mut pool = PoolingAllocationConfig::default();
        // Room for the stores kept for a later teardown (`teardown`).
        let slots = limits.max_instances + teardown::DEPTH;
        pool.total_component_instances(slots)
            .total_core_instances(slots * 8)
            .total_memories(slots * 2)
            .total_tables(slots * 8)
            .max_memories_per_component(8)
            .max_tables_per_component(16)
            .max_core_instances_per_component(64)
            .table_elements(limits.table_elements)
            .max_memory_size(limits.slot_memory_bytes())
            // Reset a reused slot by rewriting only the pages the last
            // instance dirtied (Linux PAGEMAP_SCAN, kernel >= 6.7; plain
            // memset elsewhere) instead of unmapping them: a fresh instance
            // per call then costs about half as much (see BENCHMARKS.md).
            .linear_memory_keep_resident(1 << 20)
            // A table of at most one page (512 funcref entries: every
            // built-in's tables are) is reset with a memset of that page;
            // with more than a page kept resident wasmtime would ask the
            // kernel for its dirty pages (a PAGEMAP_SCAN ioctl per table,
            // two per call of a Rust component) to rewrite a few hundred
            // bytes. Larger tables keep their first page and give the rest
            // back (see BENCHMARKS.md, runtime).
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            .pagemap_scan(wasmtime::Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        linker.allow_shadowing(true);
        // Replace wasmtime-wasi's monotonic clock with one whose timers never
        // outlive the call's deadline.
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<State, clock::HasBoundedClock>(
            &mut linker,
            |s| clock::BoundedClock { table: &mut s.table, deadline: s.deadline, cut: &mut s.timer_cut },
        )?;
        // Each capability's own host functions: wrappers that note use, or
        // its interface.
        CAPABILITIES.link(&mut linker)?;
        for e in &extensions {
            e.link(&mut linker)?;
        }
        linker.allow_shadowing(false);
        // Each plugin's own config values and secrets, nothing else.
        wasmtime_wasi_config::add_to_linker(&mut linker, |s: &mut State| {
            wasmtime_wasi_config::WasiConfig::from(&s.values.vars)
        })?;
        bindings::toolhost::plugin::host::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
            &mut linker,
            |s| s,
        )?;
        let cache = cache.and_then(|c| match CompileCache::open(c, &engine) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "compile cache disabled: every plugin is compiled at load");
                None
            }
        });
        let ticker = Ticker::start(&engine);
        Ok(Runtime {
            inner: Arc::new(Inner {
                engine,
                linker,
                limits: arc_swap::ArcSwap::from_pointee(limits.clone()),
                engine_limits: limits,
                extensions,
                plugin_limits: arc_swap::ArcSwap::default(),
                plugin_values: arc_swap::ArcSwap::default(),
                cache,
                precompiled: Default::default(),
                compiling: Default::default(),
                ticker,
            }),
        })
    }

    /// The limits every call runs under now.
    pub fn limits(&self) -> Arc<Limits> {
        self.inner.limits.load_full()
    }

    /// The limits `plugin`'s calls run under now: the operator's, with the
    /// plugin's own ([`Runtime::set_plugin_limits`]) in place.
    pub fn limits_for(&self, plugin: &str) -> Arc<Limits> {
        let own = self.inner.plugin_limits.load();
        if own.is_empty() {
            return self.inner.limits.load_full();
        }
        match own.get(plugin) {
            Some((_, limits)) => limits.clone(),
            None => self.inner.limits.load_full(),
        }
    }

    /// What `plugin` reads through `wasi:config/store` now.
    pub fn values_for(&self, plugin: &str) -> Arc<PluginValues> {
        self.inner.plugin_values.load().get(plugin).cloned().unwrap_or_default()
    }

    /// The secrets a call of `plugin` that started with `start` redacts at
    /// its end: `start`'s, and the ones in force now if they changed since.
    /// No allocation.
    pub(crate) fn call_secrets(&self, plugin: &str, start: &Arc<PluginValues>) -> values::CallSecrets {
        values::CallSecrets::new(start.clone(), self.inner.plugin_values.load().get(plugin))
    }

    /// Puts each plugin's `wasi:config/store` values in force from its next
    /// call on (plugins not named read nothing).
    pub fn set_plugin_values(&self, values: HashMap<String, Arc<PluginValues>>) {
        self.inner.plugin_values.store(Arc::new(values));
    }

    /// The plugins with limits of their own, and what each set.
    pub fn plugin_limits(&self) -> Vec<(String, PluginLimits)> {
        let mut out: Vec<_> =
            self.inner.plugin_limits.load().iter().map(|(k, (p, _))| (k.clone(), p.clone())).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Puts each plugin's own limits in force for its calls from now on
    /// (plugins not named run under the operator's). Memory above the
    /// instance pool's slots (sized at start for the largest value then in
    /// force) cannot be given: such a plugin gets the slot size, and the
    /// returned lines say so, as config keys with why.
    pub fn set_plugin_limits(&self, own: HashMap<String, PluginLimits>) -> Vec<String> {
        let (kept, built) = self.build_plugin_limits(&self.limits(), own);
        self.inner.plugin_limits.store(Arc::new(built));
        kept
    }

    /// The per-plugin table for `base` and `own`, and what could not be given.
    #[allow(clippy::type_complexity)]
    fn build_plugin_limits(
        &self,
        base: &Limits,
        own: HashMap<String, PluginLimits>,
    ) -> (Vec<String>, HashMap<String, (PluginLimits, Arc<Limits>)>) {
        let slot = self.inner.engine_limits.slot_memory_bytes();
        let mut kept = Vec::new();
        let built = own
            .into_iter()
            .map(|(name, asked)| {
                let mut limits = asked.apply(base);
                if limits.memory_bytes > slot {
                    kept.push(format!(
                        "plugins.limits.{name}.memory_mib above {} (the instance pool's slots are sized at start)",
                        slot >> 20
                    ));
                    limits.memory_bytes = slot;
                }
                (name, (asked, Arc::new(limits)))
            })
            .collect();
        (kept, built)
    }

    /// Puts new limits in force for the calls that start from now on (a
    /// config reload). What the engine was built with cannot change while it
    /// runs: switching fuel metering on or off, the wasm stack size, the
    /// number of instance slots, and memory or tables beyond the slots'
    /// size; those keep their value and are returned, as config keys with
    /// why. Lowering memory or table sizes takes effect.
    pub fn set_limits(&self, new: Limits) -> Vec<String> {
        let engine = &self.inner.engine_limits;
        let current = self.limits();
        let mut next = new;
        let mut kept = Vec::new();
        if next.fuel.is_some() != engine.fuel.is_some() {
            kept.push("limits.fuel (metering is switched on or off only at start)".to_string());
            next.fuel = current.fuel;
        }
        if next.max_wasm_stack != engine.max_wasm_stack {
            kept.push("limits.max_wasm_stack_kib (an engine setting)".to_string());
            next.max_wasm_stack = engine.max_wasm_stack;
        }
        if next.max_instances != engine.max_instances {
            kept.push("limits.max_instances (the instance pool is sized at start)".to_string());
            next.max_instances = engine.max_instances;
        }
        if next.memory_bytes > engine.slot_memory_bytes() {
            kept.push(format!(
                "limits.memory_mib above {} (the instance pool's slots are sized at start)",
                engine.slot_memory_bytes() >> 20
            ));
            next.memory_bytes = current.memory_bytes;
        }
        if next.table_elements > engine.table_elements {
            next.table_elements = current.table_elements;
        }
        next.pool_memory_bytes = engine.pool_memory_bytes;
        // Each plugin's own limits are over the operator's: rebuilt on them.
        let own: HashMap<String, PluginLimits> =
            self.inner.plugin_limits.load().iter().map(|(k, (p, _))| (k.clone(), p.clone())).collect();
        let (_, built) = self.build_plugin_limits(&next, own);
        self.inner.limits.store(Arc::new(next));
        self.inner.plugin_limits.store(Arc::new(built));
        kept
    }

    /// The compile cache, when enabled.
    pub fn cache(&self) -> Option<&CompileCache> {
        self.inner.cache.as_ref()
    }

    /// Compiles `bytes` (or loads the cached compilation) and checks what the
    /// component is, without reading its tools. Used by `inspect`.
    pub fn compile(&self, name: &str, bytes: &[u8]) -> Result<Compiled, LoadError> {
        let err = |kind| LoadError { plugin: name.to_string(), kind };
        let limit = self.inner.limits.load().max_component_bytes;
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
        // The embedded built-ins' digests are known (same bytes, same
        // binary); anything else is hashed.
        let digest = match self.embedded_digest(bytes) {
            Some(d) => d,
            None => hex::encode(Sha256::digest(bytes)),
        };
        let engine = &self.inner.engine;
        let loaded = match self.precompiled(name, &digest) {
            Some(c) => Some((c, CompileSource::Precompiled)),
            None => self.inner.cache.as_ref().and_then(|c| c.load(engine, &digest)).map(|c| (c, CompileSource::Cache)),
        };
        let (component, source) = match loaded {
            Some(loaded) => loaded,
            None => {
                let serialized = self
                    .compiling(name, bytes.len(), || engine.precompile_component(bytes))
                    .map_err(|e| err(LoadErrorKind::Invalid(format!("{e:#}"))))?;
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

    /// Runs `compile` for plugin `name` (`size` bytes), listed in
    /// [`Runtime::compiling_now`] and logged when it starts and ends
    /// (target `toolhost::compile`, on by default: a compile can take
    /// seconds, and the operator should not wonder why).
    fn compiling<T>(&self, name: &str, size: usize, compile: impl FnOnce() -> T) -> T {
        struct Listed<'a>(&'a Runtime, &'a str, std::time::Instant);
        impl Drop for Listed<'_> {
            fn drop(&mut self) {
                self.0.inner.compiling.lock().unwrap_or_else(|p| p.into_inner()).remove(self.1);
                let ms = u64::try_from(self.2.elapsed().as_millis()).unwrap_or(u64::MAX);
                tracing::info!(target: "toolhost::compile", plugin = self.1, ms, "compile of plugin {} done in {ms} ms", self.1);
            }
        }
        let started = std::time::Instant::now();
        tracing::info!(target: "toolhost::compile", plugin = name, kib = size / 1024, "compiling plugin {name} (not in the compile cache)");
        self.inner.compiling.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), started);
        let _listed = Listed(self, name, started);
        compile()
    }

    /// The plugins being compiled now, each with how long it has taken so
    /// far, by name.
    pub fn compiling_now(&self) -> Vec<(String, std::time::Duration)> {
        let compiling = self.inner.compiling.lock().unwrap_or_else(|p| p.into_inner());
        compiling.iter().map(|(name, since)| (name.clone(), since.elapsed())).collect()
    }

    /// The build's digest of `bytes` when they are an embedded component
    /// offered with [`Runtime::offer_precompiled`] (the very same static
    /// bytes, not a copy).
    fn embedded_digest(&self, bytes: &[u8]) -> Option<String> {
        let offered = self.inner.precompiled.lock().unwrap_or_else(|p| p.into_inner());
        offered.values().find(|p| std::ptr::eq(p.component, bytes)).map(|p| p.component_sha256.to_string())
    }

    /// Offers code the build precompiled: a later [`Runtime::compile`] of
    /// exactly the component it was made from deserializes it instead of
    /// compiling (when wasmtime finds it compatible with this engine).
    pub fn offer_precompiled(&self, code: Precompiled) {
        self.inner
            .precompiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(code.component_sha256.to_string(), code);
    }

    /// The precompiled code offered for the component with sha256
    /// `digest`, deserialized; `None` (compile as usual) when none was
    /// offered, its bytes are not what the build hashed, or wasmtime finds
    /// it incompatible with this engine (another CPU, other settings).
    fn precompiled(&self, name: &str, digest: &str) -> Option<Component> {
        let code = *self.inner.precompiled.lock().unwrap_or_else(|p| p.into_inner()).get(digest)?;
        // SAFETY: the artifact is native code `Engine::precompile_component`
        // produced when this binary was built (crates/dist/build.rs), for
        // the component whose sha256 is `digest` (the bytes being loaded),
        // and is part of the executable (see `Precompiled`). wasmtime
        // checks its version and settings before use.
        #[allow(unsafe_code)]
        match unsafe { Component::deserialize(&self.inner.engine, code.artifact) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::info!(plugin = name, reason = %e, "the precompiled code does not fit this engine; compiling instead");
                None
            }
        }
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

    /// Reads a component file and loads it without grants, naming the
    /// plugin after the file stem.
    pub fn load_file(&self, path: &std::path::Path) -> Result<WasmPlugin, LoadError> {
        let name = plugin_name_from_path(path);
        let bytes = read_bounded(path, self.inner.limits.load().max_component_bytes)
            .map_err(|kind| LoadError { plugin: name.clone(), kind })?;
        self.load_with(&name, &bytes, Grants::default())
    }

    /// Second half of [`Runtime::load`], for an already compiled component.
    pub fn instantiate_compiled(&self, compiled: Compiled, grants: Grants) -> Result<WasmPlugin, LoadError> {
        let err = |kind| LoadError { plugin: compiled.name.clone(), kind };
        compiled.check_world().map_err(err)?;
        CAPABILITIES.check_imports(&compiled.imports, &grants).map_err(err)?;
        self.check_extensions(&compiled.imports).map_err(err)?;
        let mut plugin = self.prepare(&compiled, grants)?;
        plugin.tools = read_tools(&plugin).map_err(err)?;
        Ok(plugin)
    }

    /// Refuses imports of a capability whose host side is an
    /// [`Extension`] this runtime was not given.
    fn check_extensions(&self, imports: &[String]) -> Result<(), LoadErrorKind> {
        for import in imports {
            if let capabilities::ImportClass::Capability(c) = CAPABILITIES.classify(import)
                && c == toolhost_types::Capability::Http
                && !self.inner.extensions.iter().any(|e| e.capability() == c)
            {
                return Err(LoadErrorKind::UnknownImport(import.clone()));
            }
        }
        Ok(())
    }

    /// The same plugin under other grants (a config reload changed them):
    /// its imports checked against the new grants exactly as at load, a
    /// fresh pre-instantiation, the tools it listed at load kept. Calls
    /// already running finish under the grants they started with.
    pub fn regrant(&self, plugin: &WasmPlugin, grants: Grants) -> Result<WasmPlugin, LoadError> {
        let err = |kind| LoadError { plugin: plugin.name.to_string(), kind };
        CAPABILITIES.check_imports(&plugin.imports, &grants).map_err(err)?;
        let compiled = Compiled {
            name: plugin.name.to_string(),
            digest: plugin.digest.clone(),
            size: plugin.size,
            source: plugin.source,
            imports: plugin.imports.clone(),
            exports: Vec::new(),
            component: plugin.pre.instance_pre().component().clone(),
        };
        let mut regranted = self.prepare(&compiled, grants)?;
        regranted.tools = plugin.tools.clone();
        regranted.own_names = plugin.own_names.clone();
        Ok(regranted)
    }

    /// Describes a compiled component without loading it: its tools, read
    /// from its `list-tools` export in a fresh instance with no grant at
    /// all (empty environment, no directory, no socket, no memory store),
    /// under the usual fuel, deadline and memory limits. Its imports are
    /// not checked against any grant (a reviewer sees what a plugin asks
    /// for before granting it; see [`CapabilitySet::review`]), but what this
    /// host does not provide at all, and a component outside the `tool`
    /// world, are still refused. Nothing else of the component runs, and no
    /// plugin comes out of it: loading still goes through
    /// [`Runtime::instantiate_compiled`] and its grant check. Used by
    /// `toolhost inspect`.
    ///
    /// [`CapabilitySet::review`]: capabilities::CapabilitySet::review
    pub fn describe_compiled(&self, compiled: &Compiled) -> Result<Vec<ToolDef>, LoadError> {
        let err = |kind| LoadError { plugin: compiled.name.clone(), kind };
        compiled.check_world().map_err(err)?;
        CAPABILITIES.check_supported(&compiled.imports).map_err(err)?;
        let plugin = self.prepare(compiled, Grants::default())?;
        read_tools(&plugin).map_err(err)
    }

    /// Links and pre-instantiates a compiled component into a plugin with
    /// `grants` and no tools yet; checks nothing (the callers do).
    fn prepare(&self, compiled: &Compiled, grants: Grants) -> Result<WasmPlugin, LoadError> {
        let err = |kind| LoadError { plugin: compiled.name.clone(), kind };
        let pre = self
            .inner
            .linker
            .instantiate_pre(&compiled.component)
            .map_err(|e| err(LoadErrorKind::Link(format!("{e:#}"))))?;
        let pre = PluginPre::new(pre).map_err(|e| err(LoadErrorKind::Link(format!("{e:#}"))))?;
        Ok(WasmPlugin {
            runtime: self.clone(),
            name: Arc::from(compiled.name.as_str()),
            digest: compiled.digest.clone(),
            size: compiled.size,
            imported: CAPABILITIES.imported(&compiled.imports),
            imports: compiled.imports.clone(),
            source: compiled.source,
            pre,
            tools: Vec::new(),
            own_names: std::collections::HashMap::new(),
            held: CAPABILITIES.held(&grants),
            grants,
            busy: FairSlots::new(self.limits_for(&compiled.name).plugin_concurrency),
        })
    }

    /// Builds a store for one call of `tool` in `plugin`, with every limit
    /// set and exactly the plugin's grants in its context (none by default).
    pub(crate) fn store(
        &self,
        plugin: &WasmPlugin,
        tool: &str,
        deadline: Duration,
        ctx: Option<&CallContext>,
        limits: &Limits,
    ) -> Result<Store<State>, CallError> {
        let stdout = MemoryOutputPipe::new(limits.guest_output_bytes);
        let stderr = MemoryOutputPipe::new(limits.guest_output_bytes);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone()).stderr(stderr.clone());
        let mut setup = InstanceSetup { wasi, memory: None, memory_write: None, used: Arc::new(Used::default()) };
        CAPABILITIES
            .configure(&plugin.grants, &mut setup)
            .map_err(|message| CallError::Unavailable { tool: tool.to_string(), message })?;
        let InstanceSetup { mut wasi, memory, memory_write, used } = setup;
        used.files.set_max_open(limits.max_open_files);
        used.files.set_caller(ctx.and_then(|c| c.agent.as_deref()));
        let state = State {
            wasi: wasi.build(),
            table: {
                let mut t = ResourceTable::new();
                t.set_max_capacity(limits.host_resources_per_call);
                t
            },
            limiter: Limiter::new(limits),
            stdout,
            stderr,
            plugin: plugin.name.clone(),
            tool: Arc::from(tool),
            logs_left: limits.log_lines,
            events: ctx.and_then(|c| c.events.clone()),
            deadline: Instant::now() + deadline,
            timer_cut: false,
            memory,
            memory_write,
            held: plugin.held,
            used,
            progress_left: state::PROGRESS_REPORTS,
            progress_sent: None,
            progress_pending: None,
            ext: None,
            values: self.values_for(&plugin.name),
        };
        let mut state = state;
        if let Some(e) = self.inner.extensions.iter().find(|e| plugin.held.contains(e.capability())) {
            state.ext = Some(e.instance(ExtensionCall {
                plugin: &plugin.name,
                grants: &plugin.grants,
                limits,
                deadline: state.deadline,
                caller: ctx.and_then(|c| c.agent.as_deref()),
            }));
        }
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        if let Some(fuel) = limits.fuel {
            store.set_fuel(fuel).expect("fuel is enabled");
        }
        // wasmtime charges every string and list it copies out of the guest
        // (the call's result, each import's arguments) against this budget
        // before copying it, so no call makes the host allocate much more than
        // the output cap, aliased pointers or not.
        store.set_hostcall_fuel(limits.output_bytes + HOSTCALL_SLACK);
        let ticks = deadline.as_nanos().div_ceil(ticker::TICK.as_nanos()) as u64;
        store.set_epoch_deadline(ticks.max(1));
        store.epoch_deadline_trap();
        Ok(store)
    }
}

/// Reads `plugin`'s tools from its `list-tools` export (a fresh instance
/// under the call limits) and checks each declaration.
fn read_tools(plugin: &WasmPlugin) -> Result<Vec<ToolDef>, LoadErrorKind> {
    let infos = plugin.list_tools().map_err(LoadErrorKind::ListTools)?;
    let mut tools: Vec<ToolDef> = Vec::with_capacity(infos.len());
    for info in infos {
        let def = plugin::tool_def(info).map_err(|(tool, reason)| LoadErrorKind::BadTool { tool, reason })?;
        if tools.iter().any(|t| t.name == def.name) {
            return Err(LoadErrorKind::BadTool { tool: def.name, reason: "declared twice".into() });
        }
        tools.push(def);
    }
    Ok(tools)
}

/// Bytes of each pooled table slot reset in place (the rest is released):
/// one host page, so that a table of a page or less is reset with a memset
/// instead of a page-map scan.
const TABLE_KEEP_RESIDENT: usize = 4096;

/// Host-call copy budget beyond the output cap: the per-element overhead of
/// lifting lists and records.
const HOSTCALL_SLACK: usize = 64 << 10;

/// Reads a regular file, refusing one larger than `limit` before reading it.
/// FIFOs, devices and sockets are refused without blocking (the file is
/// opened non-blocking and checked with `fstat` on the opened descriptor, so
/// what is checked is what is read), and the read itself stops at `limit`.
pub fn read_bounded(path: &std::path::Path, limit: usize) -> Result<Vec<u8>, LoadErrorKind> {
    use private::{LimitedReadError, Symlinks};
    let (f, md) = private::open_nonblocking(path, Symlinks::Follow)?;
    if !md.is_file() {
        return Err(LoadErrorKind::NotAFile);
    }
    private::read_limited(&f, &md, limit).map_err(|e| match e {
        LimitedReadError::TooLarge { size, limit } => LoadErrorKind::TooLarge { size: size as usize, limit },
        LimitedReadError::Io(e) => LoadErrorKind::Io(e),
    })
}

/// A plugin's name from its file name: the stem, e.g. `diceroller` for `diceroller.wasm`.
pub fn plugin_name_from_path(path: &std::path::Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}
