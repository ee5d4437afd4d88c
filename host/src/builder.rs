//! Assembling a host from a config: the runtime with its limits and
//! compile cache, the budget with its agents, the trust policy, the grants,
//! the audit trail, the memory store, the built-in plugins, plugin files,
//! the plugins directory and stored calibration. The `toolhost` binary,
//! the tests and the benchmarks all build hosts this way.

use crate::audit::AuditLog;
use crate::budget::Budget;
use crate::budget::persist::{MeasurementStore, MeasurementsFile};
use crate::calibrate::CalibrationStore;
use crate::config::Config;
use crate::memory::{MemoryError, MemoryStore};

/// Where the configured memory store is: `memory.url` (PostgreSQL), or the
/// SQLite file at `memory.path` (default `<state dir>/memory.sqlite3`).
#[derive(Debug, Clone, PartialEq)]
pub enum MemoryLocation {
    /// A SQLite file.
    File(PathBuf),
    /// A PostgreSQL URL.
    Postgres(String),
}

impl MemoryLocation {
    /// The store `cfg` names, with `state` as the state directory.
    pub fn of(cfg: &Config, state: &Path) -> MemoryLocation {
        match &cfg.memory.url {
            Some(url) => MemoryLocation::Postgres(url.clone()),
            None => MemoryLocation::File(
                cfg.memory.path.as_ref().map(|p| cfg.resolve(p)).unwrap_or_else(|| state.join("memory.sqlite3")),
            ),
        }
    }

    /// Opens (or creates) the store.
    pub fn open(&self) -> Result<MemoryStore, MemoryError> {
        match self {
            MemoryLocation::File(path) => MemoryStore::open(path),
            MemoryLocation::Postgres(url) => MemoryStore::connect(url),
        }
    }
}

impl std::fmt::Display for MemoryLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemoryLocation::File(path) => write!(f, "{}", path.display()),
            MemoryLocation::Postgres(url) => f.write_str(&crate::memory::redact(url)),
        }
    }
}

fn open_memory(cfg: &Config, state: &Path) -> Result<MemoryStore, BuildError> {
    let at = MemoryLocation::of(cfg, state);
    at.open().map_err(|source| BuildError::Memory { at: at.to_string(), source })
}
use crate::package::{LockFile, PackageError, TrustPolicy};
use crate::runtime::Runtime;
use crate::{Host, Installer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a host could not be assembled. Each message names the setting or
/// file at fault.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A `trust:` entry is not valid (a key's window, a revocation).
    #[error(transparent)]
    Trust(crate::package::TrustEntryError),
    /// The state directory is not private to this user.
    #[error("state directory: {0} (set --state-dir or TOOLHOST_STATE_DIR to a directory of your own)")]
    StateDir(crate::runtime::private::PrivateDirError),
    /// The wasm engine would not start with these limits.
    #[error("cannot start the wasm engine: {0}")]
    Engine(String),
    /// `plugins.http_ca_files` or `plugins.http_resolve` is unusable.
    #[error(transparent)]
    Http(#[from] toolhost_http::HttpSetupError),
    /// A trusted key file is missing or malformed.
    #[error("trust.key_files[{index}]: {path}: {reason}")]
    KeyFile {
        /// Position in `trust.key_files`.
        index: usize,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A `trust.publishers` entry is not valid.
    #[error("trust.publishers[{index}]: {reason}")]
    Publisher {
        /// Position in `trust.publishers`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// `trust.sigstore.trusted_root` cannot be read.
    #[error("trust.sigstore.trusted_root: {0}")]
    TrustedRoot(String),
    /// The configured lock file does not exist.
    #[error("trust.lock_file: {0} does not exist (create it with `toolhost lock`)")]
    LockMissing(PathBuf),
    /// The lock file is unreadable.
    #[error(transparent)]
    Lock(#[from] PackageError),
    /// The audit log cannot be opened.
    #[error("opening the audit log {path}: {source}")]
    Audit {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The memory store cannot be opened.
    #[error("opening the memory store {at}: {source}")]
    Memory {
        /// The file, or the PostgreSQL URL without its password.
        at: String,
        /// Why.
        source: MemoryError,
    },
    /// A built-in plugin did not load.
    #[error("loading the built-in plugins: {0}")]
    Builtins(super::AddPluginError),
    /// A plugin the config (`plugins.files[i]`) or the command line
    /// (`--plugin`) names did not load.
    #[error("{key}: {source}")]
    Plugin {
        /// Where it was named: `plugins.files[0]`, `--plugin`.
        key: String,
        /// Why it did not load.
        #[source]
        source: Box<super::AddPluginError>,
    },
    /// A registry plugin's reference or the registry settings are invalid.
    #[error(transparent)]
    Oci(#[from] crate::oci::OciError),
    /// The run-time changes' key cannot be read or created.
    #[error("run-time changes: {0}")]
    RuntimeChanges(crate::changes::ChangesError),
    /// A file grant covers one of the host's own files, or lies inside one
    /// of its directories: a plugin could read its secrets or rewrite what
    /// it obeys.
    #[error(
        "plugins.grants.{plugin}.files[{index}]: {dir} {} {what} ({path}); a plugin granted it could {risk}. Grant a directory of its own instead",
        if *.inside { "lies inside" } else { "holds" }
    )]
    GrantCoversHost {
        /// The plugin.
        plugin: String,
        /// Position in its `files`.
        index: usize,
        /// The granted directory.
        dir: PathBuf,
        /// Which of the host's files.
        what: &'static str,
        /// That file or directory.
        path: PathBuf,
        /// What the plugin could do with it.
        risk: &'static str,
        /// The grant lies inside that directory (rather than holding it).
        inside: bool,
    },
    /// The secrets file cannot be read, or a config value is named like a
    /// secret of the same plugin.
    #[error("secrets: {0}")]
    Secrets(crate::secrets::SecretError),
    /// A fleet's secrets (`cluster.url`) could not be read.
    #[error("the fleet's secrets: {0}")]
    FleetSecrets(String),
    /// The plugins directory cannot be created or read.
    #[error("plugins.dir: {path}: {source}")]
    PluginsDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The fleet's secrets from the control plane at `url`, opened with
/// `cluster.secret_key_file`.
fn fleet_secrets(cfg: &Config, url: &str) -> Result<crate::secrets::Secrets, BuildError> {
    let key_file = cfg.cluster.secret_key_file.as_ref().map(|p| cfg.resolve(p)).unwrap_or_default();
    let key = crate::cluster::Key::read(&key_file)
        .map_err(|e| BuildError::FleetSecrets(format!("cluster.secret_key_file: {e}")))?;
    crate::cluster::read_secrets(url, &key).map_err(|e| BuildError::FleetSecrets(e.to_string()))
}

/// Where compiled components are cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheChoice {
    /// `cache_dir` from the config, else the per-user default.
    Default,
    /// This directory.
    Dir(PathBuf),
    /// No disk cache: compile every component afresh.
    Off,
}

/// Builds a [`Host`] from a [`Config`] plus the command line's overrides.
#[derive(Debug, Clone)]
pub struct HostBuilder {
    config: Config,
    cache: CacheChoice,
    state_dir: Option<PathBuf>,
    builtins: bool,
    plugins: Vec<PathBuf>,
    allow_unsigned: bool,
    environment: Option<String>,
    defer_plugins: bool,
    read_only: bool,
}

/// A built host and what was decided while building it.
#[derive(Debug)]
pub struct Assembly {
    /// The host.
    pub host: Arc<Host>,
    /// Installs plugins into it (files, `oci://` references) and remembers
    /// the operator's run-time changes.
    pub installer: Arc<Installer>,
    /// The config it was built from.
    pub config: Config,
    /// The state directory.
    pub state_dir: PathBuf,
    /// The plugins directory to watch, when configured.
    pub plugins_dir: Option<PathBuf>,
    /// Calibration results for this environment.
    pub calibration: CalibrationStore,
    /// The calibration environment's name.
    pub environment: String,
    /// Where real-call measurements are saved (restored into the budget at build).
    pub measurements: MeasurementStore,
    /// Saved measurements of tools not in the registry at build (an external
    /// server's, restored when it connects: see [`crate::LiveBudget`]).
    pub pending_measurements: MeasurementsFile,
    /// Problems that did not stop the host (a plugin in the plugins
    /// directory that did not load ...), for the operator.
    pub warnings: Vec<String>,
    /// Plugins left to load, with [`HostBuilder::defer_plugins`].
    pub deferred: DeferredPlugins,
}

impl HostBuilder {
    /// A builder for `config`, with the built-ins and the default cache.
    pub fn new(config: Config) -> HostBuilder {
        HostBuilder {
            config,
            cache: CacheChoice::Default,
            state_dir: None,
            builtins: true,
            plugins: Vec::new(),
            allow_unsigned: false,
            environment: None,
            defer_plugins: false,
            read_only: false,
        }
    }

    /// Leaves every plugin but the built-ins to load after the build, in
    /// [`Assembly::deferred`]: a server answers `initialize` while a
    /// plugin compiles (its first lists wait for them, see
    /// `toolhost_core::readiness`).
    #[must_use]
    pub fn defer_plugins(mut self, on: bool) -> HostBuilder {
        self.defer_plugins = on;
        self
    }

    /// A host for a command that only reads (`tools`, `agents`, `grants`
    /// ... with no host serving): it writes no audit record (its plugins'
    /// loads are not lifecycle events of the table).
    #[must_use]
    pub fn read_only(mut self, on: bool) -> HostBuilder {
        self.read_only = on;
        self
    }

    /// The config being built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The config being built from (to apply overrides to).
    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// Where compiled components are cached.
    #[must_use]
    pub fn cache(mut self, cache: CacheChoice) -> HostBuilder {
        self.cache = cache;
        self
    }

    /// The state directory, over the config's.
    #[must_use]
    pub fn state_dir(mut self, dir: Option<PathBuf>) -> HostBuilder {
        if dir.is_some() {
            self.state_dir = dir;
        }
        self
    }

    /// Whether to load the built-in plugins (also subject to `plugins.builtins`).
    #[must_use]
    pub fn builtins(mut self, on: bool) -> HostBuilder {
        self.builtins = on;
        self
    }

    /// Plugin files to load besides `plugins.files`.
    #[must_use]
    pub fn plugins(mut self, files: impl IntoIterator<Item = PathBuf>) -> HostBuilder {
        self.plugins.extend(files);
        self
    }

    /// Loads unsigned plugin files (besides `trust.allow_unsigned`).
    #[must_use]
    pub fn allow_unsigned(mut self, on: bool) -> HostBuilder {
        self.allow_unsigned |= on;
        self
    }

    /// The calibration environment, over `budget.environment`.
    #[must_use]
    pub fn environment(mut self, name: Option<String>) -> HostBuilder {
        if name.is_some() {
            self.environment = name;
        }
        self
    }

    /// The state directory this builder will use.
    pub fn resolved_state_dir(&self) -> PathBuf {
        let cfg = &self.config;
        self.state_dir
            .clone()
            .or_else(|| cfg.state_dir.as_ref().map(|d| cfg.resolve(d)))
            .unwrap_or_else(crate::config::default_state_dir)
    }

    /// The compile cache directory this builder will use (`None`: off).
    pub fn resolved_cache_dir(&self) -> Option<PathBuf> {
        let cfg = &self.config;
        match &self.cache {
            CacheChoice::Off => None,
            CacheChoice::Dir(d) => Some(d.clone()),
            CacheChoice::Default => {
                Some(cfg.cache_dir.as_ref().map(|d| cfg.resolve(d)).unwrap_or_else(crate::config::default_cache_dir))
            }
        }
    }

    /// The lock file: `trust.lock_file`, else `toolhost.lock` beside the config.
    pub fn lock_path(&self) -> PathBuf {
        match &self.config.trust.lock_file {
            Some(p) => self.config.resolve(p),
            None => self.config.base_dir.join("toolhost.lock"),
        }
    }

    /// The plugin files the config and the overrides name (not the plugins
    /// directory); `oci://` references among them are kept as they are.
    pub fn plugin_files(&self) -> Vec<PathBuf> {
        self.named_plugin_files().into_iter().map(|(_, p)| p).collect()
    }

    /// [`HostBuilder::plugin_files`], each with where it was named, as an
    /// error about it says: `plugins.files[0]`, or `--plugin`.
    pub fn named_plugin_files(&self) -> Vec<(String, PathBuf)> {
        let cfg = &self.config;
        let resolve = |p: &PathBuf| if crate::oci::path_is_reference(p) { p.clone() } else { cfg.resolve(p) };
        let configured = cfg.plugins.files.iter().enumerate().map(|(i, p)| (format!("plugins.files[{i}]"), resolve(p)));
        configured.chain(self.plugins.iter().map(|p| ("--plugin".to_string(), p.clone()))).collect()
    }

    /// The registry client: `oci:` settings, credentials from the
    /// environment and the credentials files, the cache beside the compile
    /// cache, layers bounded like plugin files.
    pub fn oci_store(&self) -> Result<crate::oci::OciStore, BuildError> {
        let cfg = &self.config;
        let credentials = crate::oci::Credentials::from_env(cfg.oci.auth_file.as_ref().map(|p| cfg.resolve(p)))?;
        Ok(crate::oci::OciStore::new(
            &cfg.oci,
            credentials,
            self.resolved_cache_dir().as_deref(),
            cfg.limits().max_component_bytes + (1 << 16),
        ))
    }

    /// The plugins directory, when configured.
    pub fn plugins_dir(&self) -> Option<PathBuf> {
        self.config.plugins.dir.as_ref().map(|d| self.config.resolve(d))
    }

    /// The wasm runtime alone (for `inspect` and `sign`). A compile cache
    /// directory that is not private to this user is not used: the runtime
    /// compiles every plugin at load, and says why.
    pub fn runtime(&self) -> Result<Runtime, BuildError> {
        let max_bytes = self
            .config
            .cache_max_mb
            .map(|mb| mb.saturating_mul(1 << 20))
            .unwrap_or(crate::runtime::cache::DEFAULT_MAX_BYTES);
        let cfg = &self.config;
        let settings = toolhost_http::HttpSettings {
            resolve: cfg
                .plugins
                .http_resolve
                .iter()
                .filter_map(|(name, addr)| Some((name.clone(), addr.parse().ok()?)))
                .collect(),
            ca_files: cfg.plugins.http_ca_files.iter().map(|f| cfg.resolve(f)).collect(),
            nameservers: cfg.plugins.http_nameservers.iter().filter_map(|ns| ns.parse().ok()).collect(),
            trace_propagation: cfg
                .plugins
                .trace_propagation
                .iter()
                .filter(|(_, on)| **on)
                .map(|(p, _)| p.clone())
                .collect(),
        };
        let http: std::sync::Arc<dyn crate::runtime::Extension> =
            std::sync::Arc::new(toolhost_http::HttpExtension::new(&settings)?);
        let runtime =
            Runtime::with_extensions(self.config.limits(), self.resolved_cache_dir().as_deref(), max_bytes, vec![http])
                .map_err(|e| BuildError::Engine(format!("{e:#}")))?;
        // Before any plugin loads: its tools are read under its own limits.
        for line in runtime.set_plugin_limits(self.config.plugin_limits()) {
            tracing::warn!("{line}");
        }
        Ok(runtime)
    }

    /// The trust policy from `trust:` and the unsigned override.
    pub fn trust(&self) -> Result<TrustPolicy, BuildError> {
        let cfg = &self.config;
        let lock_path = self.lock_path();
        let lock = match (lock_path.exists(), cfg.trust.lock_file.is_some()) {
            (true, _) => Some(LockFile::read(&lock_path)?),
            (false, true) => return Err(BuildError::LockMissing(lock_path)),
            (false, false) => None,
        };
        let mut keys = cfg.trust.keys.clone();
        for (index, f) in cfg.trust.key_files.iter().enumerate() {
            let path = cfg.resolve(f);
            let err = |reason: String| BuildError::KeyFile { index, path: path.clone(), reason };
            // Whoever could write a trusted key could sign anything.
            let text = crate::runtime::private::read_obeyed(&path, 64 << 10).map_err(|e| err(e.to_string()))?;
            keys.push(serde_json::from_str(&text).map_err(|e| err(format!("not a toolhost .pub file: {e}")))?);
        }
        let allow_unsigned = cfg.trust.allow_unsigned || self.allow_unsigned;
        let mut publishers = Vec::new();
        for (index, p) in cfg.trust.publishers.iter().enumerate() {
            let read = |f: &PathBuf| {
                // Whoever could write a trusted key could sign anything.
                let path = cfg.resolve(f);
                crate::runtime::private::read_obeyed(&path, 64 << 10).map_err(|e| format!("{}: {e}", path.display()))
            };
            publishers.push(p.resolve(read).map_err(|reason| BuildError::Publisher { index, reason })?);
        }
        let sigstore_root = match &cfg.trust.sigstore.trusted_root {
            None => None,
            Some(f) => {
                let path = cfg.resolve(f);
                let text = crate::runtime::private::read_obeyed(&path, 4 << 20)
                    .map_err(|e| BuildError::TrustedRoot(format!("{}: {e}", path.display())))?;
                let root = crate::sigstore::TrustedRoot::from_json(&text)
                    .map_err(|e| BuildError::TrustedRoot(format!("{}: {e}", path.display())))?;
                Some(std::sync::Arc::new(root))
            }
        };
        let policy = TrustPolicy {
            keys,
            allow_unsigned,
            lock,
            revoked: cfg.trust.revoked.clone(),
            published: Vec::new(),
            publishers,
            sigstore_root,
        };
        policy.check_entries().map(|()| policy).map_err(BuildError::Trust)
    }

    /// The host's own files and directories no file grant may cover: the
    /// config file (it names commands to run and holds tokens), the state
    /// directory (admin token, keys, audit trail, run-time changes), the
    /// compile cache, the trusted key files, the lock file, the audit file
    /// and the plugins directory.
    pub fn protected_paths(&self) -> Vec<(&'static str, &'static str, PathBuf)> {
        let cfg = &self.config;
        let rewrite = "rewrite what the host obeys (a config reload runs what it says)";
        let mut out = Vec::new();
        if let Some(f) = &cfg.file {
            out.push(("the config file", rewrite, f.clone()));
        }
        out.push((
            "the state directory",
            "read the admin token and rewrite the audit trail",
            self.resolved_state_dir(),
        ));
        if let Some(c) = self.resolved_cache_dir() {
            out.push(("the compile cache", "read or replace compiled code", c));
        }
        for f in &cfg.trust.key_files {
            out.push(("a trusted key file", "make the host trust its own key", cfg.resolve(f)));
        }
        for f in cfg.trust.publishers.iter().filter_map(|p| p.key_file.as_ref()) {
            out.push(("a trusted publisher's key file", "make the host trust its own key", cfg.resolve(f)));
        }
        if let Some(f) = &cfg.trust.sigstore.trusted_root {
            out.push((
                "the Sigstore trusted root",
                "make the host trust its own certificate authority",
                cfg.resolve(f),
            ));
        }
        out.push(("the lock file", "change which plugin versions load", self.lock_path()));
        if let Some(p) = &cfg.audit.path {
            out.push(("the audit file", "rewrite the audit trail", cfg.resolve(p)));
        }
        if let Some(d) = self.plugins_dir() {
            out.push(("the plugins directory", "load plugins of its own", d));
        }
        out
    }

    /// Refuses a file grant that covers one of [`HostBuilder::protected_paths`].
    pub fn check_grant_dirs(&self) -> Result<(), BuildError> {
        let protected: Vec<_> =
            self.protected_paths().into_iter().map(|(what, risk, p)| (what, risk, absolute(&p), p)).collect();
        for (plugin, grant) in &self.config.plugins.grants {
            for (index, d) in grant.files.iter().enumerate() {
                let dir = absolute(&self.config.resolve(&d.dir));
                // Holding a protected path, or inside a protected directory
                // (the page's upload staging in the state directory, a
                // compiled-code directory of the cache ...).
                if let Some((what, risk, p, path)) =
                    protected.iter().find(|(_, _, p, _)| p.starts_with(&dir) || dir.starts_with(p))
                {
                    return Err(BuildError::GrantCoversHost {
                        inside: !p.starts_with(&dir),
                        plugin: plugin.clone(),
                        index,
                        dir: d.dir.clone(),
                        what,
                        path: path.clone(),
                        risk,
                    });
                }
            }
        }
        Ok(())
    }

    /// Builds the host: everything but the external servers (see
    /// `mcp_client::ExternalServers::start`).
    pub fn build(self) -> Result<Assembly, BuildError> {
        self.check_grant_dirs()?;
        let state = self.resolved_state_dir();
        // Private (0700, ours) before anything is written into it.
        crate::runtime::private::ensure_private_dir(&state).map_err(BuildError::StateDir)?;
        let mut warnings = Vec::new();
        let (changes, refused) = crate::changes::RuntimeChanges::open(&state).map_err(BuildError::RuntimeChanges)?;
        warnings.extend(refused.map(|e| e.to_string()));
        let plugins_dir = self.plugins_dir();
        changes.set_plugins_dir(plugins_dir.clone());
        let cfg = &self.config;
        let audit = if cfg.audit.disabled || self.read_only {
            AuditLog::disabled()
        } else {
            let path = cfg.audit.path.as_ref().map(|p| cfg.resolve(p)).unwrap_or_else(|| state.join("audit.jsonl"));
            AuditLog::open(&path, cfg.audit.include_arguments)
                .map_err(|source| BuildError::Audit { path, source })?
                .with_rotation(
                    cfg.audit.max_mb.unwrap_or(crate::audit::DEFAULT_MAX_MB),
                    cfg.audit.keep.unwrap_or(crate::audit::DEFAULT_KEEP),
                )
                .with_gate(&cfg.audit)
        };
        let memory = open_memory(cfg, &state)?;
        let budget = Budget::new(cfg.budget.clone(), cfg.npcs.clone());
        let pipeline =
            Arc::new(crate::Pipeline::with_budget(self.runtime()?, budget).with_audit(audit).with_call_rates(
                crate::rates::CallRates::new(
                    cfg.server.rate_limit,
                    cfg.server.operator_rate_limit,
                    cfg.npcs.iter().filter_map(|n| Some((n.name.clone(), n.rate_limit?))).collect(),
                ),
            ));
        let host = Host::from_admission(crate::Admission::new(pipeline).with_trust(self.trust()?))
            .with_grants(cfg.plugins.grants.clone(), &cfg.base_dir)
            .with_memory(Arc::new(memory));
        host.admission().grants().set_prefixes(cfg.plugins.prefix.clone());
        host.admission().set_plugin_config(cfg.plugins.config_values());
        let local = crate::secrets::SecretStore::in_state_dir(&state);
        match &cfg.cluster.url {
            // A fleet's secrets are the control plane's, alike on every
            // host; its follower keeps them current.
            Some(url) => {
                let (_, left_out) = host.admission().put_secrets_but_clashes(fleet_secrets(cfg, url)?);
                for why in left_out {
                    tracing::error!("the fleet's secret is not used on this host: {why}");
                }
                if let Ok(unused) = local.list(None)
                    && !unused.is_empty()
                {
                    tracing::warn!(
                        "{} holds {} secret(s) that a host in a fleet does not use: set them again with `toolhost secret set`, which writes the control plane",
                        local.path().display(),
                        unused.len()
                    );
                }
            }
            None => {
                host.admission().set_secret_store(local).map_err(BuildError::Secrets)?;
                if let Some(clash) =
                    crate::secrets::clash(&cfg.plugins.config_values(), &host.admission().values().secrets_snapshot())
                {
                    return Err(BuildError::Secrets(crate::secrets::SecretError::Name(clash)));
                }
            }
        }
        let host = Arc::new(host);
        let installer = Installer::new(host.clone(), Some(self.oci_store()?), changes);
        if cfg.plugins.builtins && self.builtins {
            installer.add_builtins().map_err(BuildError::Builtins)?;
        }
        // Every plugin file, `oci://` reference, plugins.dir file and
        // plugin added at run time, in the order they load.
        let mut plugins = Vec::new();
        for (key, p) in self.named_plugin_files() {
            match p.to_str().filter(|s| crate::oci::is_reference(s)) {
                Some(text) => plugins.push(PluginSource::Configured(key, Ok(crate::oci::OciRef::parse(text)?))),
                None if removed_by_operator(&installer, &p) => {}
                None => plugins.push(PluginSource::Configured(key, Err(p))),
            }
        }
        if let Some(dir) = &plugins_dir {
            let err = |source| BuildError::PluginsDir { path: dir.clone(), source };
            std::fs::create_dir_all(dir).map_err(err)?;
            for p in crate::plugin_files(dir).map_err(err)? {
                if !removed_by_operator(&installer, &p) {
                    plugins.push(PluginSource::Dir(p));
                }
            }
        }
        plugins.extend(installer.runtime_changes().added_plugins().into_iter().map(PluginSource::Added));
        let deferred = if self.defer_plugins {
            DeferredPlugins(plugins)
        } else {
            for source in plugins {
                source.load(&installer, &mut warnings)?;
            }
            DeferredPlugins::default()
        };
        // DM overrides set while an earlier run served, for what is left
        // of each.
        for (agent, tier, left) in installer.runtime_changes().overrides() {
            match host.pipeline().budget().set_override(&agent, tier, left) {
                Ok(()) => tracing::info!(
                    agent = %crate::tool::log_safe(&agent),
                    %tier,
                    minutes_left = left.as_secs() / 60,
                    "DM override restored"
                ),
                // Kept, not lost: it applies again under a config that
                // names the agent (a command run with another config, or
                // none, reads the same state directory).
                Err(_) => tracing::info!(
                    agent = %crate::tool::log_safe(&agent),
                    %tier,
                    minutes_left = left.as_secs() / 60,
                    "a DM override is kept for an agent this config does not name"
                ),
            }
        }
        let environment = self.environment.clone().unwrap_or_else(|| cfg.budget.environment.clone());
        let calibration = CalibrationStore::new(&state, &environment);
        calibration.load_into(host.pipeline());
        let measurements = MeasurementStore::new(&state);
        let mut pending_measurements = MeasurementsFile::default();
        match measurements.load(host.pipeline().budget().deadlines().ceiling) {
            Ok(Some(file)) => {
                let restored =
                    host.pipeline().budget().restore_measurements(&file, &host.pipeline().registry().snapshot());
                tracing::debug!(
                    tools = restored.tools.len(),
                    waiting = restored.pending.tools.len(),
                    changed = restored.changed.len(),
                    "restored saved measurements"
                );
                pending_measurements = restored.pending;
            }
            Ok(None) => {}
            // The command line prints the warnings.
            Err(e) => warnings.push(e.to_string()),
        }
        Ok(Assembly {
            host,
            installer: Arc::new(installer),
            config: self.config,
            state_dir: state,
            plugins_dir,
            calibration,
            environment,
            measurements,
            pending_measurements,
            warnings,
            deferred,
        })
    }
}

/// Whether the operator's `plugin remove` holds back the file `p`.
fn removed_by_operator(installer: &Installer, p: &Path) -> bool {
    let name = crate::runtime::plugin_name_from_path(p);
    let held = installer.runtime_changes().is_removed(&name, Some(p));
    if held {
        tracing::info!(plugin = %crate::tool::log_safe(&name), "not loaded: removed by `toolhost plugin remove` (add it again, or change its file, to undo)");
    }
    held
}

/// Where a plugin the host starts with comes from.
#[derive(Debug)]
enum PluginSource {
    /// `plugins.files` or `--plugin` (where it was named, `plugins.files[0]`):
    /// a reference or a file.
    Configured(String, Result<crate::oci::OciRef, PathBuf>),
    /// A file in `plugins.dir`.
    Dir(PathBuf),
    /// Added with `toolhost plugin add` while an earlier run served.
    Added(crate::changes::AddedPlugin),
}

impl PluginSource {
    /// Loads it. A configured plugin that fails stops the build, except one
    /// held for a secret not set (it loads when `toolhost secret set` sets
    /// it); the others are reported in `warnings` and the rest load.
    fn load(self, installer: &Installer, warnings: &mut Vec<String>) -> Result<(), BuildError> {
        match self {
            PluginSource::Configured(key, source) => {
                let r = match source {
                    Ok(r) => installer.add_plugin_ref(&r).map(drop),
                    Err(p) => installer.add_plugin_file(&p).map(drop),
                };
                match r {
                    Err(e @ crate::AddPluginError::MissingSecrets { .. }) => warnings.push(e.to_string()),
                    r => r.map_err(|source| BuildError::Plugin { key, source: Box::new(source) })?,
                }
            }
            // Like the watcher: a bad file is reported, the rest load.
            PluginSource::Dir(p) => {
                if let Err(e) = installer.install_plugin_file(&p) {
                    warnings.push(format!("{} not loaded: {e}", p.display()));
                }
            }
            // Through the trust policy and the grants like any other file.
            PluginSource::Added(added) => {
                let restored = match added.path.to_str().filter(|p| crate::oci::is_reference(p)) {
                    Some(text) => crate::oci::OciRef::parse(text)
                        .map_err(crate::AddPluginError::from)
                        .and_then(|r| installer.install_plugin_ref(&r)),
                    None => installer.install_plugin_file(&added.path),
                };
                if let Err(e) = restored {
                    warnings.push(format!(
                        "plugin {:?}, added at run time from {}, not restored: {e} (`toolhost plugin remove {}` forgets it)",
                        added.name,
                        added.path.display(),
                        added.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Plugins a host built with [`HostBuilder::defer_plugins`] has yet to
/// load (compile, instantiate, register): see [`DeferredPlugins::spawn`].
#[derive(Debug, Default)]
pub struct DeferredPlugins(Vec<PluginSource>);

impl DeferredPlugins {
    /// How many plugins are left to load.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is left to load.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Loads them one after another on a thread of their own, while the
    /// host serves: each joins the registry (and every session's list, with
    /// `list_changed`) as it is ready. The host's first-list readiness is
    /// held until the last is loaded or has failed. A plugin that fails is
    /// logged, as the watcher would, and the rest load.
    pub fn spawn(self, installer: Arc<Installer>) -> std::io::Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let hold = installer.host().pipeline().readiness().hold();
        std::thread::Builder::new().name("toolhost-load".into()).spawn(move || {
            let _hold = hold;
            for source in self.0 {
                let mut warnings = Vec::new();
                if let Err(e) = source.load(&installer, &mut warnings) {
                    tracing::error!("{e}");
                }
                for w in warnings {
                    tracing::warn!("{w}");
                }
            }
        })?;
        Ok(())
    }
}

/// `p` made absolute with symbolic links resolved as far as it exists (the
/// rest appended as written), so containment is judged on real paths.
fn absolute(p: &Path) -> PathBuf {
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
    };
    let mut existing = p.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return p.clone(),
        }
    }
    let mut out = existing.canonicalize().unwrap_or_else(|_| existing.to_path_buf());
    for name in rest.iter().rev() {
        out.push(name);
    }
    out
}

impl Assembly {
    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }
}
