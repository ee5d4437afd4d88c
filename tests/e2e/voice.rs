//! The voice relay (`/voice/...` on `serve --http`) and the turn endpoint
//! (`POST /mcp/<agent>/turn`), through the binary, with the official SDKs
//! as clients (`examples/voice/`) and a scripted upstream
//! (`tests/peers/voice_upstream.py`) that checks every message the relay
//! sends against the documented shapes.

use crate::common::toolhost;
use crate::live::{Proc, admin, spawn_serving};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const SAGE_TOKEN: &str = "sage-token-0123456789abcdef";
const BARTOK_TOKEN: &str = "bartok-token-0123456789abcdef";
const OPERATOR_KEY: &str = "sk-operator-key-never-shown";

/// roll FAST, get_rule STANDARD, search_rules DEEP; Sage may not use
/// get_rule.
const CONFIG: &str = r#"
budget:
  pin: {roll: fast, get_rule: standard, search_rules: deep}
npcs:
  - name: Sage
    budget_tier: deep
    tools: [roll, search_rules]
  - name: Bartok
    budget_tier: deep
    tools: [roll, get_rule, search_rules]
server:
  tokens:
    - {token: sage-token-0123456789abcdef, agent: Sage}
    - {token: bartok-token-0123456789abcdef, agent: Bartok}
"#;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn python() -> PathBuf {
    repo("tests/peers/.venv/bin/python")
}

/// The scripted upstream, and its log.
struct Upstream {
    _proc: Proc,
    port: u16,
    log: PathBuf,
}

fn upstream(dir: &Path, format: &str, scenario: Value, hostile: Option<&str>) -> Upstream {
    let log = dir.join(format!("upstream-{format}.jsonl"));
    let scenario_file = dir.join(format!("scenario-{format}.json"));
    std::fs::write(&scenario_file, scenario.to_string()).unwrap();
    let mut cmd = Command::new(python());
    cmd.arg(repo("tests/peers/voice_upstream.py"))
        .args(["--format", format, "--log"])
        .arg(&log)
        .arg("--scenario")
        .arg(&scenario_file);
    if let Some(h) = hostile {
        cmd.args(["--hostile", h]);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("the scripted upstream");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let port = first.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{first}"));
    Upstream { _proc: Proc(child), port, log }
}

impl Upstream {
    fn entries(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// What the relay sent that the upstream found malformed.
    fn errors(&self) -> Vec<String> {
        self.entries().iter().filter_map(|e| e.get("error").map(|x| x.to_string())).collect()
    }

    /// The events the relay sent.
    fn received(&self) -> Vec<Value> {
        self.entries().into_iter().filter(|e| e["dir"] == "in").map(|e| e["event"].clone()).collect()
    }
}

/// `toolhost serve --http` in `dir` with `config` and the operator's keys.
fn serve(dir: &Path, config: &str) -> (Proc, String) {
    std::fs::write(dir.join("toolhost.yaml"), config).unwrap();
    let mut cmd = toolhost();
    cmd.current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env("OPENAI_API_KEY", OPERATOR_KEY)
        .env("GEMINI_API_KEY", OPERATOR_KEY)
        .args(["serve", "--http", "127.0.0.1:0"]);
    spawn_serving(cmd)
}

/// An example client (`examples/voice/*.py`) driven line by line.
struct Example {
    child: Child,
    stdin: Option<ChildStdin>,
    events: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Example {
    fn start(script: &str, args: &[&str], env: &[(&str, &Path)]) -> Example {
        let mut cmd = Command::new(python());
        cmd.arg(repo(script)).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("the example");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(_) => eprintln!("example: {line}"),
                }
            }
        });
        Example { stdin: child.stdin.take(), child, events, seen: Vec::new() }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The events up to the first for which `last` holds (within 20 s).
    fn until(&mut self, what: &str, last: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let e = self
                .events
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no {what} from the example; it saw: {got:#?}"));
            self.seen.push(e.clone());
            got.push(e.clone());
            if last(&e) {
                return got;
            }
        }
    }

    /// Closes stdin; the example must exit 0.
    fn finish(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        self.seen.extend(self.events.try_iter());
        assert!(status.success(), "the example failed: {status}");
        self.seen
    }
}

fn is_type(e: &Value, t: &str) -> bool {
    e["type"] == t
}

/// A `response.done` that is the utterance's last (no function call in it).
fn final_done(e: &Value) -> bool {
    is_type(e, "response.done")
        && e["output"].as_array().is_some_and(|o| o.iter().all(|i| i["type"] != "function_call"))
}

fn tools_of(e: &Value) -> Vec<String> {
    let mut t: Vec<String> = e["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    t.sort();
    t
}

/// The last `session.updated` among `events`: the tools the upstream holds.
fn last_declared(events: &[Value]) -> Vec<String> {
    tools_of(events.iter().rev().find(|e| is_type(e, "session.updated")).expect("a session.updated"))
}

fn outputs(received: &[Value]) -> Vec<(String, Value)> {
    received
        .iter()
        .filter(|e| e["type"] == "conversation.item.create" && e["item"]["type"] == "function_call_output")
        .map(|e| {
            let output = e["item"]["output"].as_str().unwrap();
            (e["item"]["call_id"].as_str().unwrap().to_string(), serde_json::from_str(output).unwrap_or(json!(output)))
        })
        .collect()
}

#[test]
fn the_openai_sdk_through_the_relay_gets_per_utterance_tiers_and_its_calls_run_in_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = json!({"calls": {
        "hello": {"name": "roll", "arguments": {"expression": "1d20"}},
        "think carefully about the rules": {"name": "search_rules", "arguments": {"query": "grapple"}},
        "what does the rule say": {"name": "get_rule", "arguments": {"id": "condition-grappled"}, "force": true},
    }});
    let up = upstream(dir.path(), "openai", scenario, None);
    let config = format!("{CONFIG}voice:\n  openai: {{url: \"ws://127.0.0.1:{}/v1\"}}\n", up.port);
    let (_host, url) = serve(dir.path(), &config);
    let ws = url.replacen("http://", "ws://", 1) + "/voice";
    let mut client = Example::start("examples/voice/openai_realtime.py", &["--url", &ws, "--token", SAGE_TOKEN], &[]);

    // Before any turn: the agent's ceiling (DEEP), its allow-list only.
    let first = client.until("the first session.updated", |e| is_type(e, "session.updated"));
    assert_eq!(last_declared(&first), ["roll", "search_rules"]);

    // A greeting is a FAST turn: only roll stays declared, and the call of
    // it runs in the host.
    client.say("hello");
    let hello = client.until("hello's answer", final_done);
    assert_eq!(last_declared(&hello), ["roll"], "{hello:#?}");
    assert!(hello.iter().any(|e| is_type(e, "response.function_call_arguments.done") && e["name"] == "roll"));
    let text = hello.iter().rev().find(|e| is_type(e, "response.output_text.done")).unwrap();
    assert!(text["text"].as_str().unwrap().contains("\"total\""), "{text}");

    // A DEEP cue declares the DEEP tools again; the upstream's call runs in
    // the host and its output reaches the upstream.
    client.say("think carefully about the rules");
    let deep = client.until("the rules answer", final_done);
    assert_eq!(last_declared(&deep), ["roll", "search_rules"], "{deep:#?}");
    let call_id = deep
        .iter()
        .find(|e| is_type(e, "response.function_call_arguments.done") && e["name"] == "search_rules")
        .map(|e| e["call_id"].as_str().unwrap().to_string())
        .expect("the search_rules call, seen by the client");
    let sent = outputs(&up.received());
    let (_, output) = sent.iter().find(|(id, _)| *id == call_id).expect("the call's output, upstream");
    assert!(output["results"].as_array().is_some_and(|r| !r.is_empty()), "{output}");

    // "hello" again: FAST.
    client.say("hello");
    assert_eq!(last_declared(&client.until("hello's answer", final_done)), ["roll"]);

    // The DM raises Sage to DEEP mid-session: the relay re-declares at once.
    let o = admin(dir.path(), &["override", "Sage", "deep", "--for", "10m"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    client.say("/wait session.updated");
    let over = client.until("the re-declaration", |e| is_type(e, "session.updated"));
    assert_eq!(last_declared(&over), ["roll", "search_rules"]);

    // A call of a tool the agent may not see is answered as an unknown one.
    client.say("what does the rule say");
    let refused = client.until("the refused call's answer", final_done);
    let call_id = refused
        .iter()
        .find(|e| is_type(e, "response.function_call_arguments.done"))
        .map(|e| e["call_id"].as_str().unwrap().to_string())
        .unwrap();
    let sent = outputs(&up.received());
    let (_, output) = sent.iter().find(|(id, _)| *id == call_id).unwrap();
    assert_eq!(output["error"]["code"], "not_found", "{output}");
    assert!(!output.to_string().contains("allow"), "a hidden tool must read as a missing one: {output}");

    let seen = client.finish();
    // The client never saw a tool outside the allow-list declared.
    for e in seen.iter().filter(|e| e.get("tools").is_some()) {
        assert!(!tools_of(e).contains(&"get_rule".to_string()), "{e}");
    }
    // The upstream heard the operator's key, never the client's token, on
    // the path the SDK asked for; and every message the relay sent was
    // well formed.
    let connect = up.entries().into_iter().find_map(|e| e.get("connect").cloned()).unwrap();
    assert_eq!(connect["headers"]["authorization"], format!("Bearer {OPERATOR_KEY}"), "{connect}");
    assert!(connect["path"].as_str().unwrap().ends_with("/v1/realtime"), "{connect}");
    assert_eq!(connect["query"]["model"], "gpt-realtime", "{connect}");
    assert!(!std::fs::read_to_string(&up.log).unwrap().contains(SAGE_TOKEN));
    assert_eq!(up.errors(), Vec::<String>::new());
}

/// The `setup` messages the relay sent upstream, in order: each one's
/// function declarations by name, and its resumption handle.
fn setups(up: &Upstream) -> Vec<(Vec<Value>, Option<String>)> {
    up.received()
        .iter()
        .filter_map(|e| e.get("setup"))
        .map(|s| {
            let functions = s["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|t| t["functionDeclarations"].as_array().cloned().unwrap_or_default())
                .collect();
            (functions, s["sessionResumption"]["handle"].as_str().map(str::to_string))
        })
        .collect()
}

fn names_of(functions: &[Value]) -> Vec<String> {
    let mut n: Vec<String> = functions.iter().map(|f| f["name"].as_str().unwrap().to_string()).collect();
    n.sort();
    n
}

#[test]
fn the_gemini_sdk_over_tls_gets_non_blocking_slow_tools_scheduled_results_and_resumed_declarations() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = crate::http::certificates_for(dir.path(), "DNS:localhost,IP:127.0.0.1");
    let scenario = json!({"calls": {
        "think carefully about the rules": {"name": "search_rules", "arguments": {"query": "grapple"}},
        "hello": {"name": "roll", "arguments": {"expression": "1d20"}},
    }});
    let up = upstream(dir.path(), "gemini", scenario, None);
    let config = format!(
        "{CONFIG}voice:\n  gemini: {{url: \"ws://127.0.0.1:{}\"}}\n  tls: {{cert: {}, key: {}}}\n",
        up.port,
        cert.display(),
        key.display()
    );
    let (_host, url) = serve(dir.path(), &config);
    let https = url.replacen("http://", "https://", 1) + "/voice";
    let mut client = Example::start(
        "examples/voice/gemini_live.py",
        &["--url", &https, "--token", SAGE_TOKEN, "--modality", "TEXT"],
        &[("SSL_CERT_FILE", &ca)],
    );
    client.until("setupComplete", |e| e["type"] == "setupComplete");

    // The first setup: the agent's tools at its ceiling, the DEEP one
    // NON_BLOCKING, roll (FAST) blocking; never a tool off the allow-list.
    let first = setups(&up);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(names_of(&first[0].0), ["roll", "search_rules"]);
    let behavior = |fs: &[Value], name: &str| {
        fs.iter().find(|f| f["name"] == name).and_then(|f| f["behavior"].as_str().map(str::to_string))
    };
    assert_eq!(behavior(&first[0].0, "search_rules").as_deref(), Some("NON_BLOCKING"));
    assert_eq!(behavior(&first[0].0, "roll"), None);

    // A DEEP turn: the slow tool runs in the host; its result is sent
    // WHEN_IDLE (the model keeps talking meanwhile).
    client.say("think carefully about the rules");
    let deep = client.until("the rules answer", |e| e["turn_complete"] == true);
    assert!(deep.iter().any(|e| e["function_calls"][0]["name"] == "search_rules"), "{deep:#?}");
    assert!(deep.iter().any(|e| e["text"].as_str().is_some_and(|t| t.contains("results"))), "{deep:#?}");

    // A FAST turn: the relay resumes the session upstream with a setup
    // declaring roll only, unseen by the client, and roll's call runs.
    client.say("hello");
    let fast = client.until("hello's answer", |e| e["turn_complete"] == true);
    assert!(fast.iter().any(|e| e["text"].as_str().is_some_and(|t| t.contains("total"))), "{fast:#?}");
    assert!(fast.iter().all(|e| e["type"] != "setupComplete"), "the client saw the resumption: {fast:#?}");
    let all = setups(&up);
    let resumed = all.last().unwrap();
    assert_eq!(names_of(&resumed.0), ["roll"], "{all:?}");
    assert!(resumed.1.is_some(), "the re-declaration resumes the session: {all:?}");

    client.finish();
    let responses: Vec<Value> = up.entries().iter().filter_map(|e| e.get("tool_response").cloned()).collect();
    let of = |name: &str| responses.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{responses:?}"));
    assert_eq!(of("search_rules")["scheduling"], "WHEN_IDLE", "{responses:?}");
    assert!(of("roll")["scheduling"].is_null(), "a blocking function's response has no scheduling: {responses:?}");
    let connect = up.entries().into_iter().find_map(|e| e.get("connect").cloned()).unwrap();
    assert_eq!(connect["headers"]["x-goog-api-key"], OPERATOR_KEY, "{connect}");
    assert!(
        connect["path"]
            .as_str()
            .unwrap()
            .ends_with("/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"),
        "{connect}"
    );
    assert_eq!(up.errors(), Vec::<String>::new());
}

#[test]
fn a_stock_mcp_client_pipeline_posting_turns_sees_list_changed_and_the_turns_tier() {
    let dir = tempfile::tempdir().unwrap();
    let (_host, url) = serve(dir.path(), CONFIG);
    let mut pipeline = Example::start(
        "examples/voice/mcp_pipeline.py",
        &["--url", &url, "--agent", "sage", "--token", SAGE_TOKEN],
        &[],
    );
    let first = pipeline.until("the first listing", |e| is_type(e, "tools"));
    assert_eq!(first.last().unwrap()["names"], json!(["roll", "search_rules"]));

    pipeline.say("hello");
    let hello = pipeline.until("the FAST listing", |e| is_type(e, "tools"));
    let turn = hello.iter().find(|e| is_type(e, "turn")).unwrap();
    assert_eq!(turn["tier"], "fast", "{turn}");
    assert_eq!(turn["sessions"], 1, "{turn}");
    assert!(hello.iter().any(|e| is_type(e, "list_changed")), "{hello:#?}");
    assert_eq!(hello.last().unwrap()["names"], json!(["roll"]));

    pipeline.say("think carefully about the rules");
    let deep = pipeline.until("the DEEP listing", |e| is_type(e, "tools"));
    assert_eq!(deep.iter().find(|e| is_type(e, "turn")).unwrap()["tier"], "deep");
    assert!(deep.iter().any(|e| is_type(e, "list_changed")), "{deep:#?}");
    assert_eq!(deep.last().unwrap()["names"], json!(["roll", "search_rules"]));

    // A turn for another agent's session is refused; so is another
    // agent's endpoint, and a body with a key the endpoint does not know.
    let bartok = format!("{url}/mcp/bartok");
    let bartok_auth = format!("Bearer {BARTOK_TOKEN}");
    let session = crate::limits::open_session(&bartok, &[("Authorization", &bartok_auth)]);
    let sage_auth = format!("Bearer {SAGE_TOKEN}");
    let utterance = json!({"utterance": "hello"});
    let a = crate::limits::post(
        &format!("{url}/mcp/sage/turn"),
        &[("Authorization", &sage_auth), ("Mcp-Session-Id", &session)],
        &utterance,
    );
    assert_eq!(a.status, 403, "{}{}", a.head, a.body);
    let a = crate::limits::post(&format!("{bartok}/turn"), &[("Authorization", &sage_auth)], &utterance);
    assert_eq!(a.status, 403, "{}{}", a.head, a.body);
    let a = crate::limits::post(
        &format!("{url}/mcp/sage/turn"),
        &[("Authorization", &sage_auth)],
        &json!({"utterance": "hi", "loudness": 3}),
    );
    assert_eq!(a.status, 400, "{}{}", a.head, a.body);
    assert!(a.body.contains("loudness"), "{}", a.body);

    // Without a session id: every live session of the agent takes the
    // turn, and the tools come in the shape asked for.
    let a = crate::limits::post(
        &format!("{url}/mcp/sage/turn?format=openai"),
        &[("Authorization", &sage_auth)],
        &json!({"utterance": "hello"}),
    );
    assert_eq!(a.status, 200, "{}{}", a.head, a.body);
    let v: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(v["tier"], "fast", "{v}");
    assert!(v["sessions"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["tools"], json!([v["tools"][0].clone()]), "{v}");
    assert_eq!(v["tools"][0]["type"], "function", "{v}");
    assert_eq!(v["tools"][0]["name"], "roll", "{v}");
    let a = crate::limits::post(
        &format!("{url}/mcp/sage/turn?format=gemini"),
        &[("Authorization", &sage_auth)],
        &json!({"utterance": "think carefully about the rules"}),
    );
    let v: Value = serde_json::from_str(&a.body).unwrap();
    let functions = v["tools"][0]["functionDeclarations"].as_array().unwrap();
    assert_eq!(names_of(functions), ["roll", "search_rules"], "{v}");
    pipeline.finish();
}

mod hostile;
