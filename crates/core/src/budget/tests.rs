//! Tests of the budget enforcer with an injected clock.

use super::*;
use crate::registry::{Catalog, RegisteredTool, Registry};
use crate::tool::{CallContext, CallStats, Content, Provider, ToolMeta, ToolOutput};

/// A provider whose every tool answers "ok" at once.
#[derive(Debug)]
pub(crate) struct Fake(pub(crate) Vec<ToolDef>);

impl Provider for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn kind(&self) -> crate::tool::ProviderKind {
        crate::tool::ProviderKind::Other
    }
    fn tools(&self) -> &[ToolDef] {
        &self.0
    }
    fn call(&self, _: &str, _: &serde_json::Value, _: &CallContext) -> Result<ToolOutput, CallError> {
        Ok(ToolOutput { content: vec![Content::Text("ok".into())], structured: None, stats: CallStats::default() })
    }
}

fn def(name: &str, p50: Option<u32>, max: Option<u32>) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: String::new(),
        input_schema: serde_json::json!({"type": "object"}),
        meta: ToolMeta {
            estimated_duration_ms: p50,
            max_duration_ms: max,
            idempotent: true,
            cacheable_seconds: 0,
            ..ToolMeta::default()
        },
        probe_arguments: None,
        ..ToolDef::default()
    }
}

const MS: Duration = Duration::from_millis(1);

/// An agent with no rate limit, turn cap or instructions.
pub(crate) fn agent(name: &str, ceiling: Tier, tools: &[&str]) -> AgentProfile {
    AgentProfile {
        name: name.into(),
        budget_tier: ceiling,
        tools: tools.iter().map(|t| t.to_string()).collect(),
        instructions: None,
        rate_limit: None,
        max_calls_per_turn: None,
        personality: None,
        engine: None,
    }
}

/// roll (FAST, 5 ms), search (STANDARD, 800 ms), image (DEEP, 3 s), glacier (over budget, 9 s), mystery (no metadata).
fn setup() -> (Budget, Arc<ManualClock>, Arc<Catalog>) {
    let clock = Arc::new(ManualClock::default());
    let budget = Budget::with_clock(
        BudgetConfig::default(),
        vec![
            agent("bartok", Tier::Fast, &["roll", "search", "image"]),
            agent("greymantle", Tier::Standard, &["roll", "search", "image", "glacier"]),
            agent("oracle", Tier::Deep, &["roll", "search", "image", "glacier", "mystery"]),
            agent("mute", Tier::Deep, &[]),
        ],
        clock.clone(),
    );
    let r = Registry::new();
    r.add(Arc::new(Fake(vec![
        def("roll", Some(5), Some(20)),
        def("search", Some(800), Some(1200)),
        def("image", Some(3000), Some(3900)),
        def("glacier", Some(9000), Some(20000)),
        def("mystery", None, None),
    ])))
    .unwrap();
    (budget, clock, r.snapshot())
}

fn names(v: Vec<Arc<RegisteredTool>>) -> Vec<String> {
    v.into_iter().map(|t| t.def.name.clone()).collect()
}

fn visible(b: &Budget, c: &Catalog, agent: Option<&str>, tier: Tier) -> Vec<String> {
    names(b.available_tools(c, agent, tier).unwrap())
}

#[test]
fn declared_p50_sets_the_tier_until_measured() {
    let (b, _, c) = setup();
    let tier = |n: &str| b.tool_tier(&c.get(n).unwrap().def, None);
    assert_eq!(tier("roll"), Some(Tier::Fast));
    assert_eq!(tier("search"), Some(Tier::Standard));
    assert_eq!(tier("image"), Some(Tier::Deep));
    assert_eq!(tier("glacier"), None, "slower than the DEEP ceiling: over budget");
    assert_eq!(tier("mystery"), Some(Tier::Standard), "no metadata: the documented default");
    assert_eq!(b.status_for(&c.get("roll").unwrap().def, None).source, TierSource::Declared);
}

#[test]
fn measured_p50_replaces_the_declared_one_after_enough_samples() {
    let (b, _, c) = setup();
    let roll = &c.get("roll").unwrap().def;
    for i in 0..9 {
        b.record(roll, None, MS * 700, Outcome::Ok);
        assert_eq!(b.tool_tier(roll, None), Some(Tier::Fast), "still declared after {} samples", i + 1);
    }
    b.record(roll, None, MS * 700, Outcome::Ok);
    let s = b.status_for(roll, None);
    assert_eq!((s.source, s.tier), (TierSource::Measured, Some(Tier::Standard)));
    assert_eq!(s.badge, Some(Badge::Standard));
}

#[test]
fn calibration_probes_sit_between_declared_and_measured() {
    let (b, _, c) = setup();
    let search = &c.get("search").unwrap().def;
    b.record_probes(search, &[MS * 100, MS * 120, MS * 90]);
    let s = b.status_for(search, None);
    assert_eq!((s.source, s.tier), (TierSource::Calibrated, Some(Tier::Fast)));
    assert_eq!(s.real, None, "probes are not real calls");
    for _ in 0..10 {
        b.record(search, None, MS * 900, Outcome::Ok);
    }
    assert_eq!(b.status_for(search, None).source, TierSource::Measured);
    assert_eq!(b.tool_tier(search, None), Some(Tier::Standard));
}

#[test]
fn health_demotion_and_recovery() {
    let (b, clock, c) = setup();
    let roll = &c.get("roll").unwrap().def;
    let bartok = Some("bartok");
    for _ in 0..6 {
        b.record(roll, bartok, MS * 5, Outcome::Ok);
    }
    for _ in 0..4 {
        b.record(roll, bartok, MS * 5, Outcome::Timeout);
    }
    // 4 of 10 failed: 40% > 30%.
    let s = b.status_for(roll, bartok);
    assert!(s.demoted);
    assert_eq!((s.base_tier, s.tier), (Some(Tier::Fast), Some(Tier::Standard)));
    assert!(visible(&b, &c, bartok, Tier::Fast).is_empty(), "roll was bartok's only FAST tool");
    // Recovery by new healthy calls: 4 errors in 14 is under 30%.
    for _ in 0..4 {
        b.record(roll, bartok, MS * 5, Outcome::Ok);
    }
    assert_eq!(b.tool_tier(roll, bartok), Some(Tier::Fast));
    // Fail again, then recover by time alone: errors age out of the window.
    for _ in 0..20 {
        b.record(roll, bartok, MS * 5, Outcome::Error);
    }
    assert_eq!(b.tool_tier(roll, bartok), Some(Tier::Standard));
    clock.advance(Duration::from_secs(601));
    assert_eq!(b.tool_tier(roll, bartok), Some(Tier::Fast), "old errors aged out");
}

#[test]
fn a_demoted_deep_tool_is_hidden_from_the_caller_that_saw_it_fail() {
    let (b, _, c) = setup();
    let image = &c.get("image").unwrap().def;
    for _ in 0..5 {
        b.record(image, Some("oracle"), MS * 3000, Outcome::Error);
    }
    assert_eq!(b.tool_tier(image, Some("oracle")), None);
    assert!(!visible(&b, &c, Some("oracle"), Tier::Deep).contains(&"image".to_string()));
    assert!(visible(&b, &c, Some("greymantle"), Tier::Deep).contains(&"image".to_string()));
    assert!(visible(&b, &c, None, Tier::Deep).contains(&"image".to_string()), "and the operator");
}

#[test]
fn one_callers_failures_change_no_other_callers_view() {
    let (b, _, c) = setup();
    let before: Vec<(Option<&str>, Tier, Vec<String>)> = [None, Some("bartok"), Some("greymantle"), Some("oracle")]
        .into_iter()
        .flat_map(|a| [Tier::Fast, Tier::Standard, Tier::Deep].map(|t| (a, t)))
        .map(|(a, t)| (a, t, visible(&b, &c, a, t)))
        .collect();
    // Bartok times every tool out, errs, and makes the fast ones look slow.
    for t in c.tools() {
        for i in 0..50 {
            let outcome = [Outcome::Timeout, Outcome::Error, Outcome::Ok][i % 3];
            b.record(&t.def, Some("bartok"), MS * 20_000, outcome);
        }
    }
    assert!(visible(&b, &c, Some("bartok"), Tier::Deep).is_empty(), "bartok's own view changed");
    for (a, t, names) in before.iter().filter(|(a, ..)| *a != Some("bartok")) {
        assert_eq!(&visible(&b, &c, *a, *t), names, "{a:?} at {t:?}");
    }
    // The shared view shows what happened, and to how many callers.
    let roll = b.status(&c.get("roll").unwrap().def);
    assert_eq!(
        (roll.tier, roll.source, roll.demoted, roll.demoted_for),
        (Some(Tier::Fast), TierSource::Declared, false, 1)
    );
    assert_eq!(roll.real.unwrap().count, 50, "every caller's calls in the figures");
}

#[test]
fn probes_move_the_shared_view_and_own_calls_then_take_over() {
    let (b, _, c) = setup();
    let search = &c.get("search").unwrap().def;
    b.record_probes(search, &[MS * 3000; 5]);
    for who in [None, Some("greymantle"), Some("oracle")] {
        assert_eq!(b.tool_tier(search, who), Some(Tier::Deep), "{who:?} sees the probes");
    }
    for _ in 0..10 {
        b.record(search, Some("oracle"), MS * 100, Outcome::Ok);
    }
    assert_eq!(b.tool_tier(search, Some("oracle")), Some(Tier::Fast), "its own calls, once enough");
    assert_eq!(b.tool_tier(search, Some("greymantle")), Some(Tier::Deep), "the others: still the probes");
    assert_eq!(b.status(search).source, TierSource::Calibrated);
}

#[test]
fn tool_errors_that_are_answers_do_not_count_against_health() {
    let ok: Result<ToolOutput, CallError> = Err(CallError::InvalidInput { tool: "t".into(), message: "m".into() });
    assert_eq!(outcome_of(&ok), Outcome::Ok);
    let to: Result<ToolOutput, CallError> = Err(CallError::Timeout { tool: "t".into(), limit_ms: 1 });
    assert_eq!(outcome_of(&to), Outcome::Timeout);
    let trap: Result<ToolOutput, CallError> = Err(CallError::OutOfFuel { tool: "t".into(), fuel: 1 });
    assert_eq!(outcome_of(&trap), Outcome::Error);
}

#[test]
fn allow_list_times_ceiling_matrix() {
    let (b, _, c) = setup();
    let v = |a: &str, t: Tier| {
        let tier = b.effective_tier(Some(a), t).unwrap();
        visible(&b, &c, Some(a), tier)
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // bartok: ceiling FAST, allowed roll/search/image.
    assert_eq!(v("bartok", Tier::Fast), s(&["roll"]));
    assert_eq!(v("bartok", Tier::Standard), s(&["roll"]));
    assert_eq!(v("bartok", Tier::Deep), s(&["roll"]));
    // greymantle: ceiling STANDARD; glacier allowed but over budget.
    assert_eq!(v("greymantle", Tier::Fast), s(&["roll"]));
    assert_eq!(v("greymantle", Tier::Standard), s(&["roll", "search"]));
    assert_eq!(v("greymantle", Tier::Deep), s(&["roll", "search"]));
    // oracle: ceiling DEEP; mystery (no metadata) is STANDARD by default.
    assert_eq!(v("oracle", Tier::Fast), s(&["roll"]));
    assert_eq!(v("oracle", Tier::Standard), s(&["mystery", "roll", "search"]));
    assert_eq!(v("oracle", Tier::Deep), s(&["image", "mystery", "roll", "search"]));
    // mute: nothing allowed, nothing visible.
    assert!(v("mute", Tier::Deep).is_empty());
    // The operator (no agent) sees every tool within the tier, never an over-budget one.
    assert_eq!(visible(&b, &c, None, Tier::Deep), s(&["image", "mystery", "roll", "search"]));
}

#[test]
fn unknown_agents_are_an_error() {
    let (b, _, c) = setup();
    assert_eq!(
        b.available_tools(&c, Some("nobody"), Tier::Fast).unwrap_err(),
        BudgetError::UnknownAgent("nobody".into())
    );
}

#[test]
fn dm_override_elevates_one_agent_and_expires() {
    let (b, clock, c) = setup();
    b.set_override("bartok", Tier::Deep, Duration::from_secs(60)).unwrap();
    let sel = b.select(&b.selector(), Some("bartok"), "hello", Turn::default()).unwrap();
    assert_eq!(sel, Selection { tier: Tier::Deep, reason: Reason::DmOverride });
    assert_eq!(visible(&b, &c, Some("bartok"), sel.tier), ["image", "roll", "search"].map(String::from));
    // Other agents are unaffected.
    assert_eq!(b.effective_tier(Some("greymantle"), Tier::Deep).unwrap(), Tier::Standard);
    clock.advance(Duration::from_secs(61));
    assert_eq!(b.effective_tier(Some("bartok"), Tier::Deep).unwrap(), Tier::Fast);
    assert!(b.set_override("nobody", Tier::Deep, Duration::from_secs(1)).is_err());
}

#[test]
fn the_agent_ceiling_caps_the_selector() {
    let (b, _, _) = setup();
    let sel = b.select(&b.selector(), Some("bartok"), "think carefully", Turn::default()).unwrap();
    assert_eq!(sel.tier, Tier::Fast);
    assert_eq!(sel.reason, Reason::DeepKeyword("think carefully".into()));
    let sel = b.select(&b.selector(), Some("oracle"), "think carefully", Turn::default()).unwrap();
    assert_eq!(sel.tier, Tier::Deep);
}

#[test]
fn timeouts_come_from_declared_max_or_measured_p99_never_above_the_ceiling() {
    let (b, _, c) = setup();
    assert_eq!(b.status_for(&c.get("roll").unwrap().def, None).timeout, MS * 20);
    assert_eq!(b.status_for(&c.get("search").unwrap().def, None).timeout, MS * 1200);
    // No declared max: the tier ceiling until measured, then p99 x 1.5.
    let mystery = &c.get("mystery").unwrap().def;
    assert_eq!(b.status_for(mystery, None).timeout, MS * 1500);
    for _ in 0..10 {
        b.record(mystery, None, MS * 100, Outcome::Ok);
    }
    assert_eq!(b.status_for(mystery, None).timeout, MS * 150);
    // A declared max above the tier's ceiling is cut to the ceiling.
    let d = def("boastful", Some(10), Some(5000));
    assert_eq!(b.status_for(&d, None).timeout, MS * 500);
}

#[test]
fn an_operator_set_tier_and_deadline_apply_to_what_a_tool_leaves_undeclared() {
    let (b, _, _) = setup();
    let b = b.with_deadlines(DeadlinePolicy::default());
    let mut slow = def("upstream_slow", None, None);
    slow.meta.unmeasured_tier = Some(Tier::Deep);
    assert_eq!(b.tool_tier(&slow, None), Some(Tier::Deep), "the operator's tier, not the default");
    assert_eq!(b.status_for(&slow, None).source, TierSource::Assigned);
    assert_eq!(b.timeout_for(&slow, None), MS * 4000, "no deadline set: the tier's ceiling");
    slow.meta.deadline_ms = Some(10_000);
    assert_eq!(b.timeout_for(&slow, None), MS * 10_000, "the operator's deadline, above the tier's ceiling");
    assert_eq!(b.status_for(&slow, None).timeout, MS * 10_000);
    for _ in 0..10 {
        b.record(&slow, None, MS * 100, Outcome::Ok);
    }
    assert_eq!(b.status_for(&slow, None).timeout, MS * 10_000, "measurements do not replace it");
    assert_eq!(b.tool_tier(&slow, None), Some(Tier::Fast), "measurements do replace the assigned tier");
    let mut huge = def("upstream_huge", None, None);
    huge.meta.deadline_ms = Some(u32::MAX);
    assert_eq!(b.timeout_for(&huge, None), Duration::from_secs(30), "never above the operator's ceiling");
}

#[test]
fn a_tool_nobody_declared_gets_the_deep_ceiling_until_measured_and_keeps_its_tier() {
    let (b, _, _) = setup();
    let mut undeclared = def("upstream_undeclared", None, None);
    undeclared.meta.deep_until_measured = true;
    assert_eq!(b.tool_tier(&undeclared, None), Some(Tier::Standard), "budget.unmeasured_tier, not DEEP");
    assert_eq!(b.timeout_for(&undeclared, None), MS * 4000, "DEEP's ceiling, not STANDARD's 1500 ms");
    for _ in 0..10 {
        b.record(&undeclared, None, MS * 100, Outcome::Ok);
    }
    assert_eq!(b.tool_tier(&undeclared, None), Some(Tier::Fast), "measured: its tier follows");
    assert_eq!(b.timeout_for(&undeclared, None), MS * 150, "measured: p99 x 1.5");
    let mut told = def("upstream_told", None, Some(800));
    told.meta.deep_until_measured = false;
    assert_eq!(b.timeout_for(&told, None), MS * 800, "a declared max is what it gets");
}

mod isolation {
    //! The rule of the module docs as a property: over any interleaving of
    //! callers' calls (fast, slow, failing, timing out, in floods), probes
    //! and time passing, each caller lists exactly what it would list had
    //! only its own calls happened.
    use super::*;
    use proptest::prelude::*;

    /// The callers: three agents and the operator (`None`).
    const CALLERS: [Option<&str>; 4] = [Some("bartok"), Some("greymantle"), Some("oracle"), None];
    const TOOLS: [&str; 5] = ["roll", "search", "image", "glacier", "mystery"];

    #[derive(Debug, Clone)]
    enum Op {
        /// `n` calls of a tool by one caller, each taking `ms`.
        Calls {
            by: usize,
            tool: usize,
            ms: u64,
            outcome: u8,
            n: usize,
        },
        /// Calibration probes: the shared view's evidence.
        Probes {
            tool: usize,
            ms: u64,
        },
        Advance {
            secs: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..CALLERS.len(), 0..TOOLS.len(), 1..12_000u64, 0..3u8, 1..40usize)
                .prop_map(|(by, tool, ms, outcome, n)| Op::Calls { by, tool, ms, outcome, n }),
            1 => (0..TOOLS.len(), 1..12_000u64).prop_map(|(tool, ms)| Op::Probes { tool, ms }),
            1 => (1..700u64).prop_map(|secs| Op::Advance { secs }),
        ]
    }

    fn listing(b: &Budget, c: &Catalog, caller: Option<&str>) -> Vec<Vec<String>> {
        [Tier::Fast, Tier::Standard, Tier::Deep].iter().map(|t| visible(b, c, caller, *t)).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn no_callers_activity_changes_another_callers_listing(ops in proptest::collection::vec(op(), 1..30)) {
            let (all, clock, c) = setup();
            // One budget per caller that sees only that caller's calls (and
            // the probes), on the same clock.
            let agents = || vec![
                agent("bartok", Tier::Fast, &["roll", "search", "image"]),
                agent("greymantle", Tier::Standard, &["roll", "search", "image", "glacier"]),
                agent("oracle", Tier::Deep, &["roll", "search", "image", "glacier", "mystery"]),
                agent("mute", Tier::Deep, &[]),
            ];
            let alone: Vec<Budget> = CALLERS
                .iter()
                .map(|_| Budget::with_clock(BudgetConfig::default(), agents(), clock.clone()))
                .collect();
            for op in ops {
                match op {
                    Op::Calls { by, tool, ms, outcome, n } => {
                        let def = &c.get(TOOLS[tool]).unwrap().def;
                        let outcome = [Outcome::Ok, Outcome::Error, Outcome::Timeout][usize::from(outcome)];
                        for _ in 0..n {
                            all.record(def, CALLERS[by], MS * ms as u32, outcome);
                            alone[by].record(def, CALLERS[by], MS * ms as u32, outcome);
                        }
                    }
                    Op::Probes { tool, ms } => {
                        let def = &c.get(TOOLS[tool]).unwrap().def;
                        for b in std::iter::once(&all).chain(&alone) {
                            b.record_probes(def, &[MS * ms as u32; 3]);
                        }
                    }
                    Op::Advance { secs } => clock.advance(Duration::from_secs(secs)),
                }
                for (i, caller) in CALLERS.iter().enumerate() {
                    prop_assert_eq!(listing(&all, &c, *caller), listing(&alone[i], &c, *caller), "{:?}", caller);
                    for t in TOOLS {
                        let def = &c.get(t).unwrap().def;
                        prop_assert_eq!(all.timeout_for(def, *caller), alone[i].timeout_for(def, *caller), "{} {:?}", t, caller);
                    }
                }
            }
        }
    }
}
