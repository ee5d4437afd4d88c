//! What the budget keeps per tool: every caller's real calls and each
//! caller's own, the probes, and the cached tier of the shared view and of
//! each caller's.

use super::metrics::Window;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Something kept per caller: the operator's, and each agent's.
#[derive(Debug)]
pub(super) struct PerCaller<V> {
    operator: Option<V>,
    agents: FxHashMap<String, V>,
}

impl<V> Default for PerCaller<V> {
    fn default() -> Self {
        PerCaller { operator: None, agents: FxHashMap::default() }
    }
}

impl<V> PerCaller<V> {
    pub(super) fn get(&self, caller: Option<&str>) -> Option<&V> {
        match caller {
            None => self.operator.as_ref(),
            Some(a) => self.agents.get(a),
        }
    }

    pub(super) fn get_or_insert_with(&mut self, caller: Option<&str>, make: impl FnOnce() -> V) -> &mut V {
        match caller {
            None => self.operator.get_or_insert_with(make),
            Some(a) => {
                if !self.agents.contains_key(a) {
                    self.agents.insert(a.to_string(), make());
                }
                self.agents.get_mut(a).expect("just inserted")
            }
        }
    }

    /// Every caller's value, the operator's under `None`.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Option<&str>, &V)> {
        self.operator.iter().map(|v| (None, v)).chain(self.agents.iter().map(|(a, v)| (Some(a.as_str()), v)))
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.operator.iter().chain(self.agents.values())
    }
}

#[derive(Debug)]
pub(super) struct ToolStats {
    /// Every caller's real calls together: the operator's figures and the
    /// saved measurements; never a tier.
    pub(super) real: Window,
    pub(super) probes: Window,
    /// Each caller's own real calls.
    pub(super) callers: PerCaller<Window>,
}

/// A cached tier.
#[derive(Debug)]
pub(super) struct CachedTier {
    /// Effective tier code; `u8::MAX`: not computed yet.
    pub(super) tier: AtomicU8,
    /// Nanoseconds since `Budget::epoch` after which the cached tier is stale
    /// (its oldest live sample ages out); `u64::MAX`: never.
    pub(super) stale_after: AtomicU64,
}

impl CachedTier {
    pub(super) fn new() -> CachedTier {
        CachedTier { tier: AtomicU8::new(u8::MAX), stale_after: AtomicU64::new(0) }
    }

    pub(super) fn invalidate(&self) {
        self.stale_after.store(0, Ordering::Release);
    }
}

#[derive(Debug)]
pub(super) struct ToolState {
    pub(super) stats: Mutex<ToolStats>,
    /// The shared view's tier.
    pub(super) shared: CachedTier,
    /// The tier in each caller's view, for callers with real calls of
    /// their own (the others see the shared view).
    pub(super) views: RwLock<PerCaller<Arc<CachedTier>>>,
}

impl ToolState {
    pub(super) fn invalidate(&self) {
        self.shared.invalidate();
        for v in self.views.read().unwrap_or_else(|p| p.into_inner()).values() {
            v.invalidate();
        }
    }
}

/// Whose view of a tool.
#[derive(Debug, Clone, Copy)]
pub(super) enum Viewer<'a> {
    /// Everyone's, before their own evidence.
    Shared,
    /// One caller's: the operator (`None`) or an agent.
    Caller(Option<&'a str>),
}
