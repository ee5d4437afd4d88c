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
//! `block_on`, runs on the same thread outside the session's runtime, with
//! the host's main runtime entered (as on a pool thread), and the session
//! resumes with its result.
//!
//! While a lane call runs, the session reads and writes nothing, so only
//! calls measured fast are admitted (`InlineGate`): a wasm tool (never an
//! external server's) whose deadline is at most [`INLINE_MAX_DEADLINE`] and
//! whose last [`INLINE_AFTER`] calls each took at most [`INLINE_FAST`]; one
//! slow call sends the tool back to the pool.
//!
//! Calls in flight together queue in the lane, up to [`LANE_DEPTH`], and
//! run [`LANE_TURN`] at a time; then the session resumes, their results are
//! delivered inside its runtime (a wake from outside would cost an eventfd
//! write and an `epoll_wait` wake-up), and their responses go out in one
//! write. Each call's audit record is written when it returns, as on the
//! pool.
//!
//! When a queued call's turn comes the gate is asked again (the tool may
//! have turned slow while it waited, or a reload made it long or its
//! deadline longer), and its caller must still be waiting (not cancelled);
//! otherwise it goes to the pool, so one slow call holds the session once,
//! not once per call queued behind it. Calls past the depth go to the pool
//! and use the other cores.
//!
//! A plugin's reports (progress, log) are forwarded after a lane call, still
//! before its response; a queued call sent to the pool at its turn has them
//! forwarded as they come.
//!
//! On `serve --stdio` a call usually reaches the lane straight from the
//! transport ([`crate::server::DirectFront`]): reserved with
//! [`CallLane::reserve`], queued with an [`Answer`] that writes its
//! response into the transport's output. A call rmcp's service handles
//! (`McpFront::call_tool`) uses [`CallLane::try_run`] and a oneshot channel.

use crate::Pipeline;
use crate::tool::ProviderKind;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
/// Calls queued in the lane at most (the rest go to the pool).
pub const LANE_DEPTH: usize = 16;
/// Queued calls run back to back before the session resumes to answer
/// them. One per turn pays a turn's fixed cost (re-entering the runtime,
/// one write, one wake-up of the client) per call; more per turn hold
/// every answer of the turn until its last call is done, while the client
/// waits. With calls taken around rmcp's service (`DirectFront`), one per
/// turn measured best with 8 calls in flight (BENCHMARKS.md: 1, 2, 4 and
/// 8 per turn); two did while rmcp's service ran each request.
pub const LANE_TURN: usize = 1;

/// A queued call: runs on the driver's thread (or hands itself to the
/// pool) and leaves the delivery of its result in `done`.
type Job = Box<dyn FnOnce(&mut Vec<Delivery>) + Send>;
/// Sends a lane call's result to the task awaiting it. Run by the driver
/// inside the session's runtime: the task is then queued on the spot, where
/// a wake from outside would write the runtime's eventfd (a syscall and an
/// `epoll_wait` wake-up per call).
type Delivery = Box<dyn FnOnce() + Send>;

/// Where a lane call's result goes.
pub trait Answer<T>: Send + 'static {
    /// Whether the caller still waits for the result (one that gave up,
    /// cancelled, does not: its call leaves the lane for the pool).
    fn wanted(&self) -> bool;
    /// Hands the result over; `None`: the call panicked. An answer dropped
    /// without this was never run (the session ended first).
    fn give(self, result: Option<T>);
}

impl<T: Send + 'static> Answer<T> for oneshot::Sender<T> {
    fn wanted(&self) -> bool {
        !self.is_closed()
    }

    /// A panicked call drops the sender: the receiver sees a closed channel.
    fn give(self, result: Option<T>) {
        if let Some(out) = result {
            let _ = self.send(out);
        }
    }
}

/// Where a session hands calls to the thread driving it.
#[derive(Debug)]
pub struct CallLane {
    jobs: mpsc::UnboundedSender<Job>,
    /// The runtime a call's blocking host functions use.
    calls: tokio::runtime::Handle,
    /// Calls queued or running in the lane.
    queued: AtomicUsize,
    /// Calls the lane has run.
    ran: AtomicU64,
    gate: InlineGate,
}

/// A place in the lane's queue, left however the call ends (or when its
/// job, or its unused ticket, is dropped).
#[derive(Debug)]
struct Place(std::sync::Arc<CallLane>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A queued call's check at its turn: may it still run in the lane?
type Still = Box<dyn FnOnce(&CallLane, &str) -> bool + Send>;

/// A place reserved in the lane for one call ([`CallLane::reserve`]); it
/// is given back when dropped unused.
pub struct Ticket {
    place: Place,
    tool: String,
    /// Whether the call may still run in the lane when its turn comes.
    still: Still,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket").field("tool", &self.tool).finish_non_exhaustive()
    }
}

impl Ticket {
    /// Queues `call` in its place, its result for `answer`: handed over
    /// inside the session's runtime for a call run in the lane, on a pool
    /// thread for one sent to the pool at its turn.
    pub fn queue<T, F, A>(self, call: F, answer: A)
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
        A: Answer<T>,
    {
        let Ticket { place, tool, still } = self;
        let lane = place.0.clone();
        let job: Job = Box::new(move |done: &mut Vec<Delivery>| {
            let lane = place.0.clone();
            // Its turn. To the pool instead when the caller gave up
            // (cancelled: it still runs, to its deadline, as a pool call
            // does, but not while the session waits) or when the lane would
            // no longer take it: the tool turned slow while it waited (a
            // call before it took long), or a reload made it long or its
            // deadline longer.
            let wanted = answer.wanted();
            if !wanted || !still(&lane, &tool) {
                // Nobody waits for a cancelled call's answer: it goes now.
                let answer = wanted.then_some(answer);
                drop(place);
                tracing::debug!(tool, "a queued call leaves the lane for the blocking pool");
                // On the driver's thread the calls' runtime is entered.
                drop(tokio::task::spawn_blocking(move || {
                    let started = std::time::Instant::now();
                    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).ok();
                    lane.gate.record(&tool, started.elapsed());
                    if let Some(answer) = answer {
                        answer.give(out);
                    }
                }));
                return;
            }
            lane.ran.fetch_add(1, Ordering::Relaxed);
            let started = std::time::Instant::now();
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).ok();
            lane.gate.record(&tool, started.elapsed());
            drop(place);
            done.push(Box::new(move || answer.give(out)));
        });
        // The driver gone meanwhile (the session is ending): the job drops
        // with its answer and its place, and the call is not answered.
        let _ = lane.jobs.send(job);
    }
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
            queued: AtomicUsize::new(0),
            ran: AtomicU64::new(0),
            gate: InlineGate::default(),
        }),
        LaneDriver { jobs: rx, calls },
    )
}

impl CallLane {
    /// Queues `call` (of the tool `name`, by `agent`) in the lane when the gate admits
    /// it and the lane has room; otherwise gives it back, for the caller to
    /// run elsewhere. The result comes back through the receiver; a call
    /// that panicked (or a session that ended first) drops its sender.
    pub fn try_run<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(
        self: &std::sync::Arc<Self>,
        host: &std::sync::Arc<Pipeline>,
        agent: Option<&str>,
        name: &str,
        call: F,
    ) -> Result<oneshot::Receiver<T>, F> {
        let Some(ticket) = self.reserve(host, agent, name) else { return Err(call) };
        let (tx, rx) = oneshot::channel();
        ticket.queue(call, tx);
        Ok(rx)
    }

    /// A place in the lane for a call of the tool `name` by `agent` (its
    /// deadline is the one `agent` gets), when the gate admits it and the
    /// lane has room.
    pub fn reserve(
        self: &std::sync::Arc<Self>,
        host: &std::sync::Arc<Pipeline>,
        agent: Option<&str>,
        name: &str,
    ) -> Option<Ticket> {
        if self.jobs.is_closed() || !self.gate.admits(host, agent, name) {
            return None;
        }
        let host = host.clone();
        let agent = agent.map(str::to_string);
        self.reserve_with(name, move |lane: &CallLane, tool: &str| lane.gate.admits(&host, agent.as_deref(), tool))
    }

    /// A place for a call the gate admitted, when the lane has room. When
    /// its turn comes, `still` says whether it may still run in the lane.
    fn reserve_with<S>(self: &std::sync::Arc<Self>, name: &str, still: S) -> Option<Ticket>
    where
        S: FnOnce(&CallLane, &str) -> bool + Send + 'static,
    {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= LANE_DEPTH {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Ticket { place: Place(self.clone()), tool: name.to_string(), still: Box::new(still) })
    }

    /// Queues a call the gate admitted, when the lane has room, its result
    /// through a oneshot channel (the tests' way in).
    #[cfg(test)]
    fn queue<T, F, S>(self: &std::sync::Arc<Self>, name: &str, still: S, call: F) -> Result<oneshot::Receiver<T>, F>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
        S: FnOnce(&CallLane, &str) -> bool + Send + 'static,
    {
        let Some(ticket) = self.reserve_with(name, still) else { return Err(call) };
        let (tx, rx) = oneshot::channel();
        ticket.queue(call, tx);
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
    /// Runs `rt` until `until` completes, running lane calls on this
    /// thread, outside `rt`, as they arrive: up to [`LANE_TURN`] queued
    /// calls back to back, then their results delivered inside `rt`, whose
    /// tasks then run (answering them) before the next calls.
    pub fn run<F: Future>(mut self, rt: &tokio::runtime::Runtime, until: F) -> F::Output {
        let mut until = std::pin::pin!(until);
        // Lane calls' instances are torn down after their answers go out
        // (`toolhost_runtime::defer_teardowns`).
        let _teardowns = toolhost_runtime::defer_teardowns();
        let mut done: Vec<Delivery> = Vec::new();
        loop {
            let next = rt.block_on(async {
                if !done.is_empty() {
                    for deliver in done.drain(..) {
                        deliver();
                    }
                    // Let the session answer them (and read what came in)
                    // before the next lane call: the client reads these
                    // responses on another core while it runs.
                    tokio::task::yield_now().await;
                    // Their instances are torn down once answered.
                    toolhost_runtime::teardown_deferred();
                }
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
                    job(&mut done);
                    // Calls queued together run LANE_TURN at a time: the
                    // session resumes, answers and reads after each turn.
                    let mut ran = 1;
                    while ran < LANE_TURN {
                        let Ok(job) = self.jobs.try_recv() else { break };
                        job(&mut done);
                        ran += 1;
                    }
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
    /// Whether a call of `name` by `agent` may run in the lane now.
    fn admits(&self, host: &Pipeline, agent: Option<&str>, name: &str) -> bool {
        let catalog = host.registry().snapshot();
        let Some(tool) = catalog.get(name) else { return false };
        // A call that may wait for its client's answer never holds the
        // thread that reads that answer.
        if tool.provider.kind() != ProviderKind::Wasm || tool.provider.may_ask() {
            return false;
        }
        let fast = self.is_fast(name);
        // A long tool (`budget.long_tools`) may run past DEEP for some
        // agents: never in the lane, whatever its streak.
        fast && !host.budget().is_long(name) && host.budget().timeout_for(&tool.def, agent) <= INLINE_MAX_DEADLINE
    }

    /// Whether `name` is still on a fast streak (a queued call's check
    /// when its turn comes).
    fn is_fast(&self, name: &str) -> bool {
        self.streaks.lock().unwrap_or_else(|p| p.into_inner()).get(name).is_some_and(|n| *n >= INLINE_AFTER)
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
            lane.queued.fetch_add(1, Ordering::AcqRel);
            lane.jobs
                .send(Box::new(move |done: &mut Vec<Delivery>| {
                    let inside = tokio::runtime::Handle::try_current().map(|h| h.block_on(async { 7 }));
                    let out = (std::thread::current().id(), inside.ok());
                    done.push(Box::new(move || {
                        let _ = tx.send(out);
                    }));
                }))
                .unwrap();
            rx.await.unwrap()
        });
        assert_eq!(out, (me, Some(7)));
    }

    /// A lane with `tool` on a fast streak and its driver, the session's
    /// runtime the driver runs, and the runtime the lane's calls use.
    struct FastLane {
        lane: std::sync::Arc<CallLane>,
        driver: LaneDriver,
        session: tokio::runtime::Runtime,
        _calls: tokio::runtime::Runtime,
    }

    fn fast_lane(tool: &str) -> FastLane {
        let calls = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let (lane, driver) = lane(calls.handle().clone());
        for _ in 0..INLINE_AFTER {
            lane.gate.record(tool, Duration::from_micros(20));
        }
        let session = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        FastLane { lane, driver, session, _calls: calls }
    }

    /// The re-check of the tests' calls: the tool's streak only.
    fn still_fast(lane: &CallLane, tool: &str) -> bool {
        lane.gate.is_fast(tool)
    }

    /// Calls in flight together all run on the driving thread, and every
    /// one is answered.
    #[test]
    fn calls_queued_together_all_run_in_the_lane() {
        let FastLane { lane, driver, session: rt, _calls } = fast_lane("roll");
        let me = std::thread::current().id();
        let queued = lane.clone();
        let threads = driver.run(&rt, async move {
            let answers: Vec<_> = (0..5)
                .map(|_| {
                    queued.queue("roll", still_fast, || std::thread::current().id()).ok().expect("room in the lane")
                })
                .collect();
            let mut threads = Vec::new();
            for a in answers {
                threads.push(a.await.unwrap());
            }
            threads
        });
        assert_eq!(threads, vec![me; 5]);
        assert_eq!(lane.calls_run(), 5);
        assert_eq!(lane.queued.load(Ordering::Acquire), 0);
    }

    /// A turn runs at most [`LANE_TURN`] calls: the session's tasks run
    /// between turns (so its answers go out while later calls wait).
    #[test]
    fn the_session_runs_between_turns() {
        let FastLane { lane, driver, session: rt, _calls } = fast_lane("roll");
        let ticks = std::sync::Arc::new(AtomicUsize::new(0));
        let queued = lane.clone();
        let seen = driver.run(&rt, async move {
            let counting = ticks.clone();
            tokio::spawn(async move {
                loop {
                    counting.fetch_add(1, Ordering::AcqRel);
                    tokio::task::yield_now().await;
                }
            });
            let answers: Vec<_> = (0..2 * LANE_TURN)
                .map(|_| {
                    let ticks = ticks.clone();
                    queued.queue("roll", still_fast, move || ticks.load(Ordering::Acquire)).ok().unwrap()
                })
                .collect();
            let mut seen = Vec::new();
            for a in answers {
                seen.push(a.await.unwrap());
            }
            seen
        });
        let (first, second) = seen.split_at(LANE_TURN);
        assert!(first.iter().all(|t| *t == first[0]), "one turn, no tick between its calls: {seen:?}");
        assert!(second.iter().all(|t| *t == second[0]), "{seen:?}");
        assert!(second[0] > first[0], "the session ran between the turns: {seen:?}");
    }

    /// A lane call's result is delivered inside the session's runtime
    /// (where waking its task queues it on the spot), not from outside.
    #[test]
    fn results_are_delivered_inside_the_sessions_runtime() {
        let FastLane { lane, driver, session: rt, _calls } = fast_lane("roll");
        let flavor = driver.run(&rt, async move {
            let (tx, rx) = oneshot::channel();
            lane.queued.fetch_add(1, Ordering::AcqRel);
            lane.jobs
                .send(Box::new(move |done: &mut Vec<Delivery>| {
                    let outside = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()).ok();
                    done.push(Box::new(move || {
                        let inside = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()).ok();
                        let _ = tx.send((outside, inside));
                    }));
                }))
                .unwrap();
            rx.await.unwrap()
        });
        assert_eq!(
            flavor,
            (Some(tokio::runtime::RuntimeFlavor::MultiThread), Some(tokio::runtime::RuntimeFlavor::CurrentThread)),
            "the call ran with the host's runtime entered, its result was delivered in the session's"
        );
    }

    /// A call queued behind one that turned out slow goes to the pool when
    /// its turn comes: the session waits for one slow call, not for each.
    #[test]
    fn a_call_queued_behind_a_slow_one_goes_to_the_pool() {
        let FastLane { lane, driver, session: rt, _calls } = fast_lane("roll");
        let me = std::thread::current().id();
        let queued = lane.clone();
        let threads = driver.run(&rt, async move {
            let slow = queued
                .queue("roll", still_fast, || {
                    std::thread::sleep(INLINE_FAST * 3);
                    std::thread::current().id()
                })
                .ok()
                .unwrap();
            let behind: Vec<_> = (0..2)
                .map(|_| queued.queue("roll", still_fast, || std::thread::current().id()).ok().unwrap())
                .collect();
            let mut threads = vec![slow.await.unwrap()];
            for a in behind {
                threads.push(a.await.unwrap());
            }
            threads
        });
        assert_eq!(threads[0], me, "the slow call itself ran in the lane");
        assert!(threads[1..].iter().all(|t| *t != me), "{threads:?}");
        assert_eq!(lane.calls_run(), 1);
    }

    /// Past its depth the lane gives calls back, for the pool.
    #[test]
    fn a_full_lane_gives_calls_back() {
        let FastLane { lane, driver, _calls, .. } = fast_lane("roll");
        let held: Vec<_> = (0..LANE_DEPTH).map(|_| lane.queue("roll", still_fast, || ()).ok().unwrap()).collect();
        assert!(lane.queue("roll", still_fast, || ()).is_err());
        drop(held);
        // Calls dropped unrun (the session ended) give their places back.
        drop(driver);
        assert_eq!(lane.queued.load(Ordering::Acquire), 0);
    }

    /// A call whose caller gave up (cancelled) while it waited does not
    /// hold the session: it runs on the pool.
    #[test]
    fn a_cancelled_queued_call_runs_on_the_pool() {
        let FastLane { lane, driver, session: rt, _calls } = fast_lane("roll");
        let me = std::thread::current().id();
        let queued = lane.clone();
        let (ran_on, ran) = std::sync::mpsc::channel();
        driver.run(&rt, async move {
            let cancelled = queued
                .queue("roll", still_fast, move || {
                    let _ = ran_on.send(std::thread::current().id());
                })
                .ok()
                .unwrap();
            drop(cancelled);
            let after = queued.queue("roll", still_fast, || ()).ok().unwrap();
            after.await.unwrap();
        });
        let thread = ran.recv_timeout(Duration::from_secs(10)).expect("the cancelled call still ran");
        assert_ne!(thread, me);
        assert_eq!(lane.calls_run(), 1, "only the call still awaited ran in the lane");
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
