use crate::args::HostArgs;
use crate::output::{list_or_none, print_json};
use anyhow::Result;
use std::process::ExitCode;

/// The security review: for every plugin, its digest, what it asks for
/// (from its imports), what the operator granted, what was denied, and in
/// plain words what each grant allows.
///
/// Imports that expose nothing without a grant (the standard library's
/// environment and filesystem) are shown as inert, not as asks. Findings
/// (lines starting `!`) name grants its imports can never use
/// (over-grants) and capabilities it asks for and lacks.
#[derive(Debug, clap::Args)]
pub struct Grants {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

impl Grants {
    pub fn run(self) -> Result<ExitCode> {
        let a = self.host.build()?;
        let report = toolhost::report::grants(&a.host);
        if self.json {
            return print_json(&report);
        }
        for r in &report {
            println!("{}  sha256 {}", r.plugin, r.sha256);
            if let Some(o) = &r.origin {
                println!("  origin:   {o}");
            }
            println!("  tools:    {}", list_or_none(&r.tools));
            println!("  asks for: {}", list_or_none(&r.asks_for));
            if !r.inert.is_empty() {
                println!("  inert:    {} (imported, but nothing is exposed without a grant)", r.inert.join(", "));
            }
            println!("  denied:   {}", list_or_none(&r.denied));
            for line in &r.allows {
                println!("  - {line}");
            }
            for f in &r.findings {
                println!("  ! {f}");
            }
            println!();
        }
        Ok(ExitCode::SUCCESS)
    }
}
