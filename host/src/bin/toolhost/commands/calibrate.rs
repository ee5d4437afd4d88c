use crate::args::HostArgs;
use crate::output::{dur, print_json, print_table, tier_name};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::process::ExitCode;
use toolhost::calibrate::{self, ProbeOutcome};
use toolhost::report::BudgetReport;

/// Probe every idempotent tool with a minimal valid input and store the
/// latencies for this environment; later starts reuse them.
#[derive(Debug, clap::Args)]
pub struct Calibrate {
    /// Probes per tool.
    #[arg(long, default_value_t = 10, value_name = "N")]
    samples: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

impl Calibrate {
    pub fn run(self) -> Result<ExitCode> {
        if self.samples == 0 {
            bail!("--samples must be at least 1");
        }
        let started = self.host.start()?;
        let a = &started.assembly;
        let host = &a.host;
        let results = calibrate::calibrate(host.pipeline(), self.samples);
        a.calibration
            .save(host.pipeline(), &a.environment, &results)
            .with_context(|| format!("saving calibration to {}", a.calibration.path().display()))?;
        let catalog = host.pipeline().registry().snapshot();
        if self.json {
            let tools: Vec<_> = results
                .iter()
                .map(|r| {
                    let status = catalog.get(&r.tool).map(|t| BudgetReport::from(&host.pipeline().budget().status(&t.def)));
                    let (outcome, detail) = match &r.outcome {
                        ProbeOutcome::Probed(d) => ("probed", json!(d.len())),
                        ProbeOutcome::Skipped(why) => ("skipped", json!(why)),
                        ProbeOutcome::Failed(why) => ("failed", json!(why)),
                    };
                    json!({"tool": r.tool, "provider": r.provider, "outcome": outcome, "detail": detail, "budget": status})
                })
                .collect();
            return print_json(&json!({"environment": a.environment, "file": a.calibration.path(), "tools": tools}));
        }
        let rows: Vec<[String; 6]> = results
            .iter()
            .map(|r| {
                let s = catalog.get(&r.tool).map(|t| host.pipeline().budget().status(&t.def));
                let (p50, p99, note) = match &r.outcome {
                    ProbeOutcome::Probed(_) => (
                        dur(s.and_then(|s| s.probes.map(|p| p.p50))),
                        dur(s.and_then(|s| s.probes.map(|p| p.p99))),
                        String::new(),
                    ),
                    ProbeOutcome::Skipped(why) => ("-".into(), "-".into(), format!("skipped: {why}")),
                    ProbeOutcome::Failed(why) => ("-".into(), "-".into(), format!("failed: {why}")),
                };
                [
                    r.tool.clone(),
                    p50,
                    p99,
                    tier_name(s.and_then(|s| s.tier)).to_string(),
                    s.and_then(|s| s.badge).map_or("-", |b| b.as_str()).to_string(),
                    note,
                ]
            })
            .collect();
        print_table(&["TOOL", "PROBE P50", "PROBE P99", "TIER", "BADGE", "NOTE"], &rows);
        println!("saved to {} (environment {:?})", a.calibration.path().display(), a.environment);
        Ok(ExitCode::SUCCESS)
    }
}
