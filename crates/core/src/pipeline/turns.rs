//! Turns: what one utterance of a conversation may spend.
//!
//! A [`Conversation`] is one agent's session (an MCP session, a voice
//! engine's session). Each utterance starts a turn ([`Pipeline::begin_turn`]):
//! the seed's tier selector picks a tier from the words and the cues (queue
//! depth, first turn), with this conversation's own anti-spam clock, capped
//! at the agent's ceiling. Until the next utterance, the conversation lists
//! and calls tools at that tier, and at most `max_calls_per_turn` of them.
//!
//! A DM override in force wins over the selection (it may raise the agent
//! above its ceiling, as the DM means it to). A conversation that never
//! starts a turn works at its agent's ceiling with no turn cap, as before
//! turns existed.

use super::Pipeline;
use crate::budget::{BudgetError, Reason, Selector, Tier, Turn};

use crate::tool::{CallContext, CallError, ToolOutput};
use std::sync::Mutex;

/// What the selector is told about a turn besides the words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnCues {
    /// Players waiting for an answer.
    pub queue_depth: u32,
    /// The first turn of the conversation.
    pub first_turn: bool,
}

/// The tier a conversation works at, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnTier {
    /// The tier.
    pub tier: Tier,
    /// Why, in words (`DEEP keyword "think carefully"`, `DM override`,
    /// `agent ceiling`, ...).
    pub reason: String,
    /// Turns begun so far (0: none, the conversation works at its ceiling).
    pub turn: u64,
}

#[derive(Debug, Default)]
struct TurnState {
    /// The last turn's selection (capped at the ceiling); `None` before the
    /// first turn, or when a DM override decided it.
    selected: Option<(Tier, String)>,
    turn: u64,
    calls: u32,
}

/// One agent's conversation: its selector (and so its anti-spam clock) and
/// its current turn.
#[derive(Debug)]
pub struct Conversation {
    agent: Option<String>,
    selector: Selector,
    state: Mutex<TurnState>,
}

impl Conversation {
    /// The agent this conversation is on behalf of (`None`: the operator).
    pub fn agent(&self) -> Option<&str> {
        self.agent.as_deref()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Pipeline {
    /// A new conversation for `agent` (`None`: the operator); fails when the
    /// agent is not in the config.
    pub fn conversation(&self, agent: Option<&str>) -> Result<Conversation, BudgetError> {
        if let Some(a) = agent {
            self.budget().agent(a)?;
        }
        Ok(self.conversation_unchecked(agent))
    }

    /// A new conversation for `agent`, not checked against the config: an
    /// agent that is not (or no longer) there sees and calls nothing, and
    /// is never taken for the operator.
    pub fn conversation_unchecked(&self, agent: Option<&str>) -> Conversation {
        Conversation {
            agent: agent.map(str::to_string),
            selector: self.budget().selector(),
            state: Mutex::new(TurnState::default()),
        }
    }

    /// Starts a turn of `conversation` for `utterance`: runs the selector,
    /// caps it at the agent's ceiling (a DM override in force wins), resets
    /// the turn's call count, and returns the tier the turn works at.
    pub fn begin_turn(&self, conversation: &Conversation, utterance: &str, cues: TurnCues) -> TurnTier {
        let agent = conversation.agent();
        // A DM override in force decides the tier; the selector is not run,
        // so the override does not spend the anti-spam window.
        let selected = match agent.and_then(|a| self.budget().override_for(a)) {
            Some(_) => None,
            None => {
                let turn = Turn { dm_override: None, queue_depth: cues.queue_depth, first_turn: cues.first_turn };
                let selection = conversation.selector.select(utterance, turn);
                let ceiling = agent.and_then(|a| self.budget().agent(a).ok()).map(|p| p.budget_tier);
                Some(match ceiling {
                    Some(c) if c < selection.tier => {
                        (c, format!("{}, capped at the agent's ceiling ({c})", selection.reason))
                    }
                    _ => (selection.tier, selection.reason.to_string()),
                })
            }
        };
        let mut state = conversation.state();
        state.turn += 1;
        state.calls = 0;
        state.selected = selected;
        let turn = state.turn;
        drop(state);
        let now = self.turn_tier(conversation);
        tracing::debug!(agent = agent.unwrap_or("-"), turn, tier = %now.tier, reason = %now.reason, "turn begun");
        now
    }

    /// Refines the current turn of `conversation` with more of the same
    /// utterance (a transcript arriving in pieces): the selector runs again
    /// on `utterance`, all the words so far, and the turn takes the tier it
    /// gives when that is higher (capped at the ceiling). The turn is not a
    /// new one: its number and its calls stay. Nothing runs once the turn
    /// is at DEEP (so the anti-spam clock is not spent twice) or a DM
    /// override decides; before any turn, this begins one.
    pub fn refine_turn(&self, conversation: &Conversation, utterance: &str, cues: TurnCues) -> TurnTier {
        let agent = conversation.agent();
        let current = {
            let state = conversation.state();
            if state.turn == 0 {
                drop(state);
                return self.begin_turn(conversation, utterance, cues);
            }
            state.selected.as_ref().map(|(t, _)| *t)
        };
        let overridden = agent.and_then(|a| self.budget().override_for(a)).is_some();
        if overridden || current.is_none_or(|t| t == Tier::Deep) {
            return self.turn_tier(conversation);
        }
        let turn = Turn { dm_override: None, queue_depth: cues.queue_depth, first_turn: cues.first_turn };
        let selection = conversation.selector.select(utterance, turn);
        let ceiling = agent.and_then(|a| self.budget().agent(a).ok()).map(|p| p.budget_tier);
        let (tier, why) = match ceiling {
            Some(c) if c < selection.tier => (c, format!("{}, capped at the agent's ceiling ({c})", selection.reason)),
            _ => (selection.tier, selection.reason.to_string()),
        };
        let mut state = conversation.state();
        if current.is_some_and(|t| tier > t) {
            state.selected = Some((tier, why));
        }
        drop(state);
        self.turn_tier(conversation)
    }

    /// Starts a turn of `conversation` with the selection `leader`'s latest
    /// turn made (for one turn started in every session of an agent at
    /// once: the selector runs once, on the leader's anti-spam clock, and
    /// each session gets the same tier). Resets the turn's call count; a DM
    /// override in force still wins. Both must be the same agent's.
    pub fn follow_turn(&self, conversation: &Conversation, leader: &Conversation) -> TurnTier {
        debug_assert_eq!(conversation.agent(), leader.agent());
        let selected = leader.state().selected.clone();
        let mut state = conversation.state();
        state.turn += 1;
        state.calls = 0;
        state.selected = selected;
        drop(state);
        self.turn_tier(conversation)
    }

    /// The tier `conversation` works at now: a DM override in force, else
    /// its turn's selection, else (no turn yet) its agent's ceiling (DEEP
    /// for the operator).
    pub fn turn_tier(&self, conversation: &Conversation) -> TurnTier {
        let agent = conversation.agent();
        let state = conversation.state();
        let turn = state.turn;
        if let Some(tier) = agent.and_then(|a| self.budget().override_for(a)) {
            return TurnTier { tier, reason: Reason::DmOverride.to_string(), turn };
        }
        match &state.selected {
            Some((tier, why)) => TurnTier { tier: *tier, reason: why.clone(), turn },
            None => {
                let ceiling = agent.and_then(|a| self.budget().agent(a).ok()).map_or(Tier::Deep, |p| p.budget_tier);
                let reason = if agent.is_some() { "the agent's ceiling" } else { "the operator: every tier" };
                TurnTier { tier: ceiling, reason: reason.into(), turn }
            }
        }
    }

    /// Calls `tool` in `conversation`'s current turn: at the turn's tier,
    /// within its call cap, and otherwise like [`Pipeline::call_as`].
    pub fn call_in_turn(
        &self,
        conversation: &Conversation,
        tool: &str,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        let tier = self.turn_tier(conversation).tier;
        self.run(Some((conversation.agent(), tier)), Some(conversation), tool, arguments, ctx)
    }

    /// Spends one call of the conversation's turn, or refuses it when the
    /// turn has had its `max_calls_per_turn`. Conversations that never
    /// began a turn have no cap.
    pub(super) fn spend_turn_call(&self, conversation: &Conversation) -> Result<(), CallError> {
        let Some(max) = self.budget().max_calls_per_turn(conversation.agent()) else { return Ok(()) };
        let mut state = conversation.state();
        if state.turn == 0 {
            return Ok(());
        }
        if state.calls >= max {
            return Err(CallError::CapacityExceeded(format!(
                "{} has made {max} tool calls this turn (max_calls_per_turn: {max}); answer with what you have, a new utterance starts a new turn",
                conversation.agent().map_or_else(|| "the operator".to_string(), |a| format!("agent {a:?}")),
            )));
        }
        state.calls += 1;
        Ok(())
    }
}

#[cfg(test)]
mod properties {
    //! For random sequences of turns, overrides, measurements and demotions:
    //! no tool over the effective budget or off the allow-list is ever
    //! listed or callable, and a tool is callable exactly when it is listed.

    use super::*;
    use crate::budget::metrics::Outcome;
    use crate::budget::tests::{Fake, agent};
    use crate::budget::{Budget, BudgetConfig, LongTool, ManualClock};
    use crate::tool::{ToolDef, ToolMeta};
    use proptest::prelude::*;
    use std::collections::{HashMap, VecDeque};
    use std::sync::Arc;
    use std::time::Duration;

    /// (name, declared p50 ms): FAST, STANDARD, DEEP, over budget, none, a long tool.
    const TOOLS: [(&str, Option<u32>); 7] = [
        ("fast", Some(5)),
        ("standard", Some(800)),
        ("deep", Some(3000)),
        ("glacier", Some(9000)),
        ("mystery", None),
        ("pinned", Some(9000)),
        ("longpoll", Some(60_000)),
    ];
    const AGENTS: [(&str, Tier, &[&str]); 4] = [
        ("bartok", Tier::Fast, &["fast", "standard", "deep", "glacier", "longpoll"]),
        ("sage", Tier::Standard, &["fast", "standard", "deep", "mystery", "pinned", "longpoll"]),
        ("oracle", Tier::Deep, &["standard", "deep", "glacier", "mystery", "pinned"]),
        ("mute", Tier::Deep, &[]),
    ];
    const UTTERANCES: [&str; 5] =
        ["hello", "think carefully about it", "remember the quest?", "tell me about the rules", "take your time"];

    #[derive(Debug, Clone)]
    enum Op {
        Turn {
            conversation: usize,
            utterance: usize,
            queue_depth: u32,
            first_turn: bool,
        },
        Override {
            agent: usize,
            tier: u8,
            secs: u64,
        },
        Clear {
            agent: usize,
        },
        /// Real calls of `tool` by AGENTS[by], or the operator past the end.
        Measure {
            tool: usize,
            by: usize,
            ms: u64,
            samples: usize,
            failing: bool,
        },
        Advance {
            secs: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..5usize, 0..UTTERANCES.len(), 0..5u32, any::<bool>()).prop_map(|(c, u, q, f)| Op::Turn {
                conversation: c,
                utterance: u,
                queue_depth: q,
                first_turn: f
            }),
            1 => (0..AGENTS.len(), 0..3u8, 1..120u64).prop_map(|(a, t, s)| Op::Override { agent: a, tier: t, secs: s }),
            1 => (0..AGENTS.len()).prop_map(|a| Op::Clear { agent: a }),
            2 => (0..TOOLS.len(), 0..=AGENTS.len(), 1..6000u64, 1..15usize, any::<bool>())
                .prop_map(|(t, by, ms, n, f)| Op::Measure { tool: t, by, ms, samples: n, failing: f }),
            1 => (1..700u64).prop_map(|s| Op::Advance { secs: s }),
        ]
    }

    fn tier_of(code: u8) -> Tier {
        [Tier::Fast, Tier::Standard, Tier::Deep][usize::from(code % 3)]
    }

    fn host(clock: Arc<ManualClock>) -> Pipeline {
        let cfg = BudgetConfig {
            pin: [("pinned".to_string(), Tier::Standard)].into(),
            long_tools: vec![LongTool { tool: "longpoll".into(), timeout_ms: 60_000, agents: vec!["bartok".into()] }],
            ..BudgetConfig::default()
        };
        let agents = AGENTS.iter().map(|(name, ceiling, tools)| agent(name, *ceiling, tools)).collect();
        let runtime = crate::runtime::Runtime::new(crate::runtime::Limits::default(), None).unwrap();
        let host = Pipeline::with_budget(runtime, Budget::with_clock(cfg, agents, clock));
        let defs = TOOLS
            .iter()
            .map(|(name, p50)| ToolDef {
                name: name.to_string(),
                input_schema: serde_json::json!({"type": "object"}),
                meta: ToolMeta { estimated_duration_ms: *p50, idempotent: true, ..ToolMeta::default() },
                ..ToolDef::default()
            })
            .collect();
        host.registry().upsert(Arc::new(Fake(defs))).unwrap();
        host
    }

    /// The test's own account of the measurements the host was given, and
    /// the tier each caller should see from them: an oracle written from
    /// the budget's rules (`budget/mod.rs`, `budget/tier.rs`) without
    /// calling into the budget, so the property does not judge "over
    /// budget" with the `tool_tier` it is checking.
    ///
    /// The generator's measurements are modelled, not restricted: each
    /// `Op::Measure` sample (any duration, ok or failing, by any agent or
    /// the operator) and each successful call the check makes (the fake
    /// tool answers at once, an ok sample of well under a millisecond,
    /// modelled as 0 ms: a tier depends only on how many samples lie at
    /// or under each ceiling, and a real call never nears 500 ms). Refused
    /// calls are not measured, so they are not modelled. No calibration
    /// probes are recorded, so the oracle has no probe case.
    #[derive(Default)]
    struct Model {
        /// Seconds since the test's clock started.
        now: u64,
        /// Per (tool, caller) window, oldest first.
        windows: HashMap<(String, Option<&'static str>), VecDeque<Sample>>,
    }

    /// A measurement: (taken at, in the model's seconds; ms; failed).
    type Sample = (u64, u64, bool);

    /// The seed settings the oracle encodes (`BudgetConfig::default()`,
    /// checked equal in the test): FAST/STANDARD/DEEP ceilings in ms...
    const CEILINGS_MS: [(Tier, u64); 3] = [(Tier::Fast, 500), (Tier::Standard, 1500), (Tier::Deep, 4000)];
    /// ...samples a window keeps, and seconds a sample stays in it...
    const WINDOW: usize = 100;
    const MAX_AGE_SECS: u64 = 600;
    /// ...own samples before the measured p50 replaces the declared one...
    const MIN_SAMPLES: usize = 10;
    /// ...samples before health demotion applies, and the error rate
    /// (errors per ten samples) a tool must exceed to be demoted...
    const MIN_HEALTH_SAMPLES: usize = 5;
    const DEMOTE_ERRORS_PER_TEN: usize = 3;
    /// ...and the tier of a tool that declares nothing.
    const UNMEASURED: Tier = Tier::Standard;

    impl Model {
        fn record(&mut self, tool: &str, caller: Option<&'static str>, ms: u64, failed: bool) {
            let w = self.windows.entry((tool.to_string(), caller)).or_default();
            if w.len() == WINDOW {
                w.pop_front();
            }
            w.push_back((self.now, ms, failed));
        }

        /// The tier `caller` should see `tool` at; `None`: over budget.
        ///
        /// 1. Base: the operator's pin if any (`pinned` at STANDARD, as
        ///    [`host`] configures it); else, with at least
        ///    MIN_SAMPLES live samples of the caller's own, the tier whose
        ///    ceiling holds their median (the upper median: index
        ///    round((n-1)/2) of the sorted durations); else the declared
        ///    p50's tier; else UNMEASURED. Over the DEEP ceiling: none.
        /// 2. Health: with at least MIN_HEALTH_SAMPLES live own samples of
        ///    which more than 30 % failed, one tier slower (DEEP: none).
        ///
        /// A sample is live while it is at most MAX_AGE_SECS old. Other
        /// callers' samples never count.
        fn tier(&self, tool: &str, declared: Option<u32>, caller: Option<&'static str>) -> Option<Tier> {
            let by_ceiling = |ms: u64| CEILINGS_MS.iter().find(|(_, c)| ms <= *c).map(|(t, _)| *t);
            let live: Vec<(u64, bool)> = self
                .windows
                .get(&(tool.to_string(), caller))
                .into_iter()
                .flatten()
                .filter(|(at, ..)| self.now - at <= MAX_AGE_SECS)
                .map(|&(_, ms, failed)| (ms, failed))
                .collect();
            let base = if tool == "pinned" {
                Some(Tier::Standard)
            } else if live.len() >= MIN_SAMPLES {
                let mut ms: Vec<u64> = live.iter().map(|(ms, _)| *ms).collect();
                ms.sort_unstable();
                by_ceiling(ms[(ms.len() - 1).div_ceil(2)])
            } else {
                match declared {
                    Some(p50) => by_ceiling(u64::from(p50)),
                    None => Some(UNMEASURED),
                }
            };
            let failed = live.iter().filter(|(_, f)| *f).count();
            let demoted = live.len() >= MIN_HEALTH_SAMPLES && failed * 10 > live.len() * DEMOTE_ERRORS_PER_TEN;
            match (base, demoted) {
                (base, false) => base,
                (Some(Tier::Fast), true) => Some(Tier::Standard),
                (Some(Tier::Standard), true) => Some(Tier::Deep),
                (_, true) => None,
            }
        }
    }

    /// Checks the property for one conversation, calling every tool once:
    /// the listing is exactly the allow-listed tools the oracle puts at or
    /// under the turn's tier (and the long tool for its agent at DEEP).
    fn check(host: &Pipeline, conversation: &Conversation, model: &mut Model) -> Result<(), TestCaseError> {
        let agent = conversation.agent();
        let (_, ceiling, allowed) = AGENTS.iter().find(|(n, ..)| Some(*n) == agent).unwrap();
        let now = host.turn_tier(conversation);
        let dm = agent.and_then(|a| host.budget().override_for(a));
        match dm {
            Some(o) => prop_assert_eq!(now.tier, o, "a DM override in force decides"),
            None => prop_assert!(now.tier <= *ceiling, "{:?} above the ceiling {:?}", now.tier, ceiling),
        }
        let catalog = host.registry().snapshot();
        let listed: Vec<String> = host
            .budget()
            .available_tools(&catalog, agent, now.tier)
            .unwrap()
            .iter()
            .map(|t| t.def.name.clone())
            .collect();
        for name in &listed {
            prop_assert!(allowed.contains(&name.as_str()), "{name} listed but not on the allow-list");
        }
        // The long tool is not tiered: only its agent sees it, at DEEP.
        let caller = AGENTS.iter().map(|(n, ..)| *n).find(|n| Some(*n) == agent);
        for (name, declared) in TOOLS {
            let oracle = model.tier(name, declared, caller);
            let expected = if name == "longpoll" {
                agent == Some("bartok") && now.tier == Tier::Deep
            } else {
                allowed.contains(&name) && oracle.is_some_and(|t| t <= now.tier)
            };
            prop_assert_eq!(
                listed.iter().any(|l| l == name),
                expected,
                "{} (oracle: {:?}) listed at {:?}",
                name,
                oracle,
                now.tier
            );
        }
        for (name, _) in TOOLS.iter().chain([("nonexistent", None)].iter()) {
            let r = host.call_in_turn(conversation, name, &serde_json::json!({}), &CallContext::default());
            prop_assert_eq!(r.is_ok(), listed.iter().any(|l| l == name), "{} callable: {:?}", name, r.err());
            if r.is_ok() {
                model.record(name, caller, 0, false);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn nothing_over_budget_or_off_the_allow_list_is_ever_listed_or_callable(
            ops in proptest::collection::vec(op(), 1..40)
        ) {
            let clock = Arc::new(ManualClock::default());
            let host = host(clock.clone());
            let seed = BudgetConfig::default();
            prop_assert_eq!(
                (seed.fast_ms, seed.standard_ms, seed.deep_ms, seed.window, seed.window_max_age_secs),
                (CEILINGS_MS[0].1, CEILINGS_MS[1].1, CEILINGS_MS[2].1, WINDOW, MAX_AGE_SECS),
                "the oracle encodes the seed settings"
            );
            prop_assert_eq!(
                (seed.min_samples, seed.min_health_samples, seed.demote_error_rate, seed.unmeasured_tier),
                (MIN_SAMPLES, MIN_HEALTH_SAMPLES, DEMOTE_ERRORS_PER_TEN as f64 / 10.0, UNMEASURED),
                "the oracle encodes the seed settings"
            );
            let mut model = Model::default();
            // Two conversations of bartok, one each of the others.
            let conversations: Vec<Conversation> = ["bartok", "bartok", "sage", "oracle", "mute"]
                .iter()
                .map(|a| host.conversation(Some(a)).unwrap())
                .collect();
            for op in ops {
                match op {
                    Op::Turn { conversation, utterance, queue_depth, first_turn } => {
                        host.begin_turn(&conversations[conversation], UTTERANCES[utterance], TurnCues { queue_depth, first_turn });
                    }
                    Op::Override { agent, tier, secs } => {
                        host.budget().set_override(AGENTS[agent].0, tier_of(tier), Duration::from_secs(secs)).unwrap();
                    }
                    Op::Clear { agent } => host.budget().clear_override(AGENTS[agent].0),
                    Op::Measure { tool, by, ms, samples, failing } => {
                        let by = AGENTS.get(by).map(|a| a.0);
                        let catalog = host.registry().snapshot();
                        let def = &catalog.get(TOOLS[tool].0).unwrap().def;
                        for _ in 0..samples {
                            let outcome = if failing { Outcome::Error } else { Outcome::Ok };
                            host.budget().record(def, by, Duration::from_millis(ms), outcome);
                            model.record(TOOLS[tool].0, by, ms, failing);
                        }
                    }
                    Op::Advance { secs } => {
                        clock.advance(Duration::from_secs(secs));
                        model.now += secs;
                    }
                }
                for c in &conversations {
                    check(&host, c, &mut model)?;
                }
            }
        }
    }
}
