//! Counted slots: how many calls of one agent run at once ([`Slots`]:
//! taking one never waits; past the limit the caller is refused at once,
//! `capacity_exceeded`, so a flood hurts only itself), and a plugin's
//! slots shared fairly among its callers ([`FairSlots`]).

mod fair;
pub use fair::{FairSlot, FairSlots, Refusal};

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A limit on concurrent holders.
#[derive(Debug)]
pub struct Slots {
    in_use: AtomicU32,
    limit: AtomicU32,
}

impl Slots {
    /// At most `limit` holders at once (at least one).
    pub fn new(limit: u32) -> Arc<Slots> {
        Arc::new(Slots { in_use: AtomicU32::new(0), limit: AtomicU32::new(limit.max(1)) })
    }

    /// Takes a slot, or `None` when all are taken. The slot is given back
    /// when the guard drops.
    pub fn try_take(self: &Arc<Self>) -> Option<Slot> {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit.load(Ordering::Relaxed)).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.clone()))
    }

    /// Slots taken now.
    pub fn in_use(&self) -> u32 {
        self.in_use.load(Ordering::Acquire)
    }

    /// The limit.
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Changes the limit (a config reload). Holders past a lowered limit
    /// keep their slots; new ones wait until the count is under it.
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit.max(1), Ordering::Relaxed);
    }
}

/// A taken slot; dropping it gives it back.
#[derive(Debug)]
pub struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_refuse_past_the_limit_and_come_back_on_drop() {
        let s = Slots::new(2);
        let a = s.try_take().unwrap();
        let _b = s.try_take().unwrap();
        assert!(s.try_take().is_none());
        drop(a);
        assert_eq!(s.in_use(), 1);
        assert!(s.try_take().is_some());
    }
}
