//! Builds toolhost's guest components (`wasm32-wasip2`) from a build
//! script, so `cargo build`, `cargo test` and `cargo install` need no manual
//! step. Modelled on wasmtime's `crates/test-programs/artifacts/build.rs`.
//!
//! The guests are workspace members left out of `default-members` (or, for
//! an example that stands alone, a folder with its own workspace); they are
//! compiled by a nested `cargo build` into `<target>/<subdir>`, and the
//! calling build script reruns when any of their sources change.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The guests' target triple.
pub const TARGET: &str = "wasm32-wasip2";
/// The cargo profile guests are built with (small and fast).
pub const PROFILE: &str = "guest";

/// Builds `guests` (package names) into `<target dir>/<subdir>` and returns
/// each one's component path. Call from a build script.
pub fn build(guests: &[&str], subdir: &str) -> Vec<(String, PathBuf)> {
    let (root, target_dir) = dirs(subdir);
    let mut cmd = guest_build(&root, &target_dir);
    for guest in guests {
        cmd.args(["-p", guest]);
    }
    run(cmd);
    let built = guests.iter().map(|guest| (guest.to_string(), artifact(&target_dir, guest))).collect();
    rerun_for_workspace(&root);
    built
}

/// Builds the guest package `name` that stands alone in `dir` (relative to
/// the workspace root: a folder with its own `[workspace]` and
/// `Cargo.lock`, such as an example a user copies out) by its own
/// manifest, into `<target dir>/<subdir>`, and returns its component path.
/// Its `Cargo.toml` defines the guest profile. Call from a build script.
pub fn build_standalone(dir: &str, name: &str, subdir: &str) -> PathBuf {
    let (root, target_dir) = dirs(subdir);
    let manifest = root.join(dir).join("Cargo.toml");
    let mut cmd = guest_build(&root.join(dir), &target_dir);
    cmd.arg("--manifest-path").arg(&manifest);
    run(cmd);
    let wasm = artifact(&target_dir, name);
    println!("cargo:rerun-if-changed={}", manifest.display());
    println!("cargo:rerun-if-changed={}", root.join(dir).join("Cargo.lock").display());
    println!("cargo:rerun-if-changed=build.rs");
    wasm
}

/// The workspace root, and the guests' target directory under it.
fn dirs(subdir: &str) -> (PathBuf, PathBuf) {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let root = workspace_root(&manifest_dir);
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"))
        .join(subdir);
    (root, target_dir)
}

/// `cargo build` of guests, run in `dir`, into `target_dir`.
fn guest_build(dir: &Path, target_dir: &Path) -> Command {
    ensure_target_installed();
    let mut cmd = Command::new(env("CARGO"));
    cmd.current_dir(dir)
        .args(["build", "--locked", "--target", TARGET, "--profile", PROFILE])
        .arg("--target-dir")
        .arg(target_dir);
    // The outer build's flags and wrappers (clippy, coverage) are not meant
    // for the guests.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs a guest build.
fn run(mut cmd: Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("failed to run {:?}: {e}", cmd.get_program()));
    if !status.success() {
        panic!("building the guest components for {TARGET} failed (see the cargo output above)");
    }
}

/// The component of `guest` built into `target_dir`; reruns the build
/// script when any source it was built from changes.
fn artifact(target_dir: &Path, guest: &str) -> PathBuf {
    let out_dir = target_dir.join(TARGET).join(PROFILE);
    let wasm = out_dir.join(format!("{}.wasm", guest.replace('-', "_")));
    assert!(wasm.exists(), "guest artifact {} missing", wasm.display());
    rerun_for_dep_info(&out_dir.join(format!("{}.d", guest.replace('-', "_"))), target_dir);
    wasm
}

/// Reruns the build script when the workspace's WIT, lock file or manifest
/// changes.
fn rerun_for_workspace(root: &Path) {
    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    println!("cargo:rerun-if-changed={}", root.join("Cargo.lock").display());
    // The guests' profile lives in the workspace manifest.
    println!("cargo:rerun-if-changed={}", root.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed=build.rs");
}

/// The workspace root: the nearest ancestor whose Cargo.toml has `[workspace]`.
fn workspace_root(start: &Path) -> PathBuf {
    start
        .ancestors()
        .find(|d| std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")))
        .expect("a workspace root above the crate")
        .to_path_buf()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// Installs the wasm32-wasip2 standard library with rustup when the active
/// toolchain lacks it (a fresh machine), so no manual step is needed.
fn ensure_target_installed() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let installed = sysroot.is_some_and(|s| s.join("lib/rustlib").join(TARGET).join("lib").exists());
    if installed {
        return;
    }
    println!("cargo:warning=installing the {TARGET} target with rustup (one time)");
    let status = Command::new("rustup").args(["target", "add", TARGET]).status();
    match status {
        Ok(s) if s.success() => {}
        _ => panic!(
            "the {TARGET} target is not installed and `rustup target add {TARGET}` failed; install it and build again"
        ),
    }
}

/// Reruns this script when any source file the guest was built from changes,
/// as listed in cargo's dep-info file. Files under the guests' target
/// directory (generated by a guest's build script) are left out: their
/// inputs are listed too, and any later guest build (a test building a
/// scaffold, another crate's build script) rewrites them, which would make
/// the host rebuild for nothing.
fn rerun_for_dep_info(dep_info: &Path, target_dir: &Path) {
    let Ok(text) = std::fs::read_to_string(dep_info) else {
        return;
    };
    let Some((_, deps)) = text.split_once(": ") else { return };
    // Paths are separated by spaces; a space inside a path is escaped as "\ ".
    let mut current = String::new();
    let mut chars = deps.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                current.push(' ');
                chars.next();
            }
            ' ' | '\n' => {
                if !current.is_empty() && !Path::new(&current).starts_with(target_dir) {
                    println!("cargo:rerun-if-changed={current}");
                }
                current.clear();
            }
            _ => current.push(c),
        }
    }
    if !current.is_empty() && !Path::new(&current).starts_with(target_dir) {
        println!("cargo:rerun-if-changed={current}");
    }
}
