//! A fleet that loses no client: three hosts on PostgreSQL behind HAProxy
//! (the project's `deploy/haproxy.cfg`), and the official SDKs calling
//! `roll` in a loop the way they behave by default: they never initialize
//! again after an error (`py_loop.py` in legacy and auto mode, `ts_loop.mjs`).
//!
//! - `kill -9` of the host serving them: at most the call in flight fails,
//!   and never with a 404: another host restores the session from the
//!   control plane (`cluster_sessions`).
//! - SIGTERM of the next host serving them: no call fails (the host serves
//!   until the balancer has sent its sessions elsewhere).
//! - The database refusing connections for 20 s (every connection of the
//!   fleet's database cut, new ones refused: the shared test cluster serves
//!   other tests): `roll` keeps answering through HAProxy, `/readyz` stays
//!   200 while `/readyz?strict=1` is 503, `remember` fails fast with the
//!   memory store's typed error, and recovers once the database is back.

use crate::fleet::{Member, fleet_key, haproxy, start};
use crate::live::{Proc, eventually};
use crate::peers::{node22, peer, python};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn configure(dir: &Path, id: &str, url: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "cluster:\n  url: {url}\n  host_id: {id}\n  secret_key_file: {key}\nmemory:\n  url: {url}\nserver:\n  rate_limit: {{ per_minute: 0 }}\n  shutdown_grace_secs: 20\nbudget:\n  background_calibration: false\nnpcs:\n  - name: bartok\n    budget_tier: standard\n    tools: [roll, remember]\n  - name: mirela\n    budget_tier: standard\n    tools: [roll]\n",
            key = fleet_key(dir).display()
        ),
    )
    .unwrap();
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Calls of `agent` host `m` has audited.
fn calls_served(m: &Member, agent: &str) -> usize {
    let trail = std::fs::read_to_string(m.dir.join("state/audit.jsonl")).unwrap_or_default();
    trail.lines().filter(|l| l.contains(&format!("\"agent\":\"{agent}\"")) && l.contains("\"tool\":\"roll\"")).count()
}

/// Hosts `ids` of the fleet on `url`, configured in `root/<id>`, started,
/// and ready.
async fn hosts(root: &Path, ids: &[&str], url: &str) -> Vec<Member> {
    let fleet: Vec<Member> = ids
        .iter()
        .map(|id| {
            let dir = root.join(id);
            configure(&dir, id, url);
            let (proc, url) = start(&dir);
            Member { dir, url, proc: Some(proc) }
        })
        .collect();
    let probe = reqwest::Client::new();
    for m in &fleet {
        let readyz = format!("{}/readyz", m.url);
        eventually("every host ready", async || probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 200)).await;
    }
    fleet
}

/// One SDK client calling in a loop, its lines in `out`.
struct Looping {
    name: &'static str,
    out: std::path::PathBuf,
    proc: Proc,
}

impl Looping {
    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn calls(&self) -> Vec<Value> {
        self.lines().into_iter().filter(|l| l.get("i").is_some()).collect()
    }
}

fn looping(name: &'static str, root: &Path, mut cmd: Command) -> Looping {
    let out = root.join(format!("{name}.jsonl"));
    cmd.stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(root.join(format!("{name}.err"))).unwrap())
        .stdin(Stdio::null());
    Looping { name, out, proc: Proc(cmd.spawn().unwrap_or_else(|e| panic!("{name}: {e}"))) }
}

/// The failed calls of `l` that began in `[from, to)`.
fn failed_between(l: &Looping, from: f64, to: f64) -> Vec<Value> {
    l.calls()
        .into_iter()
        .filter(|c| c["ok"] == false && c["end"].as_f64().unwrap() >= from && c["start"].as_f64().unwrap() < to)
        .collect()
}

async fn remember(c: &crate::live::Client, text: &str) -> Result<(), String> {
    let params = rmcp::model::CallToolRequestParams::new("remember")
        .with_arguments(serde_json::json!({"text": text}).as_object().unwrap().clone());
    match c.call_tool(params).await {
        Ok(r) if r.is_error != Some(true) => Ok(()),
        Ok(r) => Err(serde_json::to_string(&r.content).unwrap()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_clients_go_on_through_a_killed_host_a_stopped_host_and_a_database_outage() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (db, url) = crate::pg::database();
    let mut fleet = hosts(root, &["a", "b", "c"], &url).await;
    let probe = reqwest::Client::new();
    let (_lb, front) = haproxy(root, &fleet.iter().collect::<Vec<_>>());
    let endpoint = format!("{front}/mcp/bartok");
    let stop = root.join("stop");
    let until = stop.to_str().unwrap();
    let py = |mode: &str| {
        let mut c = Command::new(python());
        c.arg(peer("py_loop.py")).args(["--url", &endpoint, "--mode", mode, "--until", until, "--max-seconds", "240"]);
        c
    };
    let mut ts = Command::new(node22());
    ts.arg(peer("ts_loop.mjs")).args(["--url", &endpoint, "--until", until, "--max-seconds", "240"]);
    let loops =
        [looping("py-legacy", root, py("legacy")), looping("py-auto", root, py("auto")), looping("ts", root, ts)];
    for l in &loops {
        eventually(&format!("{} calling", l.name), async || l.calls().iter().filter(|c| c["ok"] == true).count() >= 5)
            .await;
    }
    let legacy = loops[0].lines();
    assert!(legacy[0]["session"].is_string(), "the legacy client has a session: {:?}", legacy[0]);

    // kill -9 of the host serving bartok.
    let counts: Vec<usize> = fleet.iter().map(|m| calls_served(m, "bartok")).collect();
    let victim = (0..3).max_by_key(|&h| counts[h]).unwrap();
    let t_kill = unix_now();
    drop(fleet[victim].proc.take());
    tokio::time::sleep(Duration::from_secs(6)).await;

    // SIGTERM of the host that took its clients over.
    let after: Vec<usize> = fleet.iter().map(|m| calls_served(m, "bartok")).collect();
    let heir = (0..3).filter(|&h| h != victim).max_by_key(|&h| after[h] - counts[h]).unwrap();
    assert!(after[heir] > counts[heir], "a live host serves bartok after the kill: {counts:?} -> {after:?}");
    let t_term = unix_now();
    let mut stopping = fleet[heir].proc.take().unwrap();
    assert!(Command::new("kill").args(["-TERM", &stopping.0.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while stopping.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the stopped host exits within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The database away for 20 s.
    let last = (0..3).find(|&h| h != victim && h != heir).unwrap();
    let direct = fleet[last].url.clone();
    let memory = crate::fleet::session(&endpoint).await.0;
    remember(&memory, "Before the outage.").await.unwrap();
    let pg = crate::pg::cluster();
    let t_out = unix_now();
    let (ok, said) = pg.psql("postgres", &format!("ALTER DATABASE {db} ALLOW_CONNECTIONS false"));
    assert!(ok, "{said}");
    let (ok, said) =
        pg.psql("postgres", &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'"));
    assert!(ok, "{said}");
    let outage = Instant::now();
    let strict = format!("{direct}/readyz?strict=1");
    eventually("/readyz?strict=1 unready", async || probe.get(&strict).send().await.is_ok_and(|r| r.status() == 503))
        .await;
    // A DM override made during the outage is refused, made nowhere.
    let o = crate::oci::run(&fleet[last].dir, &["override", "bartok", "deep", "--for", "10m"]);
    let said = format!("{}{}", crate::common::stdout(&o), crate::common::stderr(&o));
    assert!(!o.status.success() && said.contains("the change was not made"), "{said}");
    assert!(!overridden(&fleet[last], "bartok"), "an override made while the control plane was away");
    let mut refusals = Vec::new();
    while outage.elapsed() < Duration::from_secs(20) {
        let ready = probe.get(format!("{direct}/readyz")).send().await.unwrap().status();
        assert_eq!(ready, 200, "/readyz stays ready while the host can roll");
        let asked = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(10), remember(&memory, "During the outage.")).await;
        let r = r.expect("a memory call answers during the outage");
        refusals.push((asked.elapsed(), r));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (ok, said) = pg.psql("postgres", &format!("ALTER DATABASE {db} ALLOW_CONNECTIONS true"));
    assert!(ok, "{said}");
    let t_back = unix_now();
    let back = Instant::now();
    let mut recovered = None;
    while back.elapsed() < Duration::from_secs(30) {
        if remember(&memory, "After the outage.").await.is_ok() {
            recovered = Some(back.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recovered = recovered.expect("memory calls work again once the database is back");
    eventually("/readyz?strict=1 ready again", async || {
        probe.get(&strict).send().await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::write(&stop, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    for l in &loops {
        let mut p = l.proc.0.id();
        while Command::new("kill").args(["-0", &p.to_string()]).status().unwrap().success()
            && std::fs::read_to_string(&l.out).is_ok_and(|t| !t.contains("\"done\""))
        {
            assert!(Instant::now() < deadline, "{} stops", l.name);
            tokio::time::sleep(Duration::from_millis(100)).await;
            p = l.proc.0.id();
        }
    }

    let report = |l: &Looping| {
        format!(
            "{}: {}\nstderr: {}",
            l.name,
            l.calls().iter().filter(|c| c["ok"] == false).map(|c| c.to_string()).collect::<Vec<_>>().join("\n"),
            std::fs::read_to_string(root.join(format!("{}.err", l.name))).unwrap_or_default()
        )
    };
    for l in &loops {
        let calls = l.calls();
        assert!(
            calls.iter().all(|c| c["ok"] == true || !c["error"].to_string().contains("ession not found")),
            "{}",
            report(l)
        );
        assert!(failed_between(l, 0.0, t_kill).is_empty(), "no call failed before the kill: {}", report(l));
        assert!(
            failed_between(l, t_kill, t_term).len() <= 1,
            "at most the call in flight at the kill failed: {}",
            report(l)
        );
        assert!(failed_between(l, t_term, f64::MAX).is_empty(), "no call failed from the SIGTERM on: {}", report(l));
        for (from, to, what) in [
            (t_kill, t_term, "after the kill"),
            (t_term, t_out, "after the SIGTERM"),
            (t_out, t_back, "during the outage"),
            (t_back, f64::MAX, "after the outage"),
        ] {
            let ok = calls
                .iter()
                .filter(|c| {
                    c["ok"] == true && c["start"].as_f64().unwrap() >= from && c["start"].as_f64().unwrap() < to
                })
                .count();
            assert!(ok >= 3, "{} rolled {what}: {ok} calls\n{}", l.name, report(l));
        }
    }
    // Memory calls during the outage: refused at once, with the store's reason.
    assert!(refusals.len() >= 10, "{refusals:?}");
    for (took, r) in &refusals {
        let e = r.as_ref().expect_err("a memory call during the outage fails");
        assert!(e.contains("memory_unavailable: the campaign memory store cannot be reached"), "the typed reason: {e}");
        assert!(!e.contains(&db), "no detail of the database reaches the agent: {e}");
        assert!(*took < Duration::from_secs(3), "a memory call fails fast during the outage: {took:?}");
    }
    for l in &loops {
        let calls = l.calls();
        let failed: Vec<String> = calls.iter().filter(|c| c["ok"] == false).map(|c| c["error"].to_string()).collect();
        eprintln!("{}: {} calls, failed {failed:?}", l.name, calls.len());
    }
    eprintln!(
        "memory calls recovered {recovered:?} after the database came back; during the outage: {:?}",
        refusals.first()
    );
    for m in &mut fleet {
        drop(m.proc.take());
    }
}

/// A JSON-RPC message to `url` (in session `session`): the status, the
/// session id the answer gave, and the answer (JSON, or an event's data).
async fn rpc(url: &str, session: Option<&str>, body: Value) -> (u16, Option<String>, Value) {
    rpc_as(url, None, session, body).await
}

/// [`rpc`] with `token`.
async fn rpc_as(url: &str, token: Option<&str>, session: Option<&str>, body: Value) -> (u16, Option<String>, Value) {
    let mut r = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body);
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let answer = r.send().await.unwrap();
    let status = answer.status().as_u16();
    let id = answer.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_string());
    let text = answer.text().await.unwrap();
    let json = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .next_back()
        .or_else(|| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    (status, id, json)
}

/// Initializes a 2025-11-25 session at `url` with `token`: its id.
async fn initialize(url: &str, token: Option<&str>) -> String {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "failover", "version": "1"}}});
    let (status, session, answer) = rpc_as(url, token, None, init).await;
    assert_eq!(status, 200, "{answer}");
    let session = session.expect("a session id");
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(rpc_as(url, token, Some(&session), initialized).await.0, 202);
    session
}

fn roll() -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "roll", "arguments": {"expression": "1d6"}}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_goes_on_on_any_host_for_its_agent_and_never_elsewhere_or_forged() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (db, url) = crate::pg::database();
    let fleet = hosts(root, &["a", "b", "c"], &url).await;
    let probe = reqwest::Client::new();
    let at = |h: usize, agent: &str| format!("{}/mcp/{agent}", fleet[h].url);
    let session = initialize(&at(0, "bartok"), None).await;

    // Host b never saw the session: it restores it and answers.
    let (status, _, answer) = rpc(&at(1, "bartok"), Some(&session), roll()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"]["content"][0]["text"].is_string(), "a roll on host b: {answer}");
    // Its event stream, reopened on host b with host a's last event id,
    // opens afresh there and tells it the tools may have changed.
    let mut stream = probe
        .get(at(1, "bartok"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("last-event-id", "5")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    let read = async {
        while let Ok(Some(chunk)) = stream.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("notifications/tools/list_changed") {
                return true;
            }
        }
        false
    };
    let announced = tokio::time::timeout(Duration::from_secs(10), read).await.unwrap_or(false);
    assert!(announced, "the reopened stream on host b: {seen:?}");
    drop(stream);
    // Another agent's endpoint: the session is not its.
    let (status, _, answer) = rpc(&at(2, "mirela"), Some(&session), roll()).await;
    assert_eq!(status, 404, "bartok's session on mirela's endpoint: {answer}");

    // Rows written to the database without the fleet's key are not restored:
    // a forged tag, and a real row's tag under another id.
    let pg = crate::pg::cluster();
    let (ok, said) = pg.psql(
        &db,
        &format!(
            "INSERT INTO cluster_sessions (endpoint, id, host_id, record, tag, expires) \
             SELECT endpoint, 'forged', host_id, record, 'not-a-tag', expires FROM cluster_sessions WHERE id = '{session}'; \
             INSERT INTO cluster_sessions (endpoint, id, host_id, record, tag, expires) \
             SELECT endpoint, 'copied', host_id, record, tag, expires FROM cluster_sessions WHERE id = '{session}'"
        ),
    );
    assert!(ok, "{said}");
    for forged in ["forged", "copied"] {
        let (status, _, answer) = rpc(&at(2, "bartok"), Some(forged), roll()).await;
        assert_eq!(status, 404, "a {forged} session row: {answer}");
    }

    // Ended through host b: host c does not know it any more.
    let ended = probe
        .delete(at(1, "bartok"))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    let (status, _, answer) = rpc(&at(2, "bartok"), Some(&session), roll()).await;
    assert_eq!(status, 404, "a deleted session on host c: {answer}");
    // Host a, which began it and still holds it, ends it too: at its next
    // look at the shared row (at most every 10 s while it is used).
    eventually("the deleted session ended on host a", async || {
        rpc(&at(0, "bartok"), Some(&session), roll()).await.0 == 404
    })
    .await;
    let (_, rows) = pg.psql(&db, &format!("SELECT count(*) FROM cluster_sessions WHERE id = '{session}'"));
    assert_eq!(rows.trim(), "0");
}

const LYRA_TOKEN: &str = "lyra-token-0123456789abcdef";

#[tokio::test(flavor = "multi_thread")]
async fn one_agent_lands_on_one_host_whatever_its_path_so_its_rate_limit_holds() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (_db, url) = crate::pg::database();
    let mut fleet: Vec<Member> = Vec::new();
    for id in ["a", "b", "c"] {
        let dir = root.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("toolhost.yaml"),
            format!(
                "cluster:\n  url: {url}\n  host_id: {id}\n  secret_key_file: {key}\nserver:\n  tokens:\n    - {{token: {LYRA_TOKEN}, agent: lyra}}\nbudget:\n  background_calibration: false\nnpcs:\n  - name: lyra\n    budget_tier: standard\n    tools: [roll]\n    rate_limit: {{ per_minute: 6, burst: 6 }}\n",
                key = fleet_key(&dir).display()
            ),
        )
        .unwrap();
        let (proc, url) = start(&dir);
        fleet.push(Member { dir, url, proc: Some(proc) });
    }
    let probe = reqwest::Client::new();
    for m in &fleet {
        let readyz = format!("{}/readyz", m.url);
        eventually("every host ready", async || probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 200)).await;
    }
    let (_lb, front) = haproxy(root, &fleet.iter().collect::<Vec<_>>());
    // Lyra by her path and by her token alone: two sessions, one budget.
    let by_path = format!("{front}/mcp/lyra");
    let by_token = format!("{front}/mcp");
    let s1 = initialize(&by_path, Some(LYRA_TOKEN)).await;
    let s2 = initialize(&by_token, Some(LYRA_TOKEN)).await;
    let mut answers = Vec::new();
    for i in 0..8 {
        let (url, s) = if i % 2 == 0 { (&by_path, &s1) } else { (&by_token, &s2) };
        answers.push(rpc_as(url, Some(LYRA_TOKEN), Some(s), roll()).await.2);
    }
    let refused: Vec<&Value> = answers.iter().filter(|a| a.to_string().contains("over its tool-call rate")).collect();
    assert_eq!(refused.len(), 2, "6 calls a minute across both paths: {answers:#?}");
    assert!(answers[..6].iter().all(|a| a["result"]["content"][0]["text"].is_string()), "{answers:#?}");
    let hosts: Vec<usize> = (0..3)
        .filter(|&h| {
            std::fs::read_to_string(fleet[h].dir.join("state/audit.jsonl"))
                .unwrap_or_default()
                .contains("\"agent\":\"lyra\"")
        })
        .collect();
    assert_eq!(hosts.len(), 1, "lyra's calls were served by one host: {hosts:?}");
    for m in &mut fleet {
        drop(m.proc.take());
    }
}

/// Whether host `m` holds a DM override for `agent`.
fn overridden(m: &Member, agent: &str) -> bool {
    let o = crate::oci::run(&m.dir, &["agents", "--json"]);
    let agents: Value = serde_json::from_str(&crate::common::stdout(&o)).unwrap();
    !agents.as_array().unwrap().iter().find(|a| a["name"] == agent).unwrap()["dm_override"].is_null()
}

/// `cluster status --json` through `m`: whether it exited 0, its problems.
fn cluster_status(m: &Member) -> (bool, String) {
    let o = crate::oci::run(&m.dir, &["cluster", "status", "--json"]);
    let v: Value = serde_json::from_str(&crate::common::stdout(&o)).unwrap_or_default();
    (o.status.success(), v["problems"].to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolled_back_or_forged_change_log_is_detected_and_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (db, url) = crate::pg::database();
    let mut fleet: Vec<Member> = ["a", "b"]
        .iter()
        .map(|id| {
            let dir = root.join(id);
            configure(&dir, id, &url);
            let (proc, url) = start(&dir);
            Member { dir, url, proc: Some(proc) }
        })
        .collect();
    let probe = reqwest::Client::new();
    let ready = async |m: &Member| {
        let readyz = format!("{}/readyz", m.url);
        eventually("the host ready", async || probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 200)).await;
    };
    for m in &fleet {
        ready(m).await;
    }
    let pg = crate::pg::cluster();
    let psql = |sql: &str| {
        let (ok, said) = pg.psql(&db, sql);
        assert!(ok, "{sql}: {said}");
    };
    crate::oci::ok(&crate::oci::run(&fleet[0].dir, &["override", "bartok", "deep", "--for", "10m"]));
    crate::oci::ok(&crate::oci::run(&fleet[0].dir, &["override", "bartok", "--clear"]));
    eventually("the fleet whole and caught up", async || cluster_status(&fleet[0]).0).await;
    assert!(!overridden(&fleet[1], "bartok"));

    // 1. The row that cleared the override, deleted: the log was rolled back.
    psql(
        "CREATE TABLE saved AS SELECT * FROM cluster_changes WHERE change LIKE '%override_cleared%'; \
         DELETE FROM cluster_changes WHERE change LIKE '%override_cleared%'",
    );
    let (ok, problems) = cluster_status(&fleet[0]);
    assert!(!ok && problems.contains("was rolled back"), "{problems}");
    // Host b, restarted, starts and does not bring the override back; nor
    // does a; and no new change goes into the damaged log.
    let b = root.join("b");
    drop(fleet[1].proc.take());
    let (proc, url_b) = start(&b);
    fleet[1] = Member { dir: b, url: url_b, proc: Some(proc) };
    ready(&fleet[1]).await;
    eventually("host b read the log", async || {
        std::fs::read_to_string(fleet[1].dir.join("serve.log")).unwrap_or_default().contains("was rolled back")
    })
    .await;
    assert!(!overridden(&fleet[1], "bartok") && !overridden(&fleet[0], "bartok"), "a rolled-back log applied");
    let o = crate::oci::run(&fleet[0].dir, &["override", "mirela", "deep", "--for", "10m"]);
    let said = format!("{}{}", crate::common::stdout(&o), crate::common::stderr(&o));
    assert!(said.contains("rolled back"), "a change into a damaged log is refused, saying why: {said}");
    assert!(said.contains("the change was not made"), "{said}");
    assert!(!overridden(&fleet[0], "mirela") && !overridden(&fleet[1], "mirela"), "a refused change applied");

    // 2. The row put back: the log is whole again, for the hosts too.
    psql("INSERT INTO cluster_changes SELECT * FROM saved");
    eventually("the fleet whole again", async || cluster_status(&fleet[0]).0).await;

    // 3. 1,000 rows forged outside the log's numbers: said, never read, and
    // no host stops starting for them.
    psql(
        "INSERT INTO cluster_changes (seq, host_id, change, tag) \
         SELECT -g, 'a', '{\"op\":\"override_set\",\"agent\":\"lyra\",\"tier\":\"deep\",\"until_unix_ms\":99999999999999}', 'forged' \
         FROM generate_series(1, 500) g; \
         INSERT INTO cluster_changes (seq, host_id, change, tag) \
         SELECT 1000000000000 + g, 'a', '{\"op\":\"override_set\",\"agent\":\"bartok\",\"tier\":\"deep\",\"until_unix_ms\":99999999999999}', 'forged' \
         FROM generate_series(1, 500) g",
    );
    let (ok, problems) = cluster_status(&fleet[0]);
    assert!(!ok && problems.contains("1000 rows of cluster_changes were not written"), "{problems}");
    let b = root.join("b");
    drop(fleet[1].proc.take());
    let (proc, url_b) = start(&b);
    fleet[1] = Member { dir: b, url: url_b, proc: Some(proc) };
    ready(&fleet[1]).await;
    crate::oci::ok(&crate::oci::run(&fleet[0].dir, &["override", "mirela", "deep", "--for", "10m"]));
    eventually("a real change still reaches host b", async || overridden(&fleet[1], "mirela")).await;
    assert!(!overridden(&fleet[1], "bartok") && !overridden(&fleet[0], "bartok"), "a forged row applied");
    for m in &mut fleet {
        drop(m.proc.take());
    }
}

/// A secret's history cannot be rewound: the rotation's change deleted
/// from the log and the older sealed value put back are seen by
/// `cluster status`, and a host restarted then takes no secret from the
/// damaged log (never the older value), while the running host keeps the
/// current one.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_secret_cannot_be_rewound_by_a_database_writer() {
    use crate::fleet::{config_value, session, set_secret};
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (db, url) = crate::pg::database();
    std::fs::copy(toolhost_test_artifacts::HOSTILE_PATH, root.join("hostile.wasm")).unwrap();
    let mut fleet: Vec<Member> = ["a", "b"]
        .iter()
        .map(|id| {
            let dir = root.join(id);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("toolhost.yaml"),
                format!(
                    "trust:\n  allow_unsigned: true\nplugins:\n  builtins: false\n  files: [{root}/hostile.wasm]\ncluster:\n  url: {url}\n  host_id: {id}\n  secret_key_file: {key}\nbudget:\n  background_calibration: false\n",
                    root = root.display(),
                    key = fleet_key(&dir).display()
                ),
            )
            .unwrap();
            let (proc, url) = start(&dir);
            Member { dir, url, proc: Some(proc) }
        })
        .collect();
    let probe = reqwest::Client::new();
    for m in &fleet {
        let readyz = format!("{}/readyz", m.url);
        eventually("every host ready", async || probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 200)).await;
    }
    crate::oci::ok(&set_secret(&fleet[0].dir, "hostile", "api_key", "old-value"));
    let pg = crate::pg::cluster();
    let (read, kept) = pg.psql(&db, "SELECT sealed || ' ' || seq FROM cluster_secrets WHERE plugin = 'hostile'");
    assert!(read, "{kept}");
    let (old_sealed, old_seq) = kept.trim().split_once(' ').unwrap();
    crate::oci::ok(&set_secret(&fleet[0].dir, "hostile", "api_key", "new-value"));
    let a = session(&format!("{}/mcp", fleet[0].url)).await.0;
    assert_eq!(config_value(&a, "read_config", "api_key").await, "new-value");
    assert!(cluster_status(&fleet[0]).0);

    // The writer deletes the rotation from the log and puts the old row back.
    let (ok, said) = pg.psql(
        &db,
        &format!(
            "DELETE FROM cluster_changes WHERE seq = (SELECT max(seq) FROM cluster_changes WHERE change LIKE '%secret_set%'); \
             UPDATE cluster_secrets SET sealed = '{old_sealed}', seq = {old_seq} WHERE plugin = 'hostile'"
        ),
    );
    assert!(ok, "{said}");
    let (ok, problems) = cluster_status(&fleet[0]);
    assert!(!ok && problems.contains("was rolled back"), "{problems}");
    let b = root.join("b");
    drop(fleet[1].proc.take());
    let (proc, url_b) = start(&b);
    fleet[1] = Member { dir: b, url: url_b, proc: Some(proc) };
    let readyz = format!("{}/readyz", fleet[1].url);
    eventually("host b ready", async || probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 200)).await;
    let b = session(&format!("{}/mcp", fleet[1].url)).await.0;
    let seen = config_value(&b, "read_config", "api_key").await;
    assert_ne!(seen, "old-value", "host b applied the rewound secret");
    assert_eq!(config_value(&a, "read_config", "api_key").await, "new-value", "host a keeps the current secret");
    // Nor can the secret be set again into the damaged log.
    let refused = set_secret(&fleet[0].dir, "hostile", "api_key", "third");
    assert!(!refused.status.success(), "{}", crate::common::stdout(&refused));
    for c in [a, b] {
        let _ = c.cancel().await;
    }
    for m in &mut fleet {
        drop(m.proc.take());
    }
}
