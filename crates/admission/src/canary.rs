//! Canary upgrades: a new version of a plugin takes a share of the calls
//! while the old one takes the rest; their failure rates are compared, and
//! the new version is rolled back by itself when it is worse beyond a
//! stated margin, or promoted after enough calls.
//!
//! The canary is one provider in the registry under the plugin's name: the
//! catalogue a call sees holds it, and each call runs wholly on one version
//! (chosen as it starts, exactly the share asked: call `n` goes to the new
//! version when `⌊(n+1)·p/100⌋ > ⌊n·p/100⌋`). Its tools are the old
//! version's, under their schemas; the new version must offer each of them
//! (the tools it adds appear when it is promoted). A decision is taken
//! once: from then every call goes to the winner, and the registry swaps
//! the canary for it (off the call's thread). A reload, or a revocation,
//! ends a canary under way by rolling it back first.

use crate::runtime::WasmPlugin;
use crate::tool::{CallContext, CallError, Provider, ProviderKind, ToolDef, ToolOutput};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A canary's terms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CanaryTerms {
    /// The share of calls the new version takes, in percent (1 to 99).
    pub share_percent: u8,
    /// Calls to the new version after which it is promoted, when it is not
    /// worse.
    pub promote_after: u64,
    /// Calls to the new version before it is judged at all.
    pub min_calls: u64,
    /// How much worse its failure rate may be than the old one's, in
    /// percentage points, before it is rolled back.
    pub max_worse_percent: f64,
}

impl CanaryTerms {
    /// Checks the terms' ranges.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=99).contains(&self.share_percent) {
            return Err(format!("a canary's share is 1% to 99%, not {}%", self.share_percent));
        }
        if self.promote_after == 0 || self.min_calls == 0 || self.min_calls > self.promote_after {
            return Err(format!(
                "a canary needs 1 <= its minimum calls ({}) <= the calls before promotion ({})",
                self.min_calls, self.promote_after
            ));
        }
        if !(0.0..=100.0).contains(&self.max_worse_percent) {
            return Err(format!("the margin is 0% to 100%, not {}%", self.max_worse_percent));
        }
        Ok(())
    }

    /// In words.
    pub fn describe(&self) -> String {
        format!(
            "{}% of calls to the new version; rolled back when its failure rate is over the old one's by more than {} points (judged from its {}th call), promoted after {} calls",
            self.share_percent, self.max_worse_percent, self.min_calls, self.promote_after
        )
    }
}

/// How a canary ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CanaryState {
    /// Under way.
    Running,
    /// The new version took over.
    Promoted,
    /// The old version took every call again.
    RolledBack,
}

/// A canary as the admin API and the page show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryStatus {
    /// The plugin.
    pub plugin: String,
    /// The old version's component digest.
    pub old_sha256: String,
    /// The new version's component digest.
    pub new_sha256: String,
    /// The terms.
    pub terms: CanaryTerms,
    /// Calls the old version ran, and how many failed.
    pub old_calls: u64,
    /// Of those, failed (errors and timeouts; not invalid arguments,
    /// refusals or cancellations).
    pub old_failed: u64,
    /// Calls the new version ran.
    pub new_calls: u64,
    /// Of those, failed.
    pub new_failed: u64,
    /// Where it stands.
    pub state: CanaryState,
    /// Why it ended, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    old_calls: u64,
    old_failed: u64,
    new_calls: u64,
    new_failed: u64,
}

/// What decides a canary's end (set by admission: swap the registry).
pub(crate) type OnDecision = Box<dyn Fn(CanaryState, String) + Send + Sync>;

/// Whether a call's error says the version is worse (it ran and failed, or
/// ran out of time or resources), as opposed to a caller's mistake or a
/// refusal before anything ran.
fn failed(r: &Result<ToolOutput, CallError>) -> bool {
    match r {
        Ok(_) => false,
        Err(e) => !matches!(
            e,
            CallError::UnknownTool(_)
                | CallError::InvalidInput { .. }
                | CallError::NotFound { .. }
                | CallError::Forbidden { .. }
                | CallError::Unavailable { .. }
                | CallError::CapacityExceeded(_)
                | CallError::Cancelled { .. }
        ),
    }
}

/// The provider a canary registers under the plugin's name.
pub struct Canary {
    pub(crate) old: Arc<WasmPlugin>,
    pub(crate) new: Arc<WasmPlugin>,
    pub(crate) provenance: crate::package::Provenance,
    terms: CanaryTerms,
    routed: AtomicU64,
    counts: Mutex<Counts>,
    decided: OnceLock<(CanaryState, String)>,
    on_decision: OnDecision,
}

impl std::fmt::Debug for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canary").field("plugin", &self.old.name()).field("terms", &self.terms).finish_non_exhaustive()
    }
}

impl Canary {
    pub(crate) fn new(
        old: Arc<WasmPlugin>,
        new: Arc<WasmPlugin>,
        provenance: crate::package::Provenance,
        terms: CanaryTerms,
        on_decision: OnDecision,
    ) -> Canary {
        Canary {
            old,
            new,
            provenance,
            terms,
            routed: AtomicU64::new(0),
            counts: Mutex::default(),
            decided: OnceLock::new(),
            on_decision,
        }
    }

    /// Where it stands now.
    pub fn status(&self) -> CanaryStatus {
        let c = *self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let (state, reason) = match self.decided.get() {
            Some((s, r)) => (*s, Some(r.clone())),
            None => (CanaryState::Running, None),
        };
        CanaryStatus {
            plugin: self.old.name().to_string(),
            old_sha256: self.old.digest().to_string(),
            new_sha256: self.new.digest().to_string(),
            terms: self.terms,
            old_calls: c.old_calls,
            old_failed: c.old_failed,
            new_calls: c.new_calls,
            new_failed: c.new_failed,
            state,
            reason,
        }
    }

    /// Ends it now (a reload, a revocation, the operator), unless it has
    /// ended: the winner, and why.
    pub(crate) fn decide(&self, state: CanaryState, reason: String) -> bool {
        self.decided.set((state, reason)).is_ok()
    }

    /// The decision, once taken.
    pub(crate) fn decision(&self) -> Option<&(CanaryState, String)> {
        self.decided.get()
    }

    /// Which version call `n` runs on.
    fn to_new(&self, n: u64) -> bool {
        match self.decided.get() {
            Some((CanaryState::Promoted, _)) => true,
            Some(_) => false,
            None => {
                let p = u64::from(self.terms.share_percent);
                (n + 1) * p / 100 > n * p / 100
            }
        }
    }

    /// Counts a call's outcome and judges.
    fn record(&self, on_new: bool, failed: bool) {
        let verdict = {
            let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
            if on_new {
                c.new_calls += 1;
                c.new_failed += u64::from(failed);
            } else {
                c.old_calls += 1;
                c.old_failed += u64::from(failed);
            }
            judge(&self.terms, *c)
        };
        if let Some((state, reason)) = verdict
            && self.decided.set((state, reason.clone())).is_ok()
        {
            (self.on_decision)(state, reason);
        }
    }
}

/// The decision the counts call for, if any.
fn judge(t: &CanaryTerms, c: Counts) -> Option<(CanaryState, String)> {
    let rate = |failed: u64, calls: u64| if calls == 0 { 0.0 } else { 100.0 * failed as f64 / calls as f64 };
    let (old, new) = (rate(c.old_failed, c.old_calls), rate(c.new_failed, c.new_calls));
    let said = || {
        format!(
            "the new version failed {} of {} calls ({new:.0}%), the old one {} of {} ({old:.0}%)",
            c.new_failed, c.new_calls, c.old_failed, c.old_calls
        )
    };
    if c.new_calls >= t.min_calls && new > old + t.max_worse_percent {
        return Some((
            CanaryState::RolledBack,
            format!("rolled back: {}: worse by more than {} points", said(), t.max_worse_percent),
        ));
    }
    (c.new_calls >= t.promote_after).then(|| {
        (
            CanaryState::Promoted,
            format!("promoted after {} calls: {}: within {} points", c.new_calls, said(), t.max_worse_percent),
        )
    })
}

impl Provider for Canary {
    fn name(&self) -> &str {
        self.old.name()
    }
    fn kind(&self) -> ProviderKind {
        ProviderKind::Wasm
    }
    fn tools(&self) -> &[ToolDef] {
        self.old.tools()
    }
    fn fingerprint(&self) -> Option<&str> {
        self.old.fingerprint()
    }
    /// What either version holds: a call may go to either (the audit gate
    /// asks this of the canary, not of the version that will run).
    fn held(&self) -> crate::tool::Capabilities {
        self.old.held().union(self.new.held())
    }
    fn describe(&self) -> crate::tool::ProviderInfo {
        self.old.describe()
    }
    /// Either version may ask: a call may go to either.
    fn may_ask(&self) -> bool {
        self.old.may_ask() || self.new.may_ask()
    }
    /// The old version's resources and prompts, until the new one is promoted.
    fn extension(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.old.extension()
    }
    fn call(&self, tool: &str, arguments: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        // The host's own latency probes go to the old version and are not
        // counted: only callers' calls judge the new one.
        if ctx.probe {
            return self.old.call(tool, arguments, ctx);
        }
        let on_new = self.to_new(self.routed.fetch_add(1, Ordering::Relaxed));
        let version = if on_new { &self.new } else { &self.old };
        if let Some(cost) = &ctx.cost {
            cost.set_served_by(version.digest());
        }
        let result = version.call(tool, arguments, ctx);
        if self.decided.get().is_none() {
            self.record(on_new, failed(&result));
        }
        result
    }
}

impl crate::Admission {
    /// The canary under way for `name`, if any.
    fn canary(&self, name: &str) -> Option<Arc<Canary>> {
        let p = self.pipeline().registry().snapshot().provider(name)?.clone();
        let any: Arc<dyn std::any::Any + Send + Sync> = p;
        any.downcast::<Canary>().ok()
    }

    /// Starts a canary upgrade of `name` to the version in `bytes` (`path`:
    /// where they came from, for the audit): checked as `plugin add`
    /// checks an upgrade (trust, grants, held asks, secrets), then a share
    /// of calls goes to it on the terms given. The plugin must be serving,
    /// as a plain version (not a canary), and the new version must offer
    /// every tool the old one does.
    pub fn start_canary(
        self: &Arc<Self>,
        name: &str,
        bytes: &[u8],
        path: Option<&std::path::Path>,
        terms: CanaryTerms,
    ) -> Result<CanaryStatus, crate::AddPluginError> {
        let no = |reason: String| crate::AddPluginError::Canary { plugin: name.to_string(), reason };
        let _one = self.one_at_a_time();
        let started = (|| {
            terms.check().map_err(no)?;
            let provider = self.pipeline().registry().snapshot().provider(name).cloned().ok_or_else(|| {
                no("it is not serving, so there is nothing to compare a new version with: `plugin add` it".into())
            })?;
            let any: Arc<dyn std::any::Any + Send + Sync> = provider;
            let any = match any.downcast::<Canary>() {
                Ok(_) => {
                    return Err(no(
                        "a canary of it is under way: wait for it to end (`plugin list`), or `plugin upgrade --now`"
                            .into(),
                    ));
                }
                Err(any) => any,
            };
            let old = any
                .downcast::<WasmPlugin>()
                .map_err(|_| no("it is not a wasm plugin (an external server cannot be canaried)".into()))?;
            let held_before = self.upgrades.lock().unwrap_or_else(|p| p.into_inner()).contains_key(name);
            let prepared = self.prepare_locked(name, bytes, path).map_err(|e| {
                // A canary's new version loads as it is or not at all:
                // nothing is held for a later reload to swap in whole.
                if !held_before {
                    self.upgrades.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
                }
                match e {
                    e @ (crate::AddPluginError::NewCapabilities { .. }
                    | crate::AddPluginError::NewHosts { .. }
                    | crate::AddPluginError::Ungranted { .. }) => {
                        no(format!("{e} (grant it first, then start the canary again)"))
                    }
                    e => e,
                }
            })?;
            if prepared.plugin.digest() == old.digest() {
                return Err(no(format!(
                    "the new version's component is the one serving (sha256 {}): a canary would compare it with itself",
                    old.digest()
                )));
            }
            let missing: Vec<&str> = old
                .tools()
                .iter()
                .map(|t| t.name.as_str())
                .filter(|t| !prepared.plugin.tools().iter().any(|n| n.name == *t))
                .collect();
            if !missing.is_empty() {
                return Err(no(format!(
                    "the new version lacks {}, which the serving one offers: a canary sends calls of every tool to either version (`plugin upgrade --now` swaps at once)",
                    missing.join(", ")
                )));
            }
            let weak = Arc::downgrade(self);
            let plugin = name.to_string();
            let on_decision: OnDecision = Box::new(move |_, _| {
                let (weak, plugin) = (weak.clone(), plugin.clone());
                // Off the call's thread: the swap waits for installs.
                std::thread::spawn(move || {
                    if let Some(a) = weak.upgrade() {
                        a.finish_canary(&plugin);
                    }
                });
            });
            let canary = Arc::new(Canary::new(old, prepared.plugin, prepared.provenance, terms, on_decision));
            self.pipeline().registry().upsert(canary.clone())?;
            self.canaries.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
            self.audit_canary(crate::audit::PluginEventKind::PluginCanary, &canary, terms.describe());
            tracing::info!(plugin = %crate::tool::log_safe(name), new = %canary.new.digest(), "canary started: {}", terms.describe());
            Ok(canary.status())
        })();
        if let Err(e) = &started {
            self.audit_refused(name, path, e);
        }
        started
    }

    /// Swaps a decided canary for its winner.
    fn finish_canary(&self, name: &str) {
        let _one = self.one_at_a_time();
        if let Some(c) = self.canary(name) {
            self.swap_out(&c);
        }
    }

    /// Puts the winner of `c` (decided, or rolled back now) in its place.
    fn swap_out(&self, c: &Arc<Canary>) -> Option<crate::PluginChange> {
        c.decide(CanaryState::RolledBack, "rolled back: ended before a decision".into());
        let (state, reason) = c.decision()?.clone();
        let name = c.old.name().to_string();
        let (state, reason) = match state {
            CanaryState::Promoted => match self.pipeline().registry().upsert(c.new.clone()) {
                Ok(_) => {
                    for t in c.old.tools() {
                        self.pipeline().budget().forget(&t.name);
                    }
                    self.set_provenance(&name, Some(c.provenance.clone()));
                    (state, reason)
                }
                Err(e) => (CanaryState::RolledBack, format!("rolled back: promoting it failed: {e}")),
            },
            other => (other, reason),
        };
        if state == CanaryState::RolledBack && self.pipeline().registry().upsert(c.old.clone()).is_err() {
            tracing::error!(plugin = %crate::tool::log_safe(&name), "rolling a canary back failed");
        }
        let kind = match state {
            CanaryState::Promoted => crate::audit::PluginEventKind::PluginPromote,
            _ => crate::audit::PluginEventKind::PluginRollback,
        };
        self.audit_canary(kind, c, reason.clone());
        tracing::warn!(plugin = %crate::tool::log_safe(&name), "canary {reason}");
        let mut status = c.status();
        status.state = state;
        status.reason = Some(reason.clone());
        self.canaries.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), status);
        let action = if state == CanaryState::Promoted { "promoted" } else { "rolled back" };
        Some(crate::PluginChange { plugin: name, action: action.into(), detail: reason })
    }

    /// Rolls back every canary under way, for `why` (a reload or a
    /// revocation judges plugins as plain versions). The caller holds the
    /// install lock.
    pub(crate) fn end_canaries_locked(&self, why: &str) -> Vec<crate::PluginChange> {
        let canaries: Vec<Arc<Canary>> = self
            .pipeline()
            .registry()
            .snapshot()
            .providers()
            .filter_map(|p| {
                let any: Arc<dyn std::any::Any + Send + Sync> = p.clone();
                any.downcast::<Canary>().ok()
            })
            .collect();
        canaries
            .iter()
            .filter_map(|c| {
                c.decide(CanaryState::RolledBack, format!("rolled back: {why} ended the canary"));
                self.swap_out(c)
            })
            .collect()
    }

    /// `Admission::end_canaries_locked`, taking the install lock.
    pub fn end_canaries(&self, why: &str) -> Vec<crate::PluginChange> {
        let _one = self.one_at_a_time();
        self.end_canaries_locked(why)
    }

    /// `name`'s canary: the one under way, else how the last one ended
    /// while the version it left serves.
    pub fn canary_status(&self, name: &str) -> Option<CanaryStatus> {
        if let Some(c) = self.canary(name) {
            return Some(c.status());
        }
        let serving = self.pipeline().registry().snapshot().provider(name)?.fingerprint()?.to_string();
        let ended = self.canaries.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned()?;
        let left = if ended.state == CanaryState::Promoted { &ended.new_sha256 } else { &ended.old_sha256 };
        (*left == serving).then_some(ended)
    }

    /// A provider just replaced or removed (`plugin add`, `plugin remove`):
    /// when it was a canary under way, its end is audited, for `why`.
    pub(crate) fn canary_ended_by(&self, provider: &Arc<dyn crate::tool::Provider>, why: &str) {
        let any: Arc<dyn std::any::Any + Send + Sync> = provider.clone();
        let Ok(c) = any.downcast::<Canary>() else { return };
        let reason = format!("ended by {why}: neither version of the canary is kept");
        if c.decide(CanaryState::RolledBack, reason.clone()) {
            self.audit_canary(crate::audit::PluginEventKind::PluginRollback, &c, reason);
        }
    }

    fn audit_canary(&self, event: crate::audit::PluginEventKind, c: &Canary, detail: String) {
        let (now, before) = match event {
            crate::audit::PluginEventKind::PluginRollback => (c.old.digest(), c.new.digest()),
            _ => (c.new.digest(), c.old.digest()),
        };
        self.pipeline().audit().write_plugin(&crate::audit::PluginRecord {
            time: crate::audit::now_rfc3339(),
            event,
            plugin: c.old.name(),
            path: None,
            sha256: Some(now),
            previous_sha256: Some(before),
            origin: Some(c.provenance.describe()),
            capabilities_held: c.new.held().names(),
            error: Some(detail),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms() -> CanaryTerms {
        CanaryTerms { share_percent: 20, promote_after: 20, min_calls: 10, max_worse_percent: 10.0 }
    }

    #[test]
    fn a_new_version_failing_half_its_calls_is_rolled_back_and_a_healthy_one_promoted() {
        let t = terms();
        let bad = Counts { old_calls: 40, old_failed: 0, new_calls: 10, new_failed: 5 };
        let (state, why) = judge(&t, bad).unwrap();
        assert_eq!(state, CanaryState::RolledBack);
        assert!(why.contains("failed 5 of 10 calls (50%)"), "{why}");
        let early = Counts { new_calls: 9, new_failed: 9, ..bad };
        assert_eq!(judge(&t, early), None, "not judged before min_calls");
        let good = Counts { old_calls: 80, old_failed: 4, new_calls: 20, new_failed: 2 };
        assert_eq!(judge(&t, good).unwrap().0, CanaryState::Promoted);
        assert_eq!(judge(&t, Counts { new_calls: 19, ..good }), None);
    }

    #[test]
    fn the_share_is_exact() {
        for p in [1u64, 10, 20, 50, 99] {
            let n = (0..1000u64).filter(|n| (n + 1) * p / 100 > n * p / 100).count() as u64;
            assert_eq!(n, 10 * p, "{p}%");
        }
        assert!(terms().check().is_ok());
        assert!(CanaryTerms { share_percent: 100, ..terms() }.check().is_err());
        assert!(CanaryTerms { min_calls: 30, ..terms() }.check().is_err());
    }
}
