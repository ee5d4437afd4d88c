//! Live budgets (issue #13, items 4 and 5), through the real binary against
//! a running `serve --http`: figures and DM overrides read and set in the
//! running host, measurements that survive a restart (and a tampered file
//! that is refused), background calibration that finds a tool lying about
//! its latency, and the local view when no host runs.

use crate::common::{stderr, stdout, toolhost};
use crate::live::{Proc, Watcher, eventually, serve};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use toolhost_test_artifacts::LIAR_PATH;

/// `toolhost ARGS` in `dir` with its state directory.
fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    toolhost().current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(args).output().unwrap()
}

/// `toolhost ARGS --json` in `dir`, parsed; panics on failure.
fn json(dir: &Path, args: &[&str]) -> (Value, String) {
    let o = run(dir, args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    (serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o))), stderr(&o))
}

fn row<'a>(stats: &'a Value, tool: &str) -> &'a Value {
    stats.as_array().unwrap().iter().find(|r| r["tool"] == tool).unwrap_or_else(|| panic!("no {tool} in {stats}"))
}

fn dir_with(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), config).unwrap();
    dir
}

async fn connect(url: &str, path: &str) -> (crate::live::Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let w = Watcher::default();
    let count = w.0.clone();
    let client = w.serve(StreamableHttpClientTransport::from_uri(format!("{url}{path}"))).await.expect("initialize");
    (client, count)
}

async fn roll(c: &crate::live::Client) {
    let params =
        CallToolRequestParams::new("roll").with_arguments(json!({"expression": "1d6"}).as_object().unwrap().clone());
    let r = c.call_tool(params).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
}

/// `_meta.toolhost` of `tool` in the session's tools/list.
async fn meta(c: &crate::live::Client, tool: &str) -> Value {
    let tools = c.list_all_tools().await.unwrap();
    let t = tools.iter().find(|t| t.name == tool).unwrap_or_else(|| panic!("{tool} not listed"));
    serde_json::to_value(t).unwrap()["_meta"]["toolhost"].clone()
}

/// Waits (bounded) for `proc` to exit.
fn wait_exit(proc: &mut Proc) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if proc.0.try_wait().unwrap().is_some() {
            return;
        }
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const QUIET: &str = "server:\n  rate_limit: { per_minute: 0 }\n";

#[tokio::test(flavor = "multi_thread")]
async fn stats_json_against_a_running_host_shows_the_calls_made_over_mcp() {
    let dir = dir_with(&format!("{QUIET}budget:\n  min_samples: 3\n"));
    let (host, url) = serve(dir.path());
    let (c, _) = connect(&url, "/mcp").await;
    assert!(meta(&c, "write_file").await["measured_p50_ms"].is_null(), "not measured: no figure");
    for _ in 0..5 {
        roll(&c).await;
    }
    let (stats, note) = json(dir.path(), &["stats", "--json"]);
    assert!(note.contains(&format!("live: host pid {} at http://127.0.0.1:", host.0.id())), "{note}");
    let r = row(&stats, "roll");
    assert_eq!(r["calls"], 5, "{r}");
    // The shared tier: real calls set only their own caller's (the
    // operator's here: its tools/list below), never everyone's.
    assert!(["declared", "calibrated"].contains(&r["tier_source"].as_str().unwrap()), "{r}");
    let p50 = r["real_p50_ms"].as_f64().unwrap();
    assert!(p50 > 0.0, "{r}");
    assert!(r["p99_ms"].as_f64().unwrap() >= p50, "{r}");
    assert_eq!((r["error_rate"].as_f64(), r["tier"].as_str()), (Some(0.0), Some("fast")), "{r}");
    assert!(r["newest_call_age_s"].as_f64().unwrap() < 60.0, "{r}");
    // tools/list carries the measured figures too.
    let m = meta(&c, "roll").await;
    assert!(m["measured_p50_ms"].as_f64().is_some_and(|v| v > 0.0), "{m}");
    assert!(m["measured_p99_ms"].as_f64().unwrap() >= m["measured_p50_ms"].as_f64().unwrap(), "{m}");
    // The text table says the same.
    let o = run(dir.path(), &["stats"]);
    let line = stdout(&o).lines().find(|l| l.starts_with("roll ")).unwrap().to_string();
    assert!(line.split_whitespace().nth(1) == Some("5") && line.contains("ago"), "{line}");
    c.cancel().await.unwrap();
}

/// The shipped `examples/table.yaml` is clean, and its tiers are at work:
/// Bartok sees only the dice until the DM lets him up to STANDARD.
#[tokio::test(flavor = "multi_thread")]
async fn the_table_example_is_clean_and_an_override_changes_what_bartok_sees() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/table.yaml");
    let dir = dir_with(&std::fs::read_to_string(&example).unwrap());
    let o = run(dir.path(), &["doctor"]);
    assert!(o.status.success(), "doctor: {}{}", stdout(&o), stderr(&o));
    let (_host, _) = serve(dir.path());
    let sees = |agents: &Value, who: &str| -> Vec<String> {
        let a = agents.as_array().unwrap().iter().find(|a| a["name"] == who).unwrap_or_else(|| panic!("{agents}"));
        a["visible"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
    };
    let (agents, _) = json(dir.path(), &["agents", "--json"]);
    assert_eq!(sees(&agents, "Bartok the Barkeep"), ["roll", "roll_table"], "{agents}");
    assert_eq!(sees(&agents, "Mira the Sage"), ["get_rule", "roll", "search_rules"], "{agents}");
    assert_eq!(sees(&agents, "The Oracle").len(), 4, "{agents}");
    let o = run(dir.path(), &["override", "Bartok the Barkeep", "standard", "--for", "10m"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (agents, _) = json(dir.path(), &["agents", "--json"]);
    assert_eq!(sees(&agents, "Bartok the Barkeep"), ["get_rule", "roll", "roll_table", "search_rules"], "{agents}");
}

/// With the config file broken mid-edit, the live commands still reach the
/// running host (as `status` and `override` do), saying the file is broken.
#[tokio::test(flavor = "multi_thread")]
async fn agents_and_stats_reach_the_host_while_the_config_is_broken() {
    let dir = dir_with(&format!("{QUIET}npcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll]\n"));
    let (_host, _) = serve(dir.path());
    std::fs::write(dir.path().join("toolhost.yaml"), "npcs: [ {name: bartok, tools: [roll\n").unwrap();
    for cmd in ["agents", "stats"] {
        let o = run(dir.path(), &[cmd, "--json"]);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        assert!(stderr(&o).contains("live: host pid"), "{cmd}: {}", stderr(&o));
        assert!(stderr(&o).contains("warning: "), "{cmd} says the file is broken: {}", stderr(&o));
    }
    let (agents, _) = json(dir.path(), &["agents", "--json"]);
    assert_eq!(agents[0]["name"], "bartok", "{agents}");
}

/// A DM override outlives a restart mid-game, for what is left of it; a
/// cleared one does not come back.
#[tokio::test(flavor = "multi_thread")]
async fn a_dm_override_survives_a_restart_for_what_is_left_of_it() {
    let dir = dir_with(&format!(
        "{QUIET}budget:\n  background_calibration: false\nnpcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll]\n  - name: mira\n    budget_tier: fast\n    tools: [roll]\n"
    ));
    let (host, _) = serve(dir.path());
    for args in [&["override", "bartok", "deep", "--for", "30m"][..], &["override", "mira", "standard", "--for", "30m"]]
    {
        let o = run(dir.path(), args);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = run(dir.path(), &["override", "mira", "--clear"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Killed, not stopped: nothing is saved at exit.
    drop(host);
    let (_host, _) = serve(dir.path());
    let (agents, note) = json(dir.path(), &["agents", "--json"]);
    assert!(note.starts_with("live: host pid"), "{note}");
    let bartok = agents.as_array().unwrap().iter().find(|a| a["name"] == "bartok").unwrap();
    assert_eq!(bartok["dm_override"]["tier"], "deep", "{agents}");
    let left = bartok["dm_override"]["remaining_s"].as_f64().unwrap();
    assert!((60.0..=1800.0).contains(&left), "what was left of its 30 minutes: {left}");
    let mira = agents.as_array().unwrap().iter().find(|a| a["name"] == "mira").unwrap();
    assert!(mira["dm_override"].is_null(), "a cleared override stays cleared: {agents}");
    // Issue #52, item 6: the help says so.
    let help = stdout(&run(dir.path(), &["override", "--help"]));
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("a host restarted before it runs out restores it"), "{help}");
    assert!(!help.contains("end with it"), "{help}");
}

/// Issue #52, item 8: a command run without the config that names an
/// overridden agent warns of nothing (nothing is lost), and the override is
/// still there for the config that names it.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_run_without_the_config_keeps_an_override_and_does_not_warn() {
    let dir = dir_with(&format!("{QUIET}npcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll]\n"));
    let (host, _) = serve(dir.path());
    let o = run(dir.path(), &["override", "bartok", "deep", "--for", "30m"]);
    assert!(o.status.success(), "{}", stderr(&o));
    drop(host);
    let elsewhere = tempfile::tempdir().unwrap();
    let o = toolhost()
        .current_dir(elsewhere.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .args(["agents"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("not restored") && !stderr(&o).contains("warning"), "{}", stderr(&o));
    let (agents, _) = json(dir.path(), &["agents", "--json"]);
    assert_eq!(agents[0]["dm_override"]["tier"], "deep", "{agents}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dm_override_changes_an_agents_tools_in_the_running_host_and_its_session_is_told() {
    // Ceilings low enough that search_facts (declared 200 ms) is DEEP; no
    // background probes, so the declared figures hold.
    let dir = dir_with(&format!(
        "{QUIET}budget:\n  fast_ms: 10\n  standard_ms: 40\n  background_calibration: false\nnpcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll, search_facts]\n"
    ));
    let (_host, url) = serve(dir.path());
    let (c, changed) = connect(&url, "/mcp/bartok").await;
    assert_eq!(crate::live::names(&c).await, ["roll"]);
    let (agents, _) = json(dir.path(), &["agents", "--json"]);
    assert_eq!(agents[0]["visible"], json!(["roll"]), "{agents}");
    assert!(agents[0]["dm_override"].is_null(), "{agents}");

    let before = changed.load(Ordering::SeqCst);
    let o = run(dir.path(), &["override", "bartok", "deep", "--for", "1m"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("bartok: DEEP for 1m 0s (ceiling FAST)"), "{}", stdout(&o));
    assert!(stdout(&o).contains("sees now: roll, search_facts"), "{}", stdout(&o));
    eventually("tools/list_changed after the override", async || changed.load(Ordering::SeqCst) > before).await;
    assert_eq!(crate::live::names(&c).await, ["roll", "search_facts"], "the DEEP tool is listed now");
    let (agents, note) = json(dir.path(), &["agents", "--json"]);
    assert!(note.starts_with("live: host pid"), "{note}");
    let o = &agents[0]["dm_override"];
    assert_eq!(o["tier"], "deep", "{agents}");
    assert!((50.0..=60.0).contains(&o["remaining_s"].as_f64().unwrap()), "{agents}");
    let table = stdout(&run(dir.path(), &["agents"]));
    assert!(table.contains("DEEP, ") && table.contains(" left"), "{table}");

    let before = changed.load(Ordering::SeqCst);
    let o = run(dir.path(), &["override", "bartok", "--clear"]);
    assert!(o.status.success() && stdout(&o).contains("no override; back to its ceiling FAST"), "{}", stdout(&o));
    eventually("tools/list_changed after --clear", async || changed.load(Ordering::SeqCst) > before).await;
    assert_eq!(crate::live::names(&c).await, ["roll"]);

    // Mistakes are refused, saying why, and change nothing.
    for (args, why) in [
        (
            &["override", "greymantle", "deep"][..],
            "unknown agent \"greymantle\"; the agents (npcs in the config) are: \"bartok\"",
        ),
        (&["override", "bartok", "glacial"][..], "unknown tier \"glacial\": use fast, standard or deep"),
        (&["override", "bartok", "deep", "--for", "10"][..], "needs a unit"),
        (&["override", "bartok", "deep", "--for", "2d"][..], "is not a duration"),
        (&["override", "bartok"][..], "required"),
    ] {
        let o = run(dir.path(), args);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains(why), "{args:?}: {}", stderr(&o));
    }
    let (agents, _) = json(dir.path(), &["agents", "--json"]);
    assert!(agents[0]["dm_override"].is_null(), "{agents}");
    c.cancel().await.unwrap();
}

#[test]
fn background_calibration_tiers_a_tool_that_lies_about_its_latency() {
    let dir = dir_with(&format!(
        "{QUIET}plugins:\n  files: [{LIAR_PATH}]\naudit:\n  path: ./audit.jsonl\nnpcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll, liar]\n"
    ));
    // What it declares: FAST (a fresh state directory, nothing measured).
    let (tools, _) = json(dir.path(), &["tools", "--json"]);
    let liar = tools.as_array().unwrap().iter().find(|t| t["name"] == "liar").unwrap();
    assert_eq!(
        (liar["budget"]["tier"].as_str(), liar["budget"]["tier_source"].as_str()),
        (Some("fast"), Some("declared"))
    );

    let started = Instant::now();
    let (_host, _url) = serve(dir.path());
    let stats = until_calibrated(dir.path(), "liar");
    eprintln!("liar calibrated {} ms after serve started", started.elapsed().as_millis());
    let r = row(&stats, "liar");
    assert_eq!(r["tier"], "standard", "600 ms is STANDARD whatever it declares: {r}");
    let p50 = r["probe_p50_ms"].as_f64().unwrap();
    assert!((590.0..1500.0).contains(&p50), "probed past its declared 50 ms maximum: {r}");
    assert_eq!(r["calls"], 0, "probes are not calls: {r}");
    // bartok (FAST) no longer sees it.
    let (agents, _) = json(dir.path(), &["agents", "--json"]);
    assert_eq!(agents[0]["visible"], json!(["roll"]), "{agents}");
    // Each probe left an audit record of its own; none is a call.
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let records: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let probes: Vec<&Value> = records.iter().filter(|r| r["event"] == "probe" && r["tool"] == "liar").collect();
    assert!(!probes.is_empty() && probes.iter().all(|p| p["outcome"] == "ok" && p["agent"].is_null()), "{audit}");
    assert!(!records.iter().any(|r| r["event"] == "call"), "{audit}");
    // A later start reuses the stored probes.
    let (stats, _) = json(dir.path(), &["stats", "--json", "--env", "default"]);
    assert_eq!(row(&stats, "liar")["tier"], "standard");
}

/// `stats --json` of the running host once `tool` is calibrated (60 s at most).
fn until_calibrated(dir: &Path, tool: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (stats, note) = json(dir, &["stats", "--json"]);
        assert!(note.starts_with("live: host pid"), "{note}");
        if row(&stats, tool)["tier_source"] == "calibrated" {
            return stats;
        }
        assert!(Instant::now() < deadline, "never calibrated: {}", row(&stats, tool));
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_plugin_added_to_the_running_host_is_calibrated_in_the_background() {
    let dir = dir_with(QUIET);
    let (_host, _url) = serve(dir.path());
    let staged = dir.path().join("liar.wasm");
    std::fs::copy(LIAR_PATH, &staged).unwrap();
    let o = run(dir.path(), &["plugin", "add", staged.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stats = until_calibrated(dir.path(), "liar");
    assert_eq!(row(&stats, "liar")["tier"], "standard", "{}", row(&stats, "liar"));
}

#[tokio::test(flavor = "multi_thread")]
async fn measurements_survive_a_restart_and_a_tampered_file_is_refused() {
    let dir = dir_with(&format!("{QUIET}budget:\n  background_calibration: false\n"));
    let (mut host, url) = serve(dir.path());
    let (c, _) = connect(&url, "/mcp").await;
    for _ in 0..4 {
        roll(&c).await;
    }
    // SIGTERM with the session still open: saved at the signal, before
    // the open session lets the server drain.
    let file = dir.path().join("state/measurements.json");
    let pid = host.0.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let samples = || -> usize {
        std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v["tools"]["roll"]["samples"].as_array().map(Vec::len))
            .unwrap_or(0)
    };
    eventually("the measurements saved at SIGTERM", async || samples() == 4).await;
    c.cancel().await.unwrap();
    wait_exit(&mut host);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);

    std::thread::sleep(Duration::from_millis(1100));
    let (again, _url) = serve(dir.path());
    let (stats, note) = json(dir.path(), &["stats", "--json"]);
    assert!(note.contains(&format!("live: host pid {}", again.0.id())), "{note}");
    let r = row(&stats, "roll");
    assert_eq!(r["calls"], 4, "{r}");
    let age = r["newest_call_age_s"].as_f64().unwrap();
    assert!((1.0..60.0).contains(&age), "the samples kept their age across the restart: {r}");
    assert!(r["oldest_call_age_s"].as_f64().unwrap() >= age, "{r}");
    drop(again);

    // A tampered file: refused with a warning, nothing of it used.
    let mut hostile = saved.clone();
    hostile["tools"]["roll"]["samples"][0]["duration_us"] = json!(86_400_000_000_u64);
    std::fs::write(&file, hostile.to_string()).unwrap();
    let (stats, note) = json(dir.path(), &["stats", "--json"]);
    assert!(note.contains("local view") && note.contains("measurements.json: refused"), "{note}");
    assert!(note.contains("longer than any deadline"), "{note}");
    assert_eq!(row(&stats, "roll")["calls"], 0);
    std::fs::write(&file, "{\"version\": 1, \"tools\": ").unwrap();
    let o = run(dir.path(), &["stats"]);
    assert!(o.status.success() && stderr(&o).contains("refused"), "{}", stderr(&o));
}

#[test]
fn without_a_running_host_stats_agents_and_plugin_list_say_they_are_a_local_view() {
    let dir = dir_with("npcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll, search_rules]\n");
    let builtins = ["diceroller", "fileio", "memorytool", "ruleslookup"];
    // Each command's rows, by their first word, and what the row must hold:
    // what this process loaded from the config, with no figure of a host.
    let rows = [
        (&["stats"][..], vec![("TOOL", "CALLS"), ("roll", "declared"), ("search_rules", "declared")]),
        (&["agents"], vec![("AGENT", "SEES NOW"), ("bartok", "roll, search_rules")]),
        (&["plugin", "list"], builtins.iter().map(|b| (*b, "built in (part of the toolhost binary)")).collect()),
        (&["grants"], builtins.iter().map(|b| (*b, "sha256")).collect()),
    ];
    let state = dir.path().join("state");
    for (args, want) in rows {
        let o = run(dir.path(), args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let local = format!("local view: no toolhost is serving with state directory {}", state.display());
        assert!(stderr(&o).starts_with(&local), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        for (first, holds) in want {
            let row = out.lines().find(|l| l.split_whitespace().next() == Some(first));
            assert!(row.is_some_and(|r| r.contains(holds)), "{args:?}: no {first} row with {holds:?}:\n{out}");
        }
    }
    // No call was made: the local figures are this process's, all zero.
    let stats = stdout(&run(dir.path(), &["stats"]));
    let calls: Vec<&str> = stats.lines().skip(1).filter_map(|l| l.split_whitespace().nth(1)).collect();
    assert!(!calls.is_empty() && calls.iter().all(|c| *c == "0"), "{stats}");
    let table = stdout(&run(dir.path(), &["agents"]));
    assert!(
        table.lines().any(|l| l.starts_with("bartok") && l.contains("FAST") && l.ends_with("roll, search_rules")),
        "{table}"
    );
    let (stats, _) = json(dir.path(), &["stats", "--json"]);
    for r in stats.as_array().unwrap() {
        for key in ["tool", "calls", "p50_ms", "p99_ms", "error_rate", "tier"] {
            assert!(r.get(key).is_some(), "{key} missing: {r}");
        }
    }
    let o = run(dir.path(), &["override", "bartok", "deep"]);
    assert!(!o.status.success() && stderr(&o).contains("no running toolhost found"), "{}", stderr(&o));
}
