//! Adding, replacing and removing plugins: the built-ins at start, files
//! at start and while the host serves (the admin API and the plugins
//! directory take the same path).

use super::Host;
use crate::builtin::BUILTINS;
use crate::capabilities::{CAPABILITIES, GrantError};
use crate::oci::{Fetched, OciError, OciRef};
use crate::package::Provenance;
use crate::registry::RegistryError;
use crate::runtime::{LoadError, WasmPlugin};
use crate::tool::{Capability, Provider as _, ProviderKind};
use std::path::Path;
use std::sync::Arc;

/// Whether `p` looks like a plugin file: `*.wasm`, not hidden.
pub fn is_plugin_file(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "wasm")
        && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| !n.starts_with('.'))
}

/// The plugin files in `dir`, sorted.
pub fn plugin_files(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut v: Vec<std::path::PathBuf> =
        std::fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| is_plugin_file(p)).collect();
    v.sort();
    Ok(v)
}

/// Why a plugin could not be added to the host.
#[derive(Debug, thiserror::Error)]
pub enum AddPluginError {
    /// The component did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The registry refused it (a name clash).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Its grants cannot be honoured.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The registry reference is invalid, the registry failed, or what it
    /// served is refused.
    #[error(transparent)]
    Oci(#[from] OciError),
    /// The trust policy refused the package (unsigned, untrusted, tampered, not the locked digest).
    #[error(transparent)]
    Package(#[from] crate::package::PackageError),
    /// A new version asks for capabilities the running one did not, and the
    /// operator has not granted them.
    #[error(
        "plugin {plugin:?}: the new version asks for {} which the running version did not, and plugins.grants.{plugin} does not grant {}; the running version stays. Grant {} first, then add it again",
        list(.new),
        if .new.len() == 1 { "it" } else { "them" },
        if .new.len() == 1 { "it" } else { "them" }
    )]
    NewCapabilities {
        /// Plugin name.
        plugin: String,
        /// What is new.
        new: Vec<Capability>,
    },
}

fn list(c: &[Capability]) -> String {
    c.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

/// What [`Host::install_plugin_file`] did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Installed {
    /// Plugin name.
    pub name: String,
    /// Component digest.
    pub digest: String,
    /// The digest of the version it replaced, if any.
    pub replaced: Option<String>,
    /// Its tools.
    pub tools: Vec<String>,
    /// Where it comes from.
    pub provenance: Provenance,
    /// Whether the component was compiled now or came from the cache.
    pub compiled: bool,
    /// The registry artifact it was pulled from (`oci://HOST/REPO@sha256:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl Host {
    /// Loads and registers every built-in plugin.
    pub fn add_builtins(&self) -> Result<(), AddPluginError> {
        for b in BUILTINS {
            if self.changes.is_removed(b.name, None) {
                tracing::info!(
                    plugin = b.name,
                    "not loaded: removed by `toolhost plugin remove` (add it again to undo)"
                );
                continue;
            }
            let added = (|| -> Result<Arc<WasmPlugin>, AddPluginError> {
                let plugin = Arc::new(self.runtime.load_with(b.name, b.bytes, self.grants_for(b.name)?)?);
                self.registry.add(plugin.clone())?;
                Ok(plugin)
            })();
            match &added {
                Ok(plugin) => {
                    self.provenance
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(b.name.to_string(), Provenance::Builtin);
                    self.audit_loaded(plugin, None, None, &Provenance::Builtin);
                }
                Err(e) => self.audit_refused(b.name, None, e),
            }
            added?;
        }
        Ok(())
    }

    /// Loads a component file (through the trust policy) and registers its
    /// tools. Fails if a provider of that name exists.
    pub fn add_plugin_file(&self, path: &Path) -> Result<Arc<WasmPlugin>, AddPluginError> {
        let name = crate::runtime::plugin_name_from_path(path);
        let bytes = self.read_plugin(path).inspect_err(|e| self.audit_refused(&name, Some(path), e))?;
        self.add_plugin_bytes(&name, &bytes, Some(path))
    }

    /// Pulls a plugin from a registry (through the cache; at the digest
    /// `toolhost.lock` pins for this reference, if any), then loads it like
    /// a file: the trust policy decides on the signature inside. Fails if a
    /// provider of that name exists.
    pub fn add_plugin_ref(&self, r: &OciRef) -> Result<(Arc<WasmPlugin>, Fetched), AddPluginError> {
        let (name, fetched) = self.fetch_ref(r).inspect_err(|e| self.audit_refused(r.short_name(), None, e))?;
        let plugin = self.add_plugin_bytes(&name, &fetched.bytes, fetched.path.as_deref())?;
        tracing::info!(plugin = %name, reference = %r, digest = %fetched.digest, from_cache = fetched.from_cache, "plugin pulled");
        Ok((plugin, fetched))
    }

    /// Loads `bytes` offered as plugin `name` (through the trust policy) and
    /// registers its tools; `path` is where they came from, for the audit.
    fn add_plugin_bytes(
        &self,
        name: &str,
        bytes: &[u8],
        path: Option<&Path>,
    ) -> Result<Arc<WasmPlugin>, AddPluginError> {
        let added = (|| -> Result<_, AddPluginError> {
            let (component, provenance) = self.trust.load().admit(name, bytes)?;
            let plugin = Arc::new(self.runtime.load_with(name, component, self.grants_for(name)?)?);
            self.registry.add(plugin.clone())?;
            Ok((plugin, provenance))
        })();
        match added {
            Ok((plugin, provenance)) => {
                if let Some(p) = path {
                    self.changes.note_source(name, p);
                }
                self.audit_loaded(&plugin, path, None, &provenance);
                self.provenance.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), provenance);
                Ok(plugin)
            }
            Err(e) => {
                self.audit_refused(name, path, &e);
                Err(e)
            }
        }
    }

    /// The digest `toolhost.lock` pins for reference `r`, if any.
    pub fn locked_digest(&self, r: &OciRef) -> Option<String> {
        let text = r.to_string();
        self.trust
            .load()
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
            AddPluginError::Oci(OciError::Reference {
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

    /// Records a load (or, with `previous`, a replacement).
    fn audit_loaded(&self, plugin: &WasmPlugin, path: Option<&Path>, previous: Option<&str>, provenance: &Provenance) {
        use crate::tool::Provider as _;
        self.audit.write_plugin(&crate::audit::PluginRecord {
            time: crate::audit::now_rfc3339(),
            event: if previous.is_some() {
                crate::audit::PluginEventKind::PluginReplace
            } else {
                crate::audit::PluginEventKind::PluginLoad
            },
            plugin: plugin.name(),
            path,
            sha256: Some(plugin.digest()),
            previous_sha256: previous,
            origin: Some(provenance.describe()),
            capabilities_held: plugin.held().names(),
            error: None,
        });
    }

    /// Records a refused load or replacement.
    fn audit_refused(&self, name: &str, path: Option<&Path>, error: &AddPluginError) {
        self.audit.write_plugin(&crate::audit::PluginRecord {
            time: crate::audit::now_rfc3339(),
            event: crate::audit::PluginEventKind::PluginRefused,
            plugin: name,
            path,
            sha256: None,
            previous_sha256: None,
            origin: None,
            capabilities_held: Vec::new(),
            error: Some(error.to_string()),
        });
    }

    /// Reads a plugin file: the component limit, plus room for a package
    /// section (manifest and signature).
    fn read_plugin(&self, path: &Path) -> Result<Vec<u8>, AddPluginError> {
        let limit = self.runtime.limits().max_component_bytes + (1 << 16);
        crate::runtime::read_bounded(path, limit)
            .map_err(|kind| LoadError { plugin: crate::runtime::plugin_name_from_path(path), kind }.into())
    }

    /// Adds or replaces a plugin from a file while the host serves: the hot
    /// path of `toolhost plugin add` and the plugins-directory watcher.
    ///
    /// The file passes the trust policy, compiles (through the on-disk
    /// cache) and instantiates before anything changes; a new version that
    /// asks for capabilities the running one did not must have them granted
    /// first. Then one atomic registry swap: calls already running finish on
    /// the version they started with, new calls get the new one. On any
    /// error the running version keeps serving. Blocking: call it off the
    /// request path.
    pub fn install_plugin_file(&self, path: &Path) -> Result<Installed, AddPluginError> {
        let _one_at_a_time = self.installing.lock().unwrap_or_else(|p| p.into_inner());
        let name = crate::runtime::plugin_name_from_path(path);
        let installed = self.read_plugin(path).and_then(|bytes| self.install_locked(&name, &bytes, Some(path)));
        if let Err(e) = &installed {
            self.audit_refused(&name, Some(path), e);
        }
        installed
    }

    /// [`Host::install_plugin_file`] for a registry reference: pulled (the
    /// lock file's digest for it, if any), then the same trust policy,
    /// capability check and atomic swap as a file.
    pub fn install_plugin_ref(&self, r: &OciRef) -> Result<Installed, AddPluginError> {
        let _one_at_a_time = self.installing.lock().unwrap_or_else(|p| p.into_inner());
        let (name, fetched) = match self.fetch_ref(r) {
            Ok(f) => f,
            Err(e) => {
                self.audit_refused(r.short_name(), None, &e);
                return Err(e);
            }
        };
        let installed = self.install_locked(&name, &fetched.bytes, fetched.path.as_deref());
        match installed {
            Ok(mut i) => {
                i.source = Some(fetched.pinned());
                Ok(i)
            }
            Err(e) => {
                self.audit_refused(&name, fetched.path.as_deref(), &e);
                Err(e)
            }
        }
    }

    fn install_locked(&self, name: &str, bytes: &[u8], path: Option<&Path>) -> Result<Installed, AddPluginError> {
        let name = name.to_string();
        let (component, provenance) = self.trust.load().admit(&name, bytes)?;
        let compiled = self.runtime.compile(&name, component)?;
        let was_compiled = matches!(compiled.source, crate::runtime::CompileSource::Compiled);
        let catalog = self.registry.snapshot();
        let old = catalog.provider(&name).cloned();
        let grants = self.grants_for(&name)?;
        if let Some(old) = old.as_ref().filter(|p| p.kind() == ProviderKind::Wasm) {
            let before = CAPABILITIES.imported(&old.describe().imports);
            let new: Vec<Capability> = CAPABILITIES
                .imported(&compiled.imports)
                .difference(before)
                .iter()
                .filter(|c| !grants.grants(*c))
                .collect();
            if !new.is_empty() {
                return Err(AddPluginError::NewCapabilities { plugin: name, new });
            }
        }
        let plugin = Arc::new(self.runtime.instantiate_compiled(compiled, grants)?);
        let replaced = self.registry.upsert(plugin.clone())?;
        // A new version replaces one a reload held back for want of a grant.
        self.withheld.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
        if let Some(old) = &replaced {
            // Measurements of the old version say nothing about the new one.
            for t in old.tools() {
                self.budget.forget(&t.name);
            }
        }
        self.provenance.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), provenance.clone());
        if let Some(p) = path {
            self.changes.note_source(&name, p);
        }
        tracing::info!(plugin = %crate::tool::log_safe(&name), digest = %plugin.digest(), replaced = replaced.is_some(), "plugin installed");
        self.audit_loaded(&plugin, path, replaced.as_ref().and_then(|p| p.fingerprint()), &provenance);
        Ok(Installed {
            name,
            digest: plugin.digest().to_string(),
            replaced: replaced.map(|p| p.fingerprint().unwrap_or_default().to_string()),
            tools: plugin.tools().iter().map(|t| t.name.clone()).collect(),
            provenance,
            compiled: was_compiled,
            source: None,
        })
    }

    /// Removes a plugin while the host serves. Calls already running finish.
    pub fn uninstall_plugin(&self, name: &str) -> Result<(), AddPluginError> {
        let _one_at_a_time = self.installing.lock().unwrap_or_else(|p| p.into_inner());
        // One a reload held back for want of a grant is forgotten.
        if let Some(held) = self.withheld.lock().unwrap_or_else(|p| p.into_inner()).remove(name) {
            tracing::info!(plugin = %crate::tool::log_safe(name), "plugin removed (a config reload had held it back)");
            self.audit_removed(name, Some(held.digest()), Vec::new(), None);
            return Ok(());
        }
        match self.registry.snapshot().provider(name) {
            Some(p) if p.kind() != ProviderKind::Wasm => {
                return Err(AddPluginError::Registry(RegistryError::UnknownProvider(format!(
                    "{name} (an external MCP server: use `toolhost server remove`)"
                ))));
            }
            _ => {}
        }
        Ok(self.remove_registered(name, None)?)
    }

    /// Takes a plugin out of the registry, forgets its provenance and
    /// audits the removal; `reason`: why, when the operator did not ask
    /// (a reload took away what it needs).
    pub(super) fn remove_registered(&self, name: &str, reason: Option<&str>) -> Result<(), RegistryError> {
        let removed = self.registry.remove(name)?;
        self.provenance.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        match reason {
            Some(r) => tracing::warn!(plugin = %crate::tool::log_safe(name), "{r}"),
            None => tracing::info!(plugin = %crate::tool::log_safe(name), "plugin removed"),
        }
        self.audit_removed(name, removed.fingerprint(), removed.held().names(), reason.map(str::to_string));
        Ok(())
    }

    /// The `plugin_remove` audit record.
    fn audit_removed(&self, name: &str, previous: Option<&str>, held: Vec<&'static str>, error: Option<String>) {
        self.audit.write_plugin(&crate::audit::PluginRecord {
            time: crate::audit::now_rfc3339(),
            event: crate::audit::PluginEventKind::PluginRemove,
            plugin: name,
            path: None,
            sha256: None,
            previous_sha256: previous,
            origin: None,
            capabilities_held: held,
            error,
        });
    }

    /// `toolhost plugin add`: [`Host::install_plugin_file`], then
    /// remembered in the run-time changes (restored at the next start,
    /// undoing an earlier `plugin remove` of that name).
    ///
    /// `path` may be an `oci://` reference: pulled through the registry
    /// cache, and pulled again at the next start.
    pub fn add_plugin_at_run_time(&self, path: &Path) -> Result<Installed, AddPluginError> {
        let installed = match path.to_str().filter(|p| crate::oci::is_reference(p)) {
            Some(text) => self.install_plugin_ref(&crate::oci::OciRef::parse(text)?)?,
            None => self.install_plugin_file(path)?,
        };
        self.changes.plugin_added(&installed.name, path);
        Ok(installed)
    }

    /// `toolhost plugin remove`: [`Host::uninstall_plugin`], then
    /// remembered: the plugin stays unloaded (at the next start, and when
    /// its file in the plugins directory is seen again) until its file
    /// changes or the operator adds it again.
    pub fn remove_plugin_at_run_time(&self, name: &str) -> Result<(), AddPluginError> {
        self.uninstall_plugin(name)?;
        self.changes.plugin_removed(name);
        Ok(())
    }
}
