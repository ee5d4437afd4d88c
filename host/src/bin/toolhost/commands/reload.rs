use crate::args::StateArgs;
use crate::output::print_json;
use anyhow::Result;
use std::process::ExitCode;

/// Make the running host re-read its config file, without a restart.
///
/// What changed goes in at once: agents (`npcs`: allow-lists, ceilings,
/// turn caps, rate limits, new and removed agents and their endpoints),
/// budget settings, limits (for calls that start afterwards), grants (a
/// loaded plugin is re-granted, or unloaded if it
/// imports something no longer granted), trust (a loaded plugin the new
/// policy refuses is unloaded), external servers (`mcp.servers`), tokens
/// and tool-call rate limits. Open sessions whose tools changed are told
/// (`notifications/tools/list_changed`). If the new file is invalid in any
/// way, nothing changes and the error says why (exit status 1); so does an
/// allow-list naming a tool nothing has offered since the host started (a
/// typo would take a tool from an agent mid-game), unless `--force`. Settings
/// a running host cannot change (the instance pool's size, the audit file,
/// state and cache directories, plugin files ...) are listed as needing a
/// restart.
///
/// `kill -HUP <pid>` does the same (the result goes to the host's log).
/// `--config` here only helps find the host: it re-reads the file it was
/// started with.
#[derive(Debug, clap::Args)]
pub struct Reload {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Apply an allow-list that names a tool no provider has offered since
    /// the host started (for a plugin not loaded yet); without it such a
    /// name is refused as a typo and nothing changes.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    state: StateArgs,
}

impl Reload {
    pub fn run(self) -> Result<ExitCode> {
        // The host reads the file it started from, and says what is wrong
        // with it; here the file is read only to find the host's state
        // directory (without it, if it does not load).
        let admin = match self.state.admin_or(|_, _| {}) {
            Ok(a) => a,
            Err(e) => return self.fail(&format!("{e:#}")),
        };
        match admin.reload(self.force) {
            Ok(report) => {
                if let (Some(given), Some(read)) = (&self.state.config.config, &report.file)
                    && std::fs::canonicalize(given).ok().as_ref() != Some(read)
                {
                    eprintln!(
                        "note: the host re-read {}, the file it was started with, not {}",
                        read.display(),
                        given.display()
                    );
                }
                if self.json {
                    return print_json(&report);
                }
                println!("host pid {}: {report}", admin.endpoint().pid);
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => self.fail(&e.to_string()),
        }
    }

    /// Says why nothing was reloaded (as `{"error": ...}` with `--json`); exit status 1.
    fn fail(&self, why: &str) -> Result<ExitCode> {
        if self.json {
            print_json(&serde_json::json!({ "error": why }))?;
        } else {
            eprintln!("error: {why}");
        }
        Ok(ExitCode::FAILURE)
    }
}
