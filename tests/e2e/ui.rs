//! The DM's page (issue #14, item 4) against a running `serve --http`: in
//! Debian's headless Chromium driven by playwright-core
//! (`tests/peers/ui_driver.js`, installed by `scripts/install-peers`), and
//! its API's access rules over plain HTTP.

use crate::common::toolhost;
use crate::live::{Proc, Watcher, eventually, names, spawn_serving};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use toolhost_test_artifacts::SWAP_V1_PATH;

/// `search_facts` (declared 200 ms) is DEEP here, `roll` FAST.
const CONFIG: &str = "server:\n  rate_limit: { per_minute: 0 }\nbudget:\n  fast_ms: 10\n  standard_ms: 40\n  background_calibration: false\nnpcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll, search_facts]\n";

/// `serve --http` in `dir` under the default trust policy (unsigned
/// plugins refused), with an empty compile cache of its own.
fn serve_strict(dir: &Path) -> (Proc, String) {
    let mut cmd = toolhost();
    cmd.current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env("TOOLHOST_CACHE_DIR", dir.join("cache"))
        .env_remove("TOOLHOST_ALLOW_UNSIGNED")
        .args(["serve", "--http", "127.0.0.1:0"]);
    spawn_serving(cmd)
}

/// Runs the page's driver in Chromium; its JSON report. Bounded: killed after 600 s.
fn drive(url: &str, shot: &Path, upload: &Path, agent: &str, slow: &Path) -> Value {
    let peers = crate::peers::peers_dir();
    let script = peers.join("ui_driver.js");
    assert!(
        peers.join("node_modules/playwright-core").exists() && Path::new("/usr/bin/chromium").exists(),
        "playwright-core or /usr/bin/chromium missing: run scripts/install-peers (as root)"
    );
    let child = std::process::Command::new(crate::peers::node22())
        .current_dir(&peers)
        .arg(script)
        .args([url, shot.to_str().unwrap(), upload.to_str().unwrap(), agent, slow.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(600);
    while proc.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the browser driver did not finish in 600 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut out = String::new();
    let mut err = String::new();
    use std::io::Read as _;
    proc.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    proc.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = proc.0.wait().unwrap();
    assert!(status.success(), "ui_driver.js failed: {err}\n{out}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap_or_default().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dms_page_in_chromium_shows_the_host_sets_overrides_and_refuses_unsigned_uploads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A signed plugin slow to compile (the 18 MB Python one), so the page
    // has a compile to show; calibration on, so the audit has probes (the
    // pins keep the tiers the test relies on); Bartok allowed 2 calls.
    assert!(crate::common::run_strict(d, &["keygen", "alice", "--out", "keys"]).status.success());
    let public: Value = serde_json::from_str(&std::fs::read_to_string(d.join("keys/alice.pub")).unwrap()).unwrap();
    std::fs::copy(crate::common::python_plugin(), d.join("npcnames.wasm")).unwrap();
    let o = crate::common::run_strict(d, &["sign", "npcnames.wasm", "--key", "keys/alice.key"]);
    assert!(o.status.success(), "{}", crate::common::stderr(&o));
    let config = format!(
        "server:\n  rate_limit: {{ per_minute: 0 }}\n  first_list_wait_ms: 0\nbudget:\n  fast_ms: 10\n  standard_ms: 40\n  pin: {{ roll: fast, search_facts: deep }}\n\
         trust:\n  keys:\n    - name: alice\n      public_key: {}\n\
         npcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll, search_facts]\n    rate_limit: {{ per_minute: 2, burst: 2 }}\n",
        public["public_key"].as_str().unwrap()
    );
    std::fs::write(d.join("toolhost.yaml"), config).unwrap();
    let (_host, url) = serve_strict(d);

    // A call over MCP, before the page opens.
    let op = ().serve(StreamableHttpClientTransport::from_uri(format!("{url}/mcp"))).await.expect("initialize");
    let params =
        CallToolRequestParams::new("roll").with_arguments(json!({"expression": "1d6"}).as_object().unwrap().clone());
    assert_ne!(op.call_tool(params.clone()).await.unwrap().is_error, Some(true));
    // The agent's session: FAST, so no search_facts. Three calls: the
    // third is over its rate.
    let w = Watcher::default();
    let changed = w.0.clone();
    let agent =
        w.serve(StreamableHttpClientTransport::from_uri(format!("{url}/mcp/bartok"))).await.expect("initialize");
    assert_eq!(names(&agent).await, vec!["roll".to_string()]);
    for _ in 0..2 {
        assert_ne!(agent.call_tool(params.clone()).await.unwrap().is_error, Some(true));
    }
    let over = agent.call_tool(params.clone()).await;
    assert!(format!("{over:?}").contains("rate"), "the third call is over the rate: {over:?}");

    let shot = dir.path().join("ui.png");
    let page = drive(&url, &shot, Path::new(SWAP_V1_PATH), "bartok", &d.join("npcnames.wasm"));

    // The signed plugin uploaded on the page: its compile was shown while
    // it ran, then it was installed.
    // A pairing code minted on the page for bartok, shown with its URL,
    // listed, then revoked with its row's button.
    let minted = page["pair_result"].as_str().unwrap();
    assert!(minted.starts_with("bartok: code ") && minted.contains(&format!("{url}/mcp/pair/")), "{page}");
    let rows = page["pair_rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{page}");
    assert_eq!((rows[0][1].as_str(), rows[0][2].as_str()), (Some("bartok"), Some("pending")), "{page}");
    assert!(minted.contains(rows[0][3].as_str().unwrap()), "the row shows the code minted: {page}");
    assert!(page["pair_revoked"].as_str().unwrap().starts_with("revoked "), "{page}");
    assert!(strings(&page["compiling"]).contains(&"npcnames".to_string()), "{page}");
    assert!(page["slow_upload"].as_str().unwrap().starts_with("Installed npcnames"), "{page}");
    // Bartok's row: his session, his last calls, the call over his rate,
    // and the tier picker starting at the tier he works at now.
    let activity = strings(&page["agent_activity"]);
    assert_eq!(activity[0], "1", "one live session: {activity:?}");
    assert!(activity[1].contains("roll ok"), "{activity:?}");
    assert!(activity[1].contains("capacity_exceeded") && activity[1].contains("rate"), "{activity:?}");
    assert_eq!(activity[2], "rate 1 · capacity 0", "{activity:?}");
    assert_eq!(page["picker_before"], "fast", "{page}");
    // Issue #52, item 18: the agents come first, then the tools, shown by
    // default only where there is a problem (fileio's, here), every one
    // when asked.
    assert_eq!(strings(&page["sections"])[..2], ["Agents", "Tools"], "{page}");
    let (shown, problems) = (strings(&page["tools_shown"]), strings(&page["tools_problem"]));
    assert!(shown.contains(&"read_file".to_string()) && shown.contains(&"write_file".to_string()), "{page}");
    assert!(shown.iter().all(|t| problems.contains(t)), "only tools with a problem by default: {page}");
    assert!(shown.len() < strings(&page["tools"]).len(), "{page}");
    assert_eq!(page["tools_shown_all"], page["tools"].as_array().unwrap().len(), "{page}");
    assert!(page["tools_summary"].as_str().unwrap().contains("need a look"), "{page}");
    // fileio has no directory granted: its tools are marked, not FAST.
    let unusable = page["unusable"].as_object().unwrap();
    for t in ["read_file", "write_file"] {
        assert!(unusable[t].as_str().unwrap().contains("needs a `files` grant"), "{t}: {page}");
    }
    assert!(!unusable.contains_key("roll"), "{page}");
    // roll's latency picture: its p50 against the FAST ceiling.
    assert_eq!(page["roll_picture"]["ceiling"], "10", "{page}");
    assert!(page["roll_picture"]["p50"].as_str().unwrap().parse::<f64>().is_ok(), "{page}");
    // The audit panel's "Only" fields, as `toolhost audit` filters: the
    // agent's records alone (his calls and his refusal), then those that
    // did not end ok (his refusal).
    let by_agent = page["audit_agent_only"].as_array().unwrap();
    assert!(!by_agent.is_empty() && by_agent.iter().all(|r| r[2] == "bartok"), "{by_agent:?}");
    assert!(by_agent.iter().any(|r| r[1] == "refused"), "{by_agent:?}");
    let errors = page["audit_errors_only"].as_array().unwrap();
    assert!(!errors.is_empty() && errors.iter().all(|r| r[4] != "ok"), "{errors:?}");
    // Probes: there, and hidden until the DM asks for them.
    assert_eq!(page["probe_rows_default"], 0, "{page}");
    assert!(page["probe_rows_shown"].as_u64().unwrap() > 0, "{page}");

    // The page loads, under its CSP, with no script errors.
    assert_eq!(page["status"], 200, "{page}");
    assert!(page["csp"].as_str().unwrap().starts_with("default-src 'self'"), "{page}");
    let errors: Vec<String> = strings(&page["console_errors"])
        .into_iter()
        .filter(|e| !e.contains("422")) // the refused upload's reply
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    // The built-ins.
    let tools = strings(&page["tools"]);
    for t in ["roll", "roll_table", "get_rule", "search_rules", "read_file", "write_file", "search_facts"] {
        assert!(tools.contains(&t.to_string()), "{t} not on the page: {tools:?}");
    }
    let plugins = page["plugins"].as_array().unwrap();
    for p in ["diceroller", "fileio", "memorytool", "ruleslookup"] {
        let row = plugins.iter().find(|r| r["name"] == p).unwrap_or_else(|| panic!("{p}: {page}"));
        assert!(row["origin"].as_str().unwrap().starts_with("built in"), "{row}");
    }
    // The call made over MCP: counted on the tool's row, and in the audit.
    let roll = strings(&page["roll_row"]);
    assert_eq!(roll[0], "roll");
    assert!(roll[5].parse::<u32>().unwrap() >= 1, "calls: {roll:?}");
    assert!(roll[6].ends_with("ms"), "measured p50: {roll:?}");
    let audit = page["audit"].as_array().unwrap();
    assert!(
        audit.iter().any(|r| r[1] == "call" && r[2] == "(operator)" && r[3] == "roll" && r[4] == "ok"),
        "the audit on the page: {audit:?}"
    );
    // The override set on the page: the agent's row says so ...
    assert_eq!(strings(&page["agent_before"])[4], "roll", "{page}");
    let after = strings(&page["agent_after"]);
    assert_eq!(after[2], "deep", "{after:?}");
    // Minutes and seconds, as `toolhost agents` says it.
    assert!(after[3].starts_with("deep (4m ") && after[3].ends_with("s left)"), "{after:?}");
    assert_eq!(after[4], "roll, search_facts", "{after:?}");
    // ... and the agent's MCP session is told, and sees the DEEP tool.
    eventually("tools/list_changed after the page's override", async || changed.load(Ordering::SeqCst) > 0).await;
    assert_eq!(names(&agent).await, vec!["roll".to_string(), "search_facts".to_string()]);
    // The unsigned upload: refused on the page with the trust policy's words,
    // nothing installed, and the refusal audited.
    let refused = page["upload_result"].as_str().unwrap();
    assert!(refused.starts_with("Refused:") && refused.contains("is not signed"), "{refused}");
    assert_eq!(page["upload_class"], "result error");
    assert!(!strings(&page["plugins_after"]).contains(&"swap_v1".to_string()), "{page}");
    assert!(
        page["audit_after"].as_array().unwrap().iter().any(|r| r[1] == "plugin_refused" && r[3] == "swap_v1"),
        "{page}"
    );
    // The staged upload is gone.
    let staged = dir.path().join("state/ui-uploads");
    assert_eq!(std::fs::read_dir(&staged).unwrap().count(), 0, "left in {}", staged.display());
    // The screenshot is a PNG; `UPDATE_UI_SCREENSHOT=1` keeps it as docs/ui.png.
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{} bytes", png.len());
    if std::env::var_os("UPDATE_UI_SCREENSHOT").is_some() {
        std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ui.png"), &png).unwrap();
    }
    agent.cancel().await.unwrap();
    op.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_and_its_api_are_the_operators_only() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{CONFIG}  - name: greymantle\n    budget_tier: fast\n    tools: [roll]\nlimits:\n  max_component_mib: 2\nserver:\n  rate_limit: {{ per_minute: 0 }}\n  tokens:\n    - token: operator-secret-0123456789\n    - token: agent-secret-0123456789ab\n      agent: bartok\n"
    )
    .replace("server:\n  rate_limit: { per_minute: 0 }\nbudget", "budget");
    std::fs::write(dir.path().join("toolhost.yaml"), config).unwrap();
    let (_host, url) = serve_strict(dir.path());
    let http = reqwest::Client::new();
    let state = format!("{url}/ui/api/state");
    let get = |token: Option<&str>| {
        let mut r = http.get(&state);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    // The page's files hold no data: served, under the CSP.
    let page = http.get(format!("{url}/ui")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    assert!(page.text().await.unwrap().contains("/ui/app.js"));
    // `/` and `/ui/` lead to the page (reqwest follows the redirect).
    for path in ["/", "/ui/"] {
        let r = http.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.url().path()), (200, "/ui"), "{path}");
    }
    let r = http.get(format!("{url}/ui")).bearer_auth("agent-secret-0123456789ab").send().await.unwrap();
    assert_eq!(r.status(), 403, "an agent's token never gets the page");
    // The API: no token 401, an agent's token 403, the operator's 200.
    assert_eq!(get(None).await.unwrap().status(), 401);
    assert_eq!(get(Some("agent-secret-0123456789ab")).await.unwrap().status(), 403);
    let ok = get(Some("operator-secret-0123456789")).await.unwrap();
    assert_eq!(ok.status(), 200);
    let s: Value = ok.json().await.unwrap();
    assert!(s["tools"].as_array().unwrap().iter().any(|t| t["name"] == "roll"), "{s}");
    assert_eq!(s["max_upload_bytes"], (2 << 20) + (1 << 16));
    // A cross-origin page is refused, and so is a write without the page's header.
    let r = http
        .get(&state)
        .bearer_auth("operator-secret-0123456789")
        .header("Origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let set = json!({"agent": "bartok", "tier": "deep", "for_secs": 60});
    let r = http
        .post(format!("{url}/ui/api/overrides"))
        .bearer_auth("operator-secret-0123456789")
        .json(&set)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("x-toolhost-ui"));
    let r = http
        .post(format!("{url}/ui/api/overrides"))
        .bearer_auth("agent-secret-0123456789ab")
        .header("X-Toolhost-UI", "1")
        .json(&set)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "an agent cannot set overrides through the page");
    let r = http
        .post(format!("{url}/ui/api/overrides"))
        .bearer_auth("operator-secret-0123456789")
        .header("X-Toolhost-UI", "1")
        .json(&set)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["dm_override"]["tier"], "deep");
    // The admin API's validation, as it is.
    let r = http
        .post(format!("{url}/ui/api/overrides"))
        .bearer_auth("operator-secret-0123456789")
        .header("X-Toolhost-UI", "1")
        .json(&json!({"agent": "nobody", "tier": "deep", "for_secs": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Uploads: capped at the plugin size limit, named NAME.wasm.
    let upload = |name: &'static str, body: Vec<u8>| {
        http.post(format!("{url}/ui/api/plugins"))
            .bearer_auth("operator-secret-0123456789")
            .header("X-Toolhost-UI", "1")
            .header("Content-Type", "application/wasm")
            .header("X-Toolhost-File-Name", name)
            .body(body)
            .send()
    };
    assert_eq!(upload("big.wasm", vec![0u8; (2 << 20) + (1 << 16) + 1]).await.unwrap().status(), 413);
    assert_eq!(upload("../evil.wasm", b"\0asm".to_vec()).await.unwrap().status(), 400);
    let r = upload("swap_v1.wasm", std::fs::read(SWAP_V1_PATH).unwrap()).await.unwrap();
    assert_eq!(r.status(), 422);
    assert!(r.text().await.unwrap().contains("is not signed"));
}
