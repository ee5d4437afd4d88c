use crate::args::StateArgs;
use crate::output::{print_json, print_table};
use anyhow::{Context, Result};
use clap::Subcommand;
use std::process::ExitCode;

/// A fleet of hosts sharing one control plane (`cluster.url` in the config).
#[derive(Debug, clap::Args)]
pub struct Cluster {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// List the fleet's hosts as the control plane sees them: id, version,
    /// last heartbeat, the last change applied and how far behind the log
    /// that is, and each host's plugins with their digests. Hosts that
    /// disagree (versions, plugins), lag, or are gone, two running hosts
    /// sharing one id, and rows no host of this fleet wrote (their tag does
    /// not check with the key) are flagged, and the command then exits 1.
    /// A key file that is not the fleet's is refused first.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a host that left the fleet from the list (its heartbeat
    /// row). A host still running writes it again within 2 s.
    Forget {
        /// The host's id, as `status` lists it.
        host_id: String,
    },
}

impl Cluster {
    pub fn run(self) -> Result<ExitCode> {
        let cfg = self.state.config.load()?;
        let Some(url) = cfg.cluster.url.as_deref() else {
            anyhow::bail!("this config has no cluster.url: the host is not in a fleet (see docs/deploy.md)");
        };
        let json = match self.action {
            Action::Status { json } => json,
            Action::Forget { host_id } => {
                if !toolhost::cluster::forget(url, &host_id).context("writing the control plane")? {
                    anyhow::bail!("no host {host_id:?} in the control plane (`toolhost cluster status` lists them)");
                }
                println!("forgot {host_id}");
                return Ok(ExitCode::SUCCESS);
            }
        };
        let key_file = cfg.cluster.secret_key_file.as_ref().map(|p| cfg.resolve(p)).unwrap_or_default();
        let key =
            toolhost::cluster::Key::read(&key_file).map_err(|e| anyhow::anyhow!("cluster.secret_key_file: {e}"))?;
        toolhost::cluster::check_key(url, &key, false).context("checking the fleet's key")?;
        let (latest, hosts, damage) = toolhost::cluster::status(url, &key).context("reading the control plane")?;
        let mut flags = toolhost::cluster::mismatches(&hosts);
        flags.extend(damage);
        for h in &hosts {
            if let Some(secs) = h.clash_secs.filter(|s| *s < toolhost::cluster::CLASH_SHOWN.as_secs_f64()) {
                flags.push(format!(
                    "two running hosts use the id {} (seen {secs:.0} s ago): give each its own cluster.host_id",
                    h.host_id
                ));
            }
            if !h.checks {
                flags.push(format!(
                    "the row of host {} does not check with this fleet's key: it was not written by a host of this fleet",
                    h.host_id
                ));
                continue;
            }
            if h.gone {
                flags.push(format!("{} is gone (last seen {:.0} s ago)", h.host_id, h.last_seen_secs));
            } else if h.lag > 0 && h.last_seen_secs > toolhost::cluster::HEARTBEAT.as_secs_f64() * 2.0 {
                flags.push(format!("{} is {} changes behind", h.host_id, h.lag));
            }
        }
        if json {
            print_json(&serde_json::json!({"latest_change": latest, "hosts": hosts, "problems": flags}))?;
        } else {
            let rows: Vec<[String; 6]> = hosts
                .iter()
                .map(|h| {
                    [
                        h.host_id.clone(),
                        h.version.clone(),
                        if h.gone {
                            format!("{:.0} s ago (gone)", h.last_seen_secs)
                        } else {
                            format!("{:.1} s ago", h.last_seen_secs)
                        },
                        h.applied_seq.to_string(),
                        h.lag.to_string(),
                        h.plugins
                            .iter()
                            .map(|(n, d)| format!("{n}@{}", toolhost::cluster::short(d)))
                            .collect::<Vec<_>>()
                            .join(" "),
                    ]
                })
                .collect();
            println!("latest change: {latest}");
            print_table(&["HOST", "VERSION", "LAST SEEN", "APPLIED", "LAG", "PLUGINS"], &rows);
            for f in &flags {
                println!("problem: {}", toolhost::tool::log_safe(f));
            }
        }
        Ok(if flags.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
    }
}
