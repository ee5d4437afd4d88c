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
    /// Upgrade a serving plugin to a new version: `--now` swaps it in at
    /// once (as `add`); `--canary 10%` sends that share of its calls to
    /// the new version, compares the two versions' failure rates (errors,
    /// timeouts, traps; not invalid arguments or refusals), rolls the new
    /// one back by itself when its rate is over the old one's by more than
    /// --max-worse, or promotes it after --promote-after calls. Each call
    /// runs wholly on one version. A reload or a revocation during a canary
    /// rolls it back. `plugin list` shows where it stands; every step is
    /// audited (plugin_canary, plugin_promote, plugin_rollback).
    Upgrade {
        /// The plugin to upgrade.
        name: String,
        /// The new version: a component file, or an oci:// reference.
        file: PathBuf,
        /// The share of calls the new version takes (1% to 99%); or --now.
        #[arg(long, value_name = "PERCENT", conflicts_with = "now", required_unless_present = "now")]
        canary: Option<String>,
        /// Swap it in at once, as `plugin add` does.
        #[arg(long)]
        now: bool,
        /// Calls to the new version after which it is promoted.
        #[arg(long, value_name = "N", default_value_t = 50, requires = "canary")]
        promote_after: u64,
        /// How many percentage points worse its failure rate may be than
        /// the old one's (judged from its tenth call, or --promote-after if
        /// fewer).
        #[arg(long, value_name = "PERCENT", default_value = "10%", requires = "canary")]
        max_worse: String,
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
            Action::Upgrade { name, file, canary, now, promote_after, max_worse } => {
                let path = if toolhost::oci::path_is_reference(&file) {
                    file
                } else {
                    file.canonicalize().with_context(|| format!("{} does not exist", file.display()))?
                };
                let admin = state.admin()?;
                let serving = admin.plugins()?;
                if !serving.plugins.iter().any(|p| p.name == name) {
                    anyhow::bail!("{name} is not serving: `plugin add` it (an upgrade replaces a serving version)");
                }
                if now {
                    // A file of another plugin is refused before the host loads it.
                    if !toolhost::oci::path_is_reference(&path) {
                        let stem = toolhost::runtime::plugin_name_from_path(&path);
                        let bytes = toolhost::runtime::read_bounded(&path, 1 << 30)
                            .map_err(|kind| toolhost::runtime::LoadError { plugin: stem.clone(), kind })?;
                        let of = toolhost::package::parse(&bytes)?.verify(&stem)?.map_or(stem, |v| v.manifest.name);
                        if of != name {
                            anyhow::bail!("{} is plugin {of:?}, not a version of {name:?}", path.display());
                        }
                    }
                    let reply = admin.add_plugin(&path)?;
                    let i = &reply.installed;
                    if i.name != name {
                        anyhow::bail!(
                            "{} was plugin {:?}, not a version of {name:?}: the host added it as {}",
                            path.display(),
                            i.name,
                            i.name
                        );
                    }
                    println!("upgraded {} (sha256 {}): {}", i.name, i.digest, i.tools.join(", "));
                    println!("  {}", reply.provenance_text);
                    return Ok(ExitCode::SUCCESS);
                }
                let percent = |what: &str, text: &str| -> Result<f64> {
                    text.trim_end_matches('%')
                        .parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .ok_or_else(|| anyhow::anyhow!("{what} {text:?}: write a percentage, e.g. 10%"))
                };
                let share = percent("--canary", canary.as_deref().unwrap_or_default())?;
                if share.fract() != 0.0 || !(1.0..=99.0).contains(&share) {
                    anyhow::bail!("--canary {share}%: a whole percentage from 1% to 99% (--now swaps at once)");
                }
                let terms = toolhost::canary::CanaryTerms {
                    share_percent: share as u8,
                    promote_after,
                    min_calls: promote_after.min(10),
                    max_worse_percent: percent("--max-worse", &max_worse)?,
                };
                let status = admin.canary(&name, &path, terms)?;
                println!(
                    "canary of {name}: sha256 {} takes {}% of calls, beside {}",
                    &status.new_sha256[..12.min(status.new_sha256.len())],
                    terms.share_percent,
                    &status.old_sha256[..12.min(status.old_sha256.len())]
                );
                println!("  {}", terms.describe());
                println!("  `toolhost plugin list` shows where it stands");
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
                for p in list.plugins.iter().filter(|p| p.code.as_deref() == Some("fast")) {
                    println!(
                        "{}: runs on quick-compiled code, slower per call until its optimized code is ready (compiled in the background unless limits.compile is fast)",
                        p.name
                    );
                }
                for held in &list.withheld {
                    println!("{}: held back: {}", held.name, held.reason);
                }
                for (p, c) in list.plugins.iter().filter_map(|p| Some((p, p.canary.as_ref()?))) {
                    let state = match c.state {
                        toolhost::canary::CanaryState::Running => "under way".to_string(),
                        _ => c.reason.clone().unwrap_or_default(),
                    };
                    println!(
                        "{}: canary {}: new {} failed {} of {} calls, old {} failed {} of {} ({}% to the new)",
                        p.name,
                        state,
                        &c.new_sha256[..12.min(c.new_sha256.len())],
                        c.new_failed,
                        c.new_calls,
                        &c.old_sha256[..12.min(c.old_sha256.len())],
                        c.old_failed,
                        c.old_calls,
                        c.terms.share_percent
                    );
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
