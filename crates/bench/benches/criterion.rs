//! Criterion medians (with confidence intervals) for the headline comparison:
//! `roll` as a native function, in a reused instance, and in a fresh
//! instance per call; plus tier selection.
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
    host.add_builtins().unwrap();
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

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = roll
}
criterion_main!(benches);
