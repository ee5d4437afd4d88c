//! The walls between the crates (Cargo.lock is the proof: what each crate
//! pulls in, dev and build dependencies included) and between the
//! `toolhost` crate's modules (their `crate::` paths).

use crate::invariants::walk;
use std::path::Path;

/// Every crate `root` depends on, directly or not, whatever its
/// dependencies pull in (read from Cargo.lock, dev and build dependencies
/// included).
fn lock_closure(root: &str) -> std::collections::HashSet<String> {
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock")).unwrap();
    let mut deps: std::collections::HashMap<String, Vec<String>> = Default::default();
    for pkg in lock.split("[[package]]").skip(1) {
        let name = pkg.lines().find_map(|l| l.strip_prefix("name = ")).unwrap().trim_matches('"').to_string();
        let list: Vec<String> = match pkg.split("dependencies = [").nth(1) {
            Some(d) => d
                .split(']')
                .next()
                .unwrap()
                .split(',')
                .map(|x| x.trim().trim_matches('"').split(' ').next().unwrap_or("").to_string())
                .filter(|x| !x.is_empty())
                .collect(),
            None => Vec::new(),
        };
        deps.entry(name).or_default().extend(list);
    }
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![root.to_string()];
    while let Some(n) = todo.pop() {
        if seen.insert(n.clone()) {
            todo.extend(deps.get(&n).cloned().unwrap_or_default());
        }
    }
    seen
}

/// Asserts that `root` pulls in none of `banned`, each a package
/// Cargo.lock holds (a name misspelt would ban nothing).
fn walled(root: &str, banned: &[&str]) {
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock")).unwrap();
    let seen = lock_closure(root);
    for b in banned {
        assert!(lock.contains(&format!("name = \"{b}\"\n")), "no package {b} in Cargo.lock");
        assert!(!seen.contains(*b), "{root} pulls in {b}");
    }
}

/// The runtime crate depends on no MCP, HTTP or database crate, whatever
/// its dependencies pull in: `wasi:http` (`toolhost-http`, with its name
/// resolver) lives beside it, never under it.
#[test]
fn the_runtime_depends_on_no_mcp_http_or_database_crate() {
    let seen = lock_closure("toolhost-runtime");
    assert!(seen.contains("wasmtime"), "the walk works");
    walled(
        "toolhost-runtime",
        &[
            "rmcp",
            "axum",
            "reqwest",
            "hyper",
            "rustls",
            "toolhost-http",
            "hickory-resolver",
            "rusqlite",
            "tokio-postgres",
            "deadpool-postgres",
            "toolhost",
            "toolhost-core",
        ],
    );
}

/// The call pipeline's crate depends on no MCP, HTTP, OCI, signature,
/// config-parsing or database crate, nor on admission or anything that
/// builds wasm guests, whatever its dependencies (dev and build ones
/// included) pull in: a contributor touching the pipeline compiles none of
/// them, and the pipeline cannot reach trust or install.
#[test]
fn the_core_depends_on_no_mcp_http_oci_or_database_crate() {
    let seen = lock_closure("toolhost-core");
    assert!(seen.contains("toolhost-runtime") && seen.contains("wasmtime"), "the walk works");
    walled(
        "toolhost-core",
        &[
            "rmcp",
            "axum",
            "reqwest",
            "hyper",
            "rustls",
            "toolhost-http",
            "hickory-resolver",
            "oci-client",
            "ed25519-dalek",
            "serde_yaml_ng",
            "rusqlite",
            "tokio-postgres",
            "deadpool-postgres",
            "notify",
            "prometheus-client",
            "toolhost",
            "toolhost-admission",
            "toolhost-config",
            "toolhost-guest-build",
        ],
    );
}

/// Admission (trust, signatures, grants, secrets, install) knows no
/// registry protocol, MCP, HTTP or database: a pull hands it bytes. It
/// reads no config file either: the config crate types its settings.
#[test]
fn admission_depends_on_no_oci_mcp_http_or_database_crate() {
    let seen = lock_closure("toolhost-admission");
    assert!(seen.contains("toolhost-core") && seen.contains("ed25519-dalek"), "the walk works");
    walled(
        "toolhost-admission",
        &[
            "rmcp",
            "axum",
            "reqwest",
            "hyper",
            "rustls",
            "oci-client",
            "toolhost-http",
            "rusqlite",
            "tokio-postgres",
            "toolhost",
            "toolhost-config",
            "toolhost-mcp",
            "toolhost-guest-build",
        ],
    );
}

/// The config schema sits on the layers whose settings it types and on
/// nothing that serves, pulls or stores.
#[test]
fn the_config_depends_on_no_mcp_http_oci_or_database_crate() {
    let seen = lock_closure("toolhost-config");
    assert!(seen.contains("serde_yaml_ng") && seen.contains("toolhost-admission"), "the walk works");
    walled(
        "toolhost-config",
        &["rmcp", "axum", "reqwest", "hyper", "oci-client", "rusqlite", "tokio-postgres", "toolhost", "toolhost-mcp"],
    );
}

/// The MCP server front knows nothing of distribution or operations: no
/// OCI client, database, file watcher, metrics encoder or wasm guest
/// build, not the plugins' `wasi:http`, and not the `toolhost` crate
/// (operations reach its HTTP front through `mcp::http::Beside`); and
/// nothing of the MCP client: they share `toolhost-mcp-wire` only.
#[test]
fn the_mcp_edge_depends_on_no_distribution_or_operations_crate() {
    let seen = lock_closure("toolhost-mcp");
    assert!(seen.contains("rmcp") && seen.contains("toolhost-mcp-wire"), "the walk works");
    walled(
        "toolhost-mcp",
        &[
            "oci-client",
            "rusqlite",
            "tokio-postgres",
            "deadpool-postgres",
            "notify",
            "prometheus-client",
            "toolhost",
            "toolhost-guest-build",
            "toolhost-http",
            "wasmtime-wasi-http",
            "toolhost-mcp-client",
        ],
    );
}

/// The MCP client of external servers knows nothing of the server front
/// (its HTTP serving loop, TLS on the front's port), of distribution or of
/// operations.
#[test]
fn the_mcp_client_depends_on_no_server_front() {
    let seen = lock_closure("toolhost-mcp-client");
    assert!(seen.contains("rmcp") && seen.contains("toolhost-mcp-wire"), "the walk works");
    walled(
        "toolhost-mcp-client",
        &[
            "toolhost-mcp",
            "toolhost",
            "toolhost-http",
            "oci-client",
            "rusqlite",
            "tokio-postgres",
            "notify",
            "prometheus-client",
            "netlink-sys",
        ],
    );
    // What both share depends on neither.
    walled("toolhost-mcp-wire", &["toolhost-mcp", "toolhost-mcp-client", "toolhost", "axum", "toolhost-config"]);
}

/// The layer of each module of the `toolhost` crate: records and reports <
/// installing, building, checking and counting < the admin API, the page,
/// reload, the watcher, serving and scaffolding.
fn host_layer(module: &str) -> Option<usize> {
    Some(match module {
        "changes" | "cluster" | "report" | "audit_query" | "facade" | "telemetry" => 0,
        "install" | "builder" | "doctor" | "fleet" | "metrics" | "market" | "review" => 1,
        "admin" | "ui" | "reload" | "watch" | "serve" | "scaffold" | "revocations" => 2,
        _ => return None,
    })
}

/// The first segment of every crate-level path in a line of code:
/// `crate::a::b`, each item of `crate::{a, b::c}`, and `super::x` when
/// `depth` `super`s reach the crate root (a file `depth` modules deep).
fn crate_paths(line: &str, depth: usize) -> Vec<String> {
    let ident =
        |t: &str| -> String { t.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut rests: Vec<&str> = line.split("crate::").skip(1).collect();
    let root = "super::".repeat(depth);
    rests.extend(line.split(root.as_str()).skip(1).filter(|r| !r.starts_with("super::")));
    let mut out = Vec::new();
    for rest in rests {
        match rest.strip_prefix('{') {
            Some(group) => {
                // The group's top-level items, up to its closing brace.
                let (mut level, mut item) = (0usize, String::new());
                for c in group.chars() {
                    match c {
                        '{' => level += 1,
                        '}' if level == 0 => break,
                        '}' => level -= 1,
                        ',' if level == 0 => {
                            out.push(ident(&item));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                out.push(ident(&item));
            }
            None => out.push(ident(rest)),
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Each use of a higher layer in `text`, a file of module `own` `depth`
/// modules deep; `layer` places a module (or a name the crate root
/// re-exports from one).
fn upward_uses(own: &str, text: &str, depth: usize, layer: &dyn Fn(&str) -> Option<usize>) -> Vec<String> {
    let mine = layer(own).expect("a module with a layer");
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for used in crate_paths(line, depth) {
            if let Some(theirs) = layer(&used)
                && theirs > mine
            {
                found.push(format!("line {}: {own} (layer {mine}) uses {used} (layer {theirs})", i + 1));
            }
        }
    }
    found
}

/// Within the `toolhost` crate (operations, above every other crate),
/// modules use only modules below them (`host_layer`). Cargo enforces the
/// walls between crates; nothing enforces them between the modules of one
/// crate, so the honest proof of this structural invariant is the source:
/// every `crate::` path (grouped or not), every `super::` path reaching the
/// root, and every name the root re-exports from a module counts as a use of
/// that module. Every module must have a layer, and the scanner is shown to
/// catch a planted upward use.
#[test]
fn dependencies_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    // Every module the crate declares has a layer: a new one cannot escape.
    let modules: Vec<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ").or_else(|| l.trim().strip_prefix("mod ")))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect();
    assert!(modules.len() >= 10, "the walk found the modules ({modules:?})");
    for m in &modules {
        assert!(host_layer(m).is_some(), "module {m} has no layer in host_layer");
    }
    // Names the root re-exports from a module (`pub use install::Installer`)
    // are that module's.
    let mut reexported: std::collections::HashMap<String, usize> = Default::default();
    for l in lib.lines() {
        let Some(rest) = l.trim().strip_prefix("pub use ") else { continue };
        let Some((m, names)) = rest.split_once("::") else { continue };
        let Some(theirs) = host_layer(m) else { continue };
        for name in names.trim_end_matches(';').trim_matches(|c| c == '{' || c == '}').split(',') {
            reexported.insert(name.trim().to_string(), theirs);
        }
    }
    assert_eq!(reexported.get("HostBuilder"), Some(&1), "the re-exports were read: {reexported:?}");
    let layer = |name: &str| host_layer(name).or_else(|| reexported.get(name).copied());

    // The scanner catches what it is for.
    let planted =
        "use crate::{report, reload::Reloader};\nfn f() { super::serve::run(); let _ = crate::Installer::new(); }";
    assert_eq!(
        upward_uses("changes", planted, 1, &layer).len(),
        3,
        "grouped, super:: and re-exported uses are all seen: {:?}",
        upward_uses("changes", planted, 1, &layer)
    );

    let mut checked = 0;
    let mut found = Vec::new();
    for file in walk(&src) {
        let rel = file.strip_prefix(&src).unwrap();
        let own = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if own == "bin" || own == "lib" {
            continue;
        }
        // Module depth: `x.rs` and `x/mod.rs` are 1 deep, `x/y.rs` 2.
        let depth = rel.components().count() - usize::from(rel.ends_with("mod.rs"));
        checked += 1;
        let text = std::fs::read_to_string(&file).unwrap();
        found.extend(upward_uses(&own, &text, depth, &layer).into_iter().map(|v| format!("{}: {v}", rel.display())));
    }
    assert!(checked >= 10, "the walk found the files ({checked})");
    assert!(found.is_empty(), "uses that point up:\n{}", found.join("\n"));
}
