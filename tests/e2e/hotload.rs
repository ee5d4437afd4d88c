//! Hot loading and signed packages, through the binary: a plugin replaced
//! under a steady load of MCP calls (zero failures, the new behaviour
//! afterwards, `tools/list_changed` received), a corrupt or over-asking new
//! version leaving the old one serving, the plugins directory watch, and
//! ed25519-signed packages with the trust policy and the lock file.

use crate::common::builtin_path;
use crate::common::{run_strict, stderr, stdout};
use crate::live::{admin, connect, eventually, names, place, serve};
use rmcp::model::{CallToolRequestParams, ProgressNotificationParam};
use rmcp::service::NotificationContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use toolhost_test_artifacts::{HOSTILE_PATH, SWAP_V1_PATH, SWAP_V2_PATH};

const CONFIG: &str = "server:\n  rate_limit: { per_minute: 0 }\nplugins:\n  dir: ./plugins\n";

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// An MCP client that counts the progress notifications it receives.
#[derive(Clone, Default)]
struct Progressed(Arc<AtomicUsize>);

impl ClientHandler for Progressed {
    async fn on_progress(&self, _params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Version 1 swapped for version 2 under a steady load: no call fails, and
/// a slow call in flight across the swap answers from the version it
/// started on while calls started after the swap get the new one; a corrupt
/// third version changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_swap_is_one_registry_store() {
    let dir = tempfile::tempdir().unwrap();
    // The FAST ceiling above `slow_version`'s sleep: its deadline is not what ends it.
    std::fs::write(dir.path().join("toolhost.yaml"), format!("{CONFIG}budget:\n  fast_ms: 20000\n")).unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    std::fs::create_dir_all(dir.path().join("staging")).unwrap();
    place(SWAP_V1_PATH, &dir.path().join("plugins/swap.wasm"));
    let (_host, url) = serve(dir.path());
    let (client, changes) = connect(&url).await;
    assert!(names(&client).await.contains(&"version".to_string()));

    // Four callers, back to back, for the whole test (stopped however the
    // test ends: a failed assertion must not leave them spinning). Each
    // answer is counted by the version that gave it, so the test waits on
    // answers, not on time.
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_callers = StopOnDrop(stop.clone());
    let answered: Arc<[AtomicUsize; 3]> = Arc::default();
    let by = |v: usize| answered[v].load(Ordering::SeqCst);
    let mut callers = Vec::new();
    for _ in 0..4 {
        let peer = client.peer().clone();
        let (stop, answered) = (stop.clone(), answered.clone());
        callers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let r = peer.call_tool(CallToolRequestParams::new("version")).await;
                let r = r.map_err(|e| e.to_string()).and_then(|r| {
                    if r.is_error == Some(true) {
                        return Err(format!("{r:?}"));
                    }
                    Ok(r.structured_content.as_ref().and_then(|v| v["version"].as_u64()).unwrap_or(0))
                });
                if let Ok(v @ 1..=2) = r {
                    answered[v as usize].fetch_add(1, Ordering::SeqCst);
                }
                seen.push(r);
            }
            seen
        }));
    }
    eventually("the callers' first answers, by version 1", async || by(1) >= 20).await;

    // A slow call, started on version 1 and held across the swap: it
    // reports progress as it starts, on a session of its own.
    let progressed = Progressed::default();
    let started = progressed.0.clone();
    let slow_client = progressed.serve(StreamableHttpClientTransport::from_uri(format!("{url}/mcp"))).await.unwrap();
    let slow_call = |peer: rmcp::Peer<RoleClient>, ms: u64| async move {
        let args = json!({"ms": ms}).as_object().unwrap().clone();
        let r = peer.call_tool(CallToolRequestParams::new("slow_version").with_arguments(args)).await.unwrap();
        assert_eq!(r.is_error, Some(false), "{r:?}");
        r.structured_content.as_ref().and_then(|v| v["version"].as_u64()).unwrap_or_else(|| panic!("{r:?}"))
    };
    let in_flight = tokio::spawn(slow_call(slow_client.peer().clone(), 6_000));
    eventually("the slow call's progress: it runs", async || started.load(Ordering::SeqCst) >= 1).await;
    place(SWAP_V2_PATH, &dir.path().join("staging/swap.wasm"));
    let staged = dir.path().join("staging/swap.wasm");
    let before_swap = by(1) + by(2);
    let o = admin(dir.path(), &["plugin", "add", staged.to_str().unwrap()]);
    let during_swap = by(1) + by(2) - before_swap;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("replaced swap"), "{}", stdout(&o));
    assert!(during_swap > 0, "calls were answered while the swap was being done");
    assert!(!in_flight.is_finished(), "the slow call was still in flight when the swap was done");
    assert_eq!(slow_call(client.peer().clone(), 0).await, 2, "a call started after the swap runs the new version");
    assert_eq!(in_flight.await.unwrap(), 1, "the call in flight kept the version it started on");
    eventually("the callers' answers by version 2", async || by(2) >= 20).await;

    // A corrupt new version: refused, and the running one keeps answering.
    std::fs::write(&staged, b"\0asm\x0d\x00\x01\x00garbage").unwrap();
    let corrupt = admin(dir.path(), &["plugin", "add", staged.to_str().unwrap()]);
    let after_corrupt = by(2);
    eventually("answers by version 2 after the corrupt one", async || by(2) >= after_corrupt + 20).await;
    stop.store(true, Ordering::Relaxed);
    assert!(!corrupt.status.success(), "{}", stdout(&corrupt));
    assert!(stderr(&corrupt).contains("\"swap\""), "the refusal names the plugin: {}", stderr(&corrupt));

    let mut all = Vec::new();
    for c in callers {
        all.extend(c.await.unwrap());
    }
    let failures: Vec<&String> = all.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failures.is_empty(), "{} of {} calls failed during the swap: {:?}", failures.len(), all.len(), failures);
    let versions: Vec<u64> = all.iter().map(|r| *r.as_ref().unwrap()).collect();
    assert!(versions.iter().all(|v| [1, 2].contains(v)), "every answer named its version: {versions:?}");
    let by_v1 = versions.iter().filter(|v| **v == 1).count();
    eprintln!(
        "swap under load: {} calls, {by_v1} by version 1, {} by version 2, {during_swap} during the swap",
        versions.len(),
        by(2)
    );
    let r = client.peer().call_tool(CallToolRequestParams::new("version")).await.unwrap();
    assert_eq!(r.structured_content.unwrap()["version"], 2, "the new version serves after the corrupt one");
    slow_client.cancel().await.unwrap();
    eventually("list_changed after the swap", async || changes.load(Ordering::SeqCst) >= 1).await;
    assert!(names(&client).await.contains(&"new_in_v2".to_string()));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plugins_directory_is_watched() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), CONFIG).unwrap();
    let (_host, url) = serve(dir.path());
    let (client, changes) = connect(&url).await;
    assert!(!names(&client).await.contains(&"echo".to_string()));

    place(HOSTILE_PATH, &dir.path().join("plugins/hostile.wasm"));
    // Told before listing: a session that lists the new tools first is
    // not told again (it has them), so a list here could race the notice.
    eventually("clients were told", async || changes.load(Ordering::SeqCst) >= 1).await;
    assert!(names(&client).await.contains(&"echo".to_string()), "a dropped plugin's tools appear");
    let r = client
        .peer()
        .call_tool(CallToolRequestParams::new("echo").with_arguments(json!({"x": 1}).as_object().unwrap().clone()))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false));

    std::fs::remove_file(dir.path().join("plugins/hostile.wasm")).unwrap();
    eventually("a removed plugin's tools go", async || !names(&client).await.contains(&"echo".to_string())).await;
    client.cancel().await.unwrap();
}

/// A new version asking for a capability the running one did not is held
/// while the running one serves (`plugin list` says so); the reload that
/// grants it loads it, with no second `plugin add` (issue #52, item 2), and
/// a restart keeps it.
#[test]
fn a_new_version_asking_for_more_is_held_until_granted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    std::fs::create_dir_all(dir.path().join("staging")).unwrap();
    place(SWAP_V1_PATH, &dir.path().join("plugins/tool.wasm"));
    // fileio imports wasi:filesystem: it asks for `files`, which swap_v1 did not.
    place(builtin_path("fileio"), &dir.path().join("staging/tool.wasm"));
    let staged = dir.path().join("staging/tool.wasm");
    // Without the built-ins: the new version is a copy of fileio, whose tool names they hold.
    std::fs::write(dir.path().join("toolhost.yaml"), format!("{CONFIG}  builtins: false\n")).unwrap();
    let tools_of = |name: &str| {
        let o = admin(dir.path(), &["plugin", "list", "--json"]);
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
        let tools = v["plugins"].as_array().unwrap().iter().find(|p| p["name"] == name).map(|p| p["tools"].clone());
        (tools, v["withheld"].clone())
    };
    {
        let (_host, _url) = serve(dir.path());
        let o = admin(dir.path(), &["plugin", "add", staged.to_str().unwrap()]);
        assert!(!o.status.success());
        let err = stderr(&o);
        assert!(err.contains("asks for files which the running version did not"), "{err}");
        assert!(err.contains("the new one is held") && err.contains("reload"), "{err}");
        let (tools, withheld) = tools_of("tool");
        assert_eq!(tools, Some(json!(["version", "slow_version"])), "the old version still serves");
        assert_eq!(withheld[0]["name"], "tool", "listed as waiting: {withheld}");
        let text = stdout(&admin(dir.path(), &["plugin", "list"]));
        assert!(text.contains("tool: held back: "), "{text}");

        // The grant, and a reload: the held version loads by itself.
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        std::fs::write(
            dir.path().join("toolhost.yaml"),
            format!("{CONFIG}  builtins: false\n  grants:\n    tool:\n      files:\n        - dir: ./data\n          mode: read-only\n"),
        )
        .unwrap();
        let o = admin(dir.path(), &["reload"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let (tools, withheld) = tools_of("tool");
        assert!(tools.as_ref().is_some_and(|t| t.to_string().contains("read_file")), "the new version: {tools:?}");
        assert!(withheld.as_array().is_none_or(|w| w.is_empty()), "nothing waits now: {withheld}");
    }
    // A restart loads the version the operator added, not the older file.
    let (_host, _url) = serve(dir.path());
    let (tools, _) = tools_of("tool");
    assert!(tools.as_ref().is_some_and(|t| t.to_string().contains("read_file")), "after a restart: {tools:?}");
}

#[test]
fn plugin_files_load_only_through_the_trust_policy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let strict = |args: &[&str]| run_strict(d, args);
    let o = strict(&["keygen", "alice", "--out", "keys"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let public: Value = serde_json::from_str(&std::fs::read_to_string(d.join("keys/alice.pub")).unwrap()).unwrap();
    std::fs::write(
        d.join("toolhost.yaml"),
        format!("trust:\n  keys:\n    - name: alice\n      public_key: {}\n", public["public_key"].as_str().unwrap()),
    )
    .unwrap();
    std::fs::copy(SWAP_V1_PATH, d.join("swap.wasm")).unwrap();

    // Unsigned: refused by default, loads with the explicit override.
    let o = strict(&["tools", "--plugin", "swap.wasm"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is not signed"), "{}", stderr(&o));
    let o = strict(&["grants", "--allow-unsigned", "--plugin", "swap.wasm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("NOT VERIFIED"), "grants says so: {}", stdout(&o));

    // Signed by a trusted key: loads, and `grants` names the author.
    let o = strict(&["sign", "swap.wasm", "--key", "keys/alice.key", "--version", "1.2.3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = strict(&["verify", "swap.wasm"]);
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("signature valid: swap 1.2.3 by alice"), "{}", stdout(&o));
    let o = strict(&["grants", "--plugin", "swap.wasm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("signed by alice"), "{}", stdout(&o));
    let o = strict(&["call", "version", "--plugin", "swap.wasm"]);
    assert_eq!(stdout(&o).trim(), r#"{"version":1}"#, "{}", stderr(&o));

    // One byte changed after signing: refused, even with the override.
    let mut bytes = std::fs::read(d.join("swap.wasm")).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(d.join("tampered.wasm"), &bytes).unwrap();
    for extra in [&[][..], &["--allow-unsigned"][..]] {
        let mut args = vec!["tools", "--plugin", "tampered.wasm"];
        args.extend(extra);
        let o = strict(&args);
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains("changed after it was signed"), "{}", stderr(&o));
    }
    let o = strict(&["verify", "tampered.wasm"]);
    assert!(!o.status.success());

    // Signed by someone else: a valid signature by a key this host does not
    // trust. Refused, with a failing exit status, and never loaded.
    let o = strict(&["keygen", "mallory", "--out", "keys"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::copy(SWAP_V1_PATH, d.join("other.wasm")).unwrap();
    let o = strict(&["sign", "other.wasm", "--key", "keys/mallory.key"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = strict(&["verify", "other.wasm"]);
    assert!(stdout(&o).contains("signature valid"), "the signature itself is good: {}", stdout(&o));
    assert!(stdout(&o).contains("this host would refuse it"), "{}", stdout(&o));
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let o = strict(&["tools", "--plugin", "other.wasm"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("untrusted key"), "{}", stderr(&o));
    assert!(!stdout(&o).contains("version"), "no tool of it is listed: {}", stdout(&o));
    let o = strict(&["call", "version", "--plugin", "other.wasm"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("untrusted key"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "it never answered: {}", stdout(&o));

    // The lock file pins the digest: a re-signed different build is refused.
    let o = strict(&["lock", "--plugin", "swap.wasm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(d.join("toolhost.lock")).unwrap().contains("swap"));
    std::fs::copy(SWAP_V2_PATH, d.join("swap.wasm")).unwrap();
    strict(&["sign", "swap.wasm", "--key", "keys/alice.key", "--version", "2.0.0"]);
    let o = strict(&["tools", "--plugin", "swap.wasm"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("the lock file pins"), "{}", stderr(&o));
}
