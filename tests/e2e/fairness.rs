//! No caller harms another (#28), through the real binary: what one agent
//! does within its allow-list and rate limit changes nothing another agent
//! sees or can call.

use crate::common::{stderr, stdout, toolhost};
use crate::live::{Client, Watcher, eventually, logged, names, running, serve};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use toolhost_test_artifacts::HOSTILE_PATH;

async fn connect(url: &str, path: &str) -> Client {
    Watcher::default().serve(StreamableHttpClientTransport::from_uri(format!("{url}{path}"))).await.expect("initialize")
}

/// Calls `sleep` for `ms`; the result's `_meta.toolhost.kind` when it
/// failed, `None` when it answered.
async fn sleep(c: &Client, ms: u64) -> Option<String> {
    sleep_on(c.peer().clone(), ms).await
}

async fn sleep_on(peer: rmcp::Peer<rmcp::RoleClient>, ms: u64) -> Option<String> {
    let params = CallToolRequestParams::new("sleep").with_arguments(json!({"ms": ms}).as_object().unwrap().clone());
    match peer.call_tool(params).await {
        Ok(r) if r.is_error != Some(true) => None,
        Ok(r) => Some(r.meta.as_ref().and_then(|m| m.0["toolhost"]["kind"].as_str()).unwrap_or("error").to_string()),
        Err(e) => Some(e.to_string()),
    }
}

/// The issue's first finding, as the attacker made it: Alice times a tool
/// out twelve times, well inside her rate limit. Her own view demotes it
/// (her FAST ceiling no longer shows it); Dora, at the same FAST ceiling,
/// still lists and calls it, and so does the operator; `stats` says for
/// how many callers it is demoted.
#[tokio::test(flavor = "multi_thread")]
async fn one_agents_timeouts_leave_another_agents_listing_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nplugins:\n  files: [{HOSTILE_PATH:?}]\n\
             budget:\n  fast_ms: 300\n  background_calibration: false\n  pin: {{ sleep: fast }}\n\
             npcs:\n  - name: alice\n    budget_tier: fast\n    tools: [sleep]\n  - name: dora\n    budget_tier: fast\n    tools: [sleep]\n"
        ),
    )
    .unwrap();
    let (_host, url) = serve(dir.path());
    let (alice, dora, operator) =
        (connect(&url, "/mcp/alice").await, connect(&url, "/mcp/dora").await, connect(&url, "/mcp").await);
    assert_eq!(names(&alice).await, ["sleep"]);
    assert_eq!(names(&dora).await, ["sleep"]);
    // Twelve calls, four at a time, each timing out, until her own view
    // demotes the tool (5 calls, `min_health_samples`): then they are
    // refused as unknown to her.
    let mut timeouts = 0;
    for _ in 0..3 {
        let calls: Vec<_> = (0..4).map(|_| tokio::spawn(sleep_on(alice.peer().clone(), 5000))).collect();
        for call in calls {
            match call.await.unwrap() {
                Some(kind) if kind == "timeout" => timeouts += 1,
                Some(refused) if refused.contains("unknown tool \"sleep\"") => {}
                other => panic!("{other:?}"),
            }
        }
    }
    assert!(timeouts >= 5, "{timeouts} timeouts");
    assert!(names(&alice).await.is_empty(), "alice's own view demotes sleep below her FAST ceiling");
    assert_eq!(names(&dora).await, ["sleep"], "dora still lists it");
    assert_eq!(sleep(&dora, 1).await, None, "and calls it");
    assert!(names(&operator).await.contains(&"sleep".to_string()), "so does the operator");
    assert_eq!(sleep(&operator, 1).await, None);
    // The operator's figures: every caller's calls, the shared tier, and
    // one caller for whom the tool is demoted.
    let o = toolhost()
        .current_dir(dir.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .args(["stats", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let stats: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let row = stats.as_array().unwrap().iter().find(|r| r["tool"] == "sleep").unwrap();
    let b = row;
    assert_eq!(
        (b["tier"].as_str(), b["demoted"].as_bool(), b["demoted_for"].as_u64()),
        (Some("fast"), Some(false), Some(1)),
        "{row}"
    );
    assert_eq!(b["calls"], timeouts + 2, "{row}");
    for c in [alice, dora, operator] {
        c.cancel().await.unwrap();
    }
}

/// The issue's second finding: two agents flooding a slow plugin took all
/// its slots and locked every other caller out. Now Alice and Bob, twelve
/// 600 ms calls each at all times against sixteen slots, are held to what
/// the reserve leaves them (their surplus waits, then is refused with
/// `capacity_exceeded`), and Carol's calls, one at a time, succeed.
#[tokio::test(flavor = "multi_thread")]
async fn two_flooding_agents_leave_a_third_its_calls() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nplugins:\n  files: [{HOSTILE_PATH:?}]\n\
             limits:\n  plugin_concurrency: 16\n\
             budget:\n  background_calibration: false\n  pin: {{ sleep: deep }}\n\
             npcs:\n  - name: alice\n    budget_tier: deep\n    tools: [sleep]\n  - name: bob\n    budget_tier: deep\n    tools: [sleep]\n  - name: carol\n    budget_tier: deep\n    tools: [sleep]\n"
        ),
    )
    .unwrap();
    let (_host, url) = serve(dir.path());
    let (alice, bob, carol) =
        (connect(&url, "/mcp/alice").await, connect(&url, "/mcp/bob").await, connect(&url, "/mcp/carol").await);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut floods = Vec::new();
    for c in [&alice, &bob] {
        for _ in 0..12 {
            let (peer, stop) = (c.peer().clone(), stop.clone());
            floods.push(tokio::spawn(async move {
                let (mut ok, mut refused) = (0, 0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match sleep_on(peer.clone(), 600).await {
                        None => ok += 1,
                        Some(kind) if kind == "capacity_exceeded" => refused += 1,
                        Some(other) => panic!("a flooding call failed otherwise: {other}"),
                    }
                }
                (ok, refused)
            }));
        }
    }
    // The flood fills every slot it may: all but the reserve (an eighth,
    // kept for light callers). Then Carol calls, one at a time.
    let reserve = 16 / 8;
    eventually("the flood holds all but the reserve", async || running(&url, "hostile").await == 16 - reserve).await;
    let (mut ok, mut total) = (0, 0);
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(4) {
        total += 1;
        match sleep(&carol, 20).await {
            None => ok += 1,
            Some(kind) => assert_eq!(kind, "capacity_exceeded", "carol's call failed otherwise"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut flood_ok, mut flood_refused) = (0, 0);
    for f in floods {
        let (o, r) = f.await.unwrap();
        flood_ok += o;
        flood_refused += r;
    }
    assert!(ok * 100 >= total * 95, "carol: {ok} of {total} calls succeeded");
    assert!(
        flood_refused > 0 && flood_ok > 0,
        "the flood ran ({flood_ok}) and was held to its share ({flood_refused})"
    );
    for c in [alice, bob, carol] {
        c.cancel().await.unwrap();
    }
}

/// The unprivileged local user of the access tests (scripts/install-peers
/// creates it).
const OTHER_USER: &str = "toolhost-peer";

/// `read_file` of `path` through `c`: the file's content, or the error.
async fn read_file(c: &Client, path: &str) -> Result<String, String> {
    let params =
        CallToolRequestParams::new("read_file").with_arguments(json!({"path": path}).as_object().unwrap().clone());
    let r = c.call_tool(params).await.map_err(|e| e.to_string())?;
    let text = r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
    if r.is_error == Some(true) {
        return Err(text);
    }
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    Ok(v["content"].as_str().unwrap_or_default().to_string())
}

/// The issue's third finding: a granted directory whose parent another
/// local user could write was swapped by that user for a symbolic link to
/// the host's state, and the next `read_file` returned the admin token.
/// Now the directory is held open from the grant on: after the swap the
/// plugin still reads the granted directory and nothing of the state, and
/// `doctor` (as start and reload do) refuses the grant the parent now
/// exposes.
#[tokio::test(flavor = "multi_thread")]
async fn a_granted_directory_swapped_by_another_user_leads_nowhere_new() {
    use std::os::unix::fs::PermissionsExt as _;
    let ok = std::process::Command::new("id").arg(OTHER_USER).output().is_ok_and(|o| o.status.success());
    assert!(ok, "no Unix user {OTHER_USER}: run scripts/install-peers as root");
    let t = tempfile::tempdir().unwrap();
    // The other user may pass through, as through any home directory.
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let parent = t.path().join("parent");
    let campaign = parent.join("campaign");
    std::fs::create_dir_all(&campaign).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(campaign.join("notes.txt"), "the granted notes").unwrap();
    std::fs::write(
        t.path().join("toolhost.yaml"),
        "server:\n  rate_limit: { per_minute: 0 }\nplugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./parent/campaign\n          mode: read-only\n",
    )
    .unwrap();
    let (host, url) = serve(t.path());
    let c = connect(&url, "/mcp").await;
    assert_eq!(read_file(&c, "notes.txt").await.unwrap(), "the granted notes");
    let record = format!("admin/{}.json", host.0.id());
    assert!(t.path().join("state").join(&record).exists(), "the admin record the attacker wants");

    // The parent passes to the other user, who swaps the granted name for
    // a symbolic link to the host's state directory.
    std::os::unix::fs::chown(&parent, Some(uid_of(OTHER_USER)), None).unwrap();
    let swap = std::process::Command::new("setpriv")
        .args(["--reuid", OTHER_USER, "--regid", OTHER_USER, "--clear-groups", "--", "sh", "-c"])
        .arg(format!("mv campaign moved && ln -s {} campaign", t.path().join("state").display()))
        .current_dir(&parent)
        .output()
        .unwrap();
    assert!(swap.status.success(), "the swap: {}", String::from_utf8_lossy(&swap.stderr));
    assert!(std::fs::read_link(&campaign).is_ok(), "the granted name is a symbolic link now");

    assert_eq!(read_file(&c, "notes.txt").await.unwrap(), "the granted notes", "still the granted directory");
    let stolen = read_file(&c, &record).await;
    assert!(stolen.is_err(), "the admin record through the swapped name: {stolen:?}");
    c.cancel().await.unwrap();

    // What start and reload check, doctor says: the grant is refused now.
    let o = toolhost()
        .current_dir(t.path())
        .env("TOOLHOST_STATE_DIR", t.path().join("state"))
        .args(["doctor"])
        .output()
        .unwrap();
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert!(!o.status.success(), "{said}");
    assert!(said.contains("can be changed by another user"), "{said}");
}

fn uid_of(user: &str) -> u32 {
    let o = std::process::Command::new("id").args(["-u", user]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// The issue's fifth finding: one call opened 19,964 files and the host
/// logged "Too many open files" on accept. Now a call holds at most
/// `limits.max_open_files` (256, its granted directory's own descriptor
/// included) and its next open fails with `quota`; the host goes on
/// accepting connections and answering calls.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_opening_twenty_thousand_files_stops_at_the_cap() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("data")).unwrap();
    std::fs::write(t.path().join("data/held"), "x").unwrap();
    std::fs::write(
        t.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nplugins:\n  files: [{HOSTILE_PATH:?}]\n  grants:\n    hostile:\n      files:\n        - dir: ./data\n          mode: read-only\n"
        ),
    )
    .unwrap();
    let (_host, url) = serve(t.path());
    let c = connect(&url, "/mcp").await;
    let params = CallToolRequestParams::new("hold_open")
        .with_arguments(json!({"path": "/held", "count": 20_000}).as_object().unwrap().clone());
    let r = c.call_tool(params).await.unwrap();
    let text = r.content[0].as_text().unwrap().text.clone();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!((v["opened"].as_u64(), v["kind"].as_str()), (Some(255), Some("QuotaExceeded")), "{v}");
    // A second call gets its own 256: nothing leaked from the first.
    let params = CallToolRequestParams::new("hold_open")
        .with_arguments(json!({"path": "/held", "count": 20_000}).as_object().unwrap().clone());
    let r = c.call_tool(params).await.unwrap();
    assert!(r.content[0].as_text().unwrap().text.contains(r#""opened": 255"#), "{r:?}");
    // New connections are accepted and answered.
    for _ in 0..3 {
        let fresh = connect(&url, "/mcp").await;
        assert!(names(&fresh).await.contains(&"hold_open".to_string()));
        fresh.cancel().await.unwrap();
    }
    c.cancel().await.unwrap();
}

/// The issue's fourth finding: 40 calls with 900 KB unknown tool names
/// grew the audit by 54.9 MB (and stderr by 18.9 MB, where the names,
/// unquoted, could forge logfmt fields), and the page then showed no
/// record. Now the refusals are one record per agent, reason and second,
/// names are cut to a prefix and a hash, the log quotes them, and the page
/// shows whole records.
#[tokio::test(flavor = "multi_thread")]
async fn huge_name_calls_barely_grow_the_audit_and_the_page_shows_records() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("toolhost.yaml"), "server:\n  rate_limit: { per_minute: 0 }\n").unwrap();
    let log_path = t.path().join("serve.log");
    let (mut host, url) = {
        use std::io::BufRead as _;
        let mut child = toolhost()
            .current_dir(t.path())
            .env("TOOLHOST_STATE_DIR", t.path().join("state"))
            .args(["serve", "--http", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        out.read_line(&mut banner).unwrap();
        std::thread::spawn(move || for _ in out.lines() {});
        (crate::live::Proc(child), banner.split_whitespace().last().unwrap().to_string())
    };
    let c = connect(&url, "/mcp").await;
    // Something in the trail before the flood.
    let params =
        CallToolRequestParams::new("roll").with_arguments(json!({"expression": "1d20"}).as_object().unwrap().clone());
    assert_ne!(c.call_tool(params).await.unwrap().is_error, Some(true));
    let audit = t.path().join("state/audit.jsonl");
    let before = std::fs::metadata(&audit).unwrap().len();
    let forged = format!("{} agent=\"dm\" tool=roll outcome=ok", "x".repeat(900 * 1024));
    for _ in 0..40 {
        let r = c.call_tool(CallToolRequestParams::new(forged.clone())).await;
        assert!(r.is_err_and(|e| e.to_string().contains("unknown tool")));
    }
    // The page reads the trail (and writes the refusals counted so far).
    let state: Value = reqwest::get(format!("{url}/ui/api/state")).await.unwrap().json().await.unwrap();
    let records = state["audit"]["records"].as_array().unwrap();
    let refused: u64 = records.iter().filter(|r| r["event"] == "refused").map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(refused, 40, "{records:?}");
    assert!(records.iter().any(|r| r["tool"] == "roll"), "the records before the flood: {records:?}");
    let grown = std::fs::metadata(&audit).unwrap().len() - before;
    assert!(grown < 1 << 20, "the audit grew {grown} bytes");
    c.cancel().await.unwrap();
    // The log: the refusals counted, no forged field, well under a megabyte.
    let _ = std::process::Command::new("kill").args(["-TERM", &host.0.id().to_string()]).status();
    let _ = host.0.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.len() < 1 << 20, "{} bytes of log", log.len());
    assert!(!log.contains("agent=\"dm\" tool=roll outcome=ok\""), "a forged field in the log");
}

/// `serve` spawned in `dir` with `config`, its log in `dir/serve.log`: the
/// process and its URL.
fn serve_with(dir: &std::path::Path, config: &str) -> (crate::live::Proc, String) {
    std::fs::write(dir.join("toolhost.yaml"), config).unwrap();
    let mut cmd = toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(["serve", "--http", "127.0.0.1:0"]);
    crate::live::spawn_serving_logged(cmd, std::fs::File::create(dir.join("serve.log")).unwrap())
}

fn signal(proc: &crate::live::Proc, sig: &str) {
    assert!(std::process::Command::new("kill").args([sig, &proc.0.id().to_string()]).status().unwrap().success());
}

/// The exit status of `proc` once it exits, and how long that took; `None`
/// when it is still running after `within`.
fn exit_within(
    proc: &mut crate::live::Proc,
    within: std::time::Duration,
) -> Option<(std::process::ExitStatus, std::time::Duration)> {
    let started = std::time::Instant::now();
    while started.elapsed() < within {
        if let Some(status) = proc.0.try_wait().unwrap() {
            return Some((status, started.elapsed()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// An agent whose `sleep` may run 15 s: a call stays in flight as long as
/// a test needs it to.
const SLEEPER: &str = "budget:\n  long_tools:\n    - tool: sleep\n      timeout_ms: 15000\n      agents: [Sleeper]\nnpcs:\n  - name: Sleeper\n    budget_tier: deep\n    tools: [sleep]\n";

/// The issue's seventh finding: on SIGTERM with a session open, `serve`
/// stopped answering but was still alive after 65 s. Now, with three
/// sessions open, it refuses new sessions (503, `Retry-After`), serves the
/// open ones while the call under way runs, answers that call, and exits 0
/// as soon as it is answered: the two idle sessions do not hold it for
/// `server.shutdown_grace_secs` (issue #48, finding 4: one idle session
/// made it wait the whole grace).
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_three_sessions_open_exits_within_the_grace_period() {
    let t = tempfile::tempdir().unwrap();
    let (mut host, url) = serve_with(
        t.path(),
        &format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\n  shutdown_grace_secs: 30\nplugins:\n  files: [{HOSTILE_PATH:?}]\n{SLEEPER}"
        ),
    );
    let sessions = [connect(&url, "/mcp/sleeper").await, connect(&url, "/mcp").await, connect(&url, "/mcp").await];
    // A call under way when the signal comes (under its deadline).
    let call = tokio::spawn(sleep_on(sessions[0].peer().clone(), 2500));
    eventually("the call is running", async || running(&url, "hostile").await == 1).await;
    signal(&host, "-TERM");
    logged(&t.path().join("serve.log"), "stopping: new sessions refused").await;
    let fresh = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "late", "version": "1"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), 503, "a new session while stopping");
    assert_eq!(fresh.headers()["retry-after"], "5");
    // A load balancer stops sending new sessions here at once; the process
    // is still alive.
    let ready = reqwest::get(format!("{url}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503, "not ready while stopping");
    assert_eq!(reqwest::get(format!("{url}/healthz")).await.unwrap().status(), 200, "alive while stopping");
    assert!(names(&sessions[1]).await.contains(&"echo".to_string()), "open sessions are served on");
    assert_eq!(running(&url, "hostile").await, 1, "the call is still under way");
    let answered = tokio::time::timeout(std::time::Duration::from_secs(20), call).await;
    assert_eq!(answered.expect("the call under way is answered").unwrap(), None, "the call under way is answered");
    let (status, took) = tokio::task::spawn_blocking(move || {
        let r = exit_within(&mut host, std::time::Duration::from_secs(10));
        (r, host)
    })
    .await
    .map(|(r, _)| r.expect("serve exited"))
    .unwrap();
    assert_eq!(status.code(), Some(0), "a clean stop");
    assert!(
        took < std::time::Duration::from_secs(1),
        "once the call is answered, the idle sessions do not hold the host for its 30 s grace: {took:?}"
    );
}

/// A second signal stops at once; with only idle sessions open the first
/// one does, within a second (issue #48, finding 4).
#[test]
fn a_second_signal_stops_at_once_and_a_host_with_only_idle_sessions_stops_right_away() {
    let t = tempfile::tempdir().unwrap();
    let config = format!(
        "server:\n  rate_limit: {{ per_minute: 0 }}\n  shutdown_grace_secs: 30\nplugins:\n  files: [{HOSTILE_PATH:?}]\n{SLEEPER}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut idle, url) = serve_with(t.path(), &config);
    let sessions = rt.block_on(async { [connect(&url, "/mcp").await, connect(&url, "/mcp").await] });
    signal(&idle, "-INT");
    let (status, took) = exit_within(&mut idle, std::time::Duration::from_secs(10)).expect("an idle host stops");
    assert_eq!(status.code(), Some(0));
    assert!(took < std::time::Duration::from_secs(1), "two idle sessions, not the 30 s grace: {took:?}");
    // A restart straight after binds the same port (#52, fourth finding:
    // `Address already in use`), though the clients still hold theirs.
    let addr = url.trim_start_matches("http://").to_string();
    let mut again = toolhost();
    again.current_dir(t.path()).env("TOOLHOST_STATE_DIR", t.path().join("state")).args(["serve", "--http", &addr]);
    let (mut again, url_again) = crate::live::spawn_serving(again);
    assert_eq!(url_again, url, "the restart serves on the same port");
    signal(&again, "-TERM");
    assert_eq!(exit_within(&mut again, std::time::Duration::from_secs(10)).expect("it stops").0.code(), Some(0));
    drop(sessions);

    let t = tempfile::tempdir().unwrap();
    let (mut busy, url) = serve_with(t.path(), &config);
    let session = rt.block_on(connect(&url, "/mcp/sleeper"));
    let call = rt.spawn(sleep_on(session.peer().clone(), 10_000));
    rt.block_on(eventually("the call is running", async || running(&url, "hostile").await == 1));
    signal(&busy, "-INT");
    // It says it waits for the call, and that a second signal stops it.
    rt.block_on(logged(
        &t.path().join("serve.log"),
        "1 requests in flight and 0 voice sessions finished for up to 30 s",
    ));
    assert!(busy.0.try_wait().unwrap().is_none(), "waiting for the call in flight");
    signal(&busy, "-INT");
    let (status, _) = exit_within(&mut busy, std::time::Duration::from_secs(5)).expect("the second signal stops it");
    assert_eq!(status.code(), Some(130));
    drop((call, session));
}

/// One line of JSON-RPC to a `serve --stdio` child.
fn send_line(stdin: &mut std::process::ChildStdin, message: Value) {
    use std::io::Write as _;
    writeln!(stdin, "{message}").unwrap();
    stdin.flush().unwrap();
}

/// The next message from a `serve --stdio` child with `id` (notifications
/// and other answers skipped).
fn answer_to(lines: &mut impl Iterator<Item = std::io::Result<String>>, id: u64) -> Value {
    for line in lines {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["id"] == id {
            return v;
        }
    }
    panic!("the output ended before the answer to request {id}")
}

/// `serve --stdio` as `Sleeper` in `dir`, initialized: the child, its
/// input, and its output's lines.
fn stdio_session(
    dir: &std::path::Path,
) -> (crate::live::Proc, std::process::ChildStdin, impl Iterator<Item = std::io::Result<String>>) {
    use std::io::BufRead as _;
    let config = format!("server:\n  shutdown_grace_secs: 120\nplugins:\n  files: [{HOSTILE_PATH:?}]\n{SLEEPER}");
    std::fs::write(dir.join("toolhost.yaml"), config).unwrap();
    let mut child = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["serve", "--stdio", "--agent", "Sleeper"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    send_line(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}}),
    );
    assert!(answer_to(&mut lines, 1)["result"].is_object(), "initialized");
    send_line(&mut stdin, json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    (crate::live::Proc(child), stdin, lines)
}

fn sleep_call(id: u64, ms: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": ms}}})
}

/// #52, fourth finding, over stdio: on SIGTERM, `serve --stdio` with an
/// idle client waited its whole grace (the client owns the process and
/// keeps its input open). Now the call under way is answered, then it
/// exits 0; an idle client holds nothing. (The grace here is 120 s: each
/// stops well before it.)
#[test]
fn sigterm_to_serve_stdio_answers_the_call_under_way_then_exits_and_an_idle_client_holds_nothing() {
    let t = tempfile::tempdir().unwrap();
    let (mut busy, mut stdin, mut lines) = stdio_session(t.path());
    // Two calls written together: once the short one is answered, the
    // long one has been read and is under way.
    send_line(&mut stdin, sleep_call(2, 50));
    send_line(&mut stdin, sleep_call(3, 3000));
    assert_eq!(answer_to(&mut lines, 2)["result"]["isError"], false);
    signal(&busy, "-TERM");
    let long = answer_to(&mut lines, 3);
    assert_eq!(long["result"]["isError"], false, "the call under way is answered: {long}");
    let (status, _) = exit_within(&mut busy, std::time::Duration::from_secs(60)).expect("serve --stdio stopped");
    assert_eq!(status.code(), Some(0), "a clean stop");
    drop(stdin);

    let t = tempfile::tempdir().unwrap();
    let (mut idle, stdin, _lines) = stdio_session(t.path());
    signal(&idle, "-TERM");
    let (status, _) =
        exit_within(&mut idle, std::time::Duration::from_secs(60)).expect("an idle client does not hold the host");
    assert_eq!(status.code(), Some(0));
    let log = std::fs::read_to_string(t.path().join("serve.log")).unwrap();
    assert!(log.contains("the session's 0 requests under way"), "{log}");
    drop(stdin);
}

/// Six requests with one JSON-RPC id, at once, in one session (found by a
/// red team: rmcp left half of them open for good, each holding a
/// connection): the first is answered, the others are refused at once
/// with -32600 naming the id, and none is left open.
#[tokio::test(flavor = "multi_thread")]
async fn requests_reusing_an_id_in_flight_are_refused_not_left_open() {
    let t = tempfile::tempdir().unwrap();
    let config =
        format!("server:\n  rate_limit: {{ per_minute: 0 }}\nplugins:\n  files: [{HOSTILE_PATH:?}]\n{SLEEPER}");
    let (_host, url) = serve_with(t.path(), &config);
    let endpoint = format!("{url}/mcp/sleeper");
    let http = reqwest::Client::new();
    let post = |session: Option<String>, body: serde_json::Value| {
        let mut r = http
            .post(&endpoint)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body);
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send()
    };
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ids", "version": "1"}}});
    let answer = post(None, init).await.unwrap();
    let session = answer.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(Some(session.clone()), initialized).await.unwrap().status(), 202);
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 800}}});
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let f = post(Some(session.clone()), call.clone());
            tokio::spawn(async move {
                let r = f.await.unwrap();
                let status = r.status().as_u16();
                (status, r.text().await.unwrap())
            })
        })
        .collect();
    let mut answered = Vec::new();
    for c in calls {
        answered.push(
            tokio::time::timeout(std::time::Duration::from_secs(20), c).await.expect("no request left open").unwrap(),
        );
    }
    let ok = answered.iter().filter(|(s, body)| *s == 200 && body.contains("slept 800 ms")).count();
    let refused = answered
        .iter()
        .filter(|(s, body)| *s == 400 && body.contains("-32600") && body.contains("request id 7 is already in use"))
        .count();
    assert_eq!((ok, refused), (1, 5), "{answered:#?}");
    // The id is free again once its answer has ended.
    let again = post(Some(session), call).await.unwrap();
    assert!(again.text().await.unwrap().contains("slept 800 ms"));
}
