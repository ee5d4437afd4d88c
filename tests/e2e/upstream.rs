//! Upstream MCP servers are untrusted (issue #12): a hostile server
//! (`tests/peers/evil_server.py`) gets a clean environment, cannot flood the
//! host with a huge result, cannot register names a model API would refuse
//! or that forge text, cannot forge the host's log through its stderr, and
//! cannot pull a call's arguments to another origin with a redirect.

use crate::common::{stderr, stdout, toolhost};
use crate::live::Proc;
use crate::peers::{free_port, peers_dir, python, spawn_listening};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use toolhost::tool::valid_tool_name;

fn evil_config(dir: &Path) -> String {
    format!(
        "mcp:\n  servers:\n    - name: evil\n      transport: stdio\n      command: {} {}\n      env:\n        EVIL_STDERR_SECRET: stderr-secret-123\n",
        python().display(),
        peers_dir().join("evil_server.py").display(),
    ) + &format!("audit:\n  path: {}\n", dir.join("audit.jsonl").display())
}

fn run(dir: &Path, log: &str, args: &[&str]) -> std::process::Output {
    toolhost()
        .current_dir(dir)
        .env("TOOLHOST_LOG", log)
        .env("DM_SECRET_TOKEN", "dm-very-secret-value")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_stdio_upstream_sees_only_the_environment_the_config_gives_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), evil_config(dir.path())).unwrap();
    let o = run(dir.path(), "warn", &["call", "env_dump", "{}"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let env: Value = serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    assert!(env.get("DM_SECRET_TOKEN").is_none(), "the host's secrets leak to the child: {env}");
    assert!(env.get("TOOLHOST_STATE_DIR").is_none(), "{env}");
    assert_eq!(env["EVIL_STDERR_SECRET"], "stderr-secret-123", "the configured env is set");
    assert!(env.get("PATH").is_some(), "PATH passes through by default: {env}");
    assert!(
        env.as_object().unwrap().keys().all(
            |k| ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "EVIL_STDERR_SECRET"]
            .contains(&k.as_str())
            // Python adds these to its own environment at start.
            || k.starts_with("LC_") || k == "PYTHONHOME" || k == "__CF_USER_TEXT_ENCODING"
        ),
        "only the listed variables: {env}"
    );
}

#[test]
fn an_upstreams_stderr_is_debug_only_escaped_and_cannot_forge_lines() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), evil_config(dir.path())).unwrap();
    let o = run(dir.path(), "info", &["tools"]);
    assert!(!stderr(&o).contains("stderr-secret-123"), "stderr is not logged at info: {}", stderr(&o));
    let o = run(dir.path(), "toolhost=debug", &["tools"]);
    let log = stderr(&o);
    assert!(log.contains("starting with stderr-secret-123"), "at debug it is: {log}");
    assert!(log.contains(r"ok\r2026-11-23T00:00:00Z  INFO toolhost: FORGED\u{1b}[2K"), "escaped: {log}");
    assert!(!log.contains(['\r', '\u{1b}']), "no raw control characters: {log:?}");
}

#[test]
fn upstream_names_always_fit_the_rule_and_hostile_ones_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), evil_config(dir.path())).unwrap();
    let o = run(dir.path(), "warn", &["tools", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let tools: Vec<Value> = serde_json::from_str(&stdout(&o)).unwrap();
    let names: Vec<&str> =
        tools.iter().filter(|t| t["provider"] == "evil").map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 10, "{names:?}");
    for n in ["env_dump", "huge", "evil_dotted_name", "typed_liar", "typed_silent", "typed_honest"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    assert!(tools.iter().all(|t| valid_tool_name(t["name"].as_str().unwrap())), "{tools:?}");
    let log = stderr(&o);
    assert!(log.contains(r"evil\nname\u{202e}"), "the skip is reported, escaped: {log}");
    assert!(log.contains("5000 bytes"), "{log}");
    // The renamed tool reaches the server under its own name.
    let o = run(dir.path(), "warn", &["call", "evil_dotted_name", "{}"]);
    assert_eq!(stdout(&o).trim(), "called dotted.name", "{}", stderr(&o));
}

#[test]
fn upstream_names_never_shadow_a_builtin_or_squat_its_namespace() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), evil_config(dir.path())).unwrap();
    let o = run(dir.path(), "warn", &["tools", "--json"]);
    let tools: Vec<Value> = serde_json::from_str(&stdout(&o)).unwrap();
    let provider = |name: &str| tools.iter().find(|t| t["name"] == name).map(|t| t["provider"].clone());
    // `Roll` is the built-in's name to a reader; `diceroller_roll` is in
    // the built-in diceroller's namespace.
    assert_eq!(provider("roll"), Some("diceroller".into()), "the built-in keeps its name");
    assert_eq!(provider("Roll"), None, "no case variant beside it: {tools:?}");
    assert_eq!(provider("evil_Roll"), Some("evil".into()));
    assert_eq!(provider("diceroller_roll"), None, "{tools:?}");
    assert_eq!(provider("evil_diceroller_roll"), Some("evil".into()));
}

#[test]
fn an_upstreams_structured_content_is_held_to_its_output_schema() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), evil_config(dir.path())).unwrap();
    let o = run(dir.path(), "warn", &["call", "typed_honest", "{}"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (tool, why) in [("typed_liar", "\"nope\" is not of type \"integer\""), ("typed_silent", "no structuredContent")]
    {
        let o = run(dir.path(), "warn", &["call", tool, "{}"]);
        assert!(!o.status.success(), "{tool}: {}", stdout(&o));
        let err = stderr(&o);
        assert!(
            err.contains("MCP server \"evil\" broke the tool's outputSchema") && err.contains(why),
            "{tool}: {err}"
        );
    }
}

#[test]
fn an_upstreams_huge_result_is_held_to_the_output_cap() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), evil_config(dir.path())).unwrap();
    let o = run(dir.path(), "warn", &["call", "huge", "{}"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("over the 1048576 byte output limit"), "{}", stderr(&o));
    assert!(stdout(&o).len() < 4096, "nothing of it is printed");
    // An answer that is not a tool result at all: its error is a line's
    // worth, not the 2 MB it carried.
    let o = run(dir.path(), "warn", &["call", "not_a_result", "{}"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("not a tool result"), "{}", &err[..err.len().min(2000)]);
    assert!(err.len() < 16 << 10, "{} bytes of error", err.len());
}

fn evil_http(args: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.arg(peers_dir().join("evil_server.py")).args(args.iter().map(|a| a.replace("{port}", &port.to_string())));
    (spawn_listening(cmd, port), port)
}

#[test]
fn a_cross_origin_redirect_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("collected.log");
    let (_collector, to) = evil_http(&["--collect", "{port}", seen.to_str().unwrap()]);
    let (_redirector, from) = evil_http(&["--redirect", "{port}", &to.to_string()]);
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!("mcp:\n  servers:\n    - name: moved\n      transport: streamable-http\n      url: http://127.0.0.1:{from}/mcp\n"),
    )
    .unwrap();
    let o = run(dir.path(), "warn", &["servers", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(v[0]["state"], "down", "{v}");
    assert!(
        v[0]["last_error"].as_str().unwrap_or_default().contains("redirects only within the server's own origin"),
        "{v}"
    );
    assert!(!seen.exists() || std::fs::read(&seen).unwrap().is_empty(), "the other origin received a request");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_stdio_answers_initialize_before_upstreams_are_ready() {
    use rmcp::ServiceExt as _;
    use rmcp::service::NotificationContext;
    use rmcp::{ClientHandler, RoleClient};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    #[derive(Clone, Default)]
    struct Changes(Arc<AtomicUsize>);
    impl ClientHandler for Changes {
        async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let py = format!("{} {}", python().display(), peers_dir().join("py_server.py").display());
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "mcp:\n  servers:\n    - name: py\n      transport: stdio\n      command: {py}\n    - name: hang\n      transport: stdio\n      command: sleep 300\n"
        ),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.current_dir(dir.path())
        .env("TOOLHOST_CACHE_DIR", crate::common::CACHE.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .args(["serve", "--stdio"]);
    let changes = Changes::default();
    let count = changes.0.clone();
    // `hang` never answers; the host used to wait 30 s for it before
    // reading the client's `initialize`.
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        changes.serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()),
    )
    .await
    .expect("initialize is answered without waiting for upstreams")
    .expect("initialize");
    // py joins while `hang` still holds the host not ready: its tools are
    // in the session's first list (which waits up to first_list_wait_ms),
    // or announced with list_changed if that list came first.
    let first: Vec<String> = client.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect();
    if !first.contains(&"add".to_string()) {
        crate::live::eventually("py's tools join, announced", async || {
            let names: Vec<String> =
                client.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect();
            names.contains(&"add".to_string()) && count.load(Ordering::SeqCst) > 0
        })
        .await;
    }
}

/// `serve --http` waits for its upstreams before it listens only up to
/// `server.first_list_wait_ms`, not the 30 s connect timeout: a server that
/// never answers does not keep the DM's host closed.
#[tokio::test(flavor = "multi_thread")]
async fn serve_http_listens_after_first_list_wait_ms_whatever_a_hung_upstream_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "server:\n  first_list_wait_ms: 1000\nmcp:\n  servers:\n    - name: hang\n      transport: stdio\n      command: sleep 300\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let (_host, url) = crate::live::serve(dir.path());
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(15), "listening after {waited:?}, not the 30 s connect timeout");
    let (client, _) = crate::live::connect(&url).await;
    assert!(crate::live::names(&client).await.contains(&"roll".to_string()), "serving its own tools");
}

/// `/healthz` says the process is alive and `/readyz` whether everything
/// configured has loaded (here: an upstream that never answers keeps it
/// 503 for its 30 s connect timeout), both without a token where `/mcp`
/// needs one, and neither says more than that.
#[tokio::test(flavor = "multi_thread")]
async fn the_probes_answer_without_a_token_and_say_ready_only_once_loaded() {
    let tokens = "server:\n  first_list_wait_ms: 0\n  tokens:\n    - token: probes-test-operator-token\n";
    let hung = tempfile::tempdir().unwrap();
    std::fs::write(
        hung.path().join("toolhost.yaml"),
        format!("{tokens}mcp:\n  servers:\n    - name: hang\n      transport: stdio\n      command: sleep 300\n"),
    )
    .unwrap();
    let (_hung_host, hung_url) = crate::live::serve(hung.path());
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("toolhost.yaml"), tokens).unwrap();
    let (_plain_host, plain_url) = crate::live::serve(plain.path());

    let get = async |url: String| {
        let r = reqwest::get(url).await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(get(format!("{hung_url}/mcp")).await.0, 401, "/mcp needs the token");
    assert_eq!(get(format!("{hung_url}/healthz")).await, (200, "ok\n".to_string()));
    assert_eq!(
        get(format!("{hung_url}/readyz")).await,
        (503, "not ready\n".to_string()),
        "an upstream still connecting"
    );
    crate::live::eventually("the host without upstreams is ready", async || {
        get(format!("{plain_url}/readyz")).await == (200, "ready\n".to_string())
    })
    .await;
    assert_eq!(get(format!("{hung_url}/readyz")).await.0, 503, "still connecting");
}

/// The Python peer over streamable HTTP on `port`.
fn py_http_on(port: u16) -> Proc {
    let mut cmd = Command::new(python());
    cmd.arg(peers_dir().join("py_server.py")).args(["--http", &port.to_string()]);
    spawn_listening(cmd, port)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_http_upstream_is_hidden_while_down_and_reconnected_after() {
    use crate::live::{connect, eventually, names, serve};
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let py = py_http_on(port);
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nmcp:\n  servers:\n    - name: remote\n      transport: streamable-http\n      url: http://127.0.0.1:{port}/mcp\n"
        ),
    )
    .unwrap();
    let (_host, url) = serve(dir.path());
    let (client, changes) = connect(&url).await;
    assert!(names(&client).await.contains(&"add".to_string()));
    let before = changes.load(Ordering::SeqCst);

    drop(py);
    // Told first, then listed: a session that lists the change before the
    // notice goes out is not told again, so listing here could race it.
    eventually("list_changed as the server goes down", async || changes.load(Ordering::SeqCst) > before).await;
    assert!(!names(&client).await.contains(&"add".to_string()), "the down server's tools are hidden");
    let hidden = changes.load(Ordering::SeqCst);

    // A new process on the same port: the old session means nothing to it.
    let _py = py_http_on(port);
    eventually("list_changed as it comes back", async || changes.load(Ordering::SeqCst) > hidden).await;
    assert!(names(&client).await.contains(&"add".to_string()), "re-initialized and listed again");
    let add = rmcp::model::CallToolRequestParams::new("add")
        .with_arguments(serde_json::json!({"a": 2, "b": 3}).as_object().unwrap().clone());
    let r = client.call_tool(add).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
}

/// Calls made while an upstream is down are its outage, not its tools'
/// failures: after the reconnect every tool is listed and callable at
/// once (it used to stay demoted for `window_max_age_secs`, ten minutes),
/// and `status` counts the refused calls against the server.
#[tokio::test(flavor = "multi_thread")]
async fn calls_during_an_upstream_outage_never_hide_its_tools_after_the_reconnect() {
    use crate::live::{admin, eventually, names, serve};
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let py = py_http_on(port);
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nnpcs:\n  - name: scout\n    budget_tier: standard\n    tools: [add, echo, slow]\nmcp:\n  servers:\n    - name: remote\n      transport: streamable-http\n      url: http://127.0.0.1:{port}/mcp\n"
        ),
    )
    .unwrap();
    let (_host, url) = serve(dir.path());
    // An agent at STANDARD: `add` (undeclared, STANDARD until measured) is
    // listed for it, and a demotion for its health would hide it.
    let watcher = crate::live::Watcher::default();
    let changes = watcher.0.clone();
    let client = rmcp::ServiceExt::serve(
        watcher,
        rmcp::transport::StreamableHttpClientTransport::from_uri(format!("{url}/mcp/scout")),
    )
    .await
    .expect("initialize");
    let mut before = names(&client).await;
    before.sort();
    assert!(before.contains(&"add".to_string()), "{before:?}");
    let add = || {
        rmcp::model::CallToolRequestParams::new("add")
            .with_arguments(serde_json::json!({"a": 2, "b": 3}).as_object().unwrap().clone())
    };
    let ok = client.call_tool(add()).await.unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");

    drop(py);
    let seen = changes.load(Ordering::SeqCst);
    // Well past the health rule's 5 samples at a 0.3 error rate: counted
    // against the tool, these would demote it for ten minutes. The first
    // find the connection gone, the rest the server down.
    for _ in 0..8 {
        let refused = client.call_tool(add()).await;
        assert!(
            refused.as_ref().is_err() || refused.as_ref().is_ok_and(|r| r.is_error == Some(true)),
            "a call to a down upstream fails: {refused:?}"
        );
    }

    eventually("list_changed as the server goes down", async || changes.load(Ordering::SeqCst) > seen).await;
    assert!(!names(&client).await.contains(&"add".to_string()), "the down server's tools are hidden");
    let server = || {
        let o = admin(dir.path(), &["status", "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["servers"][0].clone()
    };
    let _py = py_http_on(port);
    eventually("reconnected", async || {
        let s = server();
        s["state"] == "up" && s["connections"] == 2
    })
    .await;
    // From the reconnect: listed and callable within 2 s, every tool.
    let reconnected = std::time::Instant::now();
    loop {
        let mut now = names(&client).await;
        now.sort();
        if now == before {
            break;
        }
        assert!(
            reconnected.elapsed() < Duration::from_secs(2),
            "2 s after the reconnect, listed {now:?}, not {before:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = client.call_tool(add()).await.expect("add is callable, not an unknown tool");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let s = server();
    assert!(s["unavailable_calls"].as_u64().unwrap() >= 8, "the outage is the server's: {s}");
    let table = admin(dir.path(), &["status"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("CALLS REFUSED WHILE DOWN"), "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_forgets_its_sessions_is_re_listed_not_silently_resumed() {
    use crate::live::{connect, eventually, names, serve};
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("restart-now");
    let (_up, port) = evil_http(&["--forgetful", "{port}", control.to_str().unwrap()]);
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nmcp:\n  servers:\n    - name: forgetful\n      transport: streamable-http\n      url: http://127.0.0.1:{port}/mcp\n"
        ),
    )
    .unwrap();
    let (_host, url) = serve(dir.path());
    let (client, _) = connect(&url).await;
    assert!(names(&client).await.contains(&"lifetool".to_string()));
    // The server "restarts": old sessions get 404, and it serves other tools.
    std::fs::write(&control, "").unwrap();
    eventually("the new tool list replaces the old", async || {
        let n = names(&client).await;
        n.contains(&"newtool".to_string()) && !n.contains(&"lifetool".to_string())
    })
    .await;
    let r = client.call_tool(rmcp::model::CallToolRequestParams::new("newtool")).await.unwrap();
    assert_eq!(r.content[0].as_text().map(|t| t.text.as_str()), Some("life 1"), "{r:?}");
}

/// Runs `toolhost` with `args` in `dir` (as [`run`] does) and samples its
/// peak resident size (`VmHWM` in `/proc/<pid>/status`, which only grows)
/// until it exits: its output and the largest peak seen, in KiB.
fn run_measured(dir: &Path, args: &[&str]) -> (std::process::Output, u64) {
    use std::io::Read as _;
    use std::process::Stdio;
    let mut child = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_LOG", "warn")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let (out, err) = (drain(Box::new(child.stdout.take().unwrap())), drain(Box::new(child.stderr.take().unwrap())));
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        let hwm = std::fs::read_to_string(&status).unwrap_or_default();
        if let Some(kib) = hwm.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
            peak_kib = peak_kib.max(kib.trim().trim_end_matches(" kB").parse().unwrap_or(0));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let output = std::process::Output { status: exit, stdout: out.join().unwrap(), stderr: err.join().unwrap() };
    (output, peak_kib)
}

#[test]
fn an_upstreams_enormous_result_is_cut_as_it_arrives_and_answered_output_too_large() {
    // 200 MB in one line: rmcp alone drops a line over 16 MiB without a
    // word, and the call waited for its whole deadline.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), evil_config(dir.path())).unwrap();
    let (o, peak_kib) = run_measured(dir.path(), &["call", "enormous", "{}"]);
    assert!(!o.status.success());
    // Cut as it arrives: the host never holds the answer (about 80 MiB
    // at its peak here; a host reading the whole line first peaks past
    // 600 MiB).
    assert!(peak_kib > 0, "the peak was sampled");
    assert!(peak_kib < 200 << 10, "the host held {peak_kib} KiB at its peak: more than the 200 MB answer");
    let err = stderr(&o);
    assert!(err.contains("output limit"), "output_too_large, not a timeout: {err}");
    assert!(!err.contains("timed out") && !err.contains("deadline"), "{err}");
    assert!(stdout(&o).len() < 4096, "nothing of it is printed");
    // The connection survives the cut: the next call on it is answered.
    let o = run(dir.path(), "warn", &["call", "evil_dotted_name", "{}"]);
    assert_eq!(stdout(&o).trim(), "called dotted.name", "{}", stderr(&o));
}

/// `toolhost serve --http` with the config in `dir`, its log at `info`
/// going to `dir/host.log`.
fn serve_logged(dir: &Path) -> (Proc, String) {
    let mut cmd = crate::common::toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).env("TOOLHOST_LOG", "info").args([
        "serve",
        "--http",
        "127.0.0.1:0",
    ]);
    let log = std::fs::File::create(dir.join("host.log")).unwrap();
    crate::live::spawn_serving_logged(cmd, log)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_notification_flooding_upstream_keeps_the_log_small_and_is_re_listed_at_most_once_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let lists = dir.path().join("lists");
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nmcp:\n  servers:\n    - name: flood\n      transport: stdio\n      command: {} {} --flood {}\n",
            python().display(),
            peers_dir().join("evil_server.py").display(),
            lists.display()
        ),
    )
    .unwrap();
    let (_host, url) = serve_logged(dir.path());
    let started = std::time::Instant::now();
    let (client, _) = crate::live::connect(&url).await;
    let listed = |l: &Path| std::fs::read_to_string(l).ok().and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(0);
    crate::live::eventually("the flood is on (tools/list answered at least twice)", async || listed(&lists) >= 2).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    // The host keeps serving through it.
    let roll = rmcp::model::CallToolRequestParams::new("roll")
        .with_arguments(serde_json::json!({"expression": "1d6"}).as_object().unwrap().clone());
    let r = client.call_tool(roll).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let elapsed = started.elapsed().as_secs_f64();
    let log = std::fs::metadata(dir.path().join("host.log")).unwrap().len();
    // Under 1 MB a minute at `info`, pro rata.
    let allowed = 1_000_000.0 * elapsed / 60.0;
    let text = std::fs::read_to_string(dir.path().join("host.log")).unwrap_or_default();
    assert!((log as f64) < allowed, "{log} bytes of log in {elapsed:.1} s: {:.2000}", text);
    let relists = listed(&lists);
    // One at connection, then at most one a second.
    assert!(relists as f64 <= elapsed + 2.0, "{relists} tools/list in {elapsed:.1} s");
    assert!(text.contains("notifications a second"), "the drop is said once: {text:.2000}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ten_thousand_tool_upstream_is_cut_at_max_tools_and_tools_list_pages() {
    use rmcp::model::PaginatedRequestParams;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nmcp:\n  servers:\n    - name: many\n      transport: stdio\n      command: {} {} --many 10000\n",
            python().display(),
            peers_dir().join("evil_server.py").display(),
        ),
    )
    .unwrap();
    let (_host, url) = serve_logged(dir.path());
    let (client, _) = crate::live::connect(&url).await;
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = client.list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor.take()))).await.unwrap();
        pages.push(page.tools.len());
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(pages.len() < 10, "{pages:?}");
    }
    assert!(pages.len() >= 3 && pages[0] == 500 && pages[1] == 500, "{pages:?}");
    let all = client.list_all_tools().await.unwrap();
    assert_eq!(all.len(), pages.iter().sum::<usize>());
    // The first 1,000 it lists: its 12 own tools, then many_0 ... many_987.
    let many = all
        .iter()
        .filter(|t| t.name.strip_prefix("many_").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .count();
    assert_eq!(many, 988, "the first 1000 of its listing");
    assert!(all.iter().any(|t| t.name == "many_987") && !all.iter().any(|t| t.name == "many_988"));
    let names: std::collections::HashSet<_> = all.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names.len(), all.len(), "no tool on two pages");
    let bad = client.list_tools(Some(PaginatedRequestParams::default().with_cursor(Some("nonsense".into())))).await;
    assert!(bad.is_err(), "an invalid cursor is an error: {bad:?}");
    let log = std::fs::read_to_string(dir.path().join("host.log")).unwrap();
    assert!(log.contains("more than 1000 tools") && log.contains("many"), "{log:.2000}");
}
