//! Operating a live game, through the binary: the plugins-directory watcher
//! loads a dropped plugin once and then leaves the host idle (no reads, no
//! CPU); `plugin remove` sticks while the file is there, across restarts;
//! plugins and servers added at run time come back after a restart; a
//! tampered run-time record is refused; `/metrics` parses as Prometheus
//! text, counts an MCP call and is the operator's only; `toolhost doctor`
//! finds the typos.

use crate::common::{stderr, stdout, toolhost};
use crate::live::{admin, place, serve};
use crate::peers::{peers_dir, python};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use toolhost_test_artifacts::{HOSTILE_PATH, SWAP_V1_PATH};

const CONFIG: &str = "server:\n  rate_limit: { per_minute: 0 }\nplugins:\n  dir: ./plugins\n";

/// `plugin list --json` of the host serving from `dir`: name to entry.
fn plugins(dir: &Path) -> std::collections::BTreeMap<String, Value> {
    let o = admin(dir, &["plugin", "list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["plugins"].as_array().unwrap().iter().map(|p| (p["name"].as_str().unwrap().to_string(), p.clone())).collect()
}

/// Plugin events of `plugin` in the audit trail: (event, ...).
fn plugin_events(dir: &Path, plugin: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("state/audit.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["plugin"] == plugin && r["event"].as_str().is_some_and(|e| e.starts_with("plugin_")))
        .map(|r| r["event"].as_str().unwrap().to_string())
        .collect()
}

/// (rchar, read_bytes) from /proc/<pid>/io.
fn io_of(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    let field =
        |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().parse::<u64>().unwrap()).unwrap_or(0);
    (field("rchar:"), field("read_bytes:"))
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses.
    let rest = &text[text.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn a_dropped_plugin_loads_once_and_then_the_host_idles() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), CONFIG).unwrap();
    let (host, _url) = serve(dir.path());
    let pid = host.0.id();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    // A file that does not load: logged once, never read again while unchanged.
    std::fs::write(dir.path().join("plugins/broken.wasm"), b"\0asm\x0d\x00\x01\x00garbage").unwrap();
    place(HOSTILE_PATH, &dir.path().join("plugins/hostile.wasm"));
    let started = std::time::Instant::now();
    // Both files looked at: the plugin loaded, the broken file refused
    // (the watcher's audit records). Its own reads of them cost a stat.
    while plugin_events(dir.path(), "hostile").is_empty() || plugin_events(dir.path(), "broken").is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "the dropped files were not looked at");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(plugins(dir.path()).contains_key("hostile"));
    let size = std::fs::metadata(HOSTILE_PATH).unwrap().len();
    let (rchar0, read0) = io_of(pid);
    let cpu0 = cpu_ticks(pid);
    // Someone else reading the plugin files (a backup, `sha256sum`): the
    // watcher sees the accesses, and only stats.
    std::fs::read(dir.path().join("plugins/hostile.wasm")).unwrap();
    std::fs::read(dir.path().join("plugins/broken.wasm")).unwrap();
    std::thread::sleep(Duration::from_secs(10));
    let (rchar1, read1) = io_of(pid);
    let cpu1 = cpu_ticks(pid);
    // /proc reports CPU time in USER_HZ, 100 on Linux whatever the kernel's HZ.
    let ticks_per_sec = 100;
    eprintln!(
        "idle 10 s: rchar +{} bytes, read_bytes +{}, cpu +{} ticks ({} per second); plugin file {size} bytes",
        rchar1 - rchar0,
        read1 - read0,
        cpu1 - cpu0,
        ticks_per_sec
    );
    // No plugin file was read again: far less than one file's size. (The
    // host's own clocks and tokio may wake; they read nothing of note.)
    assert!(rchar1 - rchar0 < size / 10, "the idle host read {} bytes", rchar1 - rchar0);
    // Nor from the disk: a stat may fetch an inode's block (4 KiB) that a
    // busy machine evicted, never a plugin's worth.
    assert!(read1 - read0 < size / 10, "the idle host read {} bytes from the disk", read1 - read0);
    // Near zero: at most 3% of one core over the 10 s.
    assert!((cpu1 - cpu0) * 100 <= 3 * 10 * ticks_per_sec, "the idle host used {} ticks", cpu1 - cpu0);
    // Installed exactly once; the broken file refused exactly once.
    assert_eq!(plugin_events(dir.path(), "hostile"), ["plugin_load"]);
    assert_eq!(plugin_events(dir.path(), "broken"), ["plugin_refused"]);

    // A changed file is read again.
    std::fs::write(dir.path().join("plugins/broken.wasm"), b"\0asm\x0d\x00\x01\x00still garbage").unwrap();
    let started = std::time::Instant::now();
    while plugin_events(dir.path(), "broken").len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "the changed file was not read again");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn plugin_remove_sticks_while_the_file_is_there_and_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), CONFIG).unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    place(HOSTILE_PATH, &dir.path().join("plugins/hostile.wasm"));
    {
        let (_host, _url) = serve(dir.path());
        assert!(plugins(dir.path()).contains_key("hostile"));
        let o = admin(dir.path(), &["plugin", "remove", "hostile"]);
        assert!(o.status.success(), "{}", stderr(&o));
        // Something touches the directory: the watcher must not undo the
        // removal. Then a marker file the watcher refuses: once its refusal
        // is in the audit, the watcher has looked at everything before it.
        std::fs::write(dir.path().join("plugins/notes.txt"), "x").unwrap();
        std::fs::read(dir.path().join("plugins/hostile.wasm")).unwrap();
        std::fs::write(dir.path().join("plugins/marker.wasm"), b"\0asm\x0d\x00\x01\x00garbage").unwrap();
        let started = std::time::Instant::now();
        while plugin_events(dir.path(), "marker").is_empty() {
            assert!(started.elapsed() < Duration::from_secs(30), "the watcher never looked at the marker");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(plugin_events(dir.path(), "marker"), ["plugin_refused"]);
        assert!(!plugins(dir.path()).contains_key("hostile"), "the watcher put a removed plugin back");
        assert_eq!(plugin_events(dir.path(), "hostile"), ["plugin_load", "plugin_remove"], "never loaded again");
        // So is a built-in removed at run time.
        assert!(admin(dir.path(), &["plugin", "remove", "diceroller"]).status.success());
    }
    {
        let (_host, _url) = serve(dir.path());
        let list = plugins(dir.path());
        assert!(!list.contains_key("hostile"), "a removed plugin came back after a restart");
        assert!(!list.contains_key("diceroller"), "a removed built-in came back after a restart");
        // A new version of the file loads: the removal was of the old one.
        // The new version lands once the watcher is looking: a file it
        // refuses is in the audit.
        std::fs::write(dir.path().join("plugins/marker2.wasm"), b"\0asm\x0d\x00\x01\x00garbage").unwrap();
        let started = std::time::Instant::now();
        while plugin_events(dir.path(), "marker2").is_empty() {
            assert!(started.elapsed() < Duration::from_secs(30), "the watcher never looked at the marker");
            std::thread::sleep(Duration::from_millis(100));
        }
        place(HOSTILE_PATH, &dir.path().join("plugins/hostile.wasm"));
        let started = std::time::Instant::now();
        while !plugins(dir.path()).contains_key("hostile") {
            assert!(started.elapsed() < Duration::from_secs(30), "a changed file was not loaded");
            std::thread::sleep(Duration::from_millis(100));
        }
        // Adding the built-in's file again is the operator undoing it.
    }
}

fn py_server() -> String {
    format!("{} {}", python().display(), peers_dir().join("py_server.py").display())
}

/// In `dir`: a config with no rate limit and `swap` staged outside any
/// plugins directory, to be added at run time; its path.
fn staged_swap(dir: &Path) -> std::path::PathBuf {
    std::fs::write(dir.join("toolhost.yaml"), "server:\n  rate_limit: { per_minute: 0 }\n").unwrap();
    std::fs::create_dir_all(dir.join("staging")).unwrap();
    let swap = dir.join("staging/swap.wasm");
    place(SWAP_V1_PATH, &swap);
    swap
}

#[test]
fn plugins_and_servers_added_at_run_time_are_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let swap = staged_swap(dir.path());
    {
        let (_host, _url) = serve(dir.path());
        let o = admin(dir.path(), &["plugin", "add", swap.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let o = admin(dir.path(), &["server", "add", "py", "--command", &py_server()]);
        assert!(o.status.success() && stdout(&o).contains("added py: up"), "{}{}", stdout(&o), stderr(&o));
    }
    let record = dir.path().join("state/runtime-changes.json");
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&record).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the record is private");
        let (_host, _url) = serve(dir.path());
        let list = plugins(dir.path());
        assert_eq!(list["swap"]["source"], "runtime", "{list:?}");
        assert_eq!(list["diceroller"]["source"], "config");
        let o = admin(dir.path(), &["plugin", "list"]);
        assert!(stdout(&o).contains("SOURCE") && stdout(&o).contains("runtime"), "{}", stdout(&o));
        let o = admin(dir.path(), &["status", "--json"]);
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        let py = v["servers"].as_array().unwrap().iter().find(|s| s["name"] == "py").expect("py restored").clone();
        assert_eq!(py["source"], "runtime");
        let started = std::time::Instant::now();
        loop {
            let o = admin(dir.path(), &["status", "--json"]);
            let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
            if v["servers"][0]["state"] == "up" {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the restored server did not connect: {v}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Tampered: the host starts from its config alone, and says so.
    let text = std::fs::read_to_string(&record).unwrap();
    let tampered = text.replace("staging/swap.wasm", "staging/evil.wasm");
    assert_ne!(text, tampered);
    std::fs::write(&record, tampered).unwrap();
    let o = admin(dir.path(), &["servers"]);
    assert!(stderr(&o).contains("tag does not match"), "{}", stderr(&o));
    assert!(!stdout(&o).contains("py"), "a tampered record added a server: {}", stdout(&o));
    std::fs::write(&record, text).unwrap();
    {
        let (_host, _url) = serve(dir.path());
        assert!(plugins(dir.path()).contains_key("swap"));
        assert!(admin(dir.path(), &["plugin", "remove", "swap"]).status.success());
        assert!(admin(dir.path(), &["server", "remove", "py"]).status.success());
    }
    let (_host, _url) = serve(dir.path());
    assert!(!plugins(dir.path()).contains_key("swap"), "removed, so not restored");
    let o = admin(dir.path(), &["status", "--json"]);
    assert!(!stdout(&o).contains("\"py\""), "{}", stdout(&o));
}

/// Parses a scrape with the Python Prometheus client's OpenMetrics parser;
/// prints `name{labels} value` per sample.
fn parse_scrape(text: &str) -> String {
    use std::io::Write as _;
    let script = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{fam.type} {s.name}{{{labels}}} {s.value}")
"#;
    let mut child = std::process::Command::new(python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "the scrape does not parse: {}\n{text}", stderr(&o));
    stdout(&o)
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_parse_count_an_mcp_call_and_are_the_operators_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "server:\n  rate_limit: { per_minute: 0 }\n  tokens:\n    - token: operator-token-0123456789\n    - token: agent-token-0123456789ab\n      agent: Bartok\nnpcs:\n  - name: Bartok\n    tools: [roll]\n",
    )
    .unwrap();
    let (_host, url) = serve(dir.path());
    let http = reqwest::Client::new();
    let scrape = async |token: Option<&str>| {
        let mut r = http.get(format!("{url}/metrics"));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.text().await.unwrap())
    };
    assert_eq!(scrape(None).await.0, 401, "no token");
    assert_eq!(scrape(Some("agent-token-0123456789ab")).await.0, 403, "an agent's token");
    assert_eq!(scrape(Some("wrong-token-0123456789ab")).await.0, 401);

    // A call over MCP, as the agent.
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(format!(
            "{url}/mcp/bartok"
        ))
        .auth_header("agent-token-0123456789ab"),
    );
    use rmcp::ServiceExt as _;
    let client = ().serve(transport).await.expect("initialize");
    let r = client
        .call_tool(
            CallToolRequestParams::new("roll")
                .with_arguments(json!({"expression": "2d6"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false));
    let _ = client.call_tool(CallToolRequestParams::new("no_such_tool_secret_name")).await;
    client.cancel().await.unwrap();

    let (status, text) = scrape(Some("operator-token-0123456789")).await;
    assert_eq!(status, 200);
    assert!(!text.contains("token-0123456789"), "a secret in the metrics");
    assert!(!text.contains("no_such_tool_secret_name"), "an unknown name became a label");
    let samples = parse_scrape(&text);
    let one = |sample: &str| {
        assert!(
            samples.lines().any(|l| l == format!("{sample} 1") || l == format!("{sample} 1.0")),
            "{sample} = 1 not in:\n{samples}"
        )
    };
    one("counter toolhost_tool_calls_total{agent=Bartok,outcome=ok,tool=roll}");
    one("counter toolhost_tool_calls_total{agent=Bartok,outcome=unknown_tool,tool=(unknown)}");
    one("histogram toolhost_tool_call_duration_seconds_count{tool=roll}");
    for name in [
        "toolhost_result_cache_hits_total",
        "toolhost_result_cache_entries",
        "toolhost_plugin_instances_in_use{plugin=diceroller}",
        "toolhost_tool_demoted{tool=roll}",
    ] {
        assert!(samples.contains(name), "{name} missing: {samples}");
    }
}

/// The banner names every endpoint a DM needs: MCP, the page, metrics.
#[test]
fn the_serve_banner_names_the_page_and_metrics() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("toolhost.yaml"), "").unwrap();
    let mut child = toolhost()
        .current_dir(d)
        .env("TOOLHOST_STATE_DIR", d.join("state"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut banner = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let last = line.starts_with("Ctrl-C");
        banner.push(line);
        if last {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let base = banner[0].split_whitespace().last().unwrap().to_string();
    for want in [format!("{base}/mcp"), format!("the DM's page: {base}/ui"), format!("metrics: {base}/metrics")] {
        assert!(banner.iter().any(|l| l.contains(&want)), "{want:?} not in:\n{}", banner.join("\n"));
    }
}

/// An over-grant is said once, whole: what is granted, why it is never
/// used, what to remove (it used to read "over-grant: over-grant: ...").
#[test]
fn doctor_says_an_over_grant_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("toolhost.yaml"), "plugins:\n  grants:\n    diceroller:\n      network: [\"127.0.0.1:9\"]\n")
        .unwrap();
    let o = toolhost().current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).args(["doctor"]).output().unwrap();
    let out = stdout(&o);
    assert_eq!(out.matches("over-grant").count(), 1, "{out}");
    let line = out.lines().find(|l| l.contains("over-grant")).unwrap();
    assert!(line.contains("plugins.grants.diceroller"), "{line}");
    assert!(line.contains("diceroller is granted network but does not import wasi:sockets"), "{line}");
    assert!(line.contains("remove plugins.grants.diceroller.network"), "{line}");
}

#[test]
fn doctor_finds_the_typos() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A real key, but a file anyone may replace.
    let o = toolhost().current_dir(d).args(["keygen", "alice", "--out", "keys"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(d.join("keys/alice.pub"), std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let port = crate::peers::free_port();
    std::fs::write(
        d.join("toolhost.yaml"),
        format!(
            "npcs:\n  - name: Bartok\n    tools: [rol, get_rule]\nbudget:\n  pin:\n    get_rul: fast\nplugins:\n  grants:\n    fileioo:\n      network: [\"not an address\"]\ntrust:\n  key_files: [./keys/alice.pub, ./keys/missing.pub]\nmcp:\n  servers:\n    - name: gone\n      transport: streamable-http\n      url: http://127.0.0.1:{port}/mcp\n"
        ),
    )
    .unwrap();
    let o = toolhost().current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).args(["doctor"]).output().unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "errors: exit 1\n{out}");
    for expected in [
        "npcs[0].tools: unknown tool \"rol\" (did you mean \"roll\"?)",
        "budget.pin.get_rul: unknown tool \"get_rul\" (did you mean \"get_rule\"?)",
        "error: plugins.grants.fileioo: no plugin named \"fileioo\" is loaded, so this grant is never used (did you mean \"fileio\"?)",
        "\"not an address\" is not an IP:port address",
        "error: mcp.servers[0] (gone): unreachable",
        "error: trust.key_files[0]: ",
        "untrusted key file",
        "error: trust.key_files[1]: ",
    ] {
        assert!(out.contains(expected), "{expected:?} not in:\n{out}");
    }
    assert!(!d.join("state").exists(), "doctor wrote to the state directory");
    let o = toolhost()
        .current_dir(d)
        .env("TOOLHOST_STATE_DIR", d.join("state"))
        .args(["doctor", "--json", "--connect-timeout", "2"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(o.status.code(), Some(1));
    // The unknown tools are warnings while a server is down (it may offer them).
    assert!(v["errors"].as_u64().unwrap() >= 5 && v["warnings"].as_u64().unwrap() >= 2, "{v}");

    // A clean config: exit 0.
    std::fs::write(d.join("toolhost.yaml"), "npcs:\n  - name: Bartok\n    tools: [roll, get_rule]\n").unwrap();
    let o = toolhost().current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).args(["doctor"]).output().unwrap();
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("no problems found"), "{}", stdout(&o));

    // serve says the same at start, as warnings.
    std::fs::write(d.join("toolhost.yaml"), "npcs:\n  - name: Bartok\n    tools: [rol]\n").unwrap();
    let mut child = toolhost()
        .current_dir(d)
        .env("TOOLHOST_STATE_DIR", d.join("state"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut first).unwrap();
    // SIGTERM, not SIGKILL: logs are written by a thread of their own, and
    // a stopping host flushes them (a kill could beat the writer).
    let term = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let o = child.wait_with_output().unwrap();
    assert!(
        stderr(&o).contains("unknown tool \\\"rol\\\"") || stderr(&o).contains("unknown tool \"rol\""),
        "{}",
        stderr(&o)
    );
}

/// Issue #52, item 18: a local `toolhost agents` wrote four `plugin_load`
/// records, which filled the DM's audit panel. Commands that only read
/// write no audit record, with no host serving; `call`, which runs a tool,
/// still records its loads and its call.
#[test]
fn commands_that_only_read_write_no_audit_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("toolhost.yaml"), "npcs:\n  - name: bartok\n    tools: [roll]\n").unwrap();
    let run = |args: &[&str]| {
        let o = toolhost().current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    };
    let records = || {
        std::fs::read_to_string(d.join("state/audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|r| r["event"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    for args in [
        &["agents"][..],
        &["tools"],
        &["grants"],
        &["stats"],
        &["plugin", "list"],
        &["select", "I roll for initiative", "--agent", "bartok"],
    ] {
        run(args);
        assert_eq!(records(), Vec::<String>::new(), "after {args:?}");
    }
    run(&["call", "roll", r#"{"expression":"1d6"}"#]);
    let after = records();
    assert!(after.contains(&"plugin_load".to_string()) && after.contains(&"call".to_string()), "{after:?}");
}

/// `doctor` advises `toolhost plugin remove NAME` for a plugin added at
/// run time, and a DM reads it with the host stopped: with no host
/// serving, `plugin remove` forgets a plugin added at run time, so the
/// next start does not load it; a plugin it does not know is refused,
/// saying where config plugins are removed.
#[test]
fn plugin_remove_with_no_host_serving_forgets_a_plugin_added_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let swap = staged_swap(dir.path());
    {
        let (_host, _url) = serve(dir.path());
        let o = admin(dir.path(), &["plugin", "add", swap.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let doctor = stdout(&admin(dir.path(), &["doctor"]));
    assert!(doctor.contains("`toolhost plugin remove swap` forgets it"), "{doctor}");
    let o = admin(dir.path(), &["plugin", "remove", "swap"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("the next start does not load it"), "{}", stdout(&o));
    let o = admin(dir.path(), &["plugin", "remove", "diceroller"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("taking it out of plugins.files"), "{}", stderr(&o));
    let (_host, _url) = serve(dir.path());
    let list = plugins(dir.path());
    assert!(!list.contains_key("swap") && list.contains_key("diceroller"), "{list:?}");
}
