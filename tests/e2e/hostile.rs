//! Misbehaving plugins: each attack ends in its own typed error, and the next
//! normal call on the same host succeeds, on the optimized code and on the
//! fast first code alike (`on_each_code`).

use crate::common::{HOST, call, json_of, on_each_code, run, stderr, stdout};
use serde_json::json;
use std::time::Duration;
use toolhost::Host;
use toolhost::runtime::Limits;
use toolhost::tool::{CallError, Content};
use toolhost_test_artifacts::HOSTILE_PATH;

/// The host still serves: a built-in tool and the hostile plugin's own echo work.
fn assert_still_serving(host: &Host) {
    let v = json_of(call(host, "roll", json!({"expression": "1d20"})).unwrap());
    assert!((1..=20).contains(&v["total"].as_i64().unwrap()));
    let out = call(host, "echo", json!({"still": "alive"})).unwrap();
    assert_eq!(out.content, vec![Content::Text(r#"{"still":"alive"}"#.into())]);
}

#[test]
fn an_infinite_loop_is_stopped_by_the_epoch_deadline() {
    // Fuel off: only the deadline can stop it.
    for (code, host) in on_each_code(Limits { fuel: None, ..Limits::default() }) {
        match call(&host, "spin", json!({})) {
            Err(CallError::Timeout { tool, limit_ms }) => {
                assert_eq!(tool, "spin");
                assert_eq!(limit_ms, 100, "the tool declares max 100 ms");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
    }
}

#[test]
fn an_infinite_loop_is_stopped_by_fuel() {
    // A deadline far away: only fuel can stop it.
    let limits = Limits { fuel: Some(5_000_000), timeout_floor: Duration::from_secs(20), ..Limits::default() };
    for (code, host) in on_each_code(limits) {
        match call(&host, "spin", json!({})) {
            Err(CallError::OutOfFuel { tool, fuel }) => {
                assert_eq!(tool, "spin");
                assert_eq!(fuel, 5_000_000);
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
    }
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    for (code, host) in on_each_code(Limits::default()) {
        match call(&host, "grow", json!({})) {
            Err(CallError::MemoryLimit { limit_bytes, .. }) => assert_eq!(limit_bytes, Limits::default().memory_bytes),
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
    }
}

#[test]
fn a_smaller_memory_limit_is_enforced_too() {
    for (code, host) in on_each_code(Limits { memory_bytes: 4 << 20, ..Limits::default() }) {
        match call(&host, "grow", json!({})) {
            Err(CallError::MemoryLimit { limit_bytes, .. }) => assert_eq!(limit_bytes, 4 << 20),
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
    }
}

/// A real `table.grow` (hand-assembled into the guest) past the table
/// limit ends in `table_limit`, at the limit the engine was built with and
/// at a lower one put in force at run time, where the store's limiter alone
/// stands in the way; below the limit the table grows.
#[test]
fn a_table_bomb_hits_the_table_limit() {
    for (code, host) in on_each_code(Limits::default()) {
        let limit = Limits::default().table_elements;
        // The guest's function table holds its own functions to begin with.
        let grown = match &call(&host, "grow_table", json!({"elements": 1000})).unwrap().content[..] {
            [Content::Text(size)] => size.parse::<usize>().unwrap(),
            other => panic!("{code}: {other:?}"),
        };
        assert!((1000..limit).contains(&grown), "{code}: the table grows under the limit, to {grown}");
        match call(&host, "grow_table", json!({"elements": limit + 1})) {
            Err(CallError::TableLimit { tool, limit_elements }) => {
                assert_eq!(tool, "grow_table");
                assert_eq!(limit_elements, limit);
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
        let lower =
            Limits { table_elements: 500, compile: host.pipeline().runtime().limits().compile, ..Limits::default() };
        let kept = host.pipeline().runtime().set_limits(lower);
        assert!(kept.is_empty(), "{kept:?}");
        match call(&host, "grow_table", json!({"elements": 1000})) {
            Err(e @ CallError::TableLimit { limit_elements: 500, .. }) => assert_eq!(e.kind(), "table_limit"),
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
    }
}

#[test]
fn deep_recursion_overflows_the_wasm_stack_cleanly() {
    for (code, host) in on_each_code(Limits::default()) {
        match call(&host, "recurse", json!({})) {
            Err(e @ CallError::StackOverflow { .. }) => assert_eq!(e.kind(), "stack_overflow"),
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
    }
}

#[test]
fn a_guest_panic_is_reported_with_its_message() {
    for (code, host) in on_each_code(Limits::default()) {
        match call(&host, "panic", json!({})) {
            Err(CallError::GuestPanic { tool, message }) => {
                assert_eq!(tool, "panic");
                assert!(message.contains("panicked on purpose"), "{message}");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
    }
}

#[test]
fn a_10_mb_output_is_refused() {
    for (code, host) in on_each_code(Limits::default()) {
        match call(&host, "big_output", json!({})) {
            Err(CallError::OutputTooLarge { size, limit, .. }) => {
                assert_eq!(limit, Limits::default().output_bytes);
                // The copy out of the guest stopped at the cap: the host never
                // held the 10 MB.
                assert!(size > limit && size < 10 * 1024 * 1024, "{code}: {size}");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
    }
}

#[test]
fn attacks_in_parallel_do_not_disturb_normal_calls() {
    std::thread::scope(|s| {
        for tool in ["grow", "recurse", "panic", "big_output", "spin"] {
            s.spawn(move || assert!(call(&HOST, tool, json!({})).is_err()));
        }
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    assert_still_serving(&HOST);
                }
            });
        }
    });
}

#[test]
fn the_binary_reports_each_attack_and_exits_nonzero() {
    for (tool, needle) in [
        ("spin", "timed out after 100 ms"),
        ("grow", "exceeded its memory limit"),
        ("recurse", "overflowed its stack"),
        ("panic", "panicked: the hostile plugin panicked on purpose"),
        ("big_output", "over the 1048576 byte output limit"),
    ] {
        let o = run(&["call", tool, "--plugin", HOSTILE_PATH]);
        assert!(!o.status.success(), "{tool}");
        assert!(stderr(&o).contains(needle), "{tool}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{tool}: nothing on stdout");
    }
    let o = run(&["call", "spin", "--plugin", HOSTILE_PATH, "--fuel", "1000000", "--timeout-floor-ms", "20000"]);
    assert!(stderr(&o).contains("ran out of fuel (1000000 units)"), "{}", stderr(&o));
}

#[test]
fn a_plugin_sleeping_past_its_deadline_is_stopped() {
    // The guest blocks in a WASI timer, where epoch interruption cannot
    // reach; the bounded clock wakes it at the deadline: 1000 ms declared,
    // cut to the 500 ms ceiling of its FAST tier.
    for (code, host) in on_each_code(Limits { fuel: None, ..Limits::default() }) {
        match call(&host, "sleep", json!({"ms": 600_000})) {
            Err(CallError::Timeout { limit_ms, .. }) => assert_eq!(limit_ms, 500),
            other => panic!("{code}: {other:?}"),
        }
        assert_still_serving(&host);
        // A sleep within the deadline completes normally.
        let out = call(&host, "sleep", json!({"ms": 20})).unwrap();
        assert_eq!(out.content, vec![Content::Text("slept 20 ms".into())]);
    }
}

/// A plugin reporting progress in a tight loop: the caller gets at most 100
/// reports (at least 25 ms apart), the last one carries the final value, and
/// the call still answers (nothing queues for a slow client).
#[test]
fn a_progress_flood_is_coalesced() {
    use std::sync::Mutex;
    use toolhost::tool::{CallContext, PluginEvent};
    let seen: std::sync::Arc<Mutex<Vec<f64>>> = Default::default();
    let sink = seen.clone();
    let ctx = CallContext {
        events: Some(std::sync::Arc::new(move |e| {
            if let PluginEvent::Progress { progress, .. } = e {
                sink.lock().unwrap().push(progress);
            }
        })),
        ..CallContext::default()
    };
    let out = HOST.call("progress_flood", &json!({}), &ctx).expect("the call answers");
    let sent: f64 = match &out.content[0] {
        toolhost::tool::Content::Text(t) => t.parse().unwrap(),
        other => panic!("{other:?}"),
    };
    let seen = seen.lock().unwrap();
    assert!(sent > 1000.0, "the guest flooded ({sent} reports)");
    assert!(seen.len() <= 100 && seen.len() >= 3, "{} reports reached the caller", seen.len());
    assert_eq!(*seen.last().unwrap(), sent, "the final value is not lost");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_still_serving(&HOST);
}
