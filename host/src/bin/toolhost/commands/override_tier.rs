use crate::args::StateArgs;
use crate::commands::agents::override_cell;
use crate::commands::stats::age;
use crate::output::{list_or_none, print_json};
use anyhow::Result;
use std::process::ExitCode;
use std::time::Duration;
use toolhost::admin::api::{MAX_OVERRIDE_SECS, SetOverrideRequest};
use toolhost::budget::Tier;

/// Set the tier an agent works at in the running host, for a while: the
/// DM's override.
///
/// `toolhost override "Bartok the Barkeep" deep --for 15m` lets Bartok use
/// DEEP tools for 15 minutes whatever his ceiling (`npcs[].budget_tier`);
/// `toolhost override "Bartok the Barkeep" fast` holds him to FAST; `toolhost
/// override "Bartok the Barkeep" --clear` ends it now. His open MCP sessions
/// are told within a second (`notifications/tools/list_changed`) and see
/// the new set when they list tools again; they are told again when the
/// override runs out. An override is kept in the state directory: a host
/// restarted before it runs out restores it for the time left (see
/// `toolhost agents`).
#[derive(Debug, clap::Args)]
pub struct Override {
    /// The agent, as named in `npcs` (quote a name with spaces); its name
    /// in any case, or its endpoint slug (`bartok-the-barkeep`), also do.
    agent: String,
    /// The tier: fast, standard or deep.
    #[arg(value_parser = parse_tier, required_unless_present = "clear", conflicts_with = "clear")]
    tier: Option<Tier>,
    /// How long the override lasts: 90s, 10m, 1h, 1h30m (at most 24h).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, default_value = "10m", conflicts_with = "clear")]
    duration: Duration,
    /// End the agent's override now.
    #[arg(long)]
    clear: bool,
    /// Print the agent's status as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

/// The agent `given` names: its exact name, else the one agent whose name
/// matches ignoring case, or whose endpoint slug it is. Anything else is
/// passed on as given, for the host to refuse with the list of agents.
pub(crate) fn resolve_agent(given: &str, known: &[String]) -> String {
    if known.iter().any(|k| k == given) {
        return given.to_string();
    }
    let matches: Vec<&String> = known
        .iter()
        .filter(|k| k.eq_ignore_ascii_case(given.trim()) || toolhost::mcp::agent_slug(k) == given.trim())
        .collect();
    match matches.as_slice() {
        [one] => one.to_string(),
        _ => given.to_string(),
    }
}

fn parse_tier(s: &str) -> Result<Tier, String> {
    s.parse().map_err(|_| format!("unknown tier {s:?}: use fast, standard or deep"))
}

/// "90s", "10m", "1h", "1h30m", "2m30s": whole seconds, minutes and hours,
/// from 1 s to 24 h.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration: write it like 90s, 10m, 1h or 1h30m");
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in s.trim().chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number.parse().map_err(|_| bad())?;
        number.clear();
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(bad()),
        };
        total = n.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(bad)?;
    }
    if !number.is_empty() {
        return Err(format!("{s:?} needs a unit: {number}s, {number}m or {number}h"));
    }
    if total == 0 {
        return Err(format!("{s:?} is no time at all: at least 1s"));
    }
    if total > MAX_OVERRIDE_SECS {
        return Err(format!("{s:?} is too long: at most 24h"));
    }
    Ok(Duration::from_secs(total))
}

impl Override {
    pub fn run(self) -> Result<ExitCode> {
        let admin = self.state.admin()?;
        let agent =
            resolve_agent(&self.agent, &admin.agents()?.agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>());
        let status = match self.tier {
            Some(tier) if !self.clear => {
                admin.set_override(&SetOverrideRequest { agent, tier, for_secs: self.duration.as_secs() })?
            }
            _ => admin.clear_override(&agent)?,
        };
        if self.json {
            return print_json(&status);
        }
        let record = admin.endpoint();
        match &status.dm_override {
            Some(o) => println!(
                "{}: {} for {} (ceiling {}), in the host pid {}",
                status.name,
                o.tier.as_str().to_uppercase(),
                age(o.remaining_s.round()),
                status.budget_tier.as_str().to_uppercase(),
                record.pid
            ),
            None => println!(
                "{}: no override; back to its ceiling {}, in the host pid {}",
                status.name,
                status.budget_tier.as_str().to_uppercase(),
                record.pid
            ),
        }
        println!("  override: {}", override_cell(&status));
        println!("  sees now: {}", list_or_none(&status.visible));
        println!("  its MCP sessions are told within a second (notifications/tools/list_changed)");
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_names_as_a_dm_types_them() {
        let known = ["Bartok the Barkeep".to_string(), "Greymantle".to_string(), "greymantle".to_string()];
        assert_eq!(resolve_agent("Bartok the Barkeep", &known), "Bartok the Barkeep");
        assert_eq!(resolve_agent("bartok the barkeep", &known), "Bartok the Barkeep");
        assert_eq!(resolve_agent("bartok-the-barkeep", &known), "Bartok the Barkeep");
        assert_eq!(resolve_agent("greymantle", &known), "greymantle", "an exact name wins");
        assert_eq!(resolve_agent("GREYMANTLE", &known), "GREYMANTLE", "ambiguous: left for the host to refuse");
        assert_eq!(resolve_agent("nobody", &known), "nobody");
    }

    #[test]
    fn durations_a_dm_types() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs());
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("10m"), Ok(600));
        assert_eq!(secs("1h"), Ok(3600));
        assert_eq!(secs("1h30m"), Ok(5400));
        assert_eq!(secs("2m30s"), Ok(150));
        assert!(secs("10").unwrap_err().contains("needs a unit"));
        assert!(secs("0s").is_err());
        assert!(secs("ten minutes").is_err());
        assert!(secs("25h").unwrap_err().contains("at most 24h"));
        assert!(secs("99999999999999999999h").is_err());
        assert!(parse_tier("DEEP").is_ok());
        assert!(parse_tier("glacial").unwrap_err().contains("fast, standard or deep"));
    }
}
