//! Canary upgrades (#50, item 5), through the binary: `plugin upgrade
//! --canary 20%` sends a fifth of a plugin's calls to a new version; one
//! failing half its calls is rolled back by itself, a healthy one is
//! promoted; each call runs wholly on one version, and every step is
//! audited.

use crate::common::{stderr, stdout};
use crate::live::{Client, connect, eventually, names, spawn_serving};
use crate::oci::{ok, run, th};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use std::path::Path;
use toolhost_test_artifacts::{SWAP_V1_PATH, SWAP_V2_PATH};

/// Which version answered call `n` (even: `version`, odd: `slow_version`),
/// or `None` when it failed.
async fn call(c: &Client, n: usize) -> Option<u64> {
    let (tool, args) = if n.is_multiple_of(2) { ("version", json!({})) } else { ("slow_version", json!({"ms": 0})) };
    let r = c.call_tool(CallToolRequestParams::new(tool).with_arguments(args.as_object().cloned().unwrap())).await;
    let r = r.ok()?;
    if r.is_error == Some(true) {
        return None;
    }
    let v = r
        .structured_content
        .or_else(|| r.content.first().and_then(|c| c.as_text()).and_then(|t| serde_json::from_str(&t.text).ok()))?;
    v["version"].as_u64()
}

fn canary_of(dir: &Path) -> Value {
    let list: Value = serde_json::from_str(&ok(&run(dir, &["plugin", "list", "--json"]))).unwrap();
    list["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "swap").unwrap()["canary"].clone()
}

fn events(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|r| r["event"].as_str().filter(|e| e.starts_with("plugin_")).map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_failing_half_its_calls_rolls_back_and_a_healthy_one_is_promoted_with_no_call_mixed() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::copy(SWAP_V1_PATH, dir.join("swap.wasm")).unwrap();
    std::fs::create_dir_all(dir.join("v2")).unwrap();
    std::fs::copy(SWAP_V2_PATH, dir.join("v2/swap.wasm")).unwrap();
    let config = |fail: bool| {
        let setting = if fail { "  config:\n    swap:\n      fail_version: \"yes\"\n" } else { "" };
        format!(
            "trust:\n  allow_unsigned: true\nplugins:\n  builtins: false\n  files: [swap.wasm]\n{setting}audit:\n  path: audit.jsonl\n"
        )
    };
    std::fs::write(dir.join("toolhost.yaml"), config(true)).unwrap();
    let mut serve = th(dir);
    serve.args(["serve", "--http", "127.0.0.1:0"]);
    let (_host, url) = spawn_serving(serve);
    let (client, changed) = connect(&url).await;
    assert_eq!(call(&client, 0).await, Some(1));

    // Refused terms and a plugin not serving say why, and change nothing.
    let o = run(dir, &["plugin", "upgrade", "swap", "v2/swap.wasm", "--canary", "150%"]);
    assert!(!o.status.success() && stderr(&o).contains("from 1% to 99%"), "{}", stderr(&o));
    let o = run(dir, &["plugin", "upgrade", "dice", "v2/swap.wasm", "--canary", "20%"]);
    assert!(!o.status.success() && stderr(&o).contains("dice is not serving"), "{}", stderr(&o));
    let o = run(dir, &["plugin", "upgrade", "swap", "swap.wasm", "--canary", "20%"]);
    assert!(!o.status.success() && stderr(&o).contains("compare it with itself"), "{}", stderr(&o));
    let o = run(dir, &["plugin", "upgrade", "swap", "v2/swap.wasm", "--canary", "20%", "--now"]);
    assert!(!o.status.success() && stderr(&o).contains("cannot be used with"), "{}", stderr(&o));

    // Version 2 fails `version` (half the calls it gets): rolled back.
    let up = ["plugin", "upgrade", "swap", "v2/swap.wasm", "--canary", "20%", "--promote-after", "20"];
    let said = ok(&run(dir, &up));
    assert!(said.contains("takes 20% of calls"), "{said}");
    assert_eq!(canary_of(dir)["state"], "running");
    let (mut v1, mut v2, mut failed) = (0, 0, 0);
    let mut n = 0;
    while canary_of(dir)["state"] == "running" {
        assert!(n < 400, "no decision after {n} calls: {}", canary_of(dir));
        for _ in 0..10 {
            match call(&client, n).await {
                Some(1) => v1 += 1,
                Some(2) => v2 += 1,
                Some(v) => panic!("version {v}"),
                None => failed += 1,
            }
            n += 1;
        }
    }
    let c = canary_of(dir);
    assert_eq!(c["state"], "rolled_back", "{c}");
    assert!(c["reason"].as_str().unwrap().contains("worse by more than 10 points"), "{c}");
    // Every call ran on one version: the new one answered (or failed) the
    // calls it was given, the old one the rest, a fifth to the new.
    assert_eq!(c["new_calls"].as_u64().unwrap(), (v2 + failed) as u64, "{c} v2={v2} failed={failed}");
    assert_eq!(c["old_calls"].as_u64().unwrap(), v1 as u64, "{c}");
    assert_eq!(c["new_calls"].as_u64().unwrap() * 5, (v1 + v2 + failed) as u64, "a fifth of the calls: {c}");
    assert!(failed > 0 && v2 > 0, "the new version failed half its calls: v2={v2} failed={failed}");
    // Rolled back: version 1 answers every call again.
    eventually("version 1 again", async || {
        let mut all = true;
        for i in 0..10 {
            all &= call(&client, i * 2).await == Some(1);
        }
        all
    })
    .await;
    assert!(!names(&client).await.contains(&"new_in_v2".to_string()));

    // Healthy (the setting taken away by a reload): promoted.
    std::fs::write(dir.join("toolhost.yaml"), config(false)).unwrap();
    ok(&run(dir, &["reload"]));
    let before = changed.load(std::sync::atomic::Ordering::SeqCst);
    ok(&run(dir, &up));
    let mut n = 0;
    while canary_of(dir)["state"] == "running" {
        assert!(n < 400, "no decision after {n} calls: {}", canary_of(dir));
        for _ in 0..10 {
            assert!(matches!(call(&client, n).await, Some(1 | 2)), "call {n} failed");
            n += 1;
        }
    }
    let c = canary_of(dir);
    assert_eq!(c["state"], "promoted", "{c}");
    eventually("version 2 serves", async || call(&client, 0).await == Some(2)).await;
    eventually("the session was told", async || changed.load(std::sync::atomic::Ordering::SeqCst) > before).await;
    assert!(names(&client).await.contains(&"new_in_v2".to_string()), "new_in_v2 listed");
    let list = stdout(&run(dir, &["plugin", "list"]));
    assert!(list.contains("swap: canary promoted after 20 calls"), "{list}");
    // Every step in the audit.
    let e = events(dir);
    let steps: Vec<&str> = e
        .iter()
        .map(String::as_str)
        .filter(|e| e.contains("canary") || e.contains("promote") || e.contains("rollback"))
        .collect();
    assert_eq!(steps, ["plugin_canary", "plugin_rollback", "plugin_canary", "plugin_promote"], "{e:?}");
    client.cancel().await.unwrap();
}
