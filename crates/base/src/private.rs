//! Private per-user files and directories: what toolhost writes (compiled
//! code, keys, state, the audit trail, the memory store) is readable by its
//! user only. Directories are 0700 and must be owned by the effective user;
//! files are created 0600.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a directory cannot be used as a private directory.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// Creating or inspecting it failed.
    #[error("{path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// It is a symbolic link (which another user could point anywhere).
    #[error("{path} is a symbolic link; toolhost keeps private data only in a real directory")]
    Symlink {
        /// The directory.
        path: PathBuf,
    },
    /// It exists but is not a directory.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// Others may write into it (a shared directory such as /tmp).
    #[error("{path} is writable by other users (mode {mode:o}); refusing to keep private data there")]
    SharedWritable {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Another user owns it, so they could change what is in it.
    #[error("{path} is owned by uid {owner}, not by this user (uid {me}); refusing to keep private data there")]
    NotOwned {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective user.
        me: u32,
    },
}

/// The effective user id.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Creates `path` (and missing parents) with mode 0700, then checks that it
/// is a real directory owned by the effective user. A directory of ours that
/// others can only read or enter is tightened to 0700 (with a warning); one
/// others can write into, or owned by someone else, is refused.
pub fn ensure_private_dir(path: &Path) -> Result<(), PrivateDirError> {
    let io_err = |source| PrivateDirError::Io { path: path.to_path_buf(), source };
    DirBuilder::new().recursive(true).mode(0o700).create(path).map_err(io_err)?;
    let md = std::fs::symlink_metadata(path).map_err(io_err)?;
    if md.file_type().is_symlink() {
        return Err(PrivateDirError::Symlink { path: path.to_path_buf() });
    }
    if !md.is_dir() {
        return Err(PrivateDirError::NotADirectory { path: path.to_path_buf() });
    }
    let me = effective_uid();
    if md.uid() != me {
        return Err(PrivateDirError::NotOwned { path: path.to_path_buf(), owner: md.uid(), me });
    }
    if md.mode() & 0o022 != 0 {
        // Never chmod a shared directory (as root, /tmp is "ours").
        return Err(PrivateDirError::SharedWritable { path: path.to_path_buf(), mode: md.mode() & 0o7777 });
    }
    if md.mode() & 0o077 != 0 {
        tracing::warn!(dir = %path.display(), mode = format!("{:o}", md.mode() & 0o777), "tightening to 0700");
        std::fs::set_permissions(path, Permissions::from_mode(0o700)).map_err(io_err)?;
    }
    Ok(())
}

/// Why someone other than this user (or root) could have written a file
/// or directory with metadata `md`, if they could: another owner, or
/// write permission for group or others (a sticky directory, such as
/// `/tmp`, lets no one replace another's file, so its bits pass).
pub fn writable_by_others(md: &std::fs::Metadata) -> Option<String> {
    let me = effective_uid();
    if md.uid() != me && md.uid() != 0 {
        return Some(format!("another user (its owner, uid {})", md.uid()));
    }
    let sticky_dir = md.is_dir() && md.mode() & 0o1000 != 0;
    (md.mode() & 0o022 != 0 && !sticky_dir).then(|| format!("other users (mode {:04o})", md.mode() & 0o7777))
}

/// Reads a file this host obeys (its config, a trusted key, the lock
/// file), at most `max` bytes, refusing one another user could have
/// written: the file is checked on the open descriptor (so a swap between
/// the check and the read cannot pass), then the directories holding it (as
/// named, and where a symlink leads), since whoever can write a directory
/// can replace what is in it. The errors say why, not which file (the
/// caller names it).
pub fn read_obeyed(path: &Path, max: usize) -> io::Result<String> {
    let refused = |what: String| io::Error::new(io::ErrorKind::PermissionDenied, what);
    let (f, md) = open_nonblocking(path, Symlinks::Follow)?;
    if !md.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    if let Some(who) = writable_by_others(&md) {
        return Err(refused(format!(
            "can be written by {who}: whoever writes it controls this host; make it yours and `chmod go-w` it"
        )));
    }
    let mut dirs = vec![path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()];
    if let Some(real) = std::fs::canonicalize(path).ok().and_then(|p| p.parent().map(Path::to_path_buf))
        && std::fs::canonicalize(&dirs[0]).ok().as_ref() != Some(&real)
    {
        dirs.push(real);
    }
    for dir in dirs {
        let dmd = std::fs::metadata(&dir)?;
        if let Some(who) = writable_by_others(&dmd) {
            return Err(refused(format!(
                "its directory {} can be written by {who}, who could replace it; `chmod go-w` the directory or move the file",
                dir.display()
            )));
        }
    }
    let bytes = read_limited(&f, &md, max).map_err(|e| match e {
        LimitedReadError::TooLarge { .. } => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        LimitedReadError::Io(e) => e,
    })?;
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// Whether [`open_nonblocking`] follows a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// Opens what a link leads to.
    Follow,
    /// Refuses a link as the last component (`ELOOP`).
    Refuse,
}

/// Opens `path` for reading, never blocking on it (`O_NONBLOCK`: a FIFO
/// or a device is opened without waiting for a writer) nor making it the
/// controlling terminal (`O_NOCTTY`), and returns it with its metadata,
/// taken on the open descriptor: what the caller checks (a regular file,
/// its owner, its size) is what it then reads.
pub fn open_nonblocking(path: &Path, symlinks: Symlinks) -> io::Result<(std::fs::File, std::fs::Metadata)> {
    let mut flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    if symlinks == Symlinks::Refuse {
        flags |= rustix::fs::OFlags::NOFOLLOW;
    }
    let f = OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(path)?;
    let md = f.metadata()?;
    Ok((f, md))
}

/// Why [`read_limited`] read nothing.
#[derive(Debug, thiserror::Error)]
pub enum LimitedReadError {
    /// The file holds more than the limit.
    #[error("larger than {limit} bytes")]
    TooLarge {
        /// Its size as its metadata gave it, or (when it grew since) the
        /// bytes read before the read stopped: at most `limit + 1`.
        size: u64,
        /// The limit, in bytes.
        limit: usize,
    },
    /// Reading failed.
    #[error("{0}")]
    Io(#[source] io::Error),
}

/// Reads `file` (whose metadata is `md`, as [`open_nonblocking`] returns
/// it) to its end, at most `limit` bytes: a file larger by its metadata is
/// refused before anything is read, and one that grew since is refused
/// once `limit + 1` bytes are read, never read whole.
pub fn read_limited(file: &std::fs::File, md: &std::fs::Metadata, limit: usize) -> Result<Vec<u8>, LimitedReadError> {
    if md.len() > limit as u64 {
        return Err(LimitedReadError::TooLarge { size: md.len(), limit });
    }
    let mut bytes = Vec::with_capacity(md.len() as usize);
    file.take(limit as u64 + 1).read_to_end(&mut bytes).map_err(LimitedReadError::Io)?;
    if bytes.len() > limit {
        return Err(LimitedReadError::TooLarge { size: bytes.len() as u64, limit });
    }
    Ok(bytes)
}

/// Why a state file of ours was not read.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// It is not a file this user wrote privately: a symbolic link, not a
    /// regular file, another user's, open to others, or too large.
    #[error("{0}")]
    Refused(String),
    /// Reading it failed.
    #[error("{0}")]
    Io(#[source] io::Error),
}

/// Reads a state file this host wrote with [`write_private`] (its runtime
/// changes, measurements, calibration, stored logins, admin endpoint
/// records, keys), at most `max` bytes; `None` when there is none. The one
/// policy for all of them, checked on the open descriptor: a symbolic link
/// is never followed, and the file must be a regular file owned by this
/// user that no one else may read or write (mode 0600 or tighter). The
/// errors say why, not which file (the caller names it).
pub fn read_state(path: &Path, max: usize) -> Result<Option<Vec<u8>>, StateFileError> {
    Ok(open_state(path, max)?.map(|(_, bytes)| bytes))
}

/// [`read_state`], with the file still open (to touch it, say).
pub fn open_state(path: &Path, max: usize) -> Result<Option<(std::fs::File, Vec<u8>)>, StateFileError> {
    let (f, md) = match open_nonblocking(path, Symlinks::Refuse) {
        Ok(opened) => opened,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // ELOOP: the last component is a symbolic link.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(StateFileError::Refused("a symbolic link, which is never followed".into()));
        }
        Err(e) => return Err(StateFileError::Io(e)),
    };
    if !md.is_file() {
        return Err(StateFileError::Refused("not a regular file".into()));
    }
    if md.uid() != effective_uid() || md.mode() & 0o077 != 0 {
        return Err(StateFileError::Refused(format!(
            "must be owned by this user with mode 0600 (it is uid {}, mode {:o})",
            md.uid(),
            md.mode() & 0o777
        )));
    }
    let bytes = read_limited(&f, &md, max).map_err(|e| match e {
        LimitedReadError::TooLarge { .. } => StateFileError::Refused(e.to_string()),
        LimitedReadError::Io(e) => StateFileError::Io(e),
    })?;
    Ok(Some((f, bytes)))
}

/// Creates `path` and missing parents with mode 0700 (existing directories
/// are left as they are: an operator may choose where logs go).
pub fn create_dirs(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Creates `path` empty with mode 0600 if it does not exist, and tightens an
/// existing file of ours that others can read. For files opened by other
/// libraries (SQLite copies the database's mode to its journal files).
pub fn touch_private(path: &Path) -> io::Result<()> {
    open_private_append(path).map(drop)
}

/// Opens `path` for appending, creating it 0600 if missing (an existing file
/// of ours is tightened to 0600). Only a regular file is opened: a symlink
/// is refused, and a FIFO or device is refused without blocking.
pub fn open_private_append(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let f =
        OpenOptions::new().create(true).append(true).mode(0o600).custom_flags(flags.bits() as i32).open(path).map_err(
            |e| match e.raw_os_error() {
                Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is a symbolic link; give the file itself", path.display()),
                ),
                // A FIFO with no reader, opened non-blocking for writing.
                Some(code) if code == rustix::io::Errno::NXIO.raw_os_error() => {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a regular file", path.display()))
                }
                _ => e,
            },
        )?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a regular file", path.display())));
    }
    tighten(&f)?;
    Ok(f)
}

/// An exclusive advisory lock (`flock`) on a private lock file: released
/// when dropped, or when the process ends however it ends.
#[derive(Debug)]
pub struct FileLock {
    _file: std::fs::File,
}

/// Takes the exclusive lock on `path` (created 0600 if missing, opened as
/// [`open_private_append`] opens it), waiting while another process, or
/// another open of it in this one, holds it. For a read-modify-write of a
/// state file: held from the read to the rename of [`write_private`], so
/// writers take turns and none loses another's change. Readers need no
/// lock: the rename replaces the file whole.
pub fn lock_exclusive(path: &Path) -> io::Result<FileLock> {
    let file = open_private_append(path)?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(FileLock { _file: file }),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Tightens an open file of ours to 0600 if others can read it.
pub fn tighten(f: &std::fs::File) -> io::Result<()> {
    let md = f.metadata()?;
    if md.mode() & 0o077 != 0 {
        f.set_permissions(Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically (a 0600 temporary file in the same
/// directory, synced, then renamed over `path`).
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().permissions(Permissions::from_mode(0o600)).tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Reads a 32-byte secret key from `path`, creating it (random, 0600) if
/// missing. A key file that others can read, that is not ours or that has
/// the wrong size is an error, not silently replaced.
pub fn load_or_create_key(path: &Path) -> io::Result<[u8; 32]> {
    // Read up to 64 bytes: any other length than 32 is "not a key".
    match read_state(path, 64) {
        Ok(Some(bytes)) => <[u8; 32]>::try_from(bytes.as_slice())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{}: not a 32-byte key", path.display()))),
        Err(StateFileError::Refused(why)) => {
            Err(io::Error::other(format!("{}: a key file must be private to this user: {why}", path.display())))
        }
        Err(StateFileError::Io(e)) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        Ok(None) => {
            let mut key = [0u8; 32];
            getrandom_key(&mut key)?;
            // Written whole to a private temporary file, then linked into
            // place, which fails if the name exists: a process reading the
            // key never sees it half written, and if another one created it
            // meanwhile, theirs is used.
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let mut tmp = tempfile::Builder::new().prefix(".key-").tempfile_in(dir)?;
            tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
            tmp.write_all(&key)?;
            tmp.as_file().sync_all()?;
            match std::fs::hard_link(tmp.path(), path) {
                Ok(()) => Ok(key),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => load_or_create_key(path),
                Err(e) => Err(e),
            }
        }
    }
}

fn getrandom_key(key: &mut [u8; 32]) -> io::Result<()> {
    let mut f = std::fs::File::open("/dev/urandom")?;
    f.read_exact(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the host obeys is read only when no one else could have
    /// written it: the file, its directory, or where a symlink leads.
    #[test]
    fn an_obeyed_file_others_could_write_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let mine = t.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        let file = mine.join("toolhost.yaml");
        std::fs::write(&file, "npcs: []\n").unwrap();
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_obeyed(&file, 1024).unwrap(), "npcs: []\n");
        assert!(read_obeyed(&file, 4).unwrap_err().to_string().contains("larger than 4 bytes"));
        std::fs::set_permissions(&file, Permissions::from_mode(0o666)).unwrap();
        let e = read_obeyed(&file, 1024).unwrap_err();
        assert!(e.to_string().contains("can be written by other users (mode 0666)"), "{e}");
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        // A directory anyone may write: the file could be replaced.
        std::fs::set_permissions(&mine, Permissions::from_mode(0o777)).unwrap();
        let e = read_obeyed(&file, 1024).unwrap_err();
        assert!(e.to_string().contains("its directory") && e.to_string().contains("other users"), "{e}");
        // A sticky one (as /tmp) lets no one replace another's file.
        std::fs::set_permissions(&mine, Permissions::from_mode(0o1777)).unwrap();
        read_obeyed(&file, 1024).unwrap();
        // A link from a private directory into a shared one.
        std::fs::set_permissions(&mine, Permissions::from_mode(0o777)).unwrap();
        let private = t.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&file, private.join("toolhost.yaml")).unwrap();
        let e = read_obeyed(&private.join("toolhost.yaml"), 1024).unwrap_err();
        assert!(e.to_string().contains(&mine.display().to_string()), "{e}");
        std::fs::set_permissions(&mine, Permissions::from_mode(0o700)).unwrap();
        read_obeyed(&private.join("toolhost.yaml"), 1024).unwrap();
    }

    #[test]
    fn a_private_dir_is_0700_and_an_open_one_of_ours_is_tightened() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        ensure_private_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&d, Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_dir_others_can_write_is_refused_and_left_alone() {
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), Permissions::from_mode(0o1777)).unwrap();
        assert!(matches!(ensure_private_dir(t.path()), Err(PrivateDirError::SharedWritable { .. })));
        assert_eq!(std::fs::metadata(t.path()).unwrap().mode() & 0o7777, 0o1777);
    }

    #[test]
    fn a_symlinked_dir_is_refused() {
        let t = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(t.path(), t.path().join("link")).unwrap();
        assert!(matches!(ensure_private_dir(&t.path().join("link")), Err(PrivateDirError::Symlink { .. })));
    }

    #[test]
    fn a_state_file_is_read_only_when_it_is_a_private_regular_file_of_ours() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("state.json");
        assert!(read_state(&p, 16).unwrap().is_none(), "none yet");
        write_private(&p, b"{}").unwrap();
        assert_eq!(read_state(&p, 16).unwrap().unwrap(), b"{}");
        // Open to others: refused, whether they may read or write it.
        for mode in [0o640, 0o604, 0o620] {
            std::fs::set_permissions(&p, Permissions::from_mode(mode)).unwrap();
            let err = read_state(&p, 16).unwrap_err();
            assert!(matches!(&err, StateFileError::Refused(why) if why.contains("mode 0600")), "{mode:o}: {err}");
        }
        std::fs::set_permissions(&p, Permissions::from_mode(0o600)).unwrap();
        // A symbolic link, even to a private file of ours, is not followed.
        std::os::unix::fs::symlink(&p, t.path().join("link")).unwrap();
        let err = read_state(&t.path().join("link"), 16).unwrap_err();
        assert!(matches!(&err, StateFileError::Refused(why) if why.contains("symbolic link")), "{err}");
        // Neither is a directory or a FIFO read (a FIFO would block).
        assert!(matches!(read_state(t.path(), 16), Err(StateFileError::Refused(_))));
        let fifo = t.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        assert!(matches!(read_state(&fifo, 16), Err(StateFileError::Refused(_))));
        // Larger than asked for: refused, not cut.
        write_private(&p, &[b'x'; 17]).unwrap();
        let err = read_state(&p, 16).unwrap_err();
        assert!(matches!(&err, StateFileError::Refused(why) if why.contains("larger than 16")), "{err}");
    }

    #[test]
    fn keys_are_created_0600_reused_and_checked() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("key");
        let k = load_or_create_key(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(load_or_create_key(&p).unwrap(), k);
        std::fs::set_permissions(&p, Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_create_key(&p).unwrap_err().to_string().contains("mode 0600"));
        std::fs::write(t.path().join("short"), b"abc").unwrap();
        std::fs::set_permissions(t.path().join("short"), Permissions::from_mode(0o600)).unwrap();
        assert!(load_or_create_key(&t.path().join("short")).is_err());
    }

    #[test]
    fn an_append_file_must_be_a_regular_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let e = open_private_append(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "refused, without blocking: {e}");
        let target = dir.path().join("target");
        std::fs::write(&target, "x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open_private_append(&link).unwrap_err().to_string().contains("symbolic link"));
        assert!(open_private_append(&dir.path().join("new")).is_ok());
    }
}
