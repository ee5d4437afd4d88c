//! The fleet's key (`cluster.secret_key_file`) and the tags it puts on
//! each change in the log and each heartbeat.

/// A heartbeat's tag: over what `cluster status` and the CLI's "N of M
/// hosts" read of it (not its time, which the database writes).
pub(super) fn beat_tag(
    key: &[u8; 32],
    host_id: &str,
    instance: &str,
    version: &str,
    applied: i64,
    plugins: &str,
) -> String {
    let applied = applied.to_string();
    hex::encode(toolhost_base::seal::tag(
        key,
        &[
            b"heartbeat\n",
            host_id.as_bytes(),
            b"\n",
            instance.as_bytes(),
            b"\n",
            version.as_bytes(),
            b"\n",
            applied.as_bytes(),
            b"\n",
            plugins.as_bytes(),
        ],
    ))
}

impl Key {
    /// Whether a heartbeat row's `tag` checks.
    pub(super) fn checks_beat(
        &self,
        host_id: &str,
        instance: &str,
        version: &str,
        applied: i64,
        plugins: &str,
        tag: &str,
    ) -> bool {
        toolhost_base::seal::same_secret(
            beat_tag(&self.0, host_id, instance, version, applied, plugins).as_bytes(),
            tag.as_bytes(),
        )
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// The fleet's key, from `cluster.secret_key_file`.
pub struct Key(pub(super) [u8; 32]);

impl Key {
    /// Reads the key file: a private file (this user's, not open to
    /// others) of at least 32 bytes.
    pub fn read(path: &std::path::Path) -> Result<Key, KeyError> {
        use sha2::Digest as _;
        let path = path.to_path_buf();
        match toolhost_base::private::read_state(&path, 4096) {
            Ok(Some(bytes)) if bytes.len() >= 32 => Ok(Key(sha2::Sha256::digest(&bytes).into())),
            Ok(Some(bytes)) => Err(KeyError::Short { path, bytes: bytes.len() }),
            Ok(None) => Err(KeyError::Missing { path }),
            Err(source) => Err(KeyError::Read { path, source }),
        }
    }
}

/// Why the fleet's key file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Fewer bytes than a key needs.
    #[error("{}: {bytes} bytes; a fleet key has at least 32 random bytes", path.display())]
    Short {
        /// The key file.
        path: std::path::PathBuf,
        /// Its length.
        bytes: usize,
    },
    /// No file there.
    #[error("{p}: no such file (make one: openssl rand -out {p} 32 && chmod 600 {p})", p = path.display())]
    Missing {
        /// The key file.
        path: std::path::PathBuf,
    },
    /// Not read: not a private file of this user's, or unreadable.
    #[error("{}: {source}", path.display())]
    Read {
        /// The key file.
        path: std::path::PathBuf,
        /// Why.
        source: toolhost_base::private::StateFileError,
    },
}

/// A change's tag: over its place in the log, its origin and its text, so
/// that a valid row copied to another place (a replay of an old change, a
/// reordering) fails the check.
pub(super) fn tag(key: &[u8; 32], seq: i64, host_id: &str, text: &str) -> String {
    let seq = seq.to_string();
    hex::encode(toolhost_base::seal::tag(key, &[seq.as_bytes(), b"\n", host_id.as_bytes(), b"\n", text.as_bytes()]))
}

impl Key {
    /// Whether `tagged` is the tag of the change `text` from `origin` at
    /// `seq` of the log.
    pub(super) fn checks(&self, seq: i64, origin: &str, text: &str, tagged: &str) -> bool {
        toolhost_base::seal::same_secret(tag(&self.0, seq, origin, text).as_bytes(), tagged.as_bytes())
    }
}
