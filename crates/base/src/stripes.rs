//! Striped values: one copy per caller thread (round robin over
//! [`STRIPES`]), each on cache lines of its own, so that threads on
//! different cores counting the same thing never write the same line; a
//! reader sums the copies.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Copies of a striped value; a power of two.
pub const STRIPES: usize = 16;

/// A value on cache lines of its own (128 bytes: x86 prefetches lines in
/// pairs).
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct CachePadded<T>(pub T);

/// This thread's stripe, below [`STRIPES`]: given out round robin on the
/// thread's first use, then the same for the thread's life.
pub fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

/// [`STRIPES`] copies of a `T`, each on cache lines of its own: a thread
/// writes the copy of its [`stripe`], a reader goes through them all.
#[derive(Debug, Default)]
pub struct Striped<T>([CachePadded<T>; STRIPES]);

impl<T> Striped<T> {
    /// The copy of stripe `i` (below [`STRIPES`]).
    pub fn get(&self, i: usize) -> &T {
        &self.0[i].0
    }

    /// The calling thread's copy.
    pub fn local(&self) -> &T {
        self.get(stripe())
    }

    /// Every copy, for a reader to add up.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|c| &c.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_thread_keeps_its_stripe_and_threads_spread_over_them() {
        assert_eq!(stripe(), stripe());
        let seen: std::collections::HashSet<usize> =
            (0..STRIPES).map(|_| std::thread::spawn(stripe).join().unwrap()).collect();
        assert!(seen.iter().all(|&s| s < STRIPES));
        assert!(seen.len() > 1, "{seen:?}");
    }

    #[test]
    fn each_stripe_is_on_lines_of_its_own() {
        assert_eq!(std::mem::align_of::<CachePadded<u8>>(), 128);
        let s = Striped::<AtomicU64>::default();
        let (a, b) = (s.get(0) as *const AtomicU64 as usize, s.get(1) as *const AtomicU64 as usize);
        assert_eq!(b - a, 128);
    }

    #[test]
    fn additions_from_many_threads_add_up() {
        let s = Striped::<AtomicU64>::default();
        std::thread::scope(|scope| {
            for _ in 0..2 * STRIPES + 3 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        s.local().fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(s.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>(), (2 * STRIPES as u64 + 3) * 1000);
    }
}
