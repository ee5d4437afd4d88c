//! No plugin can take the host down or act as the operator (#47), through
//! the binary: the `webclient` test plugin made hostile (`hoard` keeps
//! host-side `wasi:http` resources, `burst` starts lookups that never end),
//! a name server of the test's own that answers with special-purpose
//! addresses or never answers, and grants that name loopback ports.

use crate::common::{stderr, stdout, toolhost};
use crate::live::{Client, Proc, Watcher, serve};
use crate::peers::{free_port, peers_dir, python, spawn_listening};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use std::net::{Ipv4Addr, Ipv6Addr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use toolhost_test_artifacts::WEBCLIENT_PATH;

/// A name server on loopback: a name whose first label is an address
/// written with `-` for `.` (IPv4: `192-0-2-1.policy.test`) or for `:`
/// (IPv6, after `six-`: `six-64-ff9b--a00-1.policy.test`) is answered with
/// that address; with `silent`, nothing is ever answered.
pub(crate) struct NameServer {
    pub(crate) port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Queries received so far.
    pub(crate) queries: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for NameServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

pub(crate) fn name_server(silent: bool) -> NameServer {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let port = socket.local_addr().unwrap().port();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let queries = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (stopped, counted) = (stop.clone(), queries.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else { continue };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if silent || n < 12 {
                continue;
            }
            if let Some(answer) = answer(&buf[..n]) {
                let _ = socket.send_to(&answer, from);
            }
        }
    });
    NameServer { port, stop, queries }
}

/// The answer to one query, by the name's first label.
fn answer(query: &[u8]) -> Option<Vec<u8>> {
    let mut i = 12;
    let mut labels = Vec::new();
    while *query.get(i)? != 0 {
        let len = query[i] as usize;
        labels.push(String::from_utf8_lossy(query.get(i + 1..i + 1 + len)?).into_owned());
        i += 1 + len;
    }
    let question_end = i + 5;
    let qtype = u16::from_be_bytes([*query.get(i + 1)?, *query.get(i + 2)?]);
    let first = labels.first()?.to_ascii_lowercase();
    let rdata: Option<Vec<u8>> = match (qtype, first.strip_prefix("six-")) {
        (28, Some(v6)) => v6.replace('-', ":").parse::<Ipv6Addr>().ok().map(|a| a.octets().to_vec()),
        (1, None) => first.replace('-', ".").parse::<Ipv4Addr>().ok().map(|a| a.octets().to_vec()),
        _ => None,
    };
    let mut out = query[..2].to_vec();
    out.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(rdata.is_some()), 0, 0, 0, 0]);
    out.extend_from_slice(query.get(12..question_end)?);
    if let Some(rdata) = rdata {
        out.extend_from_slice(&[0xc0, 0x0c]);
        out.extend_from_slice(&qtype.to_be_bytes());
        out.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
        out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(&rdata);
    }
    Some(out)
}

/// `toolhost call TOOL ARGS` in `dir`.
fn call(dir: &Path, tool: &str, args: Value) -> std::process::Output {
    toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["call", tool, &args.to_string()])
        .output()
        .unwrap()
}

fn http_origin(dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.current_dir(dir).arg(peers_dir().join("http_origin.py")).arg(port.to_string());
    (spawn_listening(cmd, port), port)
}

/// A config loading `webclient` (and the built-ins), granted `grants`.
fn config(dir: &Path, grants: &[String], extra: &str) {
    let yaml = format!(
        "plugins:\n  files: [{WEBCLIENT_PATH:?}]\n  grants:\n    webclient:\n      http: {}\n{extra}",
        serde_json::to_string(grants).unwrap()
    );
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
}

async fn connect(url: &str, path: &str) -> Client {
    Watcher::default().serve(StreamableHttpClientTransport::from_uri(format!("{url}{path}"))).await.expect("initialize")
}

/// Calls `tool`: `Ok(text)` or `Err((kind, text))`.
async fn mcp_call(peer: rmcp::Peer<rmcp::RoleClient>, tool: &str, args: Value) -> Result<String, (String, String)> {
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().unwrap().clone());
    let r = peer.call_tool(params).await.map_err(|e| ("transport".to_string(), e.to_string()))?;
    let text = r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n");
    if r.is_error == Some(true) {
        let kind = r.meta.as_ref().and_then(|m| m.0["toolhost"]["kind"].as_str()).unwrap_or("error").to_string();
        Err((kind, text))
    } else {
        Ok(text)
    }
}

/// A field of `/proc/PID/status`, in KiB (or a count).
fn status(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Finding 1: a guest that makes `wasi:http` fields in a loop, each with a
/// 120 KiB header, grew the host by 1 GB a call. Each call now ends with
/// `memory_limit` at `limits.host_resources_per_call`, and six at once keep
/// the host's peak within a quarter of their memory each and a margin.
#[tokio::test(flavor = "multi_thread")]
async fn host_side_resources_count_against_the_calls_memory() {
    let t = tempfile::tempdir().unwrap();
    config(t.path(), &["https://api.example.test".into()], "");
    let (host, url) = serve(t.path());
    let pid = host.0.id();
    // The calls' memory, not the plugin's background compile.
    crate::live::optimized(t.path());
    let operator = connect(&url, "/mcp").await;
    // Warm: the plugin's instance pool, a small hoard, a roll.
    assert_eq!(
        mcp_call(operator.peer().clone(), "hoard", json!({"count": 8, "bytes": 1024})).await.unwrap(),
        "kept 8 fields; 0 headers refused"
    );
    mcp_call(operator.peer().clone(), "roll", json!({"expression": "1d20"})).await.unwrap();
    let baseline = status(pid, "VmRSS");
    // A header larger than a fields resource may hold (a quarter of 64
    // MiB among 1024 resources: 16 KiB) ends the call the same way.
    let (kind, text) =
        mcp_call(operator.peer().clone(), "hoard", json!({"count": 4, "bytes": 200 << 10})).await.unwrap_err();
    assert_eq!(kind, "memory_limit", "{text}");
    assert!(text.contains("made a set of HTTP headers over 16384 bytes"), "{text}");
    async fn six(operator: &Client) {
        let calls: Vec<_> = (0..6)
            .map(|_| tokio::spawn(mcp_call(operator.peer().clone(), "hoard", json!({"bytes": 12 << 10}))))
            .collect();
        for c in calls {
            let (kind, text) = c.await.unwrap().unwrap_err();
            assert_eq!(kind, "memory_limit", "{text}");
            assert!(text.contains("made more than 1024 host-side resources"), "{text}");
        }
    }
    six(&operator).await;
    let (peak, after) = (status(pid, "VmHWM"), status(pid, "VmRSS"));
    // Each call's fields may hold a quarter of its 64 MiB; six at once,
    // with the maps' own overhead, and 64 MiB for the rest of the host.
    let bound = 6 * 16 * 1024 * 3 / 2 + 64 * 1024;
    eprintln!(
        "host RSS: baseline {baseline} KiB, peak {peak} KiB, after {after} KiB; bound above baseline {bound} KiB"
    );
    assert!(peak < baseline + bound, "peak {peak} KiB against a baseline of {baseline} KiB");
    // Everything a call made is freed when it ends: the allocator keeps
    // the pages for reuse, so six more such calls take no more.
    six(&operator).await;
    let (peak2, after2) = (status(pid, "VmHWM"), status(pid, "VmRSS"));
    eprintln!("after six more: peak {peak2} KiB, after {after2} KiB");
    assert!(peak2 < peak + 16 * 1024, "the second six grew the peak from {peak} to {peak2} KiB");
    assert!(after2 < after + 16 * 1024, "the second six grew the host from {after} to {after2} KiB");
    // And the host serves on.
    mcp_call(operator.peer().clone(), "roll", json!({"expression": "1d20"})).await.unwrap();
}

/// Finding 2: lookups to a name server that never answers held a thread
/// each, so 64 calls of 16 lookups stalled every other agent's calls for
/// 10 s. Now a lookup holds no thread, a plugin has at most 16 in flight,
/// each ends at its call's deadline, and another agent's `roll` goes on.
#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::await_holding_lock, reason = "a test-wide lock held by the test's own thread, which block_on runs")]
async fn a_name_server_that_never_answers_delays_only_its_plugin() {
    // Alice's latencies are compared: no guest build beside them.
    let _quiet = crate::common::quiet();
    let t = tempfile::tempdir().unwrap();
    let ns = name_server(true);
    config(
        t.path(),
        &["http://*.slow.test".into()],
        &format!(
            "  http_nameservers: [\"127.0.0.1:{}\"]\nserver:\n  rate_limit: {{ per_minute: 0 }}\nbudget:\n  background_calibration: false\n  pin: {{ burst: deep }}\nnpcs:\n  - name: mallory\n    budget_tier: deep\n    tools: [burst]\n  - name: alice\n    budget_tier: deep\n    tools: [roll]\n",
            ns.port
        ),
    );
    let (host, url) = serve(t.path());
    let pid = host.0.id();
    // Alice's rolls against the bursts, not against a background compile.
    crate::live::optimized(t.path());
    let (mallory, alice) = (connect(&url, "/mcp/mallory").await, connect(&url, "/mcp/alice").await);
    async fn rolls(alice: &Client, n: usize) -> Vec<Duration> {
        let mut took = Vec::new();
        for _ in 0..n {
            let at = Instant::now();
            mcp_call(alice.peer().clone(), "roll", json!({"expression": "1d20"})).await.unwrap();
            took.push(at.elapsed());
        }
        took.sort();
        took
    }
    let p99 = |v: &[Duration]| v[(v.len() * 99 / 100).min(v.len() - 1)];
    let quiet = rolls(&alice, 100).await;
    let threads_before = status(pid, "Threads");
    let started = Instant::now();
    let bursts: Vec<_> = (0..64)
        .map(|i| {
            tokio::spawn(mcp_call(
                mallory.peer().clone(),
                "burst",
                json!({"url": format!("http://n{i}.slow.test/"), "n": 16}),
            ))
        })
        .collect();
    // Once the bursts are stalled in their lookups (the plugin's 16 in
    // flight have reached the name server): alice's rolls meanwhile.
    let deadline = Instant::now() + Duration::from_secs(5);
    while ns.queries.load(std::sync::atomic::Ordering::SeqCst) < 16 {
        assert!(Instant::now() < deadline, "the lookups never reached the name server");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let busy = rolls(&alice, 100).await;
    let threads_during = status(pid, "Threads");
    let mut answered = 0;
    for b in bursts {
        match b.await.unwrap() {
            Ok(text) => {
                let outcomes: Vec<String> = serde_json::from_str(&text).unwrap();
                assert_eq!(outcomes.len(), 16);
                assert!(outcomes.iter().all(|o| o.contains("Dns")), "{outcomes:?}");
                answered += 1;
            }
            // Its lookups wait for the plugin's share (16 at once): such a
            // call ends at its deadline, like any call that waits too long.
            Err((kind, _)) if kind == "timeout" => answered += 1,
            // Past mallory's share of calls at once: refused, not queued.
            Err((kind, text)) => assert_eq!(kind, "capacity_exceeded", "{text}"),
        }
    }
    let all_done = started.elapsed();
    eprintln!(
        "alice's roll p99: {:?} alone, {:?} beside 64 bursts ({answered} ran); threads {threads_before} -> {threads_during}; the bursts ended after {all_done:?}",
        p99(&quiet),
        p99(&busy)
    );
    assert!(answered > 0, "some bursts ran");
    // The calls themselves run on threads (at most mallory's 32 at once);
    // the lookups hold none (before: 520, tokio's blocking pool full).
    assert!(threads_during < threads_before + 32 + 32, "lookups hold no thread: {threads_before} -> {threads_during}");
    // The issue's bound (2x), with 20 ms of slack for a 2-core machine's
    // scheduler: before the fix it was 9.76 s.
    assert!(
        p99(&busy) < 2 * p99(&quiet) + Duration::from_millis(20),
        "alice's p99 {:?} beside the bursts, {:?} alone",
        p99(&busy),
        p99(&quiet)
    );
}

/// Finding 3: a grant of one loopback port let a name resolving to
/// loopback reach any port there, toolhost's own front included, where the
/// plugin was the operator. A literal grant now reaches its address and
/// port only, and toolhost's own listeners never, whatever the grants say.
#[test]
fn a_loopback_grant_reaches_its_port_only_and_never_the_hosts_own_listeners() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (_origin, port) = http_origin(dir);
    let (_other, other) = http_origin(dir);
    let ns = name_server(false);
    let front = free_port();
    // The front listens on `front`; the plugin is granted the origin's
    // port by address, a name resolving to loopback on the other origin's
    // port and on the front's, and the front by address (an operator's
    // mistake).
    config(
        dir,
        &[
            format!("http://127.0.0.1:{port}"),
            format!("http://127-0-0-1.policy.test:{other}"),
            format!("http://127-0-0-1.policy.test:{front}"),
            format!("http://127.0.0.1:{front}"),
        ],
        &format!("  http_nameservers: [\"127.0.0.1:{}\"]\n", ns.port),
    );
    let mut cmd = toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args([
        "serve",
        "--http",
        &format!("127.0.0.1:{front}"),
    ]);
    let (_host, url) = crate::live::spawn_serving(cmd);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let operator = connect(&url, "/mcp").await;
        let get = |u: String| mcp_call(operator.peer().clone(), "get", json!({"url": u}));
        // The granted port: reached.
        let out = get(format!("http://127.0.0.1:{port}/")).await.unwrap();
        assert!(out.contains("hello from the origin"), "{out}");
        // The other port on the same address, by a name: refused by the policy.
        let (_, err) = get(format!("http://127-0-0-1.policy.test:{other}/")).await.unwrap_err();
        assert!(err.contains("a loopback address, which a grant by name does not reach"), "{err}");
        // The front, by a name resolving to it and by its address, both
        // granted: its probes, metrics, MCP endpoint, page and admin API
        // are never reached.
        for path in ["/healthz", "/metrics", "/mcp", "/ui/api/state", "/admin/plugins"] {
            for base in [url.clone(), format!("http://127-0-0-1.policy.test:{front}")] {
                let (kind, text) = get(format!("{base}{path}")).await.unwrap_err();
                assert_eq!(kind, "failed", "{text}");
                assert!(text.contains("is one of toolhost's own listeners"), "{base}{path}: {text}");
            }
        }
    });
}

/// Finding 9: addresses of the IANA special-purpose registries (and IPv4
/// inside IPv6 forms), userinfo in the authority, and an operator's pin
/// reached through another grant's wildcard: each refused, saying why.
#[test]
fn special_purpose_addresses_userinfo_and_anothers_pin_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let ns = name_server(false);
    let (_origin, port) = http_origin(dir);
    config(
        dir,
        &[
            "http://*.policy.test".into(),
            format!("http://*.example.test:{port}"),
            format!("http://api.example.test:{port}"),
        ],
        &format!(
            "  http_nameservers: [\"127.0.0.1:{}\"]\n  http_resolve:\n    \"api.example.test:{port}\": \"127.0.0.1:{port}\"\n    \"internal.example.test:{port}\": \"127.0.0.1:{port}\"\n",
            ns.port
        ),
    );
    for (name, kind) in [
        ("192-0-2-1", "documentation"),
        ("198-51-100-7", "documentation"),
        ("203-0-113-9", "documentation"),
        ("198-18-0-1", "benchmarking"),
        ("240-0-0-1", "reserved"),
        ("192-0-0-8", "IETF protocol assignment"),
        ("six-64-ff9b--a00-1", "private"),
        ("six-64-ff9b--7f00-1", "loopback"),
        ("six-2002-a9fe-a9fe--1", "link-local"),
        ("six-2002-7f00-1--1", "loopback"),
        ("six---7f00-1", "loopback"),
        ("six---a00-1", "private"),
        ("six---ffff-a00-1", "private"),
        ("six-fec0--1", "site-local"),
        ("six-2001-db8--1", "documentation"),
    ] {
        let o = call(dir, "get", json!({"url": format!("http://{name}.policy.test/")}));
        assert!(!o.status.success(), "{name}: {}", stdout(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&format!("{name}.policy.test resolves to"))
                && err.contains(kind)
                && err.contains("which a grant by name does not reach"),
            "{name}: {err}"
        );
    }
    // Userinfo: refused before anything is sent.
    let o = call(dir, "get", json!({"url": format!("http://user:pw@api.example.test:{port}/")}));
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("a user name or password in the URL's authority (user@host) is not sent"),
        "{}",
        stderr(&o)
    );
    // The pin for the name the grant names: used.
    let o = call(dir, "get", json!({"url": format!("http://api.example.test:{port}/")}));
    assert!(o.status.success() && stdout(&o).contains("hello from the origin"), "{}{}", stdout(&o), stderr(&o));
    // A pin reached only through the wildcard: refused.
    let o = call(dir, "get", json!({"url": format!("http://internal.example.test:{port}/")}));
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(
            "is pinned by plugins.http_resolve, which applies only to the plugins whose grants name that host"
        ),
        "{}",
        stderr(&o)
    );
}

/// Finding 4: 96 calls of 256 descriptors each took 19,998 of the
/// process's 20,000, and other agents' calls and new sessions failed. Now
/// plugins share three quarters of the descriptors, a share per caller: the
/// flooding agent is held to its share, and another agent's opens, calls,
/// a new session and the probes go on (here with a limit of 2,048).
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_descriptors_leaves_other_agents_and_new_sessions_working() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("data")).unwrap();
    std::fs::write(t.path().join("data/held"), "x").unwrap();
    std::fs::write(
        t.path().join("toolhost.yaml"),
        format!(
            "server:\n  rate_limit: {{ per_minute: 0 }}\nlimits:\n  agent_concurrency: 128\n  plugin_concurrency: 256\nbudget:\n  background_calibration: false\n  pin: {{ hold_open: deep }}\nplugins:\n  files: [{:?}]\n  grants:\n    hostile:\n      files:\n        - dir: ./data\n          mode: read-only\nnpcs:\n  - name: mallory\n    budget_tier: deep\n    tools: [hold_open]\n  - name: alice\n    budget_tier: deep\n    tools: [hold_open, roll]\n",
            toolhost_test_artifacts::HOSTILE_PATH
        ),
    )
    .unwrap();
    let mut cmd = Command::new("prlimit");
    cmd.arg("--nofile=2048:2048")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(t.path())
        .env("TOOLHOST_CACHE_DIR", crate::common::CACHE.path())
        .env("TOOLHOST_STATE_DIR", t.path().join("state"))
        .env("TOOLHOST_ALLOW_UNSIGNED", "1")
        .args(["serve", "--http", "127.0.0.1:0"]);
    let (host, url) = crate::live::spawn_serving(cmd);
    let pid = host.0.id();
    let (mallory, alice) = (connect(&url, "/mcp/mallory").await, connect(&url, "/mcp/alice").await);
    let hold = |peer: rmcp::Peer<rmcp::RoleClient>, count: u64, ms: u64| {
        tokio::spawn(mcp_call(peer, "hold_open", json!({"path": "/held", "count": count, "ms": ms})))
    };
    let flood: Vec<_> = (0..96).map(|_| hold(mallory.peer().clone(), 256, 2500)).collect();
    // While the flood holds what it could get.
    let deadline = Instant::now() + Duration::from_secs(3);
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    while fds() < 700 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let during = fds();
    let mine = mcp_call(alice.peer().clone(), "hold_open", json!({"path": "/held", "count": 20})).await.unwrap();
    assert_eq!(mine, r#"{"opened": 20}"#, "alice's opens");
    mcp_call(alice.peer().clone(), "roll", json!({"expression": "1d20"})).await.unwrap();
    let fresh = connect(&url, "/mcp/alice").await;
    mcp_call(fresh.peer().clone(), "roll", json!({"expression": "1d20"})).await.unwrap();
    let ready = reqwest::get(format!("{url}/readyz")).await.unwrap();
    assert!(ready.status().is_success(), "{}", ready.status());
    let mut opened = 0;
    for f in flood {
        let text = f.await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        opened += v["opened"].as_u64().unwrap();
    }
    eprintln!("mallory's 96 calls opened {opened} files together; the process held {during} descriptors at most");
    // Her share: half of the plugins' 1,536 while she held alone.
    assert!(opened <= 1536 / 2 + 96, "mallory held {opened}");
    assert!(during < 2048 - 256, "the host's reserve stayed free: {during}");
}
