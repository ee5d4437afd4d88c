//! Adding, replacing and removing plugins: the built-ins at start, files
//! and bytes at start and while the host serves (the admin API, the
//! plugins directory and registry pulls take the same path). Where bytes
//! came from is the caller's business: this module sees a name, the bytes
//! and, for the audit, the file they were read from.

use crate::Admission;
use crate::capabilities::{CAPABILITIES, GrantError};
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
    /// A canary upgrade cannot start (nothing serving to compare with, one
    /// under way, tools the new version lacks, terms out of range).
    #[error("plugin {plugin:?}: no canary: {reason}")]
    Canary {
        /// Plugin name.
        plugin: String,
        /// Why.
        reason: String,
    },
    /// Its tools cannot be exposed under the names the config gives them.
    #[error("plugin {plugin:?}: {reason}")]
    Name {
        /// Plugin name.
        plugin: String,
        /// Why.
        reason: String,
    },
    /// Its grants cannot be honoured.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The plugin could not be fetched: for an `oci://` reference, the
    /// reference is invalid, the registry failed, or what it served is
    /// refused.
    #[error(transparent)]
    Fetch(Box<dyn std::error::Error + Send + Sync>),
    /// Refused or only half done in a fleet (`cluster.url`): a plugin
    /// file where a registry reference is needed, or a change made here
    /// that the control plane did not take.
    #[error("{0}")]
    Fleet(String),
    /// The campaign memory the plugin's host functions use could not be
    /// opened.
    #[error("opening the campaign memory: {0}")]
    Memory(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The trust policy refused the package (unsigned, untrusted, tampered, not the locked digest).
    #[error(transparent)]
    Package(#[from] crate::package::PackageError),
    /// A new version asks for capabilities the running one did not, and the
    /// operator has not granted them.
    #[error(
        "plugin {plugin:?}: the new version asks for {} which the running version did not, and plugins.grants.{plugin} does not grant {}; the running version stays and the new one is held: grant {} in plugins.grants.{plugin} and reload (toolhost reload), and it loads",
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
    /// A new version asks to reach origins the running one did not ask
    /// for, and its grants do not cover them.
    #[error(
        "plugin {plugin:?}: the new version asks to reach {} over HTTP, which the running version did not ask for and plugins.grants.{plugin}.http does not grant; the running version stays and the new one is held: grant {} in plugins.grants.{plugin}.http and reload (toolhost reload), and it loads",
        .hosts.join(", "),
        if .hosts.len() == 1 { "it" } else { "them" }
    )]
    NewHosts {
        /// Plugin name.
        plugin: String,
        /// The origins asked for and not granted.
        hosts: Vec<String>,
    },
    /// A plugin new to this host asks for what its grants do not give: it is
    /// held, and the reload that grants it loads it.
    #[error(
        "plugin {plugin:?} is held until granted: it asks for {}, which plugins.grants.{plugin} does not grant; grant {} there and reload (toolhost reload), and it loads",
        ungranted_words(.capabilities, .hosts),
        if .capabilities.len() + .hosts.len() == 1 { "it" } else { "them" }
    )]
    Ungranted {
        /// Plugin name.
        plugin: String,
        /// Capabilities it needs to load, not granted.
        capabilities: Vec<Capability>,
        /// Origins its signed manifest asks to reach, not granted.
        hosts: Vec<String>,
    },
    /// Its manifest names secrets that are not set: it is held (an older
    /// version keeps serving) until they are.
    #[error(
        "plugin {plugin:?} is held: it needs the secret{} {}, not set; set {} with {} (the value on standard input) and it loads",
        if .missing.len() == 1 { "" } else { "s" },
        .missing.join(", "),
        if .missing.len() == 1 { "it" } else { "them" },
        .missing.iter().map(|m| format!("`toolhost secret set {plugin} {m}`")).collect::<Vec<_>>().join(" and ")
    )]
    MissingSecrets {
        /// Plugin name.
        plugin: String,
        /// The secrets not set.
        missing: Vec<String>,
    },
}

fn ungranted_words(capabilities: &[Capability], hosts: &[String]) -> String {
    let mut out: Vec<String> =
        capabilities.iter().map(|c| format!("the {c} capability ({})", CAPABILITIES.interfaces_in_words(*c))).collect();
    if !hosts.is_empty() {
        out.push(format!("HTTP to {}", hosts.join(", ")));
    }
    out.join(" and ")
}

fn list(c: &[Capability]) -> String {
    c.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

/// What [`Admission::install_plugin_file`] did.
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

/// A new version refused because it asks for more than its grants give
/// (new capabilities, or new origins), kept while the running version
/// serves: a reload whose grants cover it loads it
/// ([`Admission::load_held_upgrades`]).
#[derive(Debug)]
pub(crate) struct HeldUpgrade {
    bytes: Arc<[u8]>,
    path: Option<std::path::PathBuf>,
    why: String,
}

impl Admission {
    /// Loads and registers a built-in plugin: `bytes` is a component the
    /// host ships (no trust policy: its provenance is [`Provenance::Builtin`]).
    pub fn add_builtin(&self, name: &str, bytes: &[u8]) -> Result<(), AddPluginError> {
        let added = (|| -> Result<Arc<WasmPlugin>, AddPluginError> {
            let mut plugin = self.pipeline.runtime().load_with(name, bytes, self.grants.grants_for(name)?)?;
            self.expose(name, &mut plugin)?;
            let plugin = Arc::new(plugin);
            self.pipeline.registry().add(plugin.clone())?;
            Ok(plugin)
        })();
        match &added {
            Ok(plugin) => {
                self.set_provenance(name, Some(Provenance::Builtin));
                self.audit_loaded(plugin, None, None, &Provenance::Builtin);
            }
            Err(e) => self.audit_refused(name, None, e),
        }
        added.map(|_| ())
    }

    /// Loads a component file (through the trust policy) and registers its
    /// tools. Fails if a provider of that name exists.
    pub fn add_plugin_file(&self, path: &Path) -> Result<Arc<WasmPlugin>, AddPluginError> {
        let name = crate::runtime::plugin_name_from_path(path);
        let bytes = self.read_plugin(path).inspect_err(|e| self.audit_refused(&name, Some(path), e))?;
        self.add_plugin_bytes(&name, &bytes, Some(path))
    }

    /// Loads `bytes` offered as plugin `name` (through the trust policy) and
    /// registers its tools; `path` is where they came from, for the audit.
    /// Fails if a provider of that name exists.
    pub fn add_plugin_bytes(
        &self,
        name: &str,
        bytes: &[u8],
        path: Option<&Path>,
    ) -> Result<Arc<WasmPlugin>, AddPluginError> {
        let added = (|| -> Result<_, AddPluginError> {
            let (component, provenance) = self.trust.load().admit(name, bytes)?;
            let mut plugin = self.pipeline.runtime().load_with(name, component, self.grants.grants_for(name)?)?;
            self.expose(name, &mut plugin)?;
            let plugin = Arc::new(plugin);
            let missing = self.values.missing_secrets(name, &provenance);
            // (A name already taken fails below, as without secrets.)
            if !missing.is_empty() && self.pipeline.registry().snapshot().provider(name).is_none() {
                return Err(self.values.await_secrets(plugin, provenance, path.map(Path::to_path_buf), missing));
            }
            self.pipeline.registry().add(plugin.clone())?;
            Ok((plugin, provenance))
        })();
        match added {
            Ok((plugin, provenance)) => {
                self.audit_loaded(&plugin, path, None, &provenance);
                self.set_provenance(name, Some(provenance));
                Ok(plugin)
            }
            Err(e) => {
                self.audit_refused(name, path, &e);
                Err(e)
            }
        }
    }

    /// Records a load (or, with `previous`, a replacement).
    pub(crate) fn audit_loaded(
        &self,
        plugin: &WasmPlugin,
        path: Option<&Path>,
        previous: Option<&str>,
        provenance: &Provenance,
    ) {
        use crate::tool::Provider as _;
        self.pipeline.audit().write_plugin(&crate::audit::PluginRecord {
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

    /// Records a refused load or replacement (also one whose bytes could
    /// not be fetched).
    pub fn audit_refused(&self, name: &str, path: Option<&Path>, error: &AddPluginError) {
        self.pipeline.audit().write_plugin(&crate::audit::PluginRecord {
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
        let limit = self.pipeline.runtime().limits().max_component_bytes + (1 << 16);
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
        let _one_at_a_time = self.one_at_a_time();
        let name = crate::runtime::plugin_name_from_path(path);
        let installed = self.read_plugin(path).and_then(|bytes| self.install_locked(&name, &bytes, Some(path)));
        if let Err(e) = &installed {
            self.audit_refused(&name, Some(path), e);
        }
        installed
    }

    /// [`Admission::install_plugin_file`] for bytes fetched elsewhere (a
    /// registry pull): the same trust policy, capability check and atomic
    /// swap; `path` is where they are kept, for the audit.
    pub fn install_plugin_bytes(
        &self,
        name: &str,
        bytes: &[u8],
        path: Option<&Path>,
    ) -> Result<Installed, AddPluginError> {
        let _one_at_a_time = self.one_at_a_time();
        let installed = self.install_locked(name, bytes, path);
        if let Err(e) = &installed {
            self.audit_refused(name, path, e);
        }
        installed
    }

    fn install_locked(&self, name: &str, bytes: &[u8], path: Option<&Path>) -> Result<Installed, AddPluginError> {
        let prepared = self.prepare_locked(name, bytes, path)?;
        self.commit_locked(prepared, path)
    }

    /// Everything [`Admission::install_plugin_bytes`] checks before the
    /// swap: the trust policy, the compile, the held-upgrade rule, the
    /// secrets; the new version instantiated and named, not registered.
    pub(crate) fn prepare_locked(
        &self,
        name: &str,
        bytes: &[u8],
        path: Option<&Path>,
    ) -> Result<Prepared, AddPluginError> {
        let name = name.to_string();
        let (component, provenance) = self.trust.load().admit(&name, bytes)?;
        let compiled = self.pipeline.runtime().compile(&name, component)?;
        let was_compiled = matches!(compiled.source, crate::runtime::CompileSource::Compiled);
        let catalog = self.pipeline.registry().snapshot();
        let old = catalog.provider(&name).cloned();
        let grants = self.grants.grants_for(&name)?;
        if let Some(old) = old.as_ref().filter(|p| p.kind() == ProviderKind::Wasm) {
            let before = self.provenance(old.name());
            let asked = |p: Option<&Provenance>| match p {
                Some(Provenance::Signed { manifest, .. }) => manifest.http_hosts.clone(),
                _ => Vec::new(),
            };
            let held = upgrade_held(
                &name,
                (&old.describe().imports, &asked(before.as_ref())),
                (&compiled.imports, &asked(Some(&provenance))),
                |c| grants.grants(c),
                |hosts| match grants.extensions.get(Capability::Http) {
                    Some(granted) => granted.uncovered(hosts),
                    None => hosts.to_vec(),
                },
            );
            if let Some(why) = held {
                return Err(self.hold_upgrade(why, bytes, path));
            }
        } else if old.is_none() {
            // New here: what it needs to load at all, and the origins it
            // asks for, against its grants; held until they are given.
            let asked = match &provenance {
                Provenance::Signed { manifest, .. } => manifest.http_hosts.clone(),
                _ => Vec::new(),
            };
            let imported = CAPABILITIES.imported(&compiled.imports);
            let capabilities: Vec<Capability> = imported
                .difference(CAPABILITIES.inert_without_grant(imported))
                .iter()
                .filter(|c| !grants.grants(*c))
                .collect();
            let hosts = match grants.extensions.get(Capability::Http) {
                Some(granted) => granted.uncovered(&asked),
                None => asked,
            };
            if !capabilities.is_empty() || !hosts.is_empty() {
                let why = AddPluginError::Ungranted { plugin: name.clone(), capabilities, hosts };
                return Err(self.hold_upgrade(why, bytes, path));
            }
        }
        let mut plugin = self.pipeline.runtime().instantiate_compiled(compiled, grants)?;
        self.expose(&name, &mut plugin)?;
        let plugin = Arc::new(plugin);
        let missing = self.values.missing_secrets(&name, &provenance);
        if !missing.is_empty() {
            return Err(self.values.await_secrets(plugin, provenance, path.map(Path::to_path_buf), missing));
        }
        Ok(Prepared { name, plugin, provenance, was_compiled })
    }

    /// Swaps a prepared version in, in one atomic registry step.
    pub(crate) fn commit_locked(&self, prepared: Prepared, path: Option<&Path>) -> Result<Installed, AddPluginError> {
        let Prepared { name, plugin, provenance, was_compiled } = prepared;
        let replaced = self.pipeline.registry().upsert(plugin.clone())?;
        if let Some(old) = &replaced {
            self.canary_ended_by(old, "a new version added at once (plugin add)");
        }
        // A new version replaces one a reload held back for want of a grant,
        // or one waiting for its secrets.
        self.withheld.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
        self.values.forget_awaiting(&name);
        self.upgrades.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
        if let Some(old) = &replaced {
            // Measurements of the old version say nothing about the new one.
            for t in old.tools() {
                self.pipeline.budget().forget(&t.name);
            }
        }
        self.set_provenance(&name, Some(provenance.clone()));
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

    /// The names `plugin`'s tools are exposed under: with
    /// `plugins.prefix.<plugin>`, every tool's name behind that prefix;
    /// without one, a tool whose name another provider already serves, or
    /// that lies under another plugin's configured prefix, as
    /// `<plugin>_<tool>`, with a warning naming both and the key that
    /// chooses instead. A configured prefix owns every name under it,
    /// whether its plugin is loaded yet or not, so the names do not depend
    /// on the order plugins load in: a plugin without a prefix cannot take
    /// a name the prefixed plugin would get, and one whose renamed tool
    /// would still lie under another's prefix is refused.
    fn expose(&self, name: &str, plugin: &mut WasmPlugin) -> Result<(), AddPluginError> {
        let bad = |reason: String| AddPluginError::Name { plugin: name.to_string(), reason };
        let prefixes = self.grants.prefixes();
        if let Some(prefix) = prefixes.get(name) {
            plugin.offer_under_prefix(prefix);
            return plugin.expose_as(|t| format!("{prefix}{t}")).map_err(|e| bad(e.to_string()));
        }
        let owner = |tool: &str| {
            prefixes.iter().find(|(other, prefix)| other.as_str() != name && tool.starts_with(prefix.as_str()))
        };
        let catalog = self.pipeline.registry().snapshot();
        let clashing: std::collections::HashMap<String, String> = plugin
            .tools()
            .iter()
            .filter_map(|t| {
                if let Some((other, prefix)) = owner(&t.name) {
                    return Some((
                        t.name.clone(),
                        format!("{} is under plugins.prefix.{other} ({prefix}), which {other}'s tools own", t.name),
                    ));
                }
                let other = catalog.get(&t.name)?.provider.name().to_string();
                (other != name).then(|| (t.name.clone(), format!("{} is already served by {other}", t.name)))
            })
            .collect();
        if clashing.is_empty() {
            return Ok(());
        }
        for (tool, why) in &clashing {
            if let Some((other, prefix)) = owner(&format!("{name}_{tool}")) {
                return Err(bad(format!(
                    "{why}, and {name}_{tool} is under plugins.prefix.{other} ({prefix}) too: set plugins.prefix.{name} to choose a prefix"
                )));
            }
        }
        for (tool, why) in &clashing {
            tracing::warn!(
                plugin = %crate::tool::log_safe(name),
                "{why}: {name}'s is exposed as {name}_{tool} (set plugins.prefix.{name} to choose a prefix)"
            );
        }
        plugin
            .expose_as(|t| if clashing.contains_key(t) { format!("{name}_{t}") } else { t.to_string() })
            .map_err(|e| bad(e.to_string()))
    }

    /// Removes a plugin while the host serves. Calls already running finish.
    pub fn uninstall_plugin(&self, name: &str) -> Result<(), AddPluginError> {
        let _one_at_a_time = self.one_at_a_time();
        // A held new version goes with the plugin.
        self.upgrades.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        // One a reload held back for want of a grant is forgotten.
        if let Some(held) = self.withheld.lock().unwrap_or_else(|p| p.into_inner()).remove(name) {
            tracing::info!(plugin = %crate::tool::log_safe(name), "plugin removed (a config reload had held it back)");
            self.audit_removed(name, Some(held.digest()), Vec::new(), None);
            return Ok(());
        }
        // A version waiting for its secrets is forgotten; one serving (an
        // older version) is removed as well.
        let awaited = self.values.forget_awaiting(name);
        if awaited && self.pipeline.registry().snapshot().provider(name).is_none() {
            tracing::info!(plugin = %crate::tool::log_safe(name), "plugin removed (it was waiting for its secrets)");
            self.audit_removed(name, None, Vec::new(), None);
            return Ok(());
        }
        match self.pipeline.registry().snapshot().provider(name) {
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
    pub(crate) fn remove_registered(&self, name: &str, reason: Option<&str>) -> Result<(), RegistryError> {
        let removed = self.pipeline.registry().remove(name)?;
        self.canary_ended_by(&removed, reason.unwrap_or("plugin remove"));
        self.set_provenance(name, None);
        match reason {
            Some(r) => tracing::warn!(plugin = %crate::tool::log_safe(name), "{r}"),
            None => tracing::info!(plugin = %crate::tool::log_safe(name), "plugin removed"),
        }
        self.audit_removed(name, removed.fingerprint(), removed.held().names(), reason.map(str::to_string));
        Ok(())
    }

    /// The `plugin_remove` audit record.
    fn audit_removed(&self, name: &str, previous: Option<&str>, held: Vec<&'static str>, error: Option<String>) {
        self.pipeline.audit().write_plugin(&crate::audit::PluginRecord {
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
}

impl Admission {
    /// Holds the new version `error` refused (see [`HeldUpgrade`]); returns
    /// the error.
    fn hold_upgrade(&self, error: AddPluginError, bytes: &[u8], path: Option<&Path>) -> AddPluginError {
        let (AddPluginError::NewCapabilities { plugin, .. }
        | AddPluginError::NewHosts { plugin, .. }
        | AddPluginError::Ungranted { plugin, .. }) = &error
        else {
            return error;
        };
        tracing::warn!(plugin = %crate::tool::log_safe(plugin), "{error}");
        let held = HeldUpgrade { bytes: bytes.into(), path: path.map(Path::to_path_buf), why: error.to_string() };
        self.upgrades.lock().unwrap_or_else(|p| p.into_inner()).insert(plugin.clone(), held);
        error
    }

    /// The held new versions, with why, for [`Admission::withheld_plugins`].
    pub(crate) fn held_upgrades(&self) -> Vec<(String, String)> {
        let upgrades = self.upgrades.lock().unwrap_or_else(|p| p.into_inner());
        upgrades.iter().map(|(name, u)| (name.clone(), u.why.clone())).collect()
    }

    /// Tries each held new version again (under the grants in force, a
    /// reload's): loaded when they cover it now, held again when they do
    /// not. The caller holds the install lock.
    pub(crate) fn load_held_upgrades(&self) -> Vec<crate::PluginChange> {
        let held: Vec<(String, HeldUpgrade)> =
            self.upgrades.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        let mut out = Vec::new();
        for (name, up) in held {
            match self.install_locked(&name, &up.bytes, up.path.as_deref()) {
                Ok(installed) => {
                    tracing::info!(plugin = %crate::tool::log_safe(&name), "held plugin loaded (config reload)");
                    let digest = &installed.digest[..installed.digest.len().min(12)];
                    let (action, detail) = match installed.replaced {
                        Some(_) => (
                            "upgraded",
                            format!("the held new version ({digest}) loaded: its grants cover what it asks now"),
                        ),
                        None => (
                            "installed",
                            format!("held until granted, it loaded ({digest}): its grants cover what it asks now"),
                        ),
                    };
                    out.push(crate::PluginChange { plugin: name, action: action.into(), detail });
                }
                // Held again, by install_locked.
                Err(
                    AddPluginError::NewCapabilities { .. }
                    | AddPluginError::NewHosts { .. }
                    | AddPluginError::Ungranted { .. },
                ) => {}
                // Granted now, and waiting for a secret (loaded when it is set).
                Err(e @ AddPluginError::MissingSecrets { .. }) => {
                    out.push(crate::PluginChange { plugin: name, action: "waiting".into(), detail: e.to_string() });
                }
                Err(e) => {
                    self.audit_refused(&name, up.path.as_deref(), &e);
                    out.push(crate::PluginChange { plugin: name, action: "refused".into(), detail: e.to_string() });
                }
            }
        }
        out
    }
}

/// A new version, checked and instantiated, not yet registered.
pub(crate) struct Prepared {
    pub(crate) name: String,
    pub(crate) plugin: Arc<WasmPlugin>,
    pub(crate) provenance: Provenance,
    pub(crate) was_compiled: bool,
}

/// The rule an upgrade is held by: what the new version asks for beyond the
/// version installed that its grant does not give. `old` and `new` are each
/// a version's imports and the origins its signed manifest asks to reach
/// (none when unsigned); `granted` says whether the plugin's grant gives a
/// capability, `uncovered` which of some origins its `http` grant does not
/// cover. New capabilities are checked first. `plugin add` and `inspect`
/// both ask this, so that what `inspect` says loads does.
pub fn upgrade_held(
    plugin: &str,
    old: (&[String], &[String]),
    new: (&[String], &[String]),
    granted: impl Fn(Capability) -> bool,
    uncovered: impl Fn(&[String]) -> Vec<String>,
) -> Option<AddPluginError> {
    let before = CAPABILITIES.imported(old.0);
    let capabilities: Vec<Capability> =
        CAPABILITIES.imported(new.0).difference(before).iter().filter(|c| !granted(*c)).collect();
    if !capabilities.is_empty() {
        return Some(AddPluginError::NewCapabilities { plugin: plugin.to_string(), new: capabilities });
    }
    let asks: Vec<String> = new.1.iter().filter(|h| !old.1.contains(h)).cloned().collect();
    let hosts = uncovered(&asks);
    (!hosts.is_empty()).then(|| AddPluginError::NewHosts { plugin: plugin.to_string(), hosts })
}
