//! The filesystem guard (issue #11, items 6 and 7): a plugin granted a
//! directory cannot block the host on a FIFO, fill the disk past the
//! grant's quotas, or plant links; normal file use still works.

use crate::common::{CACHE, stderr, stdout, toolhost};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use toolhost::Host;
use toolhost::capabilities::{DirGrantConfig, GrantConfig, GrantsByPlugin};
use toolhost::runtime::{Limits, Runtime};
use toolhost::tool::{CallContext, CallError, Content};
use toolhost_test_artifacts::HOSTILE_PATH;

/// A host whose hostile and fileio plugins are each granted a directory
/// (read-write, mounted at `/`) with these quotas.
fn host(hostile: &Path, fileio: Option<&Path>, max_bytes: u64, max_files: u64) -> Host {
    let grant = |dir: &Path| GrantConfig {
        files: vec![DirGrantConfig { dir: dir.to_path_buf(), max_bytes, max_files, ..Default::default() }],
        ..Default::default()
    };
    let mut grants = GrantsByPlugin::new();
    grants.insert("hostile".into(), grant(hostile));
    if let Some(d) = fileio {
        grants.insert("fileio".into(), grant(d));
    }
    let limits = Limits { timeout_floor: Duration::from_secs(5), ..Limits::default() };
    let rt = Runtime::new(limits, Some(CACHE.path())).unwrap();
    let cfg = toolhost::budget::BudgetConfig { fast_ms: 10_000, ..Default::default() };
    let host =
        Host::with_budget(rt, toolhost::budget::Budget::new(cfg, Vec::new())).with_grants(grants, Path::new("/"));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    host.admission().add_plugin_file(Path::new(HOSTILE_PATH)).unwrap();
    host
}

/// Calls `tool`; its one block (JSON, or text holding JSON) as JSON.
fn call(h: &Host, tool: &str, args: Value) -> Value {
    let out = h.call(tool, &args, &CallContext::default()).unwrap_or_else(|e| panic!("{tool}: {e:?}"));
    match &out.content[..] {
        [Content::Json(v)] => v.clone(),
        [Content::Text(t)] => serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.clone())),
        other => panic!("{other:?}"),
    }
}

/// (sum of regular files' sizes, entries) under `dir`, no symlink followed.
fn disk(dir: &Path) -> (u64, u64) {
    let (mut bytes, mut entries) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            entries += 1;
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                bytes += m.len();
            }
        }
    }
    (bytes, entries)
}

fn mkfifo(path: &Path) {
    let out = std::process::Command::new("mkfifo").arg(path).output().expect("run mkfifo");
    assert!(out.status.success(), "mkfifo: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_fifo_or_socket_is_refused_at_once_and_the_host_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("pipe"));
    let _socket = std::os::unix::net::UnixListener::bind(dir.path().join("sock")).unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hello world").unwrap();
    let host = std::sync::Arc::new(host(dir.path(), None, 1 << 20, 100));

    for special in ["/pipe", "/sock"] {
        // Unguarded, opening the FIFO blocks: the host thread for good, or
        // the call until its deadline. Wait on a channel, a generous 30 s,
        // so the test fails instead of hanging; a call ended by its
        // deadline is an error, which `call` fails on. The refusal is the
        // guard's, at once: the error kind below, in milliseconds.
        let (tx, rx) = mpsc::channel();
        let h = host.clone();
        let start = Instant::now();
        std::thread::spawn(move || {
            let _ = tx.send(call(&h, "read_path", json!({ "path": special })));
        });
        let v = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("reading {special} blocked"));
        eprintln!("{special} refused in {:?}", start.elapsed());
        assert_eq!(v["ok"], false, "{special}: {v}");
        assert_eq!(v["kind"], "PermissionDenied", "{special}: error-code::access; {v}");
    }
    // The host answers the next calls; a regular file still reads.
    assert_eq!(call(&host, "read_path", json!({"path": "/hello.txt"})), json!({"ok": true, "len": 11}));
    assert_eq!(call(&host, "echo", json!({"still": "alive"})), json!({"still": "alive"}));
}

#[test]
fn a_dir_bomb_stops_at_the_entry_quota_within_and_across_calls() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path(), None, 1 << 20, 50);
    let v = call(&host, "dir_bomb", json!({"dir": "/"}));
    assert_eq!(v["created"], 50, "{v}");
    assert_eq!(v["kind"], "QuotaExceeded", "error-code::quota; {v}");
    assert_eq!(disk(dir.path()), (0, 50));
    // A second call cannot go past the tree's total.
    let v = call(&host, "dir_bomb", json!({"dir": "/", "prefix": "again-"}));
    assert_eq!((v["created"].clone(), v["kind"].clone()), (json!(0), json!("QuotaExceeded")), "{v}");
    assert_eq!(disk(dir.path()), (0, 50));
}

#[test]
fn files_with_content_stop_at_the_byte_quota() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path(), None, 100_000, 1000);
    let v = call(&host, "dir_bomb", json!({"dir": "/", "size": 10_000}));
    assert_eq!(v["created"], 10, "{v}");
    assert_eq!(v["kind"], "StorageFull", "error-code::insufficient-space; {v}");
    let (bytes, _) = disk(dir.path());
    assert_eq!(bytes, 100_000);
}

#[test]
fn a_big_write_stops_at_the_byte_quota_and_the_quota_holds_across_calls() {
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path(), None, MIB, 100);
    let v = call(&host, "big_write", json!({"path": "/big", "chunk": 300_000}));
    assert_eq!(v["kind"], "StorageFull", "error-code::insufficient-space; {v}");
    assert_eq!(v["written"], MIB, "{v}");
    assert_eq!(disk(dir.path()), (MIB, 1));
    let v = call(&host, "big_write", json!({"path": "/big2"}));
    assert_eq!((v["written"].clone(), v["kind"].clone()), (json!(0), json!("StorageFull")), "{v}");
    assert!(disk(dir.path()).0 <= MIB, "{:?}", disk(dir.path()));
}

#[test]
fn symlinks_and_hard_links_are_refused_and_nothing_is_planted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plain.txt"), "x").unwrap();
    let host = host(dir.path(), None, 1 << 20, 100);
    for (target, link) in [("/etc/passwd", "/evil"), ("..", "/up"), ("/plain.txt", "/alias")] {
        let v = call(&host, "plant_symlink", json!({"target": target, "link": link}));
        for how in ["symlink", "hard_link"] {
            assert_eq!(v[how]["ok"], false, "{target} -> {link}: {v}");
            assert_eq!(v[how]["kind"], "PermissionDenied", "error-code::not-permitted; {v}");
        }
        let name = link.trim_start_matches('/');
        for planted in [name.to_string(), format!("{name}-hard")] {
            assert!(std::fs::symlink_metadata(dir.path().join(&planted)).is_err(), "{planted} exists");
        }
    }
    assert_eq!(disk(dir.path()), (1, 1));
}

#[test]
fn normal_files_still_work_and_rewrites_do_not_use_up_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    // Room for two 600 kB files, not three: a rewrite (a temporary copy,
    // renamed over the old file) must not count the old file forever.
    let host = host(dir.path(), Some(files.path()), 1_500_000, 100);
    let content = "z".repeat(600_000);
    for round in 0..4 {
        let v = call(&host, "write_file", json!({"path": "notes.txt", "content": content}));
        assert!(v.is_object(), "round {round}: {v}");
        assert_eq!(std::fs::read_to_string(files.path().join("notes.txt")).unwrap(), content, "round {round}");
    }
    let v = call(&host, "read_file", json!({"path": "notes.txt"}));
    assert_eq!(v["content"].as_str().map(str::len), Some(600_000));
    assert_eq!(disk(files.path()), (600_000, 1));
    // A second file fits, a third does not.
    call(&host, "write_file", json!({"path": "other.txt", "content": content}));
    // Refused by the quota: the guard's ENOSPC ends the plugin's write (a
    // failed stream write, which wasi-libc reports as EIO whatever the
    // cause) and fileio says so; not a deadline, not a refused path.
    match host.call("write_file", &json!({"path": "third.txt", "content": content}), &CallContext::default()) {
        Err(CallError::Failed { tool, message }) => {
            assert_eq!(tool, "write_file");
            assert_eq!(message, "write third.txt: I/O error (os error 29)");
        }
        other => panic!("a third 600 kB file does not fit: {other:?}"),
    }
    assert_eq!(disk(files.path()), (1_200_000, 2));

    // The hostile plugin's own grant: write, then read back.
    let v = call(&host, "big_write", json!({"path": "/log", "chunk": 1000}));
    assert_eq!(v["written"], 1_500_000, "{v}");
    assert_eq!(call(&host, "read_path", json!({"path": "/log"})), json!({"ok": true, "len": 1_500_000}));
}

#[test]
fn quota_keys_in_the_config_hold_across_processes_and_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "plugins:\n  grants:\n    hostile:\n      files:\n        - dir: ./data\n          max_bytes: 200000\n          \
         max_files: 20\n    fileio:\n      files:\n        - dir: ./files\n          max_bytes: 123456\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = toolhost().current_dir(dir.path()).args(args).args(["--plugin", HOSTILE_PATH]).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str::<Value>(stdout(&out).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
    };
    let v = run(&["call", "big_write", r#"{"path": "/a", "chunk": 30000}"#]);
    assert_eq!((v["written"].clone(), v["kind"].clone()), (json!(200_000), json!("StorageFull")), "{v}");
    // A new process rescans the directory: still full.
    let v = run(&["call", "big_write", r#"{"path": "/b"}"#]);
    assert_eq!((v["written"].clone(), v["kind"].clone()), (json!(0), json!("StorageFull")), "{v}");
    let v = run(&["call", "dir_bomb", r#"{"dir": "/"}"#]);
    assert_eq!(v["kind"], "QuotaExceeded", "{v}");
    assert_eq!(disk(&dir.path().join("data")), (200_000, 20));

    let out = toolhost().current_dir(dir.path()).args(["grants", "--json"]).output().unwrap();
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let fileio = report.as_array().unwrap().iter().find(|p| p["plugin"] == "fileio").unwrap();
    assert_eq!(fileio["granted"]["files"][0]["max_bytes"], 123_456, "{fileio}");
    assert_eq!(fileio["granted"]["files"][0]["max_files"], 10_000, "the default; {fileio}");
}

/// The second Unix user `scripts/install-peers` creates.
const OTHER_USER: &str = "toolhost-peer";

/// Runs `sh -c script` in `dir` as [`OTHER_USER`] (the tests run as root).
fn as_other_user(dir: &Path, script: &str) {
    let o = std::process::Command::new("setpriv")
        .args(["--reuid", OTHER_USER, "--regid", OTHER_USER, "--clear-groups", "--", "sh", "-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "as {OTHER_USER}: {script}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Issue #47, finding 6: in a directory anyone may add to (sticky and
/// root's, as /tmp), another user made the grant's path a symbolic link to
/// a root-only directory; on the next start the plugin read the root-only
/// file through it. Now every component of a grant's path is checked when
/// it is opened, start included: a link another user made is refused,
/// naming the grant and the link, and nothing is created through it for a
/// read-write grant that does not exist yet. The same sticky directory
/// still holds grants of this user's own.
#[test]
fn a_grant_path_through_another_users_link_is_refused_at_start() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let ok = std::process::Command::new("id").arg(OTHER_USER).output().is_ok_and(|o| o.status.success());
    assert!(ok, "no Unix user {OTHER_USER}: run scripts/install-peers as root");
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = t.path().join("root-only");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(secret.join("notes.txt"), "root's own notes").unwrap();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::create_dir(shared.join("mine")).unwrap();
    std::fs::write(shared.join("mine/notes.txt"), "my notes").unwrap();
    as_other_user(&shared, &format!("ln -s {} campaign", secret.display()));
    let link = shared.join("campaign");
    let uid = std::fs::symlink_metadata(&link).unwrap().uid();
    assert_ne!(uid, 0, "the link is the other user's");

    let start = |dir: &str, mode: &str| {
        std::fs::write(
            t.path().join("toolhost.yaml"),
            format!("plugins:\n  grants:\n    fileio:\n      files:\n        - dir: {dir}\n          mode: {mode}\n"),
        )
        .unwrap();
        toolhost()
            .current_dir(t.path())
            .env("TOOLHOST_STATE_DIR", t.path().join("state"))
            .args(["call", "read_file", r#"{"path":"notes.txt"}"#])
            .output()
            .unwrap()
    };
    // This user's own directory in the sticky one: granted (/ and the
    // sticky root-owned directory on its path pass, as /tmp does).
    let o = start("./shared/mine", "read-only");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("my notes"), "{}", stdout(&o));

    // Through the other user's link: refused, the link named.
    let o = start("./shared/campaign", "read-only");
    assert!(!stdout(&o).contains("root's own notes"), "the root-only file read: {}", stdout(&o));
    assert!(!o.status.success(), "{}", stdout(&o));
    let said = format!(
        "plugins.grants.fileio.files: ./shared/campaign: the symbolic link {} on its path was made by another user (uid {uid})",
        link.display()
    );
    assert!(stderr(&o).contains(&said), "{}", stderr(&o));

    // A read-write grant below it that does not exist yet: refused the
    // same way, and not created through the link.
    let o = start("./shared/campaign/new", "read-write");
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains(&format!("the symbolic link {} on its path", link.display())), "{}", stderr(&o));
    assert!(!secret.join("new").exists(), "a directory was created through the link");
}
