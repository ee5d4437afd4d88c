//! The enforcer: which tools an agent may see at a tier.

use super::{Budget, BudgetError, Tier};
use crate::registry::{Catalog, RegisteredTool};
use std::sync::Arc;

impl Budget {
    /// Is `tool` visible to `agent` at `tier`? On the allow-list (any tool
    /// for the operator, `agent == None`) and within the tier.
    /// A long tool (`budget.long_tools`) is visible to the agents it names
    /// that also have it on their allow-list, at its tier (pinned, else
    /// DEEP) or above, and to no one else.
    pub fn visible(&self, agent: Option<&str>, tier: Tier, t: &RegisteredTool) -> Result<bool, BudgetError> {
        if let Some(name) = agent {
            let set = self.settings.load();
            let (_, allowed) = set.agents.get(name).ok_or_else(|| BudgetError::UnknownAgent(name.to_string()))?;
            if !allowed.contains(&t.def.name) {
                return Ok(false);
            }
        }
        if self.is_long(&t.def.name) {
            return Ok(self.long_visible(&t.def.name, agent, tier));
        }
        Ok(self.tool_tier(&t.def, agent).is_some_and(|tt| tt <= tier))
    }

    /// The enforcer: the tools `agent` may see at `tier`, sorted by name.
    /// Over-budget and non-allow-listed tools are never in the list.
    pub fn available_tools(
        &self,
        catalog: &Catalog,
        agent: Option<&str>,
        tier: Tier,
    ) -> Result<Vec<Arc<RegisteredTool>>, BudgetError> {
        let set = self.settings.load();
        let profile = match agent {
            Some(name) => Some(&set.agents.get(name).ok_or_else(|| BudgetError::UnknownAgent(name.to_string()))?.0),
            None => None,
        };
        let now = self.clock.now();
        let mut stale = Vec::new();
        let mut out: Vec<Arc<RegisteredTool>> = Vec::new();
        {
            // One read lock and one clock reading for the whole listing.
            let states = self.tools.read().unwrap_or_else(|p| p.into_inner());
            let mut consider =
                |t: &Arc<RegisteredTool>| match self.cached_tier(states.get(&t.def.name), &t.def, agent, now) {
                    _ if !t.provider.is_available() => {}
                    _ if self.is_long(&t.def.name) => {
                        if self.long_visible(&t.def.name, agent, tier) {
                            out.push(t.clone());
                        }
                    }
                    Some(tt) if tt.is_some_and(|tt| tt <= tier) => out.push(t.clone()),
                    Some(_) => {}
                    None => stale.push(t.clone()),
                };
            match profile {
                None => catalog.tools().for_each(&mut consider),
                Some(p) => p.tools.iter().filter_map(|n| catalog.get(n)).for_each(&mut consider),
            }
        }
        for t in stale {
            if self.status_for(&t.def, agent).tier.is_some_and(|tt| tt <= tier) {
                out.push(t);
            }
        }
        if profile.is_some() || !out.is_sorted_by(|a, b| a.def.name <= b.def.name) {
            out.sort_by(|a, b| a.def.name.cmp(&b.def.name));
            out.dedup_by(|a, b| a.def.name == b.def.name);
        }
        Ok(out)
    }
}
