//! The README's quick starts as written: each role's `sh` blocks (the
//! `###` sections under `## Quick start`), in order, in an empty directory
//! holding a copy of `examples/` (as the root of a clone would), with the
//! `toolhost` under test first on the PATH. Fences marked `shell` are
//! illustrations and are not run. And every example folder builds from a
//! copy of itself alone, with no toolhost checkout around it.

use crate::common::{CACHE, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `sh` blocks of each `###` section of `## Quick start`, concatenated
/// per section: (the section's title, its script).
fn quick_starts(markdown: &str) -> Vec<(String, String)> {
    let mut sections: Vec<(String, String)> = Vec::new();
    let (mut in_quick_start, mut inside) = (false, false);
    for line in markdown.lines() {
        if inside {
            if line.trim() == "```" {
                inside = false;
            } else {
                let (_, script) = sections.last_mut().expect("a `sh` block before the first role");
                script.push_str(line);
                script.push('\n');
            }
        } else if line.starts_with("## ") {
            in_quick_start = line.trim() == "## Quick start";
        } else if let Some(title) = line.strip_prefix("### ").filter(|_| in_quick_start) {
            sections.push((title.trim().to_string(), String::new()));
        } else if in_quick_start && line.trim() == "```sh" {
            inside = true;
        }
    }
    sections
}

/// The script of the quick start whose title starts with `role`.
fn quick_start(role: &str) -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let sections = quick_starts(&readme);
    let found: Vec<_> = sections.iter().filter(|(title, _)| title.starts_with(role)).collect();
    assert_eq!(found.len(), 1, "one quick start for {role:?}: {sections:?}");
    assert!(!found[0].1.is_empty(), "the quick start {role:?} has no `sh` block");
    found[0].1.clone()
}

/// Copies `from` into `to`, leaving out build output (`target/`, `*.wasm`).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let (src, dst) = (entry.path(), to.join(&name));
        if entry.file_type().unwrap().is_dir() {
            if !["target", "node_modules", ".venv", "gen", "dist"].contains(&name.to_string_lossy().as_ref()) {
                copy_dir(&src, &dst);
            }
        } else if src.extension().is_none_or(|e| e != "wasm") {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Runs `script` with bash (`-euo pipefail`) in `dir`, as a newcomer would:
/// the binary under test on the PATH, the test suite's compile cache, a
/// state directory of its own, no cargo target directory of the suite's.
fn run_script(dir: &Path, script: &str) -> Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_toolhost")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    Command::new("bash")
        .arg("-c")
        // Whatever happens, stop the background host.
        .arg(format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("TOOLHOST_CACHE_DIR", CACHE.path())
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env_remove("TOOLHOST_ALLOW_UNSIGNED")
        .env_remove("TOOLHOST_LOG")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap()
}

/// `role`'s quick start, run in an empty directory holding a copy of
/// `examples/`; its stdout.
fn run_quick_start(role: &str) -> String {
    let script = quick_start(role);
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("examples"), &dir.path().join("examples"));
    let o = run_script(dir.path(), &script);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "the quick start {role:?} failed:\n--- stdout ---\n{out}\n--- stderr ---\n{err}");
    out
}

#[test]
fn the_readme_has_a_quick_start_per_role() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let titles: Vec<String> = quick_starts(&readme).into_iter().map(|(title, _)| title).collect();
    assert_eq!(titles.len(), 3, "{titles:?}");
    for role in ["The DM", "The plugin author", "The reviewer"] {
        assert!(titles.iter().any(|t| t.starts_with(role)), "{role}: {titles:?}");
    }
    assert!(readme.lines().count() < 300, "the README stays under 300 lines");
}

#[test]
fn the_dms_quick_start_runs_as_written() {
    let script = quick_start("The DM");
    assert!(script.contains("toolhost serve") && script.contains("toolhost reload"), "{script}");
    assert!(script.contains("toolhost override"), "{script}");
    let out = run_quick_start("The DM");
    // Bartok's three `agents` views: his ceiling, a tool given, an override.
    assert!(out.contains("Bartok the Barkeep"), "{out}");
    assert!(out.contains("reloaded"), "reload:\n{out}");
}

#[test]
fn the_authors_quick_start_runs_as_written() {
    let script = quick_start("The plugin author");
    assert!(script.contains("toolhost new hello") && script.contains("toolhost sign"), "{script}");
    assert!(script.contains("toolhost plugin add"), "{script}");
    let out = run_quick_start("The plugin author");
    assert!(out.contains("tools (1):") && out.contains("greet"), "inspect listed the tool:\n{out}");
    assert!(out.contains("added hello (sha256"), "plugin add:\n{out}");
    assert!(out.contains(r#""message":"Hello, Ada."#), "the call, after the host stopped:\n{out}");
}

#[test]
fn the_reviewers_quick_start_runs_as_written() {
    let script = quick_start("The reviewer");
    assert!(script.contains("toolhost inspect") && script.contains("toolhost grants"), "{script}");
    assert!(script.contains("audit.jsonl"), "{script}");
    let out = run_quick_start("The reviewer");
    assert!(out.contains("weather_now"), "inspect listed the tool:\n{out}");
    assert!(out.contains("exit status 3"), "inspect before the grant:\n{out}");
    // `toolhost audit`: the table of the weather call, then the failed
    // call as JSON.
    assert!(out.contains("TIME") && out.contains("weather_now"), "the audit:\n{out}");
    assert!(out.contains(r#""event":"call""#) && out.contains(r#""tool":"weather_now""#), "the audit:\n{out}");
}

/// Every folder of `examples/` that has a `build.sh` builds from a copy of
/// itself alone: no workspace, no SDK, no script of the checkout around it.
#[test]
fn every_example_folder_builds_from_a_copy_of_itself() {
    let mut built = Vec::new();
    for entry in std::fs::read_dir(repo().join("examples")).unwrap() {
        let example = entry.unwrap().path();
        if !example.join("build.sh").exists() {
            continue;
        }
        let name = example.file_name().unwrap().to_string_lossy().to_string();
        // The JavaScript and Python weather tools are built from copies of
        // their folders, and called, by `languages.rs`.
        if ["weather-js", "weather-py"].contains(&name.as_str()) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join(&name);
        copy_dir(&example, &copy);
        let o = run_script(&copy, "./build.sh");
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(o.status.success(), "{name}/build.sh failed in a copy:\n--- stdout ---\n{out}\n--- stderr ---\n{err}");
        let wasm = copy.join(format!("{name}.wasm"));
        assert!(wasm.exists(), "{name}: no {}:\n{out}", wasm.display());
        let o = run_script(&copy, &format!("toolhost inspect --allow-unsigned {name}.wasm || true"));
        assert!(stdout(&o).contains("tools (1):"), "{name}: inspect:\n{}\n{}", stdout(&o), stderr(&o));
        built.push(name);
    }
    assert!(built.contains(&"weather".to_string()), "examples/weather has a build.sh: {built:?}");
}

/// An example's vendored SDK is the one `toolhost new` writes, so it does
/// not drift from `sdk/` and `wit/`.
#[test]
fn the_examples_vendor_the_sdk_toolhost_new_writes() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_script(dir.path(), "toolhost new probe");
    assert!(o.status.success(), "{}", stderr(&o));
    let fresh = dir.path().join("probe/vendor/toolhost-sdk");
    let vendored = repo().join("examples/weather/vendor/toolhost-sdk");
    let files = |root: &Path| {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p.strip_prefix(root).unwrap().to_path_buf());
                }
            }
        }
        out.sort();
        out
    };
    assert_eq!(files(&vendored), files(&fresh), "the vendored SDK's files");
    for f in files(&fresh) {
        assert_eq!(
            std::fs::read_to_string(vendored.join(&f)).unwrap(),
            std::fs::read_to_string(fresh.join(&f)).unwrap(),
            "examples/weather/vendor/toolhost-sdk/{}: copy it again from `toolhost new`",
            f.display()
        );
    }
}

/// The weather example's own unit tests, natively: it is not a member of
/// the workspace, so `cargo test --workspace` does not run them. Built in a
/// directory of this tree's target directory, so a rerun compiles little.
#[test]
fn the_weather_examples_unit_tests_pass() {
    let target = Path::new(env!("CARGO_BIN_EXE_toolhost")).parent().unwrap().parent().unwrap().join("examples");
    let o = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["test", "--locked", "--manifest-path"])
        .arg(repo().join("examples/weather/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .unwrap();
    assert!(o.status.success(), "cargo test of examples/weather:\n{}\n{}", stdout(&o), stderr(&o));
}
