use crate::args::HostArgs;
use crate::output::{print_json, print_table};
use anyhow::Result;
use std::process::ExitCode;

/// Connect to the external MCP servers in the config (mcp.servers) and
/// show each one's state and tools.
#[derive(Debug, clap::Args)]
pub struct Servers {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

impl Servers {
    pub fn run(self) -> Result<ExitCode> {
        let started = self.host.start_read_only()?;
        let status = started.servers.status();
        if self.json {
            return print_json(&status);
        }
        if status.is_empty() {
            println!("no external MCP servers configured (mcp.servers in toolhost.yaml)");
            return Ok(ExitCode::SUCCESS);
        }
        let rows: Vec<[String; 5]> = status
            .iter()
            .map(|s| {
                [
                    s.name.clone(),
                    s.transport.clone(),
                    match &s.last_error {
                        Some(e) if s.state != "up" => format!("{} ({e})", s.state),
                        _ => s.state.clone(),
                    },
                    s.source.clone().unwrap_or_default(),
                    s.tools.join(", "),
                ]
            })
            .collect();
        print_table(&["SERVER", "TRANSPORT", "STATE", "SOURCE", "TOOLS"], &rows);
        Ok(ExitCode::SUCCESS)
    }
}
