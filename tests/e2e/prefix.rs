//! One rule for tool-name clashes (issue #29, item 9), through the binary:
//! `plugins.prefix.<plugin>` puts a plugin's tools behind a prefix;
//! without one, a tool another provider already serves is exposed as
//! `<plugin>_<tool>`, with a warning naming both and the key.

use crate::common::{stderr, stdout, toolhost};
use std::path::Path;
use toolhost_test_artifacts::HOSTILE_PATH;

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
