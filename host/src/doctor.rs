//! `toolhost doctor`: the mistakes a config can hold that still let a host
//! start, found before the game does. Each finding names the config key at
//! fault and, for a misspelt name, the closest real one.
//!
//! [`check_host`] reads a host built from the config (its registry, its
//! grants, the status of its external servers): `toolhost serve` runs it at
//! start and logs each finding as a warning; `toolhost doctor` runs it
//! ([`check_host_knowing`]) on a host it builds without serving, after
//! [`check_plugin`] has loaded each plugin a start would load (files,
//! `oci://` references, plugins added at run time) and judged it by the
//! trust policy. [`check_files`] reads what the config points at without
//! loading anything: trusted key files, the cache and state directories.

use crate::config::Config;
use crate::mcp_client::ServerStatus;
use crate::package::{Provenance, TrustPolicy};
use crate::{AddPluginError, Host, Installer};
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

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

/// Who the HTTP front lets in, in one line: static tokens, OAuth, and
/// whether a same-user loopback connection without a token is the operator.
pub fn front_door(cfg: &Config) -> String {
    let s = &cfg.server;
    let mut ways = Vec::new();
    if !s.tokens.is_empty() {
        ways.push(format!("{} static token{}", s.tokens.len(), if s.tokens.len() == 1 { "" } else { "s" }));
    }
    if let Some(o) = &s.oauth {
        ways.push(format!("OAuth access tokens from {} for {}", o.issuer, o.audience));
    }
    let why = match s.loopback_operator {
        Some(_) => "server.loopback_operator",
        None if ways.is_empty() => "the default without server.tokens or server.oauth",
        None => "the default once server.tokens or server.oauth is set",
    };
    let loopback = if s.loopback_is_operator() {
        format!("the loopback operator is on (the server's own Unix user, no token; {why})")
    } else {
        format!("the loopback operator is off ({why})")
    };
    if ways.is_empty() { loopback } else { format!("{}; {loopback}", ways.join(", ")) }
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

/// What a caller of [`check_host_knowing`] has already said about the
/// plugins, so that no finding is said twice.
#[derive(Debug, Clone, Default)]
pub struct Already {
    /// Plugins a start would load that did not load here, each already
    /// flagged: `(where it is configured, the plugin name it would have)`.
    /// Their grants are not called unused, and a tool no loaded provider
    /// offers is a warning (one of them may offer it), not an error.
    pub not_loaded: Vec<(String, String)>,
    /// Every plugin's signature was judged by the trust policy from its
    /// bytes (see [`check_plugin`]): no finding from the provenance the
    /// checking host recorded.
    pub trust_judged: bool,
}

/// Checks `cfg` against `host`, built from it, and its external servers'
/// status. A server still `connecting` counts as unreachable only when
/// `waited` (its first connection attempt had its time).
pub fn check_host(cfg: &Config, host: &Host, servers: &[ServerStatus], waited: bool) -> Vec<Finding> {
    check_host_knowing(cfg, host, servers, waited, &Already::default())
}

/// [`check_host`], leaving out what `already` says was said.
pub fn check_host_knowing(
    cfg: &Config,
    host: &Host,
    servers: &[ServerStatus],
    waited: bool,
    already: &Already,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let catalog = host.pipeline().registry().snapshot();
    let tools: Vec<&str> = catalog.tools().map(|t| t.def.name.as_str()).collect();
    let down: Vec<&str> = servers.iter().filter(|s| s.state != "up").map(|s| s.name.as_str()).collect();
    let unloaded: Vec<&str> = already.not_loaded.iter().map(|(at, _)| at.as_str()).collect();
    let unknown_tool = |at: String, name: &str| -> Finding {
        let message = format!("unknown tool {name:?}{}", suggestion(name, tools.iter().copied()));
        let mut unchecked = Vec::new();
        // A server that did not connect, or a plugin that did not load, may offer it.
        if !down.is_empty() {
            unchecked.push(format!("not connected, so not checked: {}", down.join(", ")));
        }
        if !unloaded.is_empty() {
            unchecked.push(format!("not loaded, so not checked: {}", unloaded.join(", ")));
        }
        if unchecked.is_empty() {
            Finding::error(at, message)
        } else {
            Finding::warning(at, format!("{message}; {}", unchecked.join("; ")))
        }
    };
    out.extend(audit_gate(cfg, host));
    // Whose revocation lists are acted on: a name must be a trusted key's.
    let keys = host.admission().trust().keys.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
    for (i, s) in cfg.marketplace.revocations_signed_by.iter().enumerate() {
        if !s.starts_with("ed25519:") && !keys.contains(s) {
            out.push(Finding::error(
                format!("marketplace.revocations_signed_by[{i}]"),
                format!(
                    "{s:?} is neither a key id nor the name of a trusted key{}: its revocation lists would be ignored",
                    suggestion(s, keys.iter().map(String::as_str))
                ),
            ));
        }
    }
    // Behind a load balancer every client arrives as the balancer's Unix
    // user (or over TCP from it): only tokens tell callers apart.
    if cfg.cluster.url.is_some() && cfg.server.tokens.is_empty() && cfg.server.oauth.is_none() {
        out.push(Finding::error(
            "cluster.url",
            "a fleet needs server.tokens or server.oauth: behind a load balancer the peer is the balancer, so the local-user check cannot tell callers apart; give each agent (and the operator) a token",
        ));
    }
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
        let flagged = already.not_loaded.iter().any(|(_, n)| n == name);
        if !plugins.contains(&name.as_str()) && !flagged {
            out.push(Finding::error(
                at.clone(),
                format!(
                    "no plugin named {name:?} is loaded, so this grant is never used{}",
                    suggestion(name, plugins.iter().copied())
                ),
            ));
        }
        if let Err(e) = host.admission().grants().grants_for(name) {
            out.push(Finding::error(at, e.to_string()));
        }
    }
    for r in crate::report::grants(host) {
        // Each finding is a whole sentence (what, why, what to do): said
        // once, on its own line.
        for finding in &r.findings {
            out.push(Finding::warning(format!("plugins.grants.{}", r.plugin), finding.clone()));
        }
        if let Some(Provenance::Unsigned { reason }) = r.provenance.as_ref().filter(|_| !already.trust_judged) {
            out.push(Finding::warning(
                format!("plugin {}", r.plugin),
                format!("NOT VERIFIED ({reason}): loaded only because unsigned plugins are allowed"),
            ));
        }
    }
    for held in host.admission().withheld_plugins() {
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
/// and the cache and state directories' permissions. (Plugin files are
/// judged by [`check_plugin`].)
pub fn check_files(cfg: &Config, dirs: &[(&str, Option<&Path>)]) -> Vec<Finding> {
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

/// A plugin a start would load: where it is configured and where it comes
/// from.
#[derive(Debug, Clone)]
pub struct PluginEntry {
    /// Where the operator put it, as findings name it: `plugins.files[0]`,
    /// `--plugin X`, `plugin file X` (the plugins directory), or `plugin N
    /// (added at run time from X)`.
    pub at: String,
    /// The file, or the `oci://` reference.
    pub source: PathBuf,
    /// Whether it replaces a plugin of the same name, as the plugins
    /// directory and the run-time additions do at start; otherwise a name
    /// already taken is refused, as for `plugins.files`.
    pub replace: bool,
}

/// What [`check_plugin`] found.
#[derive(Debug)]
pub struct PluginCheck {
    /// The plugin's name: its signed name, else its file's (or the
    /// reference's last segment).
    pub name: String,
    /// Whether it loaded into the checking host (its tools are known).
    pub loaded: bool,
    /// At most one finding: the first thing wrong with it.
    pub finding: Option<Finding>,
}

/// Loads `entry` into `installer`'s host as a start would, then judges it
/// by `policy` (the host's trust policy) from its bytes. An `oci://`
/// reference is pulled as the host pulls it at start, through the same
/// store and rule: the digest `toolhost.lock` pins (or the reference
/// names) from the cache without the network; a tag from the registry, or,
/// when the registry cannot be reached, the digest it last resolved to.
///
/// The installer's host should admit what `policy` would refuse (so the
/// tools of a plugin refused for its signature are still known and not
/// reported again as unknown), with the same keys and lock file: the
/// refusal is this function's one finding. A plugin trusted by a key of
/// `policy` has none; one admitted only because unsigned plugins are
/// allowed, a warning.
pub fn check_plugin(installer: &Installer, policy: &TrustPolicy, entry: &PluginEntry) -> PluginCheck {
    let at = &entry.at;
    let fetched = match entry.source.to_str().filter(|s| crate::oci::is_reference(s)) {
        Some(text) => fetch(installer, text),
        None => {
            let name = crate::runtime::plugin_name_from_path(&entry.source);
            let limit = installer.host().pipeline().runtime().limits().max_component_bytes + (1 << 16);
            crate::runtime::read_bounded(&entry.source, limit)
                .map(|bytes| Offered { name: name.clone(), bytes, path: Some(entry.source.clone()) })
                .map_err(|kind| Unread { name, why: format!("{}: {kind}", entry.source.display()) })
        }
    };
    let Offered { name, bytes, path } = match fetched {
        Ok(f) => f,
        Err(Unread { name, why }) => {
            return PluginCheck { name, loaded: false, finding: Some(Finding::error(at, why)) };
        }
    };
    let verdict = match policy.admit(&name, &bytes) {
        Ok((_, Provenance::Unsigned { reason })) => Some(Finding::warning(
            at,
            format!("NOT VERIFIED ({reason}): loaded only because unsigned plugins are allowed"),
        )),
        Ok(_) => None,
        Err(e) => Some(Finding::error(at, format!("the host refuses it: {e}"))),
    };
    let host = installer.host();
    let loaded = if entry.replace {
        host.admission().install_plugin_bytes(&name, &bytes, path.as_deref()).map(drop)
    } else {
        host.admission().add_plugin_bytes(&name, &bytes, path.as_deref()).map(drop)
    };
    match loaded {
        // Held for a secret: loads once it is set (the host reports it as held back).
        Ok(()) | Err(AddPluginError::MissingSecrets { .. }) => PluginCheck { name, loaded: true, finding: verdict },
        // Refused for its signature or digest: said once, by the verdict.
        Err(_) if verdict.as_ref().is_some_and(|f| f.level == Level::Error) => {
            PluginCheck { name, loaded: false, finding: verdict }
        }
        Err(e) => PluginCheck { name, loaded: false, finding: Some(Finding::error(at, format!("does not load: {e}"))) },
    }
}

/// A plugin's bytes as a start reads them.
struct Offered {
    /// The name it is offered as.
    name: String,
    bytes: Vec<u8>,
    /// Its file (for a registry plugin, the cached layer).
    path: Option<PathBuf>,
}

/// Why a plugin's bytes could not be read.
struct Unread {
    /// The name it would have had.
    name: String,
    why: String,
}

/// Pulls `reference` as [`Installer::install_plugin_ref`] does: named by
/// its signed manifest, else by the reference's last segment.
fn fetch(installer: &Installer, reference: &str) -> Result<Offered, Unread> {
    let r =
        crate::oci::OciRef::parse(reference).map_err(|e| Unread { name: reference.to_string(), why: e.to_string() })?;
    let short = r.short_name().to_string();
    let unread = |why: String| Unread { name: short.clone(), why };
    let store = installer.oci().ok_or_else(|| unread(format!("{r}: this host has no registry client")))?;
    let fetched = store.fetch(&r, installer.locked_digest(&r).as_deref()).map_err(|e| unread(e.to_string()))?;
    let name = match crate::package::parse(&fetched.bytes).map(|p| p.verify(&short)) {
        Ok(Ok(Some(v))) => v.manifest.name,
        _ => short,
    };
    Ok(Offered { name, bytes: fetched.bytes, path: fetched.path })
}

/// Whether the audit gate (`audit.fail_closed`) would let a write run: the
/// trail's file writable and its disk not full. A serving host's own
/// finding (its last gated call refused) wins.
fn audit_gate(cfg: &Config, host: &Host) -> Option<Finding> {
    let audit = host.pipeline().audit();
    if !cfg.audit.fail_closed && cfg.audit.fail_closed_tools.is_empty() {
        return None;
    }
    let refusing = |why: String| {
        Some(Finding::error(
            "audit.fail_closed",
            format!("the audit gate is refusing calls to tools that write: {why}; free the disk or fix the file"),
        ))
    };
    if audit.gate_failing() {
        return refusing("their start records cannot be written".into());
    }
    let path = audit.path().map(Path::to_path_buf).or_else(|| cfg.audit.path.as_ref().map(|p| cfg.resolve(p)))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match rustix::fs::statvfs(dir) {
        Ok(st) if st.f_bavail.saturating_mul(st.f_frsize) < 64 << 10 => {
            refusing(format!("{} has no space left", dir.display()))
        }
        Ok(_) => None,
        Err(e) => refusing(format!("{}: {e}", dir.display())),
    }
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
