//! The reviewer's view, through the binary: `inspect` describes a plugin
//! whatever the config grants (its tools, what it asks for, what is inert)
//! and runs nothing with grants; `grants` flags over-grants and never shows
//! a capability both denied and granted.

use crate::common::{builtin_path, stderr, stdout, toolhost};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use toolhost_test_artifacts::{COUNTER_PATH, NETCLIENT_PATH, WEATHER_PATH};

/// `inspect`'s exit status when it described the component but this config
/// would not load it (documented in README.md and `inspect --help`).
const NOT_LOADABLE_HERE: i32 = 3;

/// A directory holding `toolhost.yaml` with `config` (none when empty).
fn config_dir(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if !config.is_empty() {
        std::fs::write(dir.path().join("toolhost.yaml"), config).unwrap();
    }
    dir
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    toolhost().current_dir(dir).args(args).output().unwrap()
}

fn json_of(o: &Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(o), stderr(o)))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap_or_else(|| panic!("not a list: {v}")).iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

#[test]
fn inspect_lists_the_tools_of_a_plugin_whose_capability_is_not_granted() {
    // The weather example imports wasi:http, which loads only granted.
    let dir = config_dir("");
    let o = run_in(dir.path(), &["inspect", WEATHER_PATH, "--json"]);
    assert_eq!(o.status.code(), Some(NOT_LOADABLE_HERE), "described, not loadable here: {}", stderr(&o));
    let v = json_of(&o);
    assert_eq!((v["described"].clone(), v["loadable"].clone()), (json!(true), json!(false)), "{v}");
    let tools: Vec<&str> = v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(tools, ["weather_now"], "the tools are listed although the plugin would not load");
    assert_eq!(strings(&v["asks_for"]), ["http"]);
    assert_eq!(strings(&v["denied"]), ["http"], "asked for and not granted");
    assert!(strings(&v["granted_by_config"]).is_empty());
    assert!(v["error"].as_str().unwrap().contains("wasi:http/"), "{}", v["error"]);
    let note = v["tools"][0]["probe_note"].as_str().unwrap();
    assert!(note.starts_with("not probed: weather would not load with this config"), "{note}");
    let findings = strings(&v["findings"]);
    assert!(findings.iter().any(|f| f.contains("plugins.grants.weather.http")), "{findings:?}");

    // As text: the tool, the ask marked not granted, the reason on stderr.
    let o = run_in(dir.path(), &["inspect", WEATHER_PATH]);
    assert_eq!(o.status.code(), Some(NOT_LOADABLE_HERE));
    let out = stdout(&o);
    assert!(out.contains("tools (1):") && out.contains("  weather_now "), "{out}");
    assert!(out.contains("asks for: http (NOT granted)"), "{out}");
    assert!(out.contains("loads:    no, not with this config"), "{out}");
    assert!(stderr(&o).contains("weather would not load with this config"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("error:"), "describing is not an error: {}", stderr(&o));

    // netclient's sockets, granted: shown granted (without a grant they
    // are inert, as files are), and still nothing runs (the granted
    // address is never connected to).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = config_dir(&format!("plugins:\n  grants:\n    netclient:\n      network: [\"{addr}\"]\n"));
    let o = run_in(dir.path(), &["inspect", NETCLIENT_PATH, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json_of(&o);
    assert_eq!(v["loadable"], true, "{v}");
    assert_eq!(
        (strings(&v["asks_for"]), strings(&v["granted_by_config"])),
        (Vec::<String>::new(), vec!["network".into()])
    );
    assert!(strings(&v["denied"]).is_empty() && v["error"].is_null(), "{v}");
    assert!(v["tools"][0]["probe_note"].as_str().unwrap().starts_with("not probed: "), "{v}");
    let o = run_in(dir.path(), &["inspect", NETCLIENT_PATH]);
    assert!(stdout(&o).contains("granted:  network (imported; plugins.grants.netclient exposes"), "{}", stdout(&o));
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "inspect connected to the granted address");
}

#[test]
fn inspect_shows_what_std_imports_as_inert_not_as_asks() {
    let dir = config_dir("");
    // diceroller and counter import only the environment through std;
    // netclient imports the environment and the filesystem it never uses,
    // and sockets, inert without a grant.
    for (file, inert) in [
        (builtin_path("diceroller"), vec!["env"]),
        (COUNTER_PATH, vec!["env"]),
        (NETCLIENT_PATH, vec!["files", "env", "network"]),
    ] {
        let o = run_in(dir.path(), &["inspect", file, "--json", "--probes", "0"]);
        let v = json_of(&o);
        assert_eq!(strings(&v["inert"]), inert, "{file}: {v}");
        let asks = strings(&v["asks_for"]);
        assert!(!asks.iter().any(|a| inert.contains(&a.as_str())), "{file}: inert shown as asks: {asks:?}");
        assert!(strings(&v["denied"]).is_empty(), "{file}: {v}");
    }
    let o = run_in(dir.path(), &["inspect", builtin_path("diceroller")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("asks for: nothing") && out.contains("inert:    env"), "{out}");
    assert!(out.contains("loads:    yes, with this config"), "{out}");

    // `grants` reads them the same way: no built-in asks for env.
    let o = run_in(dir.path(), &["grants", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for p in json_of(&o).as_array().unwrap() {
        assert!(!strings(&p["asks_for"]).contains(&"env".to_string()), "{p}");
        assert!(strings(&p["inert"]).contains(&"env".to_string()), "{p}");
        assert!(strings(&p["denied"]).is_empty(), "{p}");
    }
    let o = run_in(dir.path(), &["grants"]);
    assert!(!stdout(&o).contains("asks for: env") && !stdout(&o).contains("denied:   env"), "{}", stdout(&o));

    // `sign` and `verify` too (they said "asks for: env" of what inspect
    // calls inert): the manifest records asks only.
    assert!(run_in(dir.path(), &["keygen", "alice", "--out", "keys"]).status.success());
    std::fs::copy(NETCLIENT_PATH, dir.path().join("netclient.wasm")).unwrap();
    let o = run_in(dir.path(), &["sign", "netclient.wasm", "--key", "keys/alice.key"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("asks for: nothing\n"), "{}", stdout(&o));
    assert!(stdout(&o).contains("inert:    files, env, network"), "{}", stdout(&o));
    let o = run_in(dir.path(), &["verify", "netclient.wasm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains("env") && !stdout(&o).contains("network"), "{}", stdout(&o));
}

#[test]
fn grants_flags_a_network_grant_to_a_plugin_without_sockets_as_an_over_grant() {
    let dir = config_dir(
        "plugins:\n  grants:\n    diceroller:\n      network: [\"127.0.0.1:9\"]\n      files:\n        - dir: ./files\n          mode: read-only\n",
    );
    std::fs::create_dir(dir.path().join("files")).unwrap();
    let o = run_in(dir.path(), &["grants", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json_of(&o);
    let dice = v.as_array().unwrap().iter().find(|p| p["plugin"] == "diceroller").unwrap();
    assert_eq!(strings(&dice["over_granted"]), ["files", "network"], "{dice}");
    let findings = strings(&dice["findings"]);
    assert!(findings.iter().any(|f| f.contains("granted network but does not import wasi:sockets")), "{findings:?}");
    assert!(findings.iter().any(|f| f.contains("granted files but does not import wasi:filesystem")), "{findings:?}");
    // The grant is still reported as granted; nothing else is flagged.
    assert_eq!(dice["granted"]["network"], json!(["127.0.0.1:9"]));
    for p in v.as_array().unwrap().iter().filter(|p| p["plugin"] != "diceroller") {
        assert!(strings(&p["over_granted"]).is_empty() && strings(&p["findings"]).is_empty(), "{p}");
    }
    let o = run_in(dir.path(), &["grants"]);
    let out = stdout(&o);
    assert!(out.contains("! over-grant: diceroller is granted network but does not import wasi:sockets"), "{out}");

    // `inspect` flags it too, before the plugin is ever loaded.
    let o = run_in(dir.path(), &["inspect", builtin_path("diceroller"), "--json", "--probes", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(strings(&json_of(&o)["over_granted"]), ["files", "network"]);
}

#[test]
fn grants_never_shows_a_capability_both_as_denied_and_granted() {
    // diceroller is granted a variable this host does not set, ruleslookup
    // one it sets, fileio a directory: each holds or was given a grant.
    let dir = config_dir(
        "plugins:\n  grants:\n    diceroller:\n      env: [TOOLHOST_REVIEW_NOT_SET]\n    ruleslookup:\n      env: [TOOLHOST_REVIEW_SET]\n    fileio:\n      files:\n        - dir: ./files\n",
    );
    let configured = [("diceroller", "env"), ("ruleslookup", "env"), ("fileio", "files"), ("memorytool", "memory")];
    let grants = |args: &[&str]| {
        toolhost()
            .current_dir(dir.path())
            .env_remove("TOOLHOST_REVIEW_NOT_SET")
            .env("TOOLHOST_REVIEW_SET", "1")
            .args(args)
            .output()
            .unwrap()
    };
    let o = grants(&["grants", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json_of(&o);
    for p in v.as_array().unwrap() {
        let name = p["plugin"].as_str().unwrap();
        let denied = strings(&p["denied"]);
        for (cap, detail) in p["granted"].as_object().unwrap() {
            let holds = match detail {
                Value::Bool(b) => *b,
                Value::Array(a) => !a.is_empty(),
                other => panic!("{other}"),
            };
            assert!(!(holds && denied.contains(cap)), "{name}: {cap} both granted and denied: {p}");
        }
        for (plugin, cap) in configured {
            assert!(!(plugin == name && denied.iter().any(|d| d == cap)), "{name}: {cap} is granted yet denied: {p}");
        }
        let asks = strings(&p["asks_for"]);
        assert!(denied.iter().all(|d| asks.contains(d)), "{name}: denied is not asked for: {p}");
    }
    // As text: no plugin block has a "denied" line naming what it was granted.
    let o = grants(&["grants"]);
    let out = stdout(&o);
    for block in out.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let name = block.split_whitespace().next().unwrap();
        let denied = block.lines().find(|l| l.trim_start().starts_with("denied:")).unwrap();
        for (plugin, cap) in configured {
            assert!(!(plugin == name && denied.contains(cap)), "{block}");
        }
    }
    assert!(out.contains("was granted the environment variable TOOLHOST_REVIEW_NOT_SET"), "{out}");
}

/// `inspect` applies the trust policy as loading does: an unsigned file and
/// one signed by a key the config does not trust are described but would
/// not load (exit 3, saying why); signed by a trusted key, it names the
/// signer and would load.
#[test]
fn inspect_applies_the_trust_policy_and_names_the_signer() {
    use crate::common::run_strict;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("toolhost.yaml"), "{}\n").unwrap();
    std::fs::copy(COUNTER_PATH, d.join("counter.wasm")).unwrap();
    let inspect = || {
        let o = run_strict(d, &["inspect", "counter.wasm", "--probes", "0", "--json"]);
        (o.status.code(), serde_json::from_str::<Value>(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o))))
    };

    let (code, v) = inspect();
    assert_eq!(code, Some(NOT_LOADABLE_HERE), "unsigned: {v}");
    assert_eq!((v["described"].clone(), v["loadable"].clone()), (json!(true), json!(false)), "{v}");
    assert!(v["signed"].as_str().unwrap().starts_with("refused by the trust policy"), "{v}");
    assert!(v["error"].as_str().unwrap().contains("not signed"), "{v}");

    for who in ["alice", "mallory"] {
        let o = run_strict(d, &["keygen", who, "--out", "keys"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = run_strict(d, &["sign", "counter.wasm", "--key", "keys/mallory.key", "--version", "0.1.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(d.join("toolhost.yaml"), "trust:\n  key_files: [keys/alice.pub]\n").unwrap();
    let (code, v) = inspect();
    assert_eq!(code, Some(NOT_LOADABLE_HERE), "signed by an untrusted key: {v}");
    assert!(v["signed"].as_str().unwrap().starts_with("refused by the trust policy"), "{v}");

    let o = run_strict(d, &["sign", "counter.wasm", "--key", "keys/alice.key", "--version", "0.2.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (code, v) = inspect();
    assert_eq!(code, Some(0), "signed by a trusted key: {v}");
    assert!(v["signed"].as_str().unwrap().starts_with("signed by alice"), "{v}");
    assert!(v["signed"].as_str().unwrap().contains("version 0.2.0"), "{v}");
}
