//! Subcommands of the `toolhost` binary. `anyhow` lives here, at the edge.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use toolhost::Host;
use toolhost::budget::calibrate::{self, CalibrationStore, ProbeOutcome};
use toolhost::budget::{Budget, Tier, ToolStatus, Turn};
use toolhost::config::{self, Config};
use toolhost::registry::RegisteredTool;
use toolhost::runtime::{CompileCache, Runtime};
use toolhost::tool::{CallContext, Content, ToolDef, ToolOutput};

/// A WebAssembly plugin host for sandboxed LLM tools.
///
/// toolhost runs tools compiled to WASI preview-2 components (the built-in
/// dice roller and SRD rules lookup, plus any plugin you load) under hard
/// limits: fuel, an epoch deadline, memory and output caps, deny-by-default
/// capabilities. Tools are sorted into FAST / STANDARD / DEEP latency tiers;
/// agents (NPCs) see only the tools on their allow-list that fit their tier.
///
/// Configuration comes from toolhost.yaml in the working directory (or
/// --config); command-line flags override it.
#[derive(Debug, Parser)]
#[command(name = "toolhost", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    host: HostArgs,
    #[command(subcommand)]
    command: Command,
}

/// Options that shape the host every subcommand starts.
#[derive(Debug, Args)]
struct HostArgs {
    /// Config file [default: ./toolhost.yaml when it exists].
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Load this plugin component too (repeatable).
    #[arg(long = "plugin", value_name = "FILE.wasm", global = true)]
    plugins: Vec<PathBuf>,
    /// Do not load the built-in plugins.
    #[arg(long, global = true)]
    no_builtins: bool,
    /// Where compiled components are cached [default: $TOOLHOST_CACHE_DIR, $XDG_CACHE_HOME/toolhost or ~/.cache/toolhost].
    #[arg(long, value_name = "DIR", global = true)]
    cache_dir: Option<PathBuf>,
    /// Compile every component afresh and cache nothing.
    #[arg(long, global = true)]
    no_cache: bool,
    /// Where calibration results are kept [default: $TOOLHOST_STATE_DIR, $XDG_STATE_HOME/toolhost or ~/.local/state/toolhost].
    #[arg(long, value_name = "DIR", global = true)]
    state_dir: Option<PathBuf>,
    /// Calibration environment name [default: budget.environment, else "default"].
    #[arg(long = "env", value_name = "NAME", global = true)]
    environment: Option<String>,
    /// Fuel (about one unit per wasm instruction) per call; 0 disables metering.
    #[arg(long, value_name = "UNITS", global = true)]
    fuel: Option<u64>,
    /// Linear memory limit per call, in MiB.
    #[arg(long, value_name = "MIB", global = true)]
    memory_mib: Option<usize>,
    /// Ceiling on any call's deadline, in milliseconds.
    #[arg(long, value_name = "MS", global = true)]
    timeout_ceiling_ms: Option<u64>,
    /// Floor under any call's deadline, in milliseconds (tools declaring less get this).
    #[arg(long, value_name = "MS", global = true)]
    timeout_floor_ms: Option<u64>,
    /// Largest result a call may return, in bytes.
    #[arg(long, value_name = "BYTES", global = true)]
    max_output_bytes: Option<usize>,
    /// Load plugin files that are not signed by a trusted key (they are
    /// reported as unverified by `toolhost grants`). Default: refuse them.
    #[arg(long, global = true, env = "TOOLHOST_ALLOW_UNSIGNED", value_parser = clap::builder::FalseyValueParser::new())]
    allow_unsigned: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the tools to MCP clients (the main job).
    ///
    /// Without a flag: streamable HTTP on 127.0.0.1:8722, endpoint /mcp for
    /// the operator (every tool within budget) and /mcp/<agent> for each agent
    /// in the config (its allow-list, at its tier). --stdio serves one client
    /// over stdin/stdout instead; logs always go to stderr.
    Serve {
        /// Serve one client over stdin/stdout.
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Address for streamable HTTP [default: 127.0.0.1:8722]. Loopback only.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// With --stdio: the agent the session acts as.
        #[arg(long, value_name = "NAME", requires = "stdio")]
        agent: Option<String>,
    },
    /// List tools with tier, badge, declared latency and arguments.
    ///
    /// With --agent, only the tools on that agent's allow-list that fit its
    /// tier (its ceiling, or --tier if lower); with --tier alone, the tools
    /// within that tier.
    Tools {
        /// Show what this agent may see.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// Show only tools within this tier (fast, standard, deep).
        #[arg(long, value_name = "TIER")]
        tier: Option<Tier>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Call a tool and print its result on stdout.
    ///
    /// Exit status 0 on success; 1 with a message on stderr on any error
    /// (unknown tool, invalid arguments, tool failure, limit hit).
    Call {
        /// Tool name, as `toolhost tools` lists it.
        tool: String,
        /// Arguments as a JSON object; `-` reads them from stdin.
        #[arg(default_value = "{}")]
        arguments: String,
        /// Call as this agent: a tool it may not see is refused like an unknown tool.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// The tier of the turn [default: the agent's ceiling; deep without an agent].
        #[arg(long, value_name = "TIER")]
        tier: Option<Tier>,
        /// Print the whole result as JSON: every content block and the call's cost.
        #[arg(long)]
        json: bool,
    },
    /// Show what a component is before loading it: digest, size, the
    /// interfaces it imports (what it asks for), its exports, its tools, and
    /// a speed badge measured by probing its idempotent tools.
    Inspect {
        /// The component file.
        file: PathBuf,
        /// Probes per idempotent tool for the speed badge (0: declared values only).
        #[arg(long, default_value_t = 5, value_name = "N")]
        probes: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Pick the latency tier for an utterance, say why, and list the tools
    /// the agent would see.
    Select {
        /// What the player said.
        utterance: String,
        /// The agent answering (its ceiling caps the tier).
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// Players waiting for a response.
        #[arg(long, default_value_t = 0, value_name = "N")]
        queue_depth: u32,
        /// This is the first turn of the conversation.
        #[arg(long)]
        first_turn: bool,
        /// A DM override in force (fast, standard, deep).
        #[arg(long, value_name = "TIER")]
        dm_override: Option<Tier>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Probe every idempotent tool with a minimal valid input and store the
    /// latencies for this environment; later starts reuse them.
    Calibrate {
        /// Probes per tool.
        #[arg(long, default_value_t = 10, value_name = "N")]
        samples: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Per-tool latency figures: p50, p99, error rate, tier, badge, timeout,
    /// and where the tier comes from (declared, calibrated, measured).
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The security review: for every plugin, its digest, what it asks for
    /// (from its imports), what the operator granted, what was denied, and in
    /// plain words what each grant allows.
    Grants {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The campaign memory store (session transcripts, facts, knowledge graph).
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// List the agents (NPCs) in the config with their ceilings and tools.
    Agents {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Connect to the external MCP servers in the config (mcp.servers) and
    /// show each one's state and tools.
    Servers {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add or remove an external MCP server in the running host (through its
    /// admin API, found in <state dir>/admin.json), without a restart.
    #[command(subcommand)]
    Server(ServerCommand),
    /// What the running host serves now: providers, tools, external servers.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add, replace, remove or list plugins in the running host, without a
    /// restart (through its admin API, found in <state dir>/admin.json).
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Create a signing key pair for publishing plugins: NAME.key (secret,
    /// mode 0600) and NAME.pub (goes into a host's trust.keys).
    Keygen {
        /// The author name written into every package signed with the key.
        name: String,
        /// Directory to write the files to.
        #[arg(long, value_name = "DIR", default_value = ".")]
        out: PathBuf,
    },
    /// Sign a component: appends a manifest (name, version, author,
    /// description, the capabilities its imports ask for, its sha256) and an
    /// ed25519 signature, as a custom section. Replaces an earlier signature.
    Sign {
        /// The component file.
        file: PathBuf,
        /// The secret key file from `toolhost keygen`.
        #[arg(long, value_name = "FILE.key")]
        key: PathBuf,
        /// Plugin version.
        #[arg(long, value_name = "SEMVER", default_value = "0.1.0")]
        version: String,
        /// One-line description [default: the tools it provides].
        #[arg(long, value_name = "TEXT")]
        description: Option<String>,
        /// Write the package here instead of replacing FILE.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Check a package's signature and say whether this host would load it
    /// (trust.keys, trust.allow_unsigned, the lock file). Exit 1 if not.
    Verify {
        /// The component file.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pin the digest of every plugin file the config loads (plugins.files,
    /// plugins.dir, --plugin) in the lock file; a different file is then refused.
    Lock,
    /// Create a new plugin project (Rust, with the toolhost SDK) that builds
    /// with one command and passes `toolhost inspect`.
    New {
        /// Plugin name (lowercase letters, digits, '-', '_').
        name: String,
        /// Where to create it.
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// The toolhost-sdk crate to depend on [default: this toolhost's source tree].
        #[arg(long, value_name = "DIR")]
        sdk: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Load a component into the running host, or replace the loaded plugin
    /// of the same name (the file name without .wasm) atomically. A broken or
    /// refused file leaves the running version serving and says why.
    Add {
        /// The component file.
        file: PathBuf,
    },
    /// Unload a plugin from the running host.
    Remove {
        /// Plugin name.
        name: String,
    },
    /// List the running host's plugins.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ServerCommand {
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
    },
    /// Disconnect the running host from a server; its tools leave the registry.
    Remove {
        /// The server's name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum MemoryCommand {
    /// Load a campaign from a JSON file (sessions with transcripts,
    /// entities, relationships, facts; the shape of host/data/demo-campaign.json).
    /// Records with the same ids are replaced.
    Import {
        /// The campaign file.
        file: PathBuf,
    },
}

/// What a subcommand works with.
struct Env {
    host: Arc<Host>,
    store: CalibrationStore,
    environment: String,
    /// External MCP servers; declared before `rt` so they stop first.
    servers: Arc<toolhost::mcp::ExternalServers>,
    rt: tokio::runtime::Runtime,
    server_cfg: toolhost::config::ServerConfig,
    state: PathBuf,
    /// The watched plugins directory (`plugins.dir`).
    plugins_dir: Option<PathBuf>,
}

impl HostArgs {
    fn config(&self) -> Result<Config> {
        let path = match &self.config {
            Some(p) => Some(p.clone()),
            None => Some(PathBuf::from(config::DEFAULT_FILE)).filter(|p| p.exists()),
        };
        match path {
            Some(p) => Ok(Config::load(&p)?),
            None => Ok(Config::default()),
        }
    }

    fn runtime(&self, cfg: &Config) -> Result<Runtime> {
        // Flags override the config file, key by key.
        let l = toolhost::config::LimitsConfig {
            fuel: self.fuel,
            memory_mib: self.memory_mib,
            timeout_ceiling_ms: self.timeout_ceiling_ms,
            timeout_floor_ms: self.timeout_floor_ms,
            max_output_bytes: self.max_output_bytes,
            ..Default::default()
        }
        .apply(cfg.limits());
        let root = (!self.no_cache).then(|| {
            self.cache_dir
                .clone()
                .or_else(|| cfg.cache_dir.as_ref().map(|d| cfg.resolve(d)))
                .unwrap_or_else(CompileCache::default_root)
        });
        Runtime::new(l, root.as_deref()).map_err(|e| anyhow::anyhow!("cannot start the wasm engine: {e:#}"))
    }

    /// The trust policy from `trust:` and --allow-unsigned.
    fn trust(&self, cfg: &Config) -> Result<toolhost::package::TrustPolicy> {
        let lock_path = self.lock_path(cfg);
        let lock = match &lock_path {
            Some(p) if p.exists() => Some(toolhost::package::LockFile::read(p)?),
            Some(p) if cfg.trust.lock_file.is_some() => {
                bail!("trust.lock_file: {} does not exist (create it with `toolhost lock`)", p.display())
            }
            _ => None,
        };
        let mut keys = cfg.trust.keys.clone();
        for (i, f) in cfg.trust.key_files.iter().enumerate() {
            let path = cfg.resolve(f);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("trust.key_files[{i}]: reading {}", path.display()))?;
            keys.push(
                serde_json::from_str(&text)
                    .with_context(|| format!("trust.key_files[{i}]: {} is not a toolhost .pub file", path.display()))?,
            );
        }
        Ok(toolhost::package::TrustPolicy {
            keys,
            allow_unsigned: cfg.trust.allow_unsigned || self.allow_unsigned,
            lock,
        })
    }

    /// The lock file: trust.lock_file, else toolhost.lock beside the config.
    fn lock_path(&self, cfg: &Config) -> Option<PathBuf> {
        match &cfg.trust.lock_file {
            Some(p) => Some(cfg.resolve(p)),
            None => Some(cfg.base_dir.join("toolhost.lock")),
        }
    }

    /// The state directory, without starting a host.
    fn state_dir(&self) -> Result<PathBuf> {
        let cfg = self.config()?;
        Ok(self
            .state_dir
            .clone()
            .or_else(|| cfg.state_dir.as_ref().map(|d| cfg.resolve(d)))
            .unwrap_or_else(toolhost::config::default_state_dir))
    }

    fn env(&self) -> Result<Env> {
        let cfg = self.config()?;
        let budget = Budget::new(cfg.budget.clone(), cfg.npcs.clone());
        let state = self
            .state_dir
            .clone()
            .or_else(|| cfg.state_dir.as_ref().map(|d| cfg.resolve(d)))
            .unwrap_or_else(toolhost::config::default_state_dir);
        let audit = if cfg.audit.disabled {
            toolhost::audit::AuditLog::disabled()
        } else {
            let path = cfg.audit.path.as_ref().map(|p| cfg.resolve(p)).unwrap_or_else(|| state.join("audit.jsonl"));
            toolhost::audit::AuditLog::open(&path, cfg.audit.include_arguments)
                .with_context(|| format!("opening the audit log {}", path.display()))?
        };
        let memory_path =
            cfg.memory.path.as_ref().map(|p| cfg.resolve(p)).unwrap_or_else(|| state.join("memory.sqlite3"));
        let memory = toolhost::memory::MemoryStore::open(&memory_path)
            .with_context(|| format!("opening the memory store {}", memory_path.display()))?;
        let host = Host::with_budget(self.runtime(&cfg)?, budget)
            .with_trust(self.trust(&cfg)?)
            .with_grants(cfg.plugins.grants.clone(), &cfg.base_dir)
            .with_audit(audit)
            .with_memory(Arc::new(memory));
        if cfg.plugins.builtins && !self.no_builtins {
            host.add_builtins().context("loading the built-in plugins")?;
        }
        for p in cfg.plugins.files.iter().map(|p| cfg.resolve(p)).chain(self.plugins.iter().cloned()) {
            host.add_plugin_file(&p)?;
        }
        let plugins_dir = cfg.plugins.dir.as_ref().map(|d| cfg.resolve(d));
        if let Some(dir) = &plugins_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("plugins.dir: creating {}", dir.display()))?;
            for p in
                toolhost::watch::plugin_files(dir).with_context(|| format!("plugins.dir: reading {}", dir.display()))?
            {
                // Like the watcher: a bad file is reported, the rest load.
                if let Err(e) = host.install_plugin_file(&p) {
                    eprintln!("warning: {} not loaded: {e}", p.display());
                }
            }
        }
        let environment = self.environment.clone().unwrap_or_else(|| cfg.budget.environment.clone());
        let store = CalibrationStore::new(&state, &environment);
        store.load_into(&host);
        let host = Arc::new(host);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("toolhost-io")
            .build()
            .context("starting the async runtime")?;
        let servers = toolhost::mcp::ExternalServers::new(host.clone(), rt.handle().clone());
        for (i, s) in cfg.mcp.servers.iter().enumerate() {
            servers.add(s.clone()).with_context(|| format!("mcp.servers[{i}]"))?;
        }
        if !cfg.mcp.servers.is_empty() {
            servers.wait_ready(SERVER_CONNECT_WAIT);
            for s in servers.status() {
                if s.state != "up" {
                    eprintln!(
                        "warning: MCP server {} is not connected ({}); its tools are unavailable until it is",
                        s.name,
                        s.last_error.as_deref().unwrap_or("still connecting")
                    );
                }
            }
        }
        Ok(Env { host, store, environment, servers, rt, server_cfg: cfg.server.clone(), state, plugins_dir })
    }
}

/// How long a command waits for the configured external MCP servers' first
/// connection before going on without the ones that are not up.
const SERVER_CONNECT_WAIT: Duration = Duration::from_secs(30);

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    let a = &cli.host;
    match cli.command {
        Command::Serve { stdio, http, agent } => serve(a.env()?, stdio, http, agent),
        Command::Tools { agent, tier, json } => tools(&a.env()?, agent.as_deref(), tier, json),
        Command::Call { tool, arguments, agent, tier, json } => {
            call(&a.env()?, &tool, &arguments, agent.as_deref(), tier, json)
        }
        Command::Inspect { file, probes, json } => inspect(a, &file, probes, json),
        Command::Select { utterance, agent, queue_depth, first_turn, dm_override, json } => {
            let turn = Turn { dm_override, queue_depth, first_turn };
            select(&a.env()?, &utterance, agent.as_deref(), turn, json)
        }
        Command::Calibrate { samples, json } => calibrate_cmd(&a.env()?, samples, json),
        Command::Stats { json } => stats(&a.env()?, json),
        Command::Agents { json } => agents(&a.env()?, json),
        Command::Servers { json } => servers_list(&a.env()?, json),
        Command::Server(ServerCommand::Add { name, command, url, token_env, env }) => {
            let mut vars = serde_json::Map::new();
            for kv in env {
                let (k, v) = kv.split_once('=').with_context(|| format!("--set-env {kv:?}: expected NAME=VALUE"))?;
                vars.insert(k.to_string(), Value::String(v.to_string()));
            }
            let token = match token_env {
                Some(var) => Some(std::env::var(&var).with_context(|| format!("--token-env: {var} is not set"))?),
                None => None,
            };
            let body = json!({
                "name": name,
                "transport": if command.is_some() { "stdio" } else { "streamable-http" },
                "command": command,
                "url": url,
                "env": vars,
                "auth": token.map(|t| json!({"token": t})),
            });
            let v = admin_request(&a.state_dir()?, "POST", "/servers", Some(body))?;
            let st = &v["status"];
            println!(
                "added {name}: {} ({})",
                st["state"].as_str().unwrap_or("connecting"),
                st["tools"].as_array().map(|t| format!("{} tools", t.len())).unwrap_or_default()
            );
            if let Some(e) = st["last_error"].as_str() {
                println!("  last error: {e}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Server(ServerCommand::Remove { name }) => {
            admin_request(&a.state_dir()?, "DELETE", &format!("/servers/{name}"), None)?;
            println!("removed {name}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugin(cmd) => plugin_cmd(a, cmd),
        Command::Keygen { name, out } => {
            let key = toolhost::package::KeyPair::generate(&name)?;
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let stem = out.join(&name);
            key.save(&stem)?;
            println!(
                "wrote {} (secret: keep it private) and {}",
                stem.with_extension("key").display(),
                stem.with_extension("pub").display()
            );
            println!(
                "Hosts that trust you add this to toolhost.yaml:\ntrust:\n  keys:\n    - name: {}\n      public_key: {}",
                name,
                key.public().public_key
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Sign { file, key, version, description, output } => {
            sign_cmd(a, &file, &key, &version, description, output)
        }
        Command::Verify { file, json } => verify_cmd(a, &file, json),
        Command::Lock => lock_cmd(a),
        Command::New { name, dir, sdk } => {
            let project = toolhost::scaffold::new_plugin(&dir, &name, sdk.as_deref())?;
            let wasm = toolhost::scaffold::component_path(&project, &name);
            println!("created {}", project.display());
            println!(
                "build it:   (cd {} && cargo build --release --target {})",
                project.display(),
                toolhost::scaffold::TARGET
            );
            println!("check it:   toolhost inspect {}", wasm.display());
            println!("load it:    toolhost plugin add {}   (into a running `toolhost serve`)", wasm.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { json } => {
            let v = admin_request(&a.state_dir()?, "GET", "/status", None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<[String; 4]> = v["providers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    [
                        p["name"].as_str().unwrap_or("").to_string(),
                        p["kind"].as_str().unwrap_or("").to_string(),
                        if p["available"].as_bool() == Some(true) { "up" } else { "unavailable" }.to_string(),
                        str_list(&p["tools"]),
                    ]
                })
                .collect();
            print_table(&["PROVIDER", "KIND", "STATE", "TOOLS"], &rows);
            Ok(ExitCode::SUCCESS)
        }
        Command::Grants { json } => grants(&a.env()?, json),
        Command::Memory(MemoryCommand::Import { file }) => {
            let env = a.env()?;
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let campaign: toolhost::memory::Campaign = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a valid campaign file", file.display()))?;
            let store = env.host.memory()?;
            store.import(&campaign)?;
            println!(
                "imported {} sessions, {} entities, {} relationships, {} facts",
                campaign.sessions.len(),
                campaign.entities.len(),
                campaign.relationships.len(),
                campaign.facts.len()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// "expression*, seed": the argument names, required ones starred.
fn arg_summary(schema: &Value) -> String {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(props) = schema["properties"].as_object() else { return String::new() };
    props
        .keys()
        .map(|k| if required.contains(&k.as_str()) { format!("{k}*") } else { k.clone() })
        .collect::<Vec<_>>()
        .join(", ")
}

fn ms(v: Option<u32>) -> String {
    v.map_or("-".into(), |v| format!("{v}ms"))
}

fn dur(d: Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d < Duration::from_millis(10) => format!("{:.2}ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.0}ms", d.as_secs_f64() * 1e3),
    }
}

fn tier_name(t: Option<Tier>) -> &'static str {
    t.map_or("over-budget", Tier::as_str)
}

fn status_json(s: &ToolStatus) -> Value {
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
    json!({
        "tier": s.tier.map(Tier::as_str),
        "base_tier": s.base_tier.map(Tier::as_str),
        "demoted": s.demoted,
        "tier_source": s.source.as_str(),
        "p50_ms": ms(s.p50),
        "badge": s.badge.map(|b| b.as_str()),
        "compatibility": Tier::compatibility(s.tier),
        "timeout_ms": s.timeout.as_secs_f64() * 1e3,
        "calls": s.real.map_or(0, |r| r.count),
        "real_p50_ms": ms(s.real.map(|r| r.p50)),
        "real_p99_ms": ms(s.real.map(|r| r.p99)),
        "error_rate": s.real.map(|r| r.error_rate()),
        "probes": s.probes.map_or(0, |p| p.count),
        "probe_p50_ms": ms(s.probes.map(|p| p.p50)),
        "probe_p99_ms": ms(s.probes.map(|p| p.p99)),
    })
}

fn tool_json(t: &RegisteredTool, s: &ToolStatus) -> Value {
    let mut v = def_json(&t.def);
    v["provider"] = json!(t.provider.name());
    v["kind"] = json!(t.provider.kind());
    v["budget"] = status_json(s);
    v
}

fn def_json(t: &ToolDef) -> Value {
    json!({
        "name": t.name,
        "description": t.description,
        "input_schema": t.input_schema,
        "estimated_duration_ms": t.meta.estimated_duration_ms,
        "max_duration_ms": t.meta.max_duration_ms,
        "idempotent": t.meta.idempotent,
        "cacheable_seconds": t.meta.cacheable_seconds,
    })
}

fn tools(env: &Env, agent: Option<&str>, tier: Option<Tier>, as_json: bool) -> Result<ExitCode> {
    let catalog = env.host.registry().snapshot();
    let budget = env.host.budget();
    let list: Vec<Arc<RegisteredTool>> = match (agent, tier) {
        (None, None) => catalog.tools().cloned().collect(),
        (agent, tier) => {
            let ceiling = match agent {
                Some(a) => budget.effective_tier(Some(a), tier.unwrap_or(Tier::Deep))?,
                None => tier.unwrap_or(Tier::Deep),
            };
            budget.available_tools(&catalog, agent, ceiling)?
        }
    };
    if as_json {
        let v: Vec<Value> = list.iter().map(|t| tool_json(t, &budget.status(&t.def))).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 8]> = list
        .iter()
        .map(|t| {
            let s = budget.status(&t.def);
            [
                t.def.name.clone(),
                t.provider.name().to_string(),
                tier_name(s.tier).to_string(),
                s.badge.map_or("-", |b| b.as_str()).to_string(),
                Tier::compatibility(s.tier).to_string(),
                ms(t.def.meta.estimated_duration_ms),
                ms(t.def.meta.max_duration_ms),
                arg_summary(&t.def.input_schema),
            ]
        })
        .collect();
    print_table(&["TOOL", "PROVIDER", "TIER", "BADGE", "COMPATIBILITY", "P50", "MAX", "ARGUMENTS (* required)"], &rows);
    Ok(ExitCode::SUCCESS)
}

fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn content_json(c: &Content) -> Value {
    use base64::Engine as _;
    let encode = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    match c {
        Content::Text(t) => json!({"type": "text", "text": t}),
        Content::Json(v) => json!({"type": "json", "json": v}),
        Content::Image { mime_type, data } => json!({"type": "image", "mime_type": mime_type, "data": encode(data)}),
        Content::Audio { mime_type, data } => json!({"type": "audio", "mime_type": mime_type, "data": encode(data)}),
        Content::Resource { uri, mime_type, body } => match body {
            toolhost::tool::ResourceBody::Text(t) => {
                json!({"type": "resource", "uri": uri, "mime_type": mime_type, "text": t})
            }
            toolhost::tool::ResourceBody::Blob(b) => {
                json!({"type": "resource", "uri": uri, "mime_type": mime_type, "blob": encode(b)})
            }
        },
    }
}

fn call(
    env: &Env,
    tool: &str,
    arguments: &str,
    agent: Option<&str>,
    tier: Option<Tier>,
    as_json: bool,
) -> Result<ExitCode> {
    let raw = if arguments == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading arguments from stdin")?;
        s
    } else {
        arguments.to_string()
    };
    let args: Value = serde_json::from_str(&raw).with_context(|| format!("arguments are not valid JSON: {raw}"))?;
    let ctx = CallContext::default();
    let out: ToolOutput = match (agent, tier) {
        (None, None) => env.host.call(tool, &args, &ctx)?,
        (agent, tier) => {
            let tier = env.host.budget().effective_tier(agent, tier.unwrap_or(Tier::Deep))?;
            env.host.call_as(agent, tier, tool, &args, &ctx)?
        }
    };
    if as_json {
        let v = json!({
            "content": out.content.iter().map(content_json).collect::<Vec<_>>(),
            "duration_ms": out.stats.duration.as_secs_f64() * 1000.0,
            "fuel_used": out.stats.fuel_used,
            "peak_memory_bytes": out.stats.peak_memory_bytes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    match &out.content[..] {
        [Content::Json(v)] => println!("{}", serde_json::to_string(v)?),
        blocks if blocks.iter().all(|b| matches!(b, Content::Text(_))) => {
            for b in blocks {
                if let Content::Text(t) = b {
                    println!("{t}");
                }
            }
        }
        blocks => println!("{}", serde_json::to_string(&blocks.iter().map(content_json).collect::<Vec<_>>())?),
    }
    Ok(ExitCode::SUCCESS)
}

fn inspect(args: &HostArgs, file: &Path, probes: usize, as_json: bool) -> Result<ExitCode> {
    let cfg = args.config()?;
    let runtime = args.runtime(&cfg)?;
    let name = toolhost::runtime::plugin_name_from_path(file);
    let bytes = toolhost::runtime::read_bounded(file, runtime.limits().max_component_bytes)
        .map_err(|kind| toolhost::runtime::LoadError { plugin: name.clone(), kind })?;
    let compiled = runtime.compile(&name, &bytes)?;
    let (digest, size) = (compiled.digest.clone(), compiled.size);
    let (imports, exports) = (compiled.imports.clone(), compiled.exports.clone());
    let host = Host::with_budget(runtime.clone(), Budget::new(cfg.budget.clone(), Vec::new()));
    let loaded =
        runtime.instantiate_compiled(compiled, Default::default()).map_err(|e| e.kind.to_string()).and_then(|p| {
            host.registry().add(Arc::new(p)).map_err(|e| e.to_string())?;
            Ok(())
        });
    let error = loaded.err();
    let probed = if error.is_none() && probes > 0 { calibrate::calibrate(&host, probes) } else { Vec::new() };
    let catalog = host.registry().snapshot();
    let tools: Vec<(ToolDef, ToolStatus, Option<String>)> = catalog
        .tools()
        .map(|t| {
            let note = probed.iter().find(|p| p.tool == t.def.name).and_then(|p| match &p.outcome {
                ProbeOutcome::Probed(_) => None,
                ProbeOutcome::Skipped(why) => Some(format!("not probed: {why}")),
                ProbeOutcome::Failed(why) => Some(format!("probe failed: {why}")),
            });
            (t.def.clone(), host.budget().status(&t.def), note)
        })
        .collect();
    if as_json {
        let v = json!({
            "file": file.display().to_string(),
            "name": name,
            "sha256": digest,
            "size": size,
            "imports": imports,
            "exports": exports,
            "loadable": error.is_none(),
            "error": error,
            "tools": tools.iter().map(|(d, s, note)| {
                let mut v = def_json(d);
                v["budget"] = status_json(s);
                v["probe_note"] = json!(note);
                v
            }).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("file:    {}", file.display());
        println!("sha256:  {digest}");
        println!("size:    {size} bytes");
        println!("imports ({}):", imports.len());
        for i in &imports {
            println!("  {i}");
        }
        println!("exports ({}):", exports.len());
        for e in &exports {
            println!("  {e}");
        }
        if tools.is_empty() {
            println!("tools:   none");
        } else {
            println!("tools ({}):", tools.len());
            for (t, s, note) in &tools {
                println!(
                    "  {}  p50 {}  max {}  {}{}  args: {}",
                    t.name,
                    ms(t.meta.estimated_duration_ms),
                    ms(t.meta.max_duration_ms),
                    if t.meta.idempotent { "idempotent" } else { "not idempotent" },
                    if t.meta.cacheable_seconds > 0 {
                        format!(", cacheable {}s", t.meta.cacheable_seconds)
                    } else {
                        String::new()
                    },
                    arg_summary(&t.input_schema)
                );
                println!(
                    "      tier {} ({}), badge {}, {}{}",
                    tier_name(s.tier),
                    s.source.as_str(),
                    s.badge.map_or("-", |b| b.as_str()),
                    Tier::compatibility(s.tier),
                    s.probes.map(|p| format!(", probed p50 {}", dur(Some(p.p50)))).unwrap_or_default()
                );
                if let Some(n) = note {
                    println!("      {n}");
                }
                println!("      {}", t.description);
            }
        }
    }
    match error {
        Some(e) if !as_json => bail!("{name} cannot be loaded: {e}"),
        Some(_) => Ok(ExitCode::FAILURE),
        None => Ok(ExitCode::SUCCESS),
    }
}

fn select(env: &Env, utterance: &str, agent: Option<&str>, turn: Turn, as_json: bool) -> Result<ExitCode> {
    let budget = env.host.budget();
    let sel = budget.select(&budget.selector(), agent, utterance, turn)?;
    let catalog = env.host.registry().snapshot();
    let visible: Vec<String> =
        budget.available_tools(&catalog, agent, sel.tier)?.iter().map(|t| t.def.name.clone()).collect();
    if as_json {
        let v = json!({
            "utterance": utterance,
            "agent": agent,
            "tier": sel.tier.as_str(),
            "reason": sel.reason.to_string(),
            "tools": visible,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("tier:   {}", sel.tier.as_str().to_uppercase());
        let capped = agent.map(|a| budget.agent(a).map(|p| p.budget_tier)).transpose()?;
        match capped {
            Some(c) if sel.tier == c && sel.reason != toolhost::budget::Reason::DmOverride => {
                println!("why:    {} (capped at the agent's ceiling, {})", sel.reason, c)
            }
            _ => println!("why:    {}", sel.reason),
        }
        println!("tools:  {}", if visible.is_empty() { "(none)".to_string() } else { visible.join(", ") });
    }
    Ok(ExitCode::SUCCESS)
}

fn calibrate_cmd(env: &Env, samples: usize, as_json: bool) -> Result<ExitCode> {
    if samples == 0 {
        bail!("--samples must be at least 1");
    }
    let results = calibrate::calibrate(&env.host, samples);
    env.store
        .save(&env.host, &env.environment, &results)
        .with_context(|| format!("saving calibration to {}", env.store.path().display()))?;
    let catalog = env.host.registry().snapshot();
    if as_json {
        let v: Vec<Value> = results
            .iter()
            .map(|r| {
                let status = catalog.get(&r.tool).map(|t| status_json(&env.host.budget().status(&t.def)));
                let (outcome, detail) = match &r.outcome {
                    ProbeOutcome::Probed(d) => ("probed", json!(d.len())),
                    ProbeOutcome::Skipped(why) => ("skipped", json!(why)),
                    ProbeOutcome::Failed(why) => ("failed", json!(why)),
                };
                json!({"tool": r.tool, "provider": r.provider, "outcome": outcome, "detail": detail, "budget": status})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"environment": env.environment, "file": env.store.path(), "tools": v})
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 6]> = results
        .iter()
        .map(|r| {
            let s = catalog.get(&r.tool).map(|t| env.host.budget().status(&t.def));
            let (p50, p99, note) = match &r.outcome {
                ProbeOutcome::Probed(_) => (
                    dur(s.and_then(|s| s.probes.map(|p| p.p50))),
                    dur(s.and_then(|s| s.probes.map(|p| p.p99))),
                    String::new(),
                ),
                ProbeOutcome::Skipped(why) => ("-".into(), "-".into(), format!("skipped: {why}")),
                ProbeOutcome::Failed(why) => ("-".into(), "-".into(), format!("failed: {why}")),
            };
            [
                r.tool.clone(),
                p50,
                p99,
                tier_name(s.and_then(|s| s.tier)).to_string(),
                s.and_then(|s| s.badge).map_or("-", |b| b.as_str()).to_string(),
                note,
            ]
        })
        .collect();
    print_table(&["TOOL", "PROBE P50", "PROBE P99", "TIER", "BADGE", "NOTE"], &rows);
    println!("saved to {} (environment {:?})", env.store.path().display(), env.environment);
    Ok(ExitCode::SUCCESS)
}

fn stats(env: &Env, as_json: bool) -> Result<ExitCode> {
    let catalog = env.host.registry().snapshot();
    let budget = env.host.budget();
    if as_json {
        let v: Vec<Value> = catalog
            .tools()
            .map(|t| {
                let mut s = status_json(&budget.status(&t.def));
                s["tool"] = json!(t.def.name);
                s["provider"] = json!(t.provider.name());
                s
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 8]> = catalog
        .tools()
        .map(|t| {
            let s = budget.status(&t.def);
            let (p50, p99) = match (s.real, s.probes) {
                (Some(r), _) => (Some(r.p50), Some(r.p99)),
                (None, Some(p)) => (Some(p.p50), Some(p.p99)),
                _ => (None, None),
            };
            [
                t.def.name.clone(),
                dur(p50.or(s.p50)),
                dur(p99),
                s.real.map_or("-".into(), |r| format!("{:.0}%", r.error_rate() * 100.0)),
                format!("{}{}", tier_name(s.tier), if s.demoted { " (demoted)" } else { "" }),
                s.source.as_str().to_string(),
                s.badge.map_or("-", |b| b.as_str()).to_string(),
                dur(Some(s.timeout)),
            ]
        })
        .collect();
    print_table(&["TOOL", "P50", "P99", "ERRORS", "TIER", "FROM", "BADGE", "TIMEOUT"], &rows);
    Ok(ExitCode::SUCCESS)
}

fn agents(env: &Env, as_json: bool) -> Result<ExitCode> {
    let budget = env.host.budget();
    if as_json {
        let v: Vec<Value> = budget
            .agents()
            .iter()
            .map(|a| json!({"name": a.name, "budget_tier": a.budget_tier.as_str(), "tools": a.tools, "instructions": a.instructions}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 3]> =
        budget.agents().iter().map(|a| [a.name.clone(), a.budget_tier.to_string(), a.tools.join(", ")]).collect();
    print_table(&["AGENT", "CEILING", "TOOLS"], &rows);
    Ok(ExitCode::SUCCESS)
}

fn serve(env: Env, stdio: bool, http: Option<std::net::SocketAddr>, agent: Option<String>) -> Result<ExitCode> {
    use toolhost::mcp::McpFront;
    use toolhost::mcp::http::{Admin, endpoints, router};
    let host = env.host.clone();
    let admin = Admin { token: random_token()?, servers: Some(env.servers.clone()) };
    let state = env.state.clone();
    let _watch = match &env.plugins_dir {
        Some(dir) => Some(
            toolhost::watch::watch_dir(host.clone(), dir, false)
                .with_context(|| format!("watching plugins.dir {}", dir.display()))?,
        ),
        None => None,
    };
    if stdio {
        let front = McpFront::new(host.clone(), agent)?;
        return env.rt.block_on(async move {
            use rmcp::ServiceExt;
            // The operator's admin API, on loopback, beside the stdio session.
            let admin_file = start_admin(host.clone(), &env.server_cfg, admin, &state).await?;
            let service = front.serve(rmcp::transport::stdio()).await.context("MCP initialization over stdio")?;
            service.waiting().await.context("MCP session over stdio")?;
            admin_file.remove();
            Ok(ExitCode::SUCCESS)
        });
    }
    let addr = http.unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 8722)));
    toolhost::mcp::http::check_exposure(addr, &env.server_cfg)?;
    env.rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
        let local = listener.local_addr()?;
        let admin_token = admin.token.clone();
        let app = router(host.clone(), &env.server_cfg, local, Some(admin))?;
        let admin_file = AdminFile::write(&state, local, &admin_token)?;
        // The banner. Whoever started us may close stdout after reading the
        // first line: a failed write must not stop the server.
        use std::io::Write as _;
        let mut banner = format!("toolhost {} serving MCP (streamable HTTP) on http://{local}\n", env!("CARGO_PKG_VERSION"));
        for (who, path) in endpoints(&host) {
            banner.push_str(&format!("  {who}: http://{local}{path}\n"));
        }
        let auth = if env.server_cfg.tokens.is_empty() { "" } else { " --header 'Authorization: Bearer <token>'" };
        banner.push_str(&format!(
            "Point an MCP client at an endpoint, e.g.: npx @modelcontextprotocol/inspector --cli http://{local}/mcp --transport http{auth} --method tools/list\n"
        ));
        banner.push_str(&format!(
            "Operator commands (toolhost server add/remove, toolhost status) reach this host through {}.\nCtrl-C stops the server.\n",
            admin_file.path.display()
        ));
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(banner.as_bytes()).and_then(|()| out.flush());
        drop(out);
        axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>())
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("HTTP server")?;
        admin_file.remove();
        env.servers.shutdown();
        Ok(ExitCode::SUCCESS)
    })
}

/// 32 random bytes as hex.
fn random_token() -> Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness for the admin token: {e}"))?;
    Ok(hex::encode(b))
}

/// `<state>/admin.json`: where the running host's admin API is and its
/// token, readable by the operator's user only.
struct AdminFile {
    path: PathBuf,
}

impl AdminFile {
    fn path(state: &Path) -> PathBuf {
        state.join("admin.json")
    }

    fn write(state: &Path, addr: std::net::SocketAddr, token: &str) -> Result<AdminFile> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::create_dir_all(state).with_context(|| format!("creating {}", state.display()))?;
        let path = AdminFile::path(state);
        let tmp = state.join(format!(".admin.json.{}", std::process::id()));
        let body = json!({"url": format!("http://{addr}"), "token": token, "pid": std::process::id()});
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.write_all(body.to_string().as_bytes())?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(AdminFile { path })
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves the admin API alone on an ephemeral loopback port (for `serve --stdio`).
async fn start_admin(
    host: Arc<Host>,
    cfg: &toolhost::config::ServerConfig,
    admin: toolhost::mcp::http::Admin,
    state: &Path,
) -> Result<AdminFile> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.context("binding the admin port")?;
    let local = listener.local_addr()?;
    let file = AdminFile::write(state, local, &admin.token)?;
    let mut cfg = cfg.clone();
    cfg.tokens.clear();
    let app = toolhost::mcp::http::router(host, &cfg, local, Some(admin))?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await;
    });
    Ok(file)
}

/// Sends one request to the running host's admin API.
fn admin_request(state: &Path, method: &str, route: &str, body: Option<Value>) -> Result<Value> {
    let path = AdminFile::path(state);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!("no running toolhost found: {} is missing (start one with `toolhost serve`)", path.display())
    })?;
    let info: Value = serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    let url = format!("{}/admin{route}", info["url"].as_str().unwrap_or_default());
    let token = info["token"].as_str().unwrap_or_default().to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let client = reqwest::Client::new();
        let mut req = client
            .request(method.parse().context("HTTP method")?, &url)
            .bearer_auth(token)
            .timeout(Duration::from_secs(60));
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("reaching the running toolhost at {url} (is it still running?)"))?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let msg = v["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
            bail!("{msg}");
        }
        Ok(v)
    })
}

fn servers_list(env: &Env, as_json: bool) -> Result<ExitCode> {
    let status = env.servers.status();
    if as_json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(ExitCode::SUCCESS);
    }
    if status.is_empty() {
        println!("no external MCP servers configured (mcp.servers in toolhost.yaml)");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 4]> = status
        .iter()
        .map(|s| {
            [
                s.name.clone(),
                s.transport.to_string(),
                match &s.last_error {
                    Some(e) if s.state != "up" => format!("{} ({e})", s.state),
                    _ => s.state.to_string(),
                },
                s.tools.join(", "),
            ]
        })
        .collect();
    print_table(&["SERVER", "TRANSPORT", "STATE", "TOOLS"], &rows);
    Ok(ExitCode::SUCCESS)
}

fn grants(env: &Env, as_json: bool) -> Result<ExitCode> {
    use toolhost::capabilities::{Capability, requested};
    let catalog = env.host.registry().snapshot();
    let mut report = Vec::new();
    for p in catalog.providers() {
        let Some(w) = p.as_wasm() else { continue };
        let g = w.grants();
        let asks = requested(w.imports());
        let granted_caps: Vec<Capability> = [
            (!g.dirs.is_empty()).then_some(Capability::Files),
            (!g.env.is_empty()).then_some(Capability::Env),
            g.memory.is_some().then_some(Capability::Memory),
            (!g.network.is_empty()).then_some(Capability::Network),
        ]
        .into_iter()
        .flatten()
        .collect();
        let denied: Vec<&str> = asks.iter().filter(|c| !granted_caps.contains(c)).map(|c| c.as_str()).collect();
        let mut words = g.describe();
        if words.is_empty() {
            words.push("nothing granted: pure computation, no files, no environment, no network".into());
        }
        let origin = env.host.provenance(p.name());
        report.push(json!({
            "plugin": p.name(),
            "sha256": w.digest(),
            "origin": origin.as_ref().map(|o| o.describe()),
            "provenance": origin,
            "tools": p.tools().iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            "asks_for": asks.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
            "granted": {
                "files": g.dirs.iter().map(|d| json!({
                    "dir": d.host.display().to_string(),
                    "mount": d.mount,
                    "mode": match d.mode { toolhost::capabilities::DirMode::ReadWrite => "read-write", _ => "read-only" },
                })).collect::<Vec<_>>(),
                "env": g.env.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
                "memory": g.memory.is_some(),
                "network": g.network.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            },
            "denied": denied,
            "allows": words,
            "imports": w.imports(),
        }));
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    for r in &report {
        println!("{}  sha256 {}", r["plugin"].as_str().unwrap_or(""), r["sha256"].as_str().unwrap_or(""));
        let list = |v: &Value| {
            let items: Vec<String> =
                v.as_array().into_iter().flatten().map(|x| x.as_str().unwrap_or("").to_string()).collect();
            if items.is_empty() { "(none)".to_string() } else { items.join(", ") }
        };
        if let Some(o) = r["origin"].as_str() {
            println!("  origin:   {o}");
        }
        println!("  tools:    {}", list(&r["tools"]));
        println!("  asks for: {}", list(&r["asks_for"]));
        println!("  denied:   {}", list(&r["denied"]));
        for line in r["allows"].as_array().into_iter().flatten() {
            println!("  - {}", line.as_str().unwrap_or(""));
        }
        println!();
    }
    Ok(ExitCode::SUCCESS)
}

/// A JSON array of strings as "a, b, c".
fn str_list(v: &Value) -> String {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
}

fn plugin_cmd(a: &HostArgs, cmd: PluginCommand) -> Result<ExitCode> {
    let state = a.state_dir()?;
    match cmd {
        PluginCommand::Add { file } => {
            let path = file.canonicalize().with_context(|| format!("{} does not exist", file.display()))?;
            let v = admin_request(&state, "POST", "/plugins", Some(json!({"path": path})))?;
            let tools: Vec<&str> = v["tools"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let verb = if v["replaced"].is_null() { "added" } else { "replaced" };
            println!(
                "{verb} {} (sha256 {}): {}",
                v["name"].as_str().unwrap_or(""),
                v["digest"].as_str().unwrap_or(""),
                tools.join(", ")
            );
            println!("  {}", v["provenance_text"].as_str().unwrap_or(""));
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Remove { name } => {
            admin_request(&state, "DELETE", &format!("/plugins/{name}"), None)?;
            println!("removed {name}");
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::List { json } => {
            let v = admin_request(&state, "GET", "/plugins", None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<[String; 4]> = v["plugins"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    [
                        p["name"].as_str().unwrap_or("").to_string(),
                        p["sha256"].as_str().unwrap_or("").chars().take(12).collect(),
                        p["provenance_text"].as_str().unwrap_or("").to_string(),
                        str_list(&p["tools"]),
                    ]
                })
                .collect();
            print_table(&["PLUGIN", "SHA256", "ORIGIN", "TOOLS"], &rows);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn sign_cmd(
    a: &HostArgs,
    file: &Path,
    key: &Path,
    version: &str,
    description: Option<String>,
    output: Option<PathBuf>,
) -> Result<ExitCode> {
    let key = toolhost::package::KeyPair::load(key)?;
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let name = toolhost::runtime::plugin_name_from_path(output.as_deref().unwrap_or(file));
    // Load it (no grants, no cache writes beyond the usual) to read what it
    // imports and provides: the manifest states what the author built.
    let cfg = a.config()?;
    let runtime = a.runtime(&cfg)?;
    let component = toolhost::package::parse(&bytes)?.component;
    let compiled = runtime.compile(&name, component)?;
    let caps: Vec<String> =
        toolhost::capabilities::requested(&compiled.imports).iter().map(|c| c.as_str().to_string()).collect();
    let description = match description {
        Some(d) => d,
        None => match runtime.instantiate_compiled(compiled, Default::default()) {
            Ok(p) => {
                use toolhost::tool::Provider as _;
                format!("tools: {}", p.tools().iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "))
            }
            Err(_) => String::new(),
        },
    };
    let (package, manifest) = key.sign(&bytes, &name, version, &description, caps)?;
    let out = output.unwrap_or_else(|| file.to_path_buf());
    let tmp = out.with_extension("wasm.signing");
    std::fs::write(&tmp, &package)
        .and_then(|()| std::fs::rename(&tmp, &out))
        .with_context(|| format!("writing {}", out.display()))?;
    println!("signed {} as {} {} by {}", out.display(), manifest.name, manifest.version, manifest.author);
    println!("  sha256 {}", manifest.sha256);
    println!(
        "  asks for: {}",
        if manifest.capabilities.is_empty() { "nothing".into() } else { manifest.capabilities.join(", ") }
    );
    Ok(ExitCode::SUCCESS)
}

fn verify_cmd(a: &HostArgs, file: &Path, as_json: bool) -> Result<ExitCode> {
    let cfg = a.config()?;
    let policy = a.trust(&cfg)?;
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let name = toolhost::runtime::plugin_name_from_path(file);
    let package = toolhost::package::parse(&bytes)?;
    let signature = package.verify(&name);
    let decision = policy.admit(&name, &bytes);
    let report = json!({
        "file": file.display().to_string(),
        "sha256": toolhost::package::component_digest(&bytes)?,
        "signature": match &signature {
            Ok(Some(v)) => json!({"valid": true, "public_key": v.public_key, "manifest": v.manifest}),
            Ok(None) => json!({"valid": false, "reason": "not signed"}),
            Err(e) => json!({"valid": false, "reason": e.to_string()}),
        },
        "admitted": decision.is_ok(),
        "decision": match &decision {
            Ok((_, p)) => p.describe(),
            Err(e) => e.to_string(),
        },
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        match &signature {
            Ok(Some(v)) => {
                let m = &v.manifest;
                println!(
                    "{}: signature valid: {} {} by {} (key {})",
                    file.display(),
                    m.name,
                    m.version,
                    m.author,
                    v.public_key
                );
                println!("  sha256 {}", m.sha256);
                println!(
                    "  asks for: {}",
                    if m.capabilities.is_empty() { "nothing".into() } else { m.capabilities.join(", ") }
                );
            }
            Ok(None) => println!("{}: not signed", file.display()),
            Err(e) => println!("{}: INVALID: {e}", file.display()),
        }
        match &decision {
            Ok((_, p)) => println!("this host would load it: {}", p.describe()),
            Err(e) => println!("this host would refuse it: {e}"),
        }
    }
    Ok(if decision.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn lock_cmd(a: &HostArgs) -> Result<ExitCode> {
    let cfg = a.config()?;
    let path = a.lock_path(&cfg).context("no lock file path")?;
    let mut files: Vec<PathBuf> =
        cfg.plugins.files.iter().map(|p| cfg.resolve(p)).chain(a.plugins.iter().cloned()).collect();
    if let Some(dir) = cfg.plugins.dir.as_ref().map(|d| cfg.resolve(d)) {
        files.extend(toolhost::watch::plugin_files(&dir).unwrap_or_default());
    }
    let mut lock = toolhost::package::LockFile::default();
    for f in &files {
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let package = toolhost::package::parse(&bytes)?;
        let version = package.verify("").ok().flatten().map(|v| v.manifest.version);
        lock.plugins.insert(
            toolhost::runtime::plugin_name_from_path(f),
            toolhost::package::LockEntry { sha256: toolhost::package::component_digest(&bytes)?, version },
        );
    }
    lock.write(&path)?;
    println!("pinned {} plugin(s) in {}", lock.plugins.len(), path.display());
    Ok(ExitCode::SUCCESS)
}
