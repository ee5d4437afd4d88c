//! The on-disk cache of compiled components.
//!
//! A compiled artifact only fits the engine configuration and wasmtime version
//! that produced it, so entries live under a directory named after the
//! engine's compatibility hash, and are named by the component's sha256:
//! `<dir>/<engine-hash>/<sha256>.cwasm`. Writes go to a temporary file first
//! and are renamed into place, so a crash never leaves a torn entry.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled components are kept.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    /// A cache rooted at `root`, specialised for `engine`.
    pub fn new(root: &Path, engine: &Engine) -> CompileCache {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        CompileCache { dir: root.join(format!("{:016x}", h.finish())) }
    }

    /// Directory holding this engine's entries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.cwasm"))
    }

    /// Loads the compiled component for `digest`, if cached and usable. A
    /// corrupt or incompatible entry is removed and reported as a miss.
    pub fn load(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest);
        if !path.exists() {
            return None;
        }
        // SAFETY: entries are written only by `store` below, from
        // `Engine::precompile_component` output, into the operator's cache
        // directory, atomically (temp file + rename). wasmtime additionally
        // checks the artifact header and engine compatibility on load. The
        // cache directory must be as trusted as the host binary itself.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize_file(engine, &path) };
        match loaded {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "discarding unusable compile cache entry");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores a serialized compiled component. Failures are logged, not
    /// fatal: the cache only saves time.
    pub fn store(&self, digest: &str, compiled: &[u8]) {
        if let Err(e) = self.try_store(digest, compiled) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not write compile cache entry");
        }
    }

    fn try_store(&self, digest: &str, compiled: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(compiled)?;
        tmp.as_file().sync_all()?;
        tmp.persist(self.path(digest)).map_err(|e| e.error)?;
        Ok(())
    }
}
