//! `toolhost doctor` judges what a start would load (#31): `oci://` entries
//! pulled as the host pulls them (the locked digest from the cache, no
//! network), plugins added at run time, signatures by trusted keys. Clean
//! on a correct setup; on a broken one, exactly the broken entry, once.

use crate::common::{stderr, stdout};
use crate::oci::{Registry, ok, run, signed, th, trust};
use serde_json::Value;
use std::path::Path;
use toolhost_test_artifacts::{COUNTER_PATH, SWAP_V1_PATH};

/// A correct setup in `dir`: `swap` from a registry by tag, pinned by
/// `toolhost lock`; `counter` added at run time to a serving host (so in
/// its run-time changes) and granted an environment variable; an NPC using
/// a tool of each; every plugin signed by the trusted key `alice`. The
/// registry is gone when this returns.
fn correct_setup(dir: &Path) -> String {
    let reg = Registry::start(dir, None);
    trust(dir, "alice", "");
    let swap = signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.0", "v1");
    let r = reg.reference("tools/swap:1.0.0");
    ok(&run(dir, &["push", swap.to_str().unwrap(), &r]));
    std::fs::write(dir.join("toolhost.yaml"), config(&r)).unwrap();
    ok(&run(dir, &["lock"]));
    let counter = signed(dir, COUNTER_PATH, "alice", "counter", "1.0.0", "added");
    {
        let mut cmd = th(dir);
        cmd.args(["serve", "--http", "127.0.0.1:0"]);
        let (_host, _url) = crate::live::spawn_serving(cmd);
        let out = ok(&run(dir, &["plugin", "add", counter.to_str().unwrap()]));
        assert!(out.starts_with("added counter"), "{out}");
    }
    assert!(dir.join("state/runtime-changes.json").exists(), "the run-time addition is recorded");
    r
}

fn config(reference: &str) -> String {
    format!(
        "trust:\n  key_files: [keys/alice.pub]\nplugins:\n  builtins: false\n  files: [\"{reference}\"]\n  grants:\n    counter:\n      env: [PATH]\nnpcs:\n  - name: Bartok\n    tools: [version, count]\n"
    )
}

/// `doctor --json`: its exit code and findings.
fn doctor(dir: &Path) -> (Option<i32>, Vec<Value>) {
    let o = run(dir, &["doctor", "--json", "--connect-timeout", "2"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    (o.status.code(), v["findings"].as_array().unwrap().clone())
}

fn errors(findings: &[Value]) -> Vec<&Value> {
    findings.iter().filter(|f| f["level"] == "error").collect()
}

#[test]
fn doctor_is_clean_on_a_correct_oci_and_runtime_added_setup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    correct_setup(dir);
    // The registry is gone: the locked digest comes from the cache, as at start.
    let (code, findings) = doctor(dir);
    assert_eq!((code, findings.len()), (Some(0), 0), "{findings:#?}");
    let out = ok(&run(dir, &["doctor"]));
    assert!(out.contains("no problems found") && !out.contains("NOT VERIFIED"), "{out}");
    // A start agrees: both plugins load, from the cache and the record.
    let tools = ok(&run(dir, &["tools", "--json"]));
    assert!(tools.contains("\"version\"") && tools.contains("\"count\""), "{tools}");
}

#[test]
fn doctor_flags_exactly_the_one_broken_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let reference = correct_setup(dir);
    let added = dir.join("added/counter.wasm");
    let good = std::fs::read(&added).unwrap();

    // The run-time addition replaced by an unsigned file: the host would
    // not restore it. One error, at that entry; its tool and grant are
    // not reported again.
    std::fs::copy(COUNTER_PATH, &added).unwrap();
    let (code, findings) = doctor(dir);
    assert_eq!((code, findings.len()), (Some(1), 1), "{findings:#?}");
    let f = &findings[0];
    assert!(f["at"].as_str().unwrap().starts_with("plugin counter (added at run time from "), "{f}");
    assert!(f["message"].as_str().unwrap().contains("is not signed"), "{f}");
    std::fs::write(&added, good).unwrap();
    assert_eq!(doctor(dir).1.len(), 0, "restored: clean again");

    // The registry entry at a tag never pushed (and the registry gone):
    // one error, at that entry; the NPC's tool from it is unchecked, a
    // warning, not a second error.
    let broken = reference.replace(":1.0.0", ":9.9.9");
    std::fs::write(dir.join("toolhost.yaml"), config(&broken)).unwrap();
    let (code, findings) = doctor(dir);
    let errors = errors(&findings);
    assert_eq!((code, errors.len()), (Some(1), 1), "{findings:#?}");
    assert_eq!(errors[0]["at"], format!("plugins.files[0] ({broken})"), "{findings:#?}");
    assert!(errors[0]["message"].as_str().unwrap().contains("cannot be reached"), "{findings:#?}");
    for w in findings.iter().filter(|f| f["level"] == "warning") {
        assert!(w["message"].as_str().unwrap().contains("not loaded, so not checked: plugins.files[0]"), "{w}");
    }
}

/// Run where there is no `toolhost.yaml` (the wrong directory, at 11pm),
/// `doctor` says it checked the defaults rather than a bare "no problems";
/// with one, it names the file it checked.
#[test]
fn doctor_names_the_config_it_checked_or_says_there_was_none() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(dir.path(), &["doctor"]);
    assert!(
        stdout(&o).starts_with("no config file (no toolhost.yaml here, no --config): checked the defaults"),
        "{}",
        stdout(&o)
    );
    std::fs::write(dir.path().join("toolhost.yaml"), "npcs:\n  - name: bartok\n    tools: [roll]\n").unwrap();
    let o = run(dir.path(), &["doctor"]);
    assert!(stdout(&o).starts_with("checked toolhost.yaml (state directory "), "{}", stdout(&o));
    assert!(stdout(&o).contains("no problems found"), "{}", stdout(&o));
    // Which way in is in force for serve --http.
    assert!(
        stdout(&o).contains("front door (serve --http): the loopback operator is on (the server's own Unix user, no token; the default without server.tokens or server.oauth)"),
        "{}",
        stdout(&o)
    );
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "npcs:\n  - name: bartok\n    tools: [roll]\nserver:\n  oauth:\n    issuer: https://id.example.org\n    audience: https://toolhost.example.org/mcp\n    agents:\n      - { match: { sub: alice }, agent: bartok }\n",
    )
    .unwrap();
    let o = run(dir.path(), &["doctor"]);
    assert!(
        stdout(&o).contains("front door (serve --http): OAuth access tokens from https://id.example.org for https://toolhost.example.org/mcp; the loopback operator is off (the default once server.tokens or server.oauth is set)"),
        "{}",
        stdout(&o)
    );
    // A mapping to an agent that does not exist is the config's error.
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "npcs:\n  - name: bartok\n    tools: [roll]\nserver:\n  oauth:\n    issuer: https://id.example.org\n    audience: https://toolhost.example.org/mcp\n    agents:\n      - { match: { sub: alice }, agent: lyra }\n",
    )
    .unwrap();
    let o = run(dir.path(), &["doctor"]);
    assert!(
        !o.status.success() && stderr(&o).contains("server.oauth.agents[0].agent: no agent \"lyra\" in npcs"),
        "{}",
        stderr(&o)
    );
}
