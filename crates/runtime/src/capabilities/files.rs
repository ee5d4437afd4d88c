//! `files`: directories the operator grants, each preopened at a mount
//! point with a mode. Without a grant a plugin's filesystem has no
//! directories at all, so the import (which every Rust guest has through
//! its standard library) exposes nothing.

use super::Noting;
use super::{About, CapabilityFactor, GrantError, Grants, InstanceSetup};
use crate::state::State;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toolhost_types::Capability;
use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::Descriptor;

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
        dirs.push(DirGrant { host, mount: d.mount.clone(), mode: d.mode });
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
        Ok(())
    }

    fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()> {
        // A guest asks for its directories before any file access: noting
        // that call is noting the use of the grant.
        preopens::add_to_linker::<State, HasFs>(linker, |s| {
            let view = WasiFilesystemCtxView { ctx: s.wasi.filesystem(), table: &mut s.table };
            Noting::new(&s.used, s.held, Capability::Files, view)
        })
    }

    fn report(&self, grants: &Grants) -> serde_json::Value {
        grants
            .dirs
            .iter()
            .map(
                |d| serde_json::json!({"dir": d.host.display().to_string(), "mount": d.mount, "mode": d.mode.as_str()}),
            )
            .collect()
    }

    fn allows(&self, grants: &Grants) -> Vec<String> {
        grants
            .dirs
            .iter()
            .map(|d| match d.mode {
                DirMode::ReadWrite => format!(
                    "may read, create, overwrite and delete files under {} (seen as {})",
                    d.host.display(),
                    d.mount
                ),
                DirMode::ReadOnly => {
                    format!("may read files under {} (seen as {}), not change them", d.host.display(), d.mount)
                }
            })
            .collect()
    }
}

struct HasFs;
impl HasData for HasFs {
    type Data<'a> = Noting<'a, WasiFilesystemCtxView<'a>>;
}

impl preopens::Host for Noting<'_, WasiFilesystemCtxView<'_>> {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        self.note();
        preopens::Host::get_directories(&mut self.inner)
    }
}
