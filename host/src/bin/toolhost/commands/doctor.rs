use crate::args::HostArgs;
use anyhow::{Context, Result};
use std::process::ExitCode;
use std::time::Duration;
use toolhost::budget::Budget;
use toolhost::doctor::{Finding, Level, check_files, check_host};
use toolhost::mcp::ExternalServers;
use toolhost::package::TrustPolicy;
use toolhost::{Host, plugin_files};

/// Check a config before the game: typos and mistakes that still let a
/// host start.
///
/// Reports tools in `npcs[].tools`, `budget.pin` and `budget.long_tools`
/// that no plugin or server provides (with the closest real name),
/// `plugins.grants` for plugins that are not loaded or that cannot be
/// honoured, over-grants, external servers that do not answer within
/// --connect-timeout, trusted key files that are missing, malformed or
/// replaceable by others, plugin files that are not signed by a trusted key,
/// and cache or state directories with unsafe permissions.
///
/// Nothing is served and nothing is written to the state directory; plugins
/// are compiled (through the compile cache) to learn their tools, and
/// stdio servers are started briefly to learn theirs. Run-time changes
/// (`toolhost plugin add` ...) are not considered: this is the config as a
/// fresh start reads it.
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
        let mut files = builder.plugin_files();
        if let Some(dir) = builder.plugins_dir().filter(|d| d.is_dir()) {
            files.extend(plugin_files(&dir).with_context(|| format!("reading plugins.dir {}", dir.display()))?);
        }
        let mut findings = Vec::new();
        let policy = match builder.trust() {
            Ok(p) => p,
            Err(e) => {
                // Reported (with the rest) by check_files, or here when it is the lock file.
                if !matches!(e, toolhost::BuildError::KeyFile { .. }) {
                    findings.push(Finding { level: Level::Error, at: "trust".into(), message: e.to_string() });
                }
                TrustPolicy { keys: cfg.trust.keys.clone(), allow_unsigned: cfg.trust.allow_unsigned, lock: None }
            }
        };
        let trusted: Vec<String> = policy.keys.iter().map(|k| k.public_key.clone()).collect();
        findings.extend(check_files(
            &cfg,
            &files,
            &trusted,
            policy.allow_unsigned || self.host.trust.allow_unsigned,
            &[("cache directory", cache.as_deref()), ("state directory", Some(&state))],
        ));

        // A host that is never served, to learn the tools: every file is
        // loaded whatever its signature (check_files reported those).
        let host = Host::with_budget(builder.runtime()?, Budget::new(cfg.budget.clone(), cfg.npcs.clone()))
            .with_trust(TrustPolicy::permissive())
            .with_grants(cfg.plugins.grants.clone(), &cfg.base_dir);
        if cfg.plugins.builtins
            && !self.host.no_builtins
            && let Err(e) = toolhost::builtin::add_builtins(&host)
        {
            findings.push(Finding { level: Level::Error, at: "plugins.builtins".into(), message: e.to_string() });
        }
        for f in &files {
            if let Err(e) = host.install_plugin_file(f) {
                findings.push(Finding {
                    level: Level::Error,
                    at: format!("plugin file {}", f.display()),
                    message: format!("does not load: {e}"),
                });
            }
        }
        let host = std::sync::Arc::new(host);
        let status = if cfg.mcp.servers.is_empty() {
            Vec::new()
        } else {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let servers = ExternalServers::start_in(host.clone(), &cfg.mcp.servers, rt.handle().clone(), &state)?;
            servers.wait_ready(Duration::from_secs(self.connect_timeout.max(1)));
            let status = servers.status();
            servers.shutdown();
            status
        };
        findings.extend(check_host(&cfg, &host, &status, true));

        let errors = findings.iter().filter(|f| f.level == Level::Error).count();
        let warnings = findings.len() - errors;
        if self.json {
            let out = serde_json::json!({"findings": findings, "errors": errors, "warnings": warnings});
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
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

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
