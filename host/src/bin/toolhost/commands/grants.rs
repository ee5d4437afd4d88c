use crate::args::{HostArgs, PidArg, View, live_or_local, local_only_note};
use crate::output::{list_or_none, marked, print_json};
use anyhow::Result;
use std::process::ExitCode;

/// The security review: for every plugin, its digest, what it asks for
/// (from its imports), what the operator granted, what was denied, and in
/// plain words what each grant allows.
///
/// Imports that expose nothing without a grant (the standard library's
/// environment and filesystem) are shown as inert, not as asks. Findings
/// (lines starting `!`) name grants its imports can never use
/// (over-grants) and capabilities it asks for and lacks. For a signed
/// plugin, the secrets its manifest asks for (each set or not, never a
/// value) and the origins it asks to reach (each granted or not). Plugins
/// held back (waiting for a secret or a grant) are listed after, with why.
///
/// With a `toolhost serve` running on this state directory, the review is
/// of the plugins it has loaded now (hot-added ones included; a note on
/// stderr says `live: host pid N at ADDR`); without one, of the plugins
/// this config and these flags would load (`local view`). `--plugin` and
/// the other host flags only shape the local view.
#[derive(Debug, clap::Args)]
pub struct Grants {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pid: PidArg,
    #[command(flatten)]
    host: HostArgs,
}

impl Grants {
    pub fn run(self) -> Result<ExitCode> {
        let state = self.host.builder()?.resolved_state_dir();
        let view = if self.host.describes_another_host() {
            local_only_note();
            View::Local
        } else {
            live_or_local(&state, self.pid.pid, |c| c.grants())?
        };
        let (report, withheld) = match view {
            View::Live(reply) => (reply.plugins, reply.withheld),
            View::Local => {
                let host = self.host.build_read_only()?.host;
                (toolhost::report::grants(&host), host.admission().withheld_plugins())
            }
        };
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
            if !r.secrets.is_empty() {
                println!(
                    "  secrets:  {}",
                    marked(r.secrets.iter().map(|s| (s.name.as_str(), s.set)), "set", "NOT set")
                );
            }
            if !r.asked_origins.is_empty() {
                let origins =
                    marked(r.asked_origins.iter().map(|o| (o.origin.as_str(), o.granted)), "granted", "NOT granted");
                println!("  reaches:  {origins} (asked for by its manifest)");
            }
            if let Some(l) = &r.limits {
                println!("  limits:   {}", l.describe());
            }
            for line in &r.allows {
                println!("  - {line}");
            }
            for f in &r.findings {
                println!("  ! {f}");
            }
            println!();
        }
        for held in &withheld {
            println!("{}: held back: {}", held.name, held.reason);
        }
        Ok(ExitCode::SUCCESS)
    }
}
