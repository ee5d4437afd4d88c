//! The memory tools on PostgreSQL against SQLite, in one run: the same
//! campaign in both stores (the demo, 10,000 facts, 50 sessions of 100
//! lines), each tool called through the host (memorytool in wasm, the
//! store behind it), one store after the other for every sample so that
//! both see the same machine. Then throughput with 8 callers at once.
//!
//! Run with `just bench-memory` (it starts a throwaway PostgreSQL cluster
//! through `crates/bench/memory/with-postgres`, which sets
//! `TOOLHOST_BENCH_PG_URL`).

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::Host;
use toolhost::budget::{Budget, BudgetConfig};
use toolhost::memory::{Campaign, Fact, MemoryStore, Session};
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::CallContext;

fn campaign() -> Campaign {
    let words = ["dragon", "crown", "tavern", "goblin", "sage", "mine", "cult", "ember", "storm", "road"];
    let facts = (0..10_000)
        .map(|i| Fact {
            id: format!("bench-{i}"),
            text: format!(
                "Fact {i}: the {} near the {} was seen by the {} in session {}.",
                words[i % 10],
                words[(i / 10) % 10],
                words[(i / 100) % 10],
                i % 50
            ),
            session_id: None,
        })
        .collect();
    let sessions = (0..50)
        .map(|s| Session {
            id: format!("bench-session-{s}"),
            title: format!("Bench session {s}"),
            transcript: (0..100)
                .map(|l| {
                    let who = ["DM", "Lyra", "Bartok", "Mirela"][l % 4].to_string();
                    (who, format!("Line {l}: the {} by the {} again.", words[(s + l) % 10], words[(s * 3 + l) % 10]))
                })
                .collect(),
        })
        .collect();
    Campaign { sessions, entities: vec![], relationships: vec![], facts }
}

fn host_over(store: MemoryStore) -> Host {
    let limits = Limits { timeout_floor: Duration::from_secs(5), ..Limits::default() };
    let cfg = BudgetConfig { fast_ms: 10_000, ..BudgetConfig::default() };
    let host = Host::with_budget(Runtime::new(limits, None).unwrap(), Budget::new(cfg, Vec::new()));
    host.admission().grants().set_memory(Arc::new(store));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    host
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// Calls per second from `threads` callers for `for_`.
fn throughput(host: &Host, tool: &str, args: &Value, threads: usize, for_: Duration) -> f64 {
    let end = Instant::now() + for_;
    let done: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let ctx = CallContext::default();
                    let mut n = 0;
                    while Instant::now() < end {
                        host.call(tool, args, &ctx).unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    done as f64 / for_.as_secs_f64()
}

fn main() {
    let Ok(url) = std::env::var("TOOLHOST_BENCH_PG_URL") else {
        eprintln!("TOOLHOST_BENCH_PG_URL is not set: run `just bench-memory`");
        std::process::exit(2);
    };
    let n: usize = std::env::var("TOOLHOST_BENCH_N").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let data = campaign();
    let sqlite = MemoryStore::open(&dir.path().join("m.sqlite3")).unwrap();
    sqlite.import(&data).unwrap();
    let pg = MemoryStore::connect(&url).unwrap();
    pg.import(&data).unwrap();
    let stores = [("SQLite", host_over(sqlite)), ("PostgreSQL", host_over(pg))];

    println!("## Memory tools: PostgreSQL against SQLite\n");
    println!("{}; n={n} per tool and store, alternating.\n", toolhost_bench::machine());
    println!("| tool | SQLite p50 / p99 | PostgreSQL p50 / p99 | PostgreSQL / SQLite at p50 |");
    println!("|---|---|---|---|");
    let calls: [(&str, Value); 5] = [
        ("search_sessions", json!({"query": "dragon crown", "limit": 10})),
        ("query_entities", json!({"type": "npc"})),
        ("get_summary", json!({"entity_id": "npc-sister-cinder"})),
        ("search_facts", json!({"query": "dragon crown", "top_k": 10})),
        ("remember", json!({"text": "The bench was here.", "session_id": "session-1"})),
    ];
    let ctx = CallContext::default();
    for (tool, args) in &calls {
        let mut times: [Vec<Duration>; 2] = [Vec::with_capacity(n), Vec::with_capacity(n)];
        for i in 0..n + n / 10 {
            for (k, (_, host)) in stores.iter().enumerate() {
                let t = Instant::now();
                host.call(tool, args, &ctx).unwrap_or_else(|e| panic!("{tool}: {e}"));
                if i >= n / 10 {
                    times[k].push(t.elapsed());
                }
            }
        }
        let (s50, s99) = (pct(&mut times[0], 0.5), pct(&mut times[0], 0.99));
        let (p50, p99) = (pct(&mut times[1], 0.5), pct(&mut times[1], 0.99));
        println!(
            "| `{tool}` | {} / {} | {} / {} | {:.2}x |",
            us(s50),
            us(s99),
            us(p50),
            us(p99),
            p50.as_secs_f64() / s50.as_secs_f64()
        );
    }
    let threads = 8;
    let window = Duration::from_secs(3);
    println!("\n{threads} callers at once, {} s each:\n", window.as_secs());
    println!("| tool | SQLite calls/s | PostgreSQL calls/s |");
    println!("|---|---|---|");
    for (tool, args) in [&calls[3], &calls[4]] {
        let rates: Vec<f64> = stores.iter().map(|(_, h)| throughput(h, tool, args, threads, window)).collect();
        println!("| `{tool}` | {:.0} | {:.0} |", rates[0], rates[1]);
    }
}
