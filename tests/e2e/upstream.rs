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
    assert_eq!(names.len(), 8, "{names:?}");
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
    crate::live::eventually("py's tools join, announced", async || {
        let names: Vec<String> = client.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect();
        names.contains(&"add".to_string()) && count.load(Ordering::SeqCst) > 0
    })
    .await;
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
    eventually("the down server's tools are hidden, with list_changed", async || {
        !names(&client).await.contains(&"add".to_string()) && changes.load(Ordering::SeqCst) > before
    })
    .await;
    let hidden = changes.load(Ordering::SeqCst);

    // A new process on the same port: the old session means nothing to it.
    let _py = py_http_on(port);
    eventually("re-initialized and listed again", async || {
        names(&client).await.contains(&"add".to_string()) && changes.load(Ordering::SeqCst) > hidden
    })
    .await;
    let add = rmcp::model::CallToolRequestParams::new("add")
        .with_arguments(serde_json::json!({"a": 2, "b": 3}).as_object().unwrap().clone());
    let r = client.call_tool(add).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
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
