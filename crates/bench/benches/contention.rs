//! Contention benchmark: does `Host::call` scale with callers?
//!
//! Runs `roll` through the full pipeline (registry snapshot, agent and
//! plugin slots, schema validation, budget deadline, a fresh instance, the
//! budget's live stats, the `/metrics` counters, an audit record appended to
//! a real file) from 1, 2, N and 2N threads at once, N being this machine's
//! available parallelism, and reports calls/s per row. Then it runs each
//! shared point of the call path alone under the same thread counts, so a
//! point that stops scaling shows up by itself: the `/metrics` counters,
//! `Budget::record`, the audit writer, the registry snapshot.
//!
//! Run: `cargo bench -p toolhost-bench --bench contention` (add `-- --quick`
//! for a short run). Prints a Markdown report; BENCHMARKS.md holds the last
//! one. Each row is the median of three timed runs.

use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use toolhost::Host;
use toolhost::audit::{AuditLog, Record};
use toolhost::budget::metrics::Outcome;
use toolhost::budget::{Budget, BudgetConfig};
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::CallContext;

/// One timed run: operations per second, and where the callers' time went,
/// per operation: on a CPU, runnable but waiting for one (other threads or
/// processes had the cores), and neither (blocked: a lock, a condition
/// variable, I/O).
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    rate: f64,
    cpu: Duration,
    runnable: Duration,
    blocked: Duration,
}

/// This thread's time on a CPU and time runnable but waiting for one, from
/// the scheduler's statistics (zero where `/proc` has none).
fn schedstat() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut it = s.split_whitespace().map(|n| n.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Runs `f` on `threads` threads for `time`.
fn run(threads: usize, time: Duration, f: &(dyn Fn() + Sync)) -> Run {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let (cpu, runnable, busy) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let (c0, r0) = schedstat();
                let t0 = Instant::now();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    f();
                    n += 1;
                }
                let (c1, r1) = schedstat();
                total.fetch_add(n, Ordering::Relaxed);
                cpu.fetch_add(c1 - c0, Ordering::Relaxed);
                runnable.fetch_add(r1 - r0, Ordering::Relaxed);
                busy.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            });
        }
        std::thread::sleep(time);
        stop.store(true, Ordering::Relaxed);
    });
    let n = total.load(Ordering::Relaxed).max(1);
    let (cpu, runnable, busy) =
        (cpu.load(Ordering::Relaxed), runnable.load(Ordering::Relaxed), busy.load(Ordering::Relaxed));
    Run {
        rate: n as f64 / start.elapsed().as_secs_f64(),
        cpu: Duration::from_nanos(cpu / n),
        runnable: Duration::from_nanos(runnable / n),
        blocked: Duration::from_nanos(busy.saturating_sub(cpu + runnable) / n),
    }
}

/// The run with the median rate of three.
fn median_run(threads: usize, time: Duration, f: &(dyn Fn() + Sync)) -> Run {
    let mut r: Vec<Run> = (0..3).map(|_| run(threads, time, f)).collect();
    r.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    r[1]
}

fn us(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e6)
}

/// The machine, with the 1-minute load average at start.
fn machine() -> String {
    let load = std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "?".into(), |l| l.split_whitespace().next().unwrap_or("?").to_string());
    format!("{}, 1-minute load average {load} at start", toolhost_bench::machine())
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let time = if quick { Duration::from_millis(300) } else { Duration::from_secs(1) };
    let n = toolhost_bench::cores();
    let mut callers = vec![1, 2, n, 2 * n];
    callers.sort_unstable();
    callers.dedup();

    let cache = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    // Limits raised so that no row is refused (they are measured for what
    // they cost, not for what they refuse); the result cache off, so every
    // call runs the tool; the audit trail on a real file, as `serve` runs.
    let limits = Limits { agent_concurrency: 1024, plugin_concurrency: 1024, ..Limits::default() };
    let runtime = Runtime::new(limits, Some(cache.path())).unwrap();
    let cfg = BudgetConfig { result_cache_entries: 0, ..BudgetConfig::default() };
    let audit = AuditLog::open(&state.path().join("audit.jsonl"), false).unwrap();
    let host =
        Host::from_pipeline(toolhost::Pipeline::with_budget(runtime, Budget::new(cfg, Vec::new())).with_audit(audit));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    let args = json!({"expression": "2d6+3"});
    let ctx = CallContext::default();

    println!("## Contention ({}; {} per run, median of 3 runs)\n", machine(), humantime(time));
    println!(
        "N = {n} (available parallelism). Calls/s of `roll` through `Host::call` (full pipeline, audit to a file):\n"
    );
    println!(
        "| callers | calls/s | vs 1 caller | CPU us per call | waiting for a CPU, us per call | blocked, us per call |"
    );
    println!("|---|---|---|---|---|---|");
    let call = || {
        host.call("roll", &args, &ctx).unwrap();
    };
    let mut one = 0.0;
    for &t in &callers {
        let r = median_run(t, time, &call);
        if t == 1 {
            one = r.rate;
        }
        println!(
            "| {t} | {:.0} | {:.2}x | {} | {} | {} |",
            r.rate,
            r.rate / one,
            us(r.cpu),
            us(r.runnable),
            us(r.blocked)
        );
    }
    println!(
        "\nPer call, summed over the callers: CPU time (grows when callers fight over cache lines), time runnable but \
         without a core (other threads or processes had it: the machine, not toolhost), and time blocked (locks, \
         condition variables, I/O: what a serialising point costs), from `/proc/thread-self/schedstat`."
    );

    println!("\nEach shared point of the call path alone: operations/s (CPU and blocked time per operation):\n");
    print!("| shared point |");
    for &t in &callers {
        print!(" {t} thread{} |", if t == 1 { "" } else { "s" });
    }
    println!();
    print!("|---|");
    for _ in &callers {
        print!("---|");
    }
    println!();
    let def = host.pipeline().registry().snapshot().get("roll").unwrap().def.clone();
    let arguments = json!({"expression": "2d6+3"});
    let record = || Record {
        time: toolhost::audit::now_rfc3339(),
        event: "call",
        agent: None,
        session: None,
        token: None,
        tool: "roll",
        provider: Some("diceroller"),
        provider_digest: Some("0".repeat(64)),
        arguments_sha256: toolhost::audit::hash_arguments(&arguments),
        arguments: None,
        outcome: "ok",
        error: None,
        error_text_sha256: None,
        error_text_bytes: None,
        duration_ms: 0.013,
        fuel_used: 12_000,
        peak_memory_bytes: 327_680,
        capabilities_held: Vec::new(),
        capabilities_used: Vec::new(),
        cached: false,
        http: Vec::new(),
        actor: "operator".to_string(),
        trace_id: None,
        span_id: None,
        schema_sha256: None,
        model: None,
        prompt_hash: None,
    };
    let points: [(&str, &(dyn Fn() + Sync)); 4] = [
        ("`/metrics` counters (`CallMetrics::record`)", &|| {
            host.pipeline().metrics().record(
                "roll",
                toolhost::metrics::OPERATOR,
                "ok",
                Some(Duration::from_micros(13)),
            );
        }),
        ("live stats (`Budget::record`)", &|| {
            host.pipeline().budget().record(&def, None, Duration::from_micros(13), Outcome::Ok);
        }),
        ("audit record to the file (`AuditLog::write`)", &|| host.pipeline().audit().write(&record())),
        ("registry snapshot (`Registry::snapshot`)", &|| {
            std::hint::black_box(host.pipeline().registry().snapshot());
        }),
    ];
    for (name, f) in points {
        print!("| {name} |");
        for &t in &callers {
            let r = median_run(t, time, f);
            print!(" {:.0} ({:.0} ns CPU, {:.0} ns blocked) |", r.rate, r.cpu.as_nanos(), r.blocked.as_nanos());
        }
        println!();
    }
    println!();
}

fn humantime(d: Duration) -> String {
    if d >= Duration::from_secs(1) { format!("{} s", d.as_secs()) } else { format!("{} ms", d.as_millis()) }
}
