//! Changes the operator made while the host served (`toolhost plugin
//! add/remove`, `toolhost server add/remove`, DM overrides (kept until
//! they expire) through the admin API),
//! remembered in the state directory and applied again at the next start,
//! until the operator undoes them.
//!
//! The record is `<state dir>/runtime-changes.json`: a 0600 file written
//! atomically, with an HMAC-SHA256 tag under a key kept beside it
//! (`runtime-changes.key`, 0600). A record that is not ours (another owner,
//! readable by others, a symbolic link), does not parse, or whose tag does
//! not match is refused with a warning and the host starts from its config
//! alone. Nothing in the record bypasses a check: a restored plugin is read
//! again through the trust policy and gets the config's grants; a restored
//! server is checked like one added by `toolhost server add`.
//!
//! A removed plugin whose file is still there (the plugins directory,
//! `plugins.files`) is remembered with the file's identity (device, inode,
//! size, modification time): it stays unloaded, at start and when the
//! plugins directory is watched, until the file changes or the operator
//! adds it again. A removed built-in stays removed until added again.

use crate::config::McpServerConfig;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The record's file name in the state directory.
pub const FILE: &str = "runtime-changes.json";
/// The HMAC key's file name in the state directory.
pub const KEY_FILE: &str = "runtime-changes.key";
/// The largest record read (a hand-made giant is refused, not parsed).
const MAX_BYTES: usize = 1 << 20;

/// Who a file is, cheaply (one `stat`, no read): a file that changed in
/// any way a plugin file can change has another identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Status-change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
}

impl FileStamp {
    /// The identity of the file at `path` now (`None`: not there).
    pub fn of(path: &Path) -> Option<FileStamp> {
        let md = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime_ns: i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec()),
            ctime_ns: i128::from(md.ctime()) * 1_000_000_000 + i128::from(md.ctime_nsec()),
        })
    }
}

/// A plugin the operator added at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddedPlugin {
    /// Plugin name.
    pub name: String,
    /// Absolute path of its file.
    pub path: PathBuf,
}

/// A plugin the operator removed at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemovedPlugin {
    /// Plugin name.
    pub name: String,
    /// The file it was loaded from, if any.
    pub path: Option<PathBuf>,
    /// That file's identity when it was removed: a changed file loads again.
    pub file: Option<FileStamp>,
}

/// What the record holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Changes {
    /// Plugins added at run time, in order.
    #[serde(default)]
    pub plugins_added: Vec<AddedPlugin>,
    /// Plugins removed at run time.
    #[serde(default)]
    pub plugins_removed: Vec<RemovedPlugin>,
    /// Servers added at run time, in order.
    #[serde(default)]
    pub servers_added: Vec<McpServerConfig>,
    /// Configured servers removed at run time.
    #[serde(default)]
    pub servers_removed: Vec<String>,
    /// DM overrides in force, each until it expires: a restart mid-game
    /// keeps them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<StoredOverride>,
}

/// A DM override (`toolhost override`, the DM's page) and when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredOverride {
    /// The agent.
    pub agent: String,
    /// The tier it works at meanwhile.
    pub tier: crate::budget::Tier,
    /// When it ends, in milliseconds since the Unix epoch.
    pub until_unix_ms: u64,
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The file: the changes and their tag.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sealed {
    version: u32,
    /// The changes, as the exact JSON text the tag covers.
    changes: String,
    /// HMAC-SHA256 of `changes`, hex.
    hmac: String,
}

/// Why the record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The record was refused.
    #[error("{path}: {reason}; ignoring the run-time changes it records (the host starts from its config)")]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Where a plugin or server came from, for listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Added at run time (and restored at start).
    Runtime,
    /// From the config (or the command line, the built-ins, the plugins directory).
    Config,
}

impl Source {
    /// `runtime` or `config`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Runtime => "runtime",
            Source::Config => "config",
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    changes: Changes,
    /// The file each loaded plugin came from.
    sources: HashMap<String, PathBuf>,
    plugins_dir: Option<PathBuf>,
}

/// The run-time changes of one host (see the module docs). A host built
/// without a state directory keeps them in memory only.
#[derive(Debug, Default)]
pub struct RuntimeChanges {
    /// The record and its key; `None`: not persisted.
    store: Option<(PathBuf, [u8; 32])>,
    inner: Mutex<Inner>,
    /// The fleet's control plane, when this host is in one.
    cluster: std::sync::OnceLock<std::sync::Arc<crate::cluster::Cluster>>,
}

impl RuntimeChanges {
    /// Changes kept in memory only.
    pub fn in_memory() -> RuntimeChanges {
        RuntimeChanges::default()
    }

    /// Opens the record in `state_dir` (a private directory). A refused
    /// record is reported in the second value and not used; the next change
    /// replaces it.
    pub fn open(state_dir: &Path) -> Result<(RuntimeChanges, Option<ChangesError>), ChangesError> {
        let key_path = state_dir.join(KEY_FILE);
        let key = crate::runtime::private::load_or_create_key(&key_path)
            .map_err(|source| ChangesError::Io { path: key_path, source })?;
        let path = state_dir.join(FILE);
        let (changes, refused) = match read(&path, &key) {
            Ok(c) => (c, None),
            Err(e) => (Changes::default(), Some(e)),
        };
        let inner = Inner { changes, ..Inner::default() };
        Ok((
            RuntimeChanges { store: Some((path, key)), inner: Mutex::new(inner), cluster: Default::default() },
            refused,
        ))
    }

    /// Puts this host in a fleet: each change made here from now on is
    /// also announced to the others ([`RuntimeChanges::announce`]).
    pub fn join(&self, cluster: std::sync::Arc<crate::cluster::Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// The fleet's control plane, when this host is in one.
    pub fn cluster(&self) -> Option<&std::sync::Arc<crate::cluster::Cluster>> {
        self.cluster.get()
    }

    /// Tells the fleet of a change made on this host (nothing outside a
    /// fleet, or while a change from the fleet is applied). Blocking. An
    /// error says that this host has the change and the others do not.
    pub fn announce(&self, change: crate::cluster::Change) -> Result<(), NotAnnounced> {
        let Some(cluster) = self.cluster.get() else { return Ok(()) };
        if crate::cluster::applying_from_log() {
            return Ok(());
        }
        cluster
            .publish(&change)
            .map(|seq| tracing::info!(seq, change = %change.describe(), "control plane: change announced"))
            .map_err(NotAnnounced)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of what is recorded.
    pub fn snapshot(&self) -> Changes {
        self.lock().changes.clone()
    }

    /// The watched plugins directory: a plugin added from a file there is
    /// the directory's, not a run-time addition.
    pub fn set_plugins_dir(&self, dir: Option<PathBuf>) {
        self.lock().plugins_dir = dir.map(|d| d.canonicalize().unwrap_or(d));
    }

    /// Notes the file a plugin was loaded from.
    pub fn note_source(&self, name: &str, path: &Path) {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        self.lock().sources.insert(name.to_string(), path);
    }

    /// Where `plugin` came from.
    pub fn plugin_source(&self, plugin: &str) -> Source {
        if self.lock().changes.plugins_added.iter().any(|p| p.name == plugin) {
            Source::Runtime
        } else {
            Source::Config
        }
    }

    /// Where `server` came from.
    pub fn server_source(&self, server: &str) -> Source {
        if self.lock().changes.servers_added.iter().any(|s| s.name == server) {
            Source::Runtime
        } else {
            Source::Config
        }
    }

    /// Fills in where each server came from (the config, or added at run
    /// time).
    pub fn name_sources(&self, servers: &mut [crate::mcp_client::ServerStatus]) {
        for s in servers {
            s.source = Some(self.server_source(&s.name).as_str().to_string());
        }
    }

    /// The plugins to add again at start, in order.
    pub fn added_plugins(&self) -> Vec<AddedPlugin> {
        self.lock().changes.plugins_added.clone()
    }

    /// Whether loading `name` (from `path`, `None` for a built-in) is held
    /// back by an operator's `plugin remove`. A removal whose file has
    /// changed since is forgotten: the new file loads.
    pub fn is_removed(&self, name: &str, path: Option<&Path>) -> bool {
        let mut inner = self.lock();
        let Some(i) = inner.changes.plugins_removed.iter().position(|r| r.name == name) else { return false };
        let r = &inner.changes.plugins_removed[i];
        // Only the file that was removed can change; another file of that
        // name stays held back.
        let held = match (&r.file, path) {
            (Some(stamp), Some(p))
                if r.path.as_deref() == Some(&*p.canonicalize().unwrap_or_else(|_| p.to_path_buf())) =>
            {
                FileStamp::of(p).as_ref() == Some(stamp)
            }
            _ => true,
        };
        if !held {
            tracing::info!(plugin = %crate::tool::log_safe(name), "the removed plugin's file changed: loading it again");
            inner.changes.plugins_removed.remove(i);
            self.save(&inner);
        }
        held
    }

    /// Records that the operator added `name` from `path` (forgetting any
    /// removal of it).
    pub fn plugin_added(&self, name: &str, path: &Path) {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let mut inner = self.lock();
        inner.changes.plugins_removed.retain(|r| r.name != name);
        inner.changes.plugins_added.retain(|p| p.name != name);
        let in_dir = inner.plugins_dir.as_deref().is_some_and(|d| path.parent() == Some(d));
        if !in_dir {
            inner.changes.plugins_added.push(AddedPlugin { name: name.to_string(), path: path.clone() });
        }
        inner.sources.insert(name.to_string(), path);
        self.save(&inner);
    }

    /// Records that the operator removed `name`: it stays unloaded (at
    /// start, from the plugins directory) until its file changes or the
    /// operator adds it again.
    pub fn plugin_removed(&self, name: &str) {
        let mut inner = self.lock();
        inner.changes.plugins_added.retain(|p| p.name != name);
        let source = inner.sources.remove(name);
        inner.changes.plugins_removed.retain(|r| r.name != name);
        let file = source.as_deref().and_then(FileStamp::of);
        inner.changes.plugins_removed.push(RemovedPlugin { name: name.to_string(), path: source, file });
        self.save(&inner);
    }

    /// Records that the operator added a server.
    pub fn server_added(&self, cfg: &McpServerConfig) {
        let mut inner = self.lock();
        inner.changes.servers_removed.retain(|n| *n != cfg.name);
        inner.changes.servers_added.retain(|s| s.name != cfg.name);
        inner.changes.servers_added.push(cfg.clone());
        self.save(&inner);
    }

    /// Records that the operator removed a server.
    pub fn server_removed(&self, name: &str) {
        let mut inner = self.lock();
        let before = inner.changes.servers_added.len();
        inner.changes.servers_added.retain(|s| s.name != name);
        if inner.changes.servers_added.len() == before && !inner.changes.servers_removed.iter().any(|n| n == name) {
            inner.changes.servers_removed.push(name.to_string());
        }
        self.save(&inner);
    }

    /// The servers to start: the configured ones less those removed at run
    /// time, then those added at run time (a name the config now has too
    /// keeps the config's entry, with a warning).
    pub fn servers(&self, configured: &[McpServerConfig]) -> (Vec<McpServerConfig>, Vec<String>) {
        let inner = self.lock();
        let mut warnings = Vec::new();
        let mut out: Vec<McpServerConfig> =
            configured.iter().filter(|s| !inner.changes.servers_removed.contains(&s.name)).cloned().collect();
        for s in &inner.changes.servers_added {
            if configured.iter().any(|c| c.name == s.name) {
                warnings.push(format!(
                    "MCP server {:?} was added at run time and is now in the config too: the config's entry is used",
                    s.name
                ));
            } else {
                out.push(s.clone());
            }
        }
        (out, warnings)
    }

    /// Records a DM override of `agent` to `tier` for `ttl` (replacing
    /// the agent's earlier one).
    pub fn override_set(&self, agent: &str, tier: crate::budget::Tier, ttl: std::time::Duration) {
        let mut inner = self.lock();
        let now = now_unix_ms();
        inner.changes.overrides.retain(|o| o.agent != agent && o.until_unix_ms > now);
        let until_unix_ms = now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        inner.changes.overrides.push(StoredOverride { agent: agent.to_string(), tier, until_unix_ms });
        self.save(&inner);
    }

    /// Records that `agent`'s override ended early.
    pub fn override_cleared(&self, agent: &str) {
        let mut inner = self.lock();
        let before = inner.changes.overrides.len();
        inner.changes.overrides.retain(|o| o.agent != agent);
        if inner.changes.overrides.len() != before {
            self.save(&inner);
        }
    }

    /// The overrides still in force, with the time each has left.
    pub fn overrides(&self) -> Vec<(String, crate::budget::Tier, std::time::Duration)> {
        let now = now_unix_ms();
        self.lock()
            .changes
            .overrides
            .iter()
            .filter(|o| o.until_unix_ms > now)
            .map(|o| (o.agent.clone(), o.tier, std::time::Duration::from_millis(o.until_unix_ms - now)))
            .collect()
    }

    fn save(&self, inner: &Inner) {
        let Some((path, key)) = &self.store else { return };
        if let Err(e) = write(path, key, &inner.changes) {
            tracing::warn!("could not record the run-time change (it holds until the host stops): {e}");
        }
    }
}

fn tag(key: &[u8; 32], text: &str) -> String {
    hex::encode(toolhost_base::seal::tag(key, &[text.as_bytes()]))
}

fn write(path: &Path, key: &[u8; 32], changes: &Changes) -> Result<(), ChangesError> {
    let io = |source| ChangesError::Io { path: path.to_path_buf(), source };
    let text = serde_json::to_string(changes).map_err(|e| io(std::io::Error::other(e)))?;
    let sealed = Sealed { version: 1, hmac: tag(key, &text), changes: text };
    let bytes = serde_json::to_vec_pretty(&sealed).map_err(|e| io(std::io::Error::other(e)))?;
    crate::runtime::private::write_private(path, &bytes).map_err(io)
}

fn read(path: &Path, key: &[u8; 32]) -> Result<Changes, ChangesError> {
    use crate::runtime::private::{StateFileError, read_state};
    let refused = |reason: String| ChangesError::Refused { path: path.to_path_buf(), reason };
    let bytes = match read_state(path, MAX_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(Changes::default()),
        Err(StateFileError::Refused(why)) => return Err(refused(why)),
        Err(StateFileError::Io(e)) => return Err(refused(format!("unreadable: {e}"))),
    };
    let text = String::from_utf8(bytes).map_err(|_| refused("not a toolhost record: not UTF-8".into()))?;
    let sealed: Sealed = serde_json::from_str(&text).map_err(|e| refused(format!("not a toolhost record: {e}")))?;
    if sealed.version != 1 {
        return Err(refused(format!("version {} is not one this toolhost reads", sealed.version)));
    }
    let expected = tag(key, &sealed.changes);
    if !toolhost_base::seal::same_secret(expected.as_bytes(), sealed.hmac.as_bytes()) {
        return Err(refused("its tag does not match (it was changed by hand, or belongs to another key)".into()));
    }
    let changes: Changes =
        serde_json::from_str(&sealed.changes).map_err(|e| refused(format!("not a toolhost record: {e}")))?;
    let is_ref = |p: &Path| p.to_str().is_some_and(crate::oci::is_reference);
    if let Some(p) = changes.plugins_added.iter().find(|p| !p.path.is_absolute() && !is_ref(&p.path)) {
        return Err(refused(format!("plugin {:?}: the path is not absolute", p.name)));
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        crate::runtime::private::ensure_private_dir(d.path()).unwrap();
        d
    }

    #[test]
    fn changes_survive_a_reopen_and_a_tampered_record_is_refused() {
        let d = dir();
        let (c, refused) = RuntimeChanges::open(d.path()).unwrap();
        assert!(refused.is_none());
        let wasm = d.path().join("x.wasm");
        std::fs::write(&wasm, b"x").unwrap();
        c.plugin_added("x", &wasm);
        c.plugin_removed("roll");
        drop(c);
        let (c, refused) = RuntimeChanges::open(d.path()).unwrap();
        assert!(refused.is_none(), "{refused:?}");
        assert_eq!(c.added_plugins().len(), 1);
        assert!(c.is_removed("roll", None));
        assert_eq!(c.plugin_source("x"), Source::Runtime);

        // An edit by hand (another plugin path) breaks the tag.
        let path = d.path().join(FILE);
        let text = std::fs::read_to_string(&path).unwrap().replace("x.wasm", "y.wasm");
        crate::runtime::private::write_private(&path, text.as_bytes()).unwrap();
        let (c, refused) = RuntimeChanges::open(d.path()).unwrap();
        assert!(refused.unwrap().to_string().contains("tag does not match"));
        assert!(c.added_plugins().is_empty());
        assert!(!c.is_removed("roll", None));
    }

    #[test]
    fn a_removal_holds_until_the_file_changes() {
        let d = dir();
        let (c, _) = RuntimeChanges::open(d.path()).unwrap();
        let wasm = d.path().join("p.wasm");
        std::fs::write(&wasm, b"one").unwrap();
        c.note_source("p", &wasm);
        c.plugin_removed("p");
        assert!(c.is_removed("p", Some(&wasm)));
        assert!(c.is_removed("p", Some(&wasm)), "asking twice changes nothing");
        std::fs::write(&wasm, b"two, longer").unwrap();
        assert!(!c.is_removed("p", Some(&wasm)));
        assert!(c.snapshot().plugins_removed.is_empty());
    }

    #[test]
    fn a_record_readable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = dir();
        let (c, _) = RuntimeChanges::open(d.path()).unwrap();
        c.plugin_removed("roll");
        std::fs::set_permissions(d.path().join(FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        let (_, refused) = RuntimeChanges::open(d.path()).unwrap();
        assert!(refused.unwrap().to_string().contains("mode 0600"));
    }
}

/// A change made on this host that the fleet's control plane did not take.
#[derive(Debug, thiserror::Error)]
#[error(
    "the change holds on this host, but the fleet was not told of it ({0}); make it again when the control plane answers"
)]
pub struct NotAnnounced(#[source] pub crate::cluster::ClusterError);
