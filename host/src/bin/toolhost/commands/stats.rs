use crate::args::HostArgs;
use crate::output::{dur, print_json, print_table, tier_name};
use anyhow::Result;
use std::process::ExitCode;

/// Per-tool latency figures: p50, p99, error rate, tier, badge, timeout,
/// and where the tier comes from (declared, calibrated, measured).
#[derive(Debug, clap::Args)]
pub struct Stats {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

impl Stats {
    pub fn run(self) -> Result<ExitCode> {
        let started = self.host.start()?;
        let a = &started.assembly;
        if self.json {
            return print_json(&toolhost::report::stats(&a.host));
        }
        let budget = a.host.budget();
        let rows: Vec<[String; 8]> = a
            .host
            .registry()
            .snapshot()
            .tools()
            .map(|t| {
                let s = budget.status(&t.def);
                let (p50, p99) = match (s.real, s.probes) {
                    (Some(r), _) => (Some(r.p50), Some(r.p99)),
                    (None, Some(p)) => (Some(p.p50), Some(p.p99)),
                    _ => (None, None),
                };
                [
                    t.def.name.clone(),
                    dur(p50.or(s.p50)),
                    dur(p99),
                    s.real.map_or("-".into(), |r| format!("{:.0}%", r.error_rate() * 100.0)),
                    format!("{}{}", tier_name(s.tier), if s.demoted { " (demoted)" } else { "" }),
                    s.source.as_str().to_string(),
                    s.badge.map_or("-", |b| b.as_str()).to_string(),
                    dur(Some(s.timeout)),
                ]
            })
            .collect();
        print_table(&["TOOL", "P50", "P99", "ERRORS", "TIER", "FROM", "BADGE", "TIMEOUT"], &rows);
        Ok(ExitCode::SUCCESS)
    }
}
