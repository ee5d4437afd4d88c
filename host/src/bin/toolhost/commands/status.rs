use crate::args::StateArgs;
use crate::output::{print_json, print_table};
use anyhow::Result;
use std::process::ExitCode;

/// What the running host serves now: providers, tools, external servers.
#[derive(Debug, clap::Args)]
pub struct Status {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

impl Status {
    pub fn run(self) -> Result<ExitCode> {
        let status = self.state.admin()?.status()?;
        if self.json {
            return print_json(&status);
        }
        let rows: Vec<[String; 4]> = status
            .providers
            .iter()
            .map(|p| {
                [
                    p.name.clone(),
                    p.kind.clone(),
                    if p.available { "up" } else { "unavailable" }.to_string(),
                    p.tools.join(", "),
                ]
            })
            .collect();
        println!("toolhost pid {}", status.pid);
        print_table(&["PROVIDER", "KIND", "STATE", "TOOLS"], &rows);
        Ok(ExitCode::SUCCESS)
    }
}
