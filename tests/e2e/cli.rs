//! The `toolhost` binary, as a user runs it.

use crate::common::builtin_path;
use crate::common::{run, stderr, stdout, toolhost};
use serde_json::{Value, json};
use std::io::Write;
use std::process::Stdio;
use toolhost_test_artifacts::OTHERWORLD_PATH;

#[test]
fn call_roll_prints_the_seed_shape() {
    let o = run(&["call", "roll", r#"{"expression":"2d6+3"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with(r#"{"expression":"2d6+3","rolls":["#), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let rolls: Vec<i64> = v["rolls"].as_array().unwrap().iter().map(|r| r.as_i64().unwrap()).collect();
    assert_eq!(rolls.len(), 2);
    assert_eq!(v["total"].as_i64().unwrap(), rolls.iter().sum::<i64>() + 3);
}

#[test]
fn call_get_rule_prints_the_srd_text() {
    let o = run(&["call", "get_rule", r#"{"id":"spell-fireball"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["text"].as_str().unwrap().contains("A bright streak flashes from your pointing finger"));
}

#[test]
fn call_search_rules_ranks_blinded_first() {
    let o = run(&["call", "search_rules", r#"{"query":"blinded"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["results"][0]["id"], "condition-blinded");
}

#[test]
fn call_reads_arguments_from_stdin() {
    let mut child = toolhost()
        .args(["call", "roll", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(br#"{"expression":"1d4","seed":1}"#).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(r#""expression":"1d4""#));
}

#[test]
fn call_json_prints_content_and_cost() {
    let o = run(&["call", "roll", r#"{"expression":"1d6"}"#, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["content"][0]["type"], "json");
    assert!(v["fuel_used"].as_u64().unwrap() > 0);
    assert!(v["duration_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn call_errors_go_to_stderr_with_a_nonzero_exit() {
    for (args, needle) in [
        (vec!["call", "nope", "{}"], "unknown tool \"nope\""),
        (vec!["call", "roll", "{not json"], "arguments are not valid JSON"),
        (vec!["call", "roll", r#"{"expression":5}"#], "field /expression"),
        (vec!["call", "roll", r#"{"expression":"0d6"}"#], "cannot roll zero dice"),
        (vec!["call", "get_rule", r#"{"id":"spell-nothing"}"#], "no rule with id"),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stdout(&o).is_empty(), "{args:?}");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn tools_lists_every_builtin_with_latency_and_arguments() {
    let o = run(&["tools"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "roll ",
        "roll_table ",
        "search_rules ",
        "get_rule ",
        "read_file ",
        "write_file ",
        "list_dir ",
        "search_sessions ",
        "query_entities ",
        "get_summary ",
        "search_facts ",
    ] {
        assert!(out.lines().any(|l| l.starts_with(line)), "{line} missing from\n{out}");
    }
    let roll = out.lines().find(|l| l.starts_with("roll ")).unwrap();
    assert!(roll.contains("5ms") && roll.contains("20ms") && roll.contains("expression*"), "{roll}");
}

#[test]
fn tools_json_is_machine_readable() {
    let o = run(&["tools", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let tools = v.as_array().unwrap();
    assert_eq!(tools.len(), 12);
    let search = tools.iter().find(|t| t["name"] == "search_rules").unwrap();
    assert_eq!(search["provider"], "ruleslookup");
    assert_eq!(search["estimated_duration_ms"], 30);
    assert_eq!(search["max_duration_ms"], 100);
    assert_eq!(search["input_schema"]["required"][0], "query");
}

#[test]
fn inspect_shows_digest_imports_and_tools() {
    let o = run(&["inspect", builtin_path("diceroller"), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let bytes = std::fs::read(builtin_path("diceroller")).unwrap();
    use sha2::Digest;
    // Two digests, labelled: the file's, and the component's without a
    // signature section (the same for an unsigned file).
    assert_eq!(v["file_sha256"], hex::encode(sha2::Sha256::digest(&bytes)));
    assert_eq!(v["component_sha256"], v["file_sha256"]);
    assert_eq!(v["size"], bytes.len());
    let imports: Vec<&str> = v["imports"].as_array().unwrap().iter().map(|i| i.as_str().unwrap()).collect();
    assert!(imports.iter().any(|i| i.starts_with("wasi:random/random")), "{imports:?}");
    assert!(!imports.iter().any(|i| i.starts_with("wasi:sockets")), "{imports:?}");
    assert!(v["exports"].as_array().unwrap().iter().any(|e| e == "toolhost:plugin/tool@0.1.2"));
    let names: Vec<&str> = v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["roll", "roll_table"]);

    let text = run(&["inspect", builtin_path("diceroller")]);
    let out = stdout(&text);
    assert!(out.contains("file sha256: ") && out.contains("component sha256: "), "{out}");
    assert!(out.contains("imports (") && out.contains("roll_table"), "{out}");
}

/// What a plugin asks for is its own: granting it something never changes
/// `inspect`'s "asks for" (it used to read asks from the grant-applied
/// view, so a granted inert import turned into an ask).
#[test]
fn inspect_shows_the_same_asks_before_and_after_a_grant() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("data")).unwrap();
    let inspect = |json: bool| {
        let mut args = vec!["inspect", builtin_path("fileio"), "--probes", "0"];
        if json {
            args.push("--json");
        }
        let o = toolhost().current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).args(&args).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let asks = |out: &str| {
        let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        (v["asks_for"].clone(), v["inert"].clone(), v["granted_by_config"].clone())
    };
    let asks_line =
        |out: &str| out.lines().find(|l| l.starts_with("asks for:")).unwrap_or_else(|| panic!("{out}")).to_string();
    let (before, before_text) = (asks(&inspect(true)), inspect(false));
    std::fs::write(d.join("toolhost.yaml"), "plugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./data\n")
        .unwrap();
    let (after, after_text) = (asks(&inspect(true)), inspect(false));
    assert_eq!(
        (&before.0, &before.1),
        (&after.0, &after.1),
        "asks and inert changed with a grant: {before:?} -> {after:?}"
    );
    assert_eq!(asks_line(&before_text), asks_line(&after_text));
    // The grant itself shows, beside the asks.
    assert_eq!(before.2, serde_json::json!([]));
    assert_eq!(after.2, serde_json::json!(["files"]));
    assert!(after_text.contains("granted:  files"), "{after_text}");
}

/// One key, one fingerprint: `keygen` prints it, and `verify`, `inspect`,
/// `grants` and `show` name the signer by the same `ed25519:<hex>` string
/// (with the trusted key's name beside it), never by the base64 key.
#[test]
fn every_command_shows_a_key_by_the_same_fingerprint() {
    use crate::oci::{Registry, ok, run, trust};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let reg = Registry::start(dir, None);
    trust(dir, "alice", "plugins:\n  builtins: false\n  files: [signed/counter.wasm]\n");
    let public: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("keys/alice.pub")).unwrap()).unwrap();
    let base64 = public["public_key"].as_str().unwrap().to_string();
    // keygen again, elsewhere, to read what it prints: the same format.
    let out = ok(&run(dir, &["keygen", "bob", "--out", "other"]));
    let bob = out.lines().find_map(|l| l.strip_prefix("key ")).unwrap_or_else(|| panic!("keygen: {out}"));
    assert!(
        bob.starts_with("ed25519:") && bob.ends_with(" (bob)") && bob.len() == "ed25519: (bob)".len() + 16,
        "{bob}"
    );
    // alice's fingerprint, as `keygen` prints it for her key.
    let alice = {
        use base64::Engine as _;
        use sha2::Digest as _;
        let raw = base64::engine::general_purpose::STANDARD.decode(&base64).unwrap();
        format!("ed25519:{}", &hex::encode(sha2::Sha256::digest(raw))[..16])
    };
    let named = format!("{alice} (alice)");
    crate::oci::signed(dir, toolhost_test_artifacts::COUNTER_PATH, "alice", "counter", "1.0.0", "signed");

    let verify = ok(&run(dir, &["verify", "signed/counter.wasm"]));
    assert!(verify.contains(&format!("by alice (key {named})")), "verify:\n{verify}");
    assert!(verify.contains(&format!("with trusted key {named}, version 1.0.0")), "verify:\n{verify}");
    let v: Value = serde_json::from_str(&ok(&run(dir, &["verify", "signed/counter.wasm", "--json"]))).unwrap();
    assert_eq!(v["signature"]["key_id"], alice.as_str());

    let inspect = ok(&run(dir, &["inspect", "signed/counter.wasm", "--probes", "0"]));
    assert!(inspect.contains(&format!("signer:  alice, key {named}")), "inspect:\n{inspect}");
    assert!(inspect.contains("version: 1.0.0"), "inspect:\n{inspect}");
    let v: Value =
        serde_json::from_str(&ok(&run(dir, &["inspect", "signed/counter.wasm", "--probes", "0", "--json"]))).unwrap();
    assert_eq!(
        (v["signer"]["key_id"].as_str(), v["signer"]["key_name"].as_str()),
        (Some(alice.as_str()), Some("alice"))
    );

    let grants = ok(&run(dir, &["grants"]));
    assert!(
        grants.contains(&format!("origin:   signed by alice with trusted key {named}, version 1.0.0")),
        "grants:\n{grants}"
    );

    let r = reg.reference("tools/counter:1.0.0");
    ok(&run(dir, &["push", "signed/counter.wasm", &r]));
    let show = ok(&run(dir, &["show", &r]));
    assert!(show.contains(&format!("signed by:    alice (key {alice})")), "show:\n{show}");
    assert!(show.contains(&format!("trusted here: yes: signed by alice with trusted key {named}")), "show:\n{show}");
    let v: Value = serde_json::from_str(&ok(&run(dir, &["show", &r, "--json"]))).unwrap();
    assert_eq!(v["signature"]["key_id"], alice.as_str());

    for (command, out) in [("verify", &verify), ("inspect", &inspect), ("grants", &grants), ("show", &show)] {
        assert!(!out.contains(&base64), "{command} shows the key in base64:\n{out}");
    }
    // An untrusted signer is named by the same fingerprint in the refusal.
    std::fs::write(dir.join("toolhost.yaml"), "trust:\n  key_files: [other/bob.pub]\n").unwrap();
    let o = run(dir, &["inspect", "signed/counter.wasm", "--probes", "0"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("signed by an untrusted key {alice}")), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("signer:  alice, key {alice} (not a key this config trusts)")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn inspect_explains_why_a_component_cannot_load() {
    let o = run(&["inspect", OTHERWORLD_PATH]);
    assert!(!o.status.success());
    assert!(stdout(&o).contains("wasi:cli/run"), "{}", stdout(&o));
    assert!(stderr(&o).contains("does not implement the toolhost tool world"), "{}", stderr(&o));
}

/// `toolhost --help` lists every subcommand the binary has (the variants
/// of `Command` in host/src/bin/toolhost/commands/mod.rs) with a description,
/// and each one's own `--help` opens with that description and shows its usage.
#[test]
fn help_explains_the_subcommands() {
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/toolhost/commands/mod.rs"),
    )
    .unwrap();
    let variants = source.split("pub enum Command {").nth(1).unwrap().split('}').next().unwrap();
    let expected: Vec<String> = variants
        .lines()
        .filter_map(|l| l.trim().split('(').next().filter(|v| !v.is_empty()).map(str::to_lowercase))
        .collect();
    assert!(expected.len() >= 20, "the subcommands were read: {expected:?}");

    let o = run(&["--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // "  name   description", continued on lines indented further.
    let mut listed: Vec<(String, String)> = Vec::new();
    for line in out.split("\nCommands:\n").nth(1).unwrap_or_else(|| panic!("{out}")).lines() {
        if line.trim().is_empty() {
            break;
        }
        match line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) {
            Some(entry) => {
                let (name, description) = entry.split_once(' ').unwrap_or((entry, ""));
                listed.push((name.to_string(), description.trim().to_string()));
            }
            None => {
                let last = &mut listed.last_mut().unwrap_or_else(|| panic!("{out}")).1;
                last.push(' ');
                last.push_str(line.trim());
            }
        }
    }
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).filter(|n| *n != "help").collect();
    assert_eq!(names, expected, "--help lists exactly the subcommands:\n{out}");
    for (name, description) in listed.iter().filter(|(n, _)| n != "help") {
        assert!(description.split_whitespace().count() >= 3, "{name} is not explained: {description:?}");
        let o = run(&[name, "--help"]);
        assert!(o.status.success(), "{name} --help: {}", stderr(&o));
        let help = stdout(&o);
        let opening: Vec<&str> = description.split_whitespace().take(4).collect();
        let first: Vec<&str> = help.split_whitespace().take(4).collect();
        assert_eq!(first, opening, "{name} --help opens with its description:\n{help}");
        assert!(help.contains(&format!("Usage: toolhost {name}")), "{name} --help shows its usage:\n{help}");
    }
    let o = run(&["call", "--help"]);
    assert!(stdout(&o).contains("reads them from stdin"), "{}", stdout(&o));
}

/// `--config`, `--plugin` and `--no-builtins` go before the subcommand or
/// after it, with the same result; before a command that does not take
/// one, it is refused as it is after (issue #30, item 9).
#[test]
fn global_options_go_before_or_after_the_subcommand() {
    use toolhost_test_artifacts::HOSTILE_PATH;
    let dir = tempfile::tempdir().unwrap();
    // Not toolhost.yaml: only `--config` finds it.
    std::fs::write(dir.path().join("game.yaml"), "plugins:\n  prefix:\n    diceroller: dice_\n    hostile: h_\n")
        .unwrap();
    let run_in = |args: &[&str]| {
        toolhost()
            .current_dir(dir.path())
            .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
            .args(args)
            .output()
            .unwrap()
    };
    let same = |before: &[&str], after: &[&str]| -> String {
        let (b, a) = (run_in(before), run_in(after));
        assert!(b.status.success(), "{before:?}: {}", stderr(&b));
        assert!(a.status.success(), "{after:?}: {}", stderr(&a));
        assert_eq!(stdout(&b), stdout(&a), "{before:?} and {after:?}");
        stdout(&b)
    };

    let listed = same(
        &["--config", "game.yaml", "--no-builtins", "--plugin", HOSTILE_PATH, "tools", "--json"],
        &["tools", "--config", "game.yaml", "--no-builtins", "--plugin", HOSTILE_PATH, "--json"],
    );
    let tools: Vec<Value> = serde_json::from_str(&listed).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"h_echo"), "the plugin, under the config's prefix: {names:?}");
    assert!(names.iter().all(|n| n.starts_with("h_")), "no built-ins: {names:?}");

    let roll = r#"{"expression":"3d6","seed":7}"#;
    let rolled = same(
        &["--config", "game.yaml", "call", "dice_roll", roll],
        &["call", "dice_roll", roll, "--config", "game.yaml"],
    );
    assert!(rolled.starts_with(r#"{"expression":"3d6""#), "{rolled}");
    // Split, some before and some after.
    let echoed = same(
        &["--plugin", HOSTILE_PATH, "--no-builtins", "call", "h_echo", r#"{"n":1}"#, "--config=game.yaml"],
        &["call", "h_echo", r#"{"n":1}"#, "--config=game.yaml", "--plugin", HOSTILE_PATH, "--no-builtins"],
    );
    assert_eq!(echoed.trim(), r#"{"n":1}"#);

    // A command that loads no plugins refuses them in either place.
    for (before, after) in [
        (vec!["--plugin", HOSTILE_PATH, "secret", "list"], vec!["secret", "list", "--plugin", HOSTILE_PATH]),
        (vec!["--no-builtins", "status"], vec!["status", "--no-builtins"]),
        (vec!["--config", "game.yaml", "keygen", "me"], vec!["keygen", "me", "--config", "game.yaml"]),
    ] {
        let (b, a) = (run_in(&before), run_in(&after));
        assert_eq!(b.status.code(), Some(2), "{before:?}: {}", stderr(&b));
        assert_eq!(a.status.code(), Some(2), "{after:?}: {}", stderr(&a));
        let refused = before[0];
        assert!(stderr(&b).contains(&format!("unexpected argument '{refused}'")), "{before:?}: {}", stderr(&b));
    }
    assert!(!dir.path().join("me.key").exists(), "keygen refused its line whole");

    let help = stdout(&run(&["--help"]));
    assert!(help.contains("go before the subcommand or after it"), "{help}");
}

/// Issue #52, item 7: `inspect` shows the deadline each tool gets under the
/// current config, and says why when it is below the tool's declared max.
#[test]
fn inspect_shows_the_deadline_that_applies_and_why_it_is_below_the_declared_max() {
    let dir = tempfile::tempdir().unwrap();
    let inspect = |dir: &std::path::Path, json: bool| {
        let mut args = vec!["inspect", builtin_path("diceroller"), "--probes", "0"];
        if json {
            args.push("--json");
        }
        let o = crate::common::toolhost()
            .current_dir(dir)
            .env("TOOLHOST_STATE_DIR", dir.join("state"))
            .args(&args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    // roll declares MAX_MS 20: raised to the floor (limits.timeout_floor_ms, 100).
    let v: Value = serde_json::from_str(&inspect(dir.path(), true)).unwrap();
    let roll = v["tools"].as_array().unwrap().iter().find(|t| t["name"] == "roll").unwrap().clone();
    assert_eq!((roll["max_duration_ms"].clone(), roll["deadline_ms"].clone()), (json!(20), json!(100)), "{roll}");
    assert!(inspect(dir.path(), false).contains("deadline 100 ms"));
    // Under a FAST ceiling below its declared max, the ceiling, named.
    std::fs::write(dir.path().join("toolhost.yaml"), "budget:\n  fast_ms: 10\n").unwrap();
    let text = inspect(dir.path(), false);
    assert!(text.contains("deadline 10 ms (its declared max 20 ms is over the ceiling: budget.fast_ms"), "{text}");
}
