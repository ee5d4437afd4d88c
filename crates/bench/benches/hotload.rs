//! Hot loading: time from a new file in the plugins directory to its tools
//! being callable (cold compile and cached), and call latency while a
//! plugin is swapped over and over, against the same calls with no swap.
//!
//! `cargo bench -p toolhost --bench hotload`; prints a Markdown table.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use toolhost::Host;
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::CallContext;
use toolhost_test_artifacts::{SWAP_V1_PATH, SWAP_V2_PATH};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

/// Drops `file` into a watched directory as `name.wasm` and times until its
/// `version` tool answers.
fn drop_to_callable(cache: Option<&Path>, file: &str, name: &str) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(Host::new(Runtime::new(Limits::default(), cache).unwrap()));
    let _watch =
        toolhost::watch::watch_dir(Arc::new(toolhost::Installer::in_memory(host.clone())), dir.path(), true).unwrap();
    let tmp = dir.path().join(format!(".{name}.tmp"));
    std::fs::copy(file, &tmp).unwrap();
    let started = Instant::now();
    std::fs::rename(&tmp, dir.path().join(format!("{name}.wasm"))).unwrap();
    loop {
        if host.call("version", &serde_json::json!({}), &CallContext::default()).is_ok() {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "never became callable");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Calls `version` from one thread for `window`, while `swapping` another
/// thread replaces the plugin back and forth. Returns call latencies, the
/// number of failed calls and the number of swaps.
fn calls_during(host: &Arc<Host>, dir: &Path, window: Duration, swapping: bool) -> (Vec<Duration>, usize, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = swapping.then(|| {
        let (host, stop, dir) = (host.clone(), stop.clone(), dir.to_path_buf());
        std::thread::spawn(move || {
            let mut swaps = 0;
            while !stop.load(Ordering::Relaxed) {
                let v = if swaps % 2 == 0 { "v2" } else { "v1" };
                host.admission().install_plugin_file(&dir.join(v).join("swap.wasm")).unwrap();
                swaps += 1;
            }
            swaps
        })
    });
    let started = Instant::now();
    let (mut lat, mut failed) = (Vec::new(), 0);
    while started.elapsed() < window {
        let t = Instant::now();
        let r = host.call("version", &serde_json::json!({}), &CallContext::default());
        lat.push(t.elapsed());
        failed += usize::from(r.is_err());
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.map(|s| s.join().unwrap()).unwrap_or(0);
    (lat, failed, swaps)
}

fn main() {
    println!("| measurement | median | min | max | n |");
    println!("|---|---|---|---|---|");
    // Cold: a fresh cache each time, so every drop compiles with Cranelift.
    let mut cold: Vec<Duration> = (0..5)
        .map(|_| {
            let cache = tempfile::tempdir().unwrap();
            drop_to_callable(Some(cache.path()), SWAP_V1_PATH, "swap")
        })
        .collect();
    // Cached: one cache, warmed once.
    let cache = tempfile::tempdir().unwrap();
    drop_to_callable(Some(cache.path()), SWAP_V1_PATH, "swap");
    let mut warm: Vec<Duration> = (0..10).map(|_| drop_to_callable(Some(cache.path()), SWAP_V1_PATH, "swap")).collect();
    for (label, v) in
        [("new file in plugins dir -> callable, cold compile", &mut cold), ("same, compile cache hit", &mut warm)]
    {
        let n = v.len();
        let (min, max) = (*v.iter().min().unwrap(), *v.iter().max().unwrap());
        println!("| {label} | {} | {} | {} | {n} |", ms(pct(v, 0.5)), ms(min), ms(max));
    }

    // Calls during swaps vs. calls with no swap, same host, same run.
    let dir = tempfile::tempdir().unwrap();
    for (v, src) in [("v1", SWAP_V1_PATH), ("v2", SWAP_V2_PATH)] {
        std::fs::create_dir_all(dir.path().join(v)).unwrap();
        std::fs::copy(src, dir.path().join(v).join("swap.wasm")).unwrap();
    }
    let host = Arc::new(Host::new(Runtime::new(Limits::default(), Some(cache.path())).unwrap()));
    host.admission().install_plugin_file(&dir.path().join("v1/swap.wasm")).unwrap();
    host.admission().install_plugin_file(&dir.path().join("v2/swap.wasm")).unwrap(); // both versions cached
    let window = Duration::from_secs(3);
    let (mut quiet, qf, _) = calls_during(&host, dir.path(), window, false);
    let (mut busy, bf, swaps) = calls_during(&host, dir.path(), window, true);
    println!();
    println!("| `version` calls, one caller, {} s each | p50 | p99 | calls | failed | swaps |", window.as_secs());
    println!("|---|---|---|---|---|---|");
    let (q50, q99, qn) = (pct(&mut quiet, 0.5), pct(&mut quiet, 0.99), quiet.len());
    let (b50, b99, bn) = (pct(&mut busy, 0.5), pct(&mut busy, 0.99), busy.len());
    println!("| no swap (baseline) | {} | {} | {qn} | {qf} | 0 |", us(q50), us(q99));
    println!("| plugin swapped continuously | {} | {} | {bn} | {bf} | {swaps} |", us(b50), us(b99));
    println!(
        "\nratio during swaps / baseline: p50 {:.2}x, p99 {:.2}x",
        b50.as_secs_f64() / q50.as_secs_f64(),
        b99.as_secs_f64() / q99.as_secs_f64()
    );
}
