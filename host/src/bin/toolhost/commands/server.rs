use crate::args::StateArgs;
use anyhow::{Context, Result};
use clap::Subcommand;
use std::collections::BTreeMap;
use std::process::ExitCode;
use toolhost::config::{AuthConfig, McpServerConfig, Transport};

/// Add or remove an external MCP server in the running host (through its
/// admin API, found in <state dir>/admin/<pid>.json), without a restart.
#[derive(Debug, clap::Args)]
pub struct Server {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Connect the running host to another MCP server; its tools join the registry.
    Add {
        /// A unique name (letters, digits, '-', '_').
        name: String,
        /// Start this command and speak MCP over its stdin/stdout (split on whitespace).
        #[arg(long, value_name = "COMMAND", conflicts_with = "url", required_unless_present = "url")]
        command: Option<String>,
        /// Connect to this streamable HTTP endpoint.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Bearer token for --url (read from the environment variable named here, never the command line).
        #[arg(long, value_name = "VAR", requires = "url")]
        token_env: Option<String>,
        /// Extra environment for --command, as NAME=VALUE (repeatable).
        #[arg(long = "set-env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// A variable --command inherits from this environment (repeatable);
        /// it gets no others [default: PATH HOME LANG LC_ALL TZ TMPDIR USER].
        #[arg(long = "pass-env", value_name = "NAME")]
        pass_env: Vec<String>,
        /// The deadline of its tools that declare no max duration, in ms
        /// [default: their tier's ceiling].
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// The tier of its tools that declare no latency: fast, standard or
        /// deep [default: budget.unmeasured_tier].
        #[arg(long, value_name = "TIER")]
        tier: Option<toolhost::budget::Tier>,
        /// The most tools taken from it; past that, the first ones it lists
        /// are served and a warning names it [default: 1000].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_tools: Option<u64>,
    },
    /// Disconnect the running host from a server; its tools leave the registry.
    Remove {
        /// The server's name.
        name: String,
    },
}

impl Server {
    pub fn run(self) -> Result<ExitCode> {
        let state = self.state;
        match self.action {
            Action::Add { name, command, url, token_env, env, pass_env, timeout_ms, tier, max_tools } => {
                let mut vars = BTreeMap::new();
                for kv in env {
                    let (k, v) =
                        kv.split_once('=').with_context(|| format!("--set-env {kv:?}: expected NAME=VALUE"))?;
                    vars.insert(k.to_string(), v.to_string());
                }
                let token = match token_env {
                    Some(var) => Some(std::env::var(&var).with_context(|| format!("--token-env: {var} is not set"))?),
                    None => None,
                };
                let cfg = McpServerConfig {
                    name: name.clone(),
                    transport: if command.is_some() { Transport::Stdio } else { Transport::StreamableHttp },
                    command,
                    url,
                    env: vars,
                    pass_env: if pass_env.is_empty() { toolhost::config::default_pass_env() } else { pass_env },
                    auth: token.map(|t| AuthConfig { token: Some(t), oauth: None }),
                    timeout_ms,
                    tier,
                    max_tools: max_tools.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
                    prefix: None,
                };
                let reply = state.admin()?.add_server(&cfg)?;
                match reply.status {
                    Some(st) => {
                        println!("added {name}: {} ({} tools)", st.state, st.tools.len());
                        if let Some(e) = st.last_error {
                            println!("  last error: {e}");
                        }
                    }
                    None => println!("added {name}: connecting"),
                }
            }
            Action::Remove { name } => {
                state.admin()?.remove_server(&name)?;
                println!("removed {name}");
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
