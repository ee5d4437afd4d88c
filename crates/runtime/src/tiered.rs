//! Fast code first, optimized code later: how a component nobody compiled
//! before becomes callable in a fraction of the time its optimized
//! compile takes.
//!
//! With [`CompileMode::FastFirst`] (the default) a component that is
//! neither precompiled by the build nor in the compile cache is compiled
//! by Cranelift with optimization off ([`CodeKind::Fast`]) and serves
//! calls at once. One background thread, at a lower scheduling priority
//! and on one core (wasmtime's parallel compilation off), then compiles
//! it the usual way ([`CodeKind::Optimized`]); when that is ready every
//! plugin running that component switches over between calls: a call
//! takes the code in force when it starts ([`Code::pre`]) and keeps it
//! to its end.
//!
//! Why Cranelift without optimization and not Winch, wasmtime's baseline
//! compiler: the same compiler's code, checked by the same verifier and
//! the same sandboxing (bounds checks, fuel, epoch checks), with only the
//! mid-end's rewrites off; the optimization level is a setting wasmtime
//! documents as not changing semantics (its artifact compatibility check
//! ignores it). Winch lacks features components use (reference types,
//! tail calls) and had four advisories in 2026, two of them sandbox
//! escapes. Cranelift's single-pass register allocator, the other fast
//! option, is documented by wasmtime as not for security-sensitive uses.
//! See BENCHMARKS.md for what each kind costs.
//!
//! Both kinds are cached apart (`<sha256>.cwasm` and
//! `<sha256>.fast.cwasm`): a restart uses the optimized code when it is
//! cached, else the fast code (and optimizes again in the background).

use crate::bindings::PluginPre;
use crate::state::State;
use crate::{Inner, Runtime};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// Which code a plugin runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
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
        let mut state = optimizer.state.lock().unwrap_or_else(|p| p.into_inner());
        let waiting = state.waiting.entry(digest.to_string()).or_default();
        waiting.retain(|w| w.strong_count() > 0);
        let queued = !waiting.is_empty();
        waiting.push(Arc::downgrade(code));
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
            tracing::info!(
                target: "toolhost::compile",
                plugin = job.name,
                ms,
                "plugin {} runs on optimized code now (compiled in the background in {ms} ms; {n} switched)",
                job.name
            );
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
