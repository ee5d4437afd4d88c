use crate::args::StateArgs;
use crate::output::{print_json, print_table};
use anyhow::{Context as _, Result, bail};
use clap::Subcommand;
use std::io::Read as _;
use std::process::ExitCode;
use toolhost::secrets::{MAX_VALUE_BYTES, SecretStore};

/// Set, list and remove plugins' secrets (API keys and the like).
///
/// A secret belongs to one plugin, which reads it by name through
/// `wasi:config/store` (in Rust: `toolhost_sdk::secret::get`); no other
/// plugin can. Secrets are kept in `secrets.json` in the state directory,
/// mode 0600. A running host reads them again at once: a secret takes
/// effect from the plugin's next call, and a plugin held because its
/// manifest names a secret that was not set loads.
///
/// Values are read from standard input, never from the command line
/// (where other local users could read them in the process list), and are
/// never shown again: `list` gives names and when each was set. The host
/// redacts a secret's exact value from the plugin's log lines and error
/// text. A plugin can still send its own secret wherever its grants let it
/// reach: the grant is the boundary.
///
/// The config decides where secrets go. In a fleet (`cluster.url` in the
/// config: pass `--config` with the fleet's file, run as the owner of its
/// key file) they are the control plane's instead: each value is sealed
/// with a key derived from `cluster.secret_key_file` before it leaves this
/// command, bound to its plugin, its name and the logged change that set
/// it, and every host opens it and uses it from the next call (the command
/// waits up to 5 s and says which hosts have). The database never holds a
/// value; each host's `secrets.json` is not used. The first line printed
/// says where the secret went.
#[derive(Debug, clap::Args)]
pub struct Secret {
    #[command(subcommand)]
    command: SecretCommand,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Debug, Subcommand)]
enum SecretCommand {
    /// Set PLUGIN's secret NAME to the value on standard input (one
    /// trailing newline is dropped): `toolhost secret set weather api_key
    /// < key.txt`. At a terminal, the value is asked for without echo.
    Set {
        /// The plugin that reads it.
        plugin: String,
        /// Its name (the plugin's `wasi:config/store` key).
        name: String,
    },
    /// List secrets' names and when each was set (never their values).
    #[command(alias = "ls")]
    List {
        /// Only this plugin's.
        plugin: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove PLUGIN's secret NAME.
    #[command(alias = "remove")]
    Rm {
        /// The plugin.
        plugin: String,
        /// The secret's name.
        name: String,
    },
}

impl Secret {
    pub fn run(self) -> Result<ExitCode> {
        // The config says where secrets go (this host's state directory or
        // a fleet's control plane): one that does not read is an error,
        // not a guess.
        let config = self.state.config.load().context("reading the config")?;
        if let Some(url) = config.cluster.url.as_deref() {
            return self.run_in_fleet(&config, url);
        }
        let store = SecretStore::in_state_dir(&self.state.state_dir()?);
        match &self.command {
            SecretCommand::Set { plugin, name } => {
                // Its config must not name the same key: one namespace.
                if config.plugins.config.get(plugin).is_some_and(|m| m.contains_key(name)) {
                    bail!(
                        "plugins.config.{plugin}.{name} is set in the config file; config values and secrets share one namespace: remove it from the config, or give the secret another name"
                    );
                }
                toolhost::secrets::check_name("plugin", plugin)?;
                toolhost::secrets::check_name("secret", name)?;
                let value = read_value(plugin, name)?;
                let replaced = store.set(plugin, name, &value)?;
                println!(
                    "{} secret {name} of plugin {plugin} ({})",
                    if replaced { "replaced" } else { "set" },
                    store.path().display()
                );
                self.tell_host();
                Ok(ExitCode::SUCCESS)
            }
            SecretCommand::List { plugin, json } => {
                let list = store.list(plugin.as_deref())?;
                if *json {
                    return print_json(&list);
                }
                if list.is_empty() {
                    match plugin {
                        Some(p) => println!("plugin {p} has no secrets"),
                        None => println!("no secrets are set ({})", store.path().display()),
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                let rows: Vec<[String; 3]> = list.into_iter().map(|s| [s.plugin, s.name, s.set_at]).collect();
                print_table(&["PLUGIN", "SECRET", "SET AT"], &rows);
                Ok(ExitCode::SUCCESS)
            }
            SecretCommand::Rm { plugin, name } => {
                if !store.remove(plugin, name)? {
                    eprintln!(
                        "error: plugin {plugin} has no secret {name} (`toolhost secret list {plugin}` lists its secrets)"
                    );
                    return Ok(ExitCode::FAILURE);
                }
                println!("removed secret {name} of plugin {plugin}");
                self.tell_host();
                Ok(ExitCode::SUCCESS)
            }
        }
    }

    /// The same, against the fleet's control plane at `url`.
    fn run_in_fleet(&self, cfg: &toolhost::config::Config, url: &str) -> Result<ExitCode> {
        let key_file = cfg.cluster.secret_key_file.as_ref().map(|p| cfg.resolve(p)).unwrap_or_default();
        let key =
            toolhost::cluster::Key::read(&key_file).map_err(|e| anyhow::anyhow!("cluster.secret_key_file: {e}"))?;
        let origin = format!("cli@{}", toolhost::cluster::host_name());
        let at = toolhost::memory::redact(url);
        let to_write = !matches!(self.command, SecretCommand::List { .. });
        toolhost::cluster::check_key(url, &key, to_write).context("checking the fleet's key")?;
        match &self.command {
            SecretCommand::Set { plugin, name } => {
                if cfg.plugins.config.get(plugin).is_some_and(|m| m.contains_key(name)) {
                    bail!(
                        "plugins.config.{plugin}.{name} is set in the config file; config values and secrets share one namespace: remove it from the config, or give the secret another name"
                    );
                }
                toolhost::secrets::check_name("plugin", plugin)?;
                toolhost::secrets::check_name("secret", name)?;
                let value = read_value(plugin, name)?;
                if value.len() > MAX_VALUE_BYTES {
                    bail!("the value is {} bytes, over the {MAX_VALUE_BYTES}-byte limit", value.len());
                }
                let (replaced, seq) = toolhost::cluster::set_secret(url, &key, &origin, plugin, name, &value)
                    .context("writing the fleet's control plane")?;
                println!(
                    "{} secret {name} of plugin {plugin} in the fleet's control plane ({at}), sealed with cluster.secret_key_file",
                    if replaced { "replaced" } else { "set" }
                );
                report_hosts(url, &key, seq)
            }
            SecretCommand::List { plugin, json } => {
                let list = toolhost::cluster::list_secrets(url, &key, plugin.as_deref())
                    .context("reading the fleet's control plane")?;
                if *json {
                    return print_json(&list);
                }
                if list.is_empty() {
                    match plugin {
                        Some(p) => println!("plugin {p} has no secrets in the fleet"),
                        None => println!("no secrets are set in the fleet ({at})"),
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                let rows: Vec<[String; 4]> = list
                    .iter()
                    .map(|s| {
                        let by = if s.opens {
                            s.set_by.clone()
                        } else {
                            "? (not the fleet's: it does not open with this fleet's key, or is an older, moved or removed value put back; no host uses it)".to_string()
                        };
                        [s.plugin.clone(), s.name.clone(), s.set_at.clone(), by]
                    })
                    .collect();
                print_table(&["PLUGIN", "SECRET", "SET AT", "SET BY"], &rows);
                Ok(if list.iter().all(|s| s.opens) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
            }
            SecretCommand::Rm { plugin, name } => {
                let Some(seq) = toolhost::cluster::remove_secret(url, &key, &origin, plugin, name)
                    .context("writing the fleet's control plane")?
                else {
                    eprintln!(
                        "error: plugin {plugin} has no secret {name} in the fleet (`toolhost secret list {plugin}` lists its secrets)"
                    );
                    return Ok(ExitCode::FAILURE);
                };
                println!("removed secret {name} of plugin {plugin} from the fleet's control plane");
                report_hosts(url, &key, seq)
            }
        }
    }

    /// Tells a running host to read the secrets again; says what happened.
    fn tell_host(&self) {
        let admin = match self.state.admin_or(|_, _| {}) {
            Ok(a) => a,
            Err(_) => {
                println!("no running host found: a host reads the secrets when it starts");
                return;
            }
        };
        match admin.refresh_secrets() {
            Ok(r) => {
                println!("the running host (pid {}) uses it from the next call", admin.endpoint().pid);
                for p in r.plugins {
                    println!("  {}: {}", p.plugin, p.detail);
                }
            }
            Err(e) => eprintln!(
                "warning: the running host (pid {}) was not told ({e}); it reads the secrets at `toolhost reload` or its next start",
                admin.endpoint().pid
            ),
        }
    }
}

/// Waits up to 5 s for the fleet's live hosts to apply change `seq`, and
/// says which have. The secret is stored either way: a host that has not
/// applied it yet does when it catches up.
fn report_hosts(url: &str, key: &toolhost::cluster::Key, seq: i64) -> Result<ExitCode> {
    match toolhost::cluster::wait_applied(url, key, seq, std::time::Duration::from_secs(5)) {
        Ok(hosts) if hosts.known == 0 => eprintln!(
            "warning: no host has ever joined this control plane ({}): is cluster.url the fleet's? Hosts read the secrets when they start",
            toolhost::memory::redact(url)
        ),
        Ok(hosts) if hosts.done.is_empty() && hosts.behind.is_empty() => {
            println!("no host of the fleet is running: each reads the secrets when it starts")
        }
        Ok(toolhost::cluster::Applied { done, behind, .. }) => {
            let safe =
                |ids: &[String]| ids.iter().map(|i| toolhost::tool::log_safe(i).into_owned()).collect::<Vec<_>>();
            let (done, behind) = (safe(&done), safe(&behind));
            println!(
                "{} of {} live hosts use it from their next call{}",
                done.len(),
                done.len() + behind.len(),
                if done.is_empty() { String::new() } else { format!(": {}", done.join(", ")) }
            );
            if !behind.is_empty() {
                eprintln!(
                    "warning: not yet applied by {} (they apply it when they catch up; `toolhost cluster status` shows each host's lag)",
                    behind.join(", ")
                );
            }
        }
        Err(e) => eprintln!("warning: could not read which hosts applied it ({e})"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The value from standard input: asked for without echo at a terminal,
/// else read whole; one trailing newline dropped.
fn read_value(plugin: &str, name: &str) -> Result<String> {
    let stdin = std::io::stdin();
    let mut raw = Vec::new();
    if rustix::termios::isatty(&stdin) {
        eprint!("value of secret {name} for plugin {plugin} (not echoed): ");
        let before = rustix::termios::tcgetattr(&stdin).context("reading the terminal's settings")?;
        let mut quiet = before.clone();
        quiet.local_modes.remove(rustix::termios::LocalModes::ECHO);
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &quiet)
            .context("turning the terminal's echo off")?;
        let mut line = String::new();
        let read = stdin.read_line(&mut line);
        let _ = rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &before);
        eprintln!();
        read.context("reading the value")?;
        raw = line.into_bytes();
    } else {
        stdin.lock().take(MAX_VALUE_BYTES as u64 + 3).read_to_end(&mut raw).context("reading standard input")?;
    }
    let mut value = String::from_utf8(raw).context("the value is not UTF-8 text")?;
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    if value.is_empty() {
        bail!("no value on standard input: pipe it in (`toolhost secret set {plugin} {name} < file`)");
    }
    Ok(value)
}
