//! Operator commands find the right running host (issue #12): every serving
//! process has its own endpoint record, a `serve --stdio` started by an MCP
//! client never hides the DM's HTTP host, `--pid` picks one, and a record
//! left by a killed host is ignored and removed.

use crate::common::{stderr, stdout, toolhost};
use crate::live::serve;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn status(dir: &Path, extra: &[&str]) -> std::process::Output {
    toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["status", "--json"])
        .args(extra)
        .output()
        .unwrap()
}

fn status_pid(dir: &Path, extra: &[&str]) -> u64 {
    let o = status(dir, extra);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    v["pid"].as_u64().unwrap()
}

fn records(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("state/admin")).map_or(0, |d| d.flatten().count())
}

#[test]
fn a_stdio_session_never_hides_the_http_host_from_operator_commands() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), "server:\n  rate_limit: { per_minute: 0 }\n").unwrap();
    let (mut http, _url) = serve(dir.path());
    let http_pid = u64::from(http.0.id());
    assert_eq!(status_pid(dir.path(), &[]), http_pid);

    // An MCP client starts its own stdio host with the same state directory.
    let mut stdio = toolhost()
        .current_dir(dir.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .args(["serve", "--stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while records(dir.path()) < 2 {
        assert!(Instant::now() < deadline, "the stdio host wrote no record");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status_pid(dir.path(), &[]), http_pid, "commands still reach the HTTP host");
    let stdio_pid = stdio.id().to_string();
    assert_eq!(status_pid(dir.path(), &["--pid", &stdio_pid]), u64::from(stdio.id()), "--pid picks one");
    let o = status(dir.path(), &["--pid", "1"]);
    assert!(!o.status.success() && stderr(&o).contains("no toolhost with pid 1"), "{}", stderr(&o));

    // The HTTP host is killed without a chance to clean up: its record is
    // stale, ignored and removed; the stdio host is the only one left.
    http.0.kill().unwrap();
    http.0.wait().unwrap();
    assert_eq!(records(dir.path()), 2, "the killed host left its record");
    assert_eq!(status_pid(dir.path(), &[]), u64::from(stdio.id()));
    assert_eq!(records(dir.path()), 1, "the stale record is gone");

    let _ = stdio.kill();
    let _ = stdio.wait();
}

#[test]
fn two_http_hosts_on_one_state_directory_ask_which_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.yaml"), "server:\n  rate_limit: { per_minute: 0 }\n").unwrap();
    let (a, _) = serve(dir.path());
    let (b, _) = serve(dir.path());
    let o = status(dir.path(), &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("choose one with --pid") && e.contains(&a.0.id().to_string()) && e.contains(&b.0.id().to_string()),
        "{e}"
    );
    assert_eq!(status_pid(dir.path(), &["--pid", &b.0.id().to_string()]), u64::from(b.0.id()));
}
