//! Capability grants: what the operator lets each plugin touch. Deny by
//! default: a plugin without a grant sees no directory and no environment
//! variable, and a plugin importing a network interface does not load.
//!
//! Grants come only from the operator's config file (`plugins.grants`);
//! nothing a tool or a model sends can change them.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `plugins.grants.<plugin>` in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrantConfig {
    /// Directories the plugin may use.
    pub files: Vec<DirGrantConfig>,
    /// Names of host environment variables the plugin may read.
    pub env: Vec<String>,
    /// Access to the campaign memory store.
    pub memory: bool,
    /// TCP endpoints the plugin may connect to, as `IP:port` (IPv6 as
    /// `[::1]:port`). Only outgoing TCP connections to exactly these
    /// addresses are allowed; no name lookups, no listening, no UDP.
    pub network: Vec<String>,
}

/// One granted directory.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrantConfig {
    /// The directory on the host (relative to the config file).
    pub dir: PathBuf,
    /// `read-write` (default) or `read-only`.
    #[serde(default)]
    pub mode: DirMode,
    /// Where the plugin sees it (default `/`).
    #[serde(default = "default_mount")]
    pub mount: String,
}

fn default_mount() -> String {
    "/".into()
}

/// Access to a granted directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirMode {
    /// Read and write.
    #[default]
    ReadWrite,
    /// Read only.
    ReadOnly,
}

/// Grants resolved for one plugin: absolute directories, env values read
/// once, a handle on the memory store when granted.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// Directories, with mount point and mode.
    pub dirs: Vec<DirGrant>,
    /// Environment variables (name, value) the plugin sees.
    pub env: Vec<(String, String)>,
    /// Variables granted but not set on the host (reported, not exposed).
    pub env_missing: Vec<String>,
    /// The campaign memory store, when granted.
    pub memory: Option<std::sync::Arc<crate::memory::MemoryStore>>,
    /// The only socket addresses the plugin may connect to.
    pub network: Vec<std::net::SocketAddr>,
}

/// A resolved directory grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// Absolute host path.
    pub host: PathBuf,
    /// Mount point inside the plugin.
    pub mount: String,
    /// Access.
    pub mode: DirMode,
}

/// A grant that cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// A granted directory is missing or unusable.
    #[error("plugins.grants.{plugin}.files: {dir}: {reason}")]
    Dir {
        /// Plugin.
        plugin: String,
        /// Directory.
        dir: String,
        /// Why.
        reason: String,
    },
    /// A network entry is not `IP:port`.
    #[error("plugins.grants.{plugin}.network: {entry:?} is not an IP:port address (names are not resolved)")]
    Network {
        /// Plugin.
        plugin: String,
        /// The entry.
        entry: String,
    },
    /// `memory` was granted but the store cannot be opened.
    #[error("plugins.grants.{plugin}.memory: {reason}")]
    Memory {
        /// Plugin.
        plugin: String,
        /// Why.
        reason: String,
    },
}

impl GrantConfig {
    /// Resolves paths against `base` and reads granted variables. A
    /// read-write directory that does not exist yet is created.
    pub fn resolve(&self, plugin: &str, base: &std::path::Path) -> Result<Grants, GrantError> {
        let mut dirs = Vec::new();
        for d in &self.files {
            let host = if d.dir.is_absolute() { d.dir.clone() } else { base.join(&d.dir) };
            let err =
                |reason: String| GrantError::Dir { plugin: plugin.into(), dir: host.display().to_string(), reason };
            if d.mode == DirMode::ReadWrite && !host.exists() {
                std::fs::create_dir_all(&host).map_err(|e| err(format!("cannot create it: {e}")))?;
            }
            let host = host.canonicalize().map_err(|e| err(e.to_string()))?;
            if !host.is_dir() {
                return Err(err("not a directory".into()));
            }
            dirs.push(DirGrant { host, mount: d.mount.clone(), mode: d.mode });
        }
        let mut network = Vec::new();
        for n in &self.network {
            let addr: std::net::SocketAddr =
                n.parse().map_err(|_| GrantError::Network { plugin: plugin.into(), entry: n.clone() })?;
            network.push(addr);
        }
        let mut env = Vec::new();
        let mut env_missing = Vec::new();
        for name in &self.env {
            match std::env::var(name) {
                Ok(v) => env.push((name.clone(), v)),
                Err(_) => env_missing.push(name.clone()),
            }
        }
        Ok(Grants { dirs, env, env_missing, memory: None, network })
    }
}

/// All plugins' grants from the config, keyed by plugin name.
pub type GrantsByPlugin = BTreeMap<String, GrantConfig>;

/// A capability class, as a reviewer reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Capability {
    /// Files in granted directories (`wasi:filesystem`).
    Files,
    /// Environment variables (`wasi:cli/environment`).
    Env,
    /// Sockets and outgoing HTTP (`wasi:sockets`, `wasi:http`).
    Network,
    /// The campaign memory store (`toolhost:plugin/memory`).
    Memory,
}

impl Capability {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Files => "files",
            Capability::Env => "env",
            Capability::Network => "network",
            Capability::Memory => "memory",
        }
    }

    /// The capability an import asks for, if any.
    pub fn of_import(import: &str) -> Option<Capability> {
        if import.starts_with("wasi:filesystem/") {
            Some(Capability::Files)
        } else if import.starts_with("wasi:cli/environment") {
            Some(Capability::Env)
        } else if import.starts_with("wasi:sockets/") || import.starts_with("wasi:http/") {
            Some(Capability::Network)
        } else if import.starts_with("toolhost:plugin/memory") {
            Some(Capability::Memory)
        } else {
            None
        }
    }
}

/// What a plugin asks for, from its imports.
pub fn requested(imports: &[String]) -> Vec<Capability> {
    let mut v: Vec<Capability> = imports.iter().filter_map(|i| Capability::of_import(i)).collect();
    v.sort();
    v.dedup();
    v
}

impl Grants {
    /// Whether this grants anything of capability `c`.
    pub fn grants(&self, c: Capability) -> bool {
        match c {
            Capability::Files => !self.dirs.is_empty(),
            Capability::Env => !self.env.is_empty(),
            Capability::Memory => self.memory.is_some(),
            Capability::Network => !self.network.is_empty(),
        }
    }

    /// Plain-words lines saying what each grant allows.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for d in &self.dirs {
            out.push(match d.mode {
                DirMode::ReadWrite => format!(
                    "may read, create, overwrite and delete files under {} (seen as {})",
                    d.host.display(),
                    d.mount
                ),
                DirMode::ReadOnly => {
                    format!("may read files under {} (seen as {}), not change them", d.host.display(), d.mount)
                }
            });
        }
        for (name, _) in &self.env {
            out.push(format!("may read the environment variable {name}"));
        }
        for a in &self.network {
            out.push(format!("may open TCP connections to {a} (and to no other address)"));
        }
        if self.memory.is_some() {
            out.push("may search the campaign memory (session transcripts, facts, knowledge graph), read only".into());
        }
        for name in &self.env_missing {
            out.push(format!("was granted the environment variable {name}, which is not set on this host"));
        }
        out
    }

    /// True when nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
            && self.env.is_empty()
            && self.env_missing.is_empty()
            && self.memory.is_none()
            && self.network.is_empty()
    }
}
