//! What tracing and the audit gate cost a call (issue #55), as a client
//! meets it: `tools/call` round trips over stdio, one session, sequential
//! calls, against `toolhost serve --stdio` started five ways side by side:
//!
//! - `roll` with telemetry off (the baseline);
//! - `roll` with telemetry on, `sample_ratio: 0` (spans made, none recorded);
//! - `roll` with telemetry on, `sample_ratio: 1` (every span exported over
//!   OTLP/HTTP to `tests/peers/otlp_receiver.py`, which decodes each export
//!   on the same machine, as a local collector would);
//! - `write_file` (fileio, granted a directory) with `audit.fail_closed`
//!   off, and on (each call's start record written and flushed to disk
//!   before the plugin runs).
//!
//! Run: `scripts/install-peers && cargo build --release && cargo bench -p
//! toolhost-bench --bench telemetry`. `TELEMETRY_BENCH_CALLS` (per variant,
//! default 3000) and `TELEMETRY_BENCH_ROUNDS` (default 5: the variants take
//! turns, so load from elsewhere hits all alike). Prints a Markdown report;
//! BENCHMARKS.md holds the last one.

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolhost_bench::{Proc, env_usize, loadavg, machine};

type Client = RunningService<RoleClient, ()>;

fn fail(why: String) -> ! {
    eprintln!("telemetry bench: {why}");
    std::process::exit(1)
}

struct Variant {
    label: &'static str,
    tool: &'static str,
    config: String,
    client: Option<Client>,
    times: Vec<Duration>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    let calls = env_usize("TELEMETRY_BENCH_CALLS", 3000);
    let rounds = env_usize("TELEMETRY_BENCH_ROUNDS", 5).max(1);
    let toolhost =
        std::env::var_os("TOOLHOST_BIN").map(PathBuf::from).unwrap_or_else(|| repo().join("target/release/toolhost"));
    let python = repo().join("tests/peers/.venv/bin/python");
    for p in [&toolhost, &python] {
        if !p.is_file() {
            fail(format!("{} is missing: run scripts/install-peers and cargo build --release", p.display()));
        }
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail(format!("temp dir: {e}")));
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
    let _receiver = Proc(
        Command::new(&python)
            .arg(repo().join("tests/peers/otlp_receiver.py"))
            .args(["--port", &port.to_string(), "--out", "/dev/null"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| fail(format!("otlp_receiver.py: {e}"))),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_err() {
        if Instant::now() > deadline {
            fail("the OTLP receiver did not listen".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let base = "server:\n  rate_limit: { per_minute: 0 }\nplugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./data\n";
    let on = |ratio: &str| format!("telemetry:\n  otlp_endpoint: http://127.0.0.1:{port}\n  sample_ratio: {ratio}\n");
    let mut variants = vec![
        Variant { label: "`roll`, telemetry off", tool: "roll", config: String::new(), client: None, times: vec![] },
        Variant {
            label: "`roll`, telemetry on, sampling 0",
            tool: "roll",
            config: on("0"),
            client: None,
            times: vec![],
        },
        Variant {
            label: "`roll`, telemetry on, sampling 1",
            tool: "roll",
            config: on("1"),
            client: None,
            times: vec![],
        },
        Variant {
            label: "`write_file`, audit gate off",
            tool: "write_file",
            config: String::new(),
            client: None,
            times: vec![],
        },
        Variant {
            label: "`write_file`, `audit.fail_closed: true`",
            tool: "write_file",
            config: "audit:\n  fail_closed: true\n".into(),
            client: None,
            times: vec![],
        },
    ];
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let started = Instant::now();
    let load_start = loadavg();
    rt.block_on(async {
        for (i, v) in variants.iter_mut().enumerate() {
            let here = dir.path().join(format!("v{i}"));
            std::fs::create_dir_all(here.join("data")).unwrap();
            std::fs::write(here.join("toolhost.yaml"), format!("{base}{}", v.config)).unwrap();
            let mut cmd = tokio::process::Command::new(&toolhost);
            cmd.current_dir(&here)
                .env("TOOLHOST_CACHE_DIR", dir.path().join("cache"))
                .env("TOOLHOST_STATE_DIR", here.join("state"))
                .args(["serve", "--stdio"])
                .stderr(std::fs::File::create(here.join("stderr.log")).unwrap());
            let transport = TokioChildProcess::new(cmd).unwrap_or_else(|e| fail(format!("spawn: {e}")));
            v.client =
                Some(().serve(transport).await.unwrap_or_else(|e| fail(format!("{}: initialize: {e}", v.label))));
        }
        let params = |tool: &str| {
            let args = match tool {
                "roll" => json!({"expression": "2d6+3"}),
                _ => json!({"path": "note.md", "content": "The party met Bartok at the Prancing Pony."}),
            };
            CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().cloned().unwrap())
        };
        // Warm-up: every variant's first calls (compiled code, caches).
        for v in &variants {
            for _ in 0..200 {
                let r = v.client.as_ref().unwrap().call_tool(params(v.tool)).await;
                if !r.as_ref().is_ok_and(|r| r.is_error != Some(true)) {
                    fail(format!("{}: {r:?}", v.label));
                }
            }
        }
        for _ in 0..rounds {
            for v in &mut variants {
                let client = v.client.as_ref().unwrap();
                for _ in 0..calls / rounds {
                    let t = Instant::now();
                    let r = client.call_tool(params(v.tool)).await;
                    v.times.push(t.elapsed());
                    if r.is_err() {
                        fail(format!("{}: {r:?}", v.label));
                    }
                }
            }
        }
        for v in &mut variants {
            if let Some(c) = v.client.take() {
                let _ = c.cancel().await;
            }
        }
    });
    let p50 = |v: &Variant| {
        let mut t = v.times.clone();
        t.sort();
        (percentile(&t, 0.5), percentile(&t, 0.9), percentile(&t, 0.99))
    };
    println!(
        "## Tracing and the audit gate: `tools/call` over stdio ({}; load average {load_start} at start, {} at end; {:.0} s)\n",
        machine(),
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "One session each, sequential calls, {calls} per row after 200 warm-up calls, in {rounds} rounds taking turns. Ratios against the row's baseline (telemetry off; gate off), same run.\n"
    );
    println!("| variant | p50 µs | p90 µs | p99 µs | p50 ratio |\n|---|---|---|---|---|");
    let (roll_base, write_base) = (p50(&variants[0]).0, p50(&variants[3]).0);
    for (i, v) in variants.iter().enumerate() {
        let (a, b, c) = p50(v);
        let base = if i < 3 { roll_base } else { write_base };
        println!("| {} | {a:.0} | {b:.0} | {c:.0} | {:.2}x |", v.label, a / base);
    }
}
