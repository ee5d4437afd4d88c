use crate::args::{HostArgs, PidArg, View, live_or_local, local_only_note};
use crate::output::{print_json, print_table, tier_name};
use anyhow::Result;
use std::process::ExitCode;
use toolhost::report::StatsRow;

/// Per-tool latency figures: calls, p50, p99, error rate, tier, badge,
/// timeout, where the tier comes from (declared, calibrated, measured) and
/// how old the newest measured call is.
///
/// With a `toolhost serve` running on this state directory, the figures are
/// the running host's: the calls its MCP clients made (a note on stderr
/// says `live: host pid N at ADDR`). Without one, a local view: a host
/// built for this command, with the calibration and the real-call
/// measurements the last `serve` saved (they outlive restarts, and age out
/// of the window like any other; the AGE column says how old they are).
///
/// `--json` prints one object per tool: `tool`, `provider`, `calls`,
/// `p50_ms` (the p50 the tier comes from), `p99_ms`, `error_rate`, `tier`,
/// `tier_source`, `badge`, `timeout_ms`, `newest_call_age_s`,
/// `oldest_call_age_s`, and the real calls' and probes' figures apart.
#[derive(Debug, clap::Args)]
pub struct Stats {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pid: PidArg,
    #[command(flatten)]
    host: HostArgs,
}

/// "42s", "3m 5s", "2h 10m".
pub fn age(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v < 10.0 => format!("{v:.2}ms"),
        Some(v) => format!("{v:.0}ms"),
    }
}

impl Stats {
    pub fn run(self) -> Result<ExitCode> {
        let state = self.host.live_state_dir(self.pid.pid)?;
        let view = if self.host.describes_another_host() {
            local_only_note();
            View::Local
        } else {
            live_or_local(&state, self.pid.pid, |c| c.stats())?
        };
        let rows: Vec<StatsRow> = match view {
            View::Live(reply) => reply.tools,
            View::Local => {
                let started = self.host.start_read_only()?;
                toolhost::report::stats(&started.assembly.host)
            }
        };
        if self.json {
            return print_json(&rows);
        }
        let table: Vec<[String; 10]> = rows
            .iter()
            .map(|r| {
                let b = &r.budget;
                [
                    r.tool.clone(),
                    b.calls.to_string(),
                    ms(b.real_p50_ms.or(b.probe_p50_ms).or(b.p50_ms)),
                    ms(r.p99_ms),
                    b.error_rate.map_or("-".into(), |e| format!("{:.0}%", e * 100.0)),
                    match (b.demoted, b.demoted_for) {
                        (true, _) => format!("{} (demoted)", tier_name(b.tier)),
                        (false, 0) => tier_name(b.tier).to_string(),
                        (false, n) => format!("{} (demoted for {n})", tier_name(b.tier)),
                    },
                    b.tier_source.clone(),
                    b.badge.clone().unwrap_or_else(|| "-".into()),
                    ms(Some(b.timeout_ms)),
                    r.newest_call_age_s.map_or("-".into(), |a| format!("{} ago", age(a))),
                ]
            })
            .collect();
        print_table(
            &["TOOL", "CALLS", "P50", "P99", "ERRORS", "TIER", "FROM", "BADGE", "TIMEOUT", "LAST CALL"],
            &table,
        );
        Ok(ExitCode::SUCCESS)
    }
}
