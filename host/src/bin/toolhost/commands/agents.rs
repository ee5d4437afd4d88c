use crate::args::{HostArgs, PidArg, View, live_or_local};
use crate::commands::stats::age;
use crate::output::{list_or_none, print_json, print_table};
use anyhow::Result;
use std::process::ExitCode;
use toolhost::report::AgentStatusReport;

/// The agents (NPCs) in the config: each one's ceiling, any DM override
/// (with its time left, see `toolhost override`), the tier its sessions
/// work at now and the tools it sees now (its allow-list, within that tier,
/// loaded and available).
///
/// With a `toolhost serve` running on this state directory, this is what
/// the running host shows each agent (a note on stderr says `live: host pid
/// N at ADDR`); without one, a local view from the config (no overrides:
/// they live in the running host only).
#[derive(Debug, clap::Args)]
pub struct Agents {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pid: PidArg,
    #[command(flatten)]
    host: HostArgs,
}

/// "DEEP, 9m 58s left", or "-".
pub fn override_cell(a: &AgentStatusReport) -> String {
    a.dm_override
        .as_ref()
        .map_or_else(|| "-".into(), |o| format!("{}, {} left", o.tier.as_str().to_uppercase(), age(o.remaining_s)))
}

impl Agents {
    pub fn run(self) -> Result<ExitCode> {
        let state = self.host.live_state_dir(self.pid.pid)?;
        let agents = match live_or_local(&state, self.pid.pid, |c| c.agents())? {
            View::Live(reply) => reply.agents,
            View::Local => {
                let started = self.host.start_read_only()?;
                toolhost::report::agents(&started.assembly.host)
            }
        };
        if self.json {
            return print_json(&agents);
        }
        let rows: Vec<[String; 5]> = agents
            .iter()
            .map(|a| {
                [
                    a.name.clone(),
                    a.budget_tier.as_str().to_uppercase(),
                    override_cell(a),
                    a.tier.as_str().to_uppercase(),
                    list_or_none(&a.visible),
                ]
            })
            .collect();
        print_table(&["AGENT", "CEILING", "DM OVERRIDE", "TIER NOW", "SEES NOW"], &rows);
        Ok(ExitCode::SUCCESS)
    }
}
