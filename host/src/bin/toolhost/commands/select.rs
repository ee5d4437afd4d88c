use crate::args::HostArgs;
use crate::output::print_json;
use anyhow::Result;
use serde_json::json;
use std::process::ExitCode;
use toolhost::budget::{Tier, Turn};

/// Pick the latency tier for an utterance, say why, and list the tools
/// the agent would see.
#[derive(Debug, clap::Args)]
pub struct Select {
    /// What the player said.
    utterance: String,
    /// The agent answering (its ceiling caps the tier).
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// Players waiting for a response.
    #[arg(long, default_value_t = 0, value_name = "N")]
    queue_depth: u32,
    /// This is the first turn of the conversation.
    #[arg(long)]
    first_turn: bool,
    /// A DM override in force (fast, standard, deep).
    #[arg(long, value_name = "TIER")]
    dm_override: Option<Tier>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

impl Select {
    pub fn run(self) -> Result<ExitCode> {
        let started = self.host.start_read_only()?;
        let a = &started.assembly;
        let budget = a.host.pipeline().budget();
        let agent = self.agent.as_deref();
        let turn = Turn { dm_override: self.dm_override, queue_depth: self.queue_depth, first_turn: self.first_turn };
        let sel = budget.select(&budget.selector(), agent, &self.utterance, turn)?;
        let catalog = a.host.pipeline().registry().snapshot();
        let visible: Vec<String> =
            budget.available_tools(&catalog, agent, sel.tier)?.iter().map(|t| t.def.name.clone()).collect();
        if self.json {
            return print_json(&json!({
                "utterance": self.utterance,
                "agent": agent,
                "tier": sel.tier.as_str(),
                "reason": sel.reason.to_string(),
                "tools": visible,
            }));
        }
        println!("tier:   {}", sel.tier.as_str().to_uppercase());
        let capped = agent.map(|a| budget.agent(a).map(|p| p.budget_tier)).transpose()?;
        match capped {
            Some(c) if sel.tier == c && sel.reason != toolhost::budget::Reason::DmOverride => {
                println!("why:    {} (capped at the agent's ceiling, {})", sel.reason, c)
            }
            _ => println!("why:    {}", sel.reason),
        }
        println!("tools:  {}", if visible.is_empty() { "(none)".to_string() } else { visible.join(", ") });
        Ok(ExitCode::SUCCESS)
    }
}
