//! A fleet on this machine (issue #34), in one run, beside a throwaway
//! PostgreSQL (`crates/bench/memory/with-postgres` sets
//! `TOOLHOST_BENCH_PG_URL`; `just bench-fleet` does it all):
//!
//! - change propagation: a DM override set through host A's admin API, to
//!   the `tools/list_changed` a session on host C receives; against the same
//!   override set on C itself (no control plane on the path);
//! - `roll` calls per second over streamable HTTP from 12 agents' sessions,
//!   straight to one host, through HAProxy (`deploy/haproxy.cfg`) to one
//!   host, and through HAProxy to three.
//!
//! `TOOLHOST_BIN` (default `target/release/toolhost`), `FLEET_BENCH_N`
//! (default 100 overrides each way), `FLEET_BENCH_SECS` (default 5 per
//! throughput run).

use rmcp::ServiceExt as _;
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolhost::admin::api::SetOverrideRequest;
use toolhost::admin::client::AdminClient;
use toolhost_bench::Proc;

const AGENTS: usize = 12;

/// The failover run's client-side timeout per call.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Sends the instant each `tools/list_changed` arrives.
#[derive(Clone)]
struct Stamps(tokio::sync::mpsc::UnboundedSender<Instant>);

impl ClientHandler for Stamps {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.0.send(Instant::now());
    }
}

struct Host {
    dir: PathBuf,
    url: String,
    _proc: Proc,
}

fn start(bin: &Path, root: &Path, id: &str, pg: &str) -> Host {
    start_as(bin, root, id, pg, true)
}

/// A host in `root/id`; `fleet`: with the control plane (sessions shared),
/// else beside the others with the memory only (each its own sessions).
fn start_as(bin: &Path, root: &Path, id: &str, pg: &str, fleet: bool) -> Host {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let mut npcs = String::new();
    for i in 0..AGENTS {
        npcs.push_str(&format!("  - name: agent{i}\n    budget_tier: fast\n    tools: [roll, search_facts]\n"));
    }
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "{}memory:\n  url: {pg}\nserver:\n  rate_limit: {{ per_minute: 0 }}\n  connection_rate_limit: {{ per_minute: 0 }}\n  max_sessions: 10000\n  max_connections: 4096\n  max_connections_per_address: 4096\nbudget:\n  fast_ms: 10\n  standard_ms: 40\n  background_calibration: false\nnpcs:\n{npcs}",
            if fleet {
                format!("cluster:\n  url: {pg}\n  host_id: {id}\n  secret_key_file: {}\n", root.join("cluster.key").display())
            } else {
                String::new()
            }
        ),
    )
    .unwrap();
    let mut child = Command::new(bin)
        .current_dir(&dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env("TOOLHOST_CACHE_DIR", root.join("cache"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    out.read_line(&mut banner).unwrap();
    std::thread::spawn(move || for _ in out.lines() {});
    let url = banner.split_whitespace().last().unwrap_or_else(|| panic!("banner: {banner}")).to_string();
    Host { dir, url, _proc: Proc(child) }
}

/// HAProxy with `deploy/haproxy.cfg` in front of `hosts`.
fn haproxy(root: &Path, hosts: &[&Host]) -> (Proc, String) {
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/haproxy.cfg")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (head, _) = shipped.split_once("    # FLEET-SERVERS").unwrap();
    let mut cfg = head.replace("    bind :8700\n", &format!("    bind 127.0.0.1:{port}\n"));
    for (i, h) in hosts.iter().enumerate() {
        cfg.push_str(&format!("    server host{i} {} check\n", h.url.trim_start_matches("http://")));
    }
    let path = root.join(format!("haproxy-{port}.cfg"));
    std::fs::write(&path, cfg).unwrap();
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy (scripts/install-peers)");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    (Proc(child), format!("http://127.0.0.1:{port}"))
}

fn wait_ready(hosts: &[&Host]) {
    for h in hosts {
        let addr = h.url.trim_start_matches("http://").to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = std::net::TcpStream::connect(&addr).is_ok_and(|mut s| {
                use std::io::{Read as _, Write as _};
                let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer);
                answer.starts_with("HTTP/1.1 200")
            });
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "{} never ready", h.url);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

/// Overrides of agent0 through `admin`, each waited for as `list_changed`
/// on `session_url`: the delays, and how many never arrived within 5 s.
fn propagation(rt: &tokio::runtime::Runtime, admin: &AdminClient, session_url: &str, n: u64) -> (Vec<Duration>, u64) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _in_rt = rt.enter();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(session_url.to_string());
    let session: RunningService<RoleClient, Stamps> = rt.block_on(Stamps(tx).serve(transport)).unwrap();
    rt.block_on(session.list_all_tools()).unwrap();
    let (mut out, mut missed) = (Vec::new(), 0);
    for i in 0..n * 2 {
        while rx.try_recv().is_ok() {}
        let t0 = Instant::now();
        if i % 2 == 0 {
            let req = SetOverrideRequest { agent: "agent0".into(), tier: toolhost::budget::Tier::Deep, for_secs: 600 };
            admin.set_override(&req).unwrap();
        } else {
            admin.clear_override("agent0").unwrap();
        }
        match rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), rx.recv()).await }) {
            Ok(Some(t1)) => out.push(t1.saturating_duration_since(t0)),
            Ok(None) => panic!("the session closed"),
            Err(_) => missed += 1,
        }
    }
    let _ = rt.block_on(session.cancel());
    (out, missed)
}

/// Sessions opened (`initialize`) per second at `front`, one at a time
/// from each of the agents, and `roll` calls per second over them.
fn sessions_and_calls(rt: &tokio::runtime::Runtime, front: &str, secs: u64) -> (f64, f64) {
    let opened = rt.block_on(async {
        let end = Instant::now() + Duration::from_secs(secs);
        let tasks: Vec<_> = (0..AGENTS)
            .map(|i| {
                let url = format!("{front}/mcp/agent{i}");
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < end {
                        let t = rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone());
                        let s = ().serve(t).await.unwrap();
                        let _ = s.cancel().await;
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total as f64 / secs as f64
    });
    (opened, throughput(rt, front, secs))
}

/// The host of `hosts` that served agent0's last calls (its audit grew).
fn serving(hosts: &[Host]) -> usize {
    let size = |h: &Host| std::fs::metadata(h.dir.join("state/audit.jsonl")).map_or(0, |m| m.len());
    let before: Vec<u64> = hosts.iter().map(size).collect();
    std::thread::sleep(Duration::from_millis(300));
    (0..hosts.len()).max_by_key(|&i| size(&hosts[i]) - before[i]).unwrap()
}

/// `kill -9` of the host serving agent0's session through `front`, while
/// it calls `roll` back to back: the time from the kill to the next call
/// answered, `reps` times (the killed host started again in between).
fn failover(rt: &tokio::runtime::Runtime, bin: &Path, root: &Path, hosts: &mut [Host], reps: usize) -> Vec<Duration> {
    let (_lb, front) = haproxy(root, &hosts.iter().collect::<Vec<_>>());
    let mut gaps = Vec::new();
    for _ in 0..reps {
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let (ok_tx, ok_rx) = std::sync::mpsc::channel::<Instant>();
        let url = format!("{front}/mcp/agent0");
        let caller = rt.spawn(async move {
            let s = ().serve(rmcp::transport::StreamableHttpClientTransport::from_uri(url)).await.unwrap();
            let args = serde_json::json!({"expression": "1d20"}).as_object().unwrap().clone();
            while stop_rx.try_recv().is_err() {
                let p = rmcp::model::CallToolRequestParams::new("roll").with_arguments(args.clone());
                // A call in flight at the kill is never answered (rmcp's
                // client waits on its event stream): 2 s, as a client's
                // timeout would.
                match tokio::time::timeout(CALL_TIMEOUT, s.call_tool(p)).await {
                    Ok(Ok(_)) => {
                        let _ = ok_tx.send(Instant::now());
                    }
                    _ => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), s.cancel()).await;
        });
        ok_rx.recv_timeout(Duration::from_secs(10)).expect("calls answered");
        let victim = serving(hosts);
        let id = hosts[victim].dir.file_name().unwrap().to_str().unwrap().to_string();
        let killed = Instant::now();
        drop(std::mem::replace(&mut hosts[victim]._proc, Proc(Command::new("true").spawn().unwrap())));
        let next = loop {
            let t = ok_rx.recv_timeout(Duration::from_secs(30)).expect("a call answered after the kill");
            if t > killed {
                break t;
            }
        };
        gaps.push(next - killed);
        let _ = stop_tx.send(());
        let _ = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), caller).await });
        // Back, at the same address: HAProxy's server line names it.
        let port = hosts[victim].url.rsplit(':').next().unwrap().to_string();
        hosts[victim] = restart(bin, root, &id, &port);
        wait_ready(&[&hosts[victim]]);
        std::thread::sleep(Duration::from_millis(1500));
    }
    gaps
}

/// The host in `root/id` started again, on `port`.
fn restart(bin: &Path, root: &Path, id: &str, port: &str) -> Host {
    let dir = root.join(id);
    let mut child = Command::new(bin)
        .current_dir(&dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env("TOOLHOST_CACHE_DIR", root.join("cache"))
        .args(["serve", "--http", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::options().append(true).open(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    out.read_line(&mut banner).unwrap();
    std::thread::spawn(move || for _ in out.lines() {});
    Host { dir, url: format!("http://127.0.0.1:{port}"), _proc: Proc(child) }
}

/// `roll` calls per second from one session per agent at `front`, each
/// one call at a time, for `secs`.
fn throughput(rt: &tokio::runtime::Runtime, front: &str, secs: u64) -> f64 {
    rt.block_on(async {
        let mut sessions = Vec::new();
        for i in 0..AGENTS {
            let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(format!("{front}/mcp/agent{i}"));
            sessions.push(().serve(transport).await.unwrap());
        }
        let end = Instant::now() + Duration::from_secs(secs);
        let args = serde_json::json!({"expression": "1d20"}).as_object().unwrap().clone();
        let tasks: Vec<_> = sessions
            .into_iter()
            .map(|s| {
                let args = args.clone();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < end {
                        let p = rmcp::model::CallToolRequestParams::new("roll").with_arguments(args.clone());
                        s.call_tool(p).await.unwrap();
                        n += 1;
                    }
                    let _ = s.cancel().await;
                    n
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total as f64 / secs as f64
    })
}

fn main() {
    let Ok(pg) = std::env::var("TOOLHOST_BENCH_PG_URL") else {
        eprintln!("TOOLHOST_BENCH_PG_URL is not set: run `just bench-fleet`");
        std::process::exit(2);
    };
    let bin = PathBuf::from(
        std::env::var("TOOLHOST_BIN")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/release/toolhost").to_string()),
    );
    let n = env_or("FLEET_BENCH_N", 100);
    let secs = env_or("FLEET_BENCH_SECS", 5);
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key)).unwrap();
        std::fs::write(root.join("cluster.key"), key).unwrap();
        std::fs::set_permissions(root.join("cluster.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let hosts: Vec<Host> = ["a", "b", "c"].iter().map(|id| start(&bin, root, id, &pg)).collect();
    wait_ready(&hosts.iter().collect::<Vec<_>>());

    println!("## Fleet: change propagation and calls through HAProxy\n");
    println!("{}; 3 hosts, PostgreSQL and HAProxy on this machine.\n", toolhost_bench::machine());
    let admin_a = AdminClient::discover(&hosts[0].dir.join("state"), None).unwrap();
    let admin_c = AdminClient::discover(&hosts[2].dir.join("state"), None).unwrap();
    let on_c = format!("{}/mcp/agent0", hosts[2].url);
    let (mut local, local_missed) = propagation(&rt, &admin_c, &on_c, n);
    let (mut remote, remote_missed) = propagation(&rt, &admin_a, &on_c, n);
    println!("| override → `list_changed` ({} each) | p50 | p99 | not within 5 s |", n * 2);
    println!("|---|---|---|---|");
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    println!(
        "| set on C, session on C (no control plane on the path) | {} | {} | {local_missed} |",
        ms(pct(&mut local, 0.5)),
        ms(pct(&mut local, 0.99))
    );
    println!(
        "| set on A, session on C (through PostgreSQL NOTIFY) | {} | {} | {remote_missed} |",
        ms(pct(&mut remote, 0.5)),
        ms(pct(&mut remote, 0.99))
    );

    // What a session costs a host: RSS after opening 500 sessions (each
    // listing its tools once) against before.
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    };
    let pid = hosts[1]._proc.0.id();
    let before = rss(pid);
    let opened: Vec<_> = rt.block_on(async {
        let mut v = Vec::new();
        for i in 0..500 {
            let url = format!("{}/mcp/agent{}", hosts[1].url, i % AGENTS);
            let s = ().serve(rmcp::transport::StreamableHttpClientTransport::from_uri(url)).await.unwrap();
            s.list_all_tools().await.unwrap();
            v.push(s);
        }
        v
    });
    let after = rss(pid);
    println!(
        "\nMemory per open MCP session (500 sessions on one host, each listed its tools once): {:.1} KiB (RSS {} MiB → {} MiB)",
        (after.saturating_sub(before)) as f64 / 500.0,
        before / 1024,
        after / 1024
    );
    rt.block_on(async {
        for s in opened {
            let _ = s.cancel().await;
        }
    });

    let direct = throughput(&rt, &hosts[0].url, secs);
    let (lb1, front1) = haproxy(root, &[&hosts[0]]);
    let via1 = throughput(&rt, &front1, secs);
    drop(lb1);
    let (_lb3, front3) = haproxy(root, &hosts.iter().collect::<Vec<_>>());
    let via3 = throughput(&rt, &front3, secs);
    println!("\n`roll` over streamable HTTP, {AGENTS} agents' sessions, one call at a time each, {secs} s per row:\n");
    println!("| path | calls/s | against direct |");
    println!("|---|---|---|");
    println!("| straight to one host | {direct:.0} | 1.00x |");
    println!("| HAProxy → one host | {via1:.0} | {:.2}x |", via1 / direct);
    println!("| HAProxy → three hosts | {via3:.0} | {:.2}x |", via3 / direct);
    drop(_lb3);

    // Sessions in the control plane (a fleet) against three hosts that
    // share only the memory, each its own sessions (the stick table's
    // setup), through the same HAProxy config; then kill -9.
    let (_lbf, front_f) = haproxy(root, &hosts.iter().collect::<Vec<_>>());
    let (open_f, calls_f) = sessions_and_calls(&rt, &front_f, secs);
    drop(_lbf);
    let mut alone: Vec<Host> = ["x", "y", "z"].iter().map(|id| start_as(&bin, root, id, &pg, false)).collect();
    wait_ready(&alone.iter().collect::<Vec<_>>());
    let (_lbs, front_s) = haproxy(root, &alone.iter().collect::<Vec<_>>());
    let (open_s, calls_s) = sessions_and_calls(&rt, &front_s, secs);
    drop(_lbs);
    println!(
        "\nSessions in the control plane against sticky sessions, HAProxy → three hosts, {AGENTS} agents, {secs} s per row:\n"
    );
    println!("| hosts | sessions opened/s | `roll` calls/s |");
    println!("|---|---|---|");
    println!("| own sessions (stick table only) | {open_s:.0} | {calls_s:.0} |");
    println!(
        "| sessions in the control plane | {open_f:.0} ({:.2}x) | {calls_f:.0} ({:.2}x) |",
        open_f / open_s,
        calls_f / calls_s
    );
    let reps = env_or("FLEET_BENCH_KILLS", 5) as usize;
    let mut fleet_hosts = hosts;
    let mut shared = failover(&rt, &bin, root, &mut fleet_hosts, reps);
    let mut own = failover(&rt, &bin, root, &mut alone, reps);
    println!(
        "\n`kill -9` of the host serving a session calling `roll` back to back (2 s timeout a call), to its next answered call ({reps} kills each, the host started again between):\n"
    );
    println!("| hosts | median | max |");
    println!("|---|---|---|");
    let max = |v: &[Duration]| ms(*v.iter().max().unwrap());
    println!(
        "| own sessions (rmcp's client initializes again on the 404) | {} | {} |",
        ms(pct(&mut own, 0.5)),
        max(&own)
    );
    println!(
        "| sessions in the control plane (restored, no new session) | {} | {} |",
        ms(pct(&mut shared, 0.5)),
        max(&shared)
    );
}
