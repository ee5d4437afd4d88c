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
                    match p.code.as_deref() {
                        // Its optimized code not ready yet (or `limits.compile: fast`).
                        Some("fast") => format!("{} (quick-compiled, not optimized yet)", p.kind),
                        _ => p.kind.clone(),
                    },
                    if p.available { "up" } else { "unavailable" }.to_string(),
                    p.tools.join(", "),
                ]
            })
            .collect();
        println!("toolhost pid {}", status.pid);
        print_table(&["PROVIDER", "KIND", "STATE", "TOOLS"], &rows);
        for c in &status.compiling {
            println!("compiling plugin {} ({:.1} s so far)", c.plugin, c.ms as f64 / 1000.0);
        }
        if !status.ready && status.compiling.is_empty() {
            println!("still loading plugins or connecting servers");
        }
        if !status.servers.is_empty() {
            // An upstream's outages are its own: calls refused while it was
            // down count here, never against its tools' health.
            let rows: Vec<[String; 4]> = status
                .servers
                .iter()
                .map(|s| {
                    [
                        s.name.clone(),
                        match &s.last_error {
                            Some(e) if s.state != "up" => format!("{} ({e})", s.state),
                            _ => s.state.clone(),
                        },
                        s.connections.to_string(),
                        s.unavailable_calls.to_string(),
                    ]
                })
                .collect();
            println!();
            print_table(&["SERVER", "STATE", "CONNECTIONS", "CALLS REFUSED WHILE DOWN"], &rows);
        }
        Ok(ExitCode::SUCCESS)
    }
}
