//! Config reload: `toolhost reload` (through the admin API) and SIGHUP make
//! a serving host re-read `toolhost.yaml` and put in force what changed:
//! agents (allow-lists, ceilings, turn caps, rate limits), the budget
//! settings, grants, trust, external servers, `server.tokens` and the
//! tool-call rate limits.
//!
//! Everything is checked before anything changes: a config that does not
//! parse, a key file that cannot be read, a grant that cannot be honoured,
//! a server with bad settings, a token for an agent that is gone all leave
//! the host exactly as it was, and say why. Then the changes go in:
//!
//! - the new trust policy, unloading loaded plugins it would refuse now;
//! - the new grants, re-granting loaded plugins whose grant changed (or
//!   unloading one that imports what is no longer granted);
//! - the limits on each call (fuel, memory up to the instance pool's slot
//!   size, output, deadlines' floor and ceiling, concurrency), for calls that
//!   start from now on;
//! - the budget's settings and agents ([`crate::budget::Budget::reconfigure`]:
//!   measurements kept, tiers recomputed, overrides of removed agents dropped);
//! - the rate limits (each agent keeps the tokens it has left);
//! - the external servers the config defines (added, removed, or restarted
//!   when their settings changed; servers added at run time are left alone);
//! - the HTTP front's agent endpoints and tokens (see [`crate::mcp::http`]).
//!
//! Open sessions whose visible tools changed get `notifications/tools/list_changed`
//! from their visibility poll. Settings the running host cannot change
//! (what the wasm engine was built with, the audit file, the state
//! directory, the plugin files ...) are listed as needing a restart, and
//! left as they are.

use crate::PluginChange;
use crate::config::{Config, McpServerConfig};
use crate::mcp_client::ExternalServers;
use crate::{Host, HostBuilder};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new config is invalid: the host keeps the config it had.
    #[error("the config was not reloaded, nothing changed: {0}")]
    Invalid(String),
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReloadReport {
    /// The file read (`None`: no config file, the defaults).
    pub file: Option<PathBuf>,
    /// Settings put in force, in words (`npcs: mira (tools)`, `server.rate_limit` ...).
    pub applied: Vec<String>,
    /// Loaded plugins the new grants or trust changed.
    pub plugins: Vec<PluginChange>,
    /// External servers added, removed or restarted.
    pub servers: Vec<String>,
    /// Settings that changed but take effect only at the next start.
    pub restart_needed: Vec<String>,
    /// What `toolhost doctor` says of the new config.
    pub warnings: Vec<String>,
}

impl ReloadReport {
    /// Whether the file changed nothing at all.
    pub fn is_unchanged(&self) -> bool {
        self.nothing_put_in_force() && self.restart_needed.is_empty()
    }

    /// Whether the running host is as before (what needs a restart, judged
    /// against the start, is listed again by every later reload).
    fn nothing_put_in_force(&self) -> bool {
        self.applied.is_empty() && self.plugins.is_empty() && self.servers.is_empty()
    }
}

impl std::fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file =
            self.file.as_ref().map_or_else(|| "no config file (defaults)".to_string(), |p| p.display().to_string());
        if self.is_unchanged() {
            write!(f, "reloaded {file}: nothing changed")?;
        } else {
            write!(f, "reloaded {file}")?;
        }
        for a in &self.applied {
            write!(f, "\n  applied: {a}")?;
        }
        for p in &self.plugins {
            write!(f, "\n  plugin {}: {}", p.plugin, p.detail)?;
        }
        for s in &self.servers {
            write!(f, "\n  server {s}")?;
        }
        for r in &self.restart_needed {
            write!(f, "\n  NOT applied, needs a restart: {r}")?;
        }
        for w in &self.warnings {
            write!(f, "\n  warning: {w}")?;
        }
        Ok(())
    }
}

/// A check the serving front makes of a new config before it is put in
/// force (its tokens, its exposure); an error refuses the whole reload.
pub use crate::mcp::http::FrontCheck;

impl crate::mcp::http::Reloads for Reloader {
    fn generation(&self) -> u64 {
        Reloader::generation(self)
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        Reloader::subscribe(self)
    }

    fn config(&self) -> Config {
        Reloader::config(self)
    }

    fn add_check(&self, check: FrontCheck) {
        Reloader::add_check(self, check)
    }
}

/// Reads the config again and applies it to a serving host.
pub struct Reloader {
    host: Arc<Host>,
    installer: Arc<crate::Installer>,
    servers: Option<Arc<ExternalServers>>,
    load: Box<dyn Fn() -> Result<HostBuilder, String> + Send + Sync>,
    /// What the host was built from: what needs a restart is judged against it.
    started: HostBuilder,
    /// The last config put in force: what changed is judged against it.
    current: Mutex<HostBuilder>,
    /// Counts the reloads that put something in force (watched by the
    /// HTTP front).
    generation: tokio::sync::watch::Sender<u64>,
    checks: Mutex<Vec<FrontCheck>>,
    /// One reload at a time (SIGHUP and the admin API may race).
    one_at_a_time: Mutex<()>,
    /// Every tool name registered when the host started or at a reload
    /// since: an allow-list naming none of these is a typo, refused.
    seen: Mutex<std::collections::BTreeSet<String>>,
    /// Revocation lists, read again at every reload.
    revocations: Mutex<Option<Arc<crate::revocations::RevocationWatch>>>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").field("file", &self.started.config().file).finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader for `host`, built from `built` (the builder the host came
    /// from). `load` reads the config file again and applies the command
    /// line's overrides, as at start.
    pub fn new(
        installer: Arc<crate::Installer>,
        servers: Option<Arc<ExternalServers>>,
        built: HostBuilder,
        load: impl Fn() -> Result<HostBuilder, String> + Send + Sync + 'static,
    ) -> Reloader {
        let seen = installer.host().pipeline().registry().snapshot().tools().map(|t| t.def.name.clone()).collect();
        Reloader {
            seen: Mutex::new(seen),
            host: installer.host().clone(),
            installer,
            servers,
            load: Box::new(load),
            current: Mutex::new(built.clone()),
            started: built,
            generation: tokio::sync::watch::Sender::new(0),
            checks: Mutex::new(Vec::new()),
            one_at_a_time: Mutex::new(()),
            revocations: Mutex::new(None),
        }
    }

    /// Reads the catalogues' revocation lists again at every reload (the
    /// plugins they unload are in the reload's report).
    pub fn watch_revocations(&self, watch: Arc<crate::revocations::RevocationWatch>) {
        *self.revocations.lock().unwrap_or_else(|p| p.into_inner()) = Some(watch);
    }

    /// The builder of the config in force.
    pub fn builder(&self) -> HostBuilder {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `npcs[i].tools: unknown tool "x" (did you mean "y"?)` for each name
    /// in `new`'s allow-lists that no provider offers now or has offered
    /// since the host started; nothing while an external server is not up
    /// (it may offer it).
    fn unknown_allowed_tools(&self, new: &crate::config::Config) -> Vec<String> {
        if self.servers.as_ref().is_some_and(|s| s.status().iter().any(|s| s.state != "up")) {
            return Vec::new();
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.extend(self.host.pipeline().registry().snapshot().tools().map(|t| t.def.name.clone()));
        let mut out = Vec::new();
        for (i, npc) in new.npcs.iter().enumerate() {
            for t in npc.tools.iter().filter(|t| !seen.contains(*t)) {
                let hint = crate::doctor::did_you_mean(t, seen.iter().map(String::as_str))
                    .map(|c| format!(" (did you mean {c:?}?)"))
                    .unwrap_or_default();
                out.push(format!("npcs[{i}].tools: unknown tool {t:?}{hint}"));
            }
        }
        out
    }

    /// Counts the reloads that changed something (the front resyncs when it moves).
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Sees [`Reloader::generation`] move, without missing a reload that
    /// happens while its holder is busy.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).config().clone()
    }

    /// Adds a check every new config must pass before it is put in force.
    pub fn add_check(&self, check: FrontCheck) {
        self.checks.lock().unwrap_or_else(|p| p.into_inner()).push(check);
    }

    /// Reads the config file and puts in force what changed; on any error
    /// nothing changes. Blocking (it may wait for server connections and
    /// resolve grants): call it off the async workers.
    pub fn reload(&self) -> Result<ReloadReport, ReloadError> {
        self.reload_with(false)
    }

    /// [`Reloader::reload`]; with `force`, an allow-list naming a tool no
    /// provider has offered since the host started is applied anyway (for a
    /// plugin not loaded yet), with a warning, rather than refused.
    pub fn reload_with(&self, force: bool) -> Result<ReloadReport, ReloadError> {
        let span = crate::trace::start(crate::trace::Kind::Internal, None, || ("reload", Vec::new()));
        let result = self.reload_now(force);
        crate::trace::end(span.as_ref(), result.as_ref().err().map(|e| e.to_string()).as_deref());
        // Who asked (the admin API's caller, SIGHUP), and what came of it.
        let detail = match &result {
            Ok(r) => serde_json::json!({
                "force": force,
                "applied": r.applied,
                "plugins": r.plugins.iter().map(|p| p.plugin.clone()).collect::<Vec<_>>(),
                "servers": r.servers,
                "restart_needed": r.restart_needed,
            }),
            Err(e) => serde_json::json!({"force": force, "error": e.to_string()}),
        };
        self.host.pipeline().audit().write_action(&crate::audit::ActionRecord {
            time: crate::audit::now_rfc3339(),
            event: if result.is_ok() { "reload" } else { "reload_refused" },
            detail: Some(detail),
            trace_id: crate::trace::ids(span.as_ref()).map(|i| i.0),
        });
        result
    }

    fn reload_now(&self, force: bool) -> Result<ReloadReport, ReloadError> {
        let _one = self.one_at_a_time.lock().unwrap_or_else(|p| p.into_inner());
        let invalid = ReloadError::Invalid;
        let next = (self.load)().map_err(invalid)?;
        let old_builder = self.current.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (old, new) = (old_builder.config(), next.config());
        let file = new.file.as_ref().map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone()));
        let mut report = ReloadReport { file: file.clone(), ..ReloadReport::default() };

        // 1. Check everything; change nothing.
        if let Some(f) = &file {
            check_not_blank(f).map_err(invalid)?;
        }
        report.restart_needed = restart_needed(&self.started, &next);
        // A plugin file the next start could not read: said now, not when
        // the table restarts without it.
        let known = self.started.plugin_files();
        for (key, f) in next.named_plugin_files() {
            if !known.contains(&f) && !crate::oci::path_is_reference(&f) && !f.is_file() {
                report
                    .warnings
                    .push(format!("{key} ({}): no such file; the next start would not load it", f.display()));
            }
        }
        next.check_grant_dirs().map_err(|e| invalid(e.to_string()))?;
        let trust = next.trust().map_err(|e| invalid(e.to_string()))?;
        for check in self.checks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            check(new).map_err(invalid)?;
        }
        // An allow-list typo would take a tool from an agent mid-game:
        // refused, unless an upstream that is not up may offer it.
        let unknown = self.unknown_allowed_tools(new);
        if !unknown.is_empty() && !force {
            return Err(invalid(format!(
                "{}; nothing changed: fix the name, or `toolhost reload --force` to apply it anyway (for a tool whose plugin is not loaded yet)",
                unknown.join("; ")
            )));
        }
        // Under the new limits' floor and ceiling.
        let deadlines = new.limits().deadlines();
        let server_plan = match &self.servers {
            Some(servers) => {
                let plan = plan_servers(self.installer.runtime_changes(), servers, new);
                for cfg in plan.add.iter().chain(&new.mcp.servers) {
                    ExternalServers::validate(cfg, deadlines).map_err(|e| invalid(format!("mcp.servers: {e}")))?;
                }
                plan
            }
            None => ServerPlan::default(),
        };
        let secrets = match self.host.admission().values().secret_store() {
            Some(store) => store.read().map_err(|e| invalid(format!("secrets: {e}")))?,
            // A fleet's, from the control plane: as held.
            None => (*self.host.admission().values().secrets_snapshot()).clone(),
        };
        if let Some(clash) = crate::secrets::clash(&new.plugins.config_values(), &secrets) {
            return Err(invalid(clash));
        }
        // Last: resolving a read-write directory grant creates the directory.
        let plan = || {
            self.host
                .admission()
                .plan_grants(new.plugins.grants.clone(), &new.base_dir)
                .map_err(|e| invalid(format!("plugins.grants: {e}")))
        };
        let mut grants = plan()?;

        // 2. Put it in force. A canary under way ends first (rolled back):
        // grants and trust judge plain versions, so the plan is made again
        // with the version it put back.
        let ended = self.host.admission().end_canaries("a config reload");
        if !ended.is_empty() {
            grants = plan()?;
        }
        report.plugins.extend(ended);
        if old.trust != new.trust {
            report.applied.push("trust".into());
        }
        report.plugins.extend(self.host.admission().apply_trust(trust));
        if old.plugins.grants != new.plugins.grants {
            report.applied.push(format!("plugins.grants ({})", changed_keys(&old.plugins.grants, &new.plugins.grants)));
        }
        let regranted = self.host.admission().apply_grants(grants);
        self.installer.upgrades_loaded(&regranted);
        report.plugins.extend(regranted);
        if old.limits != new.limits {
            report.applied.push("limits".into());
            report.restart_needed.extend(self.host.pipeline().apply_limits(new.limits()));
        }
        if old.plugins.prefix != new.plugins.prefix {
            // Names of plugins already loaded change when they are next
            // loaded: renaming tools under a running game would break its
            // agents' allow-lists mid-turn.
            report.applied.push(format!(
                "plugins.prefix ({}; takes effect when each plugin is next loaded)",
                changed_keys(&old.plugins.prefix, &new.plugins.prefix)
            ));
            self.host.admission().grants().set_prefixes(new.plugins.prefix.clone());
        }
        if old.plugins.limits != new.plugins.limits {
            report.applied.push(format!("plugins.limits ({})", changed_keys(&old.plugins.limits, &new.plugins.limits)));
            report.restart_needed.extend(self.host.pipeline().apply_plugin_limits(new.plugin_limits()));
        }
        if old.plugins.config != new.plugins.config {
            report.applied.push(format!("plugins.config ({})", changed_keys(&old.plugins.config, &new.plugins.config)));
        }
        self.host.admission().set_plugin_config(new.plugins.config_values());
        // Secrets set while the host served, and plugins waiting for them.
        let secrets_warning = match self.host.admission().refresh_secrets() {
            Ok(loaded) => {
                report.plugins.extend(loaded);
                None
            }
            Err(e) => Some(format!("secrets not read again: {e}")),
        };
        report.applied.extend(agent_changes(old, new));
        if old.budget != new.budget {
            report.applied.push("budget".into());
        }
        self.host.pipeline().budget().reconfigure(new.budget.clone(), new.npcs.clone());
        if old.server.rate_limit != new.server.rate_limit {
            report.applied.push("server.rate_limit".into());
        }
        if old.server.operator_rate_limit != new.server.operator_rate_limit {
            report.applied.push("server.operator_rate_limit".into());
        }
        self.host.pipeline().call_rates().reconfigure(
            new.server.rate_limit,
            new.server.operator_rate_limit,
            new.npcs.iter().filter_map(|n| Some((n.name.clone(), n.rate_limit?))).collect(),
        );
        if old.server.tokens != new.server.tokens {
            report.applied.push("server.tokens".into());
        }
        if let Some(servers) = &self.servers {
            report.servers = apply_servers(servers, server_plan);
        }
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = next.clone();
        let watch = self.revocations.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(watch) = watch {
            let (changes, warnings) = watch.check(&next, true);
            report.plugins.extend(changes);
            report.warnings.extend(warnings);
        }
        if !report.nothing_put_in_force() {
            self.generation.send_modify(|g| *g += 1);
        }
        let status = self.servers.as_ref().map(|s| s.status()).unwrap_or_default();
        report
            .warnings
            .extend(crate::doctor::check_host(new, &self.host, &status, false).into_iter().map(|f| f.to_string()));
        report.warnings.extend(secrets_warning);
        if !unknown.is_empty() {
            report.warnings.push(format!("applied with --force: {}", unknown.join("; ")));
        }
        tracing::debug!(
            applied = ?report.applied,
            plugins = report.plugins.len(),
            servers = ?report.servers,
            restart_needed = ?report.restart_needed,
            "config reloaded"
        );
        Ok(report)
    }
}

/// Refuses a config file that is empty or only comments: a half-saved
/// file would otherwise put every default in force (no agents, no servers,
/// no grants). (Who may write it is checked as it is read,
/// [`Config::load`].)
fn check_not_blank(path: &std::path::Path) -> Result<(), String> {
    let text = crate::runtime::private::read_obeyed(path, crate::config::MAX_CONFIG_BYTES)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return Err(format!(
            "{} is empty (or only comments): reloading it would put every default in force (no agents, no servers, no grants). A half-saved file? Write `{{}}` to mean the defaults",
            path.display()
        ));
    }
    Ok(())
}

/// Servers to stop and to start.
#[derive(Debug, Default)]
struct ServerPlan {
    remove: Vec<String>,
    add: Vec<McpServerConfig>,
    restarted: Vec<String>,
}

/// The config's servers (less those removed, plus those added at run time)
/// against the ones running: a server whose settings changed is restarted.
fn plan_servers(changes: &crate::changes::RuntimeChanges, servers: &ExternalServers, new: &Config) -> ServerPlan {
    let running = servers.configs();
    let (wanted, _) = changes.servers(&new.mcp.servers);
    let mut plan = ServerPlan::default();
    for r in &running {
        match wanted.iter().find(|w| w.name == r.name) {
            None => plan.remove.push(r.name.clone()),
            Some(w) if w != r => {
                plan.remove.push(r.name.clone());
                plan.restarted.push(r.name.clone());
            }
            Some(_) => {}
        }
    }
    for w in wanted {
        if plan.restarted.contains(&w.name) || !running.iter().any(|r| r.name == w.name) {
            plan.add.push(w);
        }
    }
    plan
}

fn apply_servers(servers: &ExternalServers, plan: ServerPlan) -> Vec<String> {
    let mut out = Vec::new();
    for name in &plan.remove {
        if servers.remove(name).is_ok() && !plan.restarted.contains(name) {
            out.push(format!("removed {name}"));
        }
    }
    for cfg in plan.add {
        let name = cfg.name.clone();
        match servers.add(cfg) {
            Ok(()) if plan.restarted.contains(&name) => out.push(format!("restarted {name} (its settings changed)")),
            Ok(()) => out.push(format!("added {name}")),
            Err(e) => out.push(format!("{name} not started: {e}")),
        }
    }
    out
}

/// The agents added, removed or changed, in words.
fn agent_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for n in &new.npcs {
        match old.npcs.iter().find(|o| o.name == n.name) {
            None => out.push(format!("npcs: {} added", n.name)),
            Some(o) if o != n => {
                let mut what = Vec::new();
                if o.tools != n.tools {
                    what.push("tools");
                }
                if o.budget_tier != n.budget_tier {
                    what.push("budget_tier");
                }
                if o.max_calls_per_turn != n.max_calls_per_turn {
                    what.push("max_calls_per_turn");
                }
                if o.rate_limit != n.rate_limit {
                    what.push("rate_limit");
                }
                if o.instructions != n.instructions {
                    what.push("instructions");
                }
                if what.is_empty() {
                    what.push("personality or engine");
                }
                out.push(format!("npcs: {} ({})", n.name, what.join(", ")));
            }
            Some(_) => {}
        }
    }
    for o in &old.npcs {
        if !new.npcs.iter().any(|n| n.name == o.name) {
            out.push(format!("npcs: {} removed (its sessions are closed)", o.name));
        }
    }
    out
}

/// The plugin names whose entry differs between two grant maps.
fn changed_keys<V: PartialEq>(
    old: &std::collections::BTreeMap<String, V>,
    new: &std::collections::BTreeMap<String, V>,
) -> String {
    let mut keys: Vec<&str> = old
        .iter()
        .filter(|(k, v)| new.get(*k) != Some(v))
        .map(|(k, _)| k.as_str())
        .chain(new.keys().filter(|k| !old.contains_key(*k)).map(String::as_str))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.join(", ")
}

/// The settings that changed but that a running host cannot change.
fn restart_needed(old: &HostBuilder, new: &HostBuilder) -> Vec<String> {
    let (o, n) = (old.config(), new.config());
    let mut out = Vec::new();
    let mut differs = |key: &str, changed: bool, why: &str| {
        if changed {
            out.push(format!("{key} ({why})"));
        }
    };
    differs("audit", o.audit != n.audit, "the audit file is opened at start");
    differs("memory", o.memory != n.memory, "the memory store is opened at start");
    differs("telemetry", o.telemetry != n.telemetry, "the exporter is set up at start");
    differs(
        "plugins.trace_propagation",
        o.plugins.trace_propagation != n.plugins.trace_propagation,
        "plugins' HTTP is set up at start",
    );
    differs("state_dir", old.resolved_state_dir() != new.resolved_state_dir(), "read at start");
    differs(
        "cache_dir",
        old.resolved_cache_dir() != new.resolved_cache_dir() || o.cache_max_mb != n.cache_max_mb,
        "read at start",
    );
    differs("oci", o.oci != n.oci, "the registry client is made at start");
    differs(
        "plugins.files",
        old.plugin_files() != new.plugin_files(),
        "loaded at start; `toolhost plugin add` and `plugin remove` change plugins now",
    );
    differs("plugins.builtins", o.plugins.builtins != n.plugins.builtins, "loaded at start");
    differs("plugins.dir", old.plugins_dir() != new.plugins_dir(), "watched from start");
    differs(
        "budget.result_cache_entries/result_cache_mb",
        o.budget.result_cache_entries != n.budget.result_cache_entries
            || o.budget.result_cache_mb != n.budget.result_cache_mb,
        "the result cache is sized at start",
    );
    differs(
        "budget.background_calibration/environment",
        o.budget.background_calibration != n.budget.background_calibration
            || o.budget.environment != n.budget.environment,
        "the calibration threads start with the host",
    );
    let (os, ns) = (&o.server, &n.server);
    differs(
        "server (origins, hosts, body and session limits, connection and auth-failure limits, metrics, shutdown grace, first list wait)",
        os.allowed_origins != ns.allowed_origins
            || os.allowed_hosts != ns.allowed_hosts
            || os.max_body_bytes != ns.max_body_bytes
            || os.connection_rate_limit != ns.connection_rate_limit
            || os.auth_failure_limit != ns.auth_failure_limit
            || os.max_sessions != ns.max_sessions
            || os.session_idle_secs != ns.session_idle_secs
            || os.metrics_beyond_loopback != ns.metrics_beyond_loopback
            || os.shutdown_grace_secs != ns.shutdown_grace_secs
            || os.first_list_wait_ms != ns.first_list_wait_ms,
        "the HTTP front is set up at start",
    );
    out
}
