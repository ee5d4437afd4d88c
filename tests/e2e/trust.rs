//! The trust chain and resource isolation (issue #11): the compile cache
//! cannot be used to substitute code, a signed package cannot borrow another
//! plugin's name, one flooding agent cannot starve another, non-regular
//! files are never read as plugins, private data is private.

use crate::common::{CACHE, run_strict, stderr, stdout, toolhost};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use toolhost::Host;
use toolhost::budget::{AgentProfile, Budget, BudgetConfig, Tier};
use toolhost::builtin::BUILTINS;
use toolhost::runtime::{CompileMode, CompileSource, Limits, Runtime};
use toolhost::tool::{CallContext, CallError};
use toolhost_test_artifacts::{HOSTILE_PATH, SWAP_V1_PATH};

fn builtin(name: &str) -> &'static [u8] {
    BUILTINS.iter().find(|b| b.name == name).unwrap().bytes
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The fast code's cache entry: Winch's on x86_64, else Cranelift's.
const FAST_ENTRY: &str = if cfg!(target_arch = "x86_64") { ".winch" } else { ".fast" };

#[test]
fn a_substituted_cache_entry_is_recompiled_not_run() {
    // The optimized code's entries and the fast first code's alike.
    for (compile, suffix) in [(CompileMode::Optimized, ""), (CompileMode::FastFirst, FAST_ENTRY)] {
        let cache = tempfile::tempdir().unwrap();
        let limits = Limits { compile, ..Limits::default() };
        let rt = Runtime::new(limits.clone(), Some(cache.path())).unwrap();
        let dice = rt.compile("diceroller", builtin("diceroller")).unwrap();
        let files = rt.compile("fileio", builtin("fileio")).unwrap();
        let c = rt.cache().unwrap();
        let entry = |digest: &str| c.entry_path(&format!("{digest}{suffix}"));
        // Another plugin's (valid, signed-by-this-host) compiled code put under
        // diceroller's digest.
        std::fs::copy(entry(&files.digest), entry(&dice.digest)).unwrap();
        assert_eq!(mode(cache.path()), 0o700, "the cache is private");
        assert_eq!(mode(&cache.path().join("key")), 0o600, "so is its key");

        let rt = Runtime::new(limits.clone(), Some(cache.path())).unwrap();
        let again = rt.compile("diceroller", builtin("diceroller")).unwrap();
        assert_eq!(again.source, CompileSource::Compiled, "{compile:?}: the substituted entry is not loaded");
        let plugin = rt.instantiate_compiled(again, Default::default()).unwrap();
        let names: Vec<String> = toolhost::tool::Provider::tools(&plugin).iter().map(|t| t.name.clone()).collect();
        assert!(names.contains(&"roll".to_string()), "{compile:?}: diceroller's own code runs: {names:?}");
        // The entry was rewritten with the right code: the next load is a hit.
        let rt = Runtime::new(limits, Some(cache.path())).unwrap();
        assert_eq!(
            rt.compile("diceroller", builtin("diceroller")).unwrap().source,
            CompileSource::Cache,
            "{compile:?}"
        );
    }

    // Through the binary: a forged entry (bytes written by someone without
    // the key) is discarded with a warning and the tool still works. (A
    // plugin file: the built-ins load from the code in the binary, never
    // from the cache.)
    let cache = tempfile::tempdir().unwrap();
    let rt = Runtime::new(Limits::default(), Some(cache.path())).unwrap();
    let v1 = rt.compile("swap_v1", &std::fs::read(SWAP_V1_PATH).unwrap()).unwrap();
    let entry = rt.cache().unwrap().entry_path(&format!("{}{FAST_ENTRY}", v1.digest));
    let mut bytes = std::fs::read(&entry).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    std::fs::write(&entry, &bytes).unwrap();
    let o = toolhost()
        .env("TOOLHOST_CACHE_DIR", cache.path())
        .args(["call", "version", "{}", "--no-builtins", "--plugin", SWAP_V1_PATH])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(r#""version":1"#), "{}", stdout(&o));
    assert!(stderr(&o).contains("discarding compile cache entry"), "{}", stderr(&o));
}

#[test]
fn a_cache_dir_others_can_write_or_own_is_not_used() {
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let o = toolhost()
        .env("TOOLHOST_CACHE_DIR", shared.path())
        .args(["call", "roll", r#"{"expression":"1d1"}"#])
        .output()
        .unwrap();
    assert!(o.status.success(), "the host still works, compiling instead: {}", stderr(&o));
    assert!(
        stderr(&o).contains("compile cache disabled") && stderr(&o).contains("writable by other users"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(shared.path()).unwrap().count(), 0, "nothing written there");
    assert_eq!(mode(shared.path()), 0o1777, "a shared directory is never chmod-ed");

    // Owned by another user (needs root to set up; CI runs as root).
    let theirs = tempfile::tempdir().unwrap();
    if std::os::unix::fs::chown(theirs.path(), Some(65534), Some(65534)).is_ok() {
        let o = toolhost().env("TOOLHOST_CACHE_DIR", theirs.path()).args(["tools"]).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains("owned by uid 65534"), "{}", stderr(&o));
    }
}

#[test]
fn private_state_is_0600_in_0700_directories() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state");
    let o = toolhost()
        .env("TOOLHOST_STATE_DIR", &state)
        .args(["call", "roll", r#"{"expression":"1d1"}"#])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(mode(&state), 0o700);
    let mut seen = Vec::new();
    for e in std::fs::read_dir(&state).unwrap().flatten() {
        if e.file_type().unwrap().is_file() {
            assert_eq!(mode(&e.path()), 0o600, "{}", e.path().display());
            seen.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    assert!(seen.iter().any(|f| f == "audit.jsonl"), "{seen:?}");
    assert!(seen.iter().any(|f| f.starts_with("memory")), "{seen:?}");

    // A state directory other users can write into is refused, untouched.
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let o = toolhost().env("TOOLHOST_STATE_DIR", &shared).args(["tools"]).output().unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("writable by other users"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 0, "nothing written there");
}

#[test]
fn a_fifo_or_device_is_never_read_as_a_plugin() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("tool.wasm");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for path in [fifo.to_str().unwrap(), "/dev/zero"] {
        // Opening a FIFO without a writer for reading blocks forever: if the
        // host did, this run would never end. Give it a generous bound, then
        // kill it and fail, rather than hang the suite.
        let mut child = toolhost()
            .args(["tools", "--plugin", path])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(60) {
                child.kill().unwrap();
                panic!("{path}: the host blocked reading it");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = child.wait_with_output().unwrap();
        assert!(!o.status.success());
        assert!(stderr(&o).contains("not a regular file"), "{path}: {}", stderr(&o));
    }
}

#[test]
fn a_signed_package_under_another_plugins_name_gets_none_of_its_grants() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let strict = |args: &[&str]| run_strict(d, args);
    assert!(strict(&["keygen", "alice", "--out", "keys"]).status.success());
    let public: Value = serde_json::from_str(&std::fs::read_to_string(d.join("keys/alice.pub")).unwrap()).unwrap();
    std::fs::create_dir(d.join("files")).unwrap();
    std::fs::write(d.join("files/secret.txt"), "the DM's notes").unwrap();
    std::fs::write(
        d.join("toolhost.yaml"),
        format!(
            "trust:\n  keys:\n    - name: alice\n      public_key: {}\nplugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./files\n",
            public["public_key"].as_str().unwrap()
        ),
    )
    .unwrap();
    std::fs::copy(SWAP_V1_PATH, d.join("weather.wasm")).unwrap();
    let o = strict(&["sign", "weather.wasm", "--key", "keys/alice.key"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("as weather"), "{}", stdout(&o));

    // Copied under fileio's name: refused, naming both names, with or
    // without the built-ins, and `grants` shows nothing of fileio's for it.
    std::fs::copy(d.join("weather.wasm"), d.join("fileio.wasm")).unwrap();
    for extra in [&[][..], &["--no-builtins"][..]] {
        let mut args = vec!["tools", "--plugin", "fileio.wasm"];
        args.extend(extra);
        let o = strict(&args);
        assert!(!o.status.success(), "{args:?}: {}", stdout(&o));
        assert!(stderr(&o).contains(r#"signed as plugin "weather""#), "{}", stderr(&o));
    }
    let o = strict(&["grants", "--no-builtins", "--plugin", "fileio.wasm"]);
    assert!(!o.status.success(), "{}", stdout(&o));
    // `sign -o` never renames: the signed name follows the input or --name.
    let o = strict(&["sign", "weather.wasm", "--key", "keys/alice.key", "-o", "fileio.wasm"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("loads only from a file named weather.wasm"), "{}", stderr(&o));
    // Under its own name it loads, with no grant.
    let o = strict(&["grants", "--no-builtins", "--plugin", "weather.wasm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let granted_dir = d.join("files").canonicalize().unwrap();
    assert!(stdout(&o).contains("weather"), "{}", stdout(&o));
    assert!(!stdout(&o).contains(granted_dir.to_str().unwrap()), "{}", stdout(&o));
}

/// A slow tool flooded by three agents with 100 concurrent calls each.
/// Their shares together (3 x `limits.agent_concurrency`, 96) are more than
/// the plugin's own limit (`limits.plugin_concurrency`, 64), so the plugin's
/// limit is what binds: it never has more calls running than its limit, and
/// the flood fills it to all but the reserve kept for light callers. The
/// rest is refused with `capacity_exceeded` (for the agent's share or the
/// plugin's), and no refusal is measured: the tool's figures count exactly
/// the calls that ran, none of them an error. An NPC's `roll` stays listed
/// and answers throughout.
#[test]
fn a_flood_of_one_client_never_hides_another_agents_roll() {
    let agent = |name: &str, tier, tools: &[&str]| AgentProfile {
        name: name.into(),
        budget_tier: tier,
        tools: tools.iter().map(|t| t.to_string()).collect(),
        instructions: None,
        rate_limit: None,
        max_calls_per_turn: None,
        personality: None,
        engine: None,
    };
    let agents = vec![
        agent("npc", Tier::Fast, &["roll"]),
        agent("f1", Tier::Deep, &["sleep"]),
        agent("f2", Tier::Deep, &["sleep"]),
        agent("f3", Tier::Deep, &["sleep"]),
    ];
    let rt = Runtime::new(Limits { fuel: None, ..Limits::default() }, Some(CACHE.path())).unwrap();
    let limits = rt.limits().clone();
    // A window wider than the flood, so every recorded call is counted, and
    // ceilings (so deadlines) above the flood's 800 ms calls.
    let cfg = BudgetConfig { window: 1000, fast_ms: 2000, standard_ms: 3000, deep_ms: 4000, ..BudgetConfig::default() };
    let budget = Budget::new(cfg, agents);
    let host = Arc::new(Host::with_budget(rt, budget));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    let plugin = host.admission().add_plugin_file(Path::new(HOSTILE_PATH)).unwrap();
    let (_, plugin_limit) = plugin.calls_in_flight();
    assert_eq!(plugin_limit, limits.plugin_concurrency);
    assert!(3 * limits.agent_concurrency > plugin_limit, "the agents' shares alone would let more run");
    let sleep_def = host.pipeline().registry().snapshot().get("sleep").unwrap().def.clone();

    let flooding = Arc::new(AtomicBool::new(true));
    // Each flood call holds its slot for 800 ms, far past the 250 ms a
    // refused call waits for one (`limits.queue_wait_ms`).
    let floods: Vec<_> = ["f1", "f2", "f3"]
        .into_iter()
        .flat_map(|a| (0..100).map(move |_| a))
        .map(|a| {
            let host = host.clone();
            std::thread::spawn(move || {
                host.pipeline().call_as(Some(a), Tier::Deep, "sleep", &json!({"ms": 800}), &CallContext::default())
            })
        })
        .collect();
    // The plugin's calls running, sampled throughout the flood.
    let sampler = {
        let (plugin, flooding) = (plugin.clone(), flooding.clone());
        std::thread::spawn(move || {
            let mut peak = 0;
            while flooding.load(Ordering::Relaxed) {
                peak = peak.max(plugin.calls_in_flight().0);
                std::thread::sleep(Duration::from_micros(200));
            }
            peak
        })
    };
    let watcher = {
        let (host, flooding) = (host.clone(), flooding.clone());
        std::thread::spawn(move || {
            let mut rolls = 0;
            while flooding.load(Ordering::Relaxed) {
                let catalog = host.pipeline().registry().snapshot();
                let roll = catalog.get("roll").unwrap();
                assert!(
                    host.pipeline().budget().visible(Some("npc"), Tier::Fast, roll).unwrap(),
                    "roll stays listed for the NPC"
                );
                let r = host.pipeline().call_as(
                    Some("npc"),
                    Tier::Fast,
                    "roll",
                    &json!({"expression": "1d20"}),
                    &CallContext::default(),
                );
                assert!(r.is_ok(), "the NPC's roll answers during the flood: {r:?}");
                rolls += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            rolls
        })
    };
    let results: Vec<_> = floods.into_iter().map(|t| t.join().unwrap()).collect();
    flooding.store(false, Ordering::Relaxed);
    let rolls = watcher.join().unwrap();
    let peak = sampler.join().unwrap();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let busy: Vec<&String> = results
        .iter()
        .filter_map(|r| match r {
            Err(CallError::CapacityExceeded(m)) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(
        ok + busy.len(),
        300,
        "every refusal is capacity_exceeded: {:?}",
        results.iter().find(|r| matches!(r, Err(e) if !matches!(e, CallError::CapacityExceeded(_))))
    );
    let by_plugin = busy.iter().filter(|m| m.contains("limits.plugin_concurrency")).count();
    let by_agent = busy.iter().filter(|m| m.contains("limits.agent_concurrency")).count();
    eprintln!(
        "flood: {ok} ran, peak {peak} running of {plugin_limit}; refused {by_plugin} by the plugin, {by_agent} by the agents"
    );
    // The plugin's limit, exactly: never more running than it, and the
    // flood filled it to the flooders' part (all but the light reserve).
    assert!(peak <= plugin_limit, "{peak} calls ran at once, over the plugin's limit of {plugin_limit}");
    let flooders_part = plugin_limit - toolhost::runtime::FairSlots::reserve(plugin_limit);
    assert!(peak >= flooders_part, "the flood pressed the plugin's limit: peak {peak} of {flooders_part}");
    assert_eq!(by_plugin + by_agent, busy.len(), "{busy:?}");
    assert!(by_plugin >= 1, "the plugin's limit refused calls the agents' shares allowed");
    assert!(by_agent >= 1, "agents were held to their share");
    assert!(rolls >= 5, "the NPC rolled throughout ({rolls})");
    // No refusal was measured: the tool's figures hold exactly the calls
    // that ran, none an error, so the flood never counts against it.
    let status = host.pipeline().budget().status(&sleep_def);
    let real = status.real.unwrap_or_else(|| panic!("the calls that ran are measured: {status:?}"));
    assert_eq!(real.count, ok, "measured calls: exactly those that ran, no refusal");
    assert_eq!(real.error_permille, 0, "{real:?}");
    assert!(host.pipeline().budget().tool_tier(&sleep_def, Some("f1")).is_some());
    assert!(
        host.pipeline()
            .budget()
            .visible(Some("f1"), Tier::Deep, host.pipeline().registry().snapshot().get("sleep").unwrap())
            .unwrap()
    );
}

/// Peak resident memory of process `pid`, in bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread")]
async fn an_aliased_output_amplifier_costs_the_host_no_more_than_the_cap() {
    use crate::live::{connect, serve};
    use rmcp::model::CallToolRequestParams;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!("server:\n  rate_limit: {{ per_minute: 0 }}\nplugins:\n  files: [{HOSTILE_PATH:?}]\n"),
    )
    .unwrap();
    let (host, url) = serve(dir.path());
    let (client, _) = connect(&url).await;
    let before = peak_rss(host.0.id());
    // 40 calls, 8 at a time, each handing back one 1 MiB buffer 120 times:
    // 120 MiB per call if the host copied everything before checking.
    let mut calls = Vec::new();
    for _ in 0..8 {
        let peer = client.peer().clone();
        calls.push(tokio::spawn(async move {
            let mut kinds = Vec::new();
            for _ in 0..5 {
                let r = peer.call_tool(CallToolRequestParams::new("alias_output")).await.unwrap();
                kinds.push(r.meta.as_ref().and_then(|m| m.0["toolhost"]["kind"].as_str().map(str::to_string)));
            }
            kinds
        }));
    }
    for c in calls {
        for kind in c.await.unwrap() {
            assert_eq!(kind.as_deref(), Some("output_too_large"));
        }
    }
    let after = peak_rss(host.0.id());
    assert!(after < before + (256 << 20), "peak resident memory grew from {} MB to {} MB", before >> 20, after >> 20);
    let roll =
        CallToolRequestParams::new("roll").with_arguments(json!({"expression": "1d20"}).as_object().unwrap().clone());
    let r = client.call_tool(roll).await.unwrap();
    assert_ne!(r.is_error, Some(true), "the host still serves: {r:?}");
}
