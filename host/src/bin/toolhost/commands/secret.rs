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
        let store = SecretStore::in_state_dir(&self.state.state_dir()?);
        match &self.command {
            SecretCommand::Set { plugin, name } => {
                // Its config must not name the same key: one namespace.
                if let Ok(config) = self.state.config.load()
                    && config.plugins.config.get(plugin).is_some_and(|m| m.contains_key(name))
                {
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
