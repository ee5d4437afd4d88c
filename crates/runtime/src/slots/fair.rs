//! Fair shares of one plugin's slots among its callers.
//!
//! **The rule.** A plugin runs at most `limit` calls at once
//! (`limits.plugin_concurrency`). The last [`FairSlots::reserve`] free
//! slots (an eighth of the limit, at least one) are kept for *light*
//! callers: those holding fewer than [`FairSlots::light`] of the plugin's
//! slots (a quarter of the reserve, at least one). Any caller takes a slot
//! while more than the reserve is free; past that, only light callers do.
//! So two agents flooding a slow plugin cannot lock a third one out: its
//! calls, one or two at a time, always find a reserved slot, unless as many
//! light callers hold the whole reserve.
//!
//! A call that cannot take a slot waits, up to `limits.queue_wait_ms`
//! (inside its deadline), in a queue of at most `limit` calls; each slot
//! given back goes to the waiting call whose caller holds the fewest slots
//! (the oldest first among equals) that the rule admits, before any newcomer.
//! So flooders converge on equal shares among themselves. A call that waits
//! in vain, or finds the queue full, is refused with `capacity_exceeded`.
//!
//! Callers are agents by name, and the operator.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a slot was not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The call waited its whole allowance.
    Waited(Duration),
    /// The queue was full: refused at once.
    QueueFull,
}

#[derive(Debug)]
struct State {
    limit: u32,
    in_use: u32,
    /// Slots held by each caller (`None`: the operator).
    held: HashMap<Option<String>, u32>,
    /// Waiting calls, oldest first.
    waiting: VecDeque<Arc<Waiter>>,
}

#[derive(Debug)]
struct Waiter {
    caller: Option<String>,
    /// Set under the state's lock when a slot is handed over.
    granted: std::sync::atomic::AtomicBool,
}

/// A plugin's slots, shared fairly among its callers.
#[derive(Debug)]
pub struct FairSlots {
    state: Mutex<State>,
    /// Woken whenever slots are handed to waiting calls.
    handed: Condvar,
}

impl FairSlots {
    /// At most `limit` holders at once (at least one).
    pub fn new(limit: u32) -> Arc<FairSlots> {
        Arc::new(FairSlots {
            state: Mutex::new(State { limit: limit.max(1), in_use: 0, held: HashMap::new(), waiting: VecDeque::new() }),
            handed: Condvar::new(),
        })
    }

    /// Free slots kept for light callers under `limit`.
    pub fn reserve(limit: u32) -> u32 {
        (limit / 8).max(1)
    }

    /// Slots a caller may hold and still count as light, under `limit`.
    pub fn light(limit: u32) -> u32 {
        (FairSlots::reserve(limit) / 4).max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the rule admits a caller holding `held` slots now.
    fn admits(s: &State, held: u32) -> bool {
        let free = s.limit.saturating_sub(s.in_use);
        free > FairSlots::reserve(s.limit) || (free > 0 && held < FairSlots::light(s.limit))
    }

    fn take(s: &mut State, caller: &Option<String>) {
        s.in_use += 1;
        *s.held.entry(caller.clone()).or_default() += 1;
    }

    /// Takes a slot for `caller` (`None`: the operator), waiting up to
    /// `wait` for one. The slot is given back when the guard drops.
    pub fn take_within(self: &Arc<Self>, caller: Option<&str>, wait: Duration) -> Result<FairSlot, Refusal> {
        let caller = caller.map(str::to_string);
        let mut s = self.lock();
        // Waiting calls are never ones the rule admits (each slot given
        // back is handed over first): a newcomer it admits goes ahead.
        if FairSlots::admits(&s, s.held_by(&caller)) {
            FairSlots::take(&mut s, &caller);
            return Ok(FairSlot { slots: self.clone(), caller, waited: Duration::ZERO });
        }
        if wait.is_zero() {
            return Err(Refusal::Waited(Duration::ZERO));
        }
        if s.waiting.len() >= s.limit as usize {
            return Err(Refusal::QueueFull);
        }
        let me = Arc::new(Waiter { caller: caller.clone(), granted: false.into() });
        s.waiting.push_back(me.clone());
        let asked = Instant::now();
        let until = asked + wait;
        loop {
            if me.granted.load(std::sync::atomic::Ordering::Acquire) {
                return Ok(FairSlot { slots: self.clone(), caller, waited: asked.elapsed() });
            }
            let now = Instant::now();
            if now >= until {
                s.waiting.retain(|w| !Arc::ptr_eq(w, &me));
                return Err(Refusal::Waited(wait));
            }
            s = self.handed.wait_timeout(s, until - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Hands free slots to the waiting calls the rule admits, fewest held
    /// first (oldest first among equals).
    fn hand_over(&self, s: &mut State) {
        let mut handed = false;
        loop {
            let best = s
                .waiting
                .iter()
                .enumerate()
                .filter(|(_, w)| FairSlots::admits(s, s.held_by(&w.caller)))
                .min_by_key(|(i, w)| (s.held_by(&w.caller), *i))
                .map(|(i, _)| i);
            let Some(i) = best else { break };
            let w = s.waiting.remove(i).expect("an index found above");
            FairSlots::take(s, &w.caller);
            w.granted.store(true, std::sync::atomic::Ordering::Release);
            handed = true;
        }
        if handed {
            self.handed.notify_all();
        }
    }

    /// Slots taken now.
    pub fn in_use(&self) -> u32 {
        self.lock().in_use
    }

    /// Calls waiting now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// The limit.
    pub fn limit(&self) -> u32 {
        self.lock().limit
    }

    /// Changes the limit (a config reload). Holders past a lowered limit
    /// keep their slots; new ones wait until the count is under it.
    pub fn set_limit(&self, limit: u32) {
        let mut s = self.lock();
        s.limit = limit.max(1);
        self.hand_over(&mut s);
    }
}

impl State {
    fn held_by(&self, caller: &Option<String>) -> u32 {
        self.held.get(caller).copied().unwrap_or(0)
    }
}

/// A taken slot; dropping it gives it back (to a waiting call, if the rule
/// admits one).
#[derive(Debug)]
pub struct FairSlot {
    slots: Arc<FairSlots>,
    caller: Option<String>,
    /// How long the call waited for it (zero when one was free).
    waited: Duration,
}

impl FairSlot {
    /// How long the call waited for this slot (zero when one was free).
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

impl Drop for FairSlot {
    fn drop(&mut self) {
        let mut s = self.slots.lock();
        s.in_use -= 1;
        if let Some(n) = s.held.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                s.held.remove(&self.caller);
            }
        }
        self.slots.hand_over(&mut s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: Duration = Duration::ZERO;

    #[test]
    fn the_reserve_is_an_eighth_and_light_callers_hold_a_quarter_of_it() {
        assert_eq!((FairSlots::reserve(64), FairSlots::light(64)), (8, 2));
        assert_eq!((FairSlots::reserve(1), FairSlots::light(1)), (1, 1));
        assert_eq!((FairSlots::reserve(4), FairSlots::light(4)), (1, 1));
    }

    #[test]
    fn two_flooders_leave_the_reserve_to_a_third_caller() {
        let s = FairSlots::new(64);
        let mut held = Vec::new();
        for i in 0.. {
            let who = if i % 2 == 0 { "alice" } else { "bob" };
            match s.take_within(Some(who), NOW) {
                Ok(slot) => held.push(slot),
                Err(_) => break,
            }
        }
        assert_eq!(held.len(), 56, "the flood stops at the reserve");
        let carol = s.take_within(Some("carol"), NOW).expect("a light caller takes a reserved slot");
        let dora = s.take_within(Some("dora"), NOW).expect("and another");
        drop((carol, dora));
        assert!(s.take_within(Some("alice"), NOW).is_err(), "alice is held off the reserve");
        assert!(s.take_within(None, NOW).is_ok(), "the operator is a caller like any other");
    }

    #[test]
    fn a_slot_given_back_goes_to_the_waiter_holding_fewest() {
        let s = FairSlots::new(9); // reserve 1, light 1
        let mut alice: Vec<FairSlot> = (0..8).map(|_| s.take_within(Some("alice"), NOW).unwrap()).collect();
        let bob = s.take_within(Some("bob"), NOW).unwrap();
        assert_eq!(s.in_use(), 9);
        // Alice asks first, then Bob; both wait.
        let (s1, s2) = (s.clone(), s.clone());
        let a = std::thread::spawn(move || s1.take_within(Some("alice"), Duration::from_secs(30)));
        while s.waiting() < 1 {
            std::thread::yield_now();
        }
        let b = std::thread::spawn(move || s2.take_within(Some("bob"), Duration::from_secs(30)));
        while s.waiting() < 2 {
            std::thread::yield_now();
        }
        // One slot back: it is the reserve, and neither is light (Alice
        // holds 7, Bob 1): nobody gets it.
        drop(alice.pop());
        assert_eq!(s.waiting(), 2);
        // Another: more than the reserve is free, so the waiter holding
        // fewest, Bob, gets one; the other is the reserve again.
        drop(alice.pop());
        let bobs_second = b.join().unwrap().unwrap();
        assert_eq!(s.waiting(), 1, "alice still waits");
        drop(bob);
        let alices = a.join().unwrap().unwrap();
        drop((bobs_second, alices, alice));
        assert_eq!(s.in_use(), 0);
    }

    #[test]
    fn a_call_waits_its_allowance_at_most_and_the_queue_is_bounded() {
        let s = FairSlots::new(1);
        let _held = s.take_within(Some("alice"), NOW).unwrap();
        let started = Instant::now();
        assert_eq!(
            s.take_within(Some("bob"), Duration::from_millis(50)).unwrap_err(),
            Refusal::Waited(Duration::from_millis(50))
        );
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(s.waiting(), 0, "a waiter that gave up leaves the queue");
        // One waiter fills a queue of one.
        let s2 = s.clone();
        let w = std::thread::spawn(move || s2.take_within(Some("carol"), Duration::from_millis(300)));
        while s.waiting() < 1 {
            std::thread::yield_now();
        }
        assert_eq!(s.take_within(Some("dora"), Duration::from_secs(1)).unwrap_err(), Refusal::QueueFull);
        assert!(w.join().unwrap().is_err());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Take(usize),
        Give(usize),
    }

    proptest! {
        /// Whatever the others do, a caller holding fewer than `light`
        /// slots is refused only when other light admissions hold the
        /// whole reserve; no more than `limit` slots are ever taken.
        #[test]
        fn a_light_caller_is_refused_only_when_the_reserve_is_spent(
            limit in 1..40u32,
            ops in proptest::collection::vec(
                prop_oneof![3 => (0..4usize).prop_map(Op::Take), 1 => (0..4usize).prop_map(Op::Give)],
                1..200
            )
        ) {
            let s = FairSlots::new(limit);
            let names = ["alice", "bob", "carol", "dora"];
            let mut held: Vec<Vec<FairSlot>> = vec![Vec::new(), Vec::new(), Vec::new(), Vec::new()];
            for op in ops {
                match op {
                    Op::Take(i) => {
                        let light = (held[i].len() as u32) < FairSlots::light(limit);
                        let free = limit - s.in_use();
                        match s.take_within(Some(names[i]), NOW) {
                            Ok(slot) => held[i].push(slot),
                            Err(_) => {
                                prop_assert!(!light || free == 0, "a light caller refused with {free} free");
                                // Free slots are at most the reserve, and
                                // only light callers took them.
                                prop_assert!(free <= FairSlots::reserve(limit));
                            }
                        }
                    }
                    Op::Give(i) => drop(held[i].pop()),
                }
                let total: usize = held.iter().map(Vec::len).sum();
                prop_assert_eq!(s.in_use() as usize, total);
                prop_assert!(s.in_use() <= limit);
            }
        }
    }
}
