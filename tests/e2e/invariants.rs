//! One test per invariant of ARCHITECTURE.md, named after it. (Three live
//! beside the machinery they need: `external::an_external_servers_failure_touches_only_its_own_tools`,
//! `hotload::a_plugin_swap_is_one_registry_store`, `hotload::plugin_files_load_only_through_the_trust_policy`.)

use crate::common::{CACHE, HOST, call, host_with, json_of, on_each_code, stderr, stdout};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use toolhost::Host;
use toolhost::budget::{AgentProfile, Budget, BudgetConfig, Tier};
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::{CallContext, CallError, Content, Provider as _};
use toolhost_test_artifacts::{COUNTER_PATH, HOSTILE_PATH, NETCLIENT_PATH, SWAP_V1_PATH, SWAP_V2_PATH};

fn counter_host() -> Host {
    let host = Host::new(Runtime::new(Limits::default(), Some(CACHE.path())).unwrap());
    host.admission().add_plugin_file(Path::new(COUNTER_PATH)).unwrap();
    host
}

fn calls_of(content: &[Content]) -> u64 {
    match content {
        [Content::Json(v)] => v["calls"].as_u64().unwrap(),
        other => panic!("{other:?}"),
    }
}

/// The guest counts its calls in a static: a reused instance would answer
/// 2, 3, ...; a fresh one answers 1 every time, sequentially and in parallel.
#[test]
fn every_call_runs_in_a_fresh_instance() {
    let host = counter_host();
    for i in 0..50 {
        let out = call(&host, "count", json!({})).unwrap();
        assert_eq!(calls_of(&out.content), 1, "call {i} saw state from an earlier call");
    }
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..20 {
                    assert_eq!(calls_of(&call(&host, "count", json!({})).unwrap().content), 1);
                }
            });
        }
    });
    // The test can fail: the same guest in one kept instance does count up.
    let plugin =
        Runtime::new(Limits::default(), Some(CACHE.path())).unwrap().load_file(Path::new(COUNTER_PATH)).unwrap();
    let mut kept = plugin.reused_instance().unwrap();
    assert_eq!(calls_of(&kept.call("count", "{}").unwrap()), 1);
    assert_eq!(calls_of(&kept.call("count", "{}").unwrap()), 2);
}

/// Each limit stops its attack with its own typed error, and the host
/// serves the next call. The deadline is set far off (a 20 s floor), so
/// fuel alone stops the loop; with fuel off, the epoch deadline does.
#[test]
fn every_call_runs_under_hard_limits_and_a_trap_never_takes_the_host_down() {
    // On the optimized code and on the fast first code alike.
    let metered = on_each_code(Limits {
        fuel: Some(200_000_000),
        memory_bytes: 16 << 20,
        timeout_floor: Duration::from_secs(20),
        ..Limits::default()
    });
    let unmetered = on_each_code(Limits { fuel: None, ..Limits::default() });
    for ((code, host), (_, unmetered)) in metered.iter().zip(&unmetered) {
        for (host, tool, kind) in [
            (host, "spin", "out_of_fuel"),
            (unmetered, "spin", "timeout"),
            (host, "grow", "memory_limit"),
            (host, "grow_table", "table_limit"),
            (host, "recurse", "stack_overflow"),
            (host, "big_output", "output_too_large"),
            (host, "panic", "guest_panic"),
        ] {
            let e = call(host, tool, json!({})).unwrap_err();
            assert_eq!(e.kind(), kind, "{code}: {tool}: {e}");
            let out = call(host, "roll", json!({"expression": "1d6"})).unwrap();
            assert!(json_of(out)["total"].as_i64().is_some(), "{code}: the host serves after {tool}");
        }
    }
    // The deadline is the tool's wanted one (its declared maximum) raised
    // to the operator's floor and cut to the ceilings (its tier's, the
    // operator's): as the timeout says, and as the clock shows. `spin`
    // declares 100 ms and loops; `sleep` declares 1 s and sleeps a minute;
    // both are FAST by their declared estimate.
    let fast = toolhost::budget::BudgetConfig::default().fast_ms;
    let ms = Duration::from_millis;
    let sleep = json!({"ms": 60_000});
    for (floor, ceiling, tool, args, want, why) in [
        (ms(10), ms(30_000), "spin", json!({}), 100, "the declared maximum, between floor and ceilings"),
        (ms(400), ms(30_000), "spin", json!({}), 400, "raised to the floor"),
        (ms(10), ms(30_000), "sleep", sleep.clone(), fast, "cut to its tier's ceiling"),
        (ms(10), ms(200), "sleep", sleep, 200, "cut to the operator's ceiling"),
    ] {
        let host =
            host_with(Limits { fuel: None, timeout_floor: floor, timeout_ceiling: ceiling, ..Limits::default() });
        let started = Instant::now();
        let e = call(&host, tool, args).unwrap_err();
        let took = started.elapsed();
        assert!(matches!(e, CallError::Timeout { limit_ms, .. } if limit_ms == want), "{why}: {tool}: {e}");
        // Near it (the epoch ticker catching up after a late wake-up can
        // end a call a few ticks early), not at the tool's own minute.
        assert!(took >= ms(want * 9 / 10) && took < ms(want + 5_000), "{why}: {tool} stopped after {took:?}");
    }
}

/// The host's validator answers (naming the field by its JSON pointer)
/// before any plugin code runs: the plugin's own errors read differently.
#[test]
fn invalid_arguments_never_reach_a_plugin() {
    let host = counter_host();
    for (args, needle) in [
        (json!({"surplus": 1}), "arguments:"),
        (json!([]), "must be a JSON object"),
        (json!("x"), "must be a JSON object"),
    ] {
        match call(&host, "count", args.clone()) {
            Err(CallError::InvalidInput { message, .. }) => assert!(message.contains(needle), "{args}: {message}"),
            other => panic!("{args}: {other:?}"),
        }
    }
    let e = call(&HOST, "roll", json!({"expression": 5})).unwrap_err();
    assert!(matches!(&e, CallError::InvalidInput { message, .. } if message.starts_with("field /expression")), "{e}");
}

/// Off the allow-list or over the tier: not listed, and refused exactly
/// like a tool that does not exist.
#[test]
fn an_agent_never_sees_or_calls_a_tool_off_its_allow_list_or_over_its_budget() {
    let agent = AgentProfile {
        name: "Bartok".into(),
        budget_tier: Tier::Fast,
        tools: vec!["roll".into(), "search_facts".into()],
        instructions: None,
        rate_limit: None,
        max_calls_per_turn: None,
        personality: None,
        engine: None,
    };
    let host = Host::with_budget(
        Runtime::new(Limits::default(), Some(CACHE.path())).unwrap(),
        // FAST up to 100 ms: search_facts (declared p50 200 ms) is STANDARD.
        Budget::new(BudgetConfig { fast_ms: 100, ..BudgetConfig::default() }, vec![agent]),
    );
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    let catalog = host.pipeline().registry().snapshot();
    let visible: Vec<String> = host
        .pipeline()
        .budget()
        .available_tools(&catalog, Some("Bartok"), Tier::Deep.min(Tier::Fast))
        .unwrap()
        .iter()
        .map(|t| t.def.name.clone())
        .collect();
    assert_eq!(visible, ["roll"], "search_facts is STANDARD, get_rule is off the list");
    let ctx = CallContext::default();
    let unknown = host.pipeline().call_as(Some("Bartok"), Tier::Fast, "no_such_tool", &json!({}), &ctx).unwrap_err();
    for tool in ["get_rule", "search_facts"] {
        let e = host
            .pipeline()
            .call_as(Some("Bartok"), Tier::Fast, tool, &json!({"id": "x", "query": "x"}), &ctx)
            .unwrap_err();
        assert_eq!(e.code(), unknown.code(), "{tool}");
        assert_eq!(e.to_string(), unknown.to_string().replace("no_such_tool", tool), "{tool}");
    }
}

/// In wasm code the epoch deadline traps a loop; in a WASI timer the
/// bounded clock wakes the sleeper at the deadline.
#[test]
fn a_guest_cannot_block_past_its_deadline() {
    for (code, host) in on_each_code(Limits { fuel: None, ..Limits::default() }) {
        cannot_block_past_its_deadline(code, host);
    }
}

fn cannot_block_past_its_deadline(code: &str, host: Host) {
    let host = std::sync::Arc::new(host);
    // On a thread of its own: a loop nothing stops fails the test (after a
    // minute, 600 times its 100 ms deadline) rather than hanging it.
    let (done, spun) = std::sync::mpsc::channel();
    let spinning = host.clone();
    std::thread::spawn(move || {
        let _ = done.send(call(&spinning, "spin", json!({})));
    });
    let e = spun.recv_timeout(Duration::from_secs(60)).expect("the loop was stopped").unwrap_err();
    assert_eq!(e.kind(), "timeout", "{code}: {e}");
    let started = Instant::now();
    let e = call(&host, "sleep", json!({"ms": 60_000})).unwrap_err();
    assert_eq!(e.kind(), "timeout", "{e}");
    assert!(started.elapsed() < Duration::from_secs(20), "a one-minute sleep ended at its 1 s deadline, not its own");
}

/// Probes never count as real calls, and never run a tool that is not
/// idempotent (the hostile plugin's tools are not).
#[test]
fn calibration_never_mixes_with_real_calls_and_never_runs_a_non_idempotent_tool() {
    let host = host_with(Limits::default());
    let results = toolhost::calibrate::calibrate(host.pipeline(), 3);
    let catalog = host.pipeline().registry().snapshot();
    for r in &results {
        let def = &catalog.get(&r.tool).unwrap().def;
        if !def.meta.idempotent {
            assert!(matches!(r.outcome, toolhost::calibrate::ProbeOutcome::Skipped(_)), "{} was probed", r.tool);
        }
        let status = host.pipeline().budget().status(def);
        assert!(status.real.is_none(), "{}: probes counted as real calls", r.tool);
    }
    let roll = host.pipeline().registry().snapshot().get("roll").unwrap().def.clone();
    assert_eq!(host.pipeline().budget().status(&roll).probes.map(|p| p.count), Some(3));
    call(&host, "roll", json!({"expression": "1d4"})).unwrap();
    let s = host.pipeline().budget().status(&roll);
    assert_eq!((s.real.map(|r| r.count), s.probes.map(|p| p.count)), (Some(1), Some(3)));

    // Nor a tool of a plugin holding `http` or `network`, however
    // idempotent: here the dice roller holds `network` and the rules
    // lookup `http`; the other built-ins' idempotent tools are probed.
    let mut grants = toolhost::capabilities::GrantsByPlugin::new();
    let grant = toolhost::capabilities::GrantConfig::default;
    grants.insert(
        "diceroller".into(),
        toolhost::capabilities::GrantConfig { network: vec!["127.0.0.1:9".into()], ..grant() },
    );
    grants.insert(
        "ruleslookup".into(),
        toolhost::capabilities::GrantConfig { http: vec!["https://example.com".into()], ..grant() },
    );
    // The runtime a host assembles: with the `http` capability's extension.
    let http = toolhost::http::HttpExtension::new(&Default::default()).unwrap();
    let runtime =
        Runtime::with_extensions(Limits::default(), Some(CACHE.path()), 1 << 30, vec![std::sync::Arc::new(http)])
            .unwrap();
    let outward = Host::new(runtime).with_grants(grants, Path::new("/"));
    toolhost::builtin::add_builtins(outward.admission()).unwrap();
    let mut probed = 0;
    for r in toolhost::calibrate::calibrate(outward.pipeline(), 1) {
        let holds = match r.provider.as_str() {
            "diceroller" => Some("network"),
            "ruleslookup" => Some("http"),
            _ => None,
        };
        match (&r.outcome, holds) {
            (toolhost::calibrate::ProbeOutcome::Skipped(why), Some(held)) => {
                assert!(why.contains(&format!("holds {held}")), "{}: {why}", r.tool);
            }
            (outcome, Some(held)) => panic!("{} holds {held} and was probed: {outcome:?}", r.tool),
            (toolhost::calibrate::ProbeOutcome::Probed(_), None) => probed += 1,
            _ => {}
        }
    }
    assert!(probed > 0, "the other built-ins' idempotent tools were probed");
}

/// A call keeps the catalogue it started with. `slow_version` (in both
/// versions of the swap plugin) reports progress from inside the guest, then
/// sleeps: the plugin is replaced and then removed while that call runs in
/// version 1, and the call still ends with version 1's answer. Calls started
/// after each change see the new catalogue.
#[test]
fn the_registry_never_changes_under_a_running_call() {
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("swap.wasm");
    std::fs::copy(SWAP_V1_PATH, &file).unwrap();
    // The FAST ceiling above the sleep: the deadline is not what ends the call.
    let budget = Budget::new(BudgetConfig { fast_ms: 20_000, ..BudgetConfig::default() }, Vec::new());
    let host = Host::with_budget(Runtime::new(Limits::default(), Some(CACHE.path())).unwrap(), budget);
    host.admission().install_plugin_file(&file).unwrap();
    let during = host.pipeline().registry().snapshot();
    // Version 2 compiled ahead (into the shared cache), so the swap below
    // takes a cache read, far less than the call it happens under.
    Runtime::new(Limits::default(), Some(CACHE.path())).unwrap().load_file(Path::new(SWAP_V2_PATH)).unwrap();
    let sleep_ms: u64 = 3_000;

    let (running_tx, running) = std::sync::mpsc::channel();
    let events: std::sync::Arc<dyn Fn(toolhost::tool::PluginEvent) + Send + Sync> = std::sync::Arc::new(move |e| {
        if matches!(e, toolhost::tool::PluginEvent::Progress { .. }) {
            let _ = running_tx.send(());
        }
    });
    std::thread::scope(|s| {
        let h = &host;
        let slow = s.spawn(move || {
            let ctx = CallContext { events: Some(events), ..CallContext::default() };
            h.call("slow_version", &json!({"ms": sleep_ms}), &ctx)
        });
        // The guest is running (it reported progress) before anything changes.
        running.recv_timeout(Duration::from_secs(60)).expect("slow_version reported progress");
        std::fs::copy(SWAP_V2_PATH, &file).unwrap();
        host.admission().install_plugin_file(&file).unwrap();
        assert_eq!(json_of(call(&host, "version", json!({})).unwrap())["version"], 2, "the swap is done");
        host.admission().uninstall_plugin("swap").unwrap();
        assert!(host.pipeline().registry().snapshot().get("slow_version").is_none(), "the plugin is gone");
        assert!(!slow.is_finished(), "the call was still running after both changes");
        let out = slow.join().unwrap().expect("the running call completes");
        assert_eq!(json_of(out)["version"], 1, "the running call ended on the version it started with");
    });
    let e = call(&host, "slow_version", json!({"ms": 0})).unwrap_err();
    assert_eq!(e.kind(), "unknown_tool", "{e}");
    // A snapshot taken before the changes still reaches the old version.
    let old = during.get("version").unwrap();
    let out = old.provider.call("version", &json!({}), &CallContext::default()).unwrap();
    assert_eq!(json_of(out)["version"], 1, "the snapshot still runs the version it held");
    assert!(during.get("new_in_v2").is_none());
}

/// No variable, directory or socket unless granted: the hostile plugin's
/// `env` sees none of this process's variables, and exactly the one granted
/// when one is; a sockets importer does not load.
#[test]
fn the_wasi_context_holds_exactly_the_plugins_grants() {
    // This process has variables (cargo sets several for a test, PATH
    // among them); none is granted, so the guest sees none.
    let path = std::env::var("PATH").expect("the test process has PATH");
    let env = call(&HOST, "env", json!({})).unwrap();
    assert!(matches!(&env.content[..], [Content::Text(t)] if t.is_empty()), "{env:?}");
    // Granted PATH: exactly PATH, with this process's value.
    let mut grants = toolhost::capabilities::GrantsByPlugin::new();
    grants.insert(
        "hostile".into(),
        toolhost::capabilities::GrantConfig { env: vec!["PATH".into()], ..Default::default() },
    );
    let granted =
        Host::new(Runtime::new(Limits::default(), Some(CACHE.path())).unwrap()).with_grants(grants, Path::new("/"));
    granted.admission().add_plugin_file(Path::new(HOSTILE_PATH)).unwrap();
    let env = call(&granted, "env", json!({})).unwrap();
    assert!(matches!(&env.content[..], [Content::Text(t)] if *t == format!("PATH={path}\n")), "{env:?}");
    // Sockets without a grant: loaded inert, every connect refused.
    let ungranted = Host::new(Runtime::new(Limits::default(), Some(CACHE.path())).unwrap());
    ungranted.admission().add_plugin_file(Path::new(NETCLIENT_PATH)).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let e = call(&ungranted, "fetch", json!({ "addr": addr })).unwrap_err();
    assert!(matches!(e, CallError::Forbidden { .. }), "{e:?}");
    let e = Host::new(Runtime::new(Limits::default(), Some(CACHE.path())).unwrap())
        .admission()
        .add_plugin_file(Path::new(HOSTILE_PATH))
        .map(|p| p.held())
        .unwrap();
    assert!(e.is_empty(), "nothing held without a grant");
}

/// Deny-by-default for files, seen by a hostile guest that the `toolhost`
/// binary runs with no grant (not by a well-behaved plugin's own checks):
/// every list, stat and read of `/`, `.`, `..`, system files, the plugin's
/// own directory and a file this test wrote fails, and nothing they hold
/// reaches the output.
#[test]
fn no_file_is_reachable_without_a_files_grant() {
    let dir = tempfile::tempdir().unwrap();
    let marker = "toolhost-e2e-deny-by-default-7c1f";
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, marker).unwrap();
    let plugin = dir.path().join("hostile.wasm");
    std::fs::copy(HOSTILE_PATH, &plugin).unwrap();
    let args = json!({"path": secret.display().to_string(), "dir": dir.path().display().to_string()}).to_string();
    let o = crate::common::toolhost()
        .current_dir(dir.path())
        .args(["call", "probe_files", &args, "--plugin", plugin.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    // Nine paths, each listed, stat'ed and read.
    let attempts: Vec<&str> =
        out.lines().filter(|l| l.starts_with("list ") || l.starts_with("stat ") || l.starts_with("read ")).collect();
    assert_eq!(attempts.len(), 27, "{out}");
    for attempt in &attempts {
        assert!(attempt.contains(": refused "), "reached without a grant: {attempt}");
    }
    // The paths themselves are in the output (the guest names what it
    // tried); what they hold is not: the file's text, a listing of the
    // plugin's directory, the password file.
    for leak in [marker, "hostile.wasm", "root:"] {
        assert!(!out.contains(leak) && !err.contains(leak), "{leak} leaked:\n{out}\n{err}");
    }
}

/// With the most verbose logging, stdout holds the result and nothing else.
#[test]
fn logs_go_to_stderr_never_stdout() {
    let o = crate::common::toolhost()
        .env("TOOLHOST_LOG", "trace")
        .args(["call", "roll", r#"{"expression":"1d20","seed":4}"#])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok(), "{out}");
    assert!(!stderr(&o).is_empty(), "the logs went to stderr");
}

/// The host-side libraries (the `toolhost` crate and the crates it is built
/// from), each of which denies `unsafe`.
const HOST_SIDE_LIBS: [&str; 14] = [
    "crates/types/src/lib.rs",
    "crates/base/src/lib.rs",
    "crates/runtime/src/lib.rs",
    "crates/core/src/lib.rs",
    "crates/admission/src/lib.rs",
    "crates/config/src/lib.rs",
    "crates/mcp/src/lib.rs",
    "crates/mcp-wire/src/lib.rs",
    "crates/mcp-client/src/lib.rs",
    "crates/http/src/lib.rs",
    "crates/bridge/src/lib.rs",
    "crates/memory/src/lib.rs",
    "crates/dist/src/lib.rs",
    "host/src/lib.rs",
];

/// `unsafe` only where wasmtime requires it (deserializing compiled code),
/// each with a SAFETY note, in every crate's sources (the SDK's included);
/// every host-side library denies it.
#[test]
fn unsafe_appears_only_where_wasmtime_requires_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let allowed = ["crates/runtime/src/load.rs", "crates/runtime/src/cache.rs"];
    let mut seen = Vec::new();
    let mut dirs: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| format!("crates/{}/src", e.unwrap().file_name().to_string_lossy()))
        .collect();
    dirs.extend(["host/src".to_string(), "sdk/src".to_string()]);
    assert!(dirs.len() >= 13, "the walk found the crates: {dirs:?}");
    for dir in &dirs {
        for file in walk(&root.join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if code.contains("unsafe {") || code.contains("unsafe fn") || code.contains("unsafe impl") {
                    assert!(allowed.contains(&rel.as_str()), "{rel}:{}: unsafe outside the allowed places", i + 1);
                    let before: Vec<&str> = text.lines().take(i).collect();
                    let noted = before.iter().rev().take(8).any(|l| l.contains("SAFETY:"));
                    assert!(noted, "{rel}:{}: unsafe without a SAFETY note", i + 1);
                    seen.push(rel.clone());
                }
            }
        }
    }
    assert!(!seen.is_empty(), "the scan found the known unsafe blocks");
    for lib in HOST_SIDE_LIBS {
        assert!(std::fs::read_to_string(root.join(lib)).unwrap().contains("#![deny(unsafe_code)]"), "{lib}");
    }
}

pub(crate) fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// One tool-name rule. The vocabulary's check is its pattern, character
/// for character and length for length; the WIT states the pattern on the
/// field it rules; the SDK's constant is the same pattern (its check is
/// compared with the vocabulary's in `sdk/tests/name_rule.rs`, which keeps
/// the guest crates out of the host's test build); and a component naming
/// a tool otherwise does not load.
#[test]
fn one_tool_name_rule_in_host_sdk_and_wit() {
    use toolhost::tool::{TOOL_NAME_PATTERN, valid_tool_name};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The pattern, read in the one shape it has: ^[class]{min,max}$.
    let (class, counts) = TOOL_NAME_PATTERN
        .strip_prefix("^[")
        .and_then(|p| p.strip_suffix("}$"))
        .and_then(|p| p.split_once("]{"))
        .expect("the pattern is ^[class]{min,max}$");
    let (min, max) =
        counts.split_once(',').map(|(a, b)| (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap())).unwrap();
    let class: Vec<char> = class.chars().collect();
    let mut allowed = std::collections::HashSet::new();
    let mut i = 0;
    while i < class.len() {
        if i + 2 < class.len() && class[i + 1] == '-' {
            allowed.extend(class[i]..=class[i + 2]);
            i += 3;
        } else {
            allowed.insert(class[i]);
            i += 1;
        }
    }
    assert_eq!(allowed.len(), 64, "the class read: {allowed:?}");
    for c in (0u8..=127).map(char::from).chain(['é', 'ü', '\u{a0}', '名', '💥']) {
        let want = allowed.contains(&c);
        assert_eq!(valid_tool_name(&c.to_string()), want, "{c:?}");
        assert_eq!(valid_tool_name(&format!("a{c}b")), want, "a{c:?}b");
    }
    for n in [0, min, min + 1, max - 1, max, max + 1] {
        assert_eq!(valid_tool_name(&"x".repeat(n)), (min..=max).contains(&n), "{n} characters");
    }
    assert!(!valid_tool_name(&"é".repeat(max / 2)), "{max} bytes, none of them allowed");

    // The WIT: the doc comment on `tool-info`'s `name`.
    let wit = std::fs::read_to_string(root.join("wit/tool.wit")).unwrap();
    let record = &wit[wit.find("record tool-info {").expect("wit/tool.wit declares tool-info")..];
    let field = record.find("name: string,").expect("tool-info has a name");
    let doc: Vec<&str> =
        record[..field].lines().rev().skip(1).map(str::trim).take_while(|l| l.starts_with("///")).collect();
    assert!(doc.concat().contains(TOOL_NAME_PATTERN), "tool-info's name states the rule: {doc:?}");

    // The SDK: the same pattern, and a test comparing its check with this one.
    let sdk = std::fs::read_to_string(root.join("sdk/src/lib.rs")).unwrap();
    assert!(sdk.contains(&format!("pub const TOOL_NAME_PATTERN: &str = {TOOL_NAME_PATTERN:?};")), "the SDK's pattern");
    let sdk_test = std::fs::read_to_string(root.join("sdk/tests/name_rule.rs")).unwrap();
    assert!(
        sdk_test.contains("assert_eq!(toolhost_sdk::valid_tool_name(name), toolhost_types::valid_tool_name(name)"),
        "sdk/tests/name_rule.rs compares the SDK's check with the vocabulary's"
    );

    // The loader: the hostile plugin with one tool renamed against the rule
    // (the same number of bytes, in its data) is refused, naming the rule.
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(HOSTILE_PATH).unwrap();
    let (name, bad) = (b"leak_in_error", b"leak.in.error");
    let spots: Vec<usize> = bytes.windows(name.len()).enumerate().filter(|(_, w)| w == name).map(|(i, _)| i).collect();
    assert!(!spots.is_empty(), "the hostile plugin names leak_in_error");
    let mut renamed = bytes.clone();
    for i in spots {
        renamed[i..i + bad.len()].copy_from_slice(bad);
    }
    let file = dir.path().join("renamed.wasm");
    std::fs::write(&file, renamed).unwrap();
    let e = Runtime::new(Limits::default(), Some(CACHE.path())).unwrap().load_file(&file).unwrap_err().to_string();
    assert!(e.contains("leak.in.error") && e.contains(TOOL_NAME_PATTERN), "{e}");
}

/// The host-side crates of `scripts/test`'s first cargo invocation, which must
/// resolve every dependency of the host with the features of the README's run
/// command (`cargo build --release`), so that command compiles nothing after
/// the tests.
const HOST_SIDE: [&str; 15] = [
    "toolhost",
    "toolhost-types",
    "toolhost-base",
    "toolhost-runtime",
    "toolhost-core",
    "toolhost-admission",
    "toolhost-config",
    "toolhost-mcp",
    "toolhost-mcp-wire",
    "toolhost-mcp-client",
    "toolhost-bridge",
    "toolhost-memory",
    "toolhost-dist",
    "toolhost-guest-build",
    "toolhost-test-artifacts",
];

/// `cargo tree` of the packages, with the features each dependency of the
/// `toolhost` package is built with: "name version" → feature lists (a crate
/// can be built twice, for build scripts and for the target).
fn host_dependency_features(packages: &[&str], edges: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut cmd = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).args([
        "tree",
        "--locked",
        "--no-dedupe",
        "--prefix",
        "depth",
        "-f",
        "{p} {f}",
        "-e",
        edges,
    ]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let mut features: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut in_host = false;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let depth_len = line.find(|c: char| !c.is_ascii_digit()).unwrap_or(line.len());
        let (depth, node) = line.split_at(depth_len);
        if depth == "0" {
            in_host = node.starts_with("toolhost v");
        } else if in_host && !depth.is_empty() {
            let node = node.trim_end_matches(" (*)");
            let mut parts = node.splitn(3, ' ');
            let key = format!("{} {}", parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let list = features.entry(key).or_default();
            let feats = parts.next().unwrap_or("").to_string();
            if !list.contains(&feats) {
                list.push(feats);
                list.sort();
            }
        }
    }
    features
}

/// The README's two commands share one build: every dependency of the host is
/// resolved with the same features by `cargo build --release` and by the test
/// command's host-side invocation (dev-dependencies included).
#[test]
fn the_run_build_and_the_test_build_share_features() {
    let run = host_dependency_features(&["toolhost"], "normal,build");
    let test = host_dependency_features(&HOST_SIDE, "normal,build,dev");
    assert!(run.keys().any(|k| k.starts_with("wasmtime ")), "the walk works");
    let differ: Vec<String> = run
        .iter()
        .filter_map(|(k, v)| test.get(k).filter(|t| *t != v).map(|t| format!("{k}: run {v:?}, test {t:?}")))
        .collect();
    assert!(differ.is_empty(), "features the test build adds to the run build's dependencies:\n{}", differ.join("\n"));
    let script = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/test")).unwrap();
    assert!(
        script.contains(&format!("host_side=({})", HOST_SIDE.join(" "))),
        "scripts/test tests exactly these host-side crates together"
    );
}
