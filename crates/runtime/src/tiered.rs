//! Fast code first, optimized code later: how a component nobody compiled
//! before becomes callable in a fraction of the time its optimized
//! compile takes.
//!
//! With [`CompileMode::FastFirst`] (the default) a component that is
//! neither precompiled by the build nor in the compile cache is compiled
//! fast ([`CodeKind::Fast`]: by Winch, wasmtime's baseline compiler, on
//! x86_64; else by Cranelift with optimization off) and serves calls at
//! once. One background thread, at a lower scheduling priority
//! and on one core (wasmtime's parallel compilation off), then compiles
//! it the usual way ([`CodeKind::Optimized`]); when that is ready every
//! plugin running that component switches over between calls: a call
//! takes the code in force when it starts ([`Code::pre`]) and keeps it
//! to its end.
//!
//! Why Winch, and where: it compiles 6 to 8 times faster than Cranelift
//! (without optimization Cranelift is only 1.3 to 1.4 times faster than
//! with it; BENCHMARKS.md), and wasmtime 48's support tiers list it as a
//! Tier 1 compiler for x86_64 (continuously fuzzed, covered by security
//! advisories: the four of 2026 are fixed in this version). Elsewhere, and
//! for a component using a feature Winch lacks (GC references, tail
//! calls, exceptions), Cranelift compiles the fast code without
//! optimization. Winch's code keeps the same sandbox: bounds checks, fuel
//! and epoch checks, the same limiter; the hard-limit and hostile tests
//! run against it. Its calling convention differs, so its code runs in an
//! engine of its own ([`WinchEngine`]), ticked by the same epoch ticker.
//! Cranelift's single-pass register allocator, the other fast option, is
//! documented by wasmtime as not for security-sensitive uses.
//! `limits.fast_compiler: cranelift` keeps Winch out entirely.
//!
//! Each kind is cached apart (`<sha256>.cwasm`, `<sha256>.winch.cwasm`,
//! `<sha256>.fast.cwasm`): a restart uses the optimized code when it is
//! cached, else the fast code (and optimizes again in the background).

use crate::bindings::PluginPre;
use crate::state::State;
use crate::{CompileSource, Inner, LoadErrorKind, Runtime};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

/// Which code a plugin runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeKind {
    /// Compiled with optimization off: ready soon, runs slower.
    Fast,
    /// Compiled with Cranelift's `speed` optimizations (precompiled by the
    /// build, from the cache, or compiled now).
    Optimized,
}

impl CodeKind {
    /// `fast` or `optimized`, as `status` and the log say it.
    pub fn as_str(self) -> &'static str {
        match self {
            CodeKind::Fast => "fast",
            CodeKind::Optimized => "optimized",
        }
    }
}

/// How a component not compiled before is compiled (`limits.compile`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompileMode {
    /// Fast code at once, optimized code in the background, switched to
    /// between calls when ready.
    #[default]
    FastFirst,
    /// Optimized code before the first call (the plugin waits for it).
    Optimized,
    /// Fast code only, never optimized (for measuring the fast code, or a
    /// host whose plugins each run a few calls).
    Fast,
}

impl CompileMode {
    /// Whether a component is compiled fast first.
    pub(crate) fn fast_first(self) -> bool {
        !matches!(self, CompileMode::Optimized)
    }
}

/// What compiles the fast first code (`limits.fast_compiler`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FastCompiler {
    /// Winch, wasmtime's baseline compiler, on x86_64 (Tier 1 there: fuzzed,
    /// covered by security advisories); Cranelift without optimization
    /// elsewhere, and for a component Winch cannot compile.
    #[default]
    Winch,
    /// Cranelift with optimization off, always.
    Cranelift,
}

/// The engine that runs Winch's code, and its linker. Its code settings are
/// the runtime engine's but for the compiler; it has no instance pool (its
/// instances are few and short-lived: until the optimized code is ready),
/// and the runtime's limiter bounds each instance's memory and tables all
/// the same.
pub(crate) struct WinchEngine {
    engine: Engine,
    linker: Linker<State>,
}

/// The cache entry of a component's fast code by Cranelift (apart from its
/// optimized code, `<sha256>`).
fn fast_entry(digest: &str) -> String {
    format!("{digest}.fast")
}

/// The cache entry of a component's fast code by Winch.
fn winch_entry(digest: &str) -> String {
    format!("{digest}.winch")
}

impl Runtime {
    /// The Winch engine, when fast code is Winch's here (`limits.fast_compiler`
    /// and an x86_64 host), made at first use; `None` otherwise, or when it
    /// cannot be made (said once in the log).
    fn winch(&self) -> Option<&WinchEngine> {
        if !cfg!(target_arch = "x86_64") || self.inner.limits.load().fast_compiler != FastCompiler::Winch {
            return None;
        }
        let made = self.inner.winch.get_or_init(|| {
            let mut config = wasmtime::Config::new();
            crate::engine_settings::apply_code_settings(&mut config, self.inner.engine_limits.fuel.is_some(), false);
            config.strategy(wasmtime::Strategy::Winch);
            config.max_wasm_stack(self.inner.engine_limits.max_wasm_stack);
            let made = Engine::new(&config)
                .and_then(|engine| Ok(WinchEngine { linker: crate::link(&engine, &self.inner.extensions)?, engine }))
                .map_err(|e| format!("{e:#}"));
            match &made {
                Ok(w) => self.inner.ticker.add(&w.engine),
                Err(e) => tracing::warn!(error = %e, "cannot make the Winch engine: fast code comes from Cranelift"),
            }
            made
        });
        made.as_ref().ok()
    }

    /// Whether `engine` is the one running Winch's code.
    pub(crate) fn is_winch(&self, engine: &Engine) -> bool {
        matches!(self.inner.winch.get(), Some(Ok(w)) if Engine::same(engine, &w.engine))
    }

    /// The linker for plugins whose code runs in `engine`.
    pub(crate) fn linker_for(&self, engine: &Engine) -> &Linker<State> {
        match self.inner.winch.get() {
            Some(Ok(w)) if Engine::same(engine, &w.engine) => &w.linker,
            _ => &self.inner.linker,
        }
    }

    /// An engine that only compiles, with the main engine's code settings
    /// but for the optimization level, and no instance pool: Cranelift's
    /// fast code (`optimize` false; in parallel, the plugin waits for it),
    /// or the optimized code compiled in the background (on one thread).
    fn side_engine(&self, optimize: bool) -> Result<&Engine, String> {
        let cell = if optimize { &self.inner.background_engine } else { &self.inner.fast_engine };
        cell.get_or_init(|| {
            let mut config = wasmtime::Config::new();
            crate::engine_settings::apply_code_settings(&mut config, self.inner.engine_limits.fuel.is_some(), optimize);
            config.max_wasm_stack(self.inner.engine_limits.max_wasm_stack);
            config.parallel_compilation(!optimize);
            Engine::new(&config).map_err(|e| format!("cannot make a compiling engine: {e:#}"))
        })
        .as_ref()
        .map_err(Clone::clone)
    }

    /// A component's code from the cache (its optimized code, else its fast
    /// code when `mode` runs fast code first), else compiled now: fast
    /// (Winch's, else Cranelift's) or optimized, as `mode` says, and cached.
    pub(crate) fn cached_or_compiled(
        &self,
        name: &str,
        bytes: &[u8],
        digest: &str,
        mode: CompileMode,
    ) -> Result<(Component, CompileSource, CodeKind), LoadErrorKind> {
        let engine = &self.inner.engine;
        let cache = self.inner.cache.as_ref();
        let winch = mode.fast_first().then(|| self.winch()).flatten();
        if let Some(cache) = cache {
            if let Some(c) = cache.load(engine, digest) {
                return Ok((c, CompileSource::Cache, CodeKind::Optimized));
            }
            let fast = match winch {
                Some(w) => cache.load(&w.engine, &winch_entry(digest)),
                None if mode.fast_first() => cache.load(engine, &fast_entry(digest)),
                None => None,
            };
            if let Some(c) = fast {
                return Ok((c, CompileSource::Cache, CodeKind::Fast));
            }
        }
        let invalid = |e: String| LoadErrorKind::Invalid(e);
        let (serialized, runs_in, entry, kind) = match winch {
            Some(w) => {
                match self.compiling(name, bytes.len(), "fast code: Winch", || w.engine.precompile_component(bytes)) {
                    Ok(code) => (code, &w.engine, winch_entry(digest), CodeKind::Fast),
                    // A feature Winch lacks (or a component no compiler takes:
                    // Cranelift says so next).
                    Err(e) => {
                        tracing::info!(target: "toolhost::compile", plugin = name, "Winch cannot compile plugin {name} ({e:#}); its fast code comes from Cranelift");
                        self.cranelift_fast(name, bytes, digest)?
                    }
                }
            }
            None if mode.fast_first() => self.cranelift_fast(name, bytes, digest)?,
            None => {
                let code = self
                    .compiling(name, bytes.len(), "optimized code", || engine.precompile_component(bytes))
                    .map_err(|e| invalid(format!("{e:#}")))?;
                (code, engine, digest.to_string(), CodeKind::Optimized)
            }
        };
        let component = Runtime::deserialize_own(runs_in, &serialized).map_err(invalid)?;
        if let Some(cache) = cache {
            cache.store(&entry, &serialized);
        }
        Ok((component, CompileSource::Compiled, kind))
    }

    /// Cranelift's fast code for a component: what it is, the engine it runs
    /// in (the runtime's), its cache entry.
    fn cranelift_fast<'a>(
        &'a self,
        name: &str,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(Vec<u8>, &'a Engine, String, CodeKind), LoadErrorKind> {
        let invalid = |e: String| LoadErrorKind::Invalid(e);
        let compiler = self.side_engine(false).map_err(invalid)?;
        let code = self
            .compiling(name, bytes.len(), "fast code: Cranelift, unoptimized", || compiler.precompile_component(bytes))
            .map_err(|e| invalid(format!("{e:#}")))?;
        Ok((code, &self.inner.engine, fast_entry(digest), CodeKind::Fast))
    }

    /// The optimized code of a component running on fast code, compiled on
    /// the calling (background) thread, cached, its fast entries removed.
    fn compile_optimized_in_background(&self, name: &str, digest: &str, bytes: &[u8]) -> Result<Component, String> {
        let engine = &self.inner.engine;
        let cache = self.inner.cache.as_ref();
        if let Some(done) = cache.and_then(|c| c.load(engine, digest)) {
            return Ok(done);
        }
        let serialized = self.side_engine(true)?.precompile_component(bytes).map_err(|e| format!("{name}: {e:#}"))?;
        let component = Runtime::deserialize_own(engine, &serialized)?;
        if let Some(cache) = cache {
            cache.store(digest, &serialized);
            cache.remove(&fast_entry(digest));
            cache.remove(&winch_entry(digest));
        }
        Ok(component)
    }
}

/// The code a plugin's calls instantiate, swapped whole when the optimized
/// code is ready. Shared by every [`crate::WasmPlugin`] made from the same
/// load (a regrant keeps it).
pub(crate) struct Code {
    pre: arc_swap::ArcSwap<PluginPre<State>>,
    optimized: AtomicBool,
}

impl Code {
    pub(crate) fn new(pre: PluginPre<State>, kind: CodeKind) -> Arc<Code> {
        Arc::new(Code {
            pre: arc_swap::ArcSwap::from_pointee(pre),
            optimized: AtomicBool::new(kind == CodeKind::Optimized),
        })
    }

    /// The code in force now: a call takes it once, at its start.
    pub(crate) fn pre(&self) -> Arc<PluginPre<State>> {
        self.pre.load_full()
    }

    pub(crate) fn kind(&self) -> CodeKind {
        if self.optimized.load(Ordering::Acquire) { CodeKind::Optimized } else { CodeKind::Fast }
    }

    fn switch(&self, pre: PluginPre<State>) {
        self.pre.store(Arc::new(pre));
        self.optimized.store(true, Ordering::Release);
    }
}

/// Most components waiting for their optimized code at once, and most of
/// their bytes held (each is kept until compiled); past either a new one
/// stays on fast code. The one compiling is not counted: a component of
/// any size the host loads can be optimized when the queue is empty.
const MAX_QUEUED: usize = 32;
const MAX_QUEUED_BYTES: usize = 256 << 20;

/// A component waiting for its optimized code.
struct Job {
    name: String,
    digest: String,
    bytes: Arc<[u8]>,
}

/// The background optimizer: a queue of components, one thread working
/// through it (started when the queue fills, gone when it empties), and
/// the plugins waiting for each component's code.
#[derive(Default)]
pub(crate) struct Optimizer {
    state: Mutex<OptimizerState>,
}

#[derive(Default)]
struct OptimizerState {
    queue: VecDeque<Job>,
    /// By component digest: the code of every plugin running it fast.
    waiting: HashMap<String, Vec<Weak<Code>>>,
    working: bool,
}

impl Optimizer {
    /// The optimizations queued or under way.
    pub(crate) fn pending(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.waiting.len()
    }
}

impl Runtime {
    /// Queues `code` (plugin `name`, running component `digest` fast) for
    /// its optimized code. A component already queued is compiled once
    /// for all the plugins running it.
    pub(crate) fn optimize_later(&self, name: &str, digest: &str, bytes: Arc<[u8]>, code: &Arc<Code>) {
        let optimizer = &self.inner.optimizer;
        let mut guard = optimizer.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *guard;
        // What nobody runs any more (a version replaced or removed) leaves
        // the queue now, its bytes with it: a DM swapping versions quickly
        // never piles up components.
        state.waiting.retain(|_, codes| {
            codes.retain(|w| w.strong_count() > 0);
            !codes.is_empty()
        });
        let waiting = &state.waiting;
        state.queue.retain(|job| waiting.contains_key(&job.digest));
        let queued = state.waiting.contains_key(digest);
        let held: usize = state.queue.iter().map(|job| job.bytes.len()).sum();
        let full = state.queue.len() >= MAX_QUEUED || held + bytes.len() > MAX_QUEUED_BYTES;
        if !queued && !state.queue.is_empty() && full {
            let (n, mib) = (state.queue.len(), held >> 20);
            tracing::warn!(
                target: "toolhost::compile",
                plugin = name,
                "{n} plugins ({mib} MiB) wait for their optimized code already: plugin {name} stays on quick-compiled code (loading it again once they are done queues it)"
            );
            return;
        }
        state.waiting.entry(digest.to_string()).or_default().push(Arc::downgrade(code));
        if !queued {
            state.queue.push_back(Job { name: name.to_string(), digest: digest.to_string(), bytes });
        }
        if !state.working {
            state.working = true;
            let inner = Arc::downgrade(&self.inner);
            let spawned =
                std::thread::Builder::new().name("toolhost-optimize".into()).spawn(move || optimize_queue(&inner));
            if let Err(e) = spawned {
                state.working = false;
                tracing::warn!(error = %e, "cannot start the background optimizer: plugins stay on fast code");
            }
        }
    }

    /// Plugins whose optimized code is queued or being compiled now.
    pub fn optimizing_now(&self) -> usize {
        self.inner.optimizer.pending()
    }
}

/// The optimizer thread: works through the queue, then ends. Holds the
/// runtime only while compiling (a runtime dropped meanwhile ends it).
fn optimize_queue(inner: &Weak<Inner>) {
    // Below the threads serving calls: a background compile may take a
    // core for many seconds. Linux applies this to the calling thread.
    let _ = rustix::process::setpriority_process(None, 10);
    loop {
        let Some(rt) = inner.upgrade().map(|inner| Runtime { inner }) else { return };
        let job = {
            let mut state = rt.inner.optimizer.state.lock().unwrap_or_else(|p| p.into_inner());
            let next = loop {
                match state.queue.pop_front() {
                    None => break None,
                    // Nobody runs it any more (removed, replaced): skip it.
                    Some(job) if !alive(state.waiting.get(&job.digest)) => {
                        state.waiting.remove(&job.digest);
                    }
                    Some(job) => break Some(job),
                }
            };
            if next.is_none() {
                state.working = false;
            }
            next
        };
        let Some(job) = job else { return };
        optimize(&rt, &job);
    }
}

fn alive(codes: Option<&Vec<Weak<Code>>>) -> bool {
    codes.is_some_and(|c| c.iter().any(|w| w.strong_count() > 0))
}

/// Compiles one component optimized, caches it (dropping its fast entry),
/// and switches every plugin still running it fast.
fn optimize(rt: &Runtime, job: &Job) {
    let started = Instant::now();
    tracing::info!(
        target: "toolhost::compile",
        plugin = job.name,
        kib = job.bytes.len() / 1024,
        "optimizing plugin {} in the background (it serves on quick-compiled code meanwhile)",
        job.name
    );
    let switched = rt.compile_optimized_in_background(&job.name, &job.digest, &job.bytes).and_then(|component| {
        let pre = rt.inner.linker.instantiate_pre(&component).map_err(|e| format!("{e:#}"))?;
        PluginPre::new(pre).map_err(|e| format!("{e:#}"))
    });
    let codes = {
        let mut state = rt.inner.optimizer.state.lock().unwrap_or_else(|p| p.into_inner());
        state.waiting.remove(&job.digest).unwrap_or_default()
    };
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match switched {
        Ok(pre) => {
            let mut n = 0;
            for code in codes.iter().filter_map(Weak::upgrade) {
                code.switch(pre.clone());
                n += 1;
            }
            // Said only where a plugin switched (not for a version replaced
            // meanwhile: its code is cached for a later load all the same).
            if n > 0 {
                tracing::info!(
                    target: "toolhost::compile",
                    plugin = job.name,
                    ms,
                    sha256 = job.digest,
                    "plugin {} runs on optimized code now (compiled in the background in {ms} ms)",
                    job.name
                );
            } else {
                tracing::debug!(
                    plugin = job.name,
                    ms,
                    sha256 = job.digest,
                    "optimized code of a version no longer loaded: cached"
                );
            }
        }
        Err(e) => tracing::warn!(
            target: "toolhost::compile",
            plugin = job.name,
            error = %e,
            "the background optimized compile of plugin {} failed: it stays on fast code",
            job.name
        ),
    }
}
