//! The on-disk cache of compiled components.
//!
//! A compiled artifact is native code: loading one is running it. So the
//! cache trusts nothing it did not write itself:
//! - its directories are private (0700, owned by this user; see
//!   [`crate::private`]), never a shared temporary directory;
//! - every entry ends with an HMAC-SHA256 tag, keyed by a per-cache secret
//!   (`<root>/key`, 0600, readable only by this user),
//!   over the engine's compatibility hash, the component's sha256 and the
//!   artifact. The tag is checked before `deserialize`; an entry that fails
//!   (corrupt, truncated, or another component's code put in its place) is
//!   removed and the component recompiled, with a warning;
//! - the cache is bounded: past `max_bytes`, the least recently used entries
//!   are evicted.
//!
//! Layout: `<root>/<engine-hash>/<sha256>.cwasm`. Writes go to a temporary
//! file first and are renamed into place, so a crash never leaves a torn
//! entry.

use crate::private::{PrivateDirError, ensure_private_dir, write_private};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Length of the tag that ends every entry.
const TAG_LEN: usize = 32;

/// Default bound on the cache's size on disk: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Where the cache lives and how it authenticates its entries.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// The cache's root directory (created private if missing).
    pub root: PathBuf,
    /// The 32-byte secret entries are authenticated with.
    pub key: [u8; 32],
    /// Size bound on disk, across all engine versions under `root`.
    pub max_bytes: u64,
}

impl CacheConfig {
    /// The cache under `root` with its key in `<root>/key` (created random and
    /// 0600 if missing). `root` is made private first, so only this user can
    /// read the key or write an entry.
    pub fn in_dir(root: &Path, max_bytes: u64) -> Result<CacheConfig, CacheError> {
        ensure_private_dir(root)?;
        let key = crate::private::load_or_create_key(&root.join("key")).map_err(CacheError::Key)?;
        Ok(CacheConfig { root: root.to_path_buf(), key, max_bytes })
    }
}

/// Why the cache cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The directory is not private to this user.
    #[error("compile cache: {0}")]
    Dir(#[from] PrivateDirError),
    /// The key could not be read or created.
    #[error("compile cache key: {0}")]
    Key(std::io::Error),
}

/// Where compiled components are kept.
#[derive(Debug)]
pub struct CompileCache {
    root: PathBuf,
    dir: PathBuf,
    engine_hash: String,
    key: [u8; 32],
    max_bytes: u64,
    /// Bytes written since the last size check, so eviction scans the
    /// directory only once enough has been added.
    written: AtomicU64,
}

impl CompileCache {
    /// Opens the cache for `engine`: checks (or creates) the private
    /// directories. Entries for other engine versions stay until evicted.
    pub fn open(config: CacheConfig, engine: &Engine) -> Result<CompileCache, CacheError> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        let engine_hash = format!("{:016x}", h.finish());
        ensure_private_dir(&config.root)?;
        let dir = config.root.join(&engine_hash);
        ensure_private_dir(&dir)?;
        Ok(CompileCache {
            root: config.root,
            dir,
            engine_hash,
            key: config.key,
            max_bytes: config.max_bytes,
            // Past any threshold: the first store of this process evicts, so
            // growth left by earlier processes is trimmed once.
            written: AtomicU64::new(u64::MAX / 2),
        })
    }

    /// Directory holding this engine's entries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry file for a component digest.
    pub fn entry_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.cwasm"))
    }

    /// What an entry's tag covers: the format, the engine, the component's
    /// digest and the compiled code.
    fn tagged<'a>(&'a self, digest: &'a str, artifact: &'a [u8]) -> [&'a [u8]; 6] {
        [b"toolhost-compile-cache-v1\0", self.engine_hash.as_bytes(), b"\0", digest.as_bytes(), b"\0", artifact]
    }

    /// Loads the compiled component for `digest`, if cached and authentic. An
    /// entry that is not (corrupt, substituted, written by someone else) is
    /// removed and reported as a miss, so the caller recompiles.
    pub fn load(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.entry_path(digest);
        let (file, bytes) = match read_entry(&path) {
            Ok(Some(entry)) => entry,
            Ok(None) => return None,
            Err(e) => return self.discard(&path, &format!("unreadable: {e}")),
        };
        if bytes.len() < TAG_LEN {
            return self.discard(&path, "truncated");
        }
        let (artifact, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        if !toolhost_base::seal::verify(&self.key, &self.tagged(digest, artifact), tag) {
            return self.discard(&path, "authentication failed (not written by this host for this component)");
        }
        // SAFETY: the artifact was written by `store` below from
        // `Engine::precompile_component` output for this very component
        // digest and engine: the HMAC tag, keyed by a secret only this user
        // can read, proves it. wasmtime also checks the header and the
        // engine's compatibility.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize(engine, artifact) };
        match loaded {
            Ok(c) => {
                // Recently used entries are evicted last (futimens on the
                // descriptor already open: allowed to the owner).
                let _ = file.set_modified(std::time::SystemTime::now());
                Some(c)
            }
            Err(e) => self.discard(&path, &format!("{e:#}")),
        }
    }

    fn discard(&self, path: &Path, why: &str) -> Option<Component> {
        tracing::warn!(path = %path.display(), why, "discarding compile cache entry; recompiling");
        let _ = std::fs::remove_file(path);
        None
    }

    /// Stores a serialized compiled component, tagged. Failures are logged,
    /// not fatal: the cache only saves time.
    pub fn store(&self, digest: &str, compiled: &[u8]) {
        let tag = toolhost_base::seal::tag(&self.key, &self.tagged(digest, compiled));
        let mut entry = Vec::with_capacity(compiled.len() + TAG_LEN);
        entry.extend_from_slice(compiled);
        entry.extend_from_slice(&tag);
        if let Err(e) = write_private(&self.entry_path(digest), &entry) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not write compile cache entry");
            return;
        }
        let written = self.written.fetch_add(entry.len() as u64, Ordering::Relaxed) + entry.len() as u64;
        if written >= self.max_bytes / 8 {
            self.written.store(0, Ordering::Relaxed);
            self.evict();
        }
    }

    /// Removes the entry for `digest`, if any (code superseded: the fast
    /// code once the optimized code is cached).
    pub fn remove(&self, digest: &str) {
        let _ = std::fs::remove_file(self.entry_path(digest));
    }

    /// Removes the least recently used entries (of every engine version)
    /// until the cache fits in `max_bytes`. Returns the bytes removed.
    pub fn evict(&self) -> u64 {
        let mut entries = Vec::new();
        let mut total = 0u64;
        for d in std::fs::read_dir(&self.root).into_iter().flatten().flatten() {
            for e in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                let Ok(md) = e.metadata() else { continue };
                if md.is_file() && e.path().extension().is_some_and(|x| x == "cwasm") {
                    total += md.len();
                    entries.push((md.modified().unwrap_or(std::time::UNIX_EPOCH), md.len(), e.path()));
                }
            }
        }
        entries.sort();
        let mut removed = 0;
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                tracing::debug!(path = %path.display(), "evicted compile cache entry");
                total -= len;
                removed += len;
            }
        }
        removed
    }
}

/// Reads an entry: a state file of ours (the one policy: no symbolic link,
/// a regular file this user owns, mode 0600), no larger than a compiled
/// component can reasonably be. `Ok(None)`: missing.
fn read_entry(path: &Path) -> Result<Option<(std::fs::File, Vec<u8>)>, crate::private::StateFileError> {
    const MAX_ENTRY: usize = 1 << 30;
    crate::private::open_state(path, MAX_ENTRY)
}
