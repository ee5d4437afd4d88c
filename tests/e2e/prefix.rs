//! One rule for tool-name clashes (issue #29, item 9), through the binary:
//! `plugins.prefix.<plugin>` puts a plugin's tools behind a prefix;
//! without one, a tool another provider already serves is exposed as
//! `<plugin>_<tool>`, with a warning naming both and the key. A
//! configured prefix owns the names under it, whichever plugin loads
//! first (issue #47, finding 8).

use crate::common::{CACHE, call, json_of, stderr, stdout, toolhost};
use serde_json::json;
use std::path::Path;
use toolhost::Host;
use toolhost::runtime::{Limits, Runtime};
use toolhost_test_artifacts::{HOSTILE_PATH, SWAP_V1_PATH, SWAP_V2_PATH};

/// `toolhost ARGS` with the hostile plugin and a copy of it named
/// `hostile2` (the same tools), and `extra` under `plugins:`.
fn run(dir: &Path, extra: &str, args: &[&str]) -> std::process::Output {
    std::fs::copy(HOSTILE_PATH, dir.join("hostile2.wasm")).unwrap();
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!("plugins:\n  builtins: false\n  files: [{HOSTILE_PATH:?}, ./hostile2.wasm]\n{extra}"),
    )
    .unwrap();
    toolhost().current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(args).output().unwrap()
}

#[test]
fn an_unprefixed_clash_exposes_the_later_plugins_tool_under_its_name_with_a_warning() {
    let t = tempfile::tempdir().unwrap();
    let o = run(t.path(), "", &["call", "hostile2_echo", r#"{"from":"two"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), r#"{"from":"two"}"#);
    assert!(
        stderr(&o).contains("echo is already served by hostile: hostile2's is exposed as hostile2_echo (set plugins.prefix.hostile2 to choose a prefix)"),
        "{}",
        stderr(&o)
    );
    // The first one keeps its name.
    let o = run(t.path(), "", &["call", "echo", r#"{"from":"one"}"#]);
    assert_eq!(stdout(&o).trim(), r#"{"from":"one"}"#, "{}", stderr(&o));
}

#[test]
fn a_prefixed_plugins_tools_are_listed_and_called_under_the_prefix() {
    let t = tempfile::tempdir().unwrap();
    let prefix = "  prefix:\n    hostile2: two_\n";
    let o = run(t.path(), prefix, &["tools", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let tools: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).unwrap();
    let of = |p: &str| -> Vec<String> {
        tools.iter().filter(|t| t["provider"] == p).map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    assert!(of("hostile2").iter().all(|n| n.starts_with("two_")), "{:?}", of("hostile2"));
    assert!(of("hostile2").contains(&"two_echo".to_string()));
    assert!(of("hostile").contains(&"echo".to_string()));
    assert!(!stderr(&o).contains("already served"), "no clash, no warning: {}", stderr(&o));
    let o = run(t.path(), prefix, &["call", "two_echo", r#"{"n":2}"#]);
    assert_eq!(stdout(&o).trim(), r#"{"n":2}"#, "{}", stderr(&o));
    let o = run(t.path(), "  prefix:\n    hostile2: \"bad prefix\"\n", &["tools"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("plugins.prefix.hostile2: \"bad prefix\" is not a name prefix"), "{}", stderr(&o));
}

/// Issue #47, finding 8 (prefix squatting): `owner` (swap_v1, answering
/// version 1) has `plugins.prefix.owner: slow_`, so its `version` is
/// `slow_version`; `squat` (swap_v2, answering version 2, no prefix) has a
/// tool named `slow_version` of its own. The configured prefix owns the
/// names under it: whichever file loads first, `slow_version` is the
/// owner's, and the squatter's is renamed `squat_slow_version`, with the
/// warning.
#[test]
fn a_configured_prefix_wins_over_a_squatter_in_either_load_order() {
    for files in ["[./squat.wasm, ./owner.wasm]", "[./owner.wasm, ./squat.wasm]"] {
        let t = tempfile::tempdir().unwrap();
        std::fs::copy(SWAP_V1_PATH, t.path().join("owner.wasm")).unwrap();
        std::fs::copy(SWAP_V2_PATH, t.path().join("squat.wasm")).unwrap();
        std::fs::write(
            t.path().join("toolhost.yaml"),
            format!("plugins:\n  builtins: false\n  files: {files}\n  prefix:\n    owner: slow_\n"),
        )
        .unwrap();
        let call = |tool: &str, args: &str| {
            let o = toolhost()
                .current_dir(t.path())
                .env("TOOLHOST_STATE_DIR", t.path().join("state"))
                .args(["call", tool, args])
                .output()
                .unwrap();
            assert!(o.status.success(), "{files}: {tool}: {}", stderr(&o));
            (stdout(&o).trim().to_string(), stderr(&o))
        };
        let (out, err) = call("slow_version", "{}");
        assert_eq!(out, r#"{"version":1}"#, "{files}: the owner's tool, not the squatter's; {err}");
        assert!(
            err.contains("slow_version is under plugins.prefix.owner (slow_), which owner's tools own: squat's is exposed as squat_slow_version (set plugins.prefix.squat to choose a prefix)"),
            "{files}: {err}"
        );
        assert_eq!(call("slow_slow_version", r#"{"ms":0}"#).0, r#"{"version":1}"#, "{files}");
        assert_eq!(call("squat_slow_version", r#"{"ms":0}"#).0, r#"{"version":2}"#, "{files}");
        // The squatter's other tool keeps its name.
        assert_eq!(call("version", "{}").0, r#"{"version":2}"#, "{files}");
    }
}

/// The same while the host serves: the owner added after the squatter,
/// and the squatter after the owner (the hot path, `toolhost plugin add`
/// and the plugins directory's).
#[test]
fn a_configured_prefix_wins_over_a_squatter_added_while_serving() {
    for squatter_first in [true, false] {
        let t = tempfile::tempdir().unwrap();
        let (owner, squat) = (t.path().join("owner.wasm"), t.path().join("squat.wasm"));
        std::fs::copy(SWAP_V1_PATH, &owner).unwrap();
        std::fs::copy(SWAP_V2_PATH, &squat).unwrap();
        let host = Host::new(Runtime::new(Limits::default(), Some(CACHE.path())).unwrap());
        host.admission().grants().set_prefixes([("owner".to_string(), "slow_".to_string())].into());
        let order = if squatter_first { [&squat, &owner] } else { [&owner, &squat] };
        for file in order {
            host.admission()
                .install_plugin_file(file)
                .unwrap_or_else(|e| panic!("squatter first: {squatter_first}: {e}"));
        }
        let version =
            |tool: &str, args: serde_json::Value| json_of(call(&host, tool, args).unwrap())["version"].clone();
        assert_eq!(version("slow_version", json!({})), 1, "squatter first: {squatter_first}");
        assert_eq!(version("slow_slow_version", json!({"ms": 0})), 1, "squatter first: {squatter_first}");
        assert_eq!(version("squat_slow_version", json!({"ms": 0})), 2, "squatter first: {squatter_first}");
        assert_eq!(version("version", json!({})), 2, "squatter first: {squatter_first}");
    }
}

/// A squatter named so that its renamed tool would still lie under the
/// owner's prefix (`slow`, whose `slow_version` would become
/// `slow_slow_version`) is refused, and the owner keeps its names.
#[test]
fn a_squatter_whose_renamed_tool_is_still_under_the_prefix_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let (owner, squat) = (t.path().join("owner.wasm"), t.path().join("slow.wasm"));
    std::fs::copy(SWAP_V1_PATH, &owner).unwrap();
    std::fs::copy(SWAP_V2_PATH, &squat).unwrap();
    let host = Host::new(Runtime::new(Limits::default(), Some(CACHE.path())).unwrap());
    host.admission().grants().set_prefixes([("owner".to_string(), "slow_".to_string())].into());
    let e = host.admission().install_plugin_file(&squat).unwrap_err().to_string();
    assert_eq!(
        e,
        "plugin \"slow\": slow_version is under plugins.prefix.owner (slow_), which owner's tools own, and \
         slow_slow_version is under plugins.prefix.owner (slow_) too: set plugins.prefix.slow to choose a prefix"
    );
    host.admission().install_plugin_file(&owner).unwrap();
    assert_eq!(json_of(call(&host, "slow_slow_version", json!({"ms": 0})).unwrap())["version"], 1);
}
