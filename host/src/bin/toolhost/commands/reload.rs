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
/// way, nothing changes and the error says why (exit status 1). Settings
/// a running host cannot change (the instance pool's size, the audit file,
/// state and cache directories, plugin files ...) are listed as needing a
/// restart.
///
/// `kill -HUP <pid>` does the same (the result goes to the host's log).
#[derive(Debug, clap::Args)]
pub struct Reload {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

impl Reload {
    pub fn run(self) -> Result<ExitCode> {
        // The host reads the file itself, and says what is wrong with it;
        // here it is read only to find the host's state directory.
        let (state, unreadable) = match self.state.state_dir() {
            Ok(dir) => (dir, None),
            Err(e) => {
                let dir = toolhost::HostBuilder::new(toolhost::config::Config::default())
                    .state_dir(self.state.state_dir.clone())
                    .resolved_state_dir();
                (dir, Some(e))
            }
        };
        let admin = match toolhost::admin::client::AdminClient::discover(&state, self.state.pid) {
            Ok(a) => a,
            Err(e) => match unreadable {
                Some(config) => {
                    eprintln!("error: {config:#}\n(no running host was asked to reload: {e})");
                    return Ok(ExitCode::FAILURE);
                }
                None => return Err(e.into()),
            },
        };
        match admin.reload() {
            Ok(report) if self.json => print_json(&report),
            Ok(report) => {
                println!("host pid {}: {report}", admin.endpoint().pid);
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("error: {e}");
                Ok(ExitCode::FAILURE)
            }
        }
    }
}
