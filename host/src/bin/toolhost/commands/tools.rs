use crate::args::HostArgs;
use crate::output::{arg_summary, ms, print_json, print_table, tier_name};
use anyhow::Result;
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::budget::Tier;
use toolhost::registry::RegisteredTool;
use toolhost::report::ToolReport;

/// List tools with tier, badge, declared latency and arguments.
///
/// With --agent, only the tools on that agent's allow-list that fit its
/// tier (its ceiling, or --tier if lower); with --tier alone, the tools
/// within that tier.
#[derive(Debug, clap::Args)]
pub struct Tools {
    /// Show what this agent may see.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// Show only tools within this tier (fast, standard, deep).
    #[arg(long, value_name = "TIER")]
    tier: Option<Tier>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

impl Tools {
    pub fn run(self) -> Result<ExitCode> {
        let started = self.host.start_read_only()?;
        let a = &started.assembly;
        let host = &a.host;
        let catalog = host.pipeline().registry().snapshot();
        let budget = host.pipeline().budget();
        let list: Vec<Arc<RegisteredTool>> = match (self.agent.as_deref(), self.tier) {
            (None, None) => catalog.tools().cloned().collect(),
            (agent, tier) => {
                let ceiling = match agent {
                    Some(a) => budget.effective_tier(Some(a), tier.unwrap_or(Tier::Deep))?,
                    None => tier.unwrap_or(Tier::Deep),
                };
                budget.available_tools(&catalog, agent, ceiling)?
            }
        };
        if self.json {
            return print_json(&list.iter().map(|t| ToolReport::of(host, t)).collect::<Vec<_>>());
        }
        let rows: Vec<[String; 8]> = list
            .iter()
            .map(|t| {
                let s = budget.status(&t.def);
                [
                    t.def.name.clone(),
                    t.provider.name().to_string(),
                    tier_name(s.tier).to_string(),
                    s.badge.map_or("-", |b| b.as_str()).to_string(),
                    Tier::compatibility(s.tier).to_string(),
                    ms(t.def.meta.estimated_duration_ms),
                    ms(t.def.meta.max_duration_ms),
                    arg_summary(&t.def.input_schema),
                ]
            })
            .collect();
        print_table(
            &["TOOL", "PROVIDER", "TIER", "BADGE", "COMPATIBILITY", "P50", "MAX", "ARGUMENTS (* required)"],
            &rows,
        );
        Ok(ExitCode::SUCCESS)
    }
}
