//! The stdio session's call lane: fast wasm calls run on the thread that
//! drives the session, with no thread hop.
//!
//! A wasm call is synchronous. On a tokio worker it may not run (wasmtime-
//! wasi's sync host functions `block_on` the ambient runtime, which panics
//! there), so calls go to the blocking pool: a hand-off and two futex
//! wake-ups per call, tens of microseconds on a virtualised 2-core machine,
//! more than a fast tool's whole call. `serve --stdio` instead drives its
//! session on a current-thread runtime from a thread of its own
//! ([`LaneDriver::run`]); a call admitted to the lane leaves that runtime's
//! `block_on`, runs on the same thread outside any runtime (as a pool
//! thread would), and the session resumes with its result.
//!
//! While a lane call runs, the session reads and writes nothing, so only
//! calls measured fast are admitted ([`InlineGate`]): a wasm tool (never an
//! external server's) whose deadline is at most [`INLINE_MAX_DEADLINE`] and
//! whose last [`INLINE_AFTER`] calls each took at most [`INLINE_FAST`]; one
//! slow call sends the tool back to the pool. One call at a time: others in
//! flight go to the pool meanwhile, so concurrent calls still use every core.
//! A plugin's reports (progress, log) are forwarded after a lane call, still
//! before its response.

use crate::Host;
use crate::tool::ProviderKind;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The longest deadline of a call run in the lane (the default FAST
/// ceiling): the most one call can hold the session, the epoch deadline
/// trapping a guest that runs past it.
pub const INLINE_MAX_DEADLINE: Duration = Duration::from_millis(500);
/// A call that took longer than this is not fast.
pub const INLINE_FAST: Duration = Duration::from_millis(1);
/// Consecutive fast calls of a tool before its calls may run in the lane.
pub const INLINE_AFTER: u32 = 32;

type Job = Box<dyn FnOnce() + Send>;

/// Where a session hands calls to the thread driving it.
#[derive(Debug)]
pub struct CallLane {
    jobs: mpsc::UnboundedSender<Job>,
    /// The runtime a call's blocking host functions use.
    calls: tokio::runtime::Handle,
    /// A call is in the lane now.
    busy: AtomicBool,
    /// Calls the lane has run.
    ran: AtomicU64,
    gate: InlineGate,
}

/// Drives a session's runtime and runs the lane's calls between its polls.
#[derive(Debug)]
pub struct LaneDriver {
    jobs: mpsc::UnboundedReceiver<Job>,
    /// The runtime a call's blocking host functions use (the host's main
    /// runtime), entered while a call runs.
    calls: tokio::runtime::Handle,
}

/// A lane and its driver; `calls` is the runtime a lane call's host
/// functions may block on (never the session's own).
pub fn lane(calls: tokio::runtime::Handle) -> (std::sync::Arc<CallLane>, LaneDriver) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        std::sync::Arc::new(CallLane {
            jobs: tx,
            calls: calls.clone(),
            busy: AtomicBool::new(false),
            ran: AtomicU64::new(0),
            gate: InlineGate::default(),
        }),
        LaneDriver { jobs: rx, calls },
    )
}

impl CallLane {
    /// Runs `call` (of the tool `name`) in the lane when the gate admits it
    /// and the lane is free; otherwise gives it back, for the caller to run
    /// elsewhere. The result comes back through the receiver; a call that
    /// panicked (or a session that ended first) drops its sender.
    pub fn try_run<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(
        self: &std::sync::Arc<Self>,
        host: &Host,
        name: &str,
        call: F,
    ) -> Result<oneshot::Receiver<T>, F> {
        if self.jobs.is_closed() || !self.gate.admits(host, name) || self.busy.swap(true, Ordering::AcqRel) {
            return Err(call);
        }
        let (tx, rx) = oneshot::channel();
        let lane = self.clone();
        let tool = name.to_string();
        let job: Job = Box::new(move || {
            /// Frees the lane however the call ends.
            struct Free(std::sync::Arc<CallLane>);
            impl Drop for Free {
                fn drop(&mut self) {
                    self.0.busy.store(false, Ordering::Release);
                }
            }
            let free = Free(lane);
            free.0.ran.fetch_add(1, Ordering::Relaxed);
            let started = std::time::Instant::now();
            // A panic drops `tx`: the session answers as for a pool task that panicked.
            if let Ok(out) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
                let _ = tx.send(out);
            }
            free.0.gate.record(&tool, started.elapsed());
        });
        // The driver gone meanwhile (the session is ending): the job drops
        // with its sender, and the call is answered as failed.
        let _ = self.jobs.send(job);
        Ok(rx)
    }

    /// The runtime a call's blocking host functions use (never the
    /// session's own, which only the lane's thread drives).
    pub fn calls(&self) -> &tokio::runtime::Handle {
        &self.calls
    }

    /// How many calls the lane has run.
    pub fn calls_run(&self) -> u64 {
        self.ran.load(Ordering::Relaxed)
    }

    /// Counts a call of `name` made elsewhere (the pool), so a tool earns
    /// its place in the lane.
    pub fn record(&self, name: &str, took: Duration) {
        self.gate.record(name, took);
    }
}

impl LaneDriver {
    /// Runs `rt` until `until` completes, running each lane call on this
    /// thread, outside the runtime, as it arrives.
    pub fn run<F: Future>(mut self, rt: &tokio::runtime::Runtime, until: F) -> F::Output {
        let mut until = std::pin::pin!(until);
        loop {
            let next = rt.block_on(async {
                tokio::select! {
                    biased;
                    out = &mut until => Ok(out),
                    job = self.jobs.recv() => Err(job),
                }
            });
            match next {
                Ok(out) => return out,
                Err(Some(job)) => {
                    let _calls = self.calls.enter();
                    job();
                }
                // Every lane is gone: no more calls can come.
                Err(None) => return rt.block_on(until),
            }
        }
    }
}

/// Which tools have earned the lane: consecutive fast calls per tool.
#[derive(Debug, Default)]
struct InlineGate {
    streaks: Mutex<HashMap<String, u32>>,
}

impl InlineGate {
    /// Whether a call of `name` may run in the lane now.
    fn admits(&self, host: &Host, name: &str) -> bool {
        let catalog = host.registry().snapshot();
        let Some(tool) = catalog.get(name) else { return false };
        if tool.provider.kind() != ProviderKind::Wasm {
            return false;
        }
        let fast = self.streaks.lock().unwrap_or_else(|p| p.into_inner()).get(name).is_some_and(|n| *n >= INLINE_AFTER);
        // A long tool (`budget.long_tools`) may run past DEEP for some
        // agents: never in the lane, whatever its streak.
        fast && !host.budget().is_long(name) && host.budget().timeout_for(&tool.def) <= INLINE_MAX_DEADLINE
    }

    /// Counts a call of `name` that took `took`.
    fn record(&self, name: &str, took: Duration) {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        if took <= INLINE_FAST {
            match streaks.get_mut(name) {
                Some(n) => {
                    *n = n.saturating_add(1);
                    if *n == INLINE_AFTER {
                        tracing::debug!(tool = name, "measured fast: its calls now run on the session's thread");
                    }
                }
                None => {
                    // Bounded: a flood of made-up names cannot grow it.
                    if streaks.len() >= 4096 {
                        streaks.clear();
                    }
                    streaks.insert(name.to_string(), 1);
                }
            }
        } else if let Some(n) = streaks.get_mut(name) {
            if *n >= INLINE_AFTER {
                tracing::debug!(
                    tool = name,
                    took_ms = took.as_secs_f64() * 1e3,
                    "slow call: back to the blocking pool"
                );
            }
            *n = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane call runs on the driving thread, outside any runtime (where a
    /// blocking host function may `block_on`), and the session goes on.
    #[test]
    fn a_lane_job_runs_on_the_driving_thread_outside_the_runtime() {
        let main = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let (lane, driver) = lane(main.handle().clone());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let me = std::thread::current().id();
        let out = driver.run(&rt, async move {
            let (tx, rx) = oneshot::channel();
            lane.busy.store(true, Ordering::Release);
            lane.jobs
                .send(Box::new(move || {
                    let inside = tokio::runtime::Handle::try_current().map(|h| h.block_on(async { 7 }));
                    let _ = tx.send((std::thread::current().id(), inside.ok()));
                }))
                .unwrap();
            rx.await.unwrap()
        });
        assert_eq!(out, (me, Some(7)));
    }

    #[test]
    fn one_slow_call_ends_a_streak() {
        let g = InlineGate::default();
        for _ in 0..INLINE_AFTER {
            g.record("roll", Duration::from_micros(20));
        }
        assert_eq!(g.streaks.lock().unwrap()["roll"], INLINE_AFTER);
        g.record("roll", Duration::from_millis(5));
        assert_eq!(g.streaks.lock().unwrap()["roll"], 0);
    }
}
