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
    assert_eq!(r.meta.unwrap().0["toolhost"]["tier"], "fast");

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
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
}

#[test]
fn serving_beyond_loopback_is_refused_without_auth() {
    let o = crate::common::run(&["serve", "--http", "0.0.0.0:0"]);
    assert!(!o.status.success());
    assert!(crate::common::stderr(&o).contains("only loopback"), "{}", crate::common::stderr(&o));
}
