//! The audit trail: every call through the binary leaves one JSON line,
//! refused and failed calls included, with what it cost whatever its
//! outcome; every plugin load, replacement, removal and refused load leaves
//! one too. Text a plugin wrote into an error is kept as a hash, and nothing
//! a plugin prints can forge a line of the host's log.

use crate::common::{stderr, stdout, toolhost};
use crate::live::serve;
use serde_json::{Value, json};
use sha2::Digest as _;
use toolhost_test_artifacts::{HOSTILE_PATH, SWAP_V1_PATH, SWAP_V2_PATH};

/// Every record in the file.
fn all_records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The call records in the file.
fn records(path: &std::path::Path) -> Vec<Value> {
    all_records(path).into_iter().filter(|r| r["event"] == "call").collect()
}

#[test]
fn every_call_leaves_a_record_with_outcome_digest_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "npcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll]\naudit:\n  path: ./audit.jsonl\n",
    )
    .unwrap();
    let run = |args: &[&str]| toolhost().current_dir(dir.path()).args(args).output().unwrap();
    run(&["call", "roll", r#"{"expression":"1d20","seed":4}"#]);
    run(&["call", "nope", "{}"]);
    run(&["call", "get_rule", r#"{"id":"spell-fireball"}"#, "--agent", "bartok"]);
    run(&["call", "roll", r#"{"expression":7}"#]);
    run(&["call", "panic", "--plugin", HOSTILE_PATH]);
    let r = records(&dir.path().join("audit.jsonl"));
    let outcomes: Vec<&str> = r.iter().map(|x| x["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["ok", "invalid_input", "guest_panic"]);
    // Calls refused before they ran: counted per agent, reason and second.
    let all = all_records(&dir.path().join("audit.jsonl"));
    let refused: Vec<(Option<&str>, &str, u64)> = all
        .iter()
        .filter(|x| x["event"] == "refused")
        .map(|x| (x["agent"].as_str(), x["reason"].as_str().unwrap(), x["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(refused, [(None, "unknown_tool", 1), (Some("bartok"), "refused", 1)]);
    let ok = &r[0];
    assert_eq!(ok["tool"], "roll");
    assert_eq!(ok["provider"], "diceroller");
    assert_eq!(ok["provider_digest"].as_str().unwrap().len(), 64);
    assert_eq!(ok["arguments_sha256"].as_str().unwrap().len(), 64);
    assert!(ok.get("arguments").is_none(), "raw arguments are off by default");
    assert!(ok["fuel_used"].as_u64().unwrap() > 0);
    assert!(ok["peak_memory_bytes"].as_u64().unwrap() > 0);
    // The panic message is the plugin's text: a hash and a length, not the words.
    let withheld = r[2]["error_text_bytes"].as_u64().unwrap();
    assert_eq!(r[2]["error"], format!("panic panicked: [withheld: {withheld} bytes]"), "{}", r[2]);
    assert!(withheld > "the hostile plugin panicked on purpose".len() as u64, "{}", r[2]);
    assert!(r[2]["fuel_used"].as_u64().unwrap() > 0, "a failed call's cost is recorded: {}", r[2]);
    assert!(r[2]["peak_memory_bytes"].as_u64().unwrap() > 0, "{}", r[2]);
    for x in &all {
        let t = x["time"].as_str().or(x["first"].as_str()).unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(t).is_ok() && t.ends_with('Z'), "RFC 3339 UTC: {t}");
    }
}

#[test]
fn raw_arguments_are_recorded_only_when_the_operator_turns_them_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), "audit:\n  path: ./a.jsonl\n  include_arguments: true\n").unwrap();
    toolhost().current_dir(dir.path()).args(["call", "roll", r#"{"expression":"3d6"}"#]).output().unwrap();
    let r = records(&dir.path().join("a.jsonl"));
    assert_eq!(r[0]["arguments"]["expression"], "3d6");
}

#[test]
fn records_say_which_capabilities_a_call_held_and_used() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "plugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./files\n    hostile:\n      env: [HOME]\naudit:\n  path: ./audit.jsonl\n",
    )
    .unwrap();
    let run = |args: &[&str]| toolhost().current_dir(dir.path()).args(args).output().unwrap();
    run(&["call", "write_file", r#"{"path":"a.txt","content":"x"}"#]);
    run(&["call", "list_dir", r#"{"path":"."}"#]);
    run(&["call", "search_facts", r#"{"query":"dragon"}"#]);
    run(&["call", "roll", r#"{"expression":"1d4"}"#]);
    run(&["call", "env", "--plugin", HOSTILE_PATH]);
    run(&["call", "echo", "--plugin", HOSTILE_PATH]);
    let r = records(&dir.path().join("audit.jsonl"));
    let used: Vec<(String, Value, Value)> = r
        .iter()
        .map(|x| {
            (x["tool"].as_str().unwrap().to_string(), x["capabilities_held"].clone(), x["capabilities_used"].clone())
        })
        .collect();
    assert_eq!(used[0], ("write_file".into(), json!(["files"]), json!(["files"])));
    assert_eq!(used[1], ("list_dir".into(), json!(["files"]), json!(["files"])));
    // memorytool holds both memory grants by default; a search uses the read one only.
    assert_eq!(used[2], ("search_facts".into(), json!(["memory", "memory_write"]), json!(["memory"])));
    assert_eq!(used[3], ("roll".into(), json!([]), json!([])));
    assert_eq!(used[4], ("env".into(), json!(["env"]), json!(["env"])));
    assert_eq!(used[5], ("echo".into(), json!(["env"]), json!([])), "held but not used");
}

#[test]
fn a_plugin_that_reads_a_granted_secret_and_fails_leaves_only_a_hash_of_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("vault")).unwrap();
    std::fs::write(dir.path().join("vault/key"), "dragon-hoard-passphrase\n").unwrap();
    let config = |raw: bool| {
        format!(
            "plugins:\n  grants:\n    hostile:\n      files:\n        - dir: ./vault\n          mount: /vault\n          mode: read-only\naudit:\n  path: ./audit.jsonl\n  include_arguments: {raw}\n"
        )
    };
    let run = |args: &[&str]| toolhost().current_dir(dir.path()).args(args).output().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), config(false)).unwrap();
    let o = run(&["call", "leak_in_error", r#"{"path":"/vault/key"}"#, "--plugin", HOSTILE_PATH]);
    assert!(stderr(&o).contains("dragon-hoard-passphrase"), "the caller sees the tool's error: {}", stderr(&o));
    let o = run(&["call", "spin", "--plugin", HOSTILE_PATH]);
    assert!(!o.status.success());

    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!text.contains("dragon-hoard"), "the secret never reaches the trail: {text}");
    let r = records(&dir.path().join("audit.jsonl"));
    let leak = &r[0];
    assert_eq!(leak["outcome"], "failed");
    assert_eq!(leak["error"], "leak_in_error failed: [withheld: 37 bytes]");
    let expected = hex::encode(sha2::Sha256::digest(b"could not use dragon-hoard-passphrase"));
    assert_eq!(leak["error_text_sha256"], expected.as_str());
    assert_eq!(leak["error_text_bytes"], 37);
    assert_eq!(leak["capabilities_held"], json!(["files"]));
    assert_eq!(leak["capabilities_used"], json!(["files"]), "the failed call used its grant: {leak}");
    assert!(leak["fuel_used"].as_u64().unwrap() > 0 && leak["peak_memory_bytes"].as_u64().unwrap() > 0, "{leak}");
    // A runaway call: stopped, and what it burned is on record.
    let spin = &r[1];
    assert!(["out_of_fuel", "timeout"].contains(&spin["outcome"].as_str().unwrap()), "{spin}");
    // (A lower bound: a loop stopped at its deadline has not written back
    // all the fuel it burned.)
    assert!(spin["fuel_used"].as_u64().unwrap() > 0, "{spin}");
    assert!(!spin["error"].as_str().unwrap().contains("withheld"), "host words are kept: {spin}");

    // The operator who allows raw arguments gets the words too.
    std::fs::write(dir.path().join("toolhost.yaml"), config(true)).unwrap();
    run(&["call", "leak_in_error", r#"{"path":"/vault/key"}"#, "--plugin", HOSTILE_PATH]);
    let r = records(&dir.path().join("audit.jsonl"));
    assert_eq!(r[2]["error"], "leak_in_error failed: could not use dragon-hoard-passphrase");
    assert!(r[2].get("error_text_sha256").is_none());
}

#[test]
fn plugin_loads_replacements_removals_and_refusals_each_leave_one_record() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "plugins:\n  builtins: false\nserver:\n  rate_limit: { per_minute: 0 }\naudit:\n  path: ./audit.jsonl\n",
    )
    .unwrap();
    let state = dir.path().join("state");
    let (_host, _url) = serve(dir.path());
    let admin = |args: &[&str]| {
        toolhost().current_dir(dir.path()).env("TOOLHOST_STATE_DIR", &state).args(args).output().unwrap()
    };
    let staged = dir.path().join("swap.wasm");
    std::fs::copy(SWAP_V1_PATH, &staged).unwrap();
    assert!(admin(&["plugin", "add", staged.to_str().unwrap()]).status.success());
    std::fs::copy(SWAP_V2_PATH, &staged).unwrap();
    assert!(admin(&["plugin", "add", staged.to_str().unwrap()]).status.success());
    std::fs::write(&staged, b"\0asm\x0d\x00\x01\x00garbage").unwrap();
    assert!(!admin(&["plugin", "add", staged.to_str().unwrap()]).status.success());
    assert!(admin(&["plugin", "remove", "swap"]).status.success());
    assert!(admin(&["reload"]).status.success());

    // Each record names who asked, and through what (issue #55): the
    // CLI's user through the admin API.
    let uid = rustix::process::getuid().as_raw();
    let all = all_records(&dir.path().join("audit.jsonl"));
    for r in all.iter().filter(|r| r["event"].as_str().is_some_and(|e| e.starts_with("plugin_") || e == "reload")) {
        assert_eq!(r["via"], "admin_api", "{r}");
        assert!(r["actor"].as_str().unwrap().starts_with(&format!("cli uid {uid}")), "{r}");
    }
    let reload = all.iter().find(|r| r["event"] == "reload").unwrap_or_else(|| panic!("a reload record: {all:#?}"));
    assert_eq!(reload["detail"]["force"], false, "{reload}");
    // `toolhost audit --actor` finds them by their channel.
    let own = crate::common::run_strict(dir.path(), &["audit", "--actor", "admin_api", "--json"]);
    assert_eq!(stdout(&own).lines().count(), 5, "four plugin records and the reload: {}", stdout(&own));

    let digest = |p: &str| hex::encode(sha2::Sha256::digest(std::fs::read(p).unwrap()));
    let events: Vec<Value> = all_records(&dir.path().join("audit.jsonl"))
        .into_iter()
        .filter(|r| r["event"].as_str().is_some_and(|e| e.starts_with("plugin_")))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["plugin_load", "plugin_replace", "plugin_refused", "plugin_remove"], "{events:#?}");
    assert!(events.iter().all(|r| r["plugin"] == "swap"), "{events:#?}");
    assert_eq!(events[0]["sha256"], digest(SWAP_V1_PATH).as_str());
    assert!(events[0]["origin"].as_str().unwrap().contains("unsigned"), "{}", events[0]);
    assert_eq!(events[1]["sha256"], digest(SWAP_V2_PATH).as_str());
    assert_eq!(events[1]["previous_sha256"], digest(SWAP_V1_PATH).as_str());
    assert!(events[2]["error"].as_str().unwrap().contains("swap"), "the refusal says why: {}", events[2]);
    assert_eq!(events[3]["previous_sha256"], digest(SWAP_V2_PATH).as_str());
    for r in &events {
        assert!(chrono::DateTime::parse_from_rfc3339(r["time"].as_str().unwrap()).is_ok(), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn call_records_name_the_session_and_the_token() {
    use rmcp::ServiceExt as _;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "npcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll]\nserver:\n  rate_limit: { per_minute: 0 }\n  tokens:\n    - token: bartok-secret-token-0001\n      agent: bartok\n    - token: dungeon-master-token-0001\n      id: dm-laptop\naudit:\n  path: ./audit.jsonl\n",
    )
    .unwrap();
    let (_host, url) = serve(dir.path());
    let connect = async |token: &str| {
        let config = StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).auth_header(token);
        ().serve(StreamableHttpClientTransport::from_config(config)).await.expect("initialize")
    };
    let roll =
        || CallToolRequestParams::new("roll").with_arguments(json!({"expression": "1d6"}).as_object().unwrap().clone());
    let bartok = connect("bartok-secret-token-0001").await;
    let dm_a = connect("dungeon-master-token-0001").await;
    let dm_b = connect("dungeon-master-token-0001").await;
    for c in [&bartok, &bartok, &dm_a, &dm_b] {
        let r = c.call_tool(roll()).await.unwrap();
        assert_ne!(r.is_error, Some(true), "{r:?}");
    }
    let r = records(&dir.path().join("audit.jsonl"));
    assert_eq!(r.len(), 4, "{r:#?}");
    let bartok_id = format!("sha256:{}", &hex::encode(sha2::Sha256::digest(b"bartok-secret-token-0001"))[..8]);
    let tokens: Vec<&str> = r.iter().map(|x| x["token"].as_str().unwrap()).collect();
    assert_eq!(tokens, [bartok_id.as_str(), &bartok_id, "dm-laptop", "dm-laptop"]);
    assert_eq!(r[0]["agent"], "bartok");
    assert!(r[2]["agent"].is_null(), "the operator's token acts as the operator: {}", r[2]);
    let sessions: Vec<&str> = r.iter().map(|x| x["session"].as_str().unwrap()).collect();
    assert!(sessions.iter().all(|s| !s.is_empty()), "{sessions:?}");
    assert_eq!(sessions[0], sessions[1], "one session, one id");
    assert_ne!(sessions[1], sessions[2]);
    assert_ne!(sessions[2], sessions[3], "two sessions with the same token are told apart");
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!text.contains("secret-token"), "no secret in the trail");
}

#[test]
fn nothing_a_plugin_prints_can_forge_a_host_log_line() {
    let o =
        toolhost().env("TOOLHOST_LOG", "info").args(["call", "forge_log", "--plugin", HOSTILE_PATH]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let log = stderr(&o);
    for source in ["log", "stderr", "stdout"] {
        assert!(log.contains(&format!("{source}\\n2026-11-23T00:00:00.000000Z")), "{source} line, escaped: {log}");
    }
    for line in log.lines() {
        assert!(!line.starts_with("2026-11-23T00:00:00"), "a forged line: {line:?}\n{log}");
    }
    assert!(!log.contains(['\r', '\u{1b}', '\u{202e}']), "raw control or bidi characters: {log:?}");
}

/// `toolhost audit` (#55, item 4) through the binary: the trail and its
/// rotated files, filtered by agent, plugin, tool, outcome and time, probes
/// left out unless asked for, a table or JSON lines, and `--follow`
/// printing records as a host writes them.
#[test]
fn toolhost_audit_filters_the_trail_and_its_rotated_files_and_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("toolhost.yaml"),
        "npcs:\n  - name: bartok\n    budget_tier: deep\n    tools: [roll, get_rule]\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        toolhost().current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).args(args).output().unwrap()
    };
    let lines = |args: &[&str]| -> Vec<Value> {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    // Nothing yet: said so.
    let o = run(&["audit"]);
    assert!(!o.status.success() && stderr(&o).contains("no audit trail at"), "{}", stderr(&o));
    assert!(run(&["call", "roll", r#"{"expression":"1d6"}"#, "--agent", "bartok"]).status.success());
    assert!(!run(&["call", "roll", r#"{"expression":"not dice"}"#]).status.success());
    assert!(run(&["calibrate", "--samples", "1"]).status.success());
    // The older records move to a rotated file, as the host rotates them.
    std::fs::rename(d.join("state/audit.jsonl"), d.join("state/audit.jsonl.1")).unwrap();
    assert!(run(&["call", "get_rule", r#"{"id":"condition-grappled"}"#, "--agent", "bartok"]).status.success());

    let all = lines(&["audit", "--json"]);
    assert!(all.iter().all(|r| r["event"] != "probe"), "probes are left out: {all:?}");
    let calls: Vec<&str> = all.iter().filter(|r| r["event"] == "call").map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(calls, ["roll", "roll", "get_rule"], "oldest first, the rotated file included");
    assert!(lines(&["audit", "--json", "--probes"]).iter().any(|r| r["event"] == "probe"));
    let bartok = lines(&["audit", "--json", "--agent", "bartok"]);
    assert_eq!(bartok.iter().map(|r| r["tool"].as_str().unwrap()).collect::<Vec<_>>(), ["roll", "get_rule"]);
    let failed = lines(&["audit", "--json", "--outcome", "error"]);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0]["agent"].is_null() && failed[0]["outcome"] != "ok", "{failed:?}");
    let rules = lines(&["audit", "--json", "--plugin", "ruleslookup"]);
    assert!(rules.iter().any(|r| r["event"] == "plugin_load") && rules.iter().any(|r| r["tool"] == "get_rule"));
    assert!(rules.iter().all(|r| r["plugin"] == "ruleslookup" || r["provider"] == "ruleslookup"), "{rules:?}");
    assert_eq!(lines(&["audit", "--json", "--tool", "get_rule"]).len(), 1);
    assert_eq!(lines(&["audit", "--json", "--since", "1h", "--tool", "roll"]).len(), 2);
    assert!(lines(&["audit", "--json", "--until", "1h"]).is_empty(), "nothing is an hour old");
    assert_eq!(lines(&["audit", "--json", "--last", "1"]).len(), 1);
    let o = run(&["audit", "--since", "2 weeks"]);
    assert!(!o.status.success() && stderr(&o).contains("--since") && stderr(&o).contains("30m"), "{}", stderr(&o));
    // The table: a header and a row per record.
    let o = run(&["audit", "--agent", "bartok"]);
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.starts_with("TIME") && table.contains("get_rule") && table.lines().count() == 3, "{table}");

    // --follow: what a serving host writes shows as it is written.
    let (_host, url) = {
        let mut cmd = toolhost();
        cmd.current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).args(["serve", "--http", "127.0.0.1:0"]);
        crate::live::spawn_serving(cmd)
    };
    // From now on: the CLI's earlier `roll` records are left out, so the
    // one line awaited can only be the call made below, over MCP.
    let from = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let follower = toolhost()
        .current_dir(d)
        .env("TOOLHOST_STATE_DIR", d.join("state"))
        .args(["audit", "--follow", "--json", "--tool", "roll", "--since", &from])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut follower = crate::live::Proc(follower);
    let (tx, rx) = std::sync::mpsc::channel();
    let out = follower.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mcp = format!("{url}/mcp");
    let session = crate::limits::open_session(&mcp, &[]);
    let call = crate::limits::post(
        &mcp,
        &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-06-18")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "roll", "arguments": {"expression": "2d4"}}}),
    );
    assert_eq!(call.status, 200, "{}{}", call.head, call.body);
    let line = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the call's record, followed");
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!((r["event"].as_str(), r["tool"].as_str()), (Some("call"), Some("roll")), "{r}");
    assert!(r["session"].is_string(), "the MCP call's record (it has a session), not an older one: {r}");
}
