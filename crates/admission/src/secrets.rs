//! Plugin secrets: API keys and the like, set by the operator with
//! `toolhost secret set PLUGIN NAME` and read by that plugin alone through
//! `wasi:config/store`.
//!
//! They live in one file in the state directory, `secrets.json`, read
//! under the state-file policy (a regular file of this user that no one
//! else may read; a symbolic link is never followed). A change is a
//! read-modify-write under an exclusive lock on `secrets.json.lock` beside
//! it, the file replaced whole (written 0600 beside it, then renamed over
//! it): commands run at once take turns and lose nothing, and a reader (a
//! running host) sees the file before a change or after it, never half. Values are never shown: listing gives names and when
//! each was set. A running host reads the file again when told to (the
//! `secret` commands tell it), so a secret takes effect from the next call.

use crate::runtime::private::{FileLock, StateFileError, lock_exclusive, read_state, write_private};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file's name in the state directory.
pub const FILE: &str = "secrets.json";
/// The lock file's name, beside it: held by `set` and `remove` from their
/// read to their write.
pub const LOCK_FILE: &str = "secrets.json.lock";
/// Largest secrets file read, in bytes.
pub const MAX_FILE_BYTES: usize = 4 << 20;
/// Largest secret value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 << 10;

/// Why the secrets could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read or written.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A plugin or secret name is not allowed.
    #[error("{0}")]
    Name(String),
    /// The value is empty or too large.
    #[error("{0}")]
    Value(String),
}

/// One stored secret.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    value: String,
    /// When it was set (RFC 3339, UTC).
    set_at: String,
}

/// What a listing shows of one secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretInfo {
    /// The plugin that reads it.
    pub plugin: String,
    /// Its name (the `wasi:config/store` key).
    pub name: String,
    /// When it was set (RFC 3339, UTC).
    pub set_at: String,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Contents {
    /// plugin -> name -> entry.
    #[serde(default)]
    plugins: BTreeMap<String, BTreeMap<String, Entry>>,
}

/// Every plugin's secrets, as read from the file.
#[derive(Default, Clone)]
pub struct Secrets {
    by_plugin: BTreeMap<String, BTreeMap<String, String>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: BTreeMap<&str, Vec<&str>> =
            self.by_plugin.iter().map(|(p, m)| (p.as_str(), m.keys().map(String::as_str).collect())).collect();
        f.debug_struct("Secrets").field("names", &names).finish()
    }
}

impl Secrets {
    /// Secrets from `(plugin, name, value)` triples (the fleet's control
    /// plane reads them this way).
    pub fn from_entries(entries: impl IntoIterator<Item = (String, String, String)>) -> Secrets {
        let mut by_plugin: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (plugin, name, value) in entries {
            by_plugin.entry(plugin).or_default().insert(name, value);
        }
        Secrets { by_plugin }
    }

    /// `plugin`'s secrets, name -> value.
    pub fn of(&self, plugin: &str) -> BTreeMap<String, String> {
        self.by_plugin.get(plugin).cloned().unwrap_or_default()
    }

    /// Whether `plugin` has a secret `name`.
    pub fn has(&self, plugin: &str, name: &str) -> bool {
        self.by_plugin.get(plugin).is_some_and(|m| m.contains_key(name))
    }

    /// Drops each secret named like a config value of the same plugin;
    /// the error of each, as [`clash`] words it.
    pub fn drop_clashes(&mut self, config: &PluginConfigValues) -> Vec<String> {
        let clashing: Vec<(String, String)> =
            clashes(config, self).map(|(p, k)| (p.to_string(), k.to_string())).collect();
        for (p, k) in &clashing {
            if let Some(m) = self.by_plugin.get_mut(p) {
                m.remove(k);
                if m.is_empty() {
                    self.by_plugin.remove(p);
                }
            }
        }
        clashing.iter().map(|(p, k)| clash_message(p, k)).collect()
    }

    /// The plugins that have secrets.
    pub fn plugins(&self) -> impl Iterator<Item = &str> {
        self.by_plugin.keys().map(String::as_str)
    }
}

/// The plain config values of every plugin: plugin -> key -> value.
pub type PluginConfigValues = BTreeMap<String, BTreeMap<String, String>>;

/// A config value named like a secret of the same plugin, as the error to
/// report: they share one namespace in `wasi:config/store`.
pub fn clash(config: &PluginConfigValues, secrets: &Secrets) -> Option<String> {
    clashes(config, secrets).next().map(|(plugin, k)| clash_message(plugin, k))
}

/// Each (plugin, name) that is both a config value and a secret.
fn clashes<'a>(config: &'a PluginConfigValues, secrets: &'a Secrets) -> impl Iterator<Item = (&'a str, &'a str)> {
    config.iter().flat_map(move |(plugin, values)| {
        values.keys().filter(|k| secrets.has(plugin, k)).map(|k| (plugin.as_str(), k.as_str()))
    })
}

fn clash_message(plugin: &str, k: &str) -> String {
    format!(
        "plugins.config.{plugin}.{k}: {plugin} also has a secret named {k:?}; config values and secrets share one namespace: rename the value or remove the secret (toolhost secret rm {plugin} {k})"
    )
}

/// The secrets file of one state directory.
#[derive(Debug, Clone)]
pub struct SecretStore {
    path: PathBuf,
}

/// Checks a plugin or secret name: 1 to 64 of `A-Z a-z 0-9 _ - .`, not
/// starting with `.` or `-`.
pub fn check_name(what: &str, name: &str) -> Result<(), SecretError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(SecretError::Name(format!(
            "{what} {name:?} is not allowed: use 1 to 64 letters, digits, '_', '-' or '.', not starting with '.' or '-'"
        )))
    }
}

impl SecretStore {
    /// The store in `state_dir` (nothing is read or created yet).
    pub fn in_state_dir(state_dir: &Path) -> SecretStore {
        SecretStore { path: state_dir.join(FILE) }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, reason: impl std::fmt::Display) -> SecretError {
        SecretError::File { path: self.path.clone(), reason: reason.to_string() }
    }

    fn contents(&self) -> Result<Contents, SecretError> {
        match read_state(&self.path, MAX_FILE_BYTES) {
            Ok(None) => Ok(Contents::default()),
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| self.err(format!("not a secrets file: {e}"))),
            Err(StateFileError::Refused(why)) => Err(self.err(format!("refused: {why}"))),
            Err(StateFileError::Io(e)) => Err(self.err(e)),
        }
    }

    /// The lock every change holds from its read to its write (taken after
    /// the value was read from the operator, so a slow typist holds no one).
    fn lock(&self) -> Result<FileLock, SecretError> {
        if let Some(dir) = self.path.parent() {
            crate::runtime::private::ensure_private_dir(dir).map_err(|e| self.err(e))?;
        }
        lock_exclusive(&self.path.with_file_name(LOCK_FILE)).map_err(|e| self.err(format!("taking its lock: {e}")))
    }

    /// Writes `c` whole: a new file renamed over the old one. Only with
    /// [`SecretStore::lock`] held.
    fn write(&self, c: &Contents, _locked: &FileLock) -> Result<(), SecretError> {
        let text = serde_json::to_vec_pretty(c).map_err(|e| self.err(e))?;
        write_private(&self.path, &text).map_err(|e| self.err(e))
    }

    /// Every plugin's secrets (none when the file does not exist).
    pub fn read(&self) -> Result<Secrets, SecretError> {
        let c = self.contents()?;
        Ok(Secrets {
            by_plugin: c
                .plugins
                .into_iter()
                .map(|(p, m)| (p, m.into_iter().map(|(n, e)| (n, e.value)).collect()))
                .collect(),
        })
    }

    /// Sets `plugin`'s secret `name` to `value` (replacing one set before).
    /// Returns whether it replaced one.
    pub fn set(&self, plugin: &str, name: &str, value: &str) -> Result<bool, SecretError> {
        check_name("plugin", plugin)?;
        check_name("secret", name)?;
        if value.is_empty() {
            return Err(SecretError::Value("the value is empty (it is read from standard input)".into()));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(SecretError::Value(format!(
                "the value is {} bytes, over the {MAX_VALUE_BYTES}-byte limit",
                value.len()
            )));
        }
        let lock = self.lock()?;
        let mut c = self.contents()?;
        let entry = Entry { value: value.to_string(), set_at: crate::audit::now_rfc3339() };
        let replaced = c.plugins.entry(plugin.to_string()).or_default().insert(name.to_string(), entry).is_some();
        self.write(&c, &lock)?;
        Ok(replaced)
    }

    /// Removes `plugin`'s secret `name`; whether there was one.
    pub fn remove(&self, plugin: &str, name: &str) -> Result<bool, SecretError> {
        let lock = self.lock()?;
        let mut c = self.contents()?;
        let Some(m) = c.plugins.get_mut(plugin) else { return Ok(false) };
        if m.remove(name).is_none() {
            return Ok(false);
        }
        if m.is_empty() {
            c.plugins.remove(plugin);
        }
        self.write(&c, &lock)?;
        Ok(true)
    }

    /// Names and when each was set, of `plugin`'s secrets or everyone's,
    /// sorted by plugin and name.
    pub fn list(&self, plugin: Option<&str>) -> Result<Vec<SecretInfo>, SecretError> {
        let c = self.contents()?;
        Ok(c.plugins
            .iter()
            .filter(|(p, _)| plugin.is_none_or(|want| want == p.as_str()))
            .flat_map(|(p, m)| {
                m.iter().map(|(n, e)| SecretInfo { plugin: p.clone(), name: n.clone(), set_at: e.set_at.clone() })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn secrets_are_kept_private_listed_without_values_and_removed() {
        let t = tempfile::tempdir().unwrap();
        let state = t.path().join("state");
        let store = SecretStore::in_state_dir(&state);
        assert!(store.read().unwrap().of("weather").is_empty(), "no file: no secrets");
        assert!(!store.set("weather", "api_key", "sk-1234").unwrap());
        assert!(store.set("weather", "api_key", "sk-5678").unwrap(), "replaced");
        store.set("wiki", "token", "t-0000").unwrap();
        let mode = std::fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let read = store.read().unwrap();
        assert_eq!(read.of("weather").get("api_key").map(String::as_str), Some("sk-5678"));
        assert!(!read.has("wiki", "api_key"), "each plugin has its own");
        assert!(!format!("{read:?}").contains("sk-5678"), "Debug never shows a value");
        let listed = store.list(Some("weather")).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].plugin.as_str(), listed[0].name.as_str()), ("weather", "api_key"));
        assert!(!serde_json::to_string(&store.list(None).unwrap()).unwrap().contains("sk-"));
        assert!(store.remove("weather", "api_key").unwrap());
        assert!(!store.remove("weather", "api_key").unwrap());
        assert_eq!(store.list(None).unwrap().len(), 1);
    }

    /// Writers at once take turns under the lock: none loses another's
    /// value (each open of the lock file excludes the others, threads of
    /// one process as much as processes).
    #[test]
    fn concurrent_sets_and_removals_lose_nothing() {
        let t = tempfile::tempdir().unwrap();
        let store = SecretStore::in_state_dir(&t.path().join("state"));
        store.set("weather", "gone", "to-be-removed").unwrap();
        std::thread::scope(|s| {
            for i in 0..20 {
                let store = &store;
                s.spawn(move || {
                    store.set(["weather", "wiki"][i % 2], &format!("key{i:02}"), &format!("v{i:02}")).unwrap()
                });
            }
            s.spawn(|| assert!(store.remove("weather", "gone").unwrap()));
        });
        let read = store.read().unwrap();
        for i in 0..20 {
            let got = read.of(["weather", "wiki"][i % 2]).get(&format!("key{i:02}")).cloned();
            assert_eq!(got, Some(format!("v{i:02}")), "key{i:02}");
        }
        assert!(!read.has("weather", "gone"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(store.path()), 0o600);
        assert_eq!(mode(&store.path().with_file_name(LOCK_FILE)), 0o600);
    }

    #[test]
    fn a_clashing_secret_is_dropped_and_the_others_kept() {
        let mut secrets = Secrets::from_entries([
            ("weather".to_string(), "units".to_string(), "v1".to_string()),
            ("weather".to_string(), "api_key".to_string(), "v2".to_string()),
            ("wiki".to_string(), "units".to_string(), "v3".to_string()),
        ]);
        let config: PluginConfigValues = [
            ("weather".to_string(), [("units".to_string(), "metric".to_string())].into()),
            ("wiki".to_string(), [("units".to_string(), "en".to_string())].into()),
        ]
        .into();
        let said = secrets.drop_clashes(&config);
        assert_eq!(said.len(), 2, "each one left out is said: {said:?}");
        assert!(said[0].contains("plugins.config.weather.units"), "{said:?}");
        assert!(said[1].contains("plugins.config.wiki.units"), "{said:?}");
        assert!(!secrets.has("weather", "units") && !secrets.has("wiki", "units"));
        assert!(secrets.has("weather", "api_key"), "the others stay");
        assert!(secrets.drop_clashes(&config).is_empty());
    }

    #[test]
    fn bad_names_empty_values_and_a_readable_file_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let store = SecretStore::in_state_dir(t.path());
        for bad in ["", "../x", "-x", "a b", &"x".repeat(65)] {
            assert!(matches!(store.set("weather", bad, "v"), Err(SecretError::Name(_))), "{bad:?}");
            assert!(matches!(store.set(bad, "k", "v"), Err(SecretError::Name(_))), "{bad:?}");
        }
        assert!(matches!(store.set("weather", "k", ""), Err(SecretError::Value(_))));
        assert!(matches!(store.set("weather", "k", &"v".repeat(MAX_VALUE_BYTES + 1)), Err(SecretError::Value(_))));
        store.set("weather", "k", "value").unwrap();
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = store.read().unwrap_err().to_string();
        assert!(e.contains("0600"), "{e}");
    }
}
