use crate::args::HostArgs;
use anyhow::{Context, Result};
use std::process::ExitCode;
use std::time::Duration;
use toolhost::budget::Budget;
use toolhost::changes::RuntimeChanges;
use toolhost::doctor::{Already, Finding, Level, PluginEntry, check_files, check_host_knowing, check_plugin};
use toolhost::mcp_client::ExternalServers;
use toolhost::package::{LockFile, PublicKey, TrustPolicy};
use toolhost::{Host, Installer, plugin_files};

/// Check a config before the game: typos and mistakes that still let a
/// host start.
///
/// Reports tools in `npcs[].tools`, `budget.pin` and `budget.long_tools`
/// that no plugin or server provides (with the closest real name),
/// `plugins.grants` for plugins that are not loaded or that cannot be
/// honoured, over-grants, external servers that do not answer within
/// --connect-timeout, trusted key files that are missing, malformed or
/// replaceable by others, plugins the host would refuse (not signed by a
/// trusted key, a digest the lock file does not pin, a registry reference
/// that cannot be pulled), and cache or state directories with unsafe
/// permissions. Each finding is said once.
///
/// It checks what a start would load: the built-ins, `plugins.files` and
/// `--plugin` (files and `oci://` references), the plugins directory, and
/// the plugins added at run time (`toolhost plugin add`, recorded in the
/// state directory), less those `toolhost plugin remove` removed. An
/// `oci://` reference is pulled as the host pulls it at start: the digest
/// `toolhost.lock` pins comes from the cache without the network.
///
/// Nothing is served, and the state directory is read, not written (as at
/// start, a `plugin remove` whose file has changed since is forgotten);
/// plugins are compiled (through the compile cache) to learn their tools,
/// registry pulls are cached as the host caches them, and stdio servers
/// are started briefly to learn their tools.
///
/// Exit status: 0 when there are no errors (warnings alone: 0), 1 when
/// there are.
#[derive(Debug, clap::Args)]
pub struct Doctor {
    /// Print JSON: {"findings": [{"level", "at", "message"}], "errors", "warnings"}.
    #[arg(long)]
    json: bool,
    /// How long to wait for the external servers' first connection, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    connect_timeout: u64,
    #[command(flatten)]
    host: HostArgs,
}

impl Doctor {
    pub fn run(self) -> Result<ExitCode> {
        let mut builder = self.host.builder()?;
        let cfg = builder.config_mut().clone();
        let state = builder.resolved_state_dir();
        let cache = builder.resolved_cache_dir();
        let mut findings = Vec::new();
        let policy = match builder.trust() {
            Ok(p) => p,
            Err(e) => {
                // Reported (with the rest) by check_files, or here when it is the lock file.
                if !matches!(e, toolhost::BuildError::KeyFile { .. }) {
                    findings.push(Finding { level: Level::Error, at: "trust".into(), message: e.to_string() });
                }
                fallback_policy(&cfg, &builder.lock_path(), cfg.trust.allow_unsigned || self.host.trust.allow_unsigned)
            }
        };
        findings.extend(check_files(&cfg, &[("cache directory", cache.as_deref()), ("state directory", Some(&state))]));

        // The run-time changes a start would apply, only when there are
        // some (opening the record creates its key).
        let changes = if state.join(toolhost::changes::FILE).exists() {
            let (changes, refused) = RuntimeChanges::open(&state).context("reading the run-time changes")?;
            if let Some(e) = refused {
                findings.push(Finding {
                    level: Level::Warning,
                    at: format!("state directory {}", state.display()),
                    message: e.to_string(),
                });
            }
            changes
        } else {
            RuntimeChanges::in_memory()
        };
        changes.set_plugins_dir(builder.plugins_dir());

        // A host that is never served, to learn the tools: it admits every
        // plugin whatever its signature (check_plugin judges each by the
        // trust policy, once), with the trusted keys and the lock file's
        // digests (registry plugins are pulled at the pinned digest).
        let learning = TrustPolicy { allow_unsigned: true, ..policy.clone() };
        let host = Host::with_budget(builder.runtime()?, Budget::new(cfg.budget.clone(), cfg.npcs.clone()))
            .with_trust(learning)
            .with_grants(cfg.plugins.grants.clone(), &cfg.base_dir);
        // The values a start would give: `plugins.config`, and the secrets
        // in the state directory (read, not written), so that a plugin held
        // only for a secret that is set is judged as it would load.
        host.admission().set_plugin_config(cfg.plugins.config_values());
        if cfg.cluster.url.is_none()
            && let Err(e) = host.admission().set_secret_store(toolhost::secrets::SecretStore::in_state_dir(&state))
        {
            findings.push(Finding { level: Level::Error, at: "secrets".into(), message: e.to_string() });
        }
        let installer = Installer::new(std::sync::Arc::new(host), Some(builder.oci_store()?), changes);
        if cfg.plugins.builtins
            && !self.host.no_builtins
            && let Err(e) = installer.add_builtins()
        {
            findings.push(Finding { level: Level::Error, at: "plugins.builtins".into(), message: e.to_string() });
        }
        let removed = |p: &std::path::Path| {
            installer.runtime_changes().is_removed(&toolhost::runtime::plugin_name_from_path(p), Some(p))
        };
        let mut entries = Vec::new();
        let configured = cfg.plugins.files.len();
        for (i, source) in builder.plugin_files().into_iter().enumerate() {
            if !toolhost::oci::path_is_reference(&source) && removed(&source) {
                continue;
            }
            let at = if i < configured {
                format!("plugins.files[{i}] ({})", source.display())
            } else {
                format!("--plugin {}", source.display())
            };
            entries.push(PluginEntry { at, source, replace: false });
        }
        if let Some(dir) = builder.plugins_dir().filter(|d| d.is_dir()) {
            for source in plugin_files(&dir).with_context(|| format!("reading plugins.dir {}", dir.display()))? {
                if !removed(&source) {
                    entries.push(PluginEntry {
                        at: format!("plugin file {}", source.display()),
                        source,
                        replace: true,
                    });
                }
            }
        }
        for added in installer.runtime_changes().added_plugins() {
            entries.push(PluginEntry {
                at: format!(
                    "plugin {} (added at run time from {}; `toolhost plugin remove {}` forgets it)",
                    added.name,
                    added.path.display(),
                    added.name
                ),
                source: added.path,
                replace: true,
            });
        }
        let mut already = Already { not_loaded: Vec::new(), trust_judged: true };
        for entry in &entries {
            let check = check_plugin(&installer, &policy, entry);
            if !check.loaded {
                already.not_loaded.push((entry.at.clone(), check.name));
            }
            findings.extend(check.finding);
        }
        let host = installer.host().clone();
        let status = if cfg.mcp.servers.is_empty() {
            Vec::new()
        } else {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let servers =
                ExternalServers::start_in(host.pipeline().clone(), &cfg.mcp.servers, rt.handle().clone(), &state)?;
            servers.wait_ready(Duration::from_secs(self.connect_timeout.max(1)));
            let status = servers.status();
            servers.shutdown();
            status
        };
        findings.extend(check_host_knowing(&cfg, &host, &status, true, &already));

        let errors = findings.iter().filter(|f| f.level == Level::Error).count();
        let warnings = findings.len() - errors;
        if self.json {
            let out = serde_json::json!({"findings": findings, "errors": errors, "warnings": warnings, "front_door": toolhost::doctor::front_door(&cfg)});
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            // Which file was checked: run in the wrong directory, "no
            // problems" of the defaults would mislead.
            match self.host.runtime.config.path() {
                Some(p) => println!("checked {} (state directory {})", p.display(), state.display()),
                None => println!(
                    "no config file (no toolhost.yaml here, no --config): checked the defaults (state directory {})",
                    state.display()
                ),
            }
            println!("front door (serve --http): {}", toolhost::doctor::front_door(&cfg));
            for f in &findings {
                let level = if f.level == Level::Error { "error" } else { "warning" };
                println!("{level}: {f}");
            }
            match (errors, warnings) {
                (0, 0) => println!("no problems found"),
                (e, w) => println!("{e} error{}, {w} warning{}", plural(e), plural(w)),
            }
        }
        Ok(if errors > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
    }
}

/// The trust policy as far as it can be read when part of it cannot: the
/// keys in `trust.keys` and the key files that read (those that do not are
/// findings of their own), the lock file when it reads.
fn fallback_policy(cfg: &toolhost::config::Config, lock: &std::path::Path, allow_unsigned: bool) -> TrustPolicy {
    let mut keys = cfg.trust.keys.clone();
    for f in &cfg.trust.key_files {
        let key = toolhost::runtime::private::read_obeyed(&cfg.resolve(f), 64 << 10)
            .ok()
            .and_then(|text| serde_json::from_str::<PublicKey>(&text).ok());
        keys.extend(key);
    }
    TrustPolicy {
        keys,
        allow_unsigned,
        lock: LockFile::read(lock).ok(),
        revoked: cfg.trust.revoked.clone(),
        published: Vec::new(),
        // Publishers whose key files read, and the trusted root when it reads.
        publishers: cfg.trust.publishers.iter().filter_map(|p| p.resolve(|f| read_text(cfg, f)).ok()).collect(),
        sigstore_root: cfg.trust.sigstore.trusted_root.as_ref().and_then(|f| {
            let text = read_text(cfg, f).ok()?;
            toolhost::sigstore::TrustedRoot::from_json(&text).ok().map(std::sync::Arc::new)
        }),
    }
}

fn read_text(cfg: &toolhost::config::Config, f: &std::path::Path) -> Result<String, String> {
    toolhost::runtime::private::read_obeyed(&cfg.resolve(f), 4 << 20).map_err(|e| e.to_string())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
