//! The audit gate for writes (issue #55): with `audit.fail_closed`, a tool
//! that may write runs only once its start record is on disk. The trail on
//! a full filesystem (a small tmpfs, mounted by the test as root): the
//! write is refused with `audit_unavailable` and the plugin never runs
//! (no file appears); a tool that cannot write (the dice roller holds no
//! capability) still answers; `doctor` says the gate is refusing; space
//! freed, both work.

use crate::common::{stderr, stdout, toolhost};
use crate::live::{Watcher, serve};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of `size` mounted at `at`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        assert!(rustix::process::geteuid().is_root(), "this test mounts a tmpfs and runs as root (as CI does)");
        std::fs::create_dir_all(at).unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(o.status.success(), "mount: {}", stderr(&o));
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem holding `dir` with one file, to the last byte.
fn fill(dir: &Path) -> PathBuf {
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
    // The last partial block too.
    while f.write_all(&[0u8]).is_ok() {}
    filler
}

fn text(r: &Result<CallToolResult, rmcp::ServiceError>) -> String {
    match r {
        Ok(r) => serde_json::to_string(r).unwrap(),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_audit_record_cannot_be_written_is_refused_and_never_runs() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let trail = dir.join("trail");
    let _fs = Tmpfs::mount(&trail, "256k");
    std::fs::create_dir(dir.join("data")).unwrap();
    std::fs::write(
        dir.join("toolhost.yaml"),
        "server:\n  rate_limit: { per_minute: 0 }\nplugins:\n  grants:\n    fileio:\n      files:\n        - dir: ./data\naudit:\n  path: ./trail/audit.jsonl\n  fail_closed: true\n",
    )
    .unwrap();
    let (_host, url) = serve(dir);
    let c = Watcher::default().serve(StreamableHttpClientTransport::from_uri(format!("{url}/mcp"))).await.unwrap();
    let write = |name: &str| {
        CallToolRequestParams::new("write_file")
            .with_arguments(json!({"path": name, "content": "the party met Bartok"}).as_object().unwrap().clone())
    };
    let roll =
        || CallToolRequestParams::new("roll").with_arguments(json!({"expression": "1d6"}).as_object().unwrap().clone());

    // Room on the disk: the write runs, its start record first.
    let r = c.call_tool(write("before.txt")).await;
    assert!(r.as_ref().is_ok_and(|r| r.is_error != Some(true)), "{}", text(&r));
    assert!(dir.join("data/before.txt").exists());
    let events: Vec<String> = records(&trail.join("audit.jsonl"))
        .iter()
        .filter(|r| r["tool"] == "write_file")
        .map(|r| format!("{} {}", r["event"].as_str().unwrap(), r["outcome"].as_str().unwrap_or("-")))
        .collect();
    assert_eq!(events, ["call_start -", "call ok"], "the start record first");

    // The disk full: the write is refused, and the plugin never ran. (The
    // trail is moved aside first, as a rotation by hand would: on tmpfs a
    // record may still fit in the last page of a file already there.)
    std::fs::rename(trail.join("audit.jsonl"), trail.join("audit.before.jsonl")).unwrap();
    let filler = fill(&trail);
    let r = c.call_tool(write("during.txt")).await;
    let said = text(&r);
    assert!(said.contains("audit_unavailable"), "{said}");
    assert!(r.as_ref().is_ok_and(|r| r.is_error == Some(true)), "{said}");
    assert!(!dir.join("data/during.txt").exists(), "the plugin never ran");
    // A tool that cannot write still answers.
    let r = c.call_tool(roll()).await;
    assert!(r.as_ref().is_ok_and(|r| r.is_error != Some(true)), "{}", text(&r));
    // doctor says the gate is refusing.
    let doctor =
        toolhost().current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).arg("doctor").output().unwrap();
    let report = format!("{}{}", stdout(&doctor), stderr(&doctor));
    assert!(report.contains("the audit gate is refusing calls to tools that write"), "{report}");

    // Space freed: both work.
    std::fs::remove_file(filler).unwrap();
    let r = c.call_tool(write("after.txt")).await;
    assert!(r.as_ref().is_ok_and(|r| r.is_error != Some(true)), "{}", text(&r));
    assert!(dir.join("data/after.txt").exists());
    let r = c.call_tool(roll()).await;
    assert!(r.as_ref().is_ok_and(|r| r.is_error != Some(true)), "{}", text(&r));
    // In the trail made again: the write's start and end, roll's end; the
    // refused write's records could not be written, and nothing is glued
    // to a cut one.
    let after: Vec<String> = records(&trail.join("audit.jsonl"))
        .iter()
        .filter(|r| r["event"].as_str().is_some_and(|e| e.starts_with("call")))
        .map(|r| format!("{} {}", r["event"].as_str().unwrap(), r["tool"].as_str().unwrap()))
        .collect();
    assert_eq!(after, ["call_start write_file", "call write_file", "call roll"], "roll is not gated");
    let text = std::fs::read_to_string(trail.join("audit.jsonl")).unwrap();
    assert!(text.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()), "every line whole: {text}");
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}
