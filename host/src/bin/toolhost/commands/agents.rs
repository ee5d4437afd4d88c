use crate::args::ConfigArgs;
use crate::output::{print_json, print_table};
use anyhow::Result;
use std::process::ExitCode;
use toolhost::report::AgentReport;

/// List the agents (NPCs) in the config with their ceilings and tools.
#[derive(Debug, clap::Args)]
pub struct Agents {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    config: ConfigArgs,
}

impl Agents {
    pub fn run(self) -> Result<ExitCode> {
        let mut agents: Vec<AgentReport> = self.config.load()?.npcs.iter().map(AgentReport::from).collect();
        agents.sort_by(|a, b| a.name.cmp(&b.name));
        if self.json {
            return print_json(&agents);
        }
        let rows: Vec<[String; 3]> =
            agents.iter().map(|a| [a.name.clone(), a.budget_tier.to_string(), a.tools.join(", ")]).collect();
        print_table(&["AGENT", "CEILING", "TOOLS"], &rows);
        Ok(ExitCode::SUCCESS)
    }
}
