//! Turns over MCP: a `tools/list` carrying an utterance runs the tier
//! selector for that session, later calls are held to the turn's tier and
//! its call cap, cacheable results are served from the cache, and long
//! tools reach only the agents the operator named. Through the binary, over
//! stdio and streamable HTTP.

use crate::common::CACHE;
use crate::live;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, PaginatedRequestParams, RequestMetaObject};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use toolhost_test_artifacts::HOSTILE_PATH;

/// Tiers pinned so that measurements made while the tests run never move
/// a tool: roll FAST, get_rule STANDARD, search_rules DEEP.
const CONFIG: &str = r#"
budget:
  pin:
    roll: fast
    get_rule: standard
    search_rules: deep
npcs:
  - name: Sage
    budget_tier: deep
    tools: [roll, get_rule, search_rules]
    max_calls_per_turn: 3
  - name: Bartok
    budget_tier: fast
    tools: [roll, get_rule, search_rules]
"#;

fn dir_with(config: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("toolhost.yaml"), config).unwrap();
    d
}

async fn stdio(dir: &std::path::Path, agent: &str, extra: &[&str]) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.current_dir(dir)
        .env("TOOLHOST_CACHE_DIR", CACHE.path())
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["serve", "--stdio", "--agent", agent])
        .args(extra);
    ().serve(TokioChildProcess::new(cmd).unwrap()).await.expect("initialize over stdio")
}

/// `tools/list` with `_meta` (`None`: a plain listing): the names and
/// `result._meta.toolhost`.
async fn turn<S: rmcp::service::Service<RoleClient>>(
    c: &RunningService<RoleClient, S>,
    meta: Option<Value>,
) -> Result<(Vec<String>, Value), String> {
    let mut params = PaginatedRequestParams::default();
    params.meta = meta.map(|m| {
        let mut o = RequestMetaObject::default();
        o.0.0 = m.as_object().unwrap().clone();
        o
    });
    let r = c.list_tools(Some(params)).await.map_err(|e| e.to_string())?;
    let names = r.tools.iter().map(|t| t.name.to_string()).collect();
    Ok((names, r.meta.map(|m| m.0["toolhost"].clone()).unwrap_or(Value::Null)))
}

async fn say<S: rmcp::service::Service<RoleClient>>(
    c: &RunningService<RoleClient, S>,
    utterance: &str,
) -> (Vec<String>, Value) {
    turn(c, Some(json!({"toolhost/utterance": utterance}))).await.unwrap()
}

async fn call<S: rmcp::service::Service<RoleClient>>(
    c: &RunningService<RoleClient, S>,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, String> {
    c.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().unwrap().clone()))
        .await
        .map_err(|e| e.to_string())
}

fn toolhost_meta(r: &CallToolResult) -> Value {
    r.meta.as_ref().map(|m| m.0["toolhost"].clone()).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_utterance_picks_the_turns_tier_over_stdio_and_calls_are_held_to_it() {
    let dir = dir_with(CONFIG);
    let c = stdio(dir.path(), "Sage", &[]).await;

    // No utterance: today's behaviour, the agent's ceiling.
    let (names, meta) = turn(&c, None).await.unwrap();
    assert_eq!(names, ["get_rule", "roll", "search_rules"]);
    assert_eq!(meta["tier"], "deep");
    assert_eq!(meta["turn"], 0);

    // "hello": FAST only.
    let (names, meta) = say(&c, "hello").await;
    assert_eq!(names, ["roll"], "{meta}");
    assert_eq!(meta["tier"], "fast");
    assert_eq!(meta["reason"], "no trigger: default");
    // Calls are held to the turn's tier: a STANDARD tool is unknown now.
    let refused = call(&c, "get_rule", json!({"id": "spell-fireball"})).await.unwrap_err();
    assert!(refused.contains("unknown tool \"get_rule\""), "{refused}");
    // The tier a call ran at comes with its cost, when asked for.
    let mut costed =
        CallToolRequestParams::new("roll").with_arguments(json!({"expression": "1d20"}).as_object().unwrap().clone());
    costed.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(
        json!({"toolhost/cost": true}).as_object().unwrap().clone(),
    )));
    let ok = c.call_tool(costed).await.unwrap();
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(toolhost_meta(&ok)["tier"], "fast");

    // A plain listing keeps the turn's tier.
    assert_eq!(turn(&c, None).await.unwrap().0, ["roll"]);

    // "think carefully about ...": DEEP.
    let (names, meta) = say(&c, "Think carefully about the fireball rules").await;
    assert_eq!(names, ["get_rule", "roll", "search_rules"]);
    assert_eq!(meta["tier"], "deep");
    assert!(meta["reason"].as_str().unwrap().contains("think carefully"), "{meta}");
    let deep = call(&c, "search_rules", json!({"query": "fireball"})).await.unwrap();
    assert_eq!(deep.is_error, Some(false));

    // The anti-spam rule holds across turns of the session: DEEP again
    // within 30 s is STANDARD.
    let (names, meta) = say(&c, "take your time and think carefully").await;
    assert_eq!(meta["tier"], "standard", "{meta}");
    assert!(meta["reason"].as_str().unwrap().contains("demoted to STANDARD"), "{meta}");
    assert_eq!(names, ["get_rule", "roll"]);
    // First turn and queue depth cues.
    let (_, meta) = turn(&c, Some(json!({"toolhost/utterance": "hi", "toolhost/first_turn": true}))).await.unwrap();
    assert_eq!(
        (meta["tier"].as_str(), meta["reason"].as_str()),
        (Some("standard"), Some("first turn of the conversation"))
    );
    let (names, meta) =
        turn(&c, Some(json!({"toolhost/utterance": "remember the quest?", "toolhost/queue_depth": 4}))).await.unwrap();
    assert_eq!(meta["reason"], "4 players waiting");
    assert_eq!(names, ["roll"]);

    // Bad cues are invalid params, and the session keeps serving.
    for (bad, key) in [
        (json!({"toolhost/utterance": 5}), "toolhost/utterance"),
        (json!({"toolhost/utterance": "x", "toolhost/queue_depth": -1}), "toolhost/queue_depth"),
        (json!({"toolhost/utterance": "x", "toolhost/first_turn": "yes"}), "toolhost/first_turn"),
        (json!({"toolhost/utterance": "x".repeat(20_000)}), "toolhost/utterance"),
        (json!({"toolhost/utterance": null}), "toolhost/utterance"),
        (json!({"toolhost/utterance": "x", "toolhost/queue-depth": 3}), "toolhost/queue-depth"),
    ] {
        let e = turn(&c, Some(bad)).await.unwrap_err();
        assert!(e.contains(key) && e.contains("-32602"), "{e}");
    }
    assert_eq!(say(&c, "hello").await.0, ["roll"]);
    c.cancel().await.unwrap();

    // A new session has its own anti-spam clock, and the ceiling caps it.
    let c = stdio(dir.path(), "Sage", &[]).await;
    assert_eq!(say(&c, "think carefully").await.1["tier"], "deep", "a fresh session may go DEEP at once");
    c.cancel().await.unwrap();
    let c = stdio(dir.path(), "Bartok", &[]).await;
    let (names, meta) = say(&c, "think carefully about the rules").await;
    assert_eq!(names, ["roll"]);
    assert_eq!(meta["tier"], "fast");
    assert!(meta["reason"].as_str().unwrap().contains("capped at the agent's ceiling"), "{meta}");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_turn_cap_refuses_the_extra_call_and_the_cache_answers_repeats_over_http() {
    let dir = dir_with(&format!("{CONFIG}audit:\n  path: ./audit.jsonl\n"));
    let (_server, url) = live::serve(dir.path());
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(format!("{url}/mcp/sage"));
    let c = ().serve(transport).await.expect("initialize over HTTP");

    // No turn yet: no cap.
    for _ in 0..4 {
        assert_eq!(call(&c, "roll", json!({"expression": "1d4"})).await.unwrap().is_error, Some(false));
    }
    let (_, meta) = say(&c, "what are the rules on grappling?").await;
    assert_eq!(meta["tier"], "standard");

    // The rules tools declare cacheable_seconds: the second identical
    // get_rule (key order aside) is served from the cache.
    let first = call(&c, "get_rule", json!({"id": "spell-fireball"})).await.unwrap();
    assert_eq!(first.is_error, Some(false));
    assert_eq!(toolhost_meta(&first)["cached"], false);
    let second = call(&c, "get_rule", json!({"id": "spell-fireball"})).await.unwrap();
    assert_eq!(toolhost_meta(&second)["cached"], true);
    assert_eq!(second.content, first.content);
    assert_eq!(second.structured_content, first.structured_content);
    // Dice are not cacheable.
    let roll = call(&c, "roll", json!({"expression": "1d4"})).await.unwrap();
    assert_eq!(toolhost_meta(&roll)["cached"], false);

    // The fourth call of the turn is refused, cached or not.
    let over = call(&c, "get_rule", json!({"id": "spell-fireball"})).await.unwrap();
    assert_eq!(over.is_error, Some(true));
    assert_eq!(toolhost_meta(&over)["code"], "capacity_exceeded");
    let text = format!("{:?}", over.content);
    assert!(text.contains("max_calls_per_turn: 3"), "{text}");

    // A new utterance starts a new turn.
    say(&c, "and the rule on fireball?").await;
    assert_eq!(call(&c, "get_rule", json!({"id": "spell-fireball"})).await.unwrap().is_error, Some(false));

    // The operator's session does not share the Sage's cache entries.
    let op = ().serve(rmcp::transport::StreamableHttpClientTransport::from_uri(format!("{url}/mcp"))).await.unwrap();
    let mine = call(&op, "get_rule", json!({"id": "spell-fireball"})).await.unwrap();
    assert_eq!(toolhost_meta(&mine)["cached"], false);

    // The audit trail says which calls were cached and which were refused.
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let records: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let rules: Vec<(&str, bool)> = records
        .iter()
        .filter(|r| r["event"] == "call" && r["tool"] == "get_rule" && r["agent"] == "Sage")
        .map(|r| (r["outcome"].as_str().unwrap(), r["cached"].as_bool().unwrap_or(false)))
        .collect();
    assert_eq!(rules, [("ok", false), ("ok", true), ("ok", true)]);
    // The refused one is counted into the Sage's `refused` record of its
    // second, written within a second or so (a serving host flushes them).
    let refused = || {
        let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
        audit.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).any(|r| {
            r["event"] == "refused" && r["agent"] == "Sage" && r["reason"] == "capacity_exceeded" && r["count"] == 1
        })
    };
    crate::live::eventually("the refused record", async || refused()).await;
    c.cancel().await.unwrap();
    op.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_tool_runs_past_deep_for_the_agent_allowed_it_and_no_one_else_sees_it() {
    let dir = dir_with(
        r#"
budget:
  long_tools:
    - tool: sleep
      timeout_ms: 15000
      agents: [Listener]
npcs:
  - name: Listener
    budget_tier: deep
    tools: [sleep, roll]
  - name: Other
    budget_tier: deep
    tools: [sleep, roll]
"#,
    );
    let listener = stdio(dir.path(), "Listener", &["--plugin", HOSTILE_PATH, "--allow-unsigned"]).await;
    let (names, _) = say(&listener, "hello").await;
    assert_eq!(names, ["roll"], "a long tool is a DEEP tool: not in a FAST turn");
    let e = call(&listener, "sleep", json!({"ms": 10})).await.unwrap_err();
    assert!(e.contains("unknown tool \"sleep\""), "{e}");
    let (names, _) = say(&listener, "think carefully while you wait").await;
    assert_eq!(names, ["roll", "sleep"]);
    let tools = listener.list_all_tools().await.unwrap();
    let sleep = tools.iter().find(|t| t.name == "sleep").unwrap();
    assert_eq!(sleep.meta.as_ref().unwrap().0["toolhost"]["long_timeout_ms"], 15000);
    let started = std::time::Instant::now();
    let r = call(&listener, "sleep", json!({"ms": 10_000})).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{:?}", r.content);
    assert!(started.elapsed() >= std::time::Duration::from_secs(10));
    listener.cancel().await.unwrap();

    let other = stdio(dir.path(), "Other", &["--plugin", HOSTILE_PATH, "--allow-unsigned"]).await;
    assert_eq!(say(&other, "think carefully").await.0, ["roll"], "DEEP, on the allow-list, and still not seen");
    let e = call(&other, "sleep", json!({"ms": 10})).await.unwrap_err();
    assert!(e.contains("unknown tool \"sleep\""), "{e}");
    other.cancel().await.unwrap();

    // Nor by the operator.
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.current_dir(dir.path())
        .env("TOOLHOST_CACHE_DIR", CACHE.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .args(["serve", "--stdio", "--plugin", HOSTILE_PATH, "--allow-unsigned"]);
    let op = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let all = op.list_all_tools().await.unwrap();
    assert!(all.iter().any(|t| t.name == "echo") && !all.iter().any(|t| t.name == "sleep"));
    op.cancel().await.unwrap();
}

#[test]
fn turn_settings_that_cannot_work_are_refused_with_the_key() {
    for (config, want) in [
        ("budget:\n  max_calls_per_turn: 0\n", "budget.max_calls_per_turn: must be at least 1"),
        ("npcs:\n  - name: a\n    max_calls_per_turn: 0\n", "npcs[0].max_calls_per_turn: must be at least 1"),
        ("budget:\n  pin:\n    roll: glacial\n", "pin"),
        (
            "budget:\n  long_tools:\n    - tool: sleep\n      timeout_ms: 60000\n      agents: [a]\nnpcs:\n  - name: a\n",
            "budget.long_tools[0].timeout_ms: 60000 ms is above limits.timeout_ceiling_ms (30000 ms)",
        ),
        (
            "budget:\n  long_tools:\n    - tool: sleep\n      timeout_ms: 20000\n      agents: [ghost]\n",
            "budget.long_tools[0].agents: no agent \"ghost\" in npcs",
        ),
        (
            "budget:\n  long_tools:\n    - tool: sleep\n      timeout_ms: 1000\n      agents: [a]\nnpcs:\n  - name: a\n",
            "within the DEEP ceiling",
        ),
    ] {
        let dir = dir_with(config);
        let out = crate::common::toolhost().current_dir(dir.path()).args(["tools"]).output().unwrap();
        assert!(!out.status.success(), "{config}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{config}: {err}");
    }
}
