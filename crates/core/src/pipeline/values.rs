//! Each plugin's `wasi:config/store` values (`plugins.config.<plugin>` and
//! its secrets), and the plugins held until a secret their manifest names
//! is set.
//!
//! The values are rebuilt whole when the config or the secrets change and
//! put in force on the runtime, so the next call of each plugin reads them.
//! A plugin whose signed manifest lists a secret that is not set is loaded
//! (compiled, checked, instantiated) but not registered: it waits here,
//! and [`Host::refresh_secrets`] registers it once every secret it names is
//! set. A new version of a serving plugin waits the same way while the old
//! one keeps serving.

use super::Host;
use super::install::AddPluginError;
use super::reconfigure::PluginChange;
use crate::package::Provenance;
use crate::runtime::{PluginValues, WasmPlugin};
use crate::secrets::{SecretError, SecretStore};
use crate::tool::Provider as _;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// A loaded plugin waiting for its secrets.
#[derive(Debug)]
pub(crate) struct Awaiting {
    pub(crate) plugin: Arc<WasmPlugin>,
    pub(crate) provenance: Provenance,
    pub(crate) path: Option<PathBuf>,
    pub(crate) why: String,
}

pub use crate::secrets::PluginConfigValues;

impl Host {
    /// Where this host's secrets are kept (none set: no plugin has
    /// secrets). Reads them at once.
    pub fn set_secret_store(&self, store: SecretStore) -> Result<(), SecretError> {
        let secrets = store.read()?;
        *self.secret_store.lock().unwrap_or_else(|p| p.into_inner()) = Some(store);
        self.secrets.store(Arc::new(secrets));
        self.rebuild_values();
        Ok(())
    }

    /// Puts `plugins.config` in force from each plugin's next call on.
    pub fn set_plugin_config(&self, config: PluginConfigValues) {
        self.plugin_config.store(Arc::new(config));
        self.rebuild_values();
    }

    /// The secrets as last read (names and values).
    pub fn secrets_snapshot(&self) -> Arc<crate::secrets::Secrets> {
        self.secrets.load_full()
    }

    /// The secrets store, if any.
    pub fn secret_store(&self) -> Option<SecretStore> {
        self.secret_store.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the secrets again and puts them in force from each plugin's
    /// next call on; registers the plugins that were waiting for a secret
    /// now set. A config value named like a secret of the same plugin is
    /// refused (they share one namespace), changing nothing.
    pub fn refresh_secrets(&self) -> Result<Vec<PluginChange>, SecretError> {
        let Some(store) = self.secret_store() else { return Ok(Vec::new()) };
        self.put_secrets(store.read()?)
    }

    /// Puts `secrets` in force from each plugin's next call on, in place of
    /// those held (a host whose secrets come from elsewhere than a file:
    /// a fleet's control plane); registers the plugins that were waiting
    /// for one of them. A config value named like a secret of the same
    /// plugin is refused, changing nothing.
    pub fn put_secrets(&self, secrets: crate::secrets::Secrets) -> Result<Vec<PluginChange>, SecretError> {
        if let Some(clash) = crate::secrets::clash(&self.plugin_config.load(), &secrets) {
            return Err(SecretError::Name(clash));
        }
        self.secrets.store(Arc::new(secrets));
        self.rebuild_values();
        Ok(self.register_awaiting())
    }

    /// [`Host::put_secrets`] for secrets this host does not choose (a
    /// fleet's): a secret named like a config value of the same plugin is
    /// left out, the others put in force; what was left out, in words.
    pub fn put_secrets_but_clashes(&self, mut secrets: crate::secrets::Secrets) -> (Vec<PluginChange>, Vec<String>) {
        let left_out = secrets.drop_clashes(&self.plugin_config.load());
        self.secrets.store(Arc::new(secrets));
        self.rebuild_values();
        (self.register_awaiting(), left_out)
    }

    fn rebuild_values(&self) {
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
        self.runtime.set_plugin_values(values);
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

    /// Registers each waiting plugin whose secrets are all set now (a new
    /// version replacing the one serving).
    fn register_awaiting(&self) -> Vec<PluginChange> {
        let _one_at_a_time = self.installing.lock().unwrap_or_else(|p| p.into_inner());
        let ready: Vec<Awaiting> = {
            let mut awaiting = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
            let names: Vec<String> = awaiting
                .iter()
                .filter(|(name, a)| self.missing_secrets(name, &a.provenance).is_empty())
                .map(|(name, _)| name.clone())
                .collect();
            names.into_iter().filter_map(|n| awaiting.remove(&n)).collect()
        };
        let mut out = Vec::new();
        for a in ready {
            let name = a.plugin.name().to_string();
            match self.registry.upsert(a.plugin.clone()) {
                Ok(replaced) => {
                    if let Some(old) = &replaced {
                        for t in old.tools() {
                            self.budget.forget(&t.name);
                        }
                    }
                    self.provenance
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), a.provenance.clone());
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
