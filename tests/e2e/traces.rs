//! Who did what, and through which hops (issue #55): OpenTelemetry spans
//! exported over OTLP/HTTP to a scripted collector
//! (`tests/peers/otlp_receiver.py`, which decodes with `opentelemetry-proto`
//! and checks each span against the OTLP spec), one trace from a client's
//! `traceparent` through toolhost to an upstream MCP server (which reports
//! its own span) and to the weather plugin's HTTP origin; the audit records
//! of those calls carrying the same trace id and found by `toolhost audit
//! --trace`; and nothing sent with telemetry off.

use crate::common::{stderr, stdout, toolhost};
use crate::http::https_origin;
use crate::live::{Watcher, eventually};
use crate::peers::{free_port, peers_dir, python, spawn_listening};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

const KEY: &str = "sk-traces-test-0123456789";
const TOKEN: &str = "lyra-token-0123456789abcdef";
/// The client's trace, and its span: the parent of toolhost's first span.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The scripted collector on a free port: spans to `dir/spans.jsonl`,
/// requests to `dir/otlp-requests.jsonl`.
fn receiver(dir: &Path) -> (crate::live::Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.arg(peers_dir().join("otlp_receiver.py"))
        .args(["--port", &port.to_string(), "--out"])
        .arg(dir.join("spans.jsonl"))
        .arg("--requests")
        .arg(dir.join("otlp-requests.jsonl"));
    (spawn_listening(cmd, port), port)
}

/// The official Python SDK's server over HTTP, reporting its spans to the
/// collector at `otlp`; each call's trace context (from `_meta`, from the
/// headers) noted in `dir/peer-events.log`.
fn upstream(dir: &Path, otlp: u16) -> (crate::live::Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.env("PY_PEER_EVENTS", dir.join("peer-events.log")).arg(peers_dir().join("py_server.py")).args([
        "--http",
        &port.to_string(),
        "--otlp",
        &format!("http://127.0.0.1:{otlp}"),
    ]);
    (spawn_listening(cmd, port), port)
}

/// lyra may call the upstream's `echo` and `weather_now`, which reaches the
/// origin over HTTPS (with the trace context when `propagate`);
/// `telemetry` is the config's section (or nothing).
fn config(dir: &Path, origin: &crate::http::Origin, upstream: u16, propagate: bool, telemetry: &str) {
    std::fs::copy(toolhost_test_artifacts::WEATHER_PATH, dir.join("weather.wasm")).unwrap();
    let api = format!("https://api.example.test:{}", origin.port);
    let yaml = format!(
        "trust:\n  allow_unsigned: true\nserver:\n  shutdown_grace_secs: 2\n  tokens:\n    - {{ token: {TOKEN}, agent: lyra }}\nnpcs:\n  - {{ name: lyra, budget_tier: deep, tools: [echo, weather_now] }}\nmcp:\n  servers:\n    - name: py\n      transport: streamable-http\n      url: http://127.0.0.1:{upstream}/mcp\nplugins:\n  builtins: false\n  files: [weather.wasm]\n  http_ca_files: [{ca:?}]\n  http_resolve:\n    \"api.example.test:{p}\": \"127.0.0.1:{p}\"\n  grants:\n    weather:\n      http: [{api:?}]\n  config:\n    weather:\n      base_url: {api:?}\n  trace_propagation:\n    weather: {propagate}\n{telemetry}",
        ca = origin.ca,
        p = origin.port,
    );
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
    let mut child = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["secret", "set", "weather", "api_key"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{KEY}\n").as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Serves `dir`, calls `echo` and `weather_now` as lyra with the client's
/// `traceparent` header, and stops the host with SIGTERM (which sends the
/// spans still queued).
async fn call_both(dir: &Path) {
    let mut cmd = toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(["serve", "--http", "127.0.0.1:0"]);
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let (mut host, url) = crate::live::spawn_serving_logged(cmd, log);
    let mut headers = std::collections::HashMap::new();
    headers.insert(
        http::HeaderName::from_static("traceparent"),
        http::HeaderValue::from_str(&format!("00-{TRACE}-{CLIENT_SPAN}-01")).unwrap(),
    );
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp/lyra"))
        .auth_header(TOKEN.to_string())
        .custom_headers(headers);
    let client = Watcher::default().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    eventually("the upstream's echo is listed", async || {
        client.list_all_tools().await.is_ok_and(|t| t.iter().any(|t| t.name == "echo"))
    })
    .await;
    let mut params =
        CallToolRequestParams::new("echo").with_arguments(json!({"text": "hi"}).as_object().unwrap().clone());
    // What the model behind the call was, as the client says it.
    let note = json!({"toolhost/model": "claude-test-1", "toolhost/prompt_hash": "sha256:5e1f"});
    params.meta = Some(rmcp::model::RequestMetaObject::from(note.as_object().unwrap().clone()));
    let echo = client.call_tool(params).await.unwrap();
    assert_ne!(echo.is_error, Some(true), "{echo:?}");
    let args = json!({"latitude": 52.52, "longitude": 13.41});
    let weather = client
        .call_tool(CallToolRequestParams::new("weather_now").with_arguments(args.as_object().unwrap().clone()))
        .await
        .unwrap();
    assert_ne!(weather.is_error, Some(true), "{weather:?}");
    let _ = client.cancel().await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(host.0.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = host.0.wait().unwrap();
    assert!(status.success(), "the host stopped cleanly on SIGTERM: {status}");
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The one span named `name` among `spans`.
fn span<'a>(spans: &'a [Value], name: &str, parent: &str) -> &'a Value {
    let found: Vec<&Value> = spans.iter().filter(|s| s["name"] == name && s["parent_span_id"] == parent).collect();
    assert_eq!(found.len(), 1, "one span {name:?} under {parent}: {found:#?}\nall: {spans:#?}");
    found[0]
}

fn id(s: &Value) -> &str {
    s["span_id"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_client_through_an_upstream_and_a_plugins_http_and_the_audit_names_it() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (_receiver, otlp) = receiver(dir);
    let (_upstream, up) = upstream(dir, otlp);
    let origin = https_origin(dir);
    let telemetry = format!(
        "telemetry:\n  otlp_endpoint: http://127.0.0.1:{otlp}\n  service_name: toolhost-test\n  sample_ratio: 1\n  headers:\n    x-collector-key: k-123\n"
    );
    config(dir, &origin, up, true, &telemetry);
    call_both(dir).await;

    let spans_file = dir.join("spans.jsonl");
    eventually("the upstream's span and toolhost's have arrived", async || {
        let spans = lines(&spans_file);
        spans.iter().any(|s| s["service"] == "py-peer") && spans.iter().any(|s| s["name"] == "GET")
    })
    .await;
    let all = lines(&spans_file);
    let violations: Vec<&Value> = all.iter().filter(|s| s.get("violation").is_some()).collect();
    assert!(violations.is_empty(), "every span keeps the OTLP spec: {violations:#?}");
    let spans: Vec<Value> = all.into_iter().filter(|s| s["trace_id"] == TRACE).collect();
    for s in spans.iter().filter(|s| s["service"] != "py-peer") {
        assert_eq!(s["service"], "toolhost-test", "{s}");
        assert_eq!(s["scope"], "toolhost", "{s}");
        assert_eq!(s["headers"]["x-collector-key"], "k-123", "the configured headers go with every export: {s}");
    }

    // The upstream call: request < call < (budget, run < upstream request) < the upstream's own span.
    let request = span(&spans, "tools/call echo", CLIENT_SPAN);
    assert_eq!(request["kind"], "SPAN_KIND_SERVER", "{request}");
    let a = &request["attributes"];
    assert_eq!((a["mcp.method.name"].as_str(), a["gen_ai.tool.name"].as_str()), (Some("tools/call"), Some("echo")));
    assert_eq!(a["toolhost.agent"], "lyra", "{request}");
    assert!(a["toolhost.token_id"].as_str().is_some_and(|t| t != "-" && !t.contains(TOKEN)), "{request}");
    assert!(a["mcp.session.id"].as_str().is_some_and(|s| s != "-"), "{request}");
    let call = span(&spans, "call echo", id(request));
    let budget = span(&spans, "budget", id(call));
    assert_eq!(budget["attributes"]["toolhost.budget.decision"], "allowed", "{budget}");
    assert_eq!(budget["attributes"]["toolhost.tier"], "deep", "{budget}");
    assert!(budget["attributes"]["toolhost.budget.why"].as_str().unwrap().starts_with("deadline "), "{budget}");
    let run = span(&spans, "run echo", id(call));
    assert_eq!(run["attributes"]["toolhost.plugin"], "py", "{run}");
    assert_eq!(run["attributes"]["toolhost.outcome"], "ok", "{run}");
    let out = span(&spans, "tools/call echo", id(run));
    assert_eq!(out["kind"], "SPAN_KIND_CLIENT", "{out}");
    assert_eq!(out["attributes"]["toolhost.server"], "py", "{out}");
    let theirs = span(&spans, "upstream echo", id(out));
    assert_eq!(theirs["service"], "py-peer", "the upstream joined the trace: {theirs}");
    // It got the context both ways: in `_meta` and as a header.
    let carried = format!("00-{TRACE}-{}-01", id(out));
    let events = std::fs::read_to_string(dir.join("peer-events.log")).unwrap();
    assert!(events.contains(&format!("trace {carried} {carried}")), "{events}");

    // The plugin call: ... < run < its HTTP request, whose traceparent the origin received.
    let request = span(&spans, "tools/call weather_now", CLIENT_SPAN);
    let call = span(&spans, "call weather_now", id(request));
    let run = span(&spans, "run weather_now", id(call));
    let ra = &run["attributes"];
    assert_eq!(ra["toolhost.plugin"], "weather", "{run}");
    assert_eq!(ra["toolhost.provider.kind"], "wasm", "{run}");
    assert_eq!(ra["toolhost.plugin.digest"].as_str().map(str::len), Some(64), "{run}");
    assert!(ra["toolhost.fuel_used"].as_i64().unwrap() > 0, "{run}");
    let get = span(&spans, "GET", id(run));
    assert_eq!(get["kind"], "SPAN_KIND_CLIENT", "{get}");
    assert_eq!(get["attributes"]["server.address"], "api.example.test", "{get}");
    assert_eq!(get["attributes"]["http.response.status_code"], 200, "{get}");
    let requests = std::fs::read_to_string(dir.join("requests.log")).unwrap();
    assert!(
        requests.contains(&format!("tp=00-{TRACE}-{}-01", id(get))),
        "the origin got the request's span as its parent: {requests}"
    );
    assert!(!std::fs::read_to_string(dir.join("serve.log")).unwrap().contains(KEY));

    // The audit: the same trace, and the call's own span.
    let audit = lines(&dir.join("state/audit.jsonl"));
    let record = audit
        .iter()
        .find(|r| r["event"] == "call" && r["tool"] == "weather_now")
        .unwrap_or_else(|| panic!("{audit:#?}"));
    assert_eq!(record["trace_id"], TRACE, "{record}");
    assert_eq!(record["span_id"], id(call), "{record}");
    assert_eq!(record["actor"], "agent lyra", "{record}");
    assert_eq!(record["capabilities_used"], json!(["http"]), "{record}");
    assert_eq!(record["schema_sha256"].as_str().map(str::len), Some(64), "{record}");
    let echo = audit.iter().find(|r| r["event"] == "call" && r["tool"] == "echo").unwrap();
    assert_eq!((echo["model"].as_str(), echo["prompt_hash"].as_str()), (Some("claude-test-1"), Some("sha256:5e1f")));
    assert_eq!(echo["trace_id"], TRACE, "{echo}");
    let found = audit_query(dir, &["--trace", &TRACE.to_uppercase(), "--json"]);
    let tools: Vec<&str> = found.iter().filter_map(|r| r["tool"].as_str()).collect();
    assert_eq!(tools, ["echo", "weather_now"], "{found:#?}");
    let found =
        audit_query(dir, &["--agent", "lyra", "--plugin", "weather", "--since", "10m", "--outcome", "ok", "--json"]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(audit_query(dir, &["--trace", "0af7651916cd43dd8448eb211c80319c", "--json"]).is_empty());
    assert!(audit_query(dir, &["--since", "2099-01-01T00:00:00Z", "--json"]).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_telemetry_off_nothing_is_sent_no_origin_learns_of_the_call_and_the_audit_keeps_the_clients_trace() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (_receiver, otlp) = receiver(dir);
    let (_upstream, up) = upstream(dir, otlp);
    let origin = https_origin(dir);
    config(dir, &origin, up, false, "");
    call_both(dir).await;

    // The host sent nothing (it has stopped: nothing is left to send).
    let sent = lines(&dir.join("otlp-requests.jsonl"));
    assert!(!sent.is_empty(), "the upstream's own exports arrived");
    let toolhost_spans: Vec<Value> =
        lines(&dir.join("spans.jsonl")).into_iter().filter(|s| s["service"] != "py-peer").collect();
    assert!(toolhost_spans.is_empty(), "no span from toolhost: {toolhost_spans:#?}");
    // The upstream reported its own span, under the client's context, passed on.
    assert!(sent.iter().all(|r| r["spans"] == 1), "only the upstream's exports: {sent:#?}");
    // The upstream got the client's context, passed on; the plugin's origin
    // got none (plugins.trace_propagation.weather: false).
    let events = std::fs::read_to_string(dir.join("peer-events.log")).unwrap();
    let client = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    assert!(events.contains(&format!("trace {client} {client}")), "{events}");
    let requests = std::fs::read_to_string(dir.join("requests.log")).unwrap();
    assert!(requests.contains("/v1/forecast") && requests.contains(" tp=None "), "{requests}");
    assert!(!requests.contains(TRACE), "{requests}");
    let audit = lines(&dir.join("state/audit.jsonl"));
    let record = audit.iter().find(|r| r["event"] == "call" && r["tool"] == "echo").unwrap();
    assert_eq!(record["trace_id"], TRACE, "{record}");
    assert_eq!(record["span_id"], CLIENT_SPAN, "the caller's span, none of toolhost's: {record}");
}

/// `toolhost audit ARGS` in `dir`, its JSON records.
fn audit_query(dir: &Path, args: &[&str]) -> Vec<Value> {
    let o = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .arg("audit")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
