//! The epoch ticker: advances the engine's epoch every [`TICK`] while calls
//! are in flight, so epoch deadlines fire within one tick of the time asked.
//!
//! Ticks are scheduled against absolute time (a naive `sleep(1ms)` loop drifts
//! about 10% late on this kind of machine), and the thread parks while no
//! call runs, so an idle host costs nothing.
//!
//! Calls in flight are counted in a [`Striped`] counter (cache-line-sized
//! counters, one per caller thread, round robin), not in one shared counter: entering and
//! leaving a call then writes a line no other caller writes, and callers on
//! different cores never wait for each other here. The ticker sums the
//! stripes once per tick. Waking a parked ticker is the classic two-flag
//! handshake (a caller counts itself, then reads `parked`; the ticker sets
//! `parked`, then sums the stripes; both sequentially consistent), so a call
//! never runs unticked.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use toolhost_base::stripes::{Striped, stripe};
use wasmtime::{Engine, EngineWeak};

/// One epoch tick.
pub const TICK: Duration = Duration::from_millis(1);

/// Ticks the ticker keeps running with no call in flight before it parks:
/// under a steady stream of short calls it stays awake instead of being
/// woken (a futex wake and a context switch) for every call.
const IDLE_TICKS_BEFORE_PARK: u32 = 50;

struct Shared {
    /// Calls in flight, by caller thread's stripe.
    inflight: Striped<AtomicUsize>,
    /// Set by the ticker just before it parks; a caller that sees it
    /// unparks the ticker.
    parked: AtomicBool,
    stop: AtomicBool,
    /// The engine ticked beside the runtime's own (the one running Winch's
    /// fast code), once it is made.
    other: std::sync::OnceLock<EngineWeak>,
}

impl Shared {
    /// Calls in flight now.
    fn inflight(&self) -> usize {
        self.inflight.iter().map(|n| n.load(Ordering::SeqCst)).sum()
    }
}

/// Owns the ticker thread; stops it on drop.
pub(crate) struct Ticker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Keeps the ticker running while alive: one per call in flight (and the
/// stripe it counted itself in).
pub(crate) struct TickGuard<'a>(&'a Ticker, usize);

impl Ticker {
    pub(crate) fn start(engine: &Engine) -> Ticker {
        let shared = Arc::new(Shared {
            inflight: Default::default(),
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            other: Default::default(),
        });
        let weak = Arc::downgrade(&shared);
        let engine = engine.weak();
        let thread = thread::Builder::new()
            .name("toolhost-epoch".into())
            .spawn(move || run(weak, engine))
            .expect("spawn epoch ticker thread");
        Ticker { shared, thread: Some(thread) }
    }

    /// Ticks `engine` too, at the same pace (one other engine at most: the
    /// first given stays).
    pub(crate) fn add(&self, engine: &Engine) {
        let _ = self.shared.other.set(engine.weak());
    }

    /// Marks a call as in flight until the guard drops.
    pub(crate) fn enter(&self) -> TickGuard<'_> {
        let i = stripe();
        self.shared.inflight.get(i).fetch_add(1, Ordering::SeqCst);
        if self.shared.parked.load(Ordering::SeqCst)
            && let Some(t) = &self.thread
        {
            t.thread().unpark();
        }
        TickGuard(self, i)
    }
}

impl Drop for TickGuard<'_> {
    fn drop(&mut self) {
        self.0.shared.inflight.get(self.1).fetch_sub(1, Ordering::Release);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn run(shared: Weak<Shared>, engine: EngineWeak) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        if s.inflight() == 0 {
            // Say so, then look again: a call that counted itself before
            // this store is seen by the sum; one after it sees `parked`.
            s.parked.store(true, Ordering::SeqCst);
            if s.inflight() == 0 && !s.stop.load(Ordering::SeqCst) {
                drop(s);
                thread::park();
            } else {
                s.parked.store(false, Ordering::SeqCst);
            }
            continue;
        }
        s.parked.store(false, Ordering::SeqCst);
        drop(s);
        // Tick on an absolute schedule while calls run; after oversleeping,
        // catch up with one tick per missed slot so deadlines stay on time.
        let mut next = Instant::now() + TICK;
        let mut idle = 0;
        loop {
            let now = Instant::now();
            if next > now {
                thread::sleep(next - now);
            }
            let Some(engine) = engine.upgrade() else { return };
            let now = Instant::now();
            let mut ticks = 0;
            while next <= now {
                engine.increment_epoch();
                next += TICK;
                ticks += 1;
            }
            let Some(s) = shared.upgrade() else { return };
            if let Some(other) = s.other.get().and_then(EngineWeak::upgrade) {
                for _ in 0..ticks {
                    other.increment_epoch();
                }
            }
            if s.stop.load(Ordering::SeqCst) {
                return;
            }
            if s.inflight() == 0 {
                idle += 1;
                if idle >= IDLE_TICKS_BEFORE_PARK {
                    break;
                }
            } else {
                idle = 0;
            }
        }
    }
}
