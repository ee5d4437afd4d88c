//! `files`: directories the operator grants, each preopened at a mount
//! point with a mode. Without a grant a plugin's filesystem has no
//! directories at all, so the import (which every Rust guest has through
//! its standard library) exposes nothing. With one, every filesystem call
//! goes through the guard in `files_guard.rs`: only regular files and
//! directories can be opened, a read-write directory has quotas
//! (`max_bytes`, `max_files`), and no link can be made.
//!
//! A granted directory is opened once, when granted, and held
//! ([`HeldDir`]): calls reach it through that handle and never resolve its
//! path again, so a directory renamed or swapped for a symbolic link after
//! the grant leads nowhere new. A directory another user could replace (on
//! a path with a component another user owns, or may write without the
//! sticky bit, or through a symbolic link another user made) is not
//! granted at all; every grant is checked so each time it is opened, at
//! start as on a reload, before anything is created for it.

use super::files_guard::{self, DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES};
use super::{About, CapabilityFactor, GrantError, Grants, InstanceSetup};
use crate::state::State;
use serde::Deserialize;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
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

/// A granted directory, held open: what calls reach, whatever becomes of
/// its path. Two are equal when they are the same directory.
#[derive(Debug, Clone)]
pub struct HeldDir {
    fd: Arc<OwnedFd>,
    dev: u64,
    ino: u64,
}

impl HeldDir {
    /// Opens the directory at `path` (canonical: a symbolic link in its
    /// last component, put there since, is refused).
    fn open(path: &Path) -> std::io::Result<HeldDir> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty())?;
        let st = rustix::fs::fstat(&fd)?;
        Ok(HeldDir { fd: Arc::new(fd), dev: st.st_dev, ino: st.st_ino })
    }

    /// A path naming this very directory, whatever has become of its name
    /// (Linux: `/proc/self/fd/N`, which leads to the open directory).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

impl PartialEq for HeldDir {
    fn eq(&self, other: &HeldDir) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

impl Eq for HeldDir {}

/// Why another user could replace the directory `dir` or one on its path,
/// if one could: a component (as reached through `dir`'s path) another
/// user owns (not root), or that others may write without the sticky bit,
/// or a symbolic link on the path that another user made (not root). The
/// path is checked from `/` down, so the first such component is named.
pub fn replaceable_by_others(dir: &Path) -> Option<String> {
    replaceable_down_to(dir, dir)
}

/// [`replaceable_by_others`] for the part of `dir`'s path down to `upto`
/// (`dir` or a directory above it: what exists of a path yet to be
/// created).
fn replaceable_down_to(dir: &Path, upto: &Path) -> Option<String> {
    let mut path: Vec<&Path> = upto.ancestors().filter(|d| !d.as_os_str().is_empty()).collect();
    path.reverse();
    for d in path {
        // A link's owner is whoever made it (its mode bits mean nothing);
        // one made by another user leads wherever they choose, even in a
        // sticky directory that lets no one replace another's entry.
        match std::fs::symlink_metadata(d) {
            Ok(link) if link.is_symlink() => {
                use std::os::unix::fs::MetadataExt as _;
                if link.uid() != crate::private::effective_uid() && link.uid() != 0 {
                    return Some(format!(
                        "the symbolic link {} on its path was made by another user (uid {}), who could point it \
                         at any directory; grant a path whose every component is yours (or root's)",
                        d.display(),
                        link.uid()
                    ));
                }
            }
            Ok(_) => {}
            Err(e) => return Some(format!("{} cannot be checked: {e}", d.display())),
        }
        let md = match std::fs::metadata(d) {
            Ok(md) => md,
            Err(e) => return Some(format!("{} cannot be checked: {e}", d.display())),
        };
        if let Some(who) = crate::private::writable_by_others(&md) {
            let what = if d == dir { "it".to_string() } else { format!("the directory {} above it", d.display()) };
            return Some(format!(
                "{what} can be changed by {who}, who could swap what the plugin reaches for any other directory; \
                 grant a directory whose every parent is yours (or root's) and not writable by others"
            ));
        }
    }
    None
}

/// Creates the directories `rest` names below `existing` (which exists
/// and was checked), each one through the directory above it, opened
/// without following a link: nothing is created through a link made
/// meanwhile.
fn create_below(existing: &Path, rest: &Path) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut names = Vec::new();
    for c in rest.components() {
        let std::path::Component::Normal(name) = c else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} in a part that does not exist", c.as_os_str().display()),
            ));
        };
        names.push(name);
    }
    let mut at = rustix::fs::open(existing, flags, Mode::empty())?;
    for name in names {
        match rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        at = rustix::fs::openat(&at, name, flags | OFlags::NOFOLLOW, Mode::empty())?;
    }
    Ok(())
}

/// A resolved directory grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// Absolute host path (canonical, as granted).
    pub host: PathBuf,
    /// The directory, held open since it was granted.
    pub held: HeldDir,
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
        let written = std::path::absolute(&host).map_err(|e| err(e.to_string()))?;
        // The path as written is checked before anything is created below
        // it or followed through it (a link on it that another user made
        // leads wherever they chose): what exists of it first, then, once
        // created, the rest.
        let existing = written.ancestors().find(|p| p.symlink_metadata().is_ok()).unwrap_or(Path::new("/"));
        if let Some(why) = replaceable_down_to(&written, existing) {
            return Err(err(why));
        }
        if d.mode == DirMode::ReadWrite && existing != written {
            let rest = written.strip_prefix(existing).unwrap_or(&written);
            create_below(existing, rest).map_err(|e| err(format!("cannot create it: {e}")))?;
            if let Some(why) = replaceable_by_others(&written) {
                return Err(err(why));
            }
        }
        // And where it leads.
        let host = written.canonicalize().map_err(|e| err(e.to_string()))?;
        if !host.is_dir() {
            return Err(err("not a directory".into()));
        }
        if let Some(why) = replaceable_by_others(&host) {
            return Err(err(why));
        }
        let held = HeldDir::open(&host).map_err(|e| err(format!("cannot open it: {e}")))?;
        dirs.push(DirGrant {
            host,
            held,
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
    by_extension: false,
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
            // Through the handle held since the grant, never the path.
            setup
                .wasi
                .preopened_dir(d.held.path(), &d.mount, perms)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn grant(dir: &Path) -> DirGrantConfig {
        serde_json::from_value(serde_json::json!({"dir": dir, "mode": "read-only"})).unwrap()
    }

    #[test]
    fn a_held_directory_stays_the_one_granted_when_its_name_is_swapped() {
        let t = tempfile::tempdir().unwrap();
        let granted = t.path().join("campaign");
        std::fs::create_dir(&granted).unwrap();
        std::fs::write(granted.join("notes.txt"), "the granted one").unwrap();
        let secret = t.path().join("state");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("notes.txt"), "the host's own").unwrap();
        let dirs = resolve("p", t.path(), &[grant(&granted)]).unwrap();
        // The attacker's swap: the granted name now leads to the state.
        std::fs::rename(&granted, t.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&secret, &granted).unwrap();
        let through = std::fs::read_to_string(dirs[0].held.path().join("notes.txt")).unwrap();
        assert_eq!(through, "the granted one");
    }

    #[test]
    fn a_read_write_grant_is_created_below_what_exists_and_never_through_dot_dot() {
        let t = tempfile::tempdir().unwrap();
        let rw = |dir: &Path| -> DirGrantConfig { serde_json::from_value(serde_json::json!({"dir": dir})).unwrap() };
        let dirs = resolve("p", t.path(), &[rw(Path::new("a/b/c"))]).unwrap();
        assert!(t.path().join("a/b/c").is_dir());
        assert_eq!(dirs[0].host, t.path().join("a/b/c").canonicalize().unwrap());
        // An existing directory is granted as it is.
        assert!(resolve("p", t.path(), &[rw(Path::new("a/b"))]).is_ok());
        let err = resolve("p", t.path(), &[rw(Path::new("x/../y"))]).unwrap_err().to_string();
        assert!(err.contains("cannot create it: .. in a part that does not exist"), "{err}");
        assert!(!t.path().join("x").exists() && !t.path().join("y").exists());
    }

    #[test]
    fn a_directory_others_could_replace_is_not_granted() {
        let t = tempfile::tempdir().unwrap();
        let parent = t.path().join("shared");
        let granted = parent.join("campaign");
        std::fs::create_dir_all(&granted).unwrap();
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = resolve("p", t.path(), &[grant(&granted)]).unwrap_err().to_string();
        assert!(
            err.contains(&format!("the directory {} above it can be changed by other users", parent.display())),
            "{err}"
        );
        // The sticky bit (as on /tmp) lets no one replace another's entry.
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(resolve("p", t.path(), &[grant(&granted)]).is_ok());
        std::fs::set_permissions(&granted, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = resolve("p", t.path(), &[grant(&granted)]).unwrap_err().to_string();
        assert!(err.contains("it can be changed by other users"), "{err}");
    }
}
