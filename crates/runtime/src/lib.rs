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

mod ask;
mod bindings;
pub mod cache;
pub mod capabilities;
mod clock;
pub mod engine_settings;
mod extension;
pub mod limits;
mod load;
mod offer;
mod plugin;
/// Private state files and directories (the `toolhost-base` crate's).
pub use toolhost_base::private;
/// Striped counters (the `toolhost-base` crate's).
pub use toolhost_base::stripes;
pub mod slots;
mod state;
mod teardown;
mod ticker;
mod tiered;
mod values;

pub use bindings::{CONTRACT_VERSION, TOOL_INTERFACE};
pub use cache::{CacheConfig, CacheError, CompileCache};
use capabilities::InstanceSetup;
pub use capabilities::{CAPABILITIES, GrantConfig, GrantError, Grants, GrantsByPlugin, MemoryBackend, Review};
pub use extension::{Extension, ExtensionCall, ExtensionGrant, ExtensionGrants};
use limits::Limiter;
pub use limits::{Limits, PluginLimits};
pub use load::{CompileSource, LoadError, LoadErrorKind, Precompiled, plugin_name_from_path, read_bounded};
pub use plugin::{BadToolName, Compiled, ReusedInstance, WasmPlugin};
pub use slots::{FairSlot, FairSlots, Refusal, Slot, Slots};
pub use state::State;
use state::Used;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use teardown::{DeferTeardowns, defer_teardowns, teardown_deferred};
use ticker::Ticker;
pub use tiered::{CodeKind, CompileMode, FastCompiler};
use toolhost_types::{CallContext, CallError};
pub use values::{PluginValues, REDACT_MIN_LEN};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

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
    /// Engines that only compile, whose code is loaded into `engine`: the
    /// fast first code with Cranelift (optimization off), and the optimized
    /// code compiled in the background on one thread (`tiered`). Made at
    /// first use.
    fast_engine: std::sync::OnceLock<Result<Engine, String>>,
    background_engine: std::sync::OnceLock<Result<Engine, String>>,
    /// The engine running fast code compiled by Winch (its own calling
    /// convention: its code runs in no other engine), with its linker.
    /// Made at first use.
    winch: std::sync::OnceLock<Result<tiered::WinchEngine, String>>,
    optimizer: tiered::Optimizer,
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

/// The linker every plugin of `engine` is linked with: WASI (its clock
/// bounded by the call's deadline), each capability's host functions and
/// the `extensions`', `wasi:config/store`, and the `host` interface.
fn link(engine: &Engine, extensions: &[Arc<dyn Extension>]) -> wasmtime::Result<Linker<State>> {
    let mut linker = Linker::new(engine);
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
    for e in extensions {
        e.link(&mut linker)?;
    }
    linker.allow_shadowing(false);
    // Each plugin's own config values and secrets, nothing else.
    wasmtime_wasi_config::add_to_linker(&mut linker, |s: &mut State| {
        wasmtime_wasi_config::WasiConfig::from(&s.values.vars)
    })?;
    bindings::toolhost::plugin::host::add_to_linker::<State, wasmtime::component::HasSelf<State>>(&mut linker, |s| s)?;
    bindings::toolhost::plugin::client::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
        &mut linker,
        |s| s,
    )?;
    Ok(linker)
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
        engine_settings::apply_code_settings(&mut config, limits.fuel.is_some(), true);
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
        let linker = link(&engine, &extensions)?;
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
                fast_engine: Default::default(),
                background_engine: Default::default(),
                winch: Default::default(),
                optimizer: Default::default(),
                ticker,
            }),
        })
    }

    /// The extensions installed: the capabilities whose host side they
    /// are, and what resolves their grants ([`GrantConfig::resolve`]).
    pub fn extensions(&self) -> &[Arc<dyn Extension>] {
        &self.inner.extensions
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

    /// Builds a store for one call of `tool` in `plugin`, with every limit
    /// set and exactly the plugin's grants in its context (none by default).
    pub(crate) fn store(
        &self,
        engine: &Engine,
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
            asker: ctx.and_then(|c| c.asker.clone()),
            cancel: ctx.and_then(|c| c.cancel.clone()),
            asks_left: limits.asks_per_call,
            asks_made: 0,
            input_wait: limits.input_wait,
            waited: Duration::ZERO,
            suspended: false,
        };
        let mut state = state;
        if let Some(e) = self.inner.extensions.iter().find(|e| plugin.held.contains(e.capability())) {
            state.ext = Some(e.instance(ExtensionCall {
                plugin: &plugin.name,
                grants: &plugin.grants,
                limits,
                deadline: state.deadline,
                caller: ctx.and_then(|c| c.agent.as_deref()),
                trace: ctx.and_then(|c| c.trace.as_ref()),
            }));
        }
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limiter);
        if let Some(fuel) = limits.fuel {
            store.set_fuel(fuel).expect("fuel is enabled");
        }
        // wasmtime charges every string and list it copies out of the guest
        // (the call's result, each import's arguments) against this budget
        // before copying it, so no call makes the host allocate much more than
        // the output cap, aliased pointers or not.
        store.set_hostcall_fuel(limits.output_bytes + HOSTCALL_SLACK);
        // A call that can be cancelled (its client gave up, or cancelled
        // its task) looks at its cancellation every CANCEL_CHECK.
        let slice = |left: Duration, cancellable: bool| {
            let left = if cancellable { left.min(CANCEL_CHECK) } else { left };
            (left.as_nanos().div_ceil(ticker::TICK.as_nanos()) as u64).max(1)
        };
        store.set_epoch_deadline(slice(deadline, store.data().cancel.is_some()));
        // The deadline can move: a call waiting for its client's answer
        // (`ask.rs`) is not running. When the ticks run out, the call ends
        // unless its deadline moved past now (or it was cancelled).
        store.epoch_deadline_callback(move |store| {
            let data = store.data();
            if data.cancel.as_ref().is_some_and(toolhost_types::Cancel::is_cancelled) {
                return Err(wasmtime::Trap::Interrupt.into());
            }
            let left = data.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(wasmtime::Trap::Interrupt.into());
            }
            Ok(wasmtime::UpdateDeadline::Continue(slice(left, data.cancel.is_some())))
        });
        Ok(store)
    }
}

/// How often a running call that can be cancelled looks at its
/// cancellation (between, it runs at full speed).
const CANCEL_CHECK: Duration = Duration::from_millis(50);

/// Bytes of each pooled table slot reset in place (the rest is released):
/// one host page, so that a table of a page or less is reset with a memset
/// instead of a page-map scan.
const TABLE_KEEP_RESIDENT: usize = 4096;

/// Host-call copy budget beyond the output cap: the per-element overhead of
/// lifting lists and records.
const HOSTCALL_SLACK: usize = 64 << 10;
