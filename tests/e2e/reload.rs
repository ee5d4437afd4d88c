//! Config reload through the binary (`toolhost reload`, SIGHUP): an edited
//! allow-list reaches an open session (with `tools/list_changed`); a new
//! agent gets an endpoint and a removed one's endpoint is gone; an invalid
//! edit changes nothing and says why; a grant taken away unloads the
//! plugin that needs it and giving it back loads it again; a key no longer
//! trusted unloads what it signed; a server added to the config starts, one
//! taken out stops; new limits hold for the next call, and what the engine
//! was built with is reported as needing a restart.

use crate::common::{stderr, stdout};
use crate::live::{Client, Watcher, admin, eventually, names, serve};
use crate::peers::{peers_dir, python};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const SERVER: &str = "server:\n  rate_limit: { per_minute: 0 }\n";

fn write_config(dir: &Path, body: &str) {
    std::fs::write(dir.join("toolhost.yaml"), format!("{SERVER}{body}")).unwrap();
}

/// `toolhost reload` against the host serving from `dir`: (success, stdout + stderr).
fn reload(dir: &Path) -> (bool, String) {
    let o = admin(dir, &["reload"]);
    (o.status.success(), format!("{}{}", stdout(&o), stderr(&o)))
}

/// An MCP session on `<url><path>`; its list_changed count.
async fn session(url: &str, path: &str) -> (Client, Arc<AtomicUsize>) {
    let w = Watcher::default();
    let count = w.0.clone();
    let c = w.serve(StreamableHttpClientTransport::from_uri(format!("{url}{path}"))).await.expect("initialize");
    (c, count)
}

async fn call(c: &Client, tool: &str, args: Value) -> Result<rmcp::model::CallToolResult, rmcp::ServiceError> {
    c.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().unwrap().clone())).await
}

/// The HTTP status of an `initialize` POST to `<url><path>`.
async fn initialize_status(url: &str, path: &str) -> u16 {
    initialize_status_with(url, path, None).await
}

/// [`initialize_status`] with `Authorization: Bearer <token>`.
async fn initialize_status_with(url: &str, path: &str, token: Option<&str>) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}});
    let mut request = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    request.send().await.unwrap().status().as_u16()
}

/// Tokens go in with a reload: a new one works at once, a removed one is
/// refused, and one moved to another agent acts as that agent only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_change_with_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let agents = "npcs:\n  - name: Mira\n    tools: [roll]\n  - name: Bartok\n    tools: [roll]\n";
    let tokens = |list: &str| format!("{SERVER}  tokens:\n{list}{agents}");
    std::fs::write(
        d.join("toolhost.yaml"),
        tokens("    - token: mira-token-0000000001\n      agent: Mira\n    - token: dm-token-00000000001\n"),
    )
    .unwrap();
    let (_host, url) = serve(d);
    assert_eq!(initialize_status_with(&url, "/mcp/mira", Some("mira-token-0000000001")).await, 200);
    assert_eq!(initialize_status_with(&url, "/mcp/bartok", Some("bartok-token-000000001")).await, 401);

    // Mira's token now belongs to Bartok; Bartok's new token; the DM's token gone.
    std::fs::write(
        d.join("toolhost.yaml"),
        tokens("    - token: mira-token-0000000001\n      agent: Bartok\n    - token: bartok-token-000000001\n      agent: Bartok\n"),
    )
    .unwrap();
    let (ok, out) = reload(d);
    assert!(ok && out.contains("server.tokens"), "{out}");
    assert_eq!(initialize_status_with(&url, "/mcp/bartok", Some("bartok-token-000000001")).await, 200, "a new token");
    assert_eq!(initialize_status_with(&url, "/mcp/bartok", Some("mira-token-0000000001")).await, 200, "moved");
    assert_eq!(
        initialize_status_with(&url, "/mcp/mira", Some("mira-token-0000000001")).await,
        403,
        "a moved token no longer acts as Mira"
    );
    assert_eq!(initialize_status_with(&url, "/mcp", Some("dm-token-00000000001")).await, 401, "a removed token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_list_edit_and_a_reload_change_what_an_open_session_lists() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "npcs:\n  - name: Mira\n    budget_tier: fast\n    tools: [roll]\n");
    let (host, url) = serve(d);
    let (mira, changed) = session(&url, "/mcp/mira").await;
    assert_eq!(names(&mira).await, ["roll"]);
    assert_eq!(initialize_status(&url, "/mcp/bartok").await, 404, "no such agent yet");

    // The DM gives Mira the rules lookup, and adds Bartok.
    write_config(
        d,
        "npcs:\n  - name: Mira\n    budget_tier: fast\n    tools: [roll, get_rule]\n  - name: Bartok\n    tools: [roll_table]\n",
    );
    let (ok, out) = reload(d);
    assert!(ok, "{out}");
    assert!(out.contains("applied: npcs: Mira (tools)") && out.contains("applied: npcs: Bartok added"), "{out}");
    eventually("Mira's session is told its tools changed", async || changed.load(Ordering::SeqCst) >= 1).await;
    assert_eq!(names(&mira).await, ["get_rule", "roll"]);
    let rule = call(&mira, "get_rule", json!({"id": "spell-fireball"})).await.unwrap();
    assert_ne!(rule.is_error, Some(true), "{rule:?}");
    let (bartok, _) = session(&url, "/mcp/bartok").await;
    assert_eq!(names(&bartok).await, ["roll_table"], "the new agent's endpoint");

    // SIGHUP does the same: Mira is removed; her endpoint is gone and her
    // open session may no longer call anything.
    write_config(d, "npcs:\n  - name: Bartok\n    tools: [roll_table, roll]\n");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(host.0.id() as i32).unwrap(),
        rustix::process::Signal::HUP,
    )
    .unwrap();
    eventually("Bartok sees roll after SIGHUP", async || names(&bartok).await == ["roll", "roll_table"]).await;
    eventually("Mira's endpoint is gone", async || initialize_status(&url, "/mcp/mira").await == 404).await;
    let refused = call(&mira, "roll", json!({"expression": "1d4"})).await;
    assert!(
        refused.as_ref().is_err() || refused.as_ref().is_ok_and(|r| r.is_error == Some(true)),
        "a removed agent's session still called a tool: {refused:?}"
    );
    let (ok, out) = reload(d);
    assert!(ok && out.contains("nothing changed"), "{out}");
    drop(host);
}

/// A typo in an allow-list at 11pm does not take `roll` from Bartok
/// mid-game: the reload is refused (exit 1, naming the name and the likely
/// one), nothing changes; `--force` applies it, with a warning.
#[tokio::test(flavor = "multi_thread")]
async fn an_allow_list_typo_is_refused_and_changes_nothing_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "npcs:\n  - name: Bartok\n    budget_tier: fast\n    tools: [roll, roll_table]\n");
    let (_host, url) = serve(d);
    let (bartok, _) = session(&url, "/mcp/bartok").await;
    assert_eq!(names(&bartok).await, ["roll", "roll_table"]);

    write_config(d, "npcs:\n  - name: Bartok\n    budget_tier: fast\n    tools: [rol, roll_table]\n");
    let (ok, out) = reload(d);
    assert!(!ok, "refused: {out}");
    assert!(out.contains("npcs[0].tools: unknown tool \"rol\" (did you mean \"roll\"?)"), "{out}");
    assert!(out.contains("nothing changed") && out.contains("--force"), "{out}");
    assert_eq!(names(&bartok).await, ["roll", "roll_table"], "Bartok keeps roll");

    let o = admin(d, &["reload", "--force"]);
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success(), "{out}");
    assert!(out.contains("applied with --force: npcs[0].tools: unknown tool \"rol\""), "{out}");
    eventually("Bartok's list follows the forced file", async || names(&bartok).await == ["roll_table"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_edit_and_a_reload_change_nothing_and_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = "npcs:\n  - name: Mira\n    tools: [roll]\n";
    write_config(d, good);
    let (host, url) = serve(d);
    let (mira, changed) = session(&url, "/mcp/mira").await;
    assert_eq!(names(&mira).await, ["roll"]);
    // Every bad file also widens Mira's allow-list: had anything been put
    // in force, her session would see get_rule.
    let wider = "npcs:\n  - name: Mira\n    tools: [roll, get_rule]\n";
    let bad = [
        (format!("{SERVER}{wider}  - name: Mira\n    tools: []\n"), "duplicate agent name"),
        (format!("{SERVER}{wider}budget:\n  fast_ms: lots\n"), "fast_ms"),
        (
            format!("{SERVER}  tokens:\n    - token: 0123456789abcdefXYZ\n      agent: Ghost\n{wider}"),
            "server.tokens[0].agent",
        ),
        (
            format!(
                "{SERVER}{wider}plugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./no-such-dir\n          mode: read-only\n"
            ),
            "plugins.grants",
        ),
        (format!("{SERVER}{wider}trust:\n  key_files: [./missing.pub]\n"), "trust.key_files[0]"),
        (format!("{SERVER}{wider}mcp:\n  servers:\n    - name: bad name\n      command: echo\n"), "mcp.servers"),
        // Two names on one URL: the second would take Mira's endpoint.
        (format!("{SERVER}{wider}  - name: mira\n    tools: [write_file]\n"), "would be served at /mcp/mira"),
        // A grant over the host's own files: an agent could rewrite the config.
        (
            format!("{SERVER}{wider}plugins:\n  grants:\n    fileio:\n      files:\n        - dir: .\n"),
            "holds the config file",
        ),
        // A grant inside the host's state directory (the page's upload
        // staging is there): a plugin could plant what the DM installs.
        (
            format!(
                "{SERVER}{wider}plugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./state/ui-uploads\n"
            ),
            "lies inside the state directory",
        ),
        // A half-saved file is not "the defaults".
        (String::new(), "is empty"),
        ("# Mira's tools: TODO\n".to_string(), "is empty"),
    ];
    for (text, why) in bad {
        std::fs::write(d.join("toolhost.yaml"), text).unwrap();
        let (ok, out) = reload(d);
        assert!(!ok, "an invalid config was accepted ({why}): {out}");
        assert!(out.contains("nothing changed") && out.contains(why), "the error should name {why:?}: {out}");
    }
    // A file others can write is not obeyed.
    {
        use std::os::unix::fs::PermissionsExt as _;
        let file = d.join("toolhost.yaml");
        std::fs::write(&file, format!("{SERVER}{wider}")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (ok, out) = reload(d);
        assert!(!ok && out.contains("can be written by other users"), "{out}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    // Still serving, as before.
    assert_eq!(names(&mira).await, ["roll"]);
    let r = call(&mira, "roll", json!({"expression": "1d6"})).await.unwrap();
    assert_ne!(r.is_error, Some(true));
    assert_eq!(changed.load(Ordering::SeqCst), 0, "nothing changed, so no list_changed");
    // A file that does not load does not lock the DM out of the running
    // host: live commands find it anyway, and say what is wrong.
    std::fs::write(d.join("toolhost.yaml"), format!("{SERVER}{wider}budget:\n  fast_ms: lots\n")).unwrap();
    let o = admin(d, &["status"]);
    assert!(o.status.success(), "status with a broken file: {}", stderr(&o));
    assert!(
        stderr(&o).contains("fast_ms") && stderr(&o).contains("serves with the config it last read"),
        "{}",
        stderr(&o)
    );
    let o = admin(d, &["override", "Mira", "deep", "--for", "1m"]);
    assert!(o.status.success(), "override with a broken file: {}", stderr(&o));
    let o = admin(d, &["override", "Mira", "--clear"]);
    assert!(o.status.success(), "clearing with a broken file: {}", stderr(&o));
    // The file moved away (a DM tidying up): not the defaults, an error.
    std::fs::rename(d.join("toolhost.yaml"), d.join("toolhost.yaml.bak")).unwrap();
    let (ok, out) = reload(d);
    assert!(!ok && out.contains("nothing changed") && out.contains("toolhost.yaml"), "{out}");
    assert_eq!(names(&mira).await, ["roll"], "the defaults did not replace the config");
    write_config(d, wider);
    let (ok, out) = reload(d);
    assert!(ok, "{out}");
    eventually("the valid edit goes in", async || names(&mira).await == ["get_rule", "roll"]).await;
    drop(host);
}

/// Plugin events of `plugin` in the audit trail: (event, error).
fn plugin_events(dir: &Path, plugin: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir.join("state/audit.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["plugin"] == plugin && r["event"].as_str().is_some_and(|e| e.starts_with("plugin_")))
        .map(|r| (r["event"].as_str().unwrap().to_string(), r["error"].as_str().unwrap_or("").to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_taken_away_unloads_the_plugin_and_giving_it_back_loads_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "");
    let (host, url) = serve(d);
    let (op, changed) = session(&url, "/mcp").await;
    assert!(names(&op).await.contains(&"search_facts".to_string()));

    // memorytool holds `memory` by default; an explicit empty grant takes it away.
    write_config(d, "plugins:\n  grants:\n    memorytool: {}\n");
    let (ok, out) = reload(d);
    assert!(ok, "{out}");
    assert!(
        out.contains("plugin memorytool: unloaded") && out.contains("memory"),
        "the report should say memorytool was unloaded for want of memory: {out}"
    );
    eventually("the session is told", async || changed.load(Ordering::SeqCst) >= 1).await;
    let now = names(&op).await;
    assert!(!now.contains(&"search_facts".to_string()) && now.contains(&"roll".to_string()), "{now:?}");
    let events = plugin_events(d, "memorytool");
    assert!(
        events.iter().any(|(e, why)| e == "plugin_remove" && why.contains("memory")),
        "the unload is audited with its reason: {events:?}"
    );
    let o = admin(d, &["plugin", "list"]);
    assert!(stdout(&o).contains("memorytool: held back: unloaded:"), "{}", stdout(&o));

    // Given back: loaded again, and it works.
    write_config(d, "plugins:\n  grants:\n    memorytool: { memory: true }\n");
    let (ok, out) = reload(d);
    assert!(ok && out.contains("plugin memorytool: loaded again"), "{out}");
    eventually("search_facts is back", async || names(&op).await.contains(&"search_facts".to_string())).await;
    let r = call(&op, "search_facts", json!({"query": "dragon"})).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(plugin_events(d, "memorytool").iter().any(|(e, _)| e == "plugin_regrant"));
    drop(host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_to_the_config_starts_on_reload_and_one_taken_out_stops() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "");
    let (host, url) = serve(d);
    let (op, _) = session(&url, "/mcp").await;
    let server = format!(
        "mcp:\n  servers:\n    - name: py\n      transport: stdio\n      command: {} {}\n",
        python().display(),
        peers_dir().join("py_server.py").display()
    );
    write_config(d, &server);
    let (ok, out) = reload(d);
    assert!(ok && out.contains("server added py"), "{out}");
    eventually("the server's echo tool is listed", async || names(&op).await.iter().any(|n| n.contains("echo"))).await;
    // Its settings change: restarted. Then it goes.
    write_config(d, &format!("{server}      timeout_ms: 5000\n"));
    let (ok, out) = reload(d);
    assert!(ok && out.contains("server restarted py"), "{out}");
    write_config(d, "");
    let (ok, out) = reload(d);
    assert!(ok && out.contains("server removed py"), "{out}");
    eventually("the echo tool is gone", async || !names(&op).await.iter().any(|n| n.contains("echo"))).await;
    drop(host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_no_longer_trusted_unloads_the_plugins_it_signed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(crate::common::run_strict(d, &["keygen", "alice", "--out", "keys"]).status.success());
    std::fs::copy(toolhost_test_artifacts::SWAP_V1_PATH, d.join("weather.wasm")).unwrap();
    let o = crate::common::run_strict(d, &["sign", "weather.wasm", "--key", "keys/alice.key"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let trusted = "trust:\n  key_files: [keys/alice.pub]\nplugins:\n  files: [weather.wasm]\n";
    write_config(d, trusted);
    let mut cmd = crate::common::toolhost();
    cmd.current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).env_remove("TOOLHOST_ALLOW_UNSIGNED").args([
        "serve",
        "--http",
        "127.0.0.1:0",
    ]);
    let (host, url) = crate::live::spawn_serving(cmd);
    let (op, _) = session(&url, "/mcp").await;
    let before = names(&op).await;
    let weather: Vec<String> = {
        let o = admin(d, &["plugin", "list", "--json"]);
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        let p = v["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "weather").cloned();
        p.unwrap_or_else(|| panic!("weather is not loaded: {v}"))["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    };
    assert!(!weather.is_empty() && weather.iter().all(|t| before.contains(t)), "{weather:?} in {before:?}");

    // The DM stops trusting alice: what she signed goes.
    write_config(d, "plugins:\n  files: [weather.wasm]\n");
    let (ok, out) = reload(d);
    assert!(ok, "{out}");
    assert!(out.contains("plugin weather: unloaded: the trust policy now refuses it"), "{out}");
    eventually("weather's tools are gone", async || {
        let now = names(&op).await;
        weather.iter().all(|t| !now.contains(t))
    })
    .await;
    drop(host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_limits_hold_for_the_next_call_and_what_the_engine_fixed_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "");
    let (host, url) = serve(d);
    let (op, _) = session(&url, "/mcp").await;
    let roll = async || call(&op, "roll", json!({"expression": "2d6"})).await.unwrap();
    assert_ne!(roll().await.is_error, Some(true));
    write_config(d, "limits:\n  fuel: 1000\n  max_instances: 8\n");
    let (ok, out) = reload(d);
    assert!(ok && out.contains("applied: limits"), "{out}");
    assert!(out.contains("NOT applied, needs a restart: limits.max_instances"), "{out}");
    let starved = roll().await;
    assert_eq!(starved.is_error, Some(true), "1000 units of fuel cannot roll dice: {starved:?}");
    assert!(format!("{starved:?}").contains("fuel"), "{starved:?}");
    write_config(d, "");
    let (ok, out) = reload(d);
    assert!(ok, "{out}");
    assert_ne!(roll().await.is_error, Some(true), "the default fuel is back");
    drop(host);
}

/// A DM adds a plugin file with a typo in its path and reloads: the reload
/// says it needs a restart, and now also that the file is not there,
/// rather than leaving the next start to drop it.
#[test]
fn a_reload_naming_a_plugin_file_that_is_not_there_says_so() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let (_host, _url) = serve(dir.path());
    write_config(dir.path(), "plugins:\n  files: [plugins/weathr.wasm]\n");
    let (ok, out) = reload(dir.path());
    assert!(ok, "{out}");
    assert!(out.contains("NOT applied, needs a restart: plugins.files"), "{out}");
    assert!(out.contains("warning: plugins.files[0] (") && out.contains("weathr.wasm): no such file"), "{out}");
    // A command that loads the config's plugins names the entry too.
    let o = admin(dir.path(), &["tools"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("error: plugins.files[0]: cannot load plugin \"weathr\""), "{}", stderr(&o));
}
