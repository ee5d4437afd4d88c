//! Plugins from where the operator keeps them: the built-ins, files and
//! `oci://` references, at start and while the host serves, remembered in
//! the run-time changes. The core pipeline ([`Host`]) takes bytes and
//! decides (trust policy, grants, atomic swap); this layer fetches them and
//! remembers what the operator did.

use crate::changes::RuntimeChanges;
use crate::oci::{Fetched, OciError, OciRef, OciStore};
use crate::tool::Provider as _;
use crate::{AddPluginError, Host, Installed};
use std::path::Path;
use std::sync::Arc;
use toolhost_core::runtime::WasmPlugin;

/// A host with where its plugins come from: the registry client and the
/// record of the operator's run-time changes. Everything that adds or
/// removes plugins while serving (the admin API, the DM's page, the
/// plugins-directory watcher, a restart's restore) goes through one.
#[derive(Debug)]
pub struct Installer {
    host: Arc<Host>,
    oci: Option<Arc<OciStore>>,
    changes: Arc<RuntimeChanges>,
    /// New versions `toolhost plugin add` brought that wait for a grant
    /// (held by admission), with where they came from: remembered as added
    /// at run time once a reload loads them ([`Installer::upgrades_loaded`]).
    held_adds: std::sync::Mutex<std::collections::HashMap<String, std::path::PathBuf>>,
}

impl Installer {
    /// Installs into `host`, pulling `oci://` plugins through `oci`
    /// (without one they are refused) and remembering run-time changes in
    /// `changes`.
    pub fn new(host: Arc<Host>, oci: Option<OciStore>, changes: RuntimeChanges) -> Installer {
        Installer { host, oci: oci.map(Arc::new), changes: Arc::new(changes), held_adds: Default::default() }
    }

    /// An installer for a host built in a test or a benchmark: no registry
    /// client, changes remembered in memory only.
    pub fn in_memory(host: Arc<Host>) -> Installer {
        Installer::new(host, None, RuntimeChanges::default())
    }

    /// The host plugins are installed into.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// The registry client, when configured.
    pub fn oci(&self) -> Option<&OciStore> {
        self.oci.as_deref()
    }

    /// What the operator added and removed while the host served.
    pub fn runtime_changes(&self) -> &RuntimeChanges {
        &self.changes
    }

    /// Loads and registers every built-in plugin the operator has not
    /// removed (see [`crate::builtin::add_builtins`]).
    pub fn add_builtins(&self) -> Result<(), AddPluginError> {
        crate::builtin::add_builtins_except(self.host.admission(), |name| {
            let removed = self.changes.is_removed(name, None);
            if removed {
                tracing::info!(plugin = name, "not loaded: removed by `toolhost plugin remove` (add it again to undo)");
            }
            removed
        })
    }

    /// Loads a component file (through the trust policy) and registers its
    /// tools. Fails if a provider of that name exists.
    pub fn add_plugin_file(&self, path: &Path) -> Result<Arc<WasmPlugin>, AddPluginError> {
        let plugin = self.host.admission().add_plugin_file(path)?;
        self.changes.note_source(plugin.name(), path);
        Ok(plugin)
    }

    /// Pulls a plugin from a registry (through the cache; at the digest
    /// `toolhost.lock` pins for this reference, if any), then loads it like
    /// a file: the trust policy decides on the signature inside. Fails if a
    /// provider of that name exists.
    pub fn add_plugin_ref(&self, r: &OciRef) -> Result<(Arc<WasmPlugin>, Fetched), AddPluginError> {
        let (name, fetched) =
            self.fetch_ref(r).inspect_err(|e| self.host.admission().audit_refused(r.short_name(), None, e))?;
        let plugin = self.host.admission().add_plugin_bytes(&name, &fetched.bytes, fetched.path.as_deref())?;
        if let Some(p) = &fetched.path {
            self.changes.note_source(&name, p);
        }
        tracing::info!(plugin = %name, reference = %r, digest = %fetched.digest, from_cache = fetched.from_cache, "plugin pulled");
        Ok((plugin, fetched))
    }

    /// [`crate::Admission::install_plugin_file`], remembering the file as the plugin's
    /// source.
    pub fn install_plugin_file(&self, path: &Path) -> Result<Installed, AddPluginError> {
        let installed = self.host.admission().install_plugin_file(path)?;
        self.changes.note_source(&installed.name, path);
        Ok(installed)
    }

    /// [`crate::Admission::install_plugin_file`] for a registry reference: pulled (the
    /// lock file's digest for it, if any), then the same trust policy,
    /// capability check and atomic swap as a file.
    pub fn install_plugin_ref(&self, r: &OciRef) -> Result<Installed, AddPluginError> {
        let (name, fetched) = match self.fetch_ref(r) {
            Ok(f) => f,
            Err(e) => {
                self.host.admission().audit_refused(r.short_name(), None, &e);
                return Err(e);
            }
        };
        let mut installed =
            self.host.admission().install_plugin_bytes(&name, &fetched.bytes, fetched.path.as_deref())?;
        if let Some(p) = &fetched.path {
            self.changes.note_source(&name, p);
        }
        installed.source = Some(fetched.pinned());
        Ok(installed)
    }

    /// The digest `toolhost.lock` pins for reference `r`, if any.
    pub fn locked_digest(&self, r: &OciRef) -> Option<String> {
        let text = r.to_string();
        self.host
            .admission()
            .trust()
            .lock
            .as_ref()?
            .plugins
            .values()
            .find(|e| e.source.as_deref() == Some(text.as_str()))
            .and_then(|e| e.digest.clone())
    }

    /// Pulls `r` and names the plugin it holds: the signed name, or (for an
    /// unsigned component) the repository's last segment.
    fn fetch_ref(&self, r: &OciRef) -> Result<(String, Fetched), AddPluginError> {
        let store = self.oci.as_ref().ok_or_else(|| {
            AddPluginError::from(OciError::Reference {
                reference: r.to_string(),
                reason: "this host has no registry client".into(),
            })
        })?;
        let fetched = store.fetch(r, self.locked_digest(r).as_deref())?;
        let name = match crate::package::parse(&fetched.bytes)?.verify(r.short_name())? {
            Some(v) => v.manifest.name,
            None => r.short_name().to_string(),
        };
        if !crate::tool::valid_tool_name(&name) {
            return Err(AddPluginError::Package(crate::package::PackageError::Malformed(format!(
                "{r}: {:?} is not a valid plugin name",
                crate::tool::log_safe(&name)
            ))));
        }
        Ok((name, fetched))
    }

    /// Removes a plugin while the host serves. Calls already running finish.
    pub fn uninstall_plugin(&self, name: &str) -> Result<(), AddPluginError> {
        self.host.admission().uninstall_plugin(name)
    }

    /// `toolhost plugin add`: [`Installer::install_plugin_file`] (or, for an
    /// `oci://` reference, [`Installer::install_plugin_ref`]: pulled through
    /// the registry cache, and pulled again at the next start), then
    /// remembered in the run-time changes (restored at the next start,
    /// undoing an earlier `plugin remove` of that name).
    ///
    /// In a fleet only a registry reference is taken, and the change is
    /// announced with the digest pulled, so that every host runs the same
    /// code.
    pub fn add_plugin_at_run_time(&self, path: &Path) -> Result<Installed, AddPluginError> {
        let reference = path.to_str().filter(|p| crate::oci::is_reference(p));
        if self.changes.cluster().is_some() && reference.is_none() {
            return Err(AddPluginError::Fleet(format!(
                "{}: in a fleet (cluster.url) plugins come from a registry, so that every host pulls the same code: push it (toolhost push {} oci://REGISTRY/REPO:TAG) and add the oci:// reference",
                path.display(),
                path.display()
            )));
        }
        let installed = match reference {
            Some(text) => self.install_plugin_ref(&OciRef::parse(text)?),
            None => self.install_plugin_file(path),
        };
        let installed = match installed {
            Ok(i) => i,
            // Held for a secret: the operator's add stands. It is
            // remembered now, so that the plugin the secret loads is the
            // one added at run time, and is there after a restart.
            Err(e @ AddPluginError::MissingSecrets { .. }) => {
                if let AddPluginError::MissingSecrets { plugin, .. } = &e {
                    self.changes.plugin_added(plugin, path);
                }
                return Err(e);
            }
            // A new version held for a grant: the running one stays, and
            // stays what a restart loads, until a reload loads this one.
            Err(
                e @ (AddPluginError::NewCapabilities { .. }
                | AddPluginError::NewHosts { .. }
                | AddPluginError::Ungranted { .. }),
            ) => {
                if let AddPluginError::NewCapabilities { plugin, .. }
                | AddPluginError::NewHosts { plugin, .. }
                | AddPluginError::Ungranted { plugin, .. } = &e
                {
                    self.held_adds.lock().unwrap_or_else(|p| p.into_inner()).insert(plugin.clone(), path.to_path_buf());
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        self.changes.plugin_added(&installed.name, path);
        let pinned = installed.source.clone().unwrap_or_else(|| path.display().to_string());
        self.changes
            .announce(crate::cluster::Change::PluginAdded { name: installed.name.clone(), reference: pinned })
            .map_err(|e| AddPluginError::Fleet(e.to_string()))?;
        Ok(installed)
    }

    /// What a reload did to plugins (`changes`): each held plugin it loaded
    /// (or granted, to wait for its secret) that `toolhost plugin add` or
    /// `toolhost install` brought is remembered as added at run time, so
    /// that a restart loads it.
    pub fn upgrades_loaded(&self, changes: &[crate::PluginChange]) {
        let mut held = self.held_adds.lock().unwrap_or_else(|p| p.into_inner());
        // Granted and waiting for a secret: remembered now, as a run-time
        // add held for its secret is (the secret loads this one).
        for c in changes.iter().filter(|c| matches!(c.action.as_str(), "upgraded" | "installed" | "waiting")) {
            if let Some(path) = held.remove(&c.plugin) {
                self.changes.plugin_added(&c.plugin, &path);
            }
        }
    }

    /// `toolhost plugin upgrade --canary`: the version in `path` (a file,
    /// or an `oci://` reference pulled as `plugin add` pulls it) takes a
    /// share of the calls of the plugin of its name, on `terms`
    /// ([`crate::Admission::start_canary`]). When it is promoted it is
    /// remembered as added at run time (what a restart loads); rolled back,
    /// the serving version stays what a restart loads. One host's: a
    /// fleet's hosts swap together (`plugin add`).
    pub fn canary_at_run_time(
        &self,
        path: &Path,
        terms: toolhost_admission::canary::CanaryTerms,
        expected: Option<&str>,
    ) -> Result<toolhost_admission::canary::CanaryStatus, AddPluginError> {
        if self.changes.cluster().is_some() {
            return Err(AddPluginError::Fleet(
                "a canary runs on one host, and a fleet's hosts run the same code: upgrade with `plugin upgrade --now` (every host swaps)".into(),
            ));
        }
        let (name, bytes, kept) = match path.to_str().filter(|p| crate::oci::is_reference(p)) {
            Some(text) => {
                let r = OciRef::parse(text)?;
                let (name, fetched) =
                    self.fetch_ref(&r).inspect_err(|e| self.host.admission().audit_refused(r.short_name(), None, e))?;
                (name, fetched.bytes, fetched.path)
            }
            None => {
                let name = crate::runtime::plugin_name_from_path(path);
                let limit = self.host.pipeline().runtime().limits().max_component_bytes + (1 << 16);
                let bytes = crate::runtime::read_bounded(path, limit)
                    .map_err(|kind| crate::runtime::LoadError { plugin: name.clone(), kind })?;
                (name, bytes, Some(path.to_path_buf()))
            }
        };
        if let Some(want) = expected.filter(|w| *w != name) {
            return Err(AddPluginError::Canary {
                plugin: want.to_string(),
                reason: format!("{} is plugin {name:?}, not a version of {want:?}", path.display()),
            });
        }
        let status = self.host.admission().start_canary(&name, &bytes, kept.as_deref(), terms)?;
        // Promoted, it is what a restart loads.
        let (host, changes, source, new) =
            (self.host.clone(), self.changes.clone(), path.to_path_buf(), status.new_sha256.clone());
        std::thread::Builder::new()
            .name("toolhost-canary".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    match host.admission().canary_status(&name) {
                        Some(s) if s.state == toolhost_admission::canary::CanaryState::Running => continue,
                        Some(s)
                            if s.state == toolhost_admission::canary::CanaryState::Promoted && s.new_sha256 == new =>
                        {
                            changes.plugin_added(&name, &source);
                        }
                        _ => {}
                    }
                    break;
                }
            })
            .map_err(|e| AddPluginError::Fleet(format!("starting the canary's watcher: {e}")))?;
        Ok(status)
    }

    /// `toolhost plugin remove`: [`crate::Admission::uninstall_plugin`], then
    /// remembered: the plugin stays unloaded (at the next start, and when
    /// its file in the plugins directory is seen again) until its file
    /// changes or the operator adds it again.
    pub fn remove_plugin_at_run_time(&self, name: &str) -> Result<(), AddPluginError> {
        self.host.admission().uninstall_plugin(name)?;
        self.held_adds.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        self.changes.plugin_removed(name);
        self.changes
            .announce(crate::cluster::Change::PluginRemoved { name: name.to_string() })
            .map_err(|e| AddPluginError::Fleet(e.to_string()))
    }
}
