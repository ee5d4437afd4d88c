//! Runtime benchmarks: per-call latency percentiles, instance reuse, compile
//! vs cached load, throughput under concurrency, deadline accuracy.
//!
//! Run: `cargo bench -p toolhost --bench runtime` (add `-- --quick` for a
//! short run). Prints a Markdown report; BENCHMARKS.md holds the last one.
//! Every scenario is measured in the same process run, so ratios compare like
//! with like. Criterion covers the medians in `benches/criterion.rs`; this
//! harness exists because criterion reports no p99. Also measures the budget:
//! tier selection and `available_tools` over 10,000 registered tools.

use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::Host;
use toolhost::budget::{AgentProfile, Budget, BudgetConfig, Tier, Turn};
use toolhost::builtin::BUILTINS;
use toolhost::registry::Registry;
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::{CallContext, CallError, Provider, ToolDef, ToolMeta, ToolOutput};

struct Stats {
    p50: Duration,
    p99: Duration,
}

fn percentiles(mut samples: Vec<Duration>) -> Stats {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    Stats { p50: at(0.50), p99: at(0.99) }
}

fn sample(n: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..n / 10 {
        f(); // warm up
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
    percentiles(v)
}

fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n = if quick { 2_000 } else { 20_000 };
    let cache = tempfile::tempdir().unwrap();
    // The throughput rows run up to 64 callers as one caller: above the
    // default per-agent and per-plugin concurrency limits, which would
    // refuse them (they are measured for what they cost, not for what
    // they refuse). The pipeline rows measure the tools, not the result
    // cache: it is off here (the turns section measures it).
    let limits = Limits { agent_concurrency: 1024, plugin_concurrency: 1024, ..Limits::default() };
    // As `toolhost` builds it: the wasi:http extension linked.
    let http: Arc<dyn toolhost::runtime::Extension> =
        Arc::new(toolhost::http::HttpExtension::new(&toolhost::http::HttpSettings::default()).unwrap());
    let runtime =
        Runtime::with_extensions(limits, Some(cache.path()), toolhost::runtime::cache::DEFAULT_MAX_BYTES, vec![http])
            .unwrap();
    let no_cache = BudgetConfig { result_cache_entries: 0, ..BudgetConfig::default() };
    let host = Arc::new(Host::with_budget(runtime.clone(), Budget::new(no_cache, Vec::new())));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    let args = json!({"expression": "2d6+3"});
    let args_s = args.to_string();
    let ctx = CallContext::default();

    println!("## Runtime ({}; {n} calls per row)\n", toolhost_bench::machine());
    println!("| scenario | p50 | p99 | p50 vs native |");
    println!("|---|---|---|---|");
    let native = sample(n, || {
        std::hint::black_box(diceroller::roll_json(&args_s).unwrap());
    });
    println!("| `roll` as a native Rust function | {} | {} | 1.0x |", us(native.p50), us(native.p99));
    let catalog = host.pipeline().registry().snapshot();
    let dice = catalog.provider("diceroller").unwrap().clone();
    let plugin = runtime.load("diceroller", BUILTINS[0].bytes).unwrap();
    let mut reused = plugin.reused_instance().unwrap();
    let reuse = sample(n, || {
        reused.call("roll", &args_s).unwrap();
    });
    let ratio = |s: &Stats| s.p50.as_secs_f64() / native.p50.as_secs_f64();
    println!(
        "| `roll`, one instance reused (no isolation) | {} | {} | {:.1}x |",
        us(reuse.p50),
        us(reuse.p99),
        ratio(&reuse)
    );
    let fresh = sample(n, || {
        dice.call("roll", &args, &ctx).unwrap();
    });
    println!(
        "| `roll`, fresh instance per call (provider) | {} | {} | {:.1}x |",
        us(fresh.p50),
        us(fresh.p99),
        ratio(&fresh)
    );
    // As the stdio session runs a fast call: the instance is torn down
    // after the answer is out (`toolhost::runtime::defer_teardowns`), so
    // the answer waits for store, instantiation and call only. The
    // teardown runs untimed between calls, on the same thread.
    let answered = {
        let _defer = toolhost::runtime::defer_teardowns();
        let mut v = Vec::with_capacity(n);
        for i in 0..n + n / 10 {
            let t = Instant::now();
            dice.call("roll", &args, &ctx).unwrap();
            if i >= n / 10 {
                v.push(t.elapsed());
            }
            toolhost::runtime::teardown_deferred();
        }
        percentiles(v)
    };
    println!(
        "| `roll`, fresh instance per call, torn down after the answer (the stdio lane) | {} | {} | {:.1}x |",
        us(answered.p50),
        us(answered.p99),
        ratio(&answered)
    );
    let full = sample(n, || {
        host.call("roll", &args, &ctx).unwrap();
    });
    println!(
        "| `roll`, fresh instance, full pipeline (lookup + schema validation) | {} | {} | {:.1}x |",
        us(full.p50),
        us(full.p99),
        ratio(&full)
    );
    for (tool, a) in [
        ("roll_table", json!({"table_name": "wild_magic"})),
        ("get_rule", json!({"id": "spell-fireball"})),
        ("search_rules", json!({"query": "opportunity attack"})),
    ] {
        let s = sample(n / 4, || {
            host.call(tool, &a, &ctx).unwrap();
        });
        println!("| `{tool}`, full pipeline | {} | {} | |", us(s.p50), us(s.p99));
    }
    println!(
        "\nFresh instance vs reused instance, p50: {:.2}x with the teardown before the answer, {:.2}x with it after.\n",
        fresh.p50.as_secs_f64() / reuse.p50.as_secs_f64(),
        answered.p50.as_secs_f64() / reuse.p50.as_secs_f64()
    );

    // Where the difference goes: the parts of a fresh instance timed apart
    // (nothing runs in these instances), p50 of each.
    let mut phases: [Vec<Duration>; 3] = Default::default();
    for _ in 0..n {
        let p = plugin.fresh_instance_phases().unwrap();
        for (v, d) in phases.iter_mut().zip(p) {
            v.push(d);
        }
    }
    let [store, instantiate, teardown] = phases.map(median);
    println!("Fresh instance, by part (p50 of each over {n} unused instances):\n");
    println!("| part | p50 |");
    println!("|---|---|");
    println!("| build the store (WASI context, limiter, fuel, deadline) | {} |", us(store));
    println!("| instantiate the pre-linked component (pooled slots, 3 core instances) | {} |", us(instantiate));
    println!("| drop an unused instance (slot reset, nothing dirtied by a call) | {} |", us(teardown));
    println!(
        "| the rest of a fresh call: the call itself and resetting what it dirtied (fresh p50 minus the two above) | {} |",
        us(fresh.p50.saturating_sub(store + instantiate))
    );
    println!("| for comparison: a call in a reused instance | {} |\n", us(reuse.p50));

    println!("### Throughput, `roll` through the full pipeline\n");
    println!("| concurrent callers | calls/s | p50 | p99 |");
    println!("|---|---|---|---|");
    for threads in [1usize, 2, 8, 64] {
        let per = (n / threads).max(50);
        let start = Instant::now();
        let lat: Vec<Duration> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let host = host.clone();
                    let args = args.clone();
                    s.spawn(move || {
                        let ctx = CallContext::default();
                        (0..per)
                            .map(|_| {
                                let t = Instant::now();
                                host.call("roll", &args, &ctx).unwrap();
                                t.elapsed()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let total = lat.len();
        let rate = total as f64 / start.elapsed().as_secs_f64();
        let st = percentiles(lat);
        println!("| {threads} | {rate:.0} | {} | {} |", us(st.p50), us(st.p99));
    }

    println!("\n### Start-up: compile vs cached load\n");
    // memorytool imports the memory interface: its grant needs a store.
    let memory_dir = tempfile::tempdir().unwrap();
    let memory: Arc<dyn toolhost::runtime::MemoryBackend> =
        Arc::new(toolhost::memory::MemoryStore::open(&memory_dir.path().join("m.sqlite3")).unwrap());
    let grants_for = |rt: &Runtime, name: &str| {
        Host::new(rt.clone()).with_memory(memory.clone()).admission().grants().grants_for(name).unwrap()
    };
    // The optimized code's compile, as before `limits.compile` (the fast
    // first code's is measured by crates/bench/first_compile.py).
    let optimized = Limits { compile: toolhost::runtime::CompileMode::Optimized, ..Limits::default() };
    println!("| plugin | size | cold compile (median of 3) | cached load (median of 10) |");
    println!("|---|---|---|---|");
    for b in BUILTINS {
        let cold = median(
            (0..3)
                .map(|_| {
                    let rt = Runtime::new(optimized.clone(), None).unwrap();
                    let grants = grants_for(&rt, b.name);
                    let t = Instant::now();
                    rt.load_with(b.name, b.bytes, grants).unwrap();
                    t.elapsed()
                })
                .collect(),
        );
        let warm_dir = tempfile::tempdir().unwrap();
        let warm = Runtime::new(optimized.clone(), Some(warm_dir.path())).unwrap();
        warm.load_with(b.name, b.bytes, grants_for(&warm, b.name)).unwrap();
        let warm = median(
            (0..10)
                .map(|_| {
                    let rt = Runtime::new(optimized.clone(), Some(warm_dir.path())).unwrap();
                    let grants = grants_for(&rt, b.name);
                    let t = Instant::now();
                    rt.load_with(b.name, b.bytes, grants).unwrap();
                    t.elapsed()
                })
                .collect(),
        );
        println!("| {} | {} KiB | {} | {} |", b.name, b.bytes.len() / 1024, ms(cold), ms(warm));
    }
    let start_all = median(
        (0..10)
            .map(|_| {
                let t = Instant::now();
                let h = Host::new(Runtime::new(Limits::default(), Some(cache.path())).unwrap());
                toolhost::builtin::add_builtins(h.admission()).unwrap();
                t.elapsed()
            })
            .collect(),
    );
    println!(
        "\nCached start of the whole host (engine + every built-in, warm cache), median of 10: {}.\n",
        ms(start_all)
    );

    println!("### Deadline accuracy (infinite loop, fuel off)\n");
    println!("Time from call start to the timeout error, for a 100 ms deadline (1 ms epoch ticks).\n");
    println!("| deadline | elapsed min | elapsed p50 | elapsed max |");
    println!("|---|---|---|---|");
    let rt = Runtime::new(Limits { fuel: None, ..Limits::default() }, Some(cache.path())).unwrap();
    let hostile = rt.load_file(Path::new(toolhost_test_artifacts::HOSTILE_PATH)).unwrap();
    let runs = if quick { 5 } else { 20 };
    let elapsed: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let e = hostile.call("spin", &json!({}), &ctx).unwrap_err();
            assert_eq!(e.kind(), "timeout");
            t.elapsed()
        })
        .collect();
    let (min, max) = (*elapsed.iter().min().unwrap(), *elapsed.iter().max().unwrap());
    println!("| 100 ms | {} | {} | {} |", ms(min), ms(median(elapsed)), ms(max));

    budget_section(n);
    turns_section(n, cache.path());
    storage_section(if quick { 200 } else { 1000 });
}

/// A turn's `tools/list` (selection + listing, as the MCP front builds it)
/// against a plain listing, and the result cache on `get_rule`: hit, miss,
/// and no cache at all, in one run.
fn turns_section(n: usize, cache_dir: &Path) {
    println!("\n### Turns and the result cache\n");
    println!("| operation | p50 | p99 |");
    println!("|---|---|---|");
    let sage = AgentProfile {
        name: "sage".into(),
        budget_tier: Tier::Deep,
        tools: ["roll", "roll_table", "get_rule", "search_rules", "query_entities"].map(String::from).to_vec(),
        instructions: None,
        rate_limit: None,
        max_calls_per_turn: Some(1_000_000),
        personality: None,
        engine: None,
    };
    let host_with = |entries: usize| {
        let cfg = BudgetConfig { result_cache_entries: entries, ..BudgetConfig::default() };
        let runtime = Runtime::new(Limits::default(), Some(cache_dir)).unwrap();
        let host = Arc::new(Host::with_budget(runtime, Budget::new(cfg, vec![sage.clone()])));
        toolhost::builtin::add_builtins(host.admission()).unwrap();
        host
    };
    let host = host_with(1024);
    let front = toolhost::mcp::McpFront::new(host.clone().pipeline().clone(), Some("sage".into())).unwrap();
    let plain = sample(n, || {
        std::hint::black_box(front.visible_tools());
    });
    println!("| `tools/list` of an agent (5 tools), no turn | {} | {} |", us(plain.p50), us(plain.p99));
    let utterances = ["hello there", "what are the rules on grappling?", "I roll for initiative!", "who is the baron?"];
    let mut i = 0;
    let turn = sample(n, || {
        i += 1;
        front.begin_turn(utterances[i % utterances.len()], toolhost::TurnCues::default());
        std::hint::black_box(front.visible_tools());
    });
    println!("| `tools/list` starting a turn (selector + listing) | {} | {} |", us(turn.p50), us(turn.p99));
    println!("| of which the turn (p50 difference) | {} | |", us(turn.p50.saturating_sub(plain.p50)));

    let ctx = CallContext::default();
    let conversation = host.pipeline().conversation(Some("sage")).unwrap();
    host.pipeline().begin_turn(&conversation, "what does the rule say?", toolhost::TurnCues::default());
    let args = json!({"id": "spell-fireball"});
    host.pipeline().call_in_turn(&conversation, "get_rule", &args, &ctx).unwrap();
    let hit = sample(n, || {
        assert!(host.pipeline().call_in_turn(&conversation, "get_rule", &args, &ctx).unwrap().stats.cached);
    });
    let one = host_with(1);
    let c1 = one.pipeline().conversation(Some("sage")).unwrap();
    let pair = [json!({"id": "spell-fireball"}), json!({"id": "condition-blinded"})];
    let mut j = 0;
    let miss = sample(n / 4, || {
        j += 1;
        assert!(!one.pipeline().call_in_turn(&c1, "get_rule", &pair[j % 2], &ctx).unwrap().stats.cached);
    });
    let off = host_with(0);
    let c0 = off.pipeline().conversation(Some("sage")).unwrap();
    let none = sample(n / 4, || {
        off.pipeline().call_in_turn(&c0, "get_rule", &args, &ctx).unwrap();
    });
    println!("| `get_rule`, no result cache | {} | {} |", us(none.p50), us(none.p99));
    println!("| `get_rule`, cache miss (lookup, run, keep) | {} | {} |", us(miss.p50), us(miss.p99));
    println!("| `get_rule`, cache hit | {} | {} |", us(hit.p50), us(hit.p99));
    println!(
        "\nCache hit vs no cache, p50: {:.1}x faster; a miss costs {:+.1} µs over no cache.\n",
        none.p50.as_secs_f64() / hit.p50.as_secs_f64(),
        (miss.p50.as_secs_f64() - none.p50.as_secs_f64()) * 1e6
    );
}

/// fileio reads and writes on a real directory; search_facts over 10,000 facts.
fn storage_section(n: usize) {
    use toolhost::capabilities::{DirGrantConfig, DirMode, GrantConfig, GrantsByPlugin};
    use toolhost::memory::{Campaign, Fact, MemoryStore};
    println!("\n### Storage: fileio and the memory store\n");
    println!("| operation | p50 | p99 |");
    println!("|---|---|---|");
    let sandbox = tempfile::tempdir().unwrap();
    let db = tempfile::tempdir().unwrap();
    let mut grants = GrantsByPlugin::new();
    grants.insert(
        "fileio".into(),
        GrantConfig {
            files: vec![DirGrantConfig {
                dir: sandbox.path().to_path_buf(),
                mode: DirMode::ReadWrite,
                mount: "/".into(),
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    let store = MemoryStore::open(&db.path().join("m.sqlite3")).unwrap();
    let words = ["dragon", "crown", "tavern", "goblin", "sage", "mine", "cult", "ember", "storm", "road"];
    let facts: Vec<Fact> = (0..10_000)
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
    store.import(&Campaign { sessions: vec![], entities: vec![], relationships: vec![], facts }).unwrap();
    let limits = Limits { timeout_floor: Duration::from_secs(5), ..Limits::default() };
    let rt = Runtime::new(limits, None).unwrap();
    let cfg = BudgetConfig { fast_ms: 10_000, ..BudgetConfig::default() };
    let host = Host::with_budget(rt, Budget::new(cfg, Vec::new()))
        .with_grants(grants, Path::new("/"))
        .with_memory(Arc::new(store));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    let ctx = CallContext::default();
    for (label, size) in [("4 KiB", 4 << 10), ("1 MiB", (1 << 20) - 64)] {
        let content = "x".repeat(size);
        let w = json!({"path": "bench.txt", "content": content});
        let s = sample(n, || {
            host.call("write_file", &w, &ctx).unwrap();
        });
        println!("| `write_file` {label} (atomic: temp file, fsync, rename) | {} | {} |", us(s.p50), us(s.p99));
        let r = json!({"path": "bench.txt"});
        let s = sample(n, || {
            host.call("read_file", &r, &ctx).unwrap();
        });
        println!("| `read_file` {label} | {} | {} |", us(s.p50), us(s.p99));
    }
    let q = json!({"query": "dragon crown", "top_k": 10});
    let s = sample(n, || {
        host.call("search_facts", &q, &ctx).unwrap();
    });
    println!("| `search_facts`, 10,026 facts (FTS5), top 10 | {} | {} |", us(s.p50), us(s.p99));
}

/// A provider with many tools, for the enforcer benchmark.
#[derive(Debug)]
struct Many(Vec<ToolDef>);

impl Provider for Many {
    fn name(&self) -> &str {
        "many"
    }
    fn kind(&self) -> toolhost::tool::ProviderKind {
        toolhost::tool::ProviderKind::Other
    }
    fn tools(&self) -> &[ToolDef] {
        &self.0
    }
    fn call(&self, _: &str, _: &serde_json::Value, _: &CallContext) -> Result<ToolOutput, CallError> {
        Err(CallError::UnknownTool("bench".into()))
    }
}

fn budget_section(n: usize) {
    println!("\n### Budget: tier selection and the enforcer\n");
    println!("| operation | p50 | p99 |");
    println!("|---|---|---|");
    let n_tools = 10_000;
    let defs: Vec<ToolDef> = (0..n_tools)
        .map(|i| ToolDef {
            name: format!("tool_{i:05}"),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            meta: ToolMeta {
                // A spread over all three tiers and over budget.
                estimated_duration_ms: Some((i % 50) as u32 * 100),
                max_duration_ms: None,
                idempotent: true,
                cacheable_seconds: 0,
                ..ToolMeta::default()
            },
            probe_arguments: None,
            ..ToolDef::default()
        })
        .collect();
    let agent = AgentProfile {
        name: "npc".into(),
        budget_tier: Tier::Standard,
        tools: (0..20).map(|i| format!("tool_{:05}", i * 37)).collect(),
        instructions: None,
        rate_limit: None,
        max_calls_per_turn: None,
        personality: None,
        engine: None,
    };
    let budget = Budget::new(BudgetConfig::default(), vec![agent]);
    let registry = Registry::new();
    registry.add(Arc::new(Many(defs))).unwrap();
    let catalog = registry.snapshot();
    let selector = budget.selector();
    let utterances = [
        "What's your name, barkeep?",
        "Do you remember the quest the baron gave us last time?",
        "Think carefully: who is the hooded figure?",
        "I roll for initiative!",
    ];
    let mut i = 0;
    let s = sample(n, || {
        i += 1;
        std::hint::black_box(selector.select(utterances[i % utterances.len()], Turn::default()));
    });
    println!("| select a tier for an utterance | {} | {} |", us(s.p50), us(s.p99));
    // Warm the per-tool caches once, as a running host would have.
    budget.available_tools(&catalog, None, Tier::Deep).unwrap();
    let s = sample(n, || {
        std::hint::black_box(budget.available_tools(&catalog, Some("npc"), Tier::Standard).unwrap());
    });
    println!("| `available_tools`, 10,000 tools registered, agent allow-list of 20 | {} | {} |", us(s.p50), us(s.p99));
    let s = sample(200, || {
        std::hint::black_box(budget.available_tools(&catalog, None, Tier::Standard).unwrap());
    });
    println!(
        "| `available_tools`, 10,000 tools registered, no allow-list (operator) | {} | {} |",
        us(s.p50),
        us(s.p99)
    );
    // What keeping live figures costs each call: the one `Budget::record`
    // the pipeline makes (a push into the rolling window; the tier is recomputed by its next reader).
    let def = &catalog.get("tool_00001").unwrap().def;
    let s = sample(n, || {
        budget.record(def, Some("npc"), Duration::from_micros(15), toolhost::budget::metrics::Outcome::Ok);
    });
    println!("| record one call's measurement (live stats, per call) | {} | {} |", us(s.p50), us(s.p99));
}
