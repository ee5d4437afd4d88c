//! Tasks for long tools, through the official Python SDK in both protocol
//! revisions: over 2026-07-28 (`auto`) the `io.modelcontextprotocol/tasks`
//! extension (a client extension that claims the `task` result and polls
//! `tasks/get`), over 2025-11-25 (`legacy`) the experimental `tasks`
//! (`params.task`, `tasks/get`, `tasks/result`, `tasks/cancel`,
//! `tasks/list`), each over stdio and HTTP; and through the TypeScript
//! SDKs' own task APIs (1.32's experimental tasks, 2.3 with ext-tasks).
//! The long tool is the conformance fixture's `long_quest`, declared
//! long-running through the contract's `execution` export (0.1.2).
//!
//! Hostile and tired: 10,000 tasks from one agent are held to
//! `limits.tasks_per_agent` running with a clear error while another
//! agent's calls go on; finished results are held to
//! `limits.task_results_per_agent`; a cancelled task's plugin stops.

use crate::offers::stdio;
use crate::peers::{peer, python, run, serve_http, test_dir};
use serde_json::{Value, json};
use std::process::Command;
use toolhost_test_artifacts::CONFORMANCE_PATH;

/// Runs `py_tasks.py` against `target` in `mode` with `args`; its one JSON object.
fn py(dir: &std::path::Path, mode: &str, args: &[&str], target: &[String]) -> Value {
    let mut cmd = Command::new(python());
    cmd.current_dir(dir).arg(peer("py_tasks.py")).args(["--mode", mode]).args(args).args(target);
    let run = run(&format!("py_tasks.py --mode {mode} {args:?}"), cmd);
    assert!(run.status.success(), "{}", run.report());
    let line = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("py_tasks printed no JSON ({e})\n{}", run.report()))
}

/// The audit records of `tool`'s calls under `state`.
fn audited(state: &std::path::Path, tool: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(state.join("audit.jsonl")).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|r| r["tool"] == tool).collect()
}

/// The task handle's status, in either revision's shape.
fn created_status(created: &Value) -> &Value {
    if created.get("task").is_some() { &created["task"]["status"] } else { &created["status"] }
}

#[test]
fn python_sdk_runs_a_long_tool_as_a_task_and_cancels_one_in_both_revisions_over_stdio_and_http() {
    let dir = test_dir("");
    let server = serve_http(dir.path(), &["--no-builtins", "--plugin", CONFORMANCE_PATH]);
    let targets = [("http", vec!["--http".to_string(), server.mcp()]), ("stdio", stdio(dir.path()))];
    for (transport, target) in &targets {
        for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
            let at = format!("{mode} over {transport}");
            let run = py(dir.path(), mode, &["--tool", "long_quest", "--args", r#"{"steps":3}"#, "--run"], target);
            assert_eq!(run["protocol_version"], version, "{at}: {run}");
            assert_eq!(*created_status(&run["created"]), json!("working"), "{at}: answered at once, working: {run}");
            assert_eq!(run["final"]["status"], "completed", "{at}: {run}");
            assert_eq!(run["final"]["statusMessage"], "step 3 of 3", "{at}: progress is the status message: {run}");
            assert_eq!(run["result"]["content"][0]["text"], "The quest is done after 3 steps", "{at}: {run}");
            assert_eq!(run["result"]["isError"], false, "{at}: {run}");
            if mode == "legacy" {
                // The stock SDK reads the task answer as a tool result too.
                assert_eq!(run["sdk_validation"], "ok", "{at}: {run}");
                assert_eq!(
                    run["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
                    run["created"]["task"]["taskId"]
                );
            }
            let cancel =
                py(dir.path(), mode, &["--tool", "long_quest", "--args", r#"{"steps":100}"#, "--cancel"], target);
            assert_eq!(*created_status(&cancel["created"]), json!("working"), "{at}: {cancel}");
            assert_eq!(cancel["final"]["status"], "cancelled", "{at}: {cancel}");
        }
    }
    // A task that outlives the ttl its client asked for still has its
    // result when it ends (kept a while after it ends, whatever the ttl).
    let http = &targets[0].1;
    let short = py(
        dir.path(),
        "legacy",
        &["--tool", "long_quest", "--args", r#"{"steps":15}"#, "--ttl", "1000", "--run"],
        http,
    );
    assert_eq!(short["final"]["status"], "completed", "{short}");
    assert_eq!(short["result"]["content"][0]["text"], "The quest is done after 15 steps", "{short}");
    // The cancelled tasks' plugin calls stopped (audited `cancelled`, not
    // run out to their 10 s); the others ran to the end.
    for state in [dir.path().join("state"), dir.path().join("stdio-state")] {
        let records = audited(&state, "long_quest");
        let outcomes: Vec<&str> = records.iter().map(|r| r["outcome"].as_str().unwrap_or_default()).collect();
        assert_eq!(outcomes.iter().filter(|o| **o == "cancelled").count(), 2, "{state:?}: {outcomes:?}");
        let ran = if state.ends_with("stdio-state") { 2 } else { 3 };
        assert_eq!(outcomes.iter().filter(|o| **o == "ok").count(), ran, "{state:?}: {outcomes:?}");
    }
}

/// The TypeScript SDKs as their users call tasks: 1.32's
/// `experimental.tasks.callToolStream` (2025-11-25: it reads the `tasks`
/// capability and the tool's `execution.taskSupport` first) runs one to
/// its result; 2.3 with `@modelcontextprotocol/ext-tasks` (2026-07-28)
/// cancels one.
#[test]
fn typescript_sdks_run_and_cancel_tasks_through_their_own_task_apis() {
    let dir = test_dir("");
    let server = serve_http(dir.path(), &["--no-builtins", "--plugin", CONFORMANCE_PATH]);
    let ts = |args: &[&str]| {
        let mut cmd = Command::new(crate::peers::node22());
        cmd.current_dir(dir.path()).arg(peer("ts_tasks.mjs")).args(["--url", &server.mcp()]).args(args);
        let run = run(&format!("ts_tasks.mjs {args:?}"), cmd);
        assert!(run.status.success(), "{}", run.report());
        serde_json::from_str::<Value>(run.stdout.lines().last().unwrap_or_default()).unwrap()
    };
    let v1 = ts(&["--run", "long_quest", "--args", r#"{"steps":3}"#]);
    assert_eq!(v1["protocol_version"], "2025-11-25", "{v1}");
    assert_eq!(v1["is_tool_task"], true, "the SDK saw taskSupport: {v1}");
    assert_eq!(v1["statuses"].as_array().unwrap().last().unwrap(), "completed", "{v1}");
    assert_eq!(v1["result"]["content"][0]["text"], "The quest is done after 3 steps", "{v1}");
    assert_eq!(v1["sdk_errors"], json!([]), "{v1}");
    let v2 = ts(&["--sdk", "v2", "--cancel", "long_quest", "--args", r#"{"steps":100}"#]);
    assert_eq!(v2["protocol_version"], "2026-07-28", "{v2}");
    assert_eq!(v2["execution_kind"], "task", "{v2}");
    assert_eq!(v2["outcome"], "cancelled", "{v2}");
    assert_eq!(v2["sdk_errors"], json!([]), "{v2}");
}

/// A tool that is neither long nor DEEP runs as a call: a 2026-07-28
/// client that declared tasks gets its result at once; a 2025-11-25 client
/// that asks for a task is told (-32601, as that revision says) and the
/// tool is listed without `execution.taskSupport`, while the long tool
/// carries it and `initialize` declares `tasks`.
#[test]
fn a_fast_tool_is_no_task_and_2025_11_25_clients_see_which_tools_are() {
    let dir = test_dir("");
    let server = serve_http(dir.path(), &["--no-builtins", "--plugin", CONFORMANCE_PATH]);
    let http = vec!["--http".to_string(), server.mcp()];
    let modern = py(dir.path(), "auto", &["--tool", "test_simple_text", "--run"], &http);
    assert_eq!(modern["created"], Value::Null, "a plain result, no task: {modern}");
    assert_eq!(modern["result"]["content"][0]["text"], "This is a simple text response for testing.", "{modern}");
    let legacy = py(dir.path(), "legacy", &["--tool", "test_simple_text", "--run"], &http);
    assert_eq!(legacy["result"]["error"]["code"], -32601, "{legacy}");
    assert!(legacy["result"]["error"]["message"].as_str().unwrap().contains("runs as a task here"), "{legacy}");

    let listed = crate::offers::py(dir.path(), "legacy", &["--tool-defs"], &http);
    let execution = |name: &str| {
        listed["tool_defs"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap()["execution"].clone()
    };
    assert_eq!(execution("long_quest"), json!({"taskSupport": "optional"}), "{listed}");
    assert_eq!(execution("test_simple_text"), Value::Null, "{listed}");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let init = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let sent = reqwest::Client::new()
            .post(server.mcp())
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        sent.text().await.unwrap()
    });
    let data = init.lines().filter_map(|l| l.strip_prefix("data: ")).find(|l| l.contains("capabilities")).unwrap();
    let caps = &serde_json::from_str::<Value>(data).unwrap()["result"]["capabilities"];
    assert_eq!(caps["tasks"]["requests"]["tools"]["call"], json!({}), "{caps}");
    assert_eq!(caps["extensions"], Value::Null, "2026-07-28's extension is no initialize answer's: {caps}");
}

/// 10,000 tasks from one agent: `limits.tasks_per_agent` run, the rest are
/// refused at once with an error that names the limit, and another agent
/// meanwhile calls as usual. Finished tasks are kept to
/// `limits.task_results_per_agent`: the oldest is dropped (a clear
/// "no task" for it). `tasks/list` shows a token's own tasks only: not
/// another token's of the same agent, not another agent's.
#[test]
fn ten_thousand_tasks_from_one_agent_are_bounded_and_another_agent_is_unaffected() {
    let dir = test_dir("");
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "limits:\n  tasks_per_agent: 4\n  task_results_per_agent: 3\nserver:\n  connection_rate_limit: { per_minute: 0 }\n  tokens:\n    - { token: flood-secret-0123456789, agent: Flood, id: flood }\n    - { token: calm-one-secret-0123456789, agent: Calm, id: calm-one }\n    - { token: calm-two-secret-0123456789, agent: Calm, id: calm-two }\nnpcs:\n  - name: Flood\n    budget_tier: deep\n    tools: [long_quest, test_simple_text]\n    rate_limit: { per_minute: 0 }\n  - name: Calm\n    budget_tier: deep\n    tools: [long_quest, test_simple_text]\n",
    )
    .unwrap();
    let server = serve_http(dir.path(), &["--no-builtins", "--plugin", CONFORMANCE_PATH]);
    let as_ = |token: &str| {
        vec!["--header".to_string(), format!("Authorization: Bearer {token}"), "--http".to_string(), server.mcp()]
    };
    let (flood, calm, calm_two) =
        (as_("flood-secret-0123456789"), as_("calm-one-secret-0123456789"), as_("calm-two-secret-0123456789"));
    let flooding = {
        let (dir, flood) = (dir.path().to_path_buf(), flood.clone());
        std::thread::spawn(move || {
            py(&dir, "legacy", &["--tool", "long_quest", "--args", r#"{"steps":30}"#, "--flood", "10000"], &flood)
        })
    };
    // The other agent, while the flood runs: its calls and its own task.
    let calm_call = crate::offers::py(dir.path(), "legacy", &["--calls", r#"[["test_simple_text", {}]]"#], &calm);
    assert_eq!(calm_call["results"][0]["isError"], false, "{calm_call}");
    let calm_task = py(dir.path(), "auto", &["--tool", "long_quest", "--args", r#"{"steps":2}"#, "--run"], &calm);
    assert_eq!(calm_task["final"]["status"], "completed", "{calm_task}");
    // Never more than four of the flood's tasks at work (a slot frees
    // when one ends: its steps take 3 s, the flood longer).
    let mut seen = 0;
    while !flooding.is_finished() {
        let listed = py(dir.path(), "legacy", &["--list"], &flood);
        let working = listed["list"]["tasks"].as_array().unwrap().iter().filter(|t| t["status"] == "working").count();
        assert!(working <= 4, "{working} working: {listed}");
        seen = seen.max(working);
    }
    assert!(seen > 0, "the flood's token lists its tasks");
    let flooded = flooding.join().unwrap();
    let created = flooded["created"].as_u64().unwrap();
    assert!(created >= 4, "{flooded}");
    let errors = flooded["errors"].as_object().unwrap();
    assert_eq!(errors.values().map(|n| n.as_u64().unwrap()).sum::<u64>() + created, 10_000, "{flooded}");
    assert!(errors.keys().all(|e| e.contains("limits.tasks_per_agent")), "{flooded}");

    // Kept results: three at most, the oldest dropped first.
    let mut ids = Vec::new();
    for _ in 0..4 {
        let run = py(dir.path(), "legacy", &["--tool", "long_quest", "--args", r#"{"steps":1}"#, "--run"], &calm);
        assert_eq!(run["final"]["status"], "completed", "{run}");
        ids.push(run["created"]["task"]["taskId"].as_str().unwrap().to_string());
    }
    let first = py(dir.path(), "legacy", &["--get", &ids[0]], &calm);
    assert_eq!(first["get"]["error"]["code"], -32602, "{first}");
    assert!(first["get"]["error"]["message"].as_str().unwrap().contains("limits.task_results_per_agent"), "{first}");
    let listed = py(dir.path(), "legacy", &["--list"], &calm);
    let kept: Vec<&str> =
        listed["list"]["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap()).collect();
    // The agent's one other task, the auto one, was made by this token too.
    assert_eq!(kept, [&ids[3], &ids[2], &ids[1]], "newest first, the oldest gone: {listed}");
    let other_token = py(dir.path(), "legacy", &["--list"], &calm_two);
    assert_eq!(other_token["list"]["tasks"], json!([]), "another token's list: {other_token}");
    // Another agent's tasks are not this one's to read.
    let foreign = py(dir.path(), "legacy", &["--get", &ids[3]], &flood);
    assert_eq!(foreign["get"]["error"]["code"], -32602, "{foreign}");
}

/// Two hosts of a fleet on one PostgreSQL: a task made through host A is
/// read through host B, in either revision, waited for there to its result
/// (2025-11-25's `tasks/result`), and a working one is cancelled through
/// B: A stops it and says so. A row forged in the database without the
/// cluster key is not served.
#[test]
fn a_task_made_through_one_fleet_host_is_read_waited_for_and_cancelled_through_another() {
    let d = tempfile::tempdir().unwrap();
    let (db, url) = crate::pg::database();
    let hosts: Vec<(crate::live::Proc, String)> = ["a", "b"]
        .iter()
        .map(|id| {
            let dir = d.path().join(id);
            std::fs::create_dir_all(&dir).unwrap();
            let key = crate::fleet::fleet_key(&dir);
            std::fs::write(
                dir.join("toolhost.yaml"),
                format!(
                    "trust:\n  allow_unsigned: true\nplugins:\n  files: [{CONFORMANCE_PATH:?}]\ncluster:\n  url: {url}\n  host_id: {id}\n  secret_key_file: {key:?}\nserver:\n  rate_limit: {{ per_minute: 0 }}\nbudget:\n  background_calibration: false\nnpcs:\n  - name: bartok\n    budget_tier: deep\n    tools: [long_quest]\n"
                ),
            )
            .unwrap();
            crate::fleet::start(&dir)
        })
        .collect();
    let endpoint = |i: usize| vec!["--http".to_string(), format!("{}/mcp/bartok", hosts[i].1)];
    for mode in ["legacy", "auto"] {
        let made = py(d.path(), mode, &["--tool", "long_quest", "--args", r#"{"steps":30}"#, "--create"], &endpoint(0));
        let created = &made["created"];
        let id = created.get("task").map_or(&created["taskId"], |t| &t["taskId"]).as_str().unwrap().to_string();
        let read = py(d.path(), mode, &["--get", &id], &endpoint(1));
        assert_eq!(read["get"]["status"], "working", "{mode}: host B reads A's task: {read}");
        let waited = py(d.path(), mode, &["--wait", &id], &endpoint(1));
        assert_eq!(waited["final"]["status"], "completed", "{mode}: {waited}");
        assert_eq!(
            waited["result"]["content"][0]["text"], "The quest is done after 30 steps",
            "{mode}: through B: {waited}"
        );

        let made =
            py(d.path(), mode, &["--tool", "long_quest", "--args", r#"{"steps":100}"#, "--create"], &endpoint(0));
        let created = &made["created"];
        let id = created.get("task").map_or(&created["taskId"], |t| &t["taskId"]).as_str().unwrap().to_string();
        let cancelled = py(d.path(), mode, &["--cancel-id", &id], &endpoint(1));
        assert_eq!(cancelled["get"]["status"], "cancelled", "{mode}: {cancelled}");
        // Host A hears of it (within a second) and says so itself.
        let on_a = py(d.path(), mode, &["--wait", &id], &endpoint(0));
        assert_eq!(on_a["final"]["status"], "cancelled", "{mode}: {on_a}");
    }
    // Forged: a row written without the cluster key's tag.
    let (ok, said) = crate::pg::cluster().psql(
        &db,
        "INSERT INTO cluster_tasks (endpoint, id, host_id, record, tag, expires) VALUES ('bartok', 'f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0', 'a', '{\"status\":\"completed\",\"message\":null,\"created\":\"2026-01-01T00:00:00.000Z\",\"updated\":\"2026-01-01T00:00:00.000Z\",\"ttl_ms\":60000,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"forged\"}]}}', 'x', now() + interval '1 hour')",
    );
    assert!(ok, "{said}");
    let forged = py(d.path(), "legacy", &["--get", "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0"], &endpoint(1));
    assert_eq!(forged["get"]["error"]["code"], -32602, "{forged}");
}
