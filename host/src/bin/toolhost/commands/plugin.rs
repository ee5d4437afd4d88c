use crate::args::{StateArgs, View, live_or_local};
use crate::output::{print_json, print_table};
use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::admin::client::ClientError;

/// Add, replace, remove or list plugins in the running host, without a
/// restart (through its admin API, found in <state dir>/admin/<pid>.json).
#[derive(Debug, clap::Args)]
pub struct Plugin {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Load a component into the running host, or replace the loaded plugin
    /// of the same name atomically. A broken or refused file leaves the
    /// running version serving and says why.
    Add {
        /// The component file, or an oci://HOST[:PORT]/REPO:TAG (or
        /// @sha256:...) reference the host pulls.
        file: PathBuf,
    },
    /// Unload a plugin from the running host; it stays unloaded across
    /// restarts until its file changes or it is added again. With no host
    /// serving, a plugin added at run time is forgotten: the next start
    /// does not load it.
    Remove {
        /// Plugin name.
        name: String,
    },
    /// List the running host's plugins (without one, those this config
    /// would load: a local view).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `plugin remove` with no host serving: forgets `name` if it was added
/// at run time (as a serving host would, in the state directory's run-time
/// changes). Anything else is the config's to change.
fn forget_added(state: &StateArgs, name: &str) -> Result<()> {
    let config = state.config.load()?;
    if config.cluster.url.is_some() {
        anyhow::bail!(
            "no host of this fleet is serving here, and a fleet's plugins are its own (cluster.url): remove {name} through a serving host"
        );
    }
    let dir = state.state_dir_of(&config);
    let (changes, refused) = toolhost::changes::RuntimeChanges::open(&dir)
        .with_context(|| format!("reading the run-time changes in {}", dir.display()))?;
    if let Some(e) = refused {
        anyhow::bail!("{e}");
    }
    let Some(added) = changes.added_plugins().into_iter().find(|p| p.name == name) else {
        anyhow::bail!(
            "no host is serving (state directory {}), and no plugin {name} was added at run time: a plugin from the config is removed by taking it out of plugins.files or the plugins directory",
            dir.display()
        );
    };
    changes.note_source(name, &added.path);
    changes.plugin_removed(name);
    Ok(())
}

impl Plugin {
    pub fn run(self) -> Result<ExitCode> {
        let state = self.state;
        match self.action {
            Action::Add { file } => {
                let path = if toolhost::oci::path_is_reference(&file) {
                    file
                } else {
                    file.canonicalize().with_context(|| format!("{} does not exist", file.display()))?
                };
                let reply = state.admin()?.add_plugin(&path)?;
                let i = &reply.installed;
                let verb = if i.replaced.is_none() { "added" } else { "replaced" };
                println!("{verb} {} (sha256 {}): {}", i.name, i.digest, i.tools.join(", "));
                println!("  {}", reply.provenance_text);
                if let Some(source) = &i.source {
                    println!("  from {source}");
                }
            }
            Action::Remove { name } => match state.admin() {
                Ok(admin) => {
                    admin.remove_plugin(&name)?;
                    println!("removed {name}");
                }
                Err(e) if e.downcast_ref::<ClientError>().is_some_and(|e| matches!(e, ClientError::NotRunning(_))) => {
                    forget_added(&state, &name)?;
                    println!("removed {name}: no host is serving, and the next start does not load it");
                }
                Err(e) => return Err(e),
            },
            Action::List { json } => {
                let dir = state.state_dir()?;
                let list = match live_or_local(&dir, state.pid, |c| c.plugins())? {
                    View::Live(list) => list,
                    View::Local => {
                        // As `serve` would load them, trust flags from the environment.
                        let allow_unsigned = std::env::var("TOOLHOST_ALLOW_UNSIGNED").is_ok_and(|v| {
                            !matches!(v.to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off")
                        });
                        let assembly = toolhost::HostBuilder::new(state.config.load()?)
                            .state_dir(Some(dir))
                            .allow_unsigned(allow_unsigned)
                            .read_only(true)
                            .build()?;
                        for w in &assembly.warnings {
                            eprintln!("warning: {w}");
                        }
                        toolhost::admin::api::PluginsReply::of(&assembly.installer)
                    }
                };
                if json {
                    return print_json(&list);
                }
                let rows: Vec<[String; 5]> = list
                    .plugins
                    .iter()
                    .map(|p| {
                        [
                            p.name.clone(),
                            p.sha256.chars().take(12).collect(),
                            p.provenance_text.clone().unwrap_or_default(),
                            p.source.clone().unwrap_or_default(),
                            p.tools.join(", "),
                        ]
                    })
                    .collect();
                print_table(&["PLUGIN", "SHA256", "ORIGIN", "SOURCE", "TOOLS"], &rows);
                for p in &list.plugins {
                    if let Some(l) = p.limits.as_ref().filter(|l| !l.own.is_empty()) {
                        println!("{}: limits of its own: {}", p.name, l.describe());
                    }
                }
                for held in &list.withheld {
                    println!("{}: held back: {}", held.name, held.reason);
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
