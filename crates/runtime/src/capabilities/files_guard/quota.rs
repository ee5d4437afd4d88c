//! The quotas of read-write grants: the ledger of each granted directory
//! across calls, and the metered output stream of a file in one.

use super::*;

// ---------------------------------------------------------------------------
// The ledger of one directory, across calls
// ---------------------------------------------------------------------------

/// What a granted directory holds; one per directory per process.
pub(crate) struct Tree {
    pub(super) usage: Mutex<Usage>,
}

#[derive(Debug, Default)]
pub(super) struct Usage {
    pub(super) bytes: u64,
    pub(super) entries: u64,
    /// Calls using the tree now.
    pub(super) active: usize,
    /// The ledger may over-count: rescan when next alone.
    pub(super) dirty: bool,
    pub(super) scanned: Option<Instant>,
}

impl Usage {
    /// Applies a file's change of size from `before` to `after`.
    pub(super) fn resized(&mut self, before: u64, after: u64) {
        if after >= before {
            self.bytes = self.bytes.saturating_add(after - before);
        } else {
            self.bytes = self.bytes.saturating_sub(before - after);
        }
    }
}

impl Tree {
    /// The ledger of `root` (canonical), created on first use.
    pub(super) fn of(root: &Path) -> Arc<Tree> {
        static TREES: Mutex<Option<HashMap<PathBuf, Arc<Tree>>>> = Mutex::new(None);
        let mut trees = TREES.lock().unwrap_or_else(PoisonError::into_inner);
        let trees = trees.get_or_insert_with(HashMap::new);
        if let Some(tree) = trees.get(root) {
            return tree.clone();
        }
        trees
            .entry(root.to_path_buf())
            .or_insert_with(|| Arc::new(Tree { usage: Mutex::new(Usage::default()) }))
            .clone()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call starts using the tree (rescanning it first when alone and the
    /// ledger may be off); it stops when the token drops.
    pub(super) fn begin(self: &Arc<Self>, q: &Quota) -> Active {
        let mut u = self.lock();
        let stale = u.dirty || u.scanned.is_none_or(|t| t.elapsed() >= RESCAN_AFTER);
        if u.active == 0 && stale {
            match scan(&q.scan_root, q.max_bytes, q.max_files) {
                Some((bytes, entries)) => {
                    (u.bytes, u.entries, u.dirty) = (bytes, entries, false);
                }
                // Unreadable, or already past this grant's limits: full for
                // everyone until a later rescan says otherwise.
                None => (u.bytes, u.entries, u.dirty) = (u64::MAX, u64::MAX, true),
            }
            u.scanned = Some(Instant::now());
        }
        u.active += 1;
        Active(self.clone())
    }
}

/// A call using a tree (see [`Tree::begin`]).
pub(super) struct Active(Arc<Tree>);

impl Drop for Active {
    fn drop(&mut self) {
        let mut u = self.0.lock();
        u.active = u.active.saturating_sub(1);
    }
}

/// Sum of regular files' sizes and number of entries under `root`, following
/// no symlinks; `None` if `root` cannot be read or the walk passes either
/// limit (so it costs at most `max_files + 1` stats).
pub(super) fn scan(root: &Path, max_bytes: u64, max_files: u64) -> Option<(u64, u64)> {
    let (mut bytes, mut entries) = (0u64, 0u64);
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let list = match std::fs::read_dir(&dir) {
            Ok(list) => list,
            Err(_) if dir == root => return None,
            Err(_) => continue,
        };
        for entry in list.flatten() {
            entries += 1;
            // `DirEntry::metadata` does not follow symlinks.
            if let Ok(m) = entry.metadata() {
                if m.is_dir() {
                    stack.push(entry.path());
                } else if m.is_file() {
                    bytes = bytes.saturating_add(m.len());
                }
            }
            if bytes > max_bytes || entries > max_files {
                return None;
            }
        }
    }
    Some((bytes, entries))
}

/// One grant's limits on its directory's ledger.
#[derive(Clone)]
pub(super) struct Quota {
    pub(super) tree: Arc<Tree>,
    /// Where the tree is scanned: the granted directory's held handle.
    pub(super) scan_root: PathBuf,
    pub(super) max_bytes: u64,
    pub(super) max_files: u64,
}

impl Quota {
    /// Runs `op` on the regular file `file` under the tree's lock, giving it
    /// the file's size and the bytes still free; the ledger then follows
    /// the file's size.
    pub(super) fn resize<T>(&self, file: &std::fs::File, op: impl FnOnce(u64, u64) -> io::Result<T>) -> io::Result<T> {
        let mut u = self.tree.lock();
        let before = file.metadata()?.len();
        let r = op(before, self.max_bytes.saturating_sub(u.bytes));
        match file.metadata() {
            Ok(m) => u.resized(before, m.len()),
            Err(_) => (u.bytes, u.dirty) = (u64::MAX, true),
        }
        r
    }

    /// Runs `op` (which creates one name on success) if an entry is free.
    pub(super) fn create<T>(&self, op: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
        let mut u = self.tree.lock();
        if u.entries >= self.max_files {
            return Err(ErrorCode::Quota.into());
        }
        let r = op()?;
        u.entries += 1;
        Ok(r)
    }
}

pub(super) fn nospc() -> io::Error {
    io::Error::from(rustix::io::Errno::NOSPC)
}

// ---------------------------------------------------------------------------
// The metered output stream
// ---------------------------------------------------------------------------

/// An `output-stream` of a file in a read-write grant: each write is checked
/// and written synchronously under the tree's lock (nothing is ever in
/// flight outside a host call), at `position`, or at the end when `None`.
pub(super) struct QuotaStream {
    pub(super) file: Arc<std::fs::File>,
    pub(super) quota: Quota,
    pub(super) position: Option<u64>,
    pub(super) closed: bool,
}

impl QuotaStream {
    /// Bytes that may be written at `position` (the end when `None`).
    pub(super) fn allowance(file: &std::fs::File, quota: &Quota, position: Option<u64>) -> io::Result<u64> {
        let u = quota.tree.lock();
        let size = file.metadata()?.len();
        let room = quota.max_bytes.saturating_sub(u.bytes);
        Ok(size.saturating_add(room).saturating_sub(position.unwrap_or(size)))
    }

    fn failed(&mut self, e: io::Error) -> StreamError {
        self.closed = true;
        StreamError::LastOperationFailed(e.into())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for QuotaStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        if self.closed {
            return Err(StreamError::Closed);
        }
        let (file, position, n) = (&self.file, self.position, bytes.len() as u64);
        let r = self.quota.resize(file, |size, room| {
            let at = position.unwrap_or(size);
            if n > 0 && at.saturating_add(n) > size.saturating_add(room) {
                return Err(nospc());
            }
            file.write_all_at(&bytes, at)
        });
        match r {
            Ok(()) => {
                if let Some(p) = &mut self.position {
                    *p += n;
                }
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn flush(&mut self) -> StreamResult<()> {
        match self.closed {
            true => Err(StreamError::Closed),
            false => Ok(()),
        }
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        if self.closed {
            return Err(StreamError::Closed);
        }
        let allowed = QuotaStream::allowance(&self.file, &self.quota, self.position).map_err(|e| self.failed(e))?;
        // When nothing fits, offer a chunk anyway and let `write` fail with
        // ENOSPC: a flush (which waits for a non-zero offer) still succeeds.
        Ok(match allowed {
            0 => STREAM_CHUNK,
            n => n.min(STREAM_CHUNK),
        } as usize)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for QuotaStream {
    async fn ready(&mut self) {}
}
