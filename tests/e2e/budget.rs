//! Latency budgets end to end: agent allow-lists and tiers through the binary
//! and the library, calibration persisted across runs, batches.

use crate::common::{CACHE, call, host_with, stderr, stdout, toolhost};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use toolhost::Host;
use toolhost::budget::{AgentProfile, Budget, BudgetConfig, Tier};
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::{CallContext, CallError};
use toolhost_test_artifacts::HOSTILE_PATH;

const CONFIG: &str = r#"
npcs:
  - name: Greymantle the Sage
    personality: "An ancient elven scholar with vast knowledge..."
    engine: cascaded
    budget_tier: standard
    tools: [roll, search_rules, get_rule, query_entities, get_summary, search_sessions]
  - name: Bartok the Barkeep
    personality: "A jovial halfling who runs the tavern..."
    engine: s2s
    budget_tier: fast
    tools: [roll, roll_table, query_entities]
budget:
  # search_rules declares p50 30 ms: with a 20 ms FAST ceiling it is STANDARD.
  fast_ms: 20
"#;

/// A working directory with the config and its own state dir.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new(config: &str) -> Dir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("toolhost.yaml"), config).unwrap();
        Dir(d)
    }

    fn run(&self, args: &[&str]) -> Output {
        toolhost()
            .current_dir(self.0.path())
            .env("TOOLHOST_STATE_DIR", self.0.path().join("state"))
            .args(args)
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let o = self.run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap()
    }
}

fn names(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn an_agent_sees_only_its_allowed_tools_within_its_ceiling() {
    let d = Dir::new(CONFIG);
    assert_eq!(names(&d.json(&["tools", "--agent", "Bartok the Barkeep", "--json"])), ["roll", "roll_table"]);
    assert_eq!(
        names(&d.json(&["tools", "--agent", "Greymantle the Sage", "--json"])),
        ["get_rule", "get_summary", "query_entities", "roll", "search_rules", "search_sessions"]
    );
    assert_eq!(
        names(&d.json(&["tools", "--agent", "Greymantle the Sage", "--tier", "fast", "--json"])),
        ["get_rule", "roll"],
        "search_rules is STANDARD under a 20 ms FAST ceiling"
    );
    assert_eq!(
        names(&d.json(&["tools", "--tier", "fast", "--json"])),
        ["get_rule", "list_dir", "read_file", "roll", "roll_table", "write_file"],
        "the memory tools and search_rules declare p50 above the 20 ms FAST ceiling"
    );
}

#[test]
fn a_hidden_tool_is_refused_exactly_like_an_unknown_one() {
    let d = Dir::new(CONFIG);
    let hidden = d.run(&["call", "search_rules", r#"{"query":"grapple"}"#, "--agent", "Bartok the Barkeep"]);
    let missing = d.run(&["call", "search_rulez", r#"{"query":"grapple"}"#, "--agent", "Bartok the Barkeep"]);
    assert_eq!(hidden.status.code(), Some(1));
    assert_eq!(missing.status.code(), Some(1));
    let last = |o: &Output| stderr(o).lines().last().unwrap().to_string();
    assert_eq!(last(&hidden), "error: unknown tool \"search_rules\"");
    assert_eq!(last(&missing).replace("search_rulez", "search_rules"), last(&hidden), "no existence oracle");
    // The same tool is fine for an agent allowed to use it.
    let ok = d.run(&["call", "search_rules", r#"{"query":"grapple"}"#, "--agent", "Greymantle the Sage"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
}

#[test]
fn select_reports_tier_reason_and_visible_tools() {
    let d = Dir::new(CONFIG);
    let v = d.json(&["select", "Think carefully about the rules", "--agent", "Greymantle the Sage", "--json"]);
    assert_eq!(v["tier"], "standard", "DEEP keyword, capped at the agent's STANDARD ceiling");
    assert_eq!(v["reason"], "DEEP keyword \"think carefully\"");
    assert_eq!(
        names(&json!(v["tools"].as_array().unwrap().iter().map(|n| json!({"name": n})).collect::<Vec<_>>())),
        ["get_rule", "get_summary", "query_entities", "roll", "search_rules", "search_sessions"]
    );
    let v = d.json(&["select", "remember the quest?", "--queue-depth", "4", "--json"]);
    assert_eq!((v["tier"].as_str(), v["reason"].as_str()), (Some("fast"), Some("4 players waiting")));
    let v = d.json(&["select", "hi", "--first-turn", "--json"]);
    assert_eq!(v["tier"], "standard");
    let v = d.json(&["select", "hi", "--dm-override", "deep", "--agent", "Bartok the Barkeep", "--json"]);
    assert_eq!((v["tier"].as_str(), v["reason"].as_str()), (Some("deep"), Some("DM override")));
    let text = d.run(&["select", "what's your name?"]);
    assert!(
        stdout(&text).contains("tier:   FAST") && stdout(&text).contains("no trigger: default"),
        "{}",
        stdout(&text)
    );
}

#[test]
fn calibration_is_stored_and_reused_by_the_next_start() {
    let d = Dir::new(CONFIG);
    let before = d.json(&["stats", "--json"]);
    assert!(before.as_array().unwrap().iter().all(|t| t["tier_source"] == "declared"));
    let cal = d.json(&["calibrate", "--samples", "3", "--json", "--plugin", HOSTILE_PATH]);
    let tools = cal["tools"].as_array().unwrap();
    let roll = tools.iter().find(|t| t["tool"] == "roll").unwrap();
    assert_eq!(roll["outcome"], "probed");
    let spin = tools.iter().find(|t| t["tool"] == "spin").unwrap();
    assert_eq!(
        (spin["outcome"].as_str(), spin["detail"].as_str()),
        (Some("skipped"), Some("not idempotent: never probed"))
    );
    assert!(d.0.path().join("state/calibration/default.json").exists());
    // fileio's tools have no directory granted here: their probes fail and
    // nothing is stored for them.
    let list_dir = tools.iter().find(|t| t["tool"] == "list_dir").unwrap();
    assert_eq!(list_dir["outcome"], "failed");
    let probed: Vec<&str> =
        tools.iter().filter(|t| t["outcome"] == "probed").map(|t| t["tool"].as_str().unwrap()).collect();
    assert_eq!(
        probed,
        [
            "get_rule",
            "get_summary",
            "query_entities",
            "roll",
            "roll_table",
            "search_facts",
            "search_rules",
            "search_sessions"
        ],
        "hostile tools are not idempotent"
    );
    // A new process reads the stored probes.
    let after = d.json(&["stats", "--json"]);
    for t in after.as_array().unwrap().iter().filter(|t| probed.contains(&t["tool"].as_str().unwrap())) {
        assert_eq!(t["tier_source"], "calibrated", "{t}");
        assert_eq!(t["probes"], 3, "{t}");
        assert!(t["badge"].is_string(), "{t}");
    }
    // Another environment has its own results.
    let other = d.json(&["stats", "--json", "--env", "staging"]);
    assert!(other.as_array().unwrap().iter().all(|t| t["tier_source"] == "declared"));
}

/// `budget.calibrate_tools`: the operator vouches for a tool that does not
/// say it is idempotent, and only that one is probed; without the key it
/// is skipped.
#[test]
fn budget_calibrate_tools_probes_exactly_the_named_tools() {
    let tools = |config: &str| {
        let d = Dir::new(config);
        d.json(&["calibrate", "--samples", "2", "--json", "--plugin", HOSTILE_PATH])["tools"]
            .as_array()
            .unwrap()
            .clone()
    };
    let row = |tools: &[Value], name: &str| tools.iter().find(|t| t["tool"] == name).unwrap().clone();
    let skipped = json!(["skipped", "not idempotent: never probed"]);
    let outcome = |t: &Value| json!([t["outcome"], t["detail"]]);
    let plain = tools("");
    assert_eq!(outcome(&row(&plain, "echo")), skipped, "not named: never probed");
    let named = tools("budget:\n  calibrate_tools: [echo]\n");
    let echo = row(&named, "echo");
    assert_eq!(outcome(&echo), json!(["probed", 2]), "named: probed, every sample");
    assert_eq!(echo["budget"]["tier_source"], "calibrated", "{echo}");
    assert_eq!(outcome(&row(&named, "spin")), skipped, "only the named tool");
    let probed = |tools: &[Value]| tools.iter().filter(|t| t["outcome"] == "probed").count();
    assert_eq!(probed(&named), probed(&plain) + 1, "one more probed: the named one");
}

/// Calibration probes spend no agent's tool-call rate, nor the operator's,
/// in the foreground (`calibrate`) or in the background
/// (`calibrate_tools`): after many probes, each caller still has its whole
/// burst, and the call after it is refused (the limit is live).
#[test]
fn calibration_spends_no_agents_rate() {
    use toolhost::calibrate::{ProbeOutcome, calibrate, calibrate_tools};
    use toolhost::rates::{CallRates, RateLimitConfig};
    let tight = RateLimitConfig { per_minute: 1, burst: 2, ..Default::default() };
    let rt = Runtime::new(Limits { fuel: None, ..Limits::default() }, Some(CACHE.path())).unwrap();
    let bartok = AgentProfile {
        name: "bartok".into(),
        budget_tier: Tier::Fast,
        tools: vec!["roll".into()],
        instructions: None,
        rate_limit: None,
        max_calls_per_turn: None,
        personality: None,
        engine: None,
    };
    let host = Host::from_pipeline(
        toolhost::Pipeline::with_budget(rt, Budget::new(BudgetConfig::default(), vec![bartok]))
            .with_call_rates(CallRates::new(tight, tight, Default::default())),
    );
    toolhost::builtin::add_builtins(host.admission()).unwrap();

    let probed = |results: &[toolhost::calibrate::ProbeResult]| match &results
        .iter()
        .find(|r| r.tool == "roll")
        .unwrap_or_else(|| panic!("{results:?}"))
        .outcome
    {
        ProbeOutcome::Probed(d) => d.len(),
        other => panic!("roll: {other:?}"),
    };
    assert_eq!(probed(&calibrate(host.pipeline(), 5)), 5);
    let roll = host.pipeline().registry().snapshot().get("roll").unwrap().clone();
    assert_eq!(probed(&calibrate_tools(host.pipeline(), &[roll], 5, &|| false)), 5);

    for who in [Some("bartok"), None] {
        for i in 0..tight.burst {
            let r = host.pipeline().call_as(
                who,
                Tier::Fast,
                "roll",
                &json!({"expression": "1d20"}),
                &CallContext::default(),
            );
            assert!(r.is_ok(), "{who:?}: call {i} within the burst, after 10 probes: {r:?}");
        }
        match host.pipeline().call_as(who, Tier::Fast, "roll", &json!({"expression": "1d20"}), &CallContext::default())
        {
            Err(CallError::CapacityExceeded(m)) => assert!(m.contains("tool-call rate"), "{who:?}: {m}"),
            other => panic!("{who:?}: the call past the burst is refused: {other:?}"),
        }
    }
}

#[test]
fn a_wrong_config_names_the_key_and_line_before_anything_starts() {
    let d = Dir::new("npcs:\n  - name: Bartok\n    budget_tier: speedy\n");
    let o = d.run(&["tools"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("npcs[0].budget_tier") && err.contains("line 3") && err.contains("speedy"), "{err}");
    assert!(stdout(&o).is_empty());
}

fn budget_host(agents: Vec<AgentProfile>) -> Host {
    let rt = Runtime::new(Limits { fuel: None, ..Limits::default() }, Some(CACHE.path())).unwrap();
    let host = Host::with_budget(rt, Budget::new(BudgetConfig::default(), agents));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    host.admission().add_plugin_file(Path::new(HOSTILE_PATH)).unwrap();
    host
}

#[test]
fn a_batch_runs_in_parallel_and_costs_the_slowest_call() {
    let host = budget_host(Vec::new());
    let calls: Vec<(String, Value)> = (0..3).map(|_| ("sleep".to_string(), json!({"ms": 300}))).collect();
    let batch = host.pipeline().call_batch(None, Tier::Deep, &calls, &CallContext::default());
    let durations: Vec<_> = batch.results.iter().map(|r| r.as_ref().unwrap().stats.duration).collect();
    let sum: std::time::Duration = durations.iter().sum();
    let max = *durations.iter().max().unwrap();
    assert!(batch.cost >= max);
    assert!(batch.cost < sum, "cost {:?} must be the max ({max:?}), not the sum ({sum:?})", batch.cost);
}

#[test]
fn a_batch_keeps_each_result_and_error_in_order() {
    let host = budget_host(vec![AgentProfile {
        name: "bartok".into(),
        budget_tier: Tier::Fast,
        tools: vec!["roll".into(), "spin".into()],
        instructions: None,
        rate_limit: None,
        max_calls_per_turn: None,
        personality: None,
        engine: None,
    }]);
    let calls = vec![
        ("roll".to_string(), json!({"expression": "1d4"})),
        ("spin".to_string(), json!({})),
        ("get_rule".to_string(), json!({"id": "condition-blinded"})),
    ];
    let batch = host.pipeline().call_batch(Some("bartok"), Tier::Fast, &calls, &CallContext::default());
    assert!(batch.results[0].is_ok());
    assert!(matches!(batch.results[1], Err(CallError::Timeout { limit_ms: 100, .. })), "{:?}", batch.results[1]);
    assert!(matches!(batch.results[2], Err(CallError::UnknownTool(_))), "not on bartok's allow-list");
}

#[test]
fn the_budget_deadline_bounds_wasm_calls() {
    // sleep declares max 1000 ms; a 300 ms STANDARD ceiling wins
    // (p50 1 ms keeps it in FAST, so use a budget where FAST is 300 ms).
    let rt = Runtime::new(Limits { fuel: None, ..Limits::default() }, Some(CACHE.path())).unwrap();
    let cfg = BudgetConfig { fast_ms: 300, ..BudgetConfig::default() };
    let host = Host::with_budget(rt, Budget::new(cfg, Vec::new()));
    host.admission().add_plugin_file(Path::new(HOSTILE_PATH)).unwrap();
    match host.call("sleep", &json!({"ms": 5000}), &CallContext::default()) {
        Err(CallError::Timeout { limit_ms, .. }) => assert_eq!(limit_ms, 300),
        other => panic!("{other:?}"),
    }
}

#[test]
fn repeated_failures_demote_a_tool_for_the_caller_that_saw_them() {
    let host = host_with(Limits { fuel: None, ..Limits::default() });
    let catalog = host.pipeline().registry().snapshot();
    let panic_tool = catalog.get("panic").unwrap();
    assert_eq!(host.pipeline().budget().tool_tier(&panic_tool.def, None), Some(Tier::Fast));
    for _ in 0..5 {
        assert!(call(&host, "panic", json!({})).is_err());
    }
    // The operator made the calls: the operator's view demotes the tool.
    let s = host.pipeline().budget().status_for(&panic_tool.def, None);
    assert!(s.demoted);
    assert_eq!(s.tier, Some(Tier::Standard));
    let fast: Vec<String> = host
        .pipeline()
        .budget()
        .available_tools(&catalog, None, Tier::Fast)
        .unwrap()
        .iter()
        .map(|t| t.def.name.clone())
        .collect();
    assert!(!fast.contains(&"panic".to_string()));
    assert!(fast.contains(&"roll".to_string()));
    // The shared view (what every other caller starts from) is unmoved,
    // and says for how many callers the tool is demoted.
    let shared = host.pipeline().budget().status(&panic_tool.def);
    assert_eq!((shared.tier, shared.demoted, shared.demoted_for), (Some(Tier::Fast), false, 1));
}
