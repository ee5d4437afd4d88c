use crate::args::HostArgs;
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::io::{IsTerminal, Read};
use std::process::ExitCode;
use toolhost::budget::Tier;
use toolhost::tool::{CallContext, Content};

#[path = "call_ask.rs"]
mod ask;

/// Call a tool and print its result on stdout.
///
/// Exit status 0 on success; 1 with a message on stderr on any error
/// (unknown tool, invalid arguments, tool failure, limit hit).
#[derive(Debug, clap::Args)]
pub struct Call {
    /// Tool name, as `toolhost tools` lists it.
    tool: String,
    /// Arguments as a JSON object; `-` reads them from stdin.
    #[arg(default_value = "{}")]
    arguments: String,
    /// Call as this agent: a tool it may not see is refused like an unknown tool.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// The tier of the turn [default: the agent's ceiling; deep without an agent].
    #[arg(long, value_name = "TIER")]
    tier: Option<Tier>,
    /// Print the whole result as JSON: every content block, the structured
    /// result an external server sent beside them, and the call's cost.
    #[arg(long)]
    json: bool,
    /// Answer the tool's form questions (elicitation, from a plugin or an
    /// external server) with the defaults their schema gives, without
    /// asking; a question with a required field that has no default is
    /// declined. Without it, questions are asked on the terminal when
    /// there is one, and declined when there is none.
    #[arg(long)]
    accept_defaults: bool,
    /// Write each URL the tool asks to have opened (a URL elicitation, or
    /// an external server wanting its sign-in renewed with more scope) to
    /// this file, one per line, and take it as opened: for a script that
    /// plays the browser. Without it, such a URL is shown on the terminal.
    #[arg(long, value_name = "FILE")]
    print_url_to: Option<std::path::PathBuf>,
    #[command(flatten)]
    host: HostArgs,
}

impl Call {
    pub fn run(self) -> Result<ExitCode> {
        let raw = if self.arguments == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).context("reading arguments from stdin")?;
            s
        } else {
            self.arguments.clone()
        };
        let args: Value = serde_json::from_str(&raw).with_context(|| format!("arguments are not valid JSON: {raw}"))?;
        let started = self.host.start()?;
        let a = &started.assembly;
        let host = &a.host;
        let interactive = self.arguments != "-" && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        let asker = ask::Terminal {
            accept_defaults: self.accept_defaults,
            interactive,
            print_url_to: self.print_url_to.clone(),
        };
        let ctx = CallContext { asker: Some(std::sync::Arc::new(asker)), ..CallContext::default() };
        let out = match (self.agent.as_deref(), self.tier) {
            (None, None) => host.call(&self.tool, &args, &ctx),
            (agent, tier) => {
                let tier = host.pipeline().budget().effective_tier(agent, tier.unwrap_or(Tier::Deep))?;
                host.pipeline().call_as(agent, tier, &self.tool, &args, &ctx)
            }
        };
        // A refused call is counted into its second's `refused` record:
        // written now, the process ends here.
        host.pipeline().audit().flush_refusals(true);
        let out = out?;
        if self.json {
            return crate::output::print_json(&json!({
                "content": out.content,
                "structured": out.structured,
                "duration_ms": out.stats.duration.as_secs_f64() * 1000.0,
                "fuel_used": out.stats.fuel_used,
                "peak_memory_bytes": out.stats.peak_memory_bytes,
            }));
        }
        match &out.content[..] {
            [Content::Json(v)] => println!("{}", serde_json::to_string(v)?),
            blocks if blocks.iter().all(|b| matches!(b.plain(), Content::Text(_))) => {
                for b in blocks {
                    if let Content::Text(t) = b.plain() {
                        println!("{t}");
                    }
                }
            }
            blocks => println!("{}", serde_json::to_string(blocks)?),
        }
        Ok(ExitCode::SUCCESS)
    }
}
