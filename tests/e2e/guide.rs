//! The author guide (`docs/authoring.md`) as written: every `sh` block, in
//! order, in one empty directory, with the `toolhost` under test first on
//! the PATH. And the Python plugin (`plugins-py/npcnames`), built with
//! componentize-py by its own script and called end to end.

use crate::common::{CACHE, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `sh` blocks of a Markdown file, concatenated.
fn sh_blocks(markdown: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in markdown.lines() {
        if !inside && line.trim() == "```sh" {
            inside = true;
        } else if inside && line.trim() == "```" {
            inside = false;
        } else if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn the_author_guide_runs_as_written() {
    let guide = std::fs::read_to_string(repo().join("docs/authoring.md")).unwrap();
    let script = sh_blocks(&guide);
    assert!(script.contains("toolhost new demo") && script.contains("toolhost plugin add"), "{script}");
    assert!(script.contains("toolhost new forecast --http") && script.contains("toolhost secret set"), "{script}");
    assert!(script.contains("toolhost call read_file") && script.contains("mode: read-only"), "{script}");
    assert!(script.contains("--lang ts --http") && script.contains("--lang python --http"), "{script}");
    let dir = tempfile::tempdir().unwrap();
    // It builds Rust, TypeScript and Python guests.
    let _heavy = crate::common::heavy();
    let bin = Path::new(env!("CARGO_BIN_EXE_toolhost")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let o = Command::new("bash")
        .arg("-c")
        // Whatever happens, stop the background host.
        .arg(format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}"))
        .current_dir(dir.path())
        .env("PATH", path)
        .env("TOOLHOST_CACHE_DIR", CACHE.path())
        .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
        .env_remove("TOOLHOST_ALLOW_UNSIGNED")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "the guide failed:\n--- stdout ---\n{out}\n--- stderr ---\n{err}");
    assert!(out.contains("tools (1):") && out.contains("greet"), "inspect listed the tool:\n{out}");
    assert!(out.contains("signed ") && out.contains("by alice"), "{out}");
    assert!(out.contains("this host would load it: signed by alice"), "verify:\n{out}");
    assert!(out.contains("added demo (sha256"), "plugin add:\n{out}");
    assert!(out.contains(r#""message":"Hello, Ada."#), "the call:\n{out}");
    assert!(out.contains("pushed demo 0.1.0 by alice to oci://127.0.0.1:"), "push:\n{out}");
    assert!(out.contains("trusted here: yes: signed by alice"), "show:\n{out}");
    assert!(out.contains("pinned 1 plugin(s)"), "lock:\n{out}");
    assert_eq!(out.matches(r#""message":"Hello, Grace."#).count(), 2, "both calls from the registry:\n{out}");
    // 7: the API-calling tool, signed with its asks, held for its key.
    assert!(out.contains("asks to reach over HTTP: http://127.0.0.1:"), "verify shows the origin:\n{out}");
    assert!(out.contains("asks for the secret api_key"), "verify shows the secret:\n{out}");
    assert!(
        out.contains("forecast: held back: plugin \"forecast\" is held: it needs the secret api_key"),
        "plugin list:\n{out}"
    );
    assert!(out.contains("set secret api_key of plugin forecast"), "secret set:\n{out}");
    assert!(out.contains(r#""name":"lantern""#), "the API's answer through the plugin:\n{out}");
    // 8: a file tool reads the directory granted to it, read-only.
    assert!(out.contains(r#""content":"The party owes Bartok 40 gold.\n""#), "read_file:\n{out}");
    assert!(out.contains(r#""entries":[{"name":"session-3.md","kind":"file""#), "list_dir:\n{out}");
    assert!(out.contains("campaign (seen as /), not change them"), "grants:\n{out}");
    // 9 and 10: the API tool in TypeScript and in Python, signed, granted,
    // its key set, answering through the origin.
    assert!(out.contains("set secret api_key of plugin lookup"), "{out}");
    assert!(out.contains(r#"{"id":7,"name":"rope"}"#), "the TypeScript tool's answer:\n{out}");
    assert!(out.contains("set secret api_key of plugin almanac"), "{out}");
    assert!(out.contains(r#"{"id":3,"name":"almanac of tides"}"#), "the Python tool's answer:\n{out}");
}

#[test]
fn the_python_plugin_builds_and_answers() {
    let wasm = crate::common::python_plugin();
    let call = |args: &str| call_alone(&wasm, "npc_name", args);
    let o = call(r#"{"culture": "dwarf", "seed": 7}"#);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    assert_eq!(v["culture"], "dwarf");
    assert!(v["name"].as_str().is_some_and(|n| n.contains(' ')), "{v}");
    assert_eq!(stdout(&call(r#"{"culture": "dwarf", "seed": 7}"#)), stdout(&o), "same seed, same name");
    let o = call(r#"{"culture": "orc", "seed": 7}"#);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown culture"), "the plugin's own invalid-input error: {}", stderr(&o));
}

/// The JavaScript plugin (`plugins-js/dicebag`, QuickJS) builds from its
/// folder and answers through the binary; its own invalid-input error
/// reaches the caller.
#[test]
fn the_javascript_plugin_builds_and_answers() {
    let wasm = crate::common::js_plugin();
    let call = |args: &str| call_alone(&wasm, "dice_pool", args);
    let o = call(r#"{"dice": 6, "sides": 10, "target": 7, "seed": 1}"#);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    let rolls = v["rolls"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(rolls.len(), 6, "{v}");
    let hits = rolls.iter().filter(|r| r.as_u64().is_some_and(|r| (7..=10).contains(&r))).count();
    assert_eq!(v["successes"], hits, "{v}");
    assert_eq!(
        stdout(&call(r#"{"dice": 6, "sides": 10, "target": 7, "seed": 1}"#)),
        stdout(&o),
        "same seed, same roll"
    );
    let o = call(r#"{"dice": 6, "sides": 10, "target": 11, "seed": 1}"#);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("target must be 1 to 10"), "the plugin's own invalid-input error: {}", stderr(&o));
}

/// `toolhost call TOOL ARGS` with the plugin `wasm` alone (no built-ins).
fn call_alone(wasm: &std::path::Path, tool: &str, args: &str) -> std::process::Output {
    crate::common::toolhost()
        .args(["call", tool, args, "--no-builtins", "--plugin", wasm.to_str().unwrap()])
        .output()
        .unwrap()
}
