use crate::args::StateArgs;
use crate::output::print_table;
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::process::ExitCode;
use toolhost::audit_query::{self, Filter, OPERATOR};

/// Query the audit trail: who called what, how it ended, what was loaded.
///
/// Reads the audit file of this config (`audit.path`, default
/// `<state dir>/audit.jsonl`) and its rotated files (`audit.jsonl.1` and
/// on, as `audit.keep` keeps them), oldest first, whether or not a host is
/// serving. Every filter given must match. Calibration probes are left out
/// unless `--probes`. Prints a table, or with `--json` one JSON record per
/// line (as the file holds them); `--follow` then prints new records as
/// they are written (rotations included) until interrupted.
///
/// Examples: `toolhost audit --agent bartok --since 2h`; `toolhost audit
/// --trace 4bf92f3577b34da6a3ce929d0e0e4736`; `toolhost audit --actor
/// admin_api`;
/// `toolhost audit --outcome error --last 20`; `toolhost audit --plugin
/// weather --json`; `toolhost audit --follow`.
#[derive(Debug, clap::Args)]
pub struct Audit {
    /// Records of this agent's calls (`(operator)`: the operator's).
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// Records of this plugin: calls it answered, its loads and removals.
    #[arg(long, value_name = "NAME")]
    plugin: Option<String>,
    /// Records of calls of this tool.
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// Calls that ended so (`ok`, `timeout`, `invalid_input`, `refused`,
    /// `capacity_exceeded` ...; `error`: every call that did not end ok),
    /// or lifecycle events (`plugin_load`, `plugin_refused` ...).
    #[arg(long, value_name = "OUTCOME")]
    outcome: Option<String>,
    /// Records from this time on: a duration back from now (`90s`, `30m`,
    /// `2h`, `7d`) or an RFC 3339 time (`2026-11-29T20:00:00Z`).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Records before this time (as `--since` takes it).
    #[arg(long, value_name = "WHEN")]
    until: Option<String>,
    /// Records of one trace: its id as `trace_id` holds it (the
    /// client's `traceparent` trace id, or toolhost's own).
    #[arg(long, value_name = "ID")]
    trace: Option<String>,
    /// Records of one actor (`agent lyra`, `cli uid 1000 (dm)`, `host h2`)
    /// or of every actor through one channel (`admin_api`, `page`,
    /// `cluster`, `signal`, `config`).
    #[arg(long, value_name = "WHO")]
    actor: Option<String>,
    /// Include calibration probes.
    #[arg(long)]
    probes: bool,
    /// Only the last N records that match.
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// Print one JSON record per line.
    #[arg(long)]
    json: bool,
    /// Go on printing records as they are written (Ctrl-C stops).
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    state: StateArgs,
}

impl Audit {
    pub fn run(self) -> Result<ExitCode> {
        let config = self.state.config.load()?;
        if config.audit.disabled {
            bail!("this config keeps no audit trail (audit.disabled: true)");
        }
        let path = match &config.audit.path {
            Some(p) => config.resolve(p),
            None => self.state.state_dir_of(&config).join("audit.jsonl"),
        };
        let keep = config.audit.keep.unwrap_or(toolhost::audit::DEFAULT_KEEP);
        let now = chrono::Utc::now();
        let when = |flag: &str, v: &Option<String>| -> Result<_> {
            v.as_deref()
                .map(|t| audit_query::parse_when(t, now).map_err(|e| anyhow::anyhow!("{flag}: {e}")))
                .transpose()
        };
        let filter = Filter {
            agent: self.agent.clone(),
            plugin: self.plugin.clone(),
            tool: self.tool.clone(),
            outcome: self.outcome.clone(),
            since: when("--since", &self.since)?,
            until: when("--until", &self.until)?,
            probes: self.probes,
            trace: self.trace.clone(),
            actor: self.actor.clone(),
        };
        let files = audit_query::files(&path, keep);
        if files.is_empty() && !self.follow {
            bail!(
                "no audit trail at {} yet (a host writes it there once it loads plugins or answers a call; audit.path moves it)",
                path.display()
            );
        }
        let mut found = std::collections::VecDeque::new();
        let read = audit_query::read(&files, &filter, |r| {
            found.push_back(r);
            if self.last.is_some_and(|n| found.len() > n) {
                found.pop_front();
            }
        })
        .with_context(|| format!("reading the audit trail at {}", path.display()))?;
        if read.skipped > 0 {
            eprintln!("note: {} lines of the trail were not records (cut by a crash?) and were skipped", read.skipped);
        }
        if self.json {
            for r in &found {
                println!("{r}");
            }
        } else if !self.follow || !found.is_empty() {
            print_table(&HEADER, &found.iter().map(row).collect::<Vec<_>>());
        }
        if !self.follow {
            if found.is_empty() {
                eprintln!("no record matches (of {})", path.display());
            }
            return Ok(ExitCode::SUCCESS);
        }
        // From where the read ended in the file being written.
        let from = if files.last() == Some(&path) { read.end } else { 0 };
        if !path.exists() {
            eprintln!("waiting for {} to be written", path.display());
            while !path.exists() {
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
        }
        use std::io::Write as _;
        audit_query::follow(&path, from, &filter, std::time::Duration::from_millis(250), |r| {
            let line = if self.json {
                r.to_string()
            } else {
                row(&r).map(|c| toolhost::tool::log_safe(&c).into_owned()).join("  ")
            };
            // A closed pipe (`| head`) ends the follow.
            writeln!(std::io::stdout(), "{line}").and_then(|()| std::io::stdout().flush()).is_ok()
        })
        .with_context(|| format!("following {}", path.display()))?;
        Ok(ExitCode::SUCCESS)
    }
}

const HEADER: [&str; 6] = ["TIME", "EVENT", "WHO", "TOOL / PLUGIN", "OUTCOME", "MS"];

/// One record as a table row.
fn row(r: &Value) -> [String; 6] {
    let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let event = text("event");
    let agent = match event.as_str() {
        "call" | "refused" | "probe" | "call_start" => {
            r.get("agent").and_then(Value::as_str).unwrap_or(OPERATOR).to_string()
        }
        _ => match (text("actor"), text("via")) {
            (a, v) if a.is_empty() => v,
            (a, v) if v.is_empty() => a,
            (a, v) => format!("{a} ({v})"),
        },
    };
    let time = r.get("time").or_else(|| r.get("last")).and_then(Value::as_str).unwrap_or_default();
    let outcome = match event.as_str() {
        "refused" => format!("{} × {}", text("reason"), r.get("count").and_then(Value::as_u64).unwrap_or(1)),
        _ if r.get("error").is_some() => {
            let o = text("outcome");
            let e = text("error");
            if o.is_empty() { e } else { format!("{o}: {e}") }
        }
        _ => {
            let o = text("outcome");
            if o.is_empty() { text("origin") } else { o }
        }
    };
    let ms = r.get("duration_ms").and_then(Value::as_f64).map(|d| format!("{d:.1}")).unwrap_or_default();
    let what = if r.get("tool").is_some() { text("tool") } else { text("plugin") };
    [time.replace('T', " ").trim_end_matches('Z').to_string(), event, agent, what, outcome, ms]
}
