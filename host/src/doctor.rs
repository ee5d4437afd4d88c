//! `toolhost doctor`: the mistakes a config can hold that still let a host
//! start, found before the game does. Each finding names the config key at
//! fault and, for a misspelt name, the closest real one.
//!
//! [`check_host`] reads a host built from the config (its registry, its
//! grants, the status of its external servers): `toolhost serve` runs it at
//! start and logs each finding as a warning; `toolhost doctor` runs it on a
//! host it builds without serving. [`check_files`] reads what the config
//! points at without loading anything: trusted key files, plugin files and
//! their signatures, the cache and state directories.

use crate::Host;
use crate::config::Config;
use crate::mcp::ServerStatus;
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Something the operator meant does not happen (a tool never shown,
    /// a grant never used, a server never reached): `doctor` exits 1.
    Error,
    /// Worth a look; the host does what the config says.
    Warning,
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How bad.
    pub level: Level,
    /// The config key or file at fault, e.g. `npcs[0].tools`.
    pub at: String,
    /// What is wrong and what to do, for the operator.
    pub message: String,
}

impl Finding {
    fn error(at: impl Into<String>, message: impl Into<String>) -> Finding {
        Finding { level: Level::Error, at: at.into(), message: message.into() }
    }

    fn warning(at: impl Into<String>, message: impl Into<String>) -> Finding {
        Finding { level: Level::Warning, at: at.into(), message: message.into() }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// The closest of `candidates` to `name`, when one is close enough to be a
/// likely typo.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(&name.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

fn suggestion<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(name, candidates).map(|c| format!(" (did you mean {c:?}?)")).unwrap_or_default()
}

/// Checks `cfg` against `host`, built from it, and its external servers'
/// status. A server still `connecting` counts as unreachable only when
/// `waited` (its first connection attempt had its time).
pub fn check_host(cfg: &Config, host: &Host, servers: &[ServerStatus], waited: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let catalog = host.registry().snapshot();
    let tools: Vec<&str> = catalog.tools().map(|t| t.def.name.as_str()).collect();
    let down: Vec<&str> = servers.iter().filter(|s| s.state != "up").map(|s| s.name.as_str()).collect();
    let unknown_tool = |at: String, name: &str| -> Finding {
        let message = format!("unknown tool {name:?}{}", suggestion(name, tools.iter().copied()));
        if down.is_empty() {
            Finding::error(at, message)
        } else {
            // A server that did not connect may offer it.
            Finding::warning(at, format!("{message}; not connected, so not checked: {}", down.join(", ")))
        }
    };
    for (i, npc) in cfg.npcs.iter().enumerate() {
        for t in &npc.tools {
            if !tools.contains(&t.as_str()) {
                out.push(unknown_tool(format!("npcs[{i}].tools"), t));
            }
        }
    }
    for t in cfg.budget.pin.keys() {
        if !tools.contains(&t.as_str()) {
            out.push(unknown_tool(format!("budget.pin.{t}"), t));
        }
    }
    for (i, l) in cfg.budget.long_tools.iter().enumerate() {
        if !tools.contains(&l.tool.as_str()) {
            out.push(unknown_tool(format!("budget.long_tools[{i}].tool"), &l.tool));
        }
    }
    let plugins: Vec<&str> =
        catalog.providers().filter(|p| p.kind() == crate::tool::ProviderKind::Wasm).map(|p| p.name()).collect();
    for (name, _) in cfg.plugins.grants.iter() {
        let at = format!("plugins.grants.{name}");
        if !plugins.contains(&name.as_str()) {
            out.push(Finding::error(
                at.clone(),
                format!(
                    "no plugin named {name:?} is loaded, so this grant is never used{}",
                    suggestion(name, plugins.iter().copied())
                ),
            ));
        }
        if let Err(e) = host.grants_for(name) {
            out.push(Finding::error(at, e.to_string()));
        }
    }
    for r in crate::report::grants(host) {
        // Each finding is a whole sentence (what, why, what to do): said
        // once, on its own line.
        for finding in &r.findings {
            out.push(Finding::warning(format!("plugins.grants.{}", r.plugin), finding.clone()));
        }
        if let Some(crate::package::Provenance::Unsigned { reason }) = &r.provenance {
            out.push(Finding::warning(
                format!("plugin {}", r.plugin),
                format!("NOT VERIFIED ({reason}): loaded only because unsigned plugins are allowed"),
            ));
        }
    }
    for held in host.withheld_plugins() {
        out.push(Finding::warning(format!("plugin {}", held.name), format!("held back: {}", held.reason)));
    }
    if cfg.budget.calibrate_upstreams {
        out.push(Finding::warning(
            "budget.calibrate_upstreams".to_string(),
            "background calibration calls upstream servers' tools that declare readOnlyHint: true and openWorldHint: false, at start and at every reconnect: a server that declares them wrongly gets called for real".to_string(),
        ));
    }
    for (i, s) in cfg.mcp.servers.iter().enumerate() {
        if let Some(st) = servers.iter().find(|st| st.name == s.name)
            && (st.state == "down" || (waited && st.state != "up"))
        {
            out.push(Finding::error(
                format!("mcp.servers[{i}] ({})", s.name),
                format!("unreachable: {}", st.last_error.as_deref().unwrap_or("no answer in time")),
            ));
        }
    }
    out
}

/// Checks the files the config names, loading nothing: trusted key files,
/// plugin files (readable, signed by a trusted key), and the cache and
/// state directories' permissions. `trusted` are the public keys (base64)
/// the policy trusts; `allow_unsigned` makes unsigned files warnings.
pub fn check_files(
    cfg: &Config,
    plugin_files: &[std::path::PathBuf],
    trusted: &[String],
    allow_unsigned: bool,
    dirs: &[(&str, Option<&Path>)],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let me = crate::runtime::private::effective_uid();
    for (i, f) in cfg.trust.key_files.iter().enumerate() {
        let at = format!("trust.key_files[{i}]");
        let path = cfg.resolve(f);
        let text = match crate::runtime::private::read_obeyed(&path, 64 << 10) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                out.push(Finding::error(at.clone(), format!("{}: untrusted key file: it {e}", path.display())));
                std::fs::read_to_string(&path).unwrap_or_default()
            }
            Err(e) => {
                out.push(Finding::error(at, format!("{}: {e}", path.display())));
                continue;
            }
        };
        if serde_json::from_str::<crate::package::PublicKey>(&text).is_err() {
            out.push(Finding::error(
                at,
                format!(
                    "{}: not a toolhost public key (.pub from `toolhost keygen`){}",
                    path.display(),
                    if text.contains("secret") { "; this looks like a private key: never share it" } else { "" }
                ),
            ));
        }
    }
    for p in plugin_files {
        let at = format!("plugin file {}", p.display());
        let bytes = match std::fs::read(p) {
            Ok(b) => b,
            Err(e) => {
                out.push(Finding::error(at, e.to_string()));
                continue;
            }
        };
        let name = crate::runtime::plugin_name_from_path(p);
        let package = match crate::package::parse(&bytes) {
            Ok(pk) => pk,
            Err(e) => {
                out.push(Finding::error(at, e.to_string()));
                continue;
            }
        };
        let unsigned = |why: String| {
            if allow_unsigned {
                Finding::warning(at.clone(), format!("{why}; loaded only because unsigned plugins are allowed"))
            } else {
                Finding::error(at.clone(), format!("{why}; the host refuses it (sign it with `toolhost sign`)"))
            }
        };
        match package.verify(&name) {
            Err(e) => out.push(Finding::error(at.clone(), e.to_string())),
            Ok(None) => out.push(unsigned("not signed".into())),
            Ok(Some(v)) if !trusted.contains(&v.public_key) => out.push(unsigned(format!(
                "signed by {:?} with a key not in trust.keys or trust.key_files",
                v.manifest.author
            ))),
            Ok(Some(_)) => {}
        }
    }
    for (what, dir) in dirs {
        let Some(dir) = dir else { continue };
        let Ok(md) = std::fs::symlink_metadata(dir) else { continue };
        let at = format!("{what} {}", dir.display());
        if md.file_type().is_symlink() {
            out.push(Finding::error(at, "a symbolic link: toolhost keeps private data only in a real directory"));
        } else if md.uid() != me {
            out.push(Finding::error(at, format!("owned by uid {}, not by this user (uid {me})", md.uid())));
        } else if md.mode() & 0o022 != 0 {
            out.push(Finding::error(
                at,
                format!("writable by other users (mode {:o}); toolhost refuses it", md.mode() & 0o777),
            ));
        } else if md.mode() & 0o077 != 0 {
            out.push(Finding::warning(
                at,
                format!("readable by other users (mode {:o}); toolhost tightens it to 0700", md.mode() & 0o777),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_tool() {
        let tools = ["roll", "roll_table", "get_rule", "search_rules"];
        assert_eq!(did_you_mean("rol", tools), Some("roll"));
        assert_eq!(did_you_mean("get_rules", tools), Some("get_rule"));
        assert_eq!(did_you_mean("fireball", tools), None);
    }
}
