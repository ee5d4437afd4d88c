//! A thread may tear its calls' instances down after answering them.
//!
//! Dropping a call's store resets its pooled slots for the next instance:
//! linear memory back to its image (on Linux a `PAGEMAP_SCAN` ioctl finds
//! the pages the call dirtied, and only those are rewritten), tables
//! cleared, the WASI context freed. That is about a third of a fast call
//! (BENCHMARKS.md, "Fresh instance vs reused"), and none of it is needed to
//! answer the call. A thread that answers calls and then waits for the
//! next (the stdio session's, which runs fast calls itself) opts in with
//! [`defer_teardowns`]: its finished stores are kept, up to [`DEPTH`] in
//! the whole process, and dropped when it calls [`teardown_deferred`],
//! once the answer is written. Handing them to another thread instead was
//! measured slower: the wake-up cost more than the teardown
//! (BENCHMARKS.md).
//!
//! Isolation is unchanged: a slot returns to the pool only once reset, so
//! no instance ever sees another's state. The instance pool is sized
//! [`DEPTH`] larger, so kept stores never take a slot a call would have had.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// Stores kept for a later teardown, at most, in the whole process.
pub(crate) const DEPTH: u32 = 16;

/// Stores kept now, in every thread.
static KEPT: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread's kept stores; `None` unless it deferred teardowns.
    static DEFERRED: RefCell<Option<Vec<Box<dyn Send>>>> = const { RefCell::new(None) };
}

/// While alive, calls finished on this thread leave their teardown to
/// [`teardown_deferred`] (or to this guard's drop). Not `Send`: it belongs
/// to the thread that made it.
#[derive(Debug)]
#[must_use = "teardowns are deferred only while the guard lives"]
pub struct DeferTeardowns {
    _thread: std::marker::PhantomData<*const ()>,
}

/// Defers the teardown of calls finished on this thread until
/// [`teardown_deferred`] (see the module's documentation).
pub fn defer_teardowns() -> DeferTeardowns {
    DEFERRED.with(|d| {
        d.borrow_mut().get_or_insert_with(Vec::new);
    });
    DeferTeardowns { _thread: std::marker::PhantomData }
}

impl Drop for DeferTeardowns {
    fn drop(&mut self) {
        let kept = DEFERRED.with(|d| d.borrow_mut().take());
        drop_all(kept.unwrap_or_default());
    }
}

/// Tears down the instances of calls finished on this thread and kept
/// since (a no-op on a thread that does not defer).
pub fn teardown_deferred() {
    let kept = DEFERRED.with(|d| d.borrow_mut().as_mut().map(std::mem::take));
    drop_all(kept.unwrap_or_default());
}

fn drop_all(kept: Vec<Box<dyn Send>>) {
    if kept.is_empty() {
        return;
    }
    KEPT.fetch_sub(kept.len() as u32, Ordering::AcqRel);
    drop(kept);
}

/// Keeps `store` for a later teardown if this thread defers them and the
/// process keeps fewer than [`DEPTH`]; drops it now otherwise.
pub(crate) fn retire<T: Send + 'static>(store: T) {
    let store = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        let Some(kept) = d.as_mut() else { return Some(store) };
        if KEPT.fetch_add(1, Ordering::AcqRel) >= DEPTH {
            KEPT.fetch_sub(1, Ordering::AcqRel);
            return Some(store);
        }
        kept.push(Box::new(store));
        None
    });
    drop(store);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn teardowns_wait_on_a_deferring_thread_only_and_never_beyond_the_depth() {
        std::thread::spawn(|| {
            let dropped = Arc::new(AtomicUsize::new(0));
            // Not deferring: dropped at once.
            retire(Counted(dropped.clone()));
            assert_eq!(dropped.load(Ordering::SeqCst), 1);

            let guard = defer_teardowns();
            retire(Counted(dropped.clone()));
            assert_eq!(dropped.load(Ordering::SeqCst), 1, "kept");
            teardown_deferred();
            assert_eq!(dropped.load(Ordering::SeqCst), 2, "torn down when asked");

            for _ in 0..DEPTH + 5 {
                retire(Counted(dropped.clone()));
            }
            assert_eq!(dropped.load(Ordering::SeqCst), 2 + 5, "past the depth, dropped at once");
            drop(guard);
            assert_eq!(dropped.load(Ordering::SeqCst), 2 + 5 + DEPTH as usize, "the guard tears the rest down");
            assert_eq!(KEPT.load(Ordering::SeqCst), 0);
        })
        .join()
        .unwrap();
    }
}
