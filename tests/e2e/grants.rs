//! Capability grants: deny by default, the fileio sandbox on a real
//! directory, environment variables, the `grants` report.

use crate::common::{CACHE, stderr, stdout, toolhost};
use serde_json::{Value, json};
use std::path::Path;
use toolhost::Host;
use toolhost::capabilities::{DirGrantConfig, DirMode, GrantConfig, GrantsByPlugin};
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::{CallContext, CallError, Content};
use toolhost_test_artifacts::HOSTILE_PATH;

/// A host whose fileio plugin is granted `dir` (and the hostile plugin `env`).
fn host(dir: Option<(&Path, DirMode)>, env: &[&str]) -> Host {
    let mut grants = GrantsByPlugin::new();
    if let Some((d, mode)) = dir {
        grants.insert(
            "fileio".into(),
            GrantConfig {
                files: vec![DirGrantConfig { dir: d.to_path_buf(), mode, mount: "/".into(), ..Default::default() }],
                ..Default::default()
            },
        );
    }
    grants.insert(
        "hostile".into(),
        GrantConfig { env: env.iter().map(|s| s.to_string()).collect(), ..Default::default() },
    );
    // These tests are about the sandbox, not latency: a generous deadline
    // floor keeps fsync on a loaded CI disk from turning into timeouts.
    let limits = Limits { timeout_floor: std::time::Duration::from_secs(5), ..Limits::default() };
    let rt = Runtime::new(limits, Some(CACHE.path())).unwrap();
    let cfg = toolhost::budget::BudgetConfig { fast_ms: 10_000, ..Default::default() };
    let host =
        Host::with_budget(rt, toolhost::budget::Budget::new(cfg, Vec::new())).with_grants(grants, Path::new("/"));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    host.admission().add_plugin_file(Path::new(HOSTILE_PATH)).unwrap();
    host
}

fn call(h: &Host, tool: &str, args: Value) -> Result<Value, CallError> {
    h.call(tool, &args, &CallContext::default()).map(|o| match &o.content[..] {
        [Content::Json(v)] => v.clone(),
        [Content::Text(t)] => Value::String(t.clone()),
        other => panic!("{other:?}"),
    })
}

/// Every file under `dir`, with its content, for before/after comparisons.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn write_read_and_list_inside_the_granted_directory() {
    let sandbox = tempfile::tempdir().unwrap();
    let h = host(Some((sandbox.path(), DirMode::ReadWrite)), &[]);
    let w =
        call(&h, "write_file", json!({"path": "campaign/session-1.md", "content": "The party met Bartok."})).unwrap();
    assert_eq!(w["bytes"], 21);
    assert_eq!(std::fs::read_to_string(sandbox.path().join("campaign/session-1.md")).unwrap(), "The party met Bartok.");
    let r = call(&h, "read_file", json!({"path": "campaign/session-1.md"})).unwrap();
    assert_eq!(r["content"], "The party met Bartok.");
    let l = call(&h, "list_dir", json!({"path": "campaign"})).unwrap();
    assert_eq!(l["entries"], json!([{"name": "session-1.md", "kind": "file", "bytes": 21}]));
    // Overwrite replaces the whole file.
    call(&h, "write_file", json!({"path": "campaign/session-1.md", "content": "short"})).unwrap();
    assert_eq!(std::fs::read_to_string(sandbox.path().join("campaign/session-1.md")).unwrap(), "short");
}

#[test]
fn every_traversal_attempt_is_refused_and_the_disk_is_untouched() {
    let outer = tempfile::tempdir().unwrap();
    let sandbox = outer.path().join("sandbox");
    std::fs::create_dir(&sandbox).unwrap();
    std::fs::write(outer.path().join("secret.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(outer.path(), sandbox.join("escape")).unwrap();
    std::os::unix::fs::symlink(outer.path().join("secret.txt"), sandbox.join("secret-link")).unwrap();
    let h = host(Some((&sandbox, DirMode::ReadWrite)), &[]);
    let before = snapshot(outer.path());
    let long = "a/".repeat(600) + "x";
    for (tool, args) in [
        ("read_file", json!({"path": "../secret.txt"})),
        ("read_file", json!({"path": "/etc/passwd"})),
        ("read_file", json!({"path": format!("{}/secret.txt", outer.path().display())})),
        ("read_file", json!({"path": "escape/secret.txt"})),
        ("read_file", json!({"path": "secret-link"})),
        ("read_file", json!({"path": "a\u{0}b"})),
        ("write_file", json!({"path": "../evil.txt", "content": "x"})),
        ("write_file", json!({"path": "escape/evil.txt", "content": "x"})),
        ("write_file", json!({"path": "/tmp/evil.txt", "content": "x"})),
        ("list_dir", json!({"path": "escape"})),
        ("list_dir", json!({"path": ".."})),
    ] {
        let e = call(&h, tool, args.clone()).expect_err(&format!("{tool} {args} must fail"));
        assert!(
            matches!(e, CallError::InvalidInput { .. } | CallError::Forbidden { .. } | CallError::NotFound { .. }),
            "{tool} {args}: {e:?}"
        );
    }
    let long_err = call(&h, "read_file", json!({"path": long})).unwrap_err();
    assert!(matches!(long_err, CallError::InvalidInput { .. }), "{long_err:?}");
    assert_eq!(snapshot(outer.path()), before, "nothing outside the sandbox changed");
    // Writing to the name of a symlink replaces the link inside the sandbox
    // (atomic rename); it never writes through it.
    call(&h, "write_file", json!({"path": "secret-link", "content": "overwritten"})).unwrap();
    assert!(!sandbox.join("secret-link").is_symlink());
    assert_eq!(std::fs::read_to_string(outer.path().join("secret.txt")).unwrap(), "outside");
}

#[test]
fn without_a_grant_no_directory_is_reachable() {
    let h = host(None, &[]);
    match call(&h, "read_file", json!({"path": "anything.txt"})) {
        Err(CallError::Forbidden { message, .. }) => assert!(message.contains("no directory was granted"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(call(&h, "write_file", json!({"path": "a", "content": "b"})), Err(CallError::Forbidden { .. })));
}

#[test]
fn a_read_only_grant_reads_but_never_writes() {
    let sandbox = tempfile::tempdir().unwrap();
    std::fs::write(sandbox.path().join("rules.md"), "house rules").unwrap();
    let h = host(Some((sandbox.path(), DirMode::ReadOnly)), &[]);
    assert_eq!(call(&h, "read_file", json!({"path": "rules.md"})).unwrap()["content"], "house rules");
    let e = call(&h, "write_file", json!({"path": "rules.md", "content": "changed"})).unwrap_err();
    assert!(matches!(e, CallError::Forbidden { .. }), "{e:?}");
    assert_eq!(std::fs::read_to_string(sandbox.path().join("rules.md")).unwrap(), "house rules");
}

#[test]
fn files_over_1_mib_are_not_read() {
    let sandbox = tempfile::tempdir().unwrap();
    std::fs::write(sandbox.path().join("big.txt"), vec![b'x'; (1 << 20) + 1]).unwrap();
    let h = host(Some((sandbox.path(), DirMode::ReadWrite)), &[]);
    match call(&h, "read_file", json!({"path": "big.txt"})) {
        Err(CallError::InvalidInput { message, .. }) => assert!(message.contains("1 MiB"), "{message}"),
        other => panic!("{other:?}"),
    }
}

/// The same `toolhost` process environment, twice: once without a grant,
/// once with a grant of one variable. Only the grant differs, so what the
/// hostile plugin's `env` tool sees is what the host hands it, not what the
/// process has.
#[test]
fn environment_variables_are_invisible_without_a_grant() {
    let name = "TOOLHOST_E2E_SECRET";
    let dir = tempfile::tempdir().unwrap();
    let env_tool = || {
        let out = toolhost()
            .current_dir(dir.path())
            .env(name, "hunter2")
            .env("OTHER_SECRET", "nope")
            .args(["call", "env", "--plugin", HOSTILE_PATH])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    // No config file: nothing granted. The variables are in the toolhost
    // process's environment (set on the command) and the guest sees none.
    let seen = env_tool();
    assert!(!seen.contains("hunter2") && !seen.contains("nope"), "leaked: {seen}");
    assert!(seen.trim().is_empty(), "no variable at all: {seen}");

    // The same command with `env: [NAME]` granted: exactly that variable,
    // with the value the process was given; the other one stays hidden.
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!("plugins:\n  grants:\n    hostile:\n      env: [{name}, TOOLHOST_E2E_UNSET]\n"),
    )
    .unwrap();
    let seen = env_tool();
    assert_eq!(seen.trim(), format!("{name}=hunter2"), "exactly the granted variable that is set: {seen}");
}

#[test]
fn grants_report_lists_every_plugin_with_what_it_may_touch() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "plugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./files\n          mode: read-only\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("files")).unwrap();
    let o = toolhost().current_dir(dir.path()).args(["grants", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let plugins: Vec<&str> = v.as_array().unwrap().iter().map(|p| p["plugin"].as_str().unwrap()).collect();
    assert_eq!(plugins, ["diceroller", "fileio", "memorytool", "ruleslookup"]);
    let memorytool = &v[2];
    assert_eq!(memorytool["granted"]["memory"], true, "the built-in memory tool holds the memory grant by default");
    assert!(memorytool["denied"].as_array().unwrap().iter().all(|d| d != "memory"));
    let fileio = &v[1];
    assert_eq!(fileio["granted"]["files"][0]["mode"], "read-only");
    assert!(fileio["asks_for"].as_array().unwrap().contains(&json!("files")));
    assert!(fileio["allows"][0].as_str().unwrap().starts_with("may read files under"), "{}", fileio["allows"]);
    assert_eq!(fileio["sha256"].as_str().unwrap().len(), 64);
    let dice = &v[0];
    assert_eq!(
        dice["granted"],
        json!({"files": [], "env": [], "memory": false, "network": [], "http": [], "memory_write": false})
    );
    assert!(dice["allows"][0].as_str().unwrap().starts_with("nothing granted"));
}

/// CPython as componentize-py builds it imports every `wasi:sockets`
/// interface whether or not the plugin opens a socket: without a network
/// grant they load inert, as files and env do. Every socket is refused, and
/// nothing reaches the address it names.
#[test]
fn a_plugin_importing_sockets_without_a_grant_loads_with_every_socket_refused() {
    use std::sync::atomic::Ordering::SeqCst;
    use toolhost_test_artifacts::NETCLIENT_PATH;
    let (addr, hits) = http_server("HTTP/1.0 200 OK\r\n\r\nnot for an ungranted plugin".into());
    let h = Host::new(Runtime::new(Limits::default(), Some(CACHE.path())).unwrap());
    h.admission().add_plugin_file(Path::new(NETCLIENT_PATH)).unwrap();
    let e = call(&h, "fetch", json!({"addr": addr.to_string()})).unwrap_err();
    assert!(matches!(e, CallError::Forbidden { .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("connect {addr}")), "{e}");
    assert_eq!(hits.load(SeqCst), 0, "no connection reached the address");
    // Through the binary: it loads, and inspect shows its sockets inert.
    let o = toolhost().args(["tools", "--plugin", NETCLIENT_PATH]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = toolhost().args(["inspect", NETCLIENT_PATH, "--json"]).output().unwrap();
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["imports"].as_array().unwrap().iter().any(|i| i.as_str().unwrap().starts_with("wasi:sockets/")));
    assert_eq!(v["loadable"], true, "{v}");
    assert!(v["inert"].as_array().unwrap().contains(&json!("network")), "{v}");
    assert!(v["denied"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn sigkill_during_a_large_write_leaves_the_old_or_the_new_file_never_a_mix() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "plugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./files\n",
    )
    .unwrap();
    let target = dir.path().join("files/big.txt");
    let write = |fill: char| {
        let content = fill.to_string().repeat(1 << 20);
        let args = json!({"path": "big.txt", "content": content}).to_string();
        let mut child = toolhost()
            .current_dir(dir.path())
            .args(["call", "write_file", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            use std::io::Write as _;
            let _ = stdin.write_all(args.as_bytes());
        });
        child
    };
    let files = dir.path().join("files");
    // fileio's temporary siblings of big.txt: a write in progress, or one a
    // kill interrupted (removed by the rename otherwise).
    let temps = || -> std::collections::BTreeSet<std::ffi::OsString> {
        std::fs::read_dir(&files)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name())
                    .filter(|n| n.to_string_lossy().starts_with(".big.txt.tmp-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    // The old file, written whole. Under a loaded CI machine a 1 MiB write
    // can meet write_file's deadline, which stops it mid-write and leaves
    // its temporary file (as a kill does); this is setup, so it may try
    // again, after clearing what the stopped attempt left.
    let written = (0..3).any(|_| {
        let finished = write('a').wait().unwrap().success();
        if !finished {
            for t in temps() {
                let _ = std::fs::remove_file(files.join(t));
            }
        }
        finished
    });
    assert!(written, "the first write of big.txt failed three times");
    assert!(temps().is_empty(), "a finished write leaves no temporary file");
    let mut mid_write = 0;
    for i in 0..12u64 {
        let fill = if i % 2 == 0 { 'b' } else { 'a' };
        let before = temps();
        let stamp = || {
            use std::os::unix::fs::MetadataExt as _;
            let m = std::fs::metadata(&target).unwrap();
            (m.ino(), m.len(), m.mtime_nsec(), m.mtime())
        };
        let old = stamp();
        let mut child = write(fill);
        // Kill once the write has begun (a temporary file exists, or the
        // target itself changed), at a different moment each round: at
        // once, or a little later (into the fsync or the rename). A run
        // that ends before either is seen is not killed mid-write, and is
        // not counted as such.
        let started = std::time::Instant::now();
        let seen = loop {
            if temps().len() > before.len() || stamp() != old {
                break true;
            }
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(60), "round {i}: the write never began");
            std::thread::sleep(std::time::Duration::from_micros(200));
        };
        if seen {
            std::thread::sleep(std::time::Duration::from_millis(i % 4));
        }
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        // A temporary file left behind: the kill landed after the write
        // began and before its rename, mid-write.
        if temps().len() > before.len() {
            mid_write += 1;
        }
        let bytes = std::fs::read(&target).unwrap();
        assert_eq!(bytes.len(), 1 << 20, "round {i}: torn length");
        let first = bytes[0];
        assert!(first == b'a' || first == b'b', "round {i}");
        assert!(bytes.iter().all(|&b| b == first), "round {i}: a mix of old and new content");
    }
    eprintln!("{mid_write} of 12 kills landed mid-write");
    assert!(mid_write >= 3, "only {mid_write} of 12 kills landed mid-write");
}

/// A one-shot HTTP server on loopback answering every request with `reply`;
/// returns its address and a counter of connections it accepted.
fn http_server(reply: String) -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Read the whole request head before answering.
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(reply.as_bytes());
        }
    });
    (addr, hits)
}

#[test]
fn a_network_grant_reaches_exactly_the_granted_address() {
    use std::sync::atomic::Ordering::SeqCst;
    use toolhost_test_artifacts::NETCLIENT_PATH;
    let (other, other_hits) = http_server("HTTP/1.0 200 OK\r\n\r\nSECRET from the other service".into());
    let (granted, granted_hits) =
        http_server(format!("HTTP/1.0 302 Found\r\nLocation: http://{other}/\r\n\r\nhello from the granted service"));
    let mut grants = GrantsByPlugin::new();
    grants.insert("netclient".into(), GrantConfig { network: vec![granted.to_string()], ..Default::default() });
    let limits = Limits { timeout_floor: std::time::Duration::from_secs(5), ..Limits::default() };
    let rt = Runtime::new(limits, Some(CACHE.path())).unwrap();
    let h = Host::new(rt).with_grants(grants, Path::new("/"));
    h.admission().add_plugin_file(Path::new(NETCLIENT_PATH)).unwrap();

    // The granted address answers, and the call is known to have used the network.
    let out = h.call("fetch", &json!({"addr": granted.to_string()}), &CallContext::default()).unwrap();
    assert_eq!(out.stats.capabilities_used.names(), ["network"]);
    let body = match &out.content[..] {
        [Content::Text(t)] => t.clone(),
        other => panic!("{other:?}"),
    };
    assert!(body.contains("hello from the granted service"), "{body}");
    // Any other port on the same host is refused.
    let e = call(&h, "fetch", json!({"addr": other.to_string()})).unwrap_err();
    assert!(matches!(e, CallError::Forbidden { .. }), "{e:?}");
    // A Host header naming the granted service does not open the other one
    // (the check is on the socket address, not on headers: cf. CVE-2024-32980).
    let e = call(&h, "fetch", json!({"addr": other.to_string(), "host_header": granted.to_string()})).unwrap_err();
    assert!(matches!(e, CallError::Forbidden { .. }), "{e:?}");
    // Another host (address) is refused.
    let e = call(&h, "fetch", json!({"addr": format!("127.0.0.2:{}", granted.port())})).unwrap_err();
    assert!(matches!(e, CallError::Forbidden { .. }), "{e:?}");
    // Following the granted service's redirect to the other one is refused.
    let e = call(&h, "fetch", json!({"addr": granted.to_string(), "follow_redirect": true})).unwrap_err();
    assert!(matches!(e, CallError::Forbidden { .. }), "{e:?}");
    assert_eq!(other_hits.load(SeqCst), 0, "the other service was never reached");
    assert_eq!(granted_hits.load(SeqCst), 2);
}

#[test]
fn a_network_grant_must_be_an_ip_and_port() {
    let g = GrantConfig { network: vec!["example.com:80".into()], ..Default::default() };
    let e = g.resolve("netclient", Path::new("/"), &|| unreachable!("no memory grant"), &[]).unwrap_err();
    assert!(e.to_string().contains("not an IP:port"), "{e}");
}
