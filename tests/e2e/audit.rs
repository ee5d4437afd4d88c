//! The audit trail: every call through the binary leaves one JSON line,
//! refused and failed calls included.

use crate::common::toolhost;
use serde_json::{Value, json};
use toolhost_test_artifacts::HOSTILE_PATH;

fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
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
    assert_eq!(outcomes, ["ok", "unknown_tool", "refused", "invalid_input", "guest_panic"]);
    let ok = &r[0];
    assert_eq!(ok["tool"], "roll");
    assert_eq!(ok["provider"], "diceroller");
    assert_eq!(ok["provider_digest"].as_str().unwrap().len(), 64);
    assert_eq!(ok["arguments_sha256"].as_str().unwrap().len(), 64);
    assert!(ok.get("arguments").is_none(), "raw arguments are off by default");
    assert!(ok["fuel_used"].as_u64().unwrap() > 0);
    assert!(ok["peak_memory_bytes"].as_u64().unwrap() > 0);
    assert_eq!(r[2]["agent"], "bartok");
    assert_eq!(r[2]["tool"], "get_rule");
    assert!(r[4]["error"].as_str().unwrap().contains("panicked on purpose"));
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
    assert_eq!(used[2], ("search_facts".into(), json!(["memory"]), json!(["memory"])));
    assert_eq!(used[3], ("roll".into(), json!([]), json!([])));
    assert_eq!(used[4], ("env".into(), json!(["env"]), json!(["env"])));
    assert_eq!(used[5], ("echo".into(), json!(["env"]), json!([])), "held but not used");
}
