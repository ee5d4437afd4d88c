//! Criterion medians (with confidence intervals) for the headline comparison:
//! `roll` as a native function, in a reused instance, and in a fresh
//! instance per call; plus tier selection, and the HTTP front's per-call and
//! per-connection checks (issue #12).
//!
//! Run: `cargo bench -p toolhost --bench criterion`.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use std::time::Duration;
use toolhost::Host;
use toolhost::budget::{Selector, SelectorConfig, Turn};
use toolhost::builtin::BUILTINS;
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::CallContext;

fn roll(c: &mut Criterion) {
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(Limits::default(), Some(cache.path())).unwrap();
    let host = Host::new(runtime.clone());
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    let args = json!({"expression": "2d6+3"});
    let args_s = args.to_string();
    let ctx = CallContext::default();
    let plugin = runtime.load("diceroller", BUILTINS[0].bytes).unwrap();
    let mut reused = plugin.reused_instance().unwrap();

    let mut g = c.benchmark_group("roll");
    g.bench_function("native", |b| b.iter(|| black_box(diceroller::roll_json(&args_s).unwrap())));
    g.bench_function("reused_instance", |b| b.iter(|| black_box(reused.call("roll", &args_s).unwrap())));
    g.bench_function("fresh_instance_full_pipeline", |b| b.iter(|| black_box(host.call("roll", &args, &ctx).unwrap())));
    g.finish();

    let selector = Selector::new(&SelectorConfig::default());
    c.bench_function("select_tier", |b| {
        b.iter(|| black_box(selector.select("Do you remember the quest the baron gave us?", Turn::default())))
    });
}

/// The cost of the limits: an agent's tool-call bucket, the same pipeline
/// with and without a (never reached) operator limit, and the owner lookup
/// of a loopback connection with many connections open.
fn front(c: &mut Criterion) {
    use toolhost::rates::{CallRates, RateLimitConfig};
    let never = RateLimitConfig { per_minute: u32::MAX, burst: u32::MAX, ..Default::default() };
    let rates = CallRates::new(never, RateLimitConfig::OFF, Default::default());
    c.bench_function("call_rate_take_agent", |b| b.iter(|| black_box(rates.take(Some("bartok"), None))));

    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(Limits::default(), Some(cache.path())).unwrap();
    let free = Host::new(runtime.clone());
    toolhost::builtin::add_builtins(free.admission()).unwrap();
    let limited = Host::from_pipeline(toolhost::Pipeline::new(runtime).with_call_rates(CallRates::new(
        never,
        never,
        Default::default(),
    )));
    toolhost::builtin::add_builtins(limited.admission()).unwrap();
    let args = json!({"expression": "2d6+3"});
    let ctx = CallContext::default();
    let mut g = c.benchmark_group("roll_pipeline");
    g.bench_function("no_rate_limit", |b| b.iter(|| black_box(free.call("roll", &args, &ctx).unwrap())));
    g.bench_function("rate_limited", |b| b.iter(|| black_box(limited.call("roll", &args, &ctx).unwrap())));
    g.finish();

    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let server = listener.local_addr().unwrap();
    let mut open = Vec::new();
    for _ in 0..200 {
        let client = std::net::TcpStream::connect(server).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        open.push((client, accepted));
    }
    let peer = open[199].0.local_addr().unwrap();
    assert!(toolhost::mcp::peer::socket_owner(peer, server).is_some());
    c.bench_function("socket_owner_200_connections", |b| {
        b.iter(|| black_box(toolhost::mcp::peer::socket_owner(peer, server)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = roll, front
}
criterion_main!(benches);
