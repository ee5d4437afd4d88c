//! Latency budgets: tiers, measurements, health demotion, agent profiles, DM
//! overrides and the enforcer that decides which tools an agent may see.
//!
//! A tool's tier comes from its declared p50 until `min_samples` real calls
//! have been measured, then from the measured p50 (calibration probes fill
//! the gap in between, kept apart from real calls). A tool whose error or
//! timeout rate in the window exceeds `demote_error_rate` moves one tier
//! slower (a DEEP tool becomes over budget) until old errors age out.
//!
//! **No caller steers another's view.** Real calls are measured per caller
//! (each agent, and the operator, has its own window of each tool): a
//! caller's own calls, once there are enough of them, set the tier and the
//! health *it* sees, and no one else's. What every caller sees before its
//! own evidence is the tool's shared view, which moves only on evidence no
//! caller controls: the operator's pin, calibration probes, the tool's
//! declaration. Real calls of all callers together are kept too, for the
//! operator's figures (`stats`, the page, `/metrics`, the saved
//! measurements), but never set a tier. (Letting the shared view follow
//! "several distinct callers" would still let one caller decide: the one
//! whose calls cross the threshold.) So an agent that times a tool out,
//! floods it or feeds it bad input demotes it for itself alone.
//! (`tests::one_callers_failures_change_no_other_callers_view`,
//! `budget::one_agents_timeouts_leave_another_agents_listing_alone`)
//!
//! [`Budget::available_tools`] is the enforcer: an agent sees exactly the
//! tools that are on its allow-list *and* within its effective tier. The read
//! path takes no lock: each tool's current tier is cached in atomics,
//! recomputed when a sample is recorded or when its oldest sample expires.

mod enforce;
pub mod metrics;
pub mod persist;
pub mod selector;
mod state;
pub mod tier;

use state::{CachedTier, PerCaller, ToolState, ToolStats, Viewer};

use crate::tool::{CallError, DeadlinePolicy, ToolDef};
use metrics::{Outcome, Summary, Window};
use rustc_hash::FxHashMap;
pub use selector::{Clock, ManualClock, Reason, Selection, Selector, SelectorConfig, SystemClock, Turn};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
pub use tier::{Badge, Ceilings, Tier};

/// Budget settings (`budget:` in the config file).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// FAST ceiling in ms (p50 at most this, and the most a FAST call may take).
    pub fast_ms: u64,
    /// STANDARD ceiling in ms.
    pub standard_ms: u64,
    /// DEEP ceiling in ms; slower tools are never shown.
    pub deep_ms: u64,
    /// Real calls kept per tool.
    pub window: usize,
    /// Seconds after which a sample leaves the window.
    pub window_max_age_secs: u64,
    /// Real samples needed before the measured p50 replaces the declared one.
    pub min_samples: usize,
    /// Samples needed before health demotion applies.
    pub min_health_samples: usize,
    /// Error-and-timeout rate above which a tool is demoted one tier.
    pub demote_error_rate: f64,
    /// Tier of a tool that declares no latency and has no measurements
    /// (external MCP servers often declare nothing).
    pub unmeasured_tier: Tier,
    /// Multiplier on the measured p99 when it sets a tool's timeout.
    pub timeout_margin: f64,
    /// Name of the environment calibration results are stored under.
    pub environment: String,
    /// The tier selector.
    pub selector: SelectorConfig,
    /// Tools whose tier the operator fixes, whatever they declare or
    /// measure (`get_rule: fast`). Health demotion still applies.
    pub pin: std::collections::BTreeMap<String, Tier>,
    /// Tools that may run past the DEEP ceiling, for the agents named only.
    pub long_tools: Vec<LongTool>,
    /// Tool calls an agent may make in one turn, unless its own
    /// `npcs[].max_calls_per_turn` says otherwise; `None`: no cap. Applies
    /// only to sessions that start turns (an utterance in `tools/list`).
    pub max_calls_per_turn: Option<u32>,
    /// Results the result cache keeps at most (0: no cache).
    pub result_cache_entries: usize,
    /// Bytes of results the result cache keeps at most, in MiB.
    pub result_cache_mb: usize,
    /// Probe tools in the background while serving: at start, when an
    /// external server connects, when a plugin is added or replaced.
    pub background_calibration: bool,
    /// Probes per tool in background calibration.
    pub calibration_samples: usize,
    /// Tools to probe although they do not say they are idempotent (the
    /// operator vouches that calling them has no side effect).
    pub calibrate_tools: Vec<String>,
    /// Probe upstream servers' tools too (default false: the host never
    /// calls an upstream tool of its own accord). Even then, only tools
    /// declaring `readOnlyHint: true` and `openWorldHint: false`, or named
    /// in `calibrate_tools`.
    pub calibrate_upstreams: bool,
}

/// A tool the operator lets named agents run past the DEEP ceiling (a
/// long-poll tool, for example). Only those agents see it, when their
/// session works at its tier (`budget.pin`, else DEEP), and their calls
/// get `timeout_ms`; everyone else never sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongTool {
    /// The tool's name.
    pub tool: String,
    /// The deadline of these agents' calls, in milliseconds (at most
    /// `limits.timeout_ceiling_ms`).
    pub timeout_ms: u64,
    /// The agents (`npcs[].name`) that may see and call it.
    pub agents: Vec<String>,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            fast_ms: 500,
            standard_ms: 1500,
            deep_ms: 4000,
            window: 100,
            window_max_age_secs: 600,
            min_samples: 10,
            min_health_samples: 5,
            demote_error_rate: 0.3,
            unmeasured_tier: Tier::Standard,
            timeout_margin: 1.5,
            environment: "default".into(),
            selector: SelectorConfig::default(),
            pin: std::collections::BTreeMap::new(),
            long_tools: Vec::new(),
            max_calls_per_turn: None,
            result_cache_entries: 1024,
            result_cache_mb: 32,
            background_calibration: true,
            calibration_samples: 3,
            calibrate_tools: Vec::new(),
            calibrate_upstreams: false,
        }
    }
}

impl BudgetConfig {
    /// The tier ceilings.
    pub fn ceilings(&self) -> Ceilings {
        Ceilings {
            fast: Duration::from_millis(self.fast_ms),
            standard: Duration::from_millis(self.standard_ms),
            deep: Duration::from_millis(self.deep_ms),
        }
    }
}

/// An agent (an NPC, an assistant): its allow-list and ceiling. The seed's
/// `npcs:` entries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentProfile {
    /// Unique name.
    pub name: String,
    /// The slowest tier this agent may ever use.
    #[serde(default = "default_ceiling")]
    pub budget_tier: Tier,
    /// The only tools this agent may see and call.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Instructions sent to MCP clients connecting as this agent.
    #[serde(default)]
    pub instructions: Option<String>,
    /// This agent's tool-call limit, instead of `server.rate_limit`.
    #[serde(default)]
    pub rate_limit: Option<crate::rates::RateLimitConfig>,
    /// Tool calls this agent may make in one turn, instead of
    /// `budget.max_calls_per_turn`.
    #[serde(default)]
    pub max_calls_per_turn: Option<u32>,
    /// Personality prompt (seed field; toolhost does not use it).
    #[serde(default)]
    pub personality: Option<String>,
    /// Voice engine (seed field: `cascaded`, `s2s`; toolhost does not use it).
    #[serde(default)]
    pub engine: Option<String>,
}

fn default_ceiling() -> Tier {
    Tier::Fast
}

const NO_TIER: u8 = 3;

fn tier_code(t: Option<Tier>) -> u8 {
    match t {
        Some(Tier::Fast) => 0,
        Some(Tier::Standard) => 1,
        Some(Tier::Deep) => 2,
        None => NO_TIER,
    }
}

fn code_tier(c: u8) -> Option<Tier> {
    match c {
        0 => Some(Tier::Fast),
        1 => Some(Tier::Standard),
        2 => Some(Tier::Deep),
        _ => None,
    }
}

/// Where a tool's tier comes from right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierSource {
    /// Measured p50 of real calls.
    Measured,
    /// Calibration probes.
    Calibrated,
    /// The tool's declared p50.
    Declared,
    /// Nothing known: the tier the operator assigned the tool's provider
    /// (an external server's `tier`).
    Assigned,
    /// Nothing known: the configured default.
    Default,
    /// The operator pinned it (`budget.pin`).
    Pinned,
}

impl TierSource {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            TierSource::Measured => "measured",
            TierSource::Calibrated => "calibrated",
            TierSource::Declared => "declared",
            TierSource::Assigned => "assigned",
            TierSource::Default => "default",
            TierSource::Pinned => "pinned",
        }
    }
}

/// Everything the budget knows about one tool at a moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolStatus {
    /// Tier before health demotion; `None`: over budget.
    pub base_tier: Option<Tier>,
    /// Tier after health demotion; `None`: over budget, never shown.
    pub tier: Option<Tier>,
    /// Whether health demotion applies.
    pub demoted: bool,
    /// Where the base tier came from.
    pub source: TierSource,
    /// Real calls in the window.
    pub real: Option<Summary>,
    /// Calibration probes.
    pub probes: Option<Summary>,
    /// The p50 the tier was taken from.
    pub p50: Option<Duration>,
    /// Marketplace badge, when there are measurements.
    pub badge: Option<Badge>,
    /// The deadline a call of this tool gets now.
    pub timeout: Duration,
    /// In the shared view ([`Budget::status`]): how many callers' own
    /// views demote the tool. In a caller's view: 1 when it is demoted.
    pub demoted_for: usize,
}

/// Why a budget request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// No agent of that name in the config.
    #[error("unknown agent {0:?}")]
    UnknownAgent(String),
}

/// What the operator configured: swapped whole by [`Budget::reconfigure`],
/// so a reader never sees half of an old config and half of a new one.
#[derive(Debug, Clone)]
struct Settings {
    cfg: Arc<BudgetConfig>,
    ceilings: Ceilings,
    agents: HashMap<String, (AgentProfile, HashSet<String>)>,
    /// The operator's floor and ceiling on every deadline.
    deadlines: DeadlinePolicy,
    /// `budget.long_tools`: each tool's deadline and the agents that may use it.
    long: HashMap<String, (Duration, HashSet<String>)>,
}

impl Settings {
    fn new(cfg: BudgetConfig, agents: Vec<AgentProfile>, deadlines: DeadlinePolicy) -> Settings {
        let agents = agents
            .into_iter()
            .map(|a| {
                let allowed = a.tools.iter().cloned().collect();
                (a.name.clone(), (a, allowed))
            })
            .collect();
        let long = cfg
            .long_tools
            .iter()
            .map(|l| (l.tool.clone(), (Duration::from_millis(l.timeout_ms), l.agents.iter().cloned().collect())))
            .collect();
        Settings { ceilings: cfg.ceilings(), cfg: Arc::new(cfg), agents, deadlines, long }
    }
}

/// The latency budget enforcer.
#[derive(Debug)]
pub struct Budget {
    settings: arc_swap::ArcSwap<Settings>,
    clock: Arc<dyn Clock>,
    epoch: Instant,
    tools: RwLock<FxHashMap<String, Arc<ToolState>>>,
    overrides: Mutex<HashMap<String, (Tier, Instant)>>,
}

impl Budget {
    /// A budget with `cfg` and `agents`, on the system clock.
    pub fn new(cfg: BudgetConfig, agents: Vec<AgentProfile>) -> Budget {
        Budget::with_clock(cfg, agents, Arc::new(SystemClock))
    }

    /// Applies the operator's floor and ceiling (the runtime's limits) to
    /// every deadline this budget sets.
    #[must_use]
    pub fn with_deadlines(self, deadlines: DeadlinePolicy) -> Budget {
        self.set_deadlines(deadlines);
        self
    }

    /// Replaces the operator's floor and ceiling (a config reload).
    pub fn set_deadlines(&self, deadlines: DeadlinePolicy) {
        let mut next = Settings::clone(&self.settings.load());
        next.deadlines = deadlines;
        self.settings.store(Arc::new(next));
        self.invalidate_tiers();
    }

    /// The operator's floor and ceiling on every deadline.
    pub fn deadlines(&self) -> DeadlinePolicy {
        self.settings.load().deadlines
    }

    /// Replaces the settings and the agents (a config reload), keeping every
    /// measurement: tiers are recomputed under the new ceilings and pins on
    /// their next read. DM overrides of agents that are gone are dropped.
    pub fn reconfigure(&self, cfg: BudgetConfig, agents: Vec<AgentProfile>) {
        let next = Settings::new(cfg, agents, self.deadlines());
        self.overrides.lock().unwrap_or_else(|p| p.into_inner()).retain(|a, _| next.agents.contains_key(a));
        self.settings.store(Arc::new(next));
        self.invalidate_tiers();
    }

    /// Makes every cached tier stale, so the next read recomputes it.
    fn invalidate_tiers(&self) {
        for state in self.tools.read().unwrap_or_else(|p| p.into_inner()).values() {
            state.invalidate();
        }
    }

    /// A budget on an injected clock.
    pub fn with_clock(cfg: BudgetConfig, agents: Vec<AgentProfile>, clock: Arc<dyn Clock>) -> Budget {
        let epoch = clock.now();
        let deadlines = DeadlinePolicy { floor: Duration::ZERO, ceiling: Duration::MAX };
        Budget {
            settings: arc_swap::ArcSwap::from_pointee(Settings::new(cfg, agents, deadlines)),
            clock,
            epoch,
            tools: RwLock::new(FxHashMap::default()),
            overrides: Mutex::new(HashMap::new()),
        }
    }

    /// The most calls `agent` (`None`: the operator) may make in one turn.
    pub fn max_calls_per_turn(&self, agent: Option<&str>) -> Option<u32> {
        let s = self.settings.load();
        agent.and_then(|a| s.agents.get(a)).and_then(|(p, _)| p.max_calls_per_turn).or(s.cfg.max_calls_per_turn)
    }

    /// The deadline `agent` gets for the long tool `tool`; `None` when the
    /// tool is not a long tool for that agent.
    pub fn long_deadline(&self, tool: &str, agent: Option<&str>) -> Option<Duration> {
        let s = self.settings.load();
        let (timeout, agents) = s.long.get(tool)?;
        agents.contains(agent?).then(|| s.deadlines.deadline(Some(*timeout), None))
    }

    /// Whether `tool` is one of `budget.long_tools`.
    pub fn is_long(&self, tool: &str) -> bool {
        self.settings.load().long.contains_key(tool)
    }

    /// Whether the long tool `tool` is visible to `agent` working at `tier`:
    /// a named agent, at the tool's tier (pinned, else DEEP) or above.
    fn long_visible(&self, tool: &str, agent: Option<&str>, tier: Tier) -> bool {
        let needs = self.settings.load().cfg.pin.get(tool).copied().unwrap_or(Tier::Deep);
        tier >= needs && self.long_deadline(tool, agent).is_some()
    }

    /// The settings.
    pub fn config(&self) -> Arc<BudgetConfig> {
        self.settings.load().cfg.clone()
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// A selector for one conversation, sharing this budget's clock.
    pub fn selector(&self) -> Selector {
        Selector::with_clock(&self.settings.load().cfg.selector, self.clock.clone())
    }

    /// The agent called `name`, as the config says now.
    pub fn agent(&self, name: &str) -> Result<AgentProfile, BudgetError> {
        self.settings
            .load()
            .agents
            .get(name)
            .map(|(a, _)| a.clone())
            .ok_or_else(|| BudgetError::UnknownAgent(name.to_string()))
    }

    /// Every agent, sorted by name.
    pub fn agents(&self) -> Vec<AgentProfile> {
        let mut v: Vec<AgentProfile> = self.settings.load().agents.values().map(|(a, _)| a.clone()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    fn state(&self, tool: &str) -> Arc<ToolState> {
        if let Some(s) = self.tools.read().unwrap_or_else(|p| p.into_inner()).get(tool) {
            return s.clone();
        }
        let cfg = self.config();
        let mut w = self.tools.write().unwrap_or_else(|p| p.into_inner());
        w.entry(tool.to_string())
            .or_insert_with(|| {
                Arc::new(ToolState {
                    stats: Mutex::new(ToolStats {
                        real: Window::new(cfg.window, Duration::from_secs(cfg.window_max_age_secs)),
                        probes: Window::new(cfg.window, Duration::MAX),
                        callers: PerCaller::default(),
                    }),
                    shared: CachedTier::new(),
                    views: RwLock::new(PerCaller::default()),
                })
            })
            .clone()
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos().min(u128::from(u64::MAX - 1)) as u64
    }

    /// Computes a tool's status in `viewer`'s view from its stats (under
    /// the stats lock).
    fn compute(&self, def: &ToolDef, stats: &ToolStats, viewer: Viewer<'_>, now: Instant) -> ToolStatus {
        let set = self.settings.load();
        // The real calls that count for this view: the caller's own.
        let own = match viewer {
            Viewer::Caller(c) => stats.callers.get(c).and_then(|w| w.summary(now)),
            Viewer::Shared => None,
        };
        let probes = stats.probes.summary(now);
        let (source, p50) = match (own, probes, def.meta.estimated_duration_ms) {
            (Some(r), _, _) if r.count >= set.cfg.min_samples => (TierSource::Measured, Some(r.p50)),
            (_, Some(p), _) => (TierSource::Calibrated, Some(p.p50)),
            (_, _, Some(ms)) => (TierSource::Declared, Some(Duration::from_millis(u64::from(ms)))),
            _ if def.meta.unmeasured_tier.is_some() => (TierSource::Assigned, None),
            _ => (TierSource::Default, None),
        };
        let measured_p50 = match source {
            TierSource::Measured | TierSource::Calibrated => p50,
            _ => None,
        };
        let (source, base_tier) = match set.cfg.pin.get(&def.name) {
            Some(&pinned) => (TierSource::Pinned, Some(pinned)),
            None => (
                source,
                match p50 {
                    Some(p) => set.ceilings.tier_for(p),
                    None => Some(unmeasured_tier(&set, def)),
                },
            ),
        };
        let unhealthy =
            |r: &Summary| r.count >= set.cfg.min_health_samples && r.error_rate() > set.cfg.demote_error_rate;
        let demoted = own.as_ref().is_some_and(unhealthy);
        let tier = if demoted { base_tier.and_then(Tier::slower) } else { base_tier };
        let (real, demoted_for) = match viewer {
            Viewer::Caller(_) => (own, usize::from(demoted)),
            Viewer::Shared => (
                stats.real.summary(now),
                stats.callers.values().filter(|w| w.summary(now).as_ref().is_some_and(unhealthy)).count(),
            ),
        };
        ToolStatus {
            base_tier,
            tier,
            demoted,
            source,
            real,
            probes,
            p50,
            badge: measured_p50.map(Badge::for_p50),
            timeout: timeout(&set, def, tier, own),
            demoted_for,
        }
    }

    /// Computes `viewer`'s status and caches its tier.
    fn refresh(
        &self,
        def: &ToolDef,
        state: &ToolState,
        stats: &ToolStats,
        viewer: Viewer<'_>,
        now: Instant,
    ) -> ToolStatus {
        let status = self.compute(def, stats, viewer, now);
        let store = |cache: &CachedTier, own_samples: bool| {
            cache.tier.store(tier_code(status.tier), Ordering::Release);
            // With real samples, the tier may change as old samples age
            // out: recompute at most once a second on the read path.
            let stale = if own_samples { self.nanos(now + Duration::from_secs(1)) } else { u64::MAX };
            cache.stale_after.store(stale, Ordering::Release);
        };
        match viewer {
            Viewer::Shared => store(&state.shared, false),
            Viewer::Caller(c) => match state.views.read().unwrap_or_else(|p| p.into_inner()).get(c) {
                Some(cache) => store(cache, status.real.is_some()),
                // No calls of its own: it sees the shared view.
                None => store(&state.shared, false),
            },
        }
        status
    }

    /// The tool's shared view: the tier every caller sees before its own
    /// evidence (pinned, calibrated, declared), with every caller's real
    /// calls together for the figures, and how many callers' own views
    /// demote it.
    pub fn status(&self, def: &ToolDef) -> ToolStatus {
        let state = self.state(&def.name);
        let now = self.clock.now();
        let stats = state.stats.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(def, &state, &stats, Viewer::Shared, now)
    }

    /// The tool as `caller` (`None`: the operator) sees it now: its own
    /// real calls, once there are enough, else the shared view.
    pub fn status_for(&self, def: &ToolDef, caller: Option<&str>) -> ToolStatus {
        let state = self.state(&def.name);
        let now = self.clock.now();
        let stats = state.stats.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(def, &state, &stats, Viewer::Caller(caller), now)
    }

    /// The tool's current tier in `caller`'s view; `None` when over
    /// budget. Takes no lock but a read lock unless the cached value is
    /// stale.
    pub fn tool_tier(&self, def: &ToolDef, caller: Option<&str>) -> Option<Tier> {
        let now = self.clock.now();
        let cached = {
            let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
            self.cached_tier(tools.get(&def.name), def, caller, now)
        };
        cached.unwrap_or_else(|| self.status_for(def, caller).tier)
    }

    /// The tier from a tool's cached state in `caller`'s view, or from its
    /// declaration when it has no state yet. `None` when the cache is stale.
    fn cached_tier(
        &self,
        state: Option<&Arc<ToolState>>,
        def: &ToolDef,
        caller: Option<&str>,
        now: Instant,
    ) -> Option<Option<Tier>> {
        let Some(state) = state else {
            // Never called nor probed: the pinned, declared or default tier.
            let set = self.settings.load();
            if let Some(&pinned) = set.cfg.pin.get(&def.name) {
                return Some(Some(pinned));
            }
            return Some(match def.meta.estimated_duration_ms {
                Some(ms) => set.ceilings.tier_for(Duration::from_millis(u64::from(ms))),
                None => Some(unmeasured_tier(&set, def)),
            });
        };
        let views = state.views.read().unwrap_or_else(|p| p.into_inner());
        let cache = views.get(caller).map_or(&state.shared, |v| &**v);
        let code = cache.tier.load(Ordering::Acquire);
        (code != u8::MAX && self.nanos(now) < cache.stale_after.load(Ordering::Acquire)).then(|| code_tier(code))
    }

    /// The deadline a call of `def` by `caller` gets now. Cheap when the
    /// tool declares a max duration (the common case): no lock.
    pub fn timeout_for(&self, def: &ToolDef, caller: Option<&str>) -> Duration {
        let set = self.settings.load();
        if let Some(ms) = def.meta.deadline_ms {
            return set.deadlines.deadline(Some(Duration::from_millis(u64::from(ms))), None);
        }
        match def.meta.max_duration_ms {
            // A tool that says it runs long gets what it declares (within
            // the operator's floor and ceiling), not its tier's ceiling.
            Some(ms) if def.meta.long_running => {
                set.deadlines.deadline(Some(Duration::from_millis(u64::from(ms))), None)
            }
            Some(ms) => set.deadlines.deadline(
                Some(Duration::from_millis(u64::from(ms))),
                Some(set.ceilings.of(self.tool_tier(def, caller).unwrap_or(Tier::Deep))),
            ),
            None => self.status_for(def, caller).timeout,
        }
    }

    /// Records a real call by `caller` (`None`: the operator). Every call
    /// does, so this only adds the sample (to the caller's window and to
    /// everyone's) and marks the caller's cached tier stale (under the
    /// tool's lock, held for a push): the next reader of the caller's tier
    /// recomputes it from its window, and calls that nobody reads the tier
    /// between never pay for the summary. No other caller's view changes.
    pub fn record(&self, def: &ToolDef, caller: Option<&str>, duration: Duration, outcome: Outcome) {
        let state = self.state(&def.name);
        let now = self.clock.now();
        let mut stats = state.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.real.record(now, duration, outcome);
        // The settings are read only for a caller's first call of the tool.
        let new_window = || {
            let cfg = self.config();
            Window::new(cfg.window, Duration::from_secs(cfg.window_max_age_secs))
        };
        stats.callers.get_or_insert_with(caller, new_window).record(now, duration, outcome);
        let view = state.views.read().unwrap_or_else(|p| p.into_inner()).get(caller).cloned();
        match view {
            Some(v) => v.invalidate(),
            None => {
                state
                    .views
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(caller, || Arc::new(CachedTier::new()));
            }
        }
    }

    /// Records calibration probes, replacing earlier ones for the tool.
    /// Probes are the shared view's evidence: every view is recomputed.
    pub fn record_probes(&self, def: &ToolDef, durations: &[Duration]) {
        let state = self.state(&def.name);
        let now = self.clock.now();
        let mut stats = state.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.probes.clear();
        for d in durations {
            stats.probes.record(now, *d, Outcome::Ok);
        }
        state.invalidate();
        self.refresh(def, &state, &stats, Viewer::Shared, now);
    }

    /// Forgets every measurement of a tool (for example when a new version replaces it).
    pub fn forget(&self, tool: &str) {
        self.tools.write().unwrap_or_else(|p| p.into_inner()).remove(tool);
    }

    /// Lets the DM elevate (or lower) one agent's tier for `ttl`: while it
    /// lasts, the agent's effective tier is `tier`, whatever its ceiling and
    /// the selector say.
    pub fn set_override(&self, agent: &str, tier: Tier, ttl: Duration) -> Result<(), BudgetError> {
        self.agent(agent)?;
        let until = self.clock.now() + ttl;
        self.overrides.lock().unwrap_or_else(|p| p.into_inner()).insert(agent.to_string(), (tier, until));
        Ok(())
    }

    /// Ends an override early.
    pub fn clear_override(&self, agent: &str) {
        self.overrides.lock().unwrap_or_else(|p| p.into_inner()).remove(agent);
    }

    /// The DM override in force for `agent`, if any (expired ones are dropped).
    pub fn override_for(&self, agent: &str) -> Option<Tier> {
        let now = self.clock.now();
        let mut o = self.overrides.lock().unwrap_or_else(|p| p.into_inner());
        match o.get(agent) {
            Some(&(tier, until)) if now < until => Some(tier),
            Some(_) => {
                o.remove(agent);
                None
            }
            None => None,
        }
    }

    /// The tier an agent works at for a turn: a DM override if one is in
    /// force, else min(agent ceiling, selected tier). Without an agent
    /// (the operator), the selected tier.
    pub fn effective_tier(&self, agent: Option<&str>, selected: Tier) -> Result<Tier, BudgetError> {
        let Some(name) = agent else { return Ok(selected) };
        let profile = self.agent(name)?;
        Ok(self.override_for(name).unwrap_or_else(|| selected.min(profile.budget_tier)))
    }

    /// Runs the selector for `agent` and applies the agent's ceiling and any
    /// DM override: the tier for this turn, and why.
    pub fn select(
        &self,
        selector: &Selector,
        agent: Option<&str>,
        utterance: &str,
        turn: Turn,
    ) -> Result<Selection, BudgetError> {
        let dm_override = agent.and_then(|a| self.override_for(a));
        let sel = selector.select(utterance, Turn { dm_override: dm_override.or(turn.dm_override), ..turn });
        let tier = match (agent, dm_override) {
            (Some(_), Some(o)) => o,
            (Some(a), None) if sel.reason != Reason::DmOverride => sel.tier.min(self.agent(a)?.budget_tier),
            _ => sel.tier,
        };
        Ok(Selection { tier, reason: sel.reason })
    }
}

/// The tier of a tool with no declared p50 and no measurements: the one
/// the operator assigned it (an external server's `tier`), else
/// `unmeasured_tier`.
fn unmeasured_tier(set: &Settings, def: &ToolDef) -> Tier {
    def.meta.unmeasured_tier.unwrap_or(set.cfg.unmeasured_tier)
}

/// A call's deadline: the one the operator set for the tool (an
/// external server's `timeout_ms`), else what the tool wants (its
/// declared max duration, or its measured p99 times the margin) under
/// the tier's ceiling; always within the operator's policy.
fn timeout(set: &Settings, def: &ToolDef, tier: Option<Tier>, real: Option<Summary>) -> Duration {
    if let Some(ms) = def.meta.deadline_ms {
        return set.deadlines.deadline(Some(Duration::from_millis(u64::from(ms))), None);
    }
    let wanted = match (def.meta.max_duration_ms, real) {
        (Some(ms), _) => Some(Duration::from_millis(u64::from(ms))),
        (None, Some(r)) if r.count >= set.cfg.min_samples => Some(r.p99.mul_f64(set.cfg.timeout_margin)),
        _ => None,
    };
    if wanted.is_none() && def.meta.deep_until_measured {
        let deep = set.ceilings.of(Tier::Deep);
        return set.deadlines.deadline(Some(deep), Some(deep));
    }
    set.deadlines.deadline(wanted, Some(set.ceilings.of(tier.unwrap_or(Tier::Deep))))
}

/// How a call's result counts for the tool's health.
pub fn outcome_of(result: &Result<crate::tool::ToolOutput, CallError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Ok,
        Err(CallError::Timeout { .. }) => Outcome::Timeout,
        // The tool answered in time and said no: that is healthy.
        Err(CallError::InvalidInput { .. } | CallError::NotFound { .. } | CallError::Forbidden { .. }) => Outcome::Ok,
        Err(CallError::UnknownTool(_) | CallError::CapacityExceeded(_)) => Outcome::Ok,
        Err(_) => Outcome::Error,
    }
}

#[cfg(test)]
pub(crate) mod tests;
