//! Each plugin's `wasi:config/store` values (`plugins.config.<plugin>` and
//! its secrets), and the plugins held until a secret their manifest names
//! is set.
//!
//! The values are rebuilt whole when the config or the secrets change and
//! put in force on the runtime, so the next call of each plugin reads them.
//! A plugin whose signed manifest lists a secret that is not set is loaded
//! (compiled, checked, instantiated) but not registered: it waits here,
//! and [`Admission::refresh_secrets`] registers it once every secret it
//! names is set. A new version of a serving plugin waits the same way while
//! the old one keeps serving.

use crate::Admission;
use crate::install::AddPluginError;
use crate::package::Provenance;
use crate::reconfigure::PluginChange;
use crate::runtime::{PluginValues, Runtime, WasmPlugin};
use crate::secrets::{SecretError, SecretStore, Secrets};
use crate::tool::Provider as _;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A loaded plugin waiting for its secrets.
#[derive(Debug)]
struct Awaiting {
    plugin: Arc<WasmPlugin>,
    provenance: Provenance,
    path: Option<PathBuf>,
    why: String,
}

pub use crate::secrets::PluginConfigValues;

/// `plugins.config`, the secrets and where they are kept, and the plugins
/// waiting for a secret.
#[derive(Debug, Default)]
pub struct Values {
    /// `plugins.config`: each plugin's plain values.
    plugin_config: arc_swap::ArcSwap<PluginConfigValues>,
    /// Where secrets are kept (none: no plugin has secrets).
    secret_store: Mutex<Option<SecretStore>>,
    /// The secrets as last read.
    secrets: arc_swap::ArcSwap<Secrets>,
    /// Plugins loaded but held until a secret their manifest names is set.
    awaiting: Mutex<HashMap<String, Awaiting>>,
}

impl Values {
    /// The secrets as last read (names and values).
    pub fn secrets_snapshot(&self) -> Arc<Secrets> {
        self.secrets.load_full()
    }

    /// The secrets store, if any.
    pub fn secret_store(&self) -> Option<SecretStore> {
        self.secret_store.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts the config values and the secrets in force on `runtime`.
    fn rebuild(&self, runtime: &Runtime) {
        let config = self.plugin_config.load();
        let secrets = self.secrets.load();
        let mut names: Vec<&str> = config.keys().map(String::as_str).collect();
        names.extend(secrets.plugins());
        let values: HashMap<String, Arc<PluginValues>> = names
            .into_iter()
            .map(|p| {
                let plain = config.get(p).cloned().unwrap_or_default();
                (p.to_string(), Arc::new(PluginValues::new(&plain, &secrets.of(p))))
            })
            .collect();
        runtime.set_plugin_values(values);
    }

    /// The secrets `provenance`'s manifest names that `name` does not have.
    pub(crate) fn missing_secrets(&self, name: &str, provenance: &Provenance) -> Vec<String> {
        let Provenance::Signed { manifest, .. } = provenance else { return Vec::new() };
        let secrets = self.secrets.load();
        manifest.secrets.iter().filter(|s| !secrets.has(name, s)).cloned().collect()
    }

    /// Holds a loaded `plugin` until `missing` are set; the error to report.
    pub(crate) fn await_secrets(
        &self,
        plugin: Arc<WasmPlugin>,
        provenance: Provenance,
        path: Option<PathBuf>,
        missing: Vec<String>,
    ) -> AddPluginError {
        let name = plugin.name().to_string();
        let error = AddPluginError::MissingSecrets { plugin: name.clone(), missing };
        let why = error.to_string();
        tracing::warn!(plugin = %crate::tool::log_safe(&name), "{why}");
        self.awaiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, Awaiting { plugin, provenance, path, why });
        error
    }

    /// Takes out each waiting plugin whose secrets are all set now.
    fn take_ready(&self) -> Vec<Awaiting> {
        let mut awaiting = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        let names: Vec<String> = awaiting
            .iter()
            .filter(|(name, a)| self.missing_secrets(name, &a.provenance).is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        names.into_iter().filter_map(|n| awaiting.remove(&n)).collect()
    }

    /// Forgets a plugin waiting for its secrets (removed by the operator).
    pub(crate) fn forget_awaiting(&self, name: &str) -> bool {
        self.awaiting.lock().unwrap_or_else(|p| p.into_inner()).remove(name).is_some()
    }

    /// The plugins waiting for a secret, with why.
    pub(crate) fn awaiting_reasons(&self) -> Vec<(String, String)> {
        self.awaiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, a)| (n.clone(), a.why.clone()))
            .collect()
    }
}

impl Admission {
    /// Where this host's secrets are kept (none set: no plugin has
    /// secrets). Reads them at once.
    pub fn set_secret_store(&self, store: SecretStore) -> Result<(), SecretError> {
        let secrets = store.read()?;
        *self.values.secret_store.lock().unwrap_or_else(|p| p.into_inner()) = Some(store);
        self.values.secrets.store(Arc::new(secrets));
        self.values.rebuild(self.pipeline.runtime());
        Ok(())
    }

    /// Puts `plugins.config` in force from each plugin's next call on.
    pub fn set_plugin_config(&self, config: PluginConfigValues) {
        self.values.plugin_config.store(Arc::new(config));
        self.values.rebuild(self.pipeline.runtime());
    }

    /// Reads the secrets again and puts them in force from each plugin's
    /// next call on; registers the plugins that were waiting for a secret
    /// now set. A config value named like a secret of the same plugin is
    /// refused (they share one namespace), changing nothing.
    pub fn refresh_secrets(&self) -> Result<Vec<PluginChange>, SecretError> {
        let Some(store) = self.values.secret_store() else { return Ok(Vec::new()) };
        self.put_secrets(store.read()?)
    }

    /// Puts `secrets` in force from each plugin's next call on, in place of
    /// those held (a host whose secrets come from elsewhere than a file:
    /// a fleet's control plane); registers the plugins that were waiting
    /// for one of them. A config value named like a secret of the same
    /// plugin is refused, changing nothing.
    pub fn put_secrets(&self, secrets: Secrets) -> Result<Vec<PluginChange>, SecretError> {
        if let Some(clash) = crate::secrets::clash(&self.values.plugin_config.load(), &secrets) {
            return Err(SecretError::Name(clash));
        }
        self.values.secrets.store(Arc::new(secrets));
        self.values.rebuild(self.pipeline.runtime());
        Ok(self.register_awaiting())
    }

    /// [`Admission::put_secrets`] for secrets this host does not choose (a
    /// fleet's): a secret named like a config value of the same plugin is
    /// left out, the others put in force; what was left out, in words.
    pub fn put_secrets_but_clashes(&self, mut secrets: Secrets) -> (Vec<PluginChange>, Vec<String>) {
        let left_out = secrets.drop_clashes(&self.values.plugin_config.load());
        self.values.secrets.store(Arc::new(secrets));
        self.values.rebuild(self.pipeline.runtime());
        (self.register_awaiting(), left_out)
    }

    /// Registers each waiting plugin whose secrets are all set now (a new
    /// version replacing the one serving).
    fn register_awaiting(&self) -> Vec<PluginChange> {
        let _one_at_a_time = self.one_at_a_time();
        let mut out = Vec::new();
        for a in self.values.take_ready() {
            let name = a.plugin.name().to_string();
            match self.pipeline.registry().upsert(a.plugin.clone()) {
                Ok(replaced) => {
                    if let Some(old) = &replaced {
                        for t in old.tools() {
                            self.pipeline.budget().forget(&t.name);
                        }
                    }
                    self.set_provenance(&name, Some(a.provenance.clone()));
                    self.audit_loaded(
                        &a.plugin,
                        a.path.as_deref(),
                        replaced.as_ref().and_then(|p| p.fingerprint()),
                        &a.provenance,
                    );
                    tracing::info!(plugin = %crate::tool::log_safe(&name), "plugin loaded: the secrets it needs are set");
                    out.push(PluginChange {
                        plugin: name,
                        action: "loaded".into(),
                        detail: "loaded: the secrets its manifest names are set".into(),
                    });
                }
                Err(e) => {
                    tracing::warn!(plugin = %crate::tool::log_safe(&name), "not loaded after its secrets were set: {e}");
                }
            }
        }
        out
    }
}
