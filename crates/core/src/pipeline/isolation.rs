//! The isolation property of issue #28, through the whole pipeline: two
//! agents and the operator call, fail, time out, flood past their rate
//! and steer latency in any interleaving; a third agent calling within its
//! own rate limit keeps its listing, and each of its calls succeeds.
//! (Capacity is the other half: [`crate::runtime::FairSlots`]' own
//! property test shows a caller within its share is refused only when
//! the reserve is spent, which is `capacity_exceeded`.)

use super::*;
use crate::budget::ManualClock;
use crate::budget::metrics::Outcome;
use crate::budget::tests::agent;
use crate::rates::{CallRates, RateLimitConfig};
use crate::tool::{CallStats, Content, Provider, ProviderKind, ToolDef, ToolMeta};
use proptest::prelude::*;
use std::sync::Mutex;

/// What the provider does with the others' calls; Carol's always succeed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    Succeed,
    Fail,
    TimeOut,
    Busy,
}

#[derive(Debug)]
struct Scripted {
    defs: Vec<ToolDef>,
    behaviour: Mutex<Behaviour>,
}

impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn kind(&self) -> ProviderKind {
        ProviderKind::Other
    }
    fn tools(&self) -> &[ToolDef] {
        &self.defs
    }
    fn call(&self, tool: &str, _: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        let behaviour = match ctx.agent.as_deref() {
            Some(CAROL) => Behaviour::Succeed,
            _ => *self.behaviour.lock().unwrap(),
        };
        let tool = tool.to_string();
        match behaviour {
            Behaviour::Succeed => Ok(ToolOutput {
                content: vec![Content::Text("ok".into())],
                structured: None,
                stats: CallStats::default(),
            }),
            Behaviour::Fail => Err(CallError::Failed { tool, message: "scripted failure".into() }),
            Behaviour::TimeOut => Err(CallError::Timeout { tool, limit_ms: 1 }),
            Behaviour::Busy => Err(CallError::CapacityExceeded("scripted".into())),
        }
    }
}

const CAROL: &str = "carol";
/// The others: two agents and the operator (`None`).
const OTHERS: [Option<&str>; 3] = [Some("alice"), Some("bob"), None];
/// (name, declared p50 in ms).
const TOOLS: [(&str, Option<u32>); 4] =
    [("roll", Some(5)), ("search", Some(800)), ("image", Some(3000)), ("mystery", None)];
/// Carol's allow-list, at her STANDARD ceiling.
const CAROLS: [&str; 3] = ["roll", "search", "mystery"];

fn host(clock: Arc<ManualClock>) -> (Pipeline, Arc<Scripted>) {
    let all: Vec<&str> = TOOLS.iter().map(|t| t.0).collect();
    let agents =
        vec![agent("alice", Tier::Deep, &all), agent("bob", Tier::Fast, &all), agent(CAROL, Tier::Standard, &CAROLS)];
    let runtime = crate::runtime::Runtime::new(crate::runtime::Limits::default(), None).unwrap();
    // The others flood past a small rate; Carol calls within hers (none).
    let small = RateLimitConfig { per_minute: 60, burst: 5, ..Default::default() };
    let rates = CallRates::new(small, small, [(CAROL.to_string(), RateLimitConfig::OFF)].into());
    let host = Pipeline::with_budget(runtime, Budget::with_clock(BudgetConfig::default(), agents, clock))
        .with_call_rates(rates);
    let defs = TOOLS
        .iter()
        .map(|(name, p50)| ToolDef {
            name: name.to_string(),
            input_schema: serde_json::json!({"type": "object"}),
            meta: ToolMeta { estimated_duration_ms: *p50, ..ToolMeta::default() },
            ..ToolDef::default()
        })
        .collect();
    let provider = Arc::new(Scripted { defs, behaviour: Mutex::new(Behaviour::Succeed) });
    host.registry().upsert(provider.clone()).unwrap();
    (host, provider)
}

#[derive(Debug, Clone)]
enum Op {
    /// `times` calls of a tool by one of the others, answered `behaviour`.
    Calls {
        by: usize,
        tool: usize,
        behaviour: Behaviour,
        times: usize,
    },
    /// Slow (or failing) calls by one of the others, as the pipeline records them.
    Slow {
        by: usize,
        tool: usize,
        ms: u64,
        samples: usize,
        failing: bool,
    },
    Advance {
        secs: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let behaviour =
        prop_oneof![Just(Behaviour::Succeed), Just(Behaviour::Fail), Just(Behaviour::TimeOut), Just(Behaviour::Busy)];
    prop_oneof![
        4 => (0..OTHERS.len(), 0..TOOLS.len(), behaviour, 1..25usize)
            .prop_map(|(by, tool, behaviour, times)| Op::Calls { by, tool, behaviour, times }),
        2 => (0..OTHERS.len(), 0..TOOLS.len(), 1..20_000u64, 1..15usize, any::<bool>())
            .prop_map(|(by, tool, ms, samples, failing)| Op::Slow { by, tool, ms, samples, failing }),
        1 => (1..700u64).prop_map(|secs| Op::Advance { secs }),
    ]
}

fn carols_listing(host: &Pipeline) -> Vec<String> {
    let catalog = host.registry().snapshot();
    let mut names: Vec<String> = host
        .budget()
        .available_tools(&catalog, Some(CAROL), Tier::Standard)
        .unwrap()
        .iter()
        .map(|t| t.def.name.clone())
        .collect();
    names.sort();
    names
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn no_others_activity_changes_a_callers_listing_or_fails_its_calls(ops in proptest::collection::vec(op(), 1..30)) {
        let clock = Arc::new(ManualClock::default());
        let (host, provider) = host(clock.clone());
        let listed = carols_listing(&host);
        prop_assert_eq!(listed.clone(), vec!["mystery".to_string(), "roll".into(), "search".into()]);
        let args = serde_json::json!({});
        for op in ops {
            match op.clone() {
                Op::Calls { by, tool, behaviour, times } => {
                    *provider.behaviour.lock().unwrap() = behaviour;
                    for _ in 0..times {
                        let ctx = CallContext::default();
                        let _ = match OTHERS[by] {
                            Some(agent) => {
                                let tier = host.budget().agent(agent).unwrap().budget_tier;
                                host.call_as(Some(agent), tier, TOOLS[tool].0, &args, &ctx)
                            }
                            None => host.call(TOOLS[tool].0, &args, &ctx),
                        };
                    }
                }
                Op::Slow { by, tool, ms, samples, failing } => {
                    let catalog = host.registry().snapshot();
                    let def = &catalog.get(TOOLS[tool].0).unwrap().def;
                    let outcome = if failing { Outcome::Error } else { Outcome::Ok };
                    for _ in 0..samples {
                        host.budget().record(def, OTHERS[by], Duration::from_millis(ms), outcome);
                    }
                }
                Op::Advance { secs } => clock.advance(Duration::from_secs(secs)),
            }
            prop_assert_eq!(carols_listing(&host), listed.clone(), "after {:?}", op);
            for tool in CAROLS {
                let r = host.call_as(Some(CAROL), Tier::Standard, tool, &args, &CallContext::default());
                prop_assert!(r.is_ok(), "carol's {} after {:?}: {:?}", tool, op, r.err());
            }
        }
    }
}
