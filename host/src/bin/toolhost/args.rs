//! Arguments shared by several commands, in one place. Each command
//! flattens only the groups it uses, so its `--help` lists only flags that
//! mean something to it.

use anyhow::{Context, Result};
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use toolhost::HostBuilder;
use toolhost::config::{self, Config};
use toolhost::mcp_client::ExternalServers;

/// The options also written before the subcommand (`toolhost --config F
/// --no-builtins tools`), each with whether it takes a value. There they
/// mean what they mean right after the subcommand's name:
/// [`hoist_leading`] puts them there before clap parses the line.
const LEADING: [(&str, bool); 3] = [("--config", true), ("--plugin", true), ("--no-builtins", false)];

/// The top level's `--help` on [`LEADING`].
pub const LEADING_HELP: &str = "--config, --plugin and --no-builtins go before the subcommand or after it: \
`toolhost --config F --no-builtins tools` is `toolhost tools --config F --no-builtins`. A command that does \
not take one of them refuses it in either place.";

/// [`LEADING`] as the top level declares them, for its `--help` (and for
/// a line that has them but no subcommand, which clap refuses as such).
pub fn leading() -> [clap::Arg; 3] {
    use clap::{Arg, ArgAction};
    [
        Arg::new("leading_config")
            .long("config")
            .value_name("FILE")
            .help("Config file, for every command that reads one [default: ./toolhost.yaml when it exists]"),
        Arg::new("leading_plugins").long("plugin").value_name("FILE.wasm|oci://...").action(ArgAction::Append).help(
            "Load this plugin too (repeatable), for the commands that load plugins: serve, tools, call, select, \
             calibrate, doctor, stats, grants, agents, servers; `lock` pins it (`audit --plugin NAME` \
             picks that plugin's records instead)",
        ),
        Arg::new("leading_no_builtins")
            .long("no-builtins")
            .action(ArgAction::SetTrue)
            .help("Do not load the built-in plugins, for the commands that load plugins (not `lock`)"),
    ]
}

/// `toolhost --config F --plugin P tools --json` as `toolhost tools
/// --config F --plugin P --json`: the options of [`LEADING`] written
/// before the subcommand move to just after its name, where each means
/// what it always means there, and a command that does not take one
/// refuses it as clap refuses any option a command does not take. A line
/// with anything else before the subcommand (`--help`, an unknown option,
/// a value that looks like an option) is left as it is, for clap.
pub fn hoist_leading(mut args: Vec<OsString>) -> Vec<OsString> {
    let word = |i: usize| args.get(i).and_then(|w| w.to_str());
    let mut end = 1;
    while let Some(w) = word(end) {
        let Some(&(_, takes_value)) = LEADING.iter().find(|(name, takes_value)| {
            w == *name || (*takes_value && w.strip_prefix(name).is_some_and(|rest| rest.starts_with('=')))
        }) else {
            break;
        };
        if takes_value && !w.contains('=') {
            if word(end + 1).is_none_or(|v| v.starts_with('-')) {
                return args;
            }
            end += 1;
        }
        end += 1;
    }
    if end == 1 || word(end).is_none_or(|w| w.starts_with('-')) {
        return args;
    }
    let rest = args.split_off(end + 1);
    let subcommand = args.pop().expect("the subcommand's name");
    let leading = args.split_off(1);
    args.push(subcommand);
    args.extend(leading);
    args.extend(rest);
    args
}

/// `--config`.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// Config file [default: ./toolhost.yaml when it exists].
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
}

impl ConfigArgs {
    /// The config file these flags name: `--config`, else `toolhost.yaml`
    /// when there is one (`None`: the defaults).
    pub fn path(&self) -> Option<PathBuf> {
        match &self.config {
            Some(p) => Some(p.clone()),
            None => Some(PathBuf::from(config::DEFAULT_FILE)).filter(|p| p.exists()),
        }
    }

    /// The config file's contents (defaults without one).
    pub fn load(&self) -> Result<Config> {
        match self.path() {
            Some(p) => Ok(Config::load(&p)?),
            None => Ok(Config::default()),
        }
    }
}

/// Finding a running host: its state directory.
#[derive(Debug, Clone, Args)]
pub struct StateArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The running host's state directory, where its admin endpoint record is
    /// [default: $TOOLHOST_STATE_DIR, $XDG_STATE_HOME/toolhost or ~/.local/state/toolhost].
    #[arg(long, value_name = "DIR", global = true)]
    pub state_dir: Option<PathBuf>,
    /// The running host's process id, when several serve with this state
    /// directory [default: the only one serving HTTP, else the only one].
    #[arg(long, value_name = "PID", global = true)]
    pub pid: Option<u32>,
}

impl StateArgs {
    /// The state directory.
    pub fn state_dir(&self) -> Result<PathBuf> {
        Ok(self.state_dir_of(&self.config.load()?))
    }

    /// The state directory, with `config` the config already read.
    pub fn state_dir_of(&self, config: &Config) -> PathBuf {
        HostBuilder::new(config.clone()).state_dir(self.state_dir.clone()).resolved_state_dir()
    }

    /// A client of the running host's admin API.
    ///
    /// A config file that does not load (a DM mid-edit) does not lock the
    /// operator out of the running host, which serves with the config it
    /// last read: the host is then looked for in the state directory
    /// without the file (flag, environment, default), with a warning naming
    /// what is wrong with the file.
    pub fn admin(&self) -> Result<toolhost::admin::client::AdminClient> {
        self.admin_or(|config_error, found| {
            eprintln!("warning: {config_error:#}");
            eprintln!(
                "(the running host, pid {}, was found without the file: it serves with the config it last read)",
                found.endpoint().pid
            );
        })
    }

    /// [`StateArgs::admin`], with `warn` told about a config file that did
    /// not load when the host was found anyway.
    pub fn admin_or(
        &self,
        warn: impl FnOnce(&anyhow::Error, &toolhost::admin::client::AdminClient),
    ) -> Result<toolhost::admin::client::AdminClient> {
        use toolhost::admin::client::AdminClient;
        let unreadable = match self.state_dir() {
            Ok(dir) => {
                let first = AdminClient::discover(&dir, self.pid);
                // An edited `state_dir` may point away from the running host.
                let fallback = self.state_dir_without_config();
                return match first {
                    Err(e) if dir != fallback => {
                        let found = AdminClient::discover(&fallback, self.pid).map_err(|_| e)?;
                        eprintln!(
                            "warning: no host serves with state directory {}; using the one (pid {}) serving with {}",
                            dir.display(),
                            found.endpoint().pid,
                            fallback.display()
                        );
                        Ok(found)
                    }
                    other => Ok(other?),
                };
            }
            Err(e) => e,
        };
        match AdminClient::discover(&self.state_dir_without_config(), self.pid) {
            Ok(found) => {
                warn(&unreadable, &found);
                Ok(found)
            }
            Err(e) => Err(unreadable.context(format!("no running host was found without the file either ({e})"))),
        }
    }

    /// The state directory from the flag, the environment or the default,
    /// whatever the config file says.
    fn state_dir_without_config(&self) -> PathBuf {
        HostBuilder::new(Config::default()).state_dir(self.state_dir.clone()).resolved_state_dir()
    }
}

/// The wasm engine: the compile cache and limits on every call.
#[derive(Debug, Clone, Args)]
pub struct RuntimeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Where compiled components are cached [default: $TOOLHOST_CACHE_DIR, $XDG_CACHE_HOME/toolhost or ~/.cache/toolhost].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile every component afresh and cache nothing.
    #[arg(long)]
    pub no_cache: bool,
    /// Fuel (about one unit per wasm instruction) per call; 0 disables metering.
    #[arg(long, value_name = "UNITS")]
    pub fuel: Option<u64>,
    /// Linear memory limit per call, in MiB.
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<usize>,
    /// Ceiling on any call's deadline, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub timeout_ceiling_ms: Option<u64>,
    /// Floor under any call's deadline, in milliseconds (tools declaring less get this).
    #[arg(long, value_name = "MS")]
    pub timeout_floor_ms: Option<u64>,
    /// Largest result a call may return, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_output_bytes: Option<usize>,
}

impl RuntimeArgs {
    /// A host builder from the config with these flags over it, key by key.
    pub fn builder(&self) -> Result<HostBuilder> {
        let mut builder = HostBuilder::new(self.config.load()?);
        let limits = &mut builder.config_mut().limits;
        limits.fuel = self.fuel.or(limits.fuel);
        limits.memory_mib = self.memory_mib.or(limits.memory_mib);
        limits.timeout_ceiling_ms = self.timeout_ceiling_ms.or(limits.timeout_ceiling_ms);
        limits.timeout_floor_ms = self.timeout_floor_ms.or(limits.timeout_floor_ms);
        limits.max_output_bytes = self.max_output_bytes.or(limits.max_output_bytes);
        let cache = match (&self.cache_dir, self.no_cache) {
            (_, true) => toolhost::CacheChoice::Off,
            (Some(d), false) => toolhost::CacheChoice::Dir(d.clone()),
            (None, false) => toolhost::CacheChoice::Default,
        };
        Ok(builder.cache(cache))
    }
}

/// Everything that shapes a host: plugins, state, trust, limits.
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Load this plugin component too (repeatable): a file, or an
    /// oci://HOST[:PORT]/REPO:TAG (or @sha256:...) reference.
    #[arg(long = "plugin", value_name = "FILE.wasm|oci://...")]
    pub plugins: Vec<PathBuf>,
    /// Do not load the built-in plugins.
    #[arg(long)]
    pub no_builtins: bool,
    /// Where calibration results and other state are kept [default: $TOOLHOST_STATE_DIR, $XDG_STATE_HOME/toolhost or ~/.local/state/toolhost].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Calibration environment name [default: budget.environment, else "default"].
    #[arg(long = "env", value_name = "NAME")]
    pub environment: Option<String>,
    #[command(flatten)]
    pub trust: TrustArgs,
}

/// `--allow-unsigned`.
#[derive(Debug, Clone, Args)]
pub struct TrustArgs {
    /// Load plugin files that are not signed by a trusted key (they are
    /// reported as unverified by `toolhost grants`). Default: refuse them.
    #[arg(long, env = "TOOLHOST_ALLOW_UNSIGNED", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_unsigned: bool,
}

/// A registry to read from (`pull`, `show`): the config (for trust and
/// `oci:`), plain HTTP when asked, and the blob cache.
#[derive(Debug, Clone, Args)]
pub struct RegistryArgs {
    /// Speak plain HTTP to this registry (loopback registries always are).
    #[arg(long)]
    pub insecure: bool,
    /// Where pulled blobs are cached [default: as `serve`].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
}

impl RegistryArgs {
    /// The trust policy and the registry store for `r`.
    pub fn open(&self, r: &toolhost::oci::OciRef) -> Result<(toolhost::package::TrustPolicy, toolhost::oci::OciStore)> {
        let mut builder = HostBuilder::new(self.config.load()?).allow_unsigned(self.trust.allow_unsigned);
        if let Some(d) = &self.cache_dir {
            builder = builder.cache(toolhost::CacheChoice::Dir(d.clone()));
        }
        let policy = builder.trust()?;
        let mut store = builder.oci_store()?;
        if self.insecure {
            store.allow_insecure(r.registry());
        }
        Ok((policy, store))
    }
}

impl HostArgs {
    /// The builder for this host.
    pub fn builder(&self) -> Result<HostBuilder> {
        Ok(self
            .runtime
            .builder()?
            .state_dir(self.state_dir.clone())
            .builtins(!self.no_builtins)
            .plugins(self.plugins.iter().cloned())
            .allow_unsigned(self.trust.allow_unsigned)
            .environment(self.environment.clone()))
    }

    /// Builds the host with its external MCP servers (waiting for their
    /// first connection), and prints warnings.
    pub fn start(&self) -> Result<Started> {
        self.start_and_wait(ServerWait::Connect)
    }

    /// [`HostArgs::start`] for a command that only reads: the host writes
    /// no audit record ([`HostBuilder::read_only`]).
    pub fn start_read_only(&self) -> Result<Started> {
        Self::start_built(self.builder()?.read_only(true), ServerWait::Connect)
    }

    /// Builds the host and starts its external servers; waits as `wait`
    /// says (bounded) for their first connection, warning about those not
    /// up. Those not waited for join the registry when each connects.
    pub fn start_and_wait(&self, wait: ServerWait) -> Result<Started> {
        Self::start_built(self.builder()?, wait)
    }

    fn start_built(built: HostBuilder, wait: ServerWait) -> Result<Started> {
        // A server answers while plugins compile; a command waits for them.
        let assembly = Self::build_from(built.clone().defer_plugins(wait != ServerWait::Connect))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("toolhost-io")
            .build()
            .context("starting the async runtime")?;
        // The config's servers, less those removed and plus those added at run time.
        let (configured, warnings) = assembly.installer.runtime_changes().servers(&assembly.config.mcp.servers);
        for w in warnings {
            eprintln!("warning: {w}");
        }
        let servers = ExternalServers::start_in(
            assembly.host.pipeline().clone(),
            &configured,
            rt.handle().clone(),
            &assembly.state_dir,
        )?;
        let wait = match wait {
            ServerWait::No => None,
            ServerWait::FirstList => {
                Some(Duration::from_millis(assembly.config.server.first_list_wait_ms).min(SERVER_CONNECT_WAIT))
            }
            ServerWait::Connect => Some(SERVER_CONNECT_WAIT),
        };
        if let Some(wait) = wait.filter(|_| !configured.is_empty()) {
            servers.wait_ready(wait);
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
        Ok(Started { assembly, built, servers, rt })
    }

    /// The state directory a live command looks for the running host in:
    /// the config's, or, when the config file does not load, the default
    /// (or `--state-dir`) if a host serves there, so `agents` and `stats`
    /// keep working while the DM fixes the file. Otherwise the config's
    /// error.
    pub fn live_state_dir(&self, pid: Option<u32>) -> Result<PathBuf> {
        match self.builder() {
            Ok(b) => Ok(b.resolved_state_dir()),
            Err(e) => {
                let fallback =
                    HostBuilder::new(Config::default()).state_dir(self.state_dir.clone()).resolved_state_dir();
                match toolhost::admin::client::AdminClient::discover(&fallback, pid) {
                    Ok(_) => {
                        eprintln!(
                            "warning: {e:#}; asking the host serving with state directory {}",
                            fallback.display()
                        );
                        Ok(fallback)
                    }
                    Err(_) => Err(e),
                }
            }
        }
    }

    /// Whether these flags describe a host other than the one the config
    /// serves (extra plugins, no built-ins, another calibration
    /// environment): then a command that could read the running host
    /// builds its own instead.
    pub fn describes_another_host(&self) -> bool {
        !self.plugins.is_empty() || self.no_builtins || self.environment.is_some()
    }

    /// Builds the host (without external servers) for a command that only
    /// reads, and prints its warnings: the host writes no audit record
    /// ([`HostBuilder::read_only`]).
    pub fn build_read_only(&self) -> Result<toolhost::Assembly> {
        Self::build_from(self.builder()?.read_only(true))
    }

    fn build_from(builder: HostBuilder) -> Result<toolhost::Assembly> {
        let assembly = builder.build()?;
        for w in &assembly.warnings {
            eprintln!("warning: {w}");
        }
        Ok(assembly)
    }
}

/// How long a command waits for the configured external MCP servers' first
/// connection before going on without the ones that are not up.
pub const SERVER_CONNECT_WAIT: Duration = Duration::from_secs(30);

/// How long a command waits for its external servers' first connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerWait {
    /// Not at all: their tools join as each connects (`serve --stdio`,
    /// whose first lists wait instead).
    No,
    /// Up to `server.first_list_wait_ms` (`serve --http`, before it
    /// listens): a server slower than that joins with `list_changed`.
    FirstList,
    /// Up to [`SERVER_CONNECT_WAIT`]: one-shot commands (`tools`, `call`).
    Connect,
}

/// A host with its external servers running.
pub struct Started {
    /// The host.
    pub assembly: toolhost::Assembly,
    /// The builder it was built from (the config file as read then).
    pub built: HostBuilder,
    /// Its external MCP servers; declared before `rt` so they stop first.
    pub servers: Arc<ExternalServers>,
    /// The runtime the servers' connections live on.
    pub rt: tokio::runtime::Runtime,
}

impl Drop for Started {
    fn drop(&mut self) {
        self.servers.shutdown();
    }
}

/// `--pid`, for the commands that read the running host when there is one.
#[derive(Debug, Clone, Args)]
pub struct PidArg {
    /// The running host's process id, when several serve with this state
    /// directory [default: the only one serving HTTP, else the only one].
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

/// Where a figure came from, for the note a command prints on stderr.
pub enum View<T> {
    /// The running host answered.
    Live(T),
    /// No host is running (or it did not answer): the caller builds a local view.
    Local,
}

/// Asks the host serving with `state` (`pid`: that one) through `ask`, and
/// says on stderr where the figures come from: `live: host pid N at ADDR`,
/// or `local view: ...` when no host serves with this state directory (or
/// the one that does did not answer). Ambiguity (several hosts, no `--pid`)
/// and a `--pid` that names no host are errors.
pub fn live_or_local<T>(
    state: &std::path::Path,
    pid: Option<u32>,
    ask: impl FnOnce(&toolhost::admin::client::AdminClient) -> Result<T, toolhost::admin::client::ClientError>,
) -> Result<View<T>> {
    use toolhost::admin::client::{AdminClient, ClientError};
    let client = match AdminClient::discover(state, pid) {
        Ok(c) => c,
        Err(ClientError::NotRunning(_)) => {
            eprintln!(
                "local view: no toolhost is serving with state directory {} (figures from this process and the measurements the last `serve` saved)",
                state.display()
            );
            return Ok(View::Local);
        }
        Err(e) => return Err(e.into()),
    };
    let record = client.endpoint().clone();
    match ask(&client) {
        Ok(v) => {
            eprintln!("live: host pid {} at {}", record.pid, record.url);
            Ok(View::Live(v))
        }
        Err(e @ ClientError::Unreachable { .. }) => {
            eprintln!("warning: {e}");
            eprintln!("local view: the running host (pid {}) did not answer", record.pid);
            Ok(View::Local)
        }
        Err(e) => Err(e.into()),
    }
}

/// The stderr note of a command whose flags describe its own host.
pub fn local_only_note() {
    eprintln!(
        "local view: --plugin, --no-builtins or --env describe a host built for this command, not the running one"
    );
}
