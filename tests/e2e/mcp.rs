//! toolhost as an MCP server, through real transports: the rmcp client
//! spawning `toolhost serve --stdio`, and raw HTTP against `serve --http`.

use crate::common::CACHE;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

const CONFIG: &str = r#"
npcs:
  - name: Bartok the Barkeep
    budget_tier: fast
    tools: [roll, roll_table, query_entities]
    instructions: "You are Bartok's tool belt."
  - name: Greymantle the Sage
    budget_tier: standard
    tools: [roll, search_rules, get_rule]
"#;

fn config_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("toolhost.yaml"), CONFIG).unwrap();
    d
}

fn obj(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_serves_an_agent_its_tools_and_results() {
    let dir = config_dir();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.current_dir(dir.path())
        .env("TOOLHOST_CACHE_DIR", CACHE.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .args(["serve", "--stdio", "--agent", "Bartok the Barkeep"]);
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.expect("initialize over stdio");
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().map(|i| i.name.as_str()), Some("toolhost"));
    assert_eq!(info.instructions.as_deref(), Some("You are Bartok's tool belt."));

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["query_entities", "roll", "roll_table"], "the allow-list, at the FAST tier");

    let r = client
        .call_tool(CallToolRequestParams::new("roll").with_arguments(obj(json!({"expression": "2d6+3"}))))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false));
    let v = r.structured_content.unwrap();
    let rolls: i64 = v["rolls"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).sum();
    assert_eq!(v["total"].as_i64().unwrap(), rolls + 3);
    // What a caller needs, and no cost unless asked for.
    assert_eq!(r.meta.unwrap().0["toolhost"], json!({"cached": false}));
    let mut cost = CallToolRequestParams::new("roll").with_arguments(obj(json!({"expression": "2d6+3"})));
    cost.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(obj(json!({"toolhost/cost": true})))));
    let r = client.call_tool(cost).await.unwrap();
    let m = &r.meta.unwrap().0["toolhost"];
    assert_eq!((&m["tier"], &m["cached"]), (&json!("fast"), &json!(false)), "{m}");
    assert!(m["fuel_used"].as_u64().unwrap() > 0 && m["duration_ms"].as_f64().unwrap() > 0.0, "{m}");

    // Invalid input is a tool result the model can read, with a code.
    let r = client
        .call_tool(CallToolRequestParams::new("roll").with_arguments(obj(json!({"expression": "0d6"}))))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.meta.unwrap().0["toolhost"]["code"], "invalid_input");

    // A tool off the allow-list is a protocol error, exactly like a missing one.
    let hidden = client
        .call_tool(CallToolRequestParams::new("search_rules").with_arguments(obj(json!({"query": "grapple"}))))
        .await
        .unwrap_err()
        .to_string();
    let missing = client
        .call_tool(CallToolRequestParams::new("search_rulez").with_arguments(obj(json!({"query": "grapple"}))))
        .await
        .unwrap_err()
        .to_string();
    assert!(hidden.contains("unknown tool \"search_rules\""), "{hidden}");
    assert_eq!(missing.replace("search_rulez", "search_rules"), hidden);
    client.cancel().await.unwrap();
}

struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_http(dir: &std::path::Path) -> Server {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(dir)
        .env("TOOLHOST_CACHE_DIR", CACHE.path())
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut first).unwrap();
    let port = first.rsplit(':').next().unwrap().trim().parse().unwrap_or_else(|_| panic!("{first}"));
    Server(child, port)
}

/// One HTTP/1.1 POST; returns status line, headers and body.
fn post(port: u16, path: &str, host: &str, body: &Value) -> (String, String) {
    let body = body.to_string();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    // An SSE response stays open; read what arrives within a moment.
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 8192];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        resp.push_str(&String::from_utf8_lossy(&buf[..n]));
        if resp.contains("serverInfo") || resp.starts_with("HTTP/1.1 4") {
            break;
        }
    }
    let (head, rest) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    (head.to_string(), rest.to_string())
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}})
}

#[test]
fn http_serves_the_operator_and_each_agent_on_its_own_endpoint() {
    let dir = config_dir();
    let server = start_http(dir.path());
    let (head, body) = post(server.1, "/mcp", &format!("127.0.0.1:{}", server.1), &initialize());
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("mcp-session-id"), "{head}");
    assert!(body.contains(r#""name":"toolhost""#), "{body}");
    let (head, body) = post(server.1, "/mcp/bartok-the-barkeep", &format!("localhost:{}", server.1), &initialize());
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("Bartok's tool belt"), "{body}");
}

#[test]
fn http_refuses_a_foreign_host_header() {
    // DNS rebinding: a page on evil.example resolving to 127.0.0.1.
    let dir = config_dir();
    let server = start_http(dir.path());
    let (head, _) = post(server.1, "/mcp", "evil.example", &initialize());
    assert!(head.starts_with("HTTP/1.1 421"), "Misdirected Request, as the Python SDK answers: {head}");
}

#[test]
fn serving_beyond_loopback_is_refused_without_auth() {
    let o = crate::common::run(&["serve", "--http", "0.0.0.0:0"]);
    assert!(!o.status.success());
    assert!(crate::common::stderr(&o).contains("server.tokens"), "{}", crate::common::stderr(&o));
}

fn start_http_with(dir: &std::path::Path, config: &str) -> Server {
    std::fs::write(dir.join("toolhost.yaml"), config).unwrap();
    start_http(dir)
}

/// One raw HTTP/1.1 POST with extra headers; returns (head, body).
fn raw(port: u16, path: &str, headers: &[(&str, &str)], body: &str) -> (String, String) {
    raw_request(port, "POST", path, headers, body)
}

/// One raw HTTP/1.1 request with extra headers; returns (head, body).
fn raw_request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let _ = s.write_all(body.as_bytes());
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut resp = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        resp.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&resp);
        // Stop at the end of the event that answers (a long reply comes in several reads).
        if (text.contains("\"result\"") || text.contains("\"error\"")) && text.ends_with("\n\n") {
            break;
        }
    }
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let (head, rest) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    (head.to_string(), rest.to_string())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn http_refuses_foreign_origins_and_accepts_loopback_ones() {
    let dir = config_dir();
    let server = start_http(dir.path());
    let init = initialize().to_string();
    let (head, body) = raw(server.1, "/mcp", &[("Origin", "http://evil.example")], &init);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(body.contains("Origin"), "{body}");
    let (head, _) = raw(server.1, "/mcp", &[("Origin", "http://localhost:6274")], &init);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (head, _) = raw(server.1, "/mcp", &[], &init);
    assert!(head.starts_with("HTTP/1.1 200"), "no Origin (not a browser): {head}");
    // Parsed strictly: a loopback name as userinfo is evil.example's origin.
    for origin in ["http://localhost:1@evil.example", "http://localhost/path", "file://localhost"] {
        let (head, _) = raw(server.1, "/mcp", &[("Origin", origin)], &init);
        assert!(head.starts_with("HTTP/1.1 403"), "{origin}: {head}");
    }
    // A browser's cross-site POST is refused, with or without an Origin it
    // would otherwise pass; its same-origin one is served.
    let cross = [("Sec-Fetch-Site", "cross-site")];
    let (head, body) = raw(server.1, "/mcp", &cross, &init);
    assert!(head.starts_with("HTTP/1.1 403") && body.contains("cross-site"), "{head}{body}");
    let (head, _) =
        raw(server.1, "/mcp", &[("Sec-Fetch-Site", "cross-site"), ("Origin", "http://localhost:6274")], &init);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let (head, _) = raw(server.1, "/mcp", &[("Sec-Fetch-Site", "same-origin")], &init);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

#[test]
fn http_caps_request_bodies_with_413() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_http_with(dir.path(), "server:\n  max_body_bytes: 4096\n");
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(10_000)}});
    let (head, body) = raw(server.1, "/mcp", &[], &big.to_string());
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(body.contains("4096 byte limit"), "{body}");
    let (head, _) = raw(server.1, "/mcp", &[], &initialize().to_string());
    assert!(head.starts_with("HTTP/1.1 200"), "a normal request still passes: {head}");
}

const TOKENS: &str = r#"
npcs:
  - name: Bartok the Barkeep
    budget_tier: fast
    tools: [roll, roll_table]
  - name: Greymantle the Sage
    budget_tier: standard
    tools: [roll, search_rules, get_rule]
server:
  tokens:
    - token: bartok-secret-token-0001
      agent: Bartok the Barkeep
    - token: dungeon-master-token-0001
"#;

fn tools_list(port: u16, path: &str, token: &str) -> (String, Vec<String>) {
    let auth = format!("Bearer {token}");
    let (head, _) = raw(port, path, &[("Authorization", &auth)], &initialize().to_string());
    if !head.starts_with("HTTP/1.1 200") {
        return (head, Vec::new());
    }
    let session = header(&head, "mcp-session-id").unwrap().to_string();
    let headers = [("Authorization", auth.as_str()), ("Mcp-Session-Id", session.as_str())];
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    raw(port, path, &headers, &note);
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let (head, body) = raw(port, path, &headers, &list);
    let json_part = body.lines().find_map(|l| l.strip_prefix("data: ").filter(|d| d.starts_with('{'))).unwrap_or(&body);
    let v: Value = serde_json::from_str(json_part).unwrap_or_else(|e| panic!("{e}: {body}"));
    let mut names: Vec<String> =
        v["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    (head, names)
}

#[test]
fn bearer_tokens_decide_which_agent_a_client_is() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_http_with(dir.path(), TOKENS);
    let init = initialize().to_string();

    let (head, _) = raw(server.1, "/mcp", &[], &init);
    assert!(head.starts_with("HTTP/1.1 401"), "no token: {head}");
    assert!(header(&head, "www-authenticate").is_some_and(|v| v.starts_with("Bearer")), "{head}");
    let (head, _) = raw(server.1, "/mcp", &[("Authorization", "Bearer not-a-known-token-at-all")], &init);
    assert!(head.starts_with("HTTP/1.1 401"), "unknown token: {head}");

    // Bartok's token on /mcp: Bartok's view (allow-list at FAST).
    let (_, names) = tools_list(server.1, "/mcp", "bartok-secret-token-0001");
    assert_eq!(names, ["roll", "roll_table"]);
    // ... and never another agent's endpoint.
    let (head, _) = tools_list(server.1, "/mcp/greymantle-the-sage", "bartok-secret-token-0001");
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    // The operator's token reaches every endpoint.
    let (_, names) = tools_list(server.1, "/mcp/greymantle-the-sage", "dungeon-master-token-0001");
    assert_eq!(names, ["get_rule", "roll", "search_rules"]);
    let (_, names) = tools_list(server.1, "/mcp", "dungeon-master-token-0001");
    assert!(names.len() > 5 && names.contains(&"write_file".to_string()), "{names:?}");
}

#[test]
fn a_token_naming_an_unknown_agent_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "server:\n  tokens:\n    - token: some-long-token-value-1\n      agent: Nobody\n",
    )
    .unwrap();
    let o =
        crate::common::toolhost().current_dir(dir.path()).args(["serve", "--http", "127.0.0.1:0"]).output().unwrap();
    assert!(!o.status.success());
    let err = crate::common::stderr(&o);
    assert!(err.contains("server.tokens[0].agent") && err.contains("Nobody"), "{err}");
}

/// The JSON-RPC message in a response body (plain JSON or one SSE event).
fn message(body: &str) -> Value {
    let json_part = body.lines().find_map(|l| l.strip_prefix("data: ").filter(|d| d.starts_with('{'))).unwrap_or(body);
    serde_json::from_str(json_part.trim()).unwrap_or_else(|e| panic!("{e}: {body:?}"))
}

#[test]
fn http_answers_malformed_messages_as_the_spec_and_the_reference_sdks_do() {
    let dir = config_dir();
    let server = start_http(dir.path());
    let port = server.1;
    let (head, body) = raw(port, "/mcp", &[], "{not json");
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    let m = message(&body);
    assert_eq!((m["error"]["code"].as_i64(), m["id"].clone()), (Some(-32700), Value::Null), "{m}");
    let (head, body) = raw(port, "/mcp", &[], &json!([initialize()]).to_string());
    assert!(head.starts_with("HTTP/1.1 400"), "a batch: {head}");
    assert_eq!(message(&body)["error"]["code"], -32600);
    let (head, body) = raw(port, "/mcp", &[], r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#);
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert_eq!(message(&body)["error"]["code"], -32600);

    let (head, _) = raw(port, "/mcp", &[], &initialize().to_string());
    let session = header(&head, "mcp-session-id").unwrap().to_string();
    let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-06-18")];
    raw(port, "/mcp", &headers, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    for params in [json!({"name": "roll", "arguments": "1d20"}), json!({"arguments": {}}), json!({"name": 7})] {
        let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params});
        let (head, body) = raw(port, "/mcp", &headers, &call.to_string());
        let m = message(&body);
        assert_eq!(m["error"]["code"], -32602, "invalid params, not method not found: {params} {head} {m}");
        assert_eq!(m["id"], 9);
    }
    // The session still works, and ends with 200.
    let call = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "roll", "arguments": {"expression": "1d4"}}});
    let (_, body) = raw(port, "/mcp", &headers, &call.to_string());
    assert!(message(&body)["result"]["content"].is_array(), "{body}");
    let (head, _) = raw_request(port, "DELETE", "/mcp", &headers, "");
    assert!(head.starts_with("HTTP/1.1 200"), "DELETE: {head}");
}

mod stdio;
