//! Per-plugin limits (issue #29, item 8), through the binary:
//! `plugins.limits.<plugin>` replaces `limits:` for that plugin only,
//! higher or lower, and the instance pool is sized for the largest.

use crate::common::{stderr, stdout, toolhost};
use std::path::Path;
use toolhost_test_artifacts::HOSTILE_PATH;

/// `toolhost call alloc {"mib": mib}` with the hostile plugin and `extra`
/// under `plugins:`.
fn alloc(dir: &Path, extra: &str, mib: u64) -> std::process::Output {
    std::fs::write(
        dir.join("toolhost.yaml"),
        // DEEP: touching 128 MiB on a loaded 2-core machine can take more
        // than the default tier's deadline; the test is about memory.
        format!("budget:\n  pin: {{ alloc: deep }}\nplugins:\n  builtins: false\n  files: [{HOSTILE_PATH:?}]\n{extra}"),
    )
    .unwrap();
    toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["call", "alloc", &format!("{{\"mib\": {mib}}}")])
        .output()
        .unwrap()
}

#[test]
fn a_plugins_own_memory_limit_lets_it_allocate_what_the_defaults_refuse() {
    let dir = tempfile::tempdir().unwrap();
    // The defaults (64 MiB) refuse 128 MiB...
    let o = alloc(dir.path(), "", 128);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains("memory"), "{}", stderr(&o));
    // ...the plugin's own 256 MiB allow it...
    let o = alloc(dir.path(), "  limits:\n    hostile: { memory_mib: 256 }\n", 128);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "128");
    // The reviewer sees the limits in force, the plugin's own marked.
    let g = toolhost()
        .current_dir(dir.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .arg("grants")
        .output()
        .unwrap();
    assert!(stdout(&g).contains("memory 256 MiB (own), fuel 5000000000, deadline at most 30000 ms"), "{}", stdout(&g));
    // ...and another plugin's 256 MiB (the pool sized for it) leave this
    // one on the defaults.
    let o = alloc(dir.path(), "  limits:\n    someone_else: { memory_mib: 256 }\n", 128);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains("memory"), "{}", stderr(&o));
    // Lower works too: 16 MiB refuses 32.
    let o = alloc(dir.path(), "  limits:\n    hostile: { memory_mib: 16 }\n", 32);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains("memory"), "{}", stderr(&o));
}

#[test]
fn a_plugins_own_output_cap_and_bad_keys_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let o = alloc(dir.path(), "  limits:\n    hostile: { max_output_bytes: 1 }\n", 10);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains("over the 1 byte output limit"), "{}", stderr(&o));
    let o = alloc(dir.path(), "  limits:\n    hostile: { memory: 256 }\n", 1);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown field `memory`"), "{}", stderr(&o));
    let o = alloc(dir.path(), "  limits:\n    hostile: { plugin_concurrency: 0 }\n", 1);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("plugins.limits.hostile.plugin_concurrency: must be at least 1"), "{}", stderr(&o));
}
