//! The lock file: digests pinned by plugin name.

use super::PackageError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Digests pinned by plugin name (`toolhost.lock`, YAML).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// Plugin name -> pinned entry.
    #[serde(default)]
    pub plugins: BTreeMap<String, LockEntry>,
}

/// One pinned plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    /// sha256 of the file's component bytes, hex.
    pub sha256: String,
    /// Version from its manifest, when signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The registry reference it is loaded from (`oci://...`), for plugins
    /// from a registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The manifest digest `source` resolved to: a registry plugin is pulled
    /// at this digest only, and refused when the registry no longer serves
    /// it or serves other bytes for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl LockFile {
    /// Reads a lock file.
    pub fn read(path: &Path) -> Result<LockFile, PackageError> {
        // Whoever could write the lock file could pin their own digests.
        let text = crate::runtime::private::read_obeyed(path, 16 << 20)
            .map_err(|e| PackageError::Malformed(format!("the lock file {}: {e}", path.display())))?;
        serde_yaml_ng::from_str(&text)
            .map_err(|e| PackageError::Malformed(format!("lock file {}: {e}", path.display())))
    }

    /// Writes it (atomically).
    pub fn write(&self, path: &Path) -> Result<(), PackageError> {
        let text = serde_yaml_ng::to_string(self).map_err(|e| PackageError::Malformed(e.to_string()))?;
        let tmp = path.with_extension("lock.tmp");
        std::fs::write(
            &tmp,
            format!("# Plugin digests pinned by `toolhost lock`. A plugin whose digest differs is refused.\n{text}"),
        )
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| PackageError::Malformed(format!("writing {}: {e}", path.display())))
    }
}
