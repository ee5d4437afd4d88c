//! `files`: directories the operator grants, each preopened at a mount
//! point with a mode. Without a grant a plugin's filesystem has no
//! directories at all, so the import (which every Rust guest has through
//! its standard library) exposes nothing. With one, every filesystem call
//! goes through the guard in `files_guard.rs`: only regular files and
//! directories can be opened, a read-write directory has quotas
//! (`max_bytes`, `max_files`), and no link can be made.

use super::files_guard::{self, DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES};
use super::{About, CapabilityFactor, GrantError, Grants, InstanceSetup};
use crate::state::State;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toolhost_types::Capability;
use wasmtime::component::Linker;

/// One granted directory, as written in the config.
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
    /// Read-write only: the most bytes the directory may hold (sum of its
    /// regular files' sizes, whoever wrote them), default 256 MiB. A write
    /// past it fails with `insufficient-space`.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Read-write only: the most entries (files, directories, anything)
    /// the directory may hold below it, default 10,000. A create past it
    /// fails with `quota`.
    #[serde(default = "default_max_files")]
    pub max_files: u64,
}

impl Default for DirGrantConfig {
    fn default() -> Self {
        DirGrantConfig {
            dir: PathBuf::new(),
            mode: DirMode::default(),
            mount: default_mount(),
            max_bytes: DEFAULT_MAX_BYTES,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

fn default_mount() -> String {
    "/".into()
}

fn default_max_bytes() -> u64 {
    DEFAULT_MAX_BYTES
}

fn default_max_files() -> u64 {
    DEFAULT_MAX_FILES
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

impl DirMode {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            DirMode::ReadWrite => "read-write",
            DirMode::ReadOnly => "read-only",
        }
    }
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
    /// Most bytes the directory may hold (read-write).
    pub max_bytes: u64,
    /// Most entries the directory may hold (read-write).
    pub max_files: u64,
}

/// Resolves directories against `base`; a read-write directory that does
/// not exist yet is created.
pub(super) fn resolve(plugin: &str, base: &Path, cfg: &[DirGrantConfig]) -> Result<Vec<DirGrant>, GrantError> {
    let mut dirs = Vec::new();
    for d in cfg {
        let host = if d.dir.is_absolute() { d.dir.clone() } else { base.join(&d.dir) };
        let err = |reason: String| GrantError::Dir { plugin: plugin.into(), dir: host.display().to_string(), reason };
        if d.mode == DirMode::ReadWrite && !host.exists() {
            std::fs::create_dir_all(&host).map_err(|e| err(format!("cannot create it: {e}")))?;
        }
        let host = host.canonicalize().map_err(|e| err(e.to_string()))?;
        if !host.is_dir() {
            return Err(err("not a directory".into()));
        }
        dirs.push(DirGrant {
            host,
            mount: d.mount.clone(),
            mode: d.mode,
            max_bytes: d.max_bytes,
            max_files: d.max_files,
        });
    }
    Ok(dirs)
}

/// The `files` capability.
pub struct Files;

static ABOUT: About = About {
    capability: Capability::Files,
    interfaces: &["wasi:filesystem/types", "wasi:filesystem/preopens"],
    inert_without_grant: true,
};

impl CapabilityFactor for Files {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    fn held(&self, grants: &Grants) -> bool {
        !grants.dirs.is_empty()
    }

    fn configure(&self, grants: &Grants, setup: &mut InstanceSetup) -> Result<(), String> {
        for d in &grants.dirs {
            let perms = match d.mode {
                DirMode::ReadWrite => wasmtime_wasi::FsPerms::ReadWrite,
                DirMode::ReadOnly => wasmtime_wasi::FsPerms::ReadOnly,
            };
            setup
                .wasi
                .preopened_dir(&d.host, &d.mount, perms)
                .map_err(|e| format!("granted directory {} cannot be opened: {e}", d.host.display()))?;
        }
        // The guard's view of the same grants, in the same order.
        setup.used.files.configure(&grants.dirs);
        Ok(())
    }

    fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()> {
        files_guard::add_to_linker(linker)
    }

    fn report(&self, grants: &Grants) -> serde_json::Value {
        grants
            .dirs
            .iter()
            .map(|d| match d.mode {
                DirMode::ReadWrite => serde_json::json!({"dir": d.host.display().to_string(), "mount": d.mount,
                    "mode": d.mode.as_str(), "max_bytes": d.max_bytes, "max_files": d.max_files}),
                DirMode::ReadOnly => {
                    serde_json::json!({"dir": d.host.display().to_string(), "mount": d.mount, "mode": d.mode.as_str()})
                }
            })
            .collect()
    }

    fn allows(&self, grants: &Grants) -> Vec<String> {
        grants
            .dirs
            .iter()
            .map(|d| match d.mode {
                DirMode::ReadWrite => format!(
                    "may read, create, overwrite and delete files under {} (seen as {}), up to {} bytes in {} entries",
                    d.host.display(),
                    d.mount,
                    d.max_bytes,
                    d.max_files
                ),
                DirMode::ReadOnly => {
                    format!("may read files under {} (seen as {}), not change them", d.host.display(), d.mount)
                }
            })
            .collect()
    }
}
