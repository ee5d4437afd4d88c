use crate::args::StateArgs;
use crate::commands::override_tier::{parse_duration, resolve_agent};
use crate::output::print_json;
use anyhow::Result;
use std::process::ExitCode;
use std::time::Duration;

/// Let a player's own agent join the table as an NPC, once, without a
/// static token: mint a pairing code in the running host.
///
/// `toolhost pair Lyra --for 10m` prints a one-time code and the URL to give
/// the player: an MCP client that opens `http://HOST:PORT/mcp/pair/<code>`
/// gets a session as Lyra (her tools, her tier, her rate limit), and in
/// the answer to its first request (header `x-toolhost-token`) a token of
/// its own for later sessions on `/mcp/<agent>`. The code works once and
/// expires; `--list` shows the codes waiting and the tokens they gave,
/// `--revoke ID` ends one. Codes and their tokens last as long as the host
/// process. The DM's page has the same under "Pairing".
#[derive(Debug, clap::Args)]
pub struct Pair {
    /// The agent, as named in `npcs` (its name in any case, or its endpoint
    /// slug, also do).
    #[arg(required_unless_present_any = ["list", "revoke"])]
    agent: Option<String>,
    /// How long the code waits for its client: 90s, 10m, 1h (at most 24h).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, default_value = "10m")]
    duration: Duration,
    /// List the codes waiting and the tokens paired.
    #[arg(long, conflicts_with_all = ["agent", "revoke"])]
    list: bool,
    /// Revoke a code, or the token it gave, by id (or the code itself).
    #[arg(long, value_name = "ID", conflicts_with = "agent")]
    revoke: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

impl Pair {
    pub fn run(self) -> Result<ExitCode> {
        let admin = self.state.admin()?;
        if let Some(id) = &self.revoke {
            let gone = admin.unpair(id)?;
            if self.json {
                return print_json(&gone);
            }
            println!("revoked {}: its code no longer opens a session, its token no longer works", gone.removed);
            return Ok(ExitCode::SUCCESS);
        }
        if self.list {
            let all = admin.pairings()?;
            if self.json {
                return print_json(&all);
            }
            if all.pairings.is_empty() {
                println!("no pairing codes waiting and no paired clients");
            }
            for p in &all.pairings {
                match (&p.code, &p.expires) {
                    (Some(code), Some(until)) => {
                        println!("{}  {}  waiting  code {code}, until {until}", p.id, p.agent)
                    }
                    _ => println!("{}  {}  paired   since {}", p.id, p.agent, p.created),
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        let given = self.agent.as_deref().unwrap_or_default();
        let agent = resolve_agent(given, &admin.agents()?.agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>());
        let p = admin.pair(&agent, self.duration.as_secs())?;
        if self.json {
            return print_json(&p);
        }
        let code = p.code.clone().unwrap_or_default();
        let url = format!("{}/mcp/pair/{code}", admin.endpoint().url);
        println!("pairing code for {}: {code} (id {}, until {})", p.agent, p.id, p.expires.as_deref().unwrap_or("-"));
        println!("  the player's MCP client opens: {url}");
        println!("  it works once; revoke with: toolhost pair --revoke {}", p.id);
        Ok(ExitCode::SUCCESS)
    }
}
