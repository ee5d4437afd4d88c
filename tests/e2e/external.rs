//! External MCP servers behind toolhost's registry, through the binary and
//! real transports, with the Python `mcp` peer (`tests/peers/py_server.py`):
//! a server killed mid-call, a call past its deadline (and the
//! `notifications/cancelled` the server receives), servers added and removed
//! while the host runs (and the `tools/list_changed` a client receives), and
//! bearer and OAuth client-credentials authentication.

use crate::common::{CACHE, stderr, stdout};
use crate::live::{Client, Proc, connect, eventually, names, serve, spawn_serving};
use crate::peers::{free_port, peers_dir, python, spawn_listening};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn py_server() -> String {
    format!("{} {}", python().display(), peers_dir().join("py_server.py").display())
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().unwrap().clone()))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

fn code(r: &CallToolResult) -> Value {
    r.meta.as_ref().map(|m| m.0["toolhost"]["code"].clone()).unwrap_or(Value::Null)
}

/// How many `slow` calls the server has begun (its events file).
fn started_slow(events: &Path) -> usize {
    std::fs::read_to_string(events).map_or(0, |e| e.lines().filter(|l| *l == "started slow").count())
}

fn py_config(dir: &Path, extra_env: &str) -> String {
    format!(
        "server:\n  rate_limit: {{ per_minute: 0 }}\nmcp:\n  servers:\n    - name: py\n      transport: stdio\n      command: {}\n      env:\n        PY_PEER_PIDFILE: {}\n        PY_PEER_EVENTS: {}\n{extra_env}",
        py_server(),
        dir.join("py.pid").display(),
        dir.join("events.log").display(),
    )
}

/// A server killed under a call: the call fails `unavailable`, the host's
/// own tools keep answering, the server's tools are hidden while it is down
/// and come back when it reconnects.
#[tokio::test(flavor = "multi_thread")]
async fn an_external_servers_failure_touches_only_its_own_tools() {
    let dir = tempfile::tempdir().unwrap();
    // The server's command waits while `gate` exists: the test holds it
    // down for as long as it needs to look, then lets it start.
    let gate = dir.path().join("gate");
    let wrapper = dir.path().join("py.sh");
    std::fs::write(
        &wrapper,
        format!("while [ -e {} ]; do /bin/sleep 0.05; done\nexec {}\n", gate.display(), py_server()),
    )
    .unwrap();
    let config = py_config(dir.path(), "").replace(&py_server(), &format!("/bin/sh {}", wrapper.display()));
    std::fs::write(dir.path().join("toolhost.yaml"), config).unwrap();
    let (_host, url) = serve(dir.path());
    let (client, _) = connect(&url).await;
    let listed = names(&client).await;
    assert!(listed.contains(&"add".to_string()) && listed.contains(&"slow".to_string()), "{listed:?}");
    let first_pid = std::fs::read_to_string(dir.path().join("py.pid")).unwrap();

    // A long call in flight (the server says it began); kill the server
    // under it (and keep it from coming back until the gate opens).
    let events = dir.path().join("events.log");
    let slow = {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(
                CallToolRequestParams::new("slow").with_arguments(json!({"ms": 20_000}).as_object().unwrap().clone()),
            )
            .await
        })
    };
    eventually("the call reached the server", async || started_slow(&events) == 1).await;
    std::fs::write(&gate, "").unwrap();
    Command::new("kill").args(["-9", first_pid.trim()]).status().unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), slow).await.expect("the call ends").unwrap().unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(code(&r), "unavailable", "{r:?}");
    assert!(text(&r).contains("\"py\""), "the error names the server: {}", text(&r));

    // Everything else keeps answering meanwhile.
    let roll = call(&client, "roll", json!({"expression": "1d20"})).await;
    assert_eq!(roll.is_error, Some(false));

    // While it is down, its tools are hidden; the host's own are not.
    eventually("py's tools hidden while it is down", async || {
        let listed = names(&client).await;
        !listed.iter().any(|n| ["add", "slow", "echo"].contains(&n.as_str()))
    })
    .await;
    let listed = names(&client).await;
    assert!(listed.contains(&"roll".to_string()), "{listed:?}");
    let pid = std::fs::read_to_string(dir.path().join("py.pid")).unwrap();
    assert_eq!(pid, first_pid, "the gate held the server down: no new process started");

    // The gate opens: the supervisor's pending restart goes through and the
    // tools come back.
    std::fs::remove_file(&gate).unwrap();
    eventually("py restarted", async || {
        std::fs::read_to_string(dir.path().join("py.pid")).is_ok_and(|p| !p.is_empty() && p != first_pid)
    })
    .await;
    eventually("py's tools listed again", async || {
        let listed = names(&client).await;
        listed.contains(&"add".to_string()) && listed.contains(&"slow".to_string())
    })
    .await;
    eventually("add callable again", async || {
        match client
            .call_tool(
                CallToolRequestParams::new("add").with_arguments(json!({"a": 2, "b": 3}).as_object().unwrap().clone()),
            )
            .await
        {
            Ok(r) => r.is_error == Some(false) && text(&r).contains('5'),
            Err(_) => false,
        }
    })
    .await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_past_its_deadline_times_out_and_the_server_is_told() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), py_config(dir.path(), "      timeout_ms: 1500\n")).unwrap();
    let (_host, url) = serve(dir.path());
    let (client, _) = connect(&url).await;
    // `slow` declares nothing: the server's timeout_ms is its deadline.
    let started = Instant::now();
    // Far longer than the deadline, so a bound ten times the deadline
    // still tells the two apart on a loaded machine.
    let r = call(&client, "slow", json!({"ms": 120_000})).await;
    let took = started.elapsed();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(code(&r), "timeout", "{r:?}");
    assert!(took < Duration::from_secs(15), "gave up at the deadline, not when the tool finished: {took:?}");
    let events = dir.path().join("events.log");
    eventually("notifications/cancelled reached the server", async || {
        std::fs::read_to_string(&events).is_ok_and(|e| e.contains("cancelled slow"))
    })
    .await;
    // The connection survives the timeout.
    assert_eq!(text(&call(&client, "add", json!({"a": 1, "b": 1})).await), "2");
    client.cancel().await.unwrap();
}

/// A client that cancels a call (`notifications/cancelled`) stops the
/// upstream's work too: the server hears of it at once, not when the call
/// would have ended, and the audit says `cancelled`.
#[tokio::test(flavor = "multi_thread")]
async fn a_clients_cancel_reaches_the_upstream_and_is_audited_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    // The longest deadline allowed (limits.timeout_ceiling_ms): a call that
    // only timed out would be told to the server after 30 s.
    let config = py_config(dir.path(), "      timeout_ms: 30000\n");
    std::fs::write(dir.path().join("toolhost.yaml"), format!("audit:\n  path: {}\n{config}", audit.display())).unwrap();
    let (_host, url) = serve(dir.path());
    let (client, _) = connect(&url).await;
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        CallToolRequestParams::new("slow").with_arguments(json!({"ms": 120_000}).as_object().unwrap().clone()),
    ));
    let started = Instant::now();
    let handle = client.peer().send_request_with_option(request, Default::default()).await.unwrap();
    let events = dir.path().join("events.log");
    eventually("the call reached the server", async || started_slow(&events) == 1).await;
    handle.cancel(Some("the player moved on".into())).await.unwrap();
    eventually("notifications/cancelled reached the server", async || {
        std::fs::read_to_string(&events).is_ok_and(|e| e.contains("cancelled slow"))
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(20), "stopped at the cancel, not at its 30 s deadline");
    eventually("the call is audited cancelled", async || {
        std::fs::read_to_string(&audit).is_ok_and(|a| {
            a.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).any(|r| {
                r["event"] == "call"
                    && r["tool"] == "slow"
                    && r["outcome"] == "cancelled"
                    && r["duration_ms"].as_u64() < Some(20_000)
            })
        })
    })
    .await;
    // The session and the server go on.
    assert_eq!(text(&call(&client, "add", json!({"a": 1, "b": 1})).await), "2");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn servers_added_and_removed_at_run_time_notify_connected_clients() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), "server:\n  rate_limit: { per_minute: 0 }\n").unwrap();
    let (_host, url) = serve(dir.path());
    let (client, changes) = connect(&url).await;
    assert!(!names(&client).await.contains(&"add".to_string()));

    let admin = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .current_dir(dir.path())
            .env("TOOLHOST_CACHE_DIR", CACHE.path())
            .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = admin(&["server", "add", "py", "--command", &py_server()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("added py: up"), "{}", stdout(&o));
    eventually("list_changed after add", async || changes.load(Ordering::SeqCst) >= 1).await;
    assert!(names(&client).await.contains(&"add".to_string()));
    assert_eq!(text(&call(&client, "add", json!({"a": 20, "b": 22})).await), "42");

    let o = admin(&["status", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    let py = v["servers"].as_array().unwrap().iter().find(|s| s["name"] == "py").expect("py listed");
    assert_eq!(py["state"], "up");

    let o = admin(&["server", "add", "py", "--command", &py_server()]);
    assert!(!o.status.success() && stderr(&o).contains("already configured"), "{}", stderr(&o));

    let before = changes.load(Ordering::SeqCst);
    let o = admin(&["server", "remove", "py"]);
    assert!(o.status.success(), "{}", stderr(&o));
    eventually("list_changed after remove", async || changes.load(Ordering::SeqCst) > before).await;
    assert!(!names(&client).await.contains(&"add".to_string()));
    client.cancel().await.unwrap();
}

/// py_server over HTTP with `args`; waits until it listens.
fn py_http(dir: &Path, args: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.arg(peers_dir().join("py_server.py"))
        .args(["--http", &port.to_string()])
        .args(args)
        .env("PY_PEER_EVENTS", dir.join("events.log"));
    (spawn_listening(cmd, port), port)
}

fn servers_json(dir: &Path) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(dir)
        .env("TOOLHOST_CACHE_DIR", CACHE.path())
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["servers", "--json"])
        .output()
        .unwrap();
    serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&o), stderr(&o)))
}

#[test]
fn streamable_http_servers_with_a_static_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let (_py, port) = py_http(dir.path(), &["--token", "s3cret-static-token"]);
    let config = |token: &str| {
        format!(
            "mcp:\n  servers:\n    - name: remote\n      transport: streamable-http\n      url: http://127.0.0.1:{port}/mcp\n      auth:\n        token: \"Bearer ${{REMOTE_TOKEN}}\"\n"
        )
        .replace("${REMOTE_TOKEN}", token)
    };
    std::fs::write(dir.path().join("toolhost.yaml"), config("s3cret-static-token")).unwrap();
    let v = servers_json(dir.path());
    assert_eq!(v[0]["state"], "up", "{v}");
    let o = crate::common::toolhost()
        .current_dir(dir.path())
        .args(["call", "add", r#"{"a": 2, "b": 40}"#])
        .output()
        .unwrap();
    assert_eq!(stdout(&o).trim(), "42", "{}", stderr(&o));

    std::fs::write(dir.path().join("toolhost.yaml"), config("wrong-token")).unwrap();
    let v = servers_json(dir.path());
    assert_eq!(v[0]["state"], "down", "{v}");
    assert!(
        v[0]["last_error"].as_str().unwrap().contains("401") || v[0]["last_error"].to_string().contains("uth"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oauth_client_credentials_are_fetched_and_refreshed() {
    let dir = tempfile::tempdir().unwrap();
    // Tokens live 2 s: the host must refresh them while it keeps calling.
    let (_py, port) = py_http(dir.path(), &["--oauth", "toolhost-e2e:e2e-client-secret", "--token-ttl", "2"]);
    let config = format!(
        "server:\n  rate_limit: {{ per_minute: 0 }}\nmcp:\n  servers:\n    - name: remote\n      transport: streamable-http\n      url: http://127.0.0.1:{port}/mcp\n      auth:\n        oauth:\n          client_id: toolhost-e2e\n          client_secret: \"${{E2E_SECRET}}\"\n          token_url: http://127.0.0.1:{port}/token\n          scopes: [tools:read, tools:execute]\n"
    );
    std::fs::write(dir.path().join("toolhost.yaml"), &config).unwrap();
    // The secret comes from the environment (`${VAR}` expansion).
    let mut host = crate::common::toolhost();
    host.current_dir(dir.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .env("E2E_SECRET", "e2e-client-secret")
        .args(["serve", "--http", "127.0.0.1:0"]);
    let (_host, url) = spawn_serving(host);
    let (client, _) = connect(&url).await;
    let started = Instant::now();
    let mut calls = 0;
    while started.elapsed() < Duration::from_millis(4500) {
        let r = call(&client, "add", json!({"a": calls, "b": 1})).await;
        assert_eq!(r.is_error, Some(false), "call {calls} at {:?}: {r:?}", started.elapsed());
        assert_eq!(text(&r), (calls + 1).to_string());
        calls += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let tokens = std::fs::read_to_string(dir.path().join("events.log")).unwrap().matches("token").count();
    assert!(tokens >= 3, "tokens were refreshed while calling: {tokens} issued over {calls} calls");
    client.cancel().await.unwrap();

    // A wrong secret: the server is down with the token endpoint's answer, nothing else breaks.
    std::fs::write(dir.path().join("toolhost.yaml"), config.replace("${E2E_SECRET}", "wrong-secret")).unwrap();
    let v = servers_json(dir.path());
    assert_eq!(v[0]["state"], "down", "{v}");
    assert!(v[0]["last_error"].as_str().unwrap().contains("invalid_client"), "{v}");
}

/// Issue #48, finding 10: through the HTTP front, an upstream's last
/// progress report came after the call's result in 2 to 4 calls of 12 with
/// the Python SDK, which then dropped it (rmcp hands a notification to its
/// handler on a task of its own, the response to its caller at once); and
/// reports closer than 25 ms apart were thinned with the last among them.
/// Now 50 calls of a tool that reports 3 steps at once and answers: the
/// SDK hears the third before the result, every time (the second thinned
/// out; 30 ms apart, under the 100 notifications a second a server may
/// send).
#[test]
fn an_upstreams_last_progress_reaches_the_python_sdk_before_the_result_every_time() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), py_config(dir.path(), "")).unwrap();
    let (_host, url) = serve(dir.path());
    let out = Command::new(python())
        .arg(peers_dir().join("py_client.py"))
        .args(["--call", "steps", "--args", r#"{"n": 3}"#, "--progress-runs", "50", "--http"])
        .arg(format!("{url}/mcp"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(stdout(&out).lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    let runs = printed["progress"].as_array().unwrap_or_else(|| panic!("{printed}"));
    assert_eq!(runs.len(), 50);
    let late: Vec<(usize, &Value)> =
        runs.iter().enumerate().filter(|(_, r)| r.as_array().unwrap().last() != Some(&json!(3.0))).collect();
    assert!(late.is_empty(), "calls whose last progress the SDK never heard before the result: {late:?}");
}
