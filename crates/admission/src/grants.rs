//! The operator's grants (`plugins.grants`), the names plugins' tools take
//! (`plugins.prefix`) and the memory store the `memory` grant hands out.

use crate::capabilities::{GrantConfig, GrantError, Grants, GrantsByPlugin};
use crate::runtime::MemoryBackend;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// What each plugin is granted, resolved when it loads.
#[derive(Debug, Default)]
pub struct GrantBook {
    /// `plugins.grants` and the directory their relative paths resolve
    /// against; swapped whole by a config reload.
    grants: arc_swap::ArcSwap<(GrantsByPlugin, PathBuf)>,
    /// `plugins.prefix`: plugin -> the prefix of its tools' names.
    prefixes: arc_swap::ArcSwap<BTreeMap<String, String>>,
    /// The campaign memory store behind the `memory` capability.
    memory: OnceLock<Arc<dyn MemoryBackend>>,
    /// What a plugin holds when `plugins.grants` has no entry for it, as
    /// its own declaration says (a built-in's, from the table it ships in):
    /// never decided by a name alone.
    defaults: arc_swap::ArcSwap<BTreeMap<String, GrantConfig>>,
    /// The runtime's extensions, which resolve the grants of the
    /// capabilities they provide (`http`).
    extensions: Vec<Arc<dyn crate::runtime::Extension>>,
}

impl GrantBook {
    /// An empty book whose grants of extension-provided capabilities
    /// `extensions` resolve (a runtime's, [`crate::runtime::Runtime::extensions`]).
    pub fn new(extensions: &[Arc<dyn crate::runtime::Extension>]) -> GrantBook {
        GrantBook { extensions: extensions.to_vec(), ..GrantBook::default() }
    }

    /// Sets the operator's grants (from `plugins.grants`), relative paths
    /// resolved against `base`. Applies to plugins loaded afterwards (a
    /// reload re-grants loaded ones through
    /// [`crate::Admission::apply_grants`]).
    pub fn set(&self, grants: GrantsByPlugin, base: &Path) {
        self.grants.store(Arc::new((grants, base.to_path_buf())));
    }

    /// The grants in force, with the directory they resolve against.
    pub(crate) fn current(&self) -> Arc<(GrantsByPlugin, PathBuf)> {
        self.grants.load_full()
    }

    /// Sets `plugins.prefix` (plugin -> the prefix of its tools' names),
    /// for plugins loaded from now on.
    pub fn set_prefixes(&self, prefixes: BTreeMap<String, String>) {
        self.prefixes.store(Arc::new(prefixes));
    }

    /// `plugins.prefix` as in force.
    pub(crate) fn prefixes(&self) -> Arc<BTreeMap<String, String>> {
        self.prefixes.load_full()
    }

    /// What `plugin` holds when `plugins.grants` has no entry for it (a
    /// built-in's declared default: `memorytool` holds `memory`). The
    /// operator's entry, even an empty one, replaces it.
    pub fn set_default(&self, plugin: &str, grant: GrantConfig) {
        self.defaults.rcu(|d| {
            let mut d = BTreeMap::clone(d);
            d.insert(plugin.to_string(), grant.clone());
            d
        });
    }

    /// Gives the host its memory store, unless it has one (`false`: it had).
    /// Without one, a plugin granted `memory` does not load.
    pub fn set_memory(&self, store: Arc<dyn MemoryBackend>) -> bool {
        self.memory.set(store).is_ok()
    }

    /// The memory store, when one was given.
    pub fn memory(&self) -> Option<&Arc<dyn MemoryBackend>> {
        self.memory.get()
    }

    /// The operator's grant for `plugin` as configured: its
    /// `plugins.grants` entry, or its declared default
    /// ([`GrantBook::set_default`]).
    pub fn grant_config(&self, plugin: &str) -> GrantConfig {
        self.config_in(&self.grants.load().0, plugin)
    }

    /// The resolved grants for a plugin name (its declared default, else
    /// nothing, when none configured).
    pub fn grants_for(&self, plugin: &str) -> Result<Grants, GrantError> {
        let grants = self.grants.load();
        self.resolve(&self.config_in(&grants.0, plugin), plugin, &grants.1)
    }

    /// Resolves `cfg` for `plugin` (relative paths against `base`).
    pub(crate) fn resolve(&self, cfg: &GrantConfig, plugin: &str, base: &Path) -> Result<Grants, GrantError> {
        let memory = || -> Result<Arc<dyn MemoryBackend>, String> {
            self.memory().cloned().ok_or_else(|| "this host has no memory store".to_string())
        };
        cfg.resolve(plugin, base, &memory, &self.extensions)
    }
}

impl GrantBook {
    /// `plugin`'s entry in `grants`, or its declared default.
    pub(crate) fn config_in(&self, grants: &GrantsByPlugin, plugin: &str) -> GrantConfig {
        match grants.get(plugin) {
            Some(g) => g.clone(),
            None => self.defaults.load().get(plugin).cloned().unwrap_or_default(),
        }
    }
}
