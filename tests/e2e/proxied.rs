//! Upstream MCP servers proxied faithfully (issue #12), through the binary:
//! a server's `timeout_ms` and `tier` for tools that declare no latency;
//! tool definitions and results passed on unchanged (compared with what the
//! same server answers a client directly) and shaped for older protocol
//! versions; resources, templates, prompts and completions served from the
//! upstreams per agent, their list changes relayed, and an upstream's
//! hostile or huge offerings held off.

use crate::common::{stderr, stdout, toolhost};
use crate::live::{Proc, eventually, spawn_serving};
use crate::peers::{node22, npm, peers_dir, python};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, GetPromptRequestParams, Implementation,
    ProtocolVersion, ReadResourceRequestParams, ResourceContents, Role,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const NO_RATE_LIMIT: &str = "server:\n  rate_limit: { per_minute: 0 }\n";

/// server-everything over stdio, as a command line.
fn everything() -> String {
    format!("{} {} stdio", node22().display(), npm("server-everything/dist/index.js").display())
}

/// A config serving `servers` (name, command) over stdio, plus `extra`.
fn config(dir: &Path, servers: &[(&str, String)], extra: &str) {
    let mut yaml = format!("{NO_RATE_LIMIT}mcp:\n  servers:\n");
    for (name, command) in servers {
        yaml.push_str(&format!("    - name: {name}\n      transport: stdio\n      command: {command}\n"));
    }
    yaml.push_str(extra);
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
}

/// `toolhost serve --http` in `dir` with `args`, and its base URL.
fn serve(dir: &Path, args: &[&str]) -> (Proc, String) {
    let mut cmd = toolhost();
    cmd.current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(args);
    spawn_serving(cmd)
}

/// Runs `py_client.py` (`--mode mode`, then `args`) and returns its JSON.
fn py_client(mode: &str, args: &[&str]) -> Value {
    let o = Command::new(python())
        .arg(peers_dir().join("py_client.py"))
        .args(["--mode", mode])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "py_client {args:?}: {}\n{}", stdout(&o), stderr(&o));
    let line = stdout(&o).lines().last().unwrap_or_default().to_string();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}\n{}", stderr(&o)))
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `v` without `_meta` keys, at any depth (toolhost adds its own).
fn without_meta(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter().filter(|(k, _)| k.as_str() != "_meta").map(|(k, v)| (k.clone(), without_meta(v))).collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_meta).collect()),
        other => other.clone(),
    }
}

fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    toolhost().current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(args).output().unwrap()
}

/// The `budget` of each tool of `provider` in `toolhost tools --json`.
fn budgets(dir: &Path, provider: &str) -> Value {
    let o = run(dir, &["tools", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let tools: Vec<Value> = serde_json::from_str(&stdout(&o)).unwrap();
    tools
        .iter()
        .filter(|t| t["provider"] == provider)
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["budget"].clone()))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[test]
fn an_upstreams_undeclared_tool_gets_deeps_ceiling_unless_its_server_sets_a_timeout_or_tier() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let py = format!("{} {}", python().display(), peers_dir().join("py_server.py").display());
    let slow = ["call", "slow", r#"{"ms": 2500}"#];

    // `slow` declares nothing: its tier is budget.unmeasured_tier
    // (STANDARD), but until it is measured its deadline is DEEP's ceiling
    // (4000 ms), not STANDARD's 1500: most real upstream tools declare
    // nothing, and a slow one is not cut off for it.
    config(d, &[("py", py.clone())], "");
    let o = run(d, &slow);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "slept 2500 ms");
    let b = budgets(d, "py");
    assert_eq!((b["slow"]["timeout_ms"].as_f64(), b["slow"]["tier"].as_str()), (Some(4000.0), Some("standard")), "{b}");
    let o = run(d, &["call", "slow", r#"{"ms": 6000}"#]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains("slow timed out after 4000 ms"), "{}", stderr(&o));

    // The server's timeout_ms is the deadline of its undeclared tools; the tier stays.
    config(d, &[("py", format!("{py}\n      timeout_ms: 10000"))], "");
    let o = run(d, &slow);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "slept 2500 ms");
    let b = budgets(d, "py");
    assert_eq!(
        (b["slow"]["timeout_ms"].as_f64(), b["slow"]["tier"].as_str()),
        (Some(10_000.0), Some("standard")),
        "{b}"
    );
    assert_eq!(b["echo"]["timeout_ms"].as_f64(), Some(100.0), "echo's declared max (50 ms, to the floor): {b}");

    // The server's tier: DEEP, whose ceiling (4000 ms) is the deadline.
    config(d, &[("py", format!("{py}\n      tier: deep"))], "");
    let o = run(d, &slow);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "slept 2500 ms");
    let b = budgets(d, "py");
    assert_eq!(b["slow"]["tier"], "deep", "{b}");
    assert_eq!(b["slow"]["tier_source"], "assigned", "{b}");
    assert_eq!(b["slow"]["timeout_ms"].as_f64(), Some(4000.0), "{b}");
    assert_eq!(b["echo"]["tier"], "fast", "echo declares its p50: untouched: {b}");
}

#[test]
fn a_servers_timeout_and_tier_are_checked_with_errors_that_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (setting, error) in [
        ("timeout_ms: 0", "mcp.servers[0].timeout_ms: must be at least 1 (milliseconds) at line 5"),
        ("timeout_ms: 86400000", "mcp.servers[0].timeout_ms: 86400000 ms is more than an hour"),
        ("timeout_ms: 45000", "mcp.servers[0].timeout_ms: 45000 ms is above limits.timeout_ceiling_ms (30000 ms)"),
        ("tier: glacial", "unknown variant `glacial`, expected one of `fast`, `standard`, `deep`"),
    ] {
        config(d, &[("py", format!("true\n      {setting}"))], "");
        let o = run(d, &["tools"]);
        assert!(!o.status.success(), "{setting}: {}", stdout(&o));
        assert!(stderr(&o).contains(error), "{setting}: {}", stderr(&o));
    }
}

#[test]
fn upstream_tool_definitions_and_results_pass_through_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), &[("everything", everything())], "");
    let (_host, url) = serve(dir.path(), &[]);
    let calls = json!([
        ["get-structured-content", {"location": "Chicago"}],
        ["get-resource-links", {"count": 2}],
        ["get-annotated-message", {"messageType": "success", "includeImage": true}],
    ])
    .to_string();
    let mut direct_cmd = vec!["--tool-defs", "--calls", &calls, "--stdio"];
    let everything = everything();
    direct_cmd.extend(everything.split_whitespace());
    let direct = py_client("legacy", &direct_cmd);
    let endpoint = format!("{url}/mcp");
    for mode in ["legacy", "auto"] {
        let proxied = py_client(mode, &["--tool-defs", "--calls", &calls, "--http", &endpoint]);
        let ctx = format!("{mode}: {proxied}");
        for name in ["get-structured-content", "get-resource-links", "get-annotated-message", "echo"] {
            let def = |v: &Value| {
                let mut d =
                    without_meta(v["tool_defs"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap());
                // Task support (`execution`) is not passed on: toolhost runs no tasks.
                d.as_object_mut().unwrap().remove("execution");
                d
            };
            assert_eq!(def(&proxied), def(&direct), "{name}: title, outputSchema, annotations as sent: {ctx}");
        }
        let structured =
            &proxied["tool_defs"].as_array().unwrap().iter().find(|t| t["name"] == "get-structured-content").unwrap();
        assert_eq!(structured["outputSchema"]["properties"]["temperature"]["type"], "number", "{ctx}");
        assert_eq!(structured["annotations"]["readOnlyHint"], true, "{ctx}");
        for (i, (d, p)) in
            direct["results"].as_array().unwrap().iter().zip(proxied["results"].as_array().unwrap()).enumerate()
        {
            assert_eq!(p["content"], d["content"], "call {i}: blocks as sent: {ctx}");
            assert_eq!(p["structuredContent"], d["structuredContent"], "call {i}: {ctx}");
        }
        let r = &proxied["results"];
        assert_eq!(
            r[0]["structuredContent"],
            json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}),
            "{ctx}"
        );
        assert_eq!(r[1]["content"][1]["type"], "resource_link", "{ctx}");
        assert_eq!(r[1]["content"][1]["uri"], "demo://resource/dynamic/blob/1", "{ctx}");
        assert_eq!(r[2]["content"][0]["annotations"], json!({"audience": ["user"], "priority": 0.7}), "{ctx}");
        assert_eq!(r[2]["content"][1]["annotations"], json!({"audience": ["user"], "priority": 0.5}), "{ctx}");
    }
}

/// An rmcp client that offers protocol `version`, counts list changes
/// and keeps the progress reports it receives.
#[derive(Clone)]
struct Client {
    version: ProtocolVersion,
    resources_changed: Arc<AtomicUsize>,
    prompts_changed: Arc<AtomicUsize>,
    progress: Arc<std::sync::Mutex<Vec<rmcp::model::ProgressNotificationParam>>>,
    updated: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Client {
    fn new(version: ProtocolVersion) -> Client {
        Client {
            version,
            resources_changed: Arc::default(),
            prompts_changed: Arc::default(),
            progress: Arc::default(),
            updated: Arc::default(),
        }
    }

    async fn connect(self, url: &str) -> RunningService<RoleClient, Client> {
        self.serve(StreamableHttpClientTransport::from_uri(url.to_string())).await.expect("initialize")
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("e2e", "1"))
            .with_protocol_version(self.version.clone())
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.resources_changed.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.prompts_changed.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
    }
}

/// `resources/subscribe` is offered: a session subscribed to an upstream's
/// resource hears its `notifications/resources/updated` (server-everything
/// sends them once its updates are switched on), and a session that did
/// not subscribe hears nothing; a URI nobody offers is accepted quietly.
#[tokio::test(flavor = "multi_thread")]
#[allow(deprecated)] // resources/subscribe: MCP before 2026-07-28.
async fn a_subscribed_session_hears_its_upstreams_resource_updates_and_only_it() {
    use rmcp::model::{
        ClientRequest, SubscribeRequest, SubscribeRequestParams, UnsubscribeRequest, UnsubscribeRequestParams,
    };
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), &[("everything", everything())], "");
    let (_host, url) = serve(dir.path(), &[]);
    let listener = Client::new(ProtocolVersion::V_2025_11_25);
    let heard = listener.updated.clone();
    let listener = listener.connect(&format!("{url}/mcp")).await;
    let bystander = Client::new(ProtocolVersion::V_2025_11_25);
    let overheard = bystander.updated.clone();
    let bystander = bystander.connect(&format!("{url}/mcp")).await;
    let caps = listener.peer_info().unwrap().capabilities.resources.clone().unwrap();
    assert_eq!(caps.subscribe, Some(true), "{caps:?}");

    let doc = "demo://resource/static/document/features.md";
    let subscribe =
        |uri: &str| ClientRequest::SubscribeRequest(SubscribeRequest::new(SubscribeRequestParams::new(uri)));
    listener.send_request(subscribe(doc)).await.expect("subscribed");
    bystander.send_request(subscribe("nobody://offers-this")).await.expect("accepted, nothing will report on it");
    // Its updates on: at once, then every 5 s, for what it was asked to watch.
    call(&listener, "toggle-subscriber-updates", json!({})).await;
    eventually("the subscriber hears the update", async || heard.lock().unwrap().iter().any(|u| u == doc)).await;
    assert!(heard.lock().unwrap().iter().all(|u| u == doc), "{:?}", heard.lock().unwrap());
    assert!(overheard.lock().unwrap().is_empty(), "another session hears nothing: {:?}", overheard.lock().unwrap());
    let unsubscribe = ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(UnsubscribeRequestParams::new(doc)));
    listener.send_request(unsubscribe).await.expect("unsubscribed");
}

/// server-everything's long-running operation declares no latency: it runs
/// to the end (3 s, past STANDARD's 1500 ms ceiling: DEEP's is its
/// deadline until measured), and its progress reaches the client under
/// the client's own token (rmcp replaces the token on the way upstream).
#[tokio::test(flavor = "multi_thread")]
async fn an_upstreams_progress_reaches_the_client_and_its_undeclared_long_tool_completes() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), &[("everything", everything())], "");
    let (_host, url) = serve(dir.path(), &[]);
    let client = Client::new(ProtocolVersion::LATEST);
    let progress = client.progress.clone();
    let client = client.connect(&format!("{url}/mcp")).await;
    let listed = client.list_all_tools().await.unwrap();
    let long = listed.iter().find(|t| t.name == "trigger-long-running-operation").expect("listed");
    assert!(long.meta.as_ref().is_none_or(|m| m.0.get("max_duration_ms").is_none()), "declares no latency");
    let started = std::time::Instant::now();
    let r = call(&client, "trigger-long-running-operation", json!({"duration": 3, "steps": 3})).await;
    let took = started.elapsed();
    assert_ne!(r.is_error, Some(true), "completes, not cut at 1500 ms: {r:?}");
    assert!(took >= std::time::Duration::from_secs(3), "it ran its 3 s: {took:?}");
    let text = r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<String>();
    assert!(text.contains("completed"), "{text}");
    // Every report precedes the response; each step's, in order.
    let seen = progress.lock().unwrap().clone();
    let steps: Vec<f64> = seen.iter().map(|p| p.progress).collect();
    assert_eq!(steps, [1.0, 2.0, 3.0], "{seen:?}");
    assert!(seen.iter().all(|p| p.total == Some(3.0)), "{seen:?}");
    let tokens: std::collections::HashSet<String> = seen.iter().map(|p| format!("{:?}", p.progress_token)).collect();
    assert_eq!(tokens.len(), 1, "one token, the client's: {seen:?}");
}

async fn call(c: &RunningService<RoleClient, Client>, tool: &str, args: Value) -> CallToolResult {
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().unwrap().clone());
    c.call_tool(params).await.unwrap_or_else(|e| panic!("{tool}: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn results_are_shaped_for_the_protocol_version_the_client_negotiated() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), &[("everything", everything())], "");
    let (_host, url) = serve(dir.path(), &["--plugin", toolhost_test_artifacts::CONFORMANCE_PATH]);
    let endpoint = format!("{url}/mcp");
    let old = Client::new(ProtocolVersion::V_2024_11_05).connect(&endpoint).await;
    let new = Client::new(ProtocolVersion::V_2025_11_25).connect(&endpoint).await;

    let def = async |c: &RunningService<RoleClient, Client>| {
        c.list_all_tools().await.unwrap().into_iter().find(|t| t.name == "get-structured-content").unwrap()
    };
    let (o, n) = (def(&old).await, def(&new).await);
    assert!(n.output_schema.is_some() && n.annotations.is_some() && n.title.is_some(), "{n:?}");
    assert!(o.output_schema.is_none() && o.annotations.is_none() && o.title.is_none(), "2024-11-05 has none: {o:?}");

    // No structuredContent before 2025-06-18: its JSON stays as the text block.
    let args = json!({"location": "New York"});
    let (o, n) =
        (call(&old, "get-structured-content", args.clone()).await, call(&new, "get-structured-content", args).await);
    let weather = json!({"temperature": 33, "conditions": "Cloudy", "humidity": 82});
    assert_eq!(n.structured_content, Some(weather.clone()));
    assert_eq!(o.structured_content, None);
    let text: Value = serde_json::from_str(&o.content[0].as_text().unwrap().text).unwrap();
    assert_eq!(text, weather);

    // No resource_link before 2025-06-18: a text block naming it.
    let (o, n) = (
        call(&old, "get-resource-links", json!({"count": 1})).await,
        call(&new, "get-resource-links", json!({"count": 1})).await,
    );
    assert_eq!(n.content[1].as_resource_link().map(|l| l.uri.as_str()), Some("demo://resource/dynamic/blob/1"));
    assert!(o.content.iter().all(|b| b.as_resource_link().is_none()), "{o:?}");
    let link = &o.content[1].as_text().unwrap().text;
    assert!(link.starts_with("Resource link: Blob Resource 1 <demo://resource/dynamic/blob/1>"), "{link}");

    // No audio before 2025-03-26 (a wasm tool's audio, the same rule).
    let (o, n) = (call(&old, "test_audio_content", json!({})).await, call(&new, "test_audio_content", json!({})).await);
    assert_eq!(n.content[0].as_audio().map(|a| a.mime_type.as_str()), Some("audio/wav"));
    let said = &o.content[0].as_text().unwrap_or_else(|| panic!("{o:?}")).text;
    assert!(said.contains("audio/wav") && said.contains("no audio content"), "{said}");

    // Content annotations exist in every version.
    let o = call(&old, "get-annotated-message", json!({"messageType": "debug"})).await;
    let a = o.content[0].as_text().and_then(|t| t.annotations.clone()).unwrap_or_else(|| panic!("{o:?}"));
    assert_eq!((a.audience, a.priority), (Some(vec![Role::Assistant]), Some(0.3)), "{o:?}");
}

#[test]
fn upstream_resources_prompts_and_completions_are_served_per_agent() {
    let dir = tempfile::tempdir().unwrap();
    let py = format!("{} {}", python().display(), peers_dir().join("py_server.py").display());
    let npcs = "npcs:\n  - name: Bartok the Barkeep\n    budget_tier: fast\n    tools: [roll, echo]\n  - name: Mute\n    budget_tier: deep\n    tools: [roll, add]\n";
    config(dir.path(), &[("everything", everything()), ("py", py)], npcs);
    let (_host, url) = serve(dir.path(), &[]);
    let doc = "demo://resource/static/document/features.md";
    let asks = |endpoint: &str| -> Vec<String> {
        let complete_prompt = r#"{"ref": {"type": "ref/prompt", "name": "completable-prompt"}, "argument": {"name": "department", "value": "Eng"}}"#;
        let complete_template = r#"{"ref": {"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"}, "argument": {"name": "resourceId", "value": "3"}}"#;
        [
            "--resources",
            "--prompts",
            "--read",
            doc,
            "--read",
            "demo://resource/dynamic/text/7",
            "--read",
            "file:///etc/passwd",
            "--prompt",
            "args-prompt",
            "--prompt-args",
            r#"{"city": "Paris"}"#,
            "--complete",
            complete_prompt,
            "--complete",
            complete_template,
            "--http",
            endpoint,
        ]
        .map(String::from)
        .to_vec()
    };

    // What server-everything offers a client directly.
    let mut direct_cmd = vec!["--resources".to_string(), "--prompts".into(), "--stdio".into()];
    direct_cmd.extend(everything().split_whitespace().map(String::from));
    let direct = py_client("legacy", &as_strs(&direct_cmd));

    let operator = py_client("legacy", &as_strs(&asks(&format!("{url}/mcp"))));
    let bartok = py_client("auto", &as_strs(&asks(&format!("{url}/mcp/bartok-the-barkeep"))));
    for (who, v) in [("operator", &operator), ("bartok", &bartok)] {
        let ctx = format!("{who}: {v}");
        assert_eq!(v["resources"], direct["resources"], "resources as listed, URIs kept: {ctx}");
        assert_eq!(v["resource_templates"], direct["resource_templates"], "{ctx}");
        // No other server offers prompts: each keeps its own name.
        assert_eq!(v["prompts"], direct["prompts"], "prompts as listed, names kept: {ctx}");
        let features = std::fs::read_to_string(npm("server-everything/dist/docs/features.md")).unwrap();
        assert_eq!(v["reads"][doc]["contents"][0]["text"], features.as_str(), "{who}");
        let seven = v["reads"]["demo://resource/dynamic/text/7"]["contents"][0]["text"].as_str().unwrap_or_default();
        assert!(seven.starts_with("Resource 7: This is a plaintext resource"), "through the template: {ctx}");
        assert!(v["reads"]["file:///etc/passwd"]["error"]["message"].as_str().unwrap().contains("no server"), "{ctx}");
        assert_eq!(v["prompt"]["messages"][0]["content"]["text"], "What's weather in Paris?", "{ctx}");
        assert_eq!(v["completions"][0]["completion"]["values"], json!(["Engineering"]), "{ctx}");
        assert_eq!(v["completions"][1]["completion"]["values"], json!(["3"]), "{ctx}");
    }
    // Not found: -32002 before 2026-07-28, -32602 from then on.
    assert_eq!(operator["reads"]["file:///etc/passwd"]["error"]["code"], -32002, "{operator}");

    // Mute may use none of everything's tools: none of its resources or prompts either.
    let mute = py_client("legacy", &as_strs(&asks(&format!("{url}/mcp/mute"))));
    let ctx = format!("mute: {mute}");
    assert_eq!(mute["resources"], json!([]), "{ctx}");
    assert_eq!(mute["resource_templates"], json!([]), "{ctx}");
    let everythings: Vec<&Value> = direct["prompts"].as_array().unwrap().iter().map(|p| &p["name"]).collect();
    assert!(mute["prompts"].as_array().unwrap().iter().all(|p| !everythings.contains(&&p["name"])), "{ctx}");
    assert_eq!(mute["reads"][doc]["error"]["code"], -32002, "a listed URI it may not read is not found: {ctx}");
    assert_eq!(mute["prompt"]["error"]["message"], "unknown prompt \"args-prompt\"", "{ctx}");
    assert_eq!(mute["completions"][0]["error"]["code"], -32602, "{ctx}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstreams_resource_list_changes_reach_connected_clients() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), &[("everything", everything())], "");
    let (_host, url) = serve(dir.path(), &[]);
    let watcher = Client::new(ProtocolVersion::V_2025_11_25);
    let changed = watcher.resources_changed.clone();
    let client = watcher.connect(&format!("{url}/mcp")).await;
    let uri = "demo://resource/session/hello.gz";
    let listed = async || client.list_all_resources().await.unwrap().iter().any(|r| r.uri == uri);
    assert!(!listed().await);

    // The tool registers a session resource: server-everything announces
    // resources/list_changed to toolhost, which lists again and tells us.
    let link =
        call(&client, "gzip-file-as-resource", json!({"name": "hello.gz", "data": "data:text/plain;base64,aGVsbG8="}))
            .await;
    assert_eq!(link.content[0].as_resource_link().map(|l| l.uri.as_str()), Some(uri), "{link:?}");
    eventually("resources/list_changed relayed, the new resource listed", async || {
        changed.load(Ordering::SeqCst) > 0 && listed().await
    })
    .await;
    let read = client.read_resource(ReadResourceRequestParams::new(uri)).await.unwrap();
    match &read.contents[0] {
        ResourceContents::BlobResourceContents { mime_type, blob, .. } => {
            assert_eq!(mime_type.as_deref(), Some("application/gzip"));
            assert!(!blob.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

/// Two servers offering the same resource URI, template and prompt name:
/// the earlier one (config order) keeps them, the later one's are offered
/// as `<server>+<uri>` and `<server>_<prompt>`; each stays readable, and
/// the later server never takes over what the earlier one offers.
#[tokio::test(flavor = "multi_thread")]
async fn a_resource_or_prompt_two_servers_offer_stays_readable_from_each() {
    let dir = tempfile::tempdir().unwrap();
    let evil = |who: &str| {
        format!("/usr/bin/env EVIL_NAME={who} {} {}", python().display(), peers_dir().join("evil_server.py").display())
    };
    // The impostor is named to sort first: config order, not the name, decides.
    config(dir.path(), &[("evil", evil("evil")), ("aaa-impostor", evil("impostor"))], "");
    let (_host, url) = serve(dir.path(), &[]);
    let client = Client::new(ProtocolVersion::V_2025_11_25).connect(&format!("{url}/mcp")).await;
    let read = async |uri: &str| {
        let r =
            client.read_resource(ReadResourceRequestParams::new(uri)).await.unwrap_or_else(|e| panic!("{uri}: {e}"));
        match &r.contents[0] {
            ResourceContents::TextResourceContents { uri: u, text, .. } => (u.clone(), text.clone()),
            other => panic!("{other:?}"),
        }
    };
    let resources: Vec<String> =
        client.list_all_resources().await.unwrap().into_iter().map(|r| r.uri.clone()).collect();
    assert!(resources.contains(&"evil://fine".to_string()), "{resources:?}");
    assert!(resources.contains(&"aaa-impostor+evil://fine".to_string()), "{resources:?}");
    assert_eq!(read("evil://fine").await, ("evil://fine".into(), "fine from evil".into()));
    assert_eq!(
        read("aaa-impostor+evil://fine").await,
        ("aaa-impostor+evil://fine".into(), "fine from impostor".into()),
        "the later server's, under the documented form"
    );
    // A template's expansions too.
    let templates: Vec<String> =
        client.list_all_resource_templates().await.unwrap().into_iter().map(|t| t.uri_template).collect();
    assert_eq!(templates, ["evil://item/{id}", "aaa-impostor+evil://item/{id}"]);
    assert_eq!(read("evil://item/7").await.1, "fine from evil");
    assert_eq!(read("aaa-impostor+evil://item/7").await.1, "fine from impostor");
    // Prompts keep their names unless taken: the later one is renamed.
    let prompts: Vec<String> = client.list_all_prompts().await.unwrap().into_iter().map(|p| p.name).collect();
    assert_eq!(prompts, ["greet", "aaa-impostor_greet"]);
    for (name, from) in [("greet", "hello from evil"), ("aaa-impostor_greet", "hello from impostor")] {
        let got = client.get_prompt(GetPromptRequestParams::new(name)).await.unwrap();
        assert_eq!(got.messages[0].content.as_text().map(|t| t.text.as_str()), Some(from), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstreams_hostile_or_huge_resources_and_prompts_are_held_off() {
    let dir = tempfile::tempdir().unwrap();
    let evil = format!("{} {}", python().display(), peers_dir().join("evil_server.py").display());
    config(dir.path(), &[("evil", evil)], "");
    let (_host, url) = serve(dir.path(), &[]);
    let client = Client::new(ProtocolVersion::V_2025_11_25).connect(&format!("{url}/mcp")).await;

    let uris: Vec<String> = client.list_all_resources().await.unwrap().into_iter().map(|r| r.uri).collect();
    assert_eq!(uris, ["evil://fine", "evil://huge"], "a URI with control characters or 5000 bytes long is skipped");
    let read = |uri: &str| client.read_resource(ReadResourceRequestParams::new(uri));
    let fine = read("evil://fine").await.unwrap();
    assert!(
        matches!(&fine.contents[0], ResourceContents::TextResourceContents { text, .. } if text == "fine"),
        "{fine:?}"
    );
    let huge = read("evil://huge").await.unwrap_err().to_string();
    assert!(huge.contains("over the 1048576 byte output limit"), "held to the output cap: {huge}");
    assert!(huge.len() < 4096, "nothing of it is passed on");

    // A catch-all template (no scheme) is not offered, so it claims nothing.
    let templates: Vec<String> =
        client.list_all_resource_templates().await.unwrap().into_iter().map(|t| t.uri_template).collect();
    assert_eq!(templates, ["evil://item/{id}"], "{{+all}} is skipped");
    let other = read("zzz://secret").await.unwrap_err().to_string();
    assert!(other.contains("no server this session may use offers it"), "{other}");

    let prompts: Vec<String> = client.list_all_prompts().await.unwrap().into_iter().map(|p| p.name).collect();
    assert_eq!(prompts, ["greet"], "a prompt name with a newline is skipped");
    let greet = client.get_prompt(GetPromptRequestParams::new("greet")).await.unwrap();
    assert_eq!(greet.messages[0].content.as_text().map(|t| t.text.as_str()), Some("hello"));
}

/// `toolhost calibrate --samples 1 --json` in `dir`: tool -> (outcome, detail), the `ev` server's only.
fn calibrated(dir: &Path) -> std::collections::BTreeMap<String, (String, String)> {
    let o = run(dir, &["calibrate", "--samples", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["provider"] == "ev")
        .map(|t| {
            let detail = t["detail"].as_str().map_or_else(|| t["detail"].to_string(), str::to_string);
            (t["tool"].as_str().unwrap().to_string(), (t["outcome"].as_str().unwrap().to_string(), detail))
        })
        .collect()
}

#[test]
fn the_host_never_probes_an_upstream_tool_that_could_act_on_the_world() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    // A low ceiling: the long-running operation (read-only, closed world)
    // is cut rather than waited for.
    let base = "plugins:\n  builtins: false\nlimits:\n  timeout_ceiling_ms: 2000\n";
    // The default: no upstream tool is probed at all.
    config(dir, &[("ev", everything())], base);
    let tools = calibrated(dir);
    assert!(tools.len() > 5, "server-everything's tools: {tools:?}");
    for (tool, (outcome, detail)) in &tools {
        assert_eq!(outcome, "skipped", "{tool}: {detail}");
        assert!(detail.contains("budget.calibrate_upstreams"), "{tool}: {detail}");
    }
    // Switched on: only tools declaring readOnlyHint: true and
    // openWorldHint: false; never one that fetches from the internet, nor
    // one without the hints; a tool the operator names either way.
    config(
        dir,
        &[("ev", everything())],
        &format!("{base}budget:\n  calibrate_upstreams: true\n  calibrate_tools: [toggle-simulated-logging]\n"),
    );
    let tools = calibrated(dir);
    assert_eq!(tools["echo"].0, "probed", "{:?}", tools["echo"]);
    let named = &tools["toggle-simulated-logging"];
    assert_ne!(named.0, "skipped", "not read-only, but named by the operator: {named:?}");
    let (outcome, detail) = &tools["simulate-research-query"];
    assert_eq!(outcome, "skipped", "read-only false: {detail}");
    let (outcome, detail) = &tools["gzip-file-as-resource"];
    assert_eq!(outcome, "skipped");
    assert!(detail.contains("readOnlyHint: true and openWorldHint: false"), "{detail}");
    for (tool, (outcome, _)) in &tools {
        if outcome != "skipped" {
            assert!(
                // What server-everything 2026.8.31 declares readOnlyHint:
                // true and openWorldHint: false, and the one named.
                [
                    "echo",
                    "get-annotated-message",
                    "get-env",
                    "get-resource-links",
                    "get-resource-reference",
                    "get-roots-list",
                    "get-structured-content",
                    "get-sum",
                    "get-tiny-image",
                    "trigger-long-running-operation",
                    "toggle-simulated-logging",
                ]
                .contains(&tool.as_str()),
                "{tool} was {outcome}, but it does not declare both hints"
            );
        }
    }
}

/// "A URI no server the session may use offers is never sent to any
/// server", proven from the server's side: the evil server records every
/// request it receives (`EVIL_REQUESTS`), and no `resources/read` of a
/// refused URI is in its record, while the allowed read is.
#[tokio::test(flavor = "multi_thread")]
async fn a_uri_no_server_the_session_may_use_offers_never_reaches_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.jsonl");
    let evil = format!(
        "/usr/bin/env EVIL_NAME=evil EVIL_REQUESTS={} {} {}",
        requests.display(),
        python().display(),
        peers_dir().join("evil_server.py").display()
    );
    // Mute may use none of the evil server's tools, so none of its resources.
    let npcs = "npcs:\n  - name: Mute\n    budget_tier: deep\n    tools: [roll]\n";
    config(dir.path(), &[("evil", evil)], npcs);
    let (_host, url) = serve(dir.path(), &[]);
    let operator = Client::new(ProtocolVersion::V_2025_11_25).connect(&format!("{url}/mcp")).await;
    let mute = Client::new(ProtocolVersion::V_2025_11_25).connect(&format!("{url}/mcp/mute")).await;

    // Offered by no server: refused for every session.
    let refused = ["file:///etc/passwd", "zzz://secret"];
    for (who, client) in [("operator", &operator), ("mute", &mute)] {
        for uri in refused {
            let e = client.read_resource(ReadResourceRequestParams::new(uri)).await.unwrap_err().to_string();
            assert!(e.contains("no server this session may use offers it"), "{who} {uri}: {e}");
        }
    }
    // Offered by the evil server (a listed URI and a template's expansion),
    // which Mute may not use.
    let forbidden = ["evil://fine", "evil://item/42"];
    for uri in forbidden {
        let e = mute.read_resource(ReadResourceRequestParams::new(uri)).await.unwrap_err().to_string();
        assert!(e.contains("no server this session may use offers it"), "mute {uri}: {e}");
    }
    // An allowed read, last: the server answers its requests in the order
    // they arrive and records each before answering, so once this answer is
    // back, anything sent to it before is in the record.
    let fine = operator.read_resource(ReadResourceRequestParams::new("evil://item/7")).await.unwrap();
    assert!(
        matches!(&fine.contents[0], ResourceContents::TextResourceContents { text, .. } if text == "fine from evil"),
        "{fine:?}"
    );

    let record = std::fs::read_to_string(&requests).unwrap_or_else(|e| panic!("{}: {e}", requests.display()));
    let reads: Vec<String> = record
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|r| r["method"] == "resources/read")
        .map(|r| r["uri"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(record.lines().any(|l| l.contains("\"initialize\"")), "the record is the server's: {record}");
    assert_eq!(reads, ["evil://item/7"], "only the allowed read reached the server: {record}");
    for uri in refused.iter().chain(&forbidden) {
        assert!(!record.contains(uri), "{uri} reached the server: {record}");
    }
}
