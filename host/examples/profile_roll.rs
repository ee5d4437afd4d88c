//! Calls `roll` in a loop, for profilers:
//! `cargo run --release --example profile_roll -- 200000 [--pipeline]`
//! (`--pipeline` goes through `Host::call`: lookup, validation, budget).

use serde_json::json;
use toolhost::Host;
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::CallContext;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let cache = tempfile::tempdir().unwrap();
    let host = Host::new(Runtime::new(Limits::default(), Some(cache.path())).unwrap());
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    let dice = host.pipeline().registry().snapshot().provider("diceroller").unwrap().clone();
    let args = json!({"expression": "2d6+3"});
    let ctx = CallContext::default();
    let t = std::time::Instant::now();
    let pipeline = std::env::args().any(|a| a == "--pipeline");
    for _ in 0..n {
        if pipeline {
            host.call("roll", &args, &ctx).unwrap();
        } else {
            dice.call("roll", &args, &ctx).unwrap();
        }
    }
    println!("{:.2} us/call", t.elapsed().as_secs_f64() * 1e6 / n as f64);
}
