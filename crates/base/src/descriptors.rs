//! The process's file descriptors, shared among the callers whose plugins
//! open them (files, HTTP connections), with a reserve kept for the rest of
//! the host: the HTTP front's connections, probes, new sessions, state
//! files, the operator.
//!
//! **The rule.** Plugins together hold at most [`Budget::limit`]
//! descriptors: the process's limit (`RLIMIT_NOFILE`) less a reserve of a
//! quarter of it (at least 256). Within that, a caller (an agent, or the
//! operator) takes one more while it holds fewer than its share: the limit
//! divided among the callers holding any, itself counted (so one flooder
//! alone gets half, and a newcomer always finds room while the others keep
//! to their shares); every caller may hold [`LIGHT`] whatever the others
//! hold. Past it an open fails: a file open with the WASI error `quota`,
//! an HTTP request with an error naming the budget. Before: 96 calls of
//! one plugin took 19,998 of 20,000 descriptors, and the front could
//! accept nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// What any caller may hold, whatever the others hold.
pub const LIGHT: usize = 8;

/// The descriptors plugins may hold, and who holds them.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    state: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    /// Caller (`None`: the operator) -> descriptors held.
    by: HashMap<Option<Arc<str>>, usize>,
}

/// Why a descriptor was not given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Plugins hold the whole budget.
    #[error("the host's plugins hold all {limit} file descriptors they may (the rest is kept for the host itself)")]
    Exhausted {
        /// The budget.
        limit: usize,
    },
    /// This caller holds its share.
    #[error("this caller's plugins hold {held} file descriptors, their share of the host's {limit}")]
    Share {
        /// What the caller holds.
        held: usize,
        /// The budget.
        limit: usize,
    },
}

/// One descriptor, given back when dropped.
#[derive(Debug)]
#[must_use = "the descriptor is counted only while the lease lives"]
pub struct Lease {
    budget: &'static Budget,
    caller: Option<Arc<str>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut s = self.budget.lock();
        s.total = s.total.saturating_sub(1);
        if let Some(n) = s.by.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                s.by.remove(&self.caller);
            }
        }
    }
}

impl Budget {
    /// A budget of `limit` descriptors.
    pub fn new(limit: usize) -> Budget {
        Budget { limit: limit.max(1), state: Mutex::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most descriptors plugins may hold together.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// What plugins hold now.
    pub fn in_use(&self) -> usize {
        self.lock().total
    }

    /// One descriptor for `caller`, or why not.
    pub fn take(&'static self, caller: Option<&Arc<str>>) -> Result<Lease, Refused> {
        let mut s = self.lock();
        if s.total >= self.limit {
            return Err(Refused::Exhausted { limit: self.limit });
        }
        let caller = caller.cloned();
        let held = s.by.get(&caller).copied().unwrap_or(0);
        let holders = s.by.len() + usize::from(held == 0);
        let share = (self.limit / (holders + 1)).max(LIGHT);
        if held >= share {
            return Err(Refused::Share { held, limit: self.limit });
        }
        s.total += 1;
        *s.by.entry(caller.clone()).or_default() += 1;
        Ok(Lease { budget: self, caller })
    }
}

/// The process's budget: a quarter of `RLIMIT_NOFILE` (at least 256) kept
/// for the host, the rest for plugins. Read once, at the first use (after
/// [`raise_limit`], where the binary calls it).
pub fn budget() -> &'static Budget {
    static BUDGET: OnceLock<Budget> = OnceLock::new();
    BUDGET.get_or_init(|| {
        let nofile = nofile_limit();
        let reserve = (nofile / 4).max(256);
        Budget::new(nofile.saturating_sub(reserve).max(LIGHT))
    })
}

/// The soft `RLIMIT_NOFILE`.
pub fn nofile_limit() -> usize {
    let l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    l.current.map_or(1 << 20, |n| n.min(1 << 20) as usize)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (at most 65,536), as
/// servers do at start (a soft limit of 1,024 is too few for a host
/// serving many agents); returns the limit in force.
pub fn raise_limit() -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    let want = l.maximum.map_or(65_536, |m| m.min(65_536));
    if l.current.is_some_and(|c| c < want) {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: Some(want), maximum: l.maximum });
    }
    nofile_limit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaked(limit: usize) -> &'static Budget {
        Box::leak(Box::new(Budget::new(limit)))
    }

    #[test]
    fn a_flooder_gets_a_share_and_a_newcomer_always_finds_room() {
        let b = leaked(100);
        let mallory: Arc<str> = Arc::from("mallory");
        let alice: Arc<str> = Arc::from("alice");
        let mut held = Vec::new();
        while let Ok(l) = b.take(Some(&mallory)) {
            held.push(l);
        }
        assert_eq!(held.len(), 50, "alone: half");
        assert!(matches!(b.take(Some(&mallory)), Err(Refused::Share { held: 50, .. })));
        let a: Vec<_> = (0..20).map(|_| b.take(Some(&alice)).unwrap()).collect();
        assert_eq!(b.in_use(), 70);
        let op = b.take(None).unwrap();
        drop(held);
        drop(a);
        drop(op);
        assert_eq!(b.in_use(), 0, "every lease given back");
    }

    #[test]
    fn the_budget_is_never_exceeded() {
        let b = leaked(20);
        let names: Vec<Arc<str>> = (0..10).map(|i| Arc::from(format!("a{i}"))).collect();
        let mut held = Vec::new();
        for _ in 0..5 {
            for n in &names {
                if let Ok(l) = b.take(Some(n)) {
                    held.push(l);
                }
            }
        }
        assert!(b.in_use() <= 20);
        assert!(matches!(b.take(None), Err(Refused::Exhausted { limit: 20 })));
    }
}
