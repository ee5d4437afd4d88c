//! A fleet on loopback: a throwaway PostgreSQL (`crate::pg`) holding the
//! control plane and the campaign memory, three `toolhost serve --http`
//! hosts, and HAProxy with `deploy/haproxy.cfg` in front. Changes made
//! through one host reach the others' sessions; a host started later comes
//! up with them.

use crate::common::{stderr, stdout};
use crate::live::{Proc, eventually, logged, names, running};
use crate::oci::{Registry, ok, run, signed, th, trust};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use toolhost_test_artifacts::SWAP_V1_PATH;

/// One host of the fleet: its directory (config, state, cache) and URL.
pub(crate) struct Member {
    pub(crate) dir: PathBuf,
    pub(crate) url: String,
    pub(crate) proc: Option<Proc>,
}

const AGENTS: &str = "npcs:\n  - name: bartok\n    budget_tier: fast\n    tools: [roll, search_facts, remember, version]\n  - name: mirela\n    budget_tier: fast\n    tools: [roll]\n  - name: lyra\n    budget_tier: fast\n    tools: [roll]\n";

/// The fleet's key (`cluster.secret_key_file`), one for the whole fleet:
/// beside the hosts' directories.
pub(crate) fn fleet_key(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.parent().unwrap().join("cluster.key");
    if !path.exists() {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).unwrap();
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path
}

/// Writes `dir/toolhost.yaml` for host `id` of the fleet on `url`, trusting
/// the key in `keys`.
fn configure(dir: &Path, keys: &Path, id: &str, url: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "trust:\n  key_files: [{}]\ncluster:\n  url: {url}\n  host_id: {id}\n  secret_key_file: {key}\nmemory:\n  url: {url}\nserver:\n  rate_limit: {{ per_minute: 0 }}\nbudget:\n  fast_ms: 10\n  standard_ms: 40\n  background_calibration: false\n{AGENTS}",
            keys.join("alice.pub").display(),
            key = fleet_key(dir).display()
        ),
    )
    .unwrap();
}

pub(crate) fn start(dir: &Path) -> (Proc, String) {
    start_logging(dir, "warn")
}

/// [`start`] with `TOOLHOST_LOG=filter`.
fn start_logging(dir: &Path, filter: &str) -> (Proc, String) {
    let mut cmd = th(dir);
    cmd.env("TOOLHOST_LOG", filter).args(["serve", "--http", "127.0.0.1:0"]);
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    crate::live::spawn_serving_logged(cmd, log)
}

/// HAProxy with the shipped config, listening on a free loopback port, in
/// front of `hosts`.
pub(crate) fn haproxy(dir: &Path, hosts: &[&Member]) -> (Proc, String) {
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/haproxy.cfg")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (head, _) = shipped.split_once("    # FLEET-SERVERS").expect("the servers marker in deploy/haproxy.cfg");
    let mut cfg = head.replace("    bind :8700\n", &format!("    bind 127.0.0.1:{port}\n"));
    for (i, m) in hosts.iter().enumerate() {
        let addr = m.url.trim_start_matches("http://");
        cfg.push_str(&format!("    server host{i} {addr} check\n"));
    }
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, cfg).unwrap();
    let check =
        Command::new("haproxy").arg("-c").arg("-f").arg(&path).output().expect("haproxy (scripts/install-peers)");
    assert!(check.status.success(), "haproxy -c: {}{}", stdout(&check), stderr(&check));
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("haproxy.log")).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Proc(child), url)
}

/// Asserts that no host of `fleet` holds a DM override for `agent` (`what`
/// would have set one).
fn no_override_on(fleet: &[Member], agent: &str, what: &str) {
    for m in fleet {
        let agents: Value = serde_json::from_str(&ok(&run(&m.dir, &["agents", "--json"]))).unwrap();
        let a = agents.as_array().unwrap().iter().find(|a| a["name"] == agent).unwrap();
        assert!(a["dm_override"].is_null(), "{what} was applied on {}: {a}", m.dir.display());
    }
}

/// A session at `url` (an agent's endpoint), counting `list_changed`.
pub(crate) async fn session(url: &str) -> (crate::live::Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use rmcp::ServiceExt as _;
    let w = crate::live::Watcher::default();
    let count = w.0.clone();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_string());
    (w.serve(transport).await.expect("initialize"), count)
}

/// The names a session sees, sorted.
async fn sorted(c: &crate::live::Client) -> Vec<String> {
    let mut n = names(c).await;
    n.sort();
    n
}

/// Whether `m`'s audit trail holds a call of `agent`'s, naming the host.
fn served(m: &Member, id: &str, agent: &str) -> bool {
    let trail = std::fs::read_to_string(m.dir.join("state/audit.jsonl")).unwrap_or_default();
    trail
        .lines()
        .any(|l| l.starts_with(&format!("{{\"host\":\"{id}\",")) && l.contains(&format!("\"agent\":\"{agent}\"")))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_through_any_host_reaches_every_host_and_a_late_host_starts_with_it() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (db, url) = crate::pg::database();
    // A signed plugin in a registry, for `plugin add oci://`.
    let reg = Registry::start(root, None);
    trust(root, "alice", "");
    let tool = signed(root, SWAP_V1_PATH, "alice", "version", "1.0.0", "v1");
    let reference = reg.reference("tools/version:1.0.0");
    ok(&run(root, &["push", tool.to_str().unwrap(), &reference]));

    let mut fleet: Vec<Member> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            let dir = root.join(id);
            configure(&dir, &root.join("keys"), id, &url);
            let (proc, url) = start(&dir);
            Member { dir, url, proc: Some(proc) }
        })
        .collect();
    let (_lb, front) = haproxy(root, &fleet.iter().collect::<Vec<_>>());

    // Three agents' sessions through the balancer, each with a call.
    let mut clients = Vec::new();
    for agent in ["bartok", "mirela", "lyra"] {
        let (c, changed) = session(&format!("{front}/mcp/{agent}")).await;
        let args = serde_json::json!({"expression": "1d20"}).as_object().cloned();
        c.call_tool(rmcp::model::CallToolRequestParams::new("roll").with_arguments(args.unwrap())).await.unwrap();
        clients.push((agent, c, changed));
    }
    let (_, bartok, changed) = &clients[0];
    assert_eq!(sorted(bartok).await, ["roll"], "FAST: roll only");
    // The host that served bartok (its audit trail names it); the
    // override goes through another.
    let ids = ["a", "b", "c"];
    let holder = (0..3).find(|&i| served(&fleet[i], ids[i], "bartok")).expect("a host's audit names bartok's call");
    let other = (holder + 1) % 3;
    let before = changed.load(Ordering::SeqCst);
    let o = run(&fleet[other].dir, &["override", "bartok", "deep", "--for", "10m"]);
    assert!(o.status.success(), "{}", stderr(&o));
    eventually("list_changed on another host's session after the override", async || {
        changed.load(Ordering::SeqCst) > before
    })
    .await;
    assert_eq!(sorted(bartok).await, ["remember", "roll", "search_facts"], "DEEP now, on host {holder}");

    // A plugin added through one host is callable through every host.
    let o = run(&fleet[1].dir, &["plugin", "add", &reference]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    for m in &fleet {
        let dir = m.dir.clone();
        eventually("the plugin on every host", async || {
            let o = run(&dir, &["status", "--json"]);
            let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_default();
            v["providers"].as_array().is_some_and(|p| p.iter().any(|p| p["name"] == "version"))
        })
        .await;
    }
    // Every other host's audit names who made the change: host b, through
    // the control plane (issue #55).
    for m in [&fleet[0], &fleet[2]] {
        let trail = std::fs::read_to_string(m.dir.join("state/audit.jsonl")).unwrap();
        let records: Vec<Value> = trail.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let by_b = |event: &str| {
            records.iter().any(|r| r["event"] == event && r["actor"] == "host b" && r["via"] == "cluster")
        };
        assert!(by_b("plugin_load") && by_b("fleet_change"), "{}: {trail}", m.dir.display());
    }
    // In a fleet a file is refused, saying why.
    let o = run(&fleet[0].dir, &["plugin", "add", tool.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("in a fleet (cluster.url) plugins come from a registry"), "{}", stderr(&o));

    // The fleet as the control plane sees it: three hosts, none behind,
    // the same plugins at the same digests.
    let cluster_status = || {
        let o = run(&fleet[0].dir, &["cluster", "status", "--json"]);
        let v: Value =
            serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        (o.status.success(), v)
    };
    eventually("every host caught up, by cluster status", async || {
        let (ok, v) = cluster_status();
        ok && v["hosts"]
            .as_array()
            .is_some_and(|h| h.len() == 3 && h.iter().all(|h| h["lag"] == 0 && h["plugins"]["version"].is_string()))
    })
    .await;
    let (_, status) = cluster_status();
    assert_eq!(status["problems"], serde_json::json!([]), "{status}");

    // Whoever can write the database but lacks the fleet's key cannot
    // change the hosts: a forged change is read, and ignored.
    let forged = r#"{"op":"override_set","agent":"mirela","tier":"deep","until_unix_ms":99999999999999}"#;
    let (ok_, said) = crate::pg::cluster().psql(
        &db,
        &format!("INSERT INTO cluster_changes (host_id, change, tag) VALUES ('a', '{forged}', 'forged'); NOTIFY toolhost_changes"),
    );
    assert!(ok_, "{said}");
    // A real change after it: a host that applied this one has read past
    // the forged row.
    ok(&run(&fleet[0].dir, &["override", "lyra", "--clear"]));
    let caught_up = async || {
        let (_, v) = cluster_status();
        v["hosts"].as_array().is_some_and(|h| h.iter().all(|h| h["lag"] == 0))
    };
    eventually("the forged change read by every host", caught_up).await;
    no_override_on(&fleet, "mirela", "a forged override");
    // ... and `cluster status` says the log holds a row no host wrote.
    let (ok_, v) = cluster_status();
    assert!(!ok_ && v["problems"].to_string().contains("1 rows of cluster_changes were not written"), "{v}");
    // Nor can they replay a real change: the DM clears bartok's override,
    // and a copy of the row that set it, appended again, is ignored.
    ok(&run(&fleet[other].dir, &["override", "bartok", "--clear"]));
    let (ok_, said) = crate::pg::cluster().psql(
        &db,
        "INSERT INTO cluster_changes (host_id, change, tag) SELECT host_id, change, tag FROM cluster_changes \
         WHERE change LIKE '%override_set%bartok%' ORDER BY seq LIMIT 1; NOTIFY toolhost_changes",
    );
    assert!(ok_, "{said}");
    ok(&run(&fleet[0].dir, &["override", "lyra", "--clear"]));
    eventually("the replayed change read by every host", caught_up).await;
    no_override_on(&fleet, "bartok", "a replayed override");
    ok(&run(&fleet[other].dir, &["override", "bartok", "deep", "--for", "10m"]));

    // A host started after all this comes up with it.
    let late = root.join("d");
    configure(&late, &root.join("keys"), "d", &url);
    let (proc, late_url) = start_logging(&late, "warn,toolhost::cluster=info");
    fleet.push(Member { dir: late, url: late_url.clone(), proc: Some(proc) });
    let (c, _) = session(&format!("{late_url}/mcp/bartok")).await;
    assert_eq!(sorted(&c).await, ["remember", "roll", "search_facts", "version"], "the override and the plugin");
    let o = run(&fleet[3].dir, &["agents", "--json"]);
    assert!(stdout(&o).contains("\"deep\""), "{}", stdout(&o));
    // It applied each thing's latest change, not the history: bartok's
    // override was set, cleared and set again before it started.
    let late_log = fleet[3].dir.join("serve.log");
    let caught_up = || std::fs::read_to_string(&late_log).unwrap().contains("control plane: caught up");
    eventually("the late host's first catch-up logged", async || caught_up()).await;
    let log = std::fs::read_to_string(&late_log).unwrap();
    let applied: Vec<&str> = log.lines().filter(|l| l.contains("control plane: change applied")).collect();
    assert_eq!(applied.iter().filter(|l| l.contains("override_set bartok")).count(), 1, "{applied:#?}");
    assert!(!applied.iter().any(|l| l.contains("override_cleared bartok")), "{applied:#?}");
    for (_, c, _) in clients {
        let _ = c.cancel().await;
    }
    let _ = c.cancel().await;
    // A host that left the fleet is forgotten on request.
    drop(fleet[3].proc.take());
    assert!(ok(&run(&fleet[0].dir, &["cluster", "forget", "d"])).contains("forgot d"));
    let o = run(&fleet[0].dir, &["cluster", "status", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["hosts"].as_array().unwrap().iter().all(|h| h["host_id"] != "d"), "{v}");
    let o = run(&fleet[0].dir, &["cluster", "forget", "nobody"]);
    assert!(!o.status.success() && stderr(&o).contains("no host \"nobody\""), "{}", stderr(&o));
    for m in &mut fleet {
        drop(m.proc.take());
    }
}

/// `dir/toolhost.yaml` for a host of the fleet on `url` with the hostile
/// test plugin (its `sleep` tool keeps calls in flight, up to its declared
/// 1 s: pinned DEEP, whose ceiling does not cut it shorter).
fn configure_plain(dir: &Path, id: &str, url: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "trust:\n  allow_unsigned: true\nplugins:\n  files: [{}]\ncluster:\n  url: {url}\n  host_id: {id}\n  secret_key_file: {key}\nmemory:\n  url: {url}\nserver:\n  rate_limit: {{ per_minute: 0 }}\n  shutdown_grace_secs: 20\nbudget:\n  background_calibration: false\n  pin: {{ sleep: deep }}\nnpcs:\n  - name: bartok\n    budget_tier: deep\n    tools: [remember, sleep]\n  - name: mirela\n    budget_tier: deep\n    tools: [remember, sleep]\n  - name: lyra\n    budget_tier: deep\n    tools: [remember, sleep]\n",
            toolhost_test_artifacts::HOSTILE_PATH,
            key = fleet_key(dir).display()
        ),
    )
    .unwrap();
}

async fn call(c: &crate::live::Client, tool: &str, args: Value) -> Result<Value, String> {
    let params =
        rmcp::model::CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().unwrap().clone());
    match c.call_tool(params).await {
        Ok(r) if r.is_error != Some(true) => Ok(serde_json::to_value(&r).unwrap()),
        Ok(r) => Err(format!("tool error: {r:?}")),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_host_loses_no_acknowledged_write_and_a_stopped_host_finishes_its_calls() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (db, url) = crate::pg::database();
    let mut fleet: Vec<Member> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            let dir = root.join(id);
            configure_plain(&dir, id, &url);
            let (proc, url) = start(&dir);
            Member { dir, url, proc: Some(proc) }
        })
        .collect();
    // HAProxy 2.6 counts a new server up until its first checks fail:
    // the fleet starts serving once every host is ready.
    let probe = reqwest::Client::new();
    for m in &fleet {
        let readyz = format!("{}/readyz", m.url);
        eventually("every host ready", async || probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 200)).await;
    }
    let (_lb, front) = haproxy(root, &fleet.iter().collect::<Vec<_>>());
    let agents = ["bartok", "mirela", "lyra"];
    let mut sessions = Vec::new();
    for agent in agents {
        sessions.push(session(&format!("{front}/mcp/{agent}")).await.0);
    }

    // 200 writes through the balancer, one agent after the other; the host
    // that served bartok's first write is killed after the 60th.
    let mut acknowledged: Vec<String> = Vec::new();
    let mut reinitialized = [0u32; 3];
    let mut victim = None;
    for i in 0..200 {
        let k = i % 3;
        if i == 60 {
            let ids = ["a", "b", "c"];
            let v = (0..3).find(|&h| served(&fleet[h], ids[h], "bartok")).expect("a host served bartok");
            drop(fleet[v].proc.take()); // SIGKILL
            victim = Some(v);
        }
        let text = format!("Write {i} of the fleet test.");
        let mut attempts = 0;
        loop {
            attempts += 1;
            match call(&sessions[k], "remember", serde_json::json!({"text": text})).await {
                Ok(v) => {
                    let said = v["structuredContent"]["id"].as_str().map(str::to_string).or_else(|| {
                        let text = v["content"][0]["text"].as_str()?;
                        serde_json::from_str::<Value>(text).ok()?["id"].as_str().map(str::to_string)
                    });
                    acknowledged.push(said.unwrap_or_else(|| panic!("no id in {v}")));
                    break;
                }
                Err(e) => {
                    // The session's host is gone: as MCP specifies, a new
                    // session (the balancer sends it to a live host).
                    assert!(victim.is_some(), "write {i} failed before any host was killed: {e}");
                    assert!(attempts < 20, "write {i}: still failing after {attempts} attempts: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if let Ok(c) = tokio::time::timeout(Duration::from_secs(10), async {
                        session(&format!("{front}/mcp/{}", agents[k])).await.0
                    })
                    .await
                    {
                        sessions[k] = c;
                        reinitialized[k] += 1;
                    }
                }
            }
        }
    }
    assert_eq!(acknowledged.len(), 200);
    // bartok's session died with its host: the client initialized again on
    // the 404 (rmcp does it by itself; `reinitialized` counts the times
    // this loop had to) and its writes went on through another host.
    let v = victim.unwrap();
    let ids = ["a", "b", "c"];
    assert!(
        (0..3).any(|h| h != v && served(&fleet[h], ids[h], "bartok")),
        "bartok's writes after the kill were served by a live host (re-initialized {reinitialized:?})"
    );
    // Every acknowledged write is in the database.
    let list = acknowledged.iter().map(|id| format!("'{id}'")).collect::<Vec<_>>().join(",");
    let (ok_, found) =
        crate::pg::cluster().psql(&db, &format!("SELECT count(*) FROM memory_facts WHERE id IN ({list})"));
    assert!(ok_, "{found}");
    assert_eq!(found.trim(), "200", "acknowledged writes missing after kill -9");

    // SIGTERM: the calls in flight on a host finish; the host turns
    // unready at once, and a new session goes to another host.
    let survivor = (v + 1) % 3;
    let direct = fleet[survivor].url.clone();
    let mut inflight = Vec::new();
    let mut clients = Vec::new();
    for agent in agents {
        clients.push(session(&format!("{direct}/mcp/{agent}")).await.0);
    }
    for c in clients {
        inflight.push(tokio::spawn(async move {
            let r = call(&c, "sleep", serde_json::json!({"ms": 700})).await;
            let _ = c.cancel().await;
            r
        }));
    }
    eventually("the three calls running", async || running(&direct, "hostile").await == 3).await;
    let pid = fleet[survivor].proc.as_ref().unwrap().0.id();
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    let readyz = format!("{direct}/readyz");
    // (Or gone: it exits as soon as its calls are answered.)
    eventually("the stopping host unready", async || {
        probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 503) || fleet_host_gone(&readyz).await
    })
    .await;
    for t in inflight {
        // A host that dropped its calls leaves them unanswered: bounded.
        let r = tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("a call in flight at SIGTERM answered")
            .unwrap();
        assert!(r.as_ref().is_ok_and(|v| v.to_string().contains("slept 700 ms")), "a call in flight at SIGTERM: {r:?}");
    }
    // Once the balancer takes the stopping host out, a client starting now
    // lands on a host still serving.
    logged(&root.join("haproxy.log"), &format!("hosts/host{survivor} is DOWN")).await;
    let c = session(&format!("{front}/mcp/mirela")).await.0;
    call(&c, "remember", serde_json::json!({"text": "After the drain."})).await.unwrap();
    let _ = c.cancel().await;
    for m in &mut fleet {
        drop(m.proc.take());
    }
}

/// Whether nothing listens at `url` any more.
async fn fleet_host_gone(url: &str) -> bool {
    reqwest::get(url).await.is_err_and(|e| e.is_connect())
}

/// `{"value": ...}` of the hostile plugin's `read_config` (`tool`) for
/// `key`, through session `c`.
pub(crate) async fn config_value(c: &crate::live::Client, tool: &str, key: &str) -> Value {
    let v = call(c, tool, serde_json::json!({"key": key})).await.unwrap_or_else(|e| panic!("{tool} {key}: {e}"));
    let text = v["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {v}"));
    serde_json::from_str::<Value>(text).unwrap()["value"].clone()
}

/// `toolhost secret set PLUGIN NAME` in `dir`, `value` on standard input.
pub(crate) fn set_secret(dir: &Path, plugin: &str, name: &str, value: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = th(dir)
        .args(["secret", "set", plugin, name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(value.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// A secret set with `toolhost secret set` against one host's config is
/// written to the control plane sealed (the database never holds the
/// value), every host uses it from its next call, and a host started later
/// starts with it. Someone who can write the database but lacks the key
/// cannot give one plugin's secret to another.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_secret_is_sealed_in_the_control_plane_and_every_host_uses_it() {
    const VALUE: &str = "sk-fleet-5f0c1e9d";
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (db, url) = crate::pg::database();
    for name in ["hostile", "other"] {
        std::fs::copy(toolhost_test_artifacts::HOSTILE_PATH, root.join(format!("{name}.wasm"))).unwrap();
    }
    let configure = |id: &str| {
        let dir = root.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("toolhost.yaml"),
            format!(
                "trust:\n  allow_unsigned: true\nplugins:\n  builtins: false\n  files: [{root}/hostile.wasm, {root}/other.wasm]\ncluster:\n  url: {url}\n  host_id: {id}\n  secret_key_file: {key}\nbudget:\n  background_calibration: false\n",
                root = root.display(),
                key = fleet_key(&dir).display()
            ),
        )
        .unwrap();
        dir
    };
    let mut hosts: Vec<Member> = ["a", "b"]
        .iter()
        .map(|id| {
            let dir = configure(id);
            let (proc, url) = start(&dir);
            Member { dir, url, proc: Some(proc) }
        })
        .collect();
    let probe = reqwest::Client::new();
    for m in &hosts {
        let readyz = format!("{}/readyz", m.url);
        eventually("every host ready", async || probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 200)).await;
    }
    let mut sessions = Vec::new();
    for m in &hosts {
        let c = session(&format!("{}/mcp", m.url)).await.0;
        assert_eq!(config_value(&c, "read_config", "api_key").await, Value::Null, "not set yet");
        sessions.push(c);
    }

    // Set through host a's config: every live host has it when the
    // command says so.
    let set = set_secret(&hosts[0].dir, "hostile", "api_key", VALUE);
    let said = ok(&set);
    assert!(said.contains("set secret api_key of plugin hostile in the fleet's control plane"), "{said}");
    assert!(said.contains("2 of 2 live hosts use it from their next call: a, b"), "{said}");
    for c in &sessions {
        assert_eq!(config_value(c, "read_config", "api_key").await, VALUE);
        assert_eq!(config_value(c, "other_read_config", "api_key").await, Value::Null, "another plugin's");
    }
    // The database holds it sealed, the log names it only, and no host
    // wrote it to its own state.
    let pg = crate::pg::cluster();
    let (read, sealed) = pg.psql(&db, "SELECT sealed FROM cluster_secrets WHERE plugin = 'hostile'");
    assert!(read && sealed.trim().starts_with("v1:") && !sealed.contains(VALUE), "{sealed}");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(sealed.trim().trim_start_matches("v1:")).unwrap();
    assert!(!bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()), "sealed, not encoded: {sealed}");
    // What a database writer keeps, to put back once it is removed.
    let (read, kept) = pg.psql(&db, "SELECT sealed || ' ' || seq FROM cluster_secrets WHERE plugin = 'hostile'");
    assert!(read, "{kept}");
    let (kept_sealed, kept_seq) = kept.trim().split_once(' ').unwrap();
    let (kept_sealed, kept_seq) = (kept_sealed.to_string(), kept_seq.to_string());
    let (read, log) = pg.psql(&db, "SELECT change FROM cluster_changes");
    assert!(read && log.contains("secret_set") && !log.contains(VALUE), "{log}");
    for m in &hosts {
        assert!(!m.dir.join("state/secrets.json").exists(), "{} wrote secrets.json", m.dir.display());
        let logged = std::fs::read_to_string(m.dir.join("serve.log")).unwrap();
        assert!(!logged.contains(VALUE), "{logged}");
    }

    // Someone with the database but not the key copies hostile's sealed
    // secret to the plugin "other". The next real change makes every host
    // read the secrets again: the copy does not open there.
    let (moved, said) = pg.psql(
        &db,
        "INSERT INTO cluster_secrets (plugin, name, sealed, seq, set_by) SELECT 'other', name, sealed, seq, 'mallory' FROM cluster_secrets WHERE plugin = 'hostile'",
    );
    assert!(moved, "{said}");
    // And a host that is not one: a row in the future, an escape in its id.
    let (ghost, said) = pg.psql(
        &db,
        "INSERT INTO cluster_hosts (host_id, version, started, last_seen, applied_seq, plugins) VALUES (E'ghost\\x1b[2J', '0.1.0', now(), now() + interval '1 hour', 0, '{}')",
    );
    assert!(ghost, "{said}");
    let said = ok(&set_secret(&hosts[1].dir, "hostile", "token", "t-2"));
    assert!(said.contains("2 of 2 live hosts use it from their next call: a, b"), "the ghost is no host: {said}");
    let status = run(&hosts[0].dir, &["cluster", "status"]);
    let shown = stdout(&status);
    assert!(!status.status.success(), "{shown}");
    assert!(shown.contains("the row of host ghost\\u{1b}[2J does not check with this fleet's key"), "{shown}");
    assert!(!shown.contains('\u{1b}'), "an escape reached the terminal: {shown:?}");
    for c in &sessions {
        assert_eq!(config_value(c, "read_config", "token").await, "t-2");
        assert_eq!(config_value(c, "other_read_config", "api_key").await, Value::Null, "a moved secret does not open");
    }
    let list = run(&hosts[0].dir, &["secret", "list"]);
    assert!(!list.status.success(), "a secret that does not open is a problem: {}", stdout(&list));
    let listed = stdout(&list);
    assert!(listed.contains("not the fleet's") && !listed.contains(VALUE), "{listed}");
    assert!(listed.contains("cli@"), "where each was set from: {listed}");
    let logged = std::fs::read_to_string(hosts[0].dir.join("serve.log")).unwrap();
    assert!(logged.contains("a secret that is not the fleet's is ignored"), "{logged}");
    let (gone, said) = pg.psql(&db, "DELETE FROM cluster_secrets WHERE set_by = 'mallory'");
    assert!(gone, "{said}");

    // A host started now starts with the fleet's secrets.
    let dir = configure("c");
    let (proc, late_url) = start(&dir);
    hosts.push(Member { dir, url: late_url, proc: Some(proc) });
    let late = session(&format!("{}/mcp", hosts[2].url)).await.0;
    assert_eq!(config_value(&late, "read_config", "api_key").await, VALUE);
    sessions.push(late);

    // Removed: gone from every host's next call.
    let rm = run(&hosts[2].dir, &["secret", "rm", "hostile", "api_key"]);
    assert!(ok(&rm).contains("3 of 3 live hosts"), "{}", stdout(&rm));
    for c in &sessions {
        assert_eq!(config_value(c, "read_config", "api_key").await, Value::Null);
    }
    let again = run(&hosts[2].dir, &["secret", "rm", "hostile", "api_key"]);
    assert!(
        !again.status.success() && stderr(&again).contains("has no secret api_key in the fleet"),
        "{}",
        stderr(&again)
    );
    // The writer puts the removed value back: the log says it was removed,
    // and no host takes it, even after the next real change.
    let (back, said) = pg.psql(
        &db,
        &format!(
            "INSERT INTO cluster_secrets (plugin, name, sealed, seq, set_by) VALUES ('hostile', 'api_key', '{kept_sealed}', {kept_seq}, 'cli@x')"
        ),
    );
    assert!(back, "{said}");
    ok(&set_secret(&hosts[0].dir, "hostile", "token", "t-3"));
    for c in &sessions {
        assert_eq!(config_value(c, "read_config", "token").await, "t-3");
        assert_eq!(config_value(c, "read_config", "api_key").await, Value::Null, "a removed value put back");
    }
    // A CLI holding another key changes nothing.
    let stranger = root.join("stranger");
    std::fs::create_dir_all(&stranger).unwrap();
    let other_key = stranger.join("other.key");
    std::fs::write(&other_key, [9u8; 32]).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&other_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(
        stranger.join("toolhost.yaml"),
        format!("cluster:\n  url: {url}\n  secret_key_file: {}\n", other_key.display()),
    )
    .unwrap();
    let refused = set_secret(&stranger, "hostile", "token", "t-evil");
    assert!(!refused.status.success(), "{}", stdout(&refused));
    assert!(stderr(&refused).contains("is not this fleet's key"), "{}", stderr(&refused));
    let host = run(&stranger, &["serve", "--http", "127.0.0.1:0"]);
    assert!(!host.status.success(), "a host with another key joined: {}", stdout(&host));
    assert!(stderr(&host).contains("is not this fleet's key"), "{}", stderr(&host));
    for c in &sessions {
        assert_eq!(config_value(c, "read_config", "token").await, "t-3");
    }
    // Twenty `secret set` at once through the three hosts' configs, for
    // two plugins (issue #47): each secret is its own row, written in a
    // transaction of its own, so all twenty are kept and used everywhere.
    let writers: Vec<_> = (0..20)
        .map(|i| {
            let (dir, plugin) = (hosts[i % 3].dir.clone(), ["hostile", "other"][i % 2]);
            std::thread::spawn(move || set_secret(&dir, plugin, &format!("key{i:02}"), &format!("v-{i:02}")))
        })
        .collect();
    for w in writers {
        ok(&w.join().unwrap());
    }
    let list = run(&hosts[0].dir, &["secret", "list", "--json"]);
    let listed: Vec<Value> = serde_json::from_str(&stdout(&list)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&list)));
    let kept: Vec<String> = listed
        .iter()
        .filter(|s| s["opens"] == true && s["name"].as_str().unwrap().starts_with("key"))
        .map(|s| format!("{}/{}", s["plugin"].as_str().unwrap(), s["name"].as_str().unwrap()))
        .collect();
    let mut want: Vec<String> = (0..20).map(|i| format!("{}/key{i:02}", ["hostile", "other"][i % 2])).collect();
    want.sort();
    assert_eq!(kept, want, "every secret kept");
    for c in &sessions {
        for i in 0..20 {
            let tool = ["read_config", "other_read_config"][i % 2];
            assert_eq!(config_value(c, tool, &format!("key{i:02}")).await, format!("v-{i:02}"));
        }
    }
    for c in sessions {
        let _ = c.cancel().await;
    }
    for m in &mut hosts {
        drop(m.proc.take());
    }
}

/// Two hosts given the same `cluster.host_id` by mistake still apply each
/// other's changes (a host skips only the changes it made itself), and
/// `cluster status` says that two running hosts share the id.
#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_with_one_id_still_apply_each_others_changes_and_status_says_so() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (_db, url) = crate::pg::database();
    let mut twins: Vec<Member> = ["a", "b"]
        .iter()
        .map(|name| {
            let dir = root.join(name);
            configure_plain(&dir, "twin", &url);
            let (proc, url) = start(&dir);
            Member { dir, url, proc: Some(proc) }
        })
        .collect();
    let probe = reqwest::Client::new();
    for m in &twins {
        let readyz = format!("{}/readyz", m.url);
        eventually("both ready", async || probe.get(&readyz).send().await.is_ok_and(|r| r.status() == 200)).await;
    }
    ok(&run(&twins[0].dir, &["override", "bartok", "standard", "--for", "10m"]));
    let on_b = || {
        let agents: Value = serde_json::from_str(&ok(&run(&twins[1].dir, &["agents", "--json"]))).unwrap();
        agents.as_array().unwrap().iter().find(|a| a["name"] == "bartok").unwrap()["dm_override"].clone()
    };
    eventually("the override made on a reaches b", async || !on_b().is_null()).await;
    let flagged = || {
        let o = run(&twins[0].dir, &["cluster", "status"]);
        !o.status.success() && stdout(&o).contains("two running hosts use the id twin")
    };
    eventually("cluster status flags the shared id", async || flagged()).await;
    let logged = std::fs::read_to_string(twins[0].dir.join("serve.log")).unwrap()
        + &std::fs::read_to_string(twins[1].dir.join("serve.log")).unwrap();
    assert!(logged.contains("another running host has this cluster.host_id"), "{logged}");
    for m in &mut twins {
        drop(m.proc.take());
    }
}
