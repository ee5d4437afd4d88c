//! The guard in front of wasmtime-wasi's `wasi:filesystem` (WASI 0.2, sync
//! bindings). It shadows `wasi:filesystem/types` and `preopens` in the
//! linker and hands every function to wasmtime-wasi's own implementation
//! except these:
//!
//! * `open-at` is done here, with wasmtime-wasi's flag handling and the same
//!   sandboxed path resolution (`cap_primitives::fs::open`, of which
//!   wasmtime-wasi's resolver is a copy), but with `O_NONBLOCK | O_NOCTTY`,
//!   then `fstat` on the opened descriptor: only regular files and
//!   directories are handed out. A FIFO, socket or device is closed and
//!   refused with `error-code::access`, so an open never blocks and what is
//!   checked is what was opened.
//! * Whatever adds data or names to a read-write grant is metered against
//!   its quota (`max_bytes`: sum of the regular files' sizes; `max_files`:
//!   entries, directories included): `write`, the `output-stream`s of
//!   `write-via-stream` / `append-via-stream` (replaced by [`QuotaStream`]),
//!   `set-size`, `open-at` with `create` or `truncate`, and
//!   `create-directory-at`. Over quota: `error-code::insufficient-space`
//!   (bytes) or `error-code::quota` (entries). A failed stream write carries
//!   `ENOSPC` (`filesystem-error-code` answers `insufficient-space`; wasi-libc
//!   does not ask and reports `EIO`).
//! * `symlink-at` and `link-at` are refused with `error-code::not-permitted`,
//!   and `rename-at` between two grants with `error-code::cross-device` (it
//!   would move data out of one quota into another uncharged).
//!
//! The ledger of a directory ([`Tree`]) is shared by every call and plugin
//! granted it, for the life of the process. Every change of size or entry
//! count that a guest makes happens under the tree's lock, measured by
//! `fstat` before and after, so what the ledger holds is exact, with one
//! deliberate over-count: space freed by deleting or replacing a file
//! (`unlink-file-at`, `rename-at` over a file) is not credited at once (an
//! open descriptor may keep the file alive), only by the next rescan. A
//! rescan (a walk of the tree that follows no symlinks and stops past the
//! limits) runs when a call starts using the grant while no other call is,
//! if the ledger was never set, may over-count, or is a minute old (to see
//! changes made from outside). There is no separate per-call bound: the
//! tree quota already bounds what any number of calls can leave on disk,
//! and the call's deadline and fuel bound how long it writes.

use super::Noting;
use super::files::DirGrant;
use crate::state::State;
use cap_primitives::fs::{FollowSymlinks, MetadataExt, OpenOptions, OpenOptionsExt};
use quota::*;
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use toolhost_types::Capability;
use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, Dir, File, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types as sync;
use wasmtime_wasi::p2::bindings::sync::io::streams;
use wasmtime_wasi::p2::{DynOutputStream, FsResult, OutputStream, Pollable, StreamError, StreamResult};
use wasmtime_wasi::{FsPerms, OpenMode};

/// Default `max_bytes` of a read-write grant: 256 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// Default `max_files` of a read-write grant.
pub const DEFAULT_MAX_FILES: u64 = 10_000;
/// A ledger older than this is rescanned when a call starts alone on it.
pub(super) const RESCAN_AFTER: Duration = Duration::from_secs(60);
/// Most bytes an output stream accepts per `write` (wasmtime-wasi's own).
pub(super) const STREAM_CHUNK: u64 = 64 << 10;

// ---------------------------------------------------------------------------
// Per call
// ---------------------------------------------------------------------------

/// The guard's state for one call: its grants (in `preopened_dir` order)
/// and which grant each open descriptor belongs to.
#[derive(Default)]
pub(crate) struct CallFiles(Mutex<Call>);

#[derive(Default)]
struct Call {
    grants: Vec<Grant>,
    /// `descriptor` rep -> index in `grants`. Every descriptor comes from
    /// `get-directories` or `open-at`, which tag it; an untagged one may not
    /// change anything (fail closed).
    tags: HashMap<u32, usize>,
    /// Most descriptors open at once (`limits.max_open_files`); 0: no
    /// limit set (then [`DEFAULT_MAX_OPEN`]).
    max_open: usize,
    /// The caller (agent; `None`: the operator) whose share of the
    /// process's descriptors the call's opens take.
    caller: Option<std::sync::Arc<str>>,
    /// `descriptor` rep -> its place in the process's descriptor budget
    /// (`toolhost_base::descriptors`), given back when it is dropped.
    leases: HashMap<u32, toolhost_base::descriptors::Lease>,
}

/// Default `limits.max_open_files`.
pub const DEFAULT_MAX_OPEN: usize = 256;

struct Grant {
    mount: String,
    /// `None` for a read-only grant.
    quota: Option<Quota>,
    active: Option<Active>,
}

impl std::fmt::Debug for CallFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let call = self.lock();
        f.debug_struct("CallFiles").field("grants", &call.grants.len()).field("open", &call.tags.len()).finish()
    }
}

impl CallFiles {
    fn lock(&self) -> MutexGuard<'_, Call> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the most descriptors the call may hold open at once
    /// (`limits.max_open_files`): past it, `open-at` fails with
    /// `error-code::quota`.
    pub(crate) fn set_max_open(&self, n: usize) {
        self.lock().max_open = n;
    }

    /// Sets the caller whose share of the process's descriptors the call's
    /// opens take (`toolhost_base::descriptors`).
    pub(crate) fn set_caller(&self, caller: Option<&str>) {
        self.lock().caller = caller.map(std::sync::Arc::from);
    }

    /// Sets the call's grants: the same list, in the same order, as the
    /// `preopened_dir` calls.
    pub(crate) fn configure(&self, dirs: &[DirGrant]) {
        self.lock().grants = dirs
            .iter()
            .map(|d| Grant {
                mount: d.mount.clone(),
                quota: (d.mode == super::DirMode::ReadWrite).then(|| Quota {
                    tree: Tree::of(&d.host),
                    scan_root: d.held.path(),
                    max_bytes: d.max_bytes,
                    max_files: d.max_files,
                }),
                active: None,
            })
            .collect();
    }
}

// ---------------------------------------------------------------------------
// Linking
// ---------------------------------------------------------------------------

/// What the guard's host functions see.
pub(crate) struct GuardView<'a> {
    fs: WasiFilesystemCtxView<'a>,
    call: &'a CallFiles,
}

fn view(s: &mut State) -> GuardView<'_> {
    GuardView { fs: WasiFilesystemCtxView { ctx: s.wasi.filesystem(), table: &mut s.table }, call: &s.used.files }
}

struct HasGuard;
impl HasData for HasGuard {
    type Data<'a> = GuardView<'a>;
}

struct HasPreopens;
impl HasData for HasPreopens {
    type Data<'a> = Noting<'a, GuardView<'a>>;
}

/// Shadows `wasi:filesystem/types` and `preopens` (call with shadowing
/// allowed, after `wasmtime_wasi::p2::add_to_linker_sync`).
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    sync::add_to_linker::<State, HasGuard>(linker, view)?;
    // A guest asks for its directories before any file access: noting that
    // call is noting the use of the grant.
    preopens::add_to_linker::<State, HasPreopens>(linker, |s| {
        let (used, held) = (&*s.used, s.held);
        let view = GuardView {
            fs: WasiFilesystemCtxView { ctx: s.wasi.filesystem(), table: &mut s.table },
            call: &used.files,
        };
        Noting::new(used, held, Capability::Files, view)
    })
}

impl preopens::Host for Noting<'_, GuardView<'_>> {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        self.note();
        let dirs = preopens::Host::get_directories(&mut self.inner.fs)?;
        let mut call = self.inner.call.lock();
        for (i, (fd, mount)) in dirs.iter().enumerate() {
            let Some(grant) = call.grants.get_mut(i) else { continue };
            if grant.mount != *mount {
                continue; // not the grant we think: untagged, so read-only
            }
            if grant.active.is_none() {
                grant.active = grant.quota.as_ref().map(|q| q.tree.begin(q));
            }
            call.tags.insert(fd.rep(), i);
        }
        Ok(dirs)
    }
}

fn err<T>(code: ErrorCode) -> FsResult<T> {
    Err(code.into())
}

impl GuardView<'_> {
    fn grant_of(&self, fd: &Resource<Descriptor>) -> Option<usize> {
        self.call.lock().tags.get(&fd.rep()).copied()
    }

    fn quota_of(&self, grant: Option<usize>) -> FsResult<Quota> {
        let call = self.call.lock();
        match grant.and_then(|i| call.grants[i].quota.clone()) {
            Some(q) => Ok(q),
            None => err(ErrorCode::NotPermitted),
        }
    }

    /// The file behind `fd` and its quota when it may be written;
    /// `Ok(None)`: not a writable file, wasmtime-wasi answers (and refuses).
    fn writable_file(&mut self, fd: &Resource<Descriptor>) -> FsResult<Option<(Arc<std::fs::File>, Quota)>> {
        let file = match self.fs.table.get(fd)? {
            Descriptor::File(f) if !f.perms.write_not_permitted() => f.file.clone(),
            _ => return Ok(None),
        };
        Ok(Some((file, self.quota_of(self.grant_of(fd))?)))
    }

    /// The quota of the directory `fd` when it may be changed.
    fn writable_dir(&mut self, fd: &Resource<Descriptor>) -> FsResult<Option<Quota>> {
        match self.fs.table.get(fd)? {
            Descriptor::Dir(d) if !d.perms.write_not_permitted() => {}
            _ => return Ok(None),
        }
        Ok(Some(self.quota_of(self.grant_of(fd))?))
    }

    /// `fstatat(path, AT_SYMLINK_NOFOLLOW)` under the directory `fd`.
    fn stat_nofollow(&mut self, fd: &Resource<Descriptor>, path: &str) -> Option<cap_primitives::fs::Metadata> {
        match self.fs.table.get(fd).ok()? {
            Descriptor::Dir(d) => cap_primitives::fs::stat(&d.dir, Path::new(path), FollowSymlinks::No).ok(),
            Descriptor::File(_) => None,
        }
    }

    /// A metered output stream of `file`.
    fn metered(
        &mut self,
        file: Arc<std::fs::File>,
        quota: Quota,
        position: Option<u64>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let stream: DynOutputStream = Box::new(QuotaStream { file, quota, position, closed: false });
        Ok(self.fs.table.push(stream)?)
    }
}

impl sync::Host for GuardView<'_> {
    fn convert_error_code(&mut self, err: wasmtime_wasi::p2::FsError) -> wasmtime::Result<sync::ErrorCode> {
        sync::Host::convert_error_code(&mut self.fs, err)
    }

    fn filesystem_error_code(&mut self, err: Resource<streams::Error>) -> wasmtime::Result<Option<sync::ErrorCode>> {
        sync::Host::filesystem_error_code(&mut self.fs, err)
    }
}

impl sync::HostDirectoryEntryStream for GuardView<'_> {
    fn read_directory_entry(
        &mut self,
        stream: Resource<sync::DirectoryEntryStream>,
    ) -> FsResult<Option<sync::DirectoryEntry>> {
        sync::HostDirectoryEntryStream::read_directory_entry(&mut self.fs, stream)
    }

    fn drop(&mut self, stream: Resource<sync::DirectoryEntryStream>) -> wasmtime::Result<()> {
        sync::HostDirectoryEntryStream::drop(&mut self.fs, stream)
    }
}

impl sync::HostDescriptor for GuardView<'_> {
    // --- guarded -----------------------------------------------------------

    fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: sync::PathFlags,
        path: String,
        oflags: sync::OpenFlags,
        flags: sync::DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        let dir: Dir = match self.fs.table.get(&fd)? {
            Descriptor::Dir(d) => d.clone(),
            Descriptor::File(_) => return err(ErrorCode::NotDirectory),
        };
        let lease = {
            // One call cannot take the host's file descriptors, and one
            // caller's calls not the process's: a share each, and a reserve
            // for the front.
            let call = self.call.lock();
            let max = if call.max_open == 0 { DEFAULT_MAX_OPEN } else { call.max_open };
            if call.tags.len() >= max {
                return err(ErrorCode::Quota);
            }
            match toolhost_base::descriptors::budget().take(call.caller.as_ref()) {
                Ok(lease) => lease,
                Err(refused) => {
                    tracing::debug!("a plugin's open refused: {refused}");
                    return err(ErrorCode::Quota);
                }
            }
        };
        let grant = self.grant_of(&fd);
        // Options as wasmtime-wasi's `Dir::open_at` builds them, except
        // TRUNCATE: applied below with `ftruncate`, once the type is checked.
        let mut opts = OpenOptions::new();
        let mut mode = OpenMode::empty();
        let create = oflags.contains(sync::OpenFlags::CREATE);
        let exclusive = oflags.contains(sync::OpenFlags::EXCLUSIVE);
        let truncate = oflags.contains(sync::OpenFlags::TRUNCATE);
        if create || truncate {
            opts.write(true);
            mode |= OpenMode::WRITE;
        }
        if flags.contains(sync::DescriptorFlags::READ) {
            opts.read(true);
            mode |= OpenMode::READ;
        }
        if flags.contains(sync::DescriptorFlags::WRITE) {
            opts.write(true);
            mode |= OpenMode::WRITE;
        } else {
            opts.read(true);
            mode |= OpenMode::READ;
        }
        let follow = path_flags.contains(sync::PathFlags::SYMLINK_FOLLOW);
        opts._cap_fs_ext_follow(if follow { FollowSymlinks::Yes } else { FollowSymlinks::No });
        if flags.intersects(
            sync::DescriptorFlags::FILE_INTEGRITY_SYNC
                | sync::DescriptorFlags::DATA_INTEGRITY_SYNC
                | sync::DescriptorFlags::REQUESTED_WRITE_SYNC,
        ) {
            return err(ErrorCode::Unsupported);
        }
        let want_dir = oflags.contains(sync::OpenFlags::DIRECTORY);
        if want_dir && (create || exclusive || truncate) {
            return err(ErrorCode::Invalid);
        }
        if dir.perms.write_not_permitted() && mode.contains(OpenMode::WRITE) {
            return err(ErrorCode::NotPermitted);
        }
        let quota = match dir.perms {
            FsPerms::ReadWrite if create || truncate => Some(self.quota_of(grant)?),
            _ => None,
        };
        // The guard: never block in open(2), never acquire a terminal.
        opts._cap_fs_ext_nonblock(true);
        opts.custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32);

        let path = Path::new(&path);
        // open(2) of a socket, or of a FIFO for writing with no reader, is
        // ENXIO: refused like the rest.
        let open = |opts: &OpenOptions| {
            cap_primitives::fs::open(&dir.dir, path, opts).map_err(|e| match e.raw_os_error() {
                Some(n) if n == rustix::io::Errno::NXIO.raw_os_error() => rustix::io::Errno::ACCESS.into(),
                _ => e,
            })
        };
        let file = match &quota {
            // A new name costs an entry. The tree stays locked from the
            // lookup to the create, so "did it exist" cannot change between.
            Some(q) if create => {
                let mut u = q.tree.lock();
                let mut lookup = opts.clone();
                lookup.create(false);
                match (!exclusive).then(|| open(&lookup)) {
                    Some(Err(e)) if e.kind() == io::ErrorKind::NotFound => None,
                    other => other,
                }
                .unwrap_or_else(|| {
                    if u.entries >= q.max_files {
                        return Err(rustix::io::Errno::DQUOT.into());
                    }
                    let mut new = opts.clone();
                    new.create_new(true);
                    let f = open(&new)?;
                    u.entries += 1;
                    Ok(f)
                })
            }
            _ => open(&opts),
        };
        let file = match file {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::DQUOT.raw_os_error()) => {
                return err(ErrorCode::Quota);
            }
            r => r?,
        };
        // What was opened, by fstat: anything but a file or a directory is
        // closed (dropped) and refused.
        let ft = file.metadata()?.file_type();
        if !ft.is_file() && !ft.is_dir() {
            return err(ErrorCode::Access);
        }
        if want_dir && !ft.is_dir() {
            return err(ErrorCode::NotDirectory);
        }
        let fl = rustix::fs::fcntl_getfl(&file).map_err(io::Error::from)?;
        rustix::fs::fcntl_setfl(&file, fl - rustix::fs::OFlags::NONBLOCK).map_err(io::Error::from)?;
        if let (Some(q), true, true) = (&quota, truncate, ft.is_file()) {
            q.resize(&file, |_, _| file.set_len(0))?;
        }
        // wasmtime-wasi keeps `allow_blocking_current_thread` private; the
        // runtime never sets it, so it is false here too.
        let desc = match ft.is_dir() {
            true => Descriptor::Dir(Dir::new(file, dir.perms, mode, false)),
            false => Descriptor::File(File::new(file, dir.perms, mode, false)),
        };
        let res = self.fs.table.push(desc)?;
        let mut call = self.call.lock();
        if let Some(i) = grant {
            call.tags.insert(res.rep(), i);
        }
        call.leases.insert(res.rep(), lease);
        Ok(res)
    }

    fn write(
        &mut self,
        fd: Resource<Descriptor>,
        mut buf: Vec<u8>,
        offset: sync::Filesize,
    ) -> FsResult<sync::Filesize> {
        let Some((file, quota)) = self.writable_file(&fd)? else {
            return sync::HostDescriptor::write(&mut self.fs, fd, buf, offset);
        };
        let n = quota.resize(&file, |size, room| {
            // Write what fits: up to `size + room`.
            let fits = size.saturating_add(room);
            let end = offset.saturating_add(buf.len() as u64);
            if !buf.is_empty() && end > fits {
                if offset >= fits {
                    return Err(nospc());
                }
                buf.truncate((fits - offset) as usize);
            }
            file.write_at(&buf, offset)
        })?;
        Ok(n as u64)
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: sync::Filesize,
    ) -> FsResult<Resource<streams::OutputStream>> {
        let Some((file, quota)) = self.writable_file(&fd)? else {
            return sync::HostDescriptor::write_via_stream(&mut self.fs, fd, offset);
        };
        // Nothing fits: say so now, with its own error code (wasi-libc turns
        // a later stream failure into EIO).
        if QuotaStream::allowance(&file, &quota, Some(offset))? == 0 {
            return err(ErrorCode::InsufficientSpace);
        }
        self.metered(file, quota, Some(offset))
    }

    fn append_via_stream(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<streams::OutputStream>> {
        let Some((file, quota)) = self.writable_file(&fd)? else {
            return sync::HostDescriptor::append_via_stream(&mut self.fs, fd);
        };
        if QuotaStream::allowance(&file, &quota, None)? == 0 {
            return err(ErrorCode::InsufficientSpace);
        }
        self.metered(file, quota, None)
    }

    fn set_size(&mut self, fd: Resource<Descriptor>, size: sync::Filesize) -> FsResult<()> {
        let Some((file, quota)) = self.writable_file(&fd)? else {
            return sync::HostDescriptor::set_size(&mut self.fs, fd, size);
        };
        Ok(quota.resize(&file, |cur, room| {
            if size > cur && size - cur > room {
                return Err(nospc());
            }
            file.set_len(size)
        })?)
    }

    fn create_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let Some(quota) = self.writable_dir(&fd)? else {
            return sync::HostDescriptor::create_directory_at(&mut self.fs, fd, path);
        };
        quota.create(|| sync::HostDescriptor::create_directory_at(&mut self.fs, fd, path))
    }

    fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let Some(quota) = self.writable_dir(&fd)? else {
            return sync::HostDescriptor::unlink_file_at(&mut self.fs, fd, path);
        };
        let mut u = quota.tree.lock();
        sync::HostDescriptor::unlink_file_at(&mut self.fs, fd, path)?;
        // One name fewer; its bytes only by the next rescan (an open
        // descriptor may keep them on disk).
        u.entries = u.entries.saturating_sub(1);
        u.dirty = true;
        Ok(())
    }

    fn remove_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let Some(quota) = self.writable_dir(&fd)? else {
            return sync::HostDescriptor::remove_directory_at(&mut self.fs, fd, path);
        };
        let mut u = quota.tree.lock();
        sync::HostDescriptor::remove_directory_at(&mut self.fs, fd, path)?;
        u.entries = u.entries.saturating_sub(1);
        Ok(())
    }

    fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.fs.table.get(&fd)?;
        self.fs.table.get(&new_fd)?;
        if self.grant_of(&fd) != self.grant_of(&new_fd) {
            return err(ErrorCode::CrossDevice);
        }
        let Some(quota) = self.writable_dir(&fd)? else {
            return sync::HostDescriptor::rename_at(&mut self.fs, fd, old_path, new_fd, new_path);
        };
        let mut u = quota.tree.lock();
        let src = self.stat_nofollow(&fd, &old_path);
        let dst = self.stat_nofollow(&new_fd, &new_path);
        sync::HostDescriptor::rename_at(&mut self.fs, fd, old_path, new_fd, new_path)?;
        // A replaced name is gone (its bytes: see unlink).
        if let (Some(s), Some(d)) = (src, dst)
            && (s.dev(), s.ino()) != (d.dev(), d.ino())
        {
            u.entries = u.entries.saturating_sub(1);
            u.dirty = true;
        }
        Ok(())
    }

    fn symlink_at(&mut self, fd: Resource<Descriptor>, _old_path: String, _new_path: String) -> FsResult<()> {
        self.fs.table.get(&fd)?; // a bad handle still traps
        err(ErrorCode::NotPermitted)
    }

    fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        _old_path_flags: sync::PathFlags,
        _old_path: String,
        new_descriptor: Resource<Descriptor>,
        _new_path: String,
    ) -> FsResult<()> {
        self.fs.table.get(&fd)?;
        self.fs.table.get(&new_descriptor)?;
        err(ErrorCode::NotPermitted)
    }

    fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        {
            let mut call = self.call.lock();
            call.tags.remove(&fd.rep());
            call.leases.remove(&fd.rep());
        }
        sync::HostDescriptor::drop(&mut self.fs, fd)
    }

    // --- delegated unchanged -----------------------------------------------

    fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        offset: sync::Filesize,
        len: sync::Filesize,
        advice: sync::Advice,
    ) -> FsResult<()> {
        sync::HostDescriptor::advise(&mut self.fs, fd, offset, len, advice)
    }

    fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        sync::HostDescriptor::sync_data(&mut self.fs, fd)
    }

    fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<sync::DescriptorFlags> {
        sync::HostDescriptor::get_flags(&mut self.fs, fd)
    }

    fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<sync::DescriptorType> {
        sync::HostDescriptor::get_type(&mut self.fs, fd)
    }

    fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atim: sync::NewTimestamp,
        mtim: sync::NewTimestamp,
    ) -> FsResult<()> {
        sync::HostDescriptor::set_times(&mut self.fs, fd, atim, mtim)
    }

    fn read(
        &mut self,
        fd: Resource<Descriptor>,
        len: sync::Filesize,
        offset: sync::Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        sync::HostDescriptor::read(&mut self.fs, fd, len, offset)
    }

    fn read_directory(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<sync::DirectoryEntryStream>> {
        sync::HostDescriptor::read_directory(&mut self.fs, fd)
    }

    fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        sync::HostDescriptor::sync(&mut self.fs, fd)
    }

    fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<sync::DescriptorStat> {
        sync::HostDescriptor::stat(&mut self.fs, fd)
    }

    fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: sync::PathFlags,
        path: String,
    ) -> FsResult<sync::DescriptorStat> {
        sync::HostDescriptor::stat_at(&mut self.fs, fd, path_flags, path)
    }

    fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: sync::PathFlags,
        path: String,
        atim: sync::NewTimestamp,
        mtim: sync::NewTimestamp,
    ) -> FsResult<()> {
        sync::HostDescriptor::set_times_at(&mut self.fs, fd, path_flags, path, atim, mtim)
    }

    fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        sync::HostDescriptor::readlink_at(&mut self.fs, fd, path)
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: sync::Filesize,
    ) -> FsResult<Resource<streams::InputStream>> {
        sync::HostDescriptor::read_via_stream(&mut self.fs, fd, offset)
    }

    fn is_same_object(&mut self, a: Resource<Descriptor>, b: Resource<Descriptor>) -> wasmtime::Result<bool> {
        sync::HostDescriptor::is_same_object(&mut self.fs, a, b)
    }

    fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<sync::MetadataHashValue> {
        sync::HostDescriptor::metadata_hash(&mut self.fs, fd)
    }

    fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: sync::PathFlags,
        path: String,
    ) -> FsResult<sync::MetadataHashValue> {
        sync::HostDescriptor::metadata_hash_at(&mut self.fs, fd, path_flags, path)
    }
}

mod quota;
#[cfg(test)]
mod tests;
