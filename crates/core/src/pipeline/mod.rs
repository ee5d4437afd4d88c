//! The call pipeline every tool goes through, whatever its provider:
//! resolve the name, check visibility (allow-list and tier) when the caller
//! is an agent, check the arguments match the schema, run the tool under
//! its budget deadline, record the measurement.

#[cfg(test)]
mod isolation;
mod live;
mod result_cache;
mod turns;

pub use live::{BackgroundCalibration, LiveBudget};
pub use result_cache::{CacheStats, ResultCache, canonical_json};
pub use turns::{Conversation, TurnCues, TurnTier};

use crate::audit::{self, AuditLog};
use crate::budget::{Budget, BudgetConfig, Tier, outcome_of};
use crate::registry::Registry;
use crate::runtime::Runtime;
use crate::tool::{CallContext, CallError, ToolOutput};
use crate::trace;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The runtime, the registry and the budget, and the one way to call a tool.
///
/// The pipeline takes plugins already admitted (the `toolhost-admission`
/// crate decides whether and how a plugin joins the registry) and knows
/// nothing of trust, signatures, grants or secrets.
#[derive(Debug)]
pub struct Pipeline {
    runtime: Runtime,
    registry: Registry,
    budget: Budget,
    audit: AuditLog,
    /// Calls running per agent ("" for calls without one), against
    /// `Limits::agent_concurrency`.
    agents_busy: std::sync::Mutex<std::collections::HashMap<String, Arc<crate::runtime::Slots>>>,
    /// Tool calls per agent per minute.
    rates: crate::rates::CallRates,
    /// Results of cacheable tools.
    cache: ResultCache,
    /// Counters for `/metrics`.
    metrics: crate::counters::CallMetrics,
    /// Whether everything configured is ready for a session's first list.
    readiness: Arc<crate::readiness::Readiness>,
    /// Each agent's recent calls and sessions, for the DM's page.
    activity: Arc<crate::activity::Activity>,
}

/// The results of a batch of parallel calls.
#[derive(Debug)]
pub struct Batch {
    /// One result per call, in the order given.
    pub results: Vec<Result<ToolOutput, CallError>>,
    /// The batch's latency cost: the slowest call, not the sum.
    pub cost: Duration,
}

impl Pipeline {
    /// A host with no tools, default budget settings and no agents.
    pub fn new(runtime: Runtime) -> Pipeline {
        Pipeline::with_budget(runtime, Budget::new(BudgetConfig::default(), Vec::new()))
    }

    /// A host with a configured budget (agents, ceilings, selector).
    pub fn with_budget(runtime: Runtime, budget: Budget) -> Pipeline {
        let budget = budget.with_deadlines(runtime.limits().deadlines());
        let cache = ResultCache::new(
            budget.config().result_cache_entries,
            budget.config().result_cache_mb.saturating_mul(1 << 20),
        );
        Pipeline {
            cache,
            runtime,
            registry: Registry::new(),
            budget,
            audit: AuditLog::disabled(),
            agents_busy: Default::default(),
            rates: crate::rates::CallRates::default(),
            metrics: Default::default(),
            readiness: Default::default(),
            activity: Default::default(),
        }
    }

    /// The call counters (the `toolhost` crate serves them at `/metrics`).
    pub fn metrics(&self) -> &crate::counters::CallMetrics {
        &self.metrics
    }

    /// Limits each agent's tool calls (no limits by default; the `toolhost`
    /// binary applies `server.rate_limit`, `server.operator_rate_limit`
    /// and `npcs[].rate_limit`).
    pub fn with_call_rates(mut self, rates: crate::rates::CallRates) -> Pipeline {
        self.rates = rates;
        self
    }

    /// The tool-call limits (a config reload replaces them).
    pub fn call_rates(&self) -> &crate::rates::CallRates {
        &self.rates
    }

    /// Spends one call of `agent`'s tool-call rate (`None`: the operator),
    /// or says when to retry. Every call does; the MCP front also spends
    /// one for each request it forwards to an external server.
    /// With `per: identity`, `identity` (the caller's credential: a token's
    /// id, an OAuth identity) spends its own share.
    pub fn spend_call(&self, agent: Option<&str>, identity: Option<&str>) -> Result<(), CallError> {
        self.rates.take(agent, identity).map_err(|wait| {
            CallError::CapacityExceeded(format!(
                "{} is over its tool-call rate ({}); retry in {:.1} s",
                agent.map_or_else(|| "the operator".to_string(), |a| format!("agent {a:?}")),
                self.rates.limit_for(agent),
                wait.as_secs_f64()
            ))
        })
    }

    /// The tool-call limit that applies to `agent` (`None`: the operator).
    pub fn call_rate(&self, agent: Option<&str>) -> crate::rates::RateLimitConfig {
        self.rates.limit_for(agent)
    }

    /// Sends the audit trail to `audit` (by default it goes to the log only).
    pub fn with_audit(mut self, audit: AuditLog) -> Pipeline {
        self.audit = audit;
        self
    }

    /// The audit trail (the DM's page reads its tail).
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// Puts new limits in force for calls that start from now on: the
    /// runtime's per-call limits, the deadlines' floor and ceiling, each
    /// plugin's and each agent's concurrency. Returns what the running
    /// engine cannot change (see [`crate::runtime::Runtime::set_limits`]).
    pub fn apply_limits(&self, limits: crate::runtime::Limits) -> Vec<String> {
        let kept = self.runtime.set_limits(limits);
        let now = self.runtime.limits();
        self.budget.set_deadlines(now.deadlines());
        self.resize_plugins();
        for slots in self.agents_busy.lock().unwrap_or_else(|p| p.into_inner()).values() {
            slots.set_limit(now.agent_concurrency);
        }
        kept
    }

    /// Puts each plugin's own limits (`plugins.limits`) in force for its
    /// calls from now on, its concurrency included. Returns what the
    /// running engine cannot give (see
    /// [`crate::runtime::Runtime::set_plugin_limits`]).
    pub fn apply_plugin_limits(
        &self,
        own: std::collections::HashMap<String, crate::runtime::PluginLimits>,
    ) -> Vec<String> {
        let kept = self.runtime.set_plugin_limits(own);
        self.resize_plugins();
        kept
    }

    /// Each loaded plugin's concurrency, from the limits in force for it.
    fn resize_plugins(&self) {
        for plugin in self.registry.wasm_plugins() {
            plugin.set_concurrency(self.runtime.limits_for(crate::tool::Provider::name(&*plugin)).plugin_concurrency);
        }
    }

    /// The wasm runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The tool registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The latency budget.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Whether everything configured is ready for a session's first list
    /// (see [`crate::readiness`]).
    pub fn readiness(&self) -> &Arc<crate::readiness::Readiness> {
        &self.readiness
    }

    /// Each agent's recent calls and open sessions (the DM's page).
    pub fn activity(&self) -> &Arc<crate::activity::Activity> {
        &self.activity
    }

    /// The result cache.
    pub fn result_cache(&self) -> &ResultCache {
        &self.cache
    }

    /// Calls `tool` as the operator: no allow-list, no tier filter, but the
    /// same validation, deadline and measurement as every call.
    pub fn call(&self, tool: &str, arguments: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        self.run(None, None, tool, arguments, ctx)
    }

    /// Calls `tool` on behalf of `agent` at `tier`. A tool the agent cannot
    /// see (not on its allow-list, or over the tier's budget) is refused
    /// exactly like a tool that does not exist, so the refusal reveals
    /// nothing.
    pub fn call_as(
        &self,
        agent: Option<&str>,
        tier: Tier,
        tool: &str,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        self.run(Some((agent, tier)), None, tool, arguments, ctx)
    }

    /// Runs several calls in parallel, each bounded by its own deadline. The
    /// batch costs the slowest call, not the sum.
    pub fn call_batch(
        &self,
        agent: Option<&str>,
        tier: Tier,
        calls: &[(String, serde_json::Value)],
        ctx: &CallContext,
    ) -> Batch {
        let start = Instant::now();
        let results = std::thread::scope(|s| {
            let handles: Vec<_> =
                calls.iter().map(|(tool, args)| s.spawn(move || self.call_as(agent, tier, tool, args, ctx))).collect();
            handles.into_iter().map(|h| h.join().expect("batch call thread")).collect()
        });
        Batch { results, cost: start.elapsed() }
    }

    fn run(
        &self,
        enforce: Option<(Option<&str>, Tier)>,
        turn: Option<&Conversation>,
        tool: &str,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        let start = Instant::now();
        let catalog = self.registry.snapshot();
        let entry = catalog.get(tool);
        let agent = enforce.and_then(|(a, _)| a).or(ctx.agent.as_deref());
        // The provider leaves the call's cost here, so a failed call's fuel
        // and memory reach the audit trail too.
        let cost = Arc::new(crate::tool::CallCost::default());
        // The call's span, under the caller's (the MCP request's); off, the
        // caller's context stays (its trace id goes to the audit record).
        let span = trace::start(trace::Kind::Internal, ctx.trace.as_ref(), || {
            (
                format!("call {}", crate::audit::loggable_name(tool)),
                vec![
                    trace::attr("gen_ai.tool.name", crate::audit::loggable_name(tool).into_owned()),
                    trace::attr("toolhost.agent", agent.unwrap_or("(operator)").to_string()),
                ],
            )
        });
        let traced = span.clone().or_else(|| ctx.trace.clone());
        let ctx = &CallContext { cost: Some(cost.clone()), trace: traced, ..ctx.clone() };
        let mut refused = false;
        // Every call spends its agent's rate, unknown names included: a
        // flood of misses costs the audit trail as much as hits.
        let rate = if ctx.rate_spent { Ok(()) } else { self.spend_call(agent, ctx.token.as_deref()) };
        let rate_limited = rate.is_err();
        let tier = enforce.map(|(_, t)| t);
        let result = match (rate, entry) {
            (Err(e), _) => {
                budget_span(span.as_ref(), tier, "rate_limited", || e.to_string());
                Err(e)
            }
            // A name no provider has may be anything: cut when it breaks the
            // name rule, so neither the answer nor a log line carries it whole.
            (Ok(()), None) => {
                budget_span(span.as_ref(), tier, "unknown_tool", || "no provider has this tool".into());
                Err(CallError::UnknownTool(crate::audit::loggable_name(tool).into_owned()))
            }
            (Ok(()), Some(entry)) => {
                if let Some((agent, tier)) = enforce
                    && !self.budget.visible(agent, tier, entry).unwrap_or(false)
                {
                    tracing::debug!(agent = agent.unwrap_or("-"), tool, tier = %tier, "refused: tool not visible to this caller");
                    budget_span(span.as_ref(), Some(tier), "not_visible", || {
                        format!("not on the agent's allow-list, or over the {tier} tier's budget")
                    });
                    refused = true;
                    Err(CallError::UnknownTool(tool.to_string()))
                } else if let Err(e) = turn.map_or(Ok(()), |c| self.spend_turn_call(c)) {
                    budget_span(span.as_ref(), tier, "turn_cap", || e.to_string());
                    Err(e)
                } else {
                    budget_span(span.as_ref(), tier, "allowed", || {
                        format!("deadline {} ms", self.budget.timeout_for(&entry.def, agent).as_millis())
                    });
                    self.run_cached(entry, agent, arguments, ctx)
                }
            }
        };
        let stats = match &result {
            Ok(out) => out.stats,
            Err(_) => cost.get().unwrap_or_default(),
        };
        self.count_call(entry.is_some(), agent, tool, &result, refused, start.elapsed());
        if let Some(a) = agent.filter(|a| self.budget.agent(a).is_ok()) {
            let error = result.as_ref().err().map(ToString::to_string);
            let outcome = crate::activity::Outcome {
                kind: match (&result, refused) {
                    (_, true) => "refused",
                    (Ok(_), _) => "ok",
                    (Err(e), _) => e.kind(),
                },
                error: error.as_deref(),
                rate_limited,
            };
            self.activity.record(a, tool, outcome, start.elapsed());
        }
        trace::end(span.as_ref(), result.as_ref().err().map(CallError::kind));
        let call = AuditedCall {
            agent,
            session: ctx.session.as_deref(),
            token: ctx.token.as_deref(),
            tool,
            arguments,
            trace: trace::ids(ctx.trace.as_ref()),
            model: ctx.model.as_deref(),
        };
        let audited = Audited {
            stats,
            contacts: cost.contacts(),
            served_by: cost.served_by(),
            refused,
            duration: start.elapsed(),
        };
        self.audit_call(&call, entry.map(|e| &**e), &result, audited);
        result
    }

    /// Answers from the result cache when the tool is cacheable and the
    /// agent asked the same before; otherwise runs it (in one of the
    /// agent's concurrency slots) and keeps a successful result.
    fn run_cached(
        &self,
        entry: &crate::registry::RegisteredTool,
        agent: Option<&str>,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        let name = entry.def.name.as_str();
        let ttl = self.cache.ttl(&entry.def.meta);
        if ttl.is_some()
            && let Some(hit) = self.cache.get(&entry.provider, agent, name, arguments)
        {
            return Ok(hit);
        }
        let _slot = self.agent_slot(agent)?;
        let result = self.run_visible(entry, agent, arguments, ctx);
        if let (Some(ttl), Ok(out)) = (ttl, &result) {
            self.cache.put(&entry.provider, agent, name, arguments, out, ttl);
        }
        result
    }

    /// A slot among the agent's concurrent calls, or `capacity_exceeded`.
    fn agent_slot(&self, agent: Option<&str>) -> Result<crate::runtime::Slot, CallError> {
        let key = agent.unwrap_or("");
        let slots = {
            let mut map = self.agents_busy.lock().unwrap_or_else(|e| e.into_inner());
            match map.get(key) {
                Some(s) => s.clone(),
                None => map
                    .entry(key.to_string())
                    .or_insert_with(|| crate::runtime::Slots::new(self.runtime.limits().agent_concurrency))
                    .clone(),
            }
        };
        slots.try_take().ok_or_else(|| {
            CallError::CapacityExceeded(format!(
                "{} already has {} calls running (limits.agent_concurrency); try again when one finishes",
                agent.map_or_else(|| "this caller".to_string(), |a| format!("agent {a:?}")),
                slots.limit()
            ))
        })
    }

    fn run_visible(
        &self,
        entry: &crate::registry::RegisteredTool,
        agent: Option<&str>,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        let tool = entry.def.name.as_str();
        if !arguments.is_object() {
            return Err(CallError::InvalidInput {
                tool: tool.to_string(),
                message: format!("arguments must be a JSON object, not {}", json_kind(arguments)),
            });
        }
        entry
            .validator
            .check(arguments)
            .map_err(|e| CallError::InvalidInput { tool: tool.to_string(), message: e.0 })?;
        let deadline =
            self.budget.long_deadline(tool, agent).unwrap_or_else(|| self.budget.timeout_for(&entry.def, agent));
        let ctx = CallContext {
            deadline: Some(ctx.deadline.map_or(deadline, |d| d.min(deadline))),
            agent: agent.map(str::to_string),
            ..ctx.clone()
        };
        if self.audit.gate_on() && self.audit.gates(tool, writes_nothing(entry)) {
            self.gate(entry, agent, arguments, &ctx)?;
        }
        let span = trace::start(trace::Kind::Internal, ctx.trace.as_ref(), || {
            (
                format!("run {tool}"),
                vec![
                    trace::attr("toolhost.plugin", entry.provider.name().to_string()),
                    trace::attr("toolhost.provider.kind", entry.provider.kind().as_str()),
                    trace::attr("toolhost.plugin.digest", entry.provider.fingerprint().unwrap_or("-").to_string()),
                    trace::attr("toolhost.tool.schema_sha256", entry.schema_sha256.clone()),
                ],
            )
        });
        let ctx = CallContext { trace: span.clone().or_else(|| ctx.trace.clone()), ..ctx };
        let start = Instant::now();
        let result = entry.provider.call(tool, arguments, &ctx);
        if span.is_some() {
            let stats = match &result {
                Ok(out) => Some(out.stats),
                Err(_) => ctx.cost.as_ref().and_then(|c| c.get()),
            };
            trace::annotate(
                span.as_ref(),
                vec![
                    trace::attr(
                        "toolhost.fuel_used",
                        i64::try_from(stats.map_or(0, |s| s.fuel_used)).unwrap_or(i64::MAX),
                    ),
                    trace::attr("toolhost.outcome", result.as_ref().map_or_else(|e| e.kind(), |_| "ok")),
                ],
            );
            trace::end(span.as_ref(), result.as_ref().err().map(CallError::kind));
        }
        // A call refused for capacity never ran, and one refused because
        // its upstream server is down (or went away mid-call) says nothing
        // about the tool: neither counts for its latency or health. An
        // outage is the server's state (`status`), and ends with it.
        // A cancelled call was stopped by its caller, not by the tool.
        if !matches!(
            result,
            Err(CallError::CapacityExceeded(_) | CallError::Unavailable { .. } | CallError::Cancelled { .. })
        ) {
            // The time it waited for its client's answers (a person
            // thinking) is not the tool's latency.
            let waited = ctx.cost.as_ref().map_or(Duration::ZERO, |c| c.waited());
            self.budget.record(&entry.def, agent, start.elapsed().saturating_sub(waited), outcome_of(&result));
        }
        result
    }

    /// The audit gate: the call's start record on disk, or the call refused.
    fn gate(
        &self,
        entry: &crate::registry::RegisteredTool,
        agent: Option<&str>,
        arguments: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<(), CallError> {
        let ids = trace::ids(ctx.trace.as_ref());
        let actor = agent.map_or_else(|| "operator".to_string(), |a| format!("agent {a}"));
        let start = audit::StartRecord {
            time: audit::now_rfc3339(),
            event: "call_start",
            agent,
            actor: &actor,
            session: ctx.session.as_deref(),
            token: ctx.token.as_deref(),
            tool: &entry.def.name,
            provider: entry.provider.name(),
            arguments_sha256: audit::hash_arguments(arguments),
            trace_id: ids.as_ref().map(|i| i.0.as_str()),
            span_id: ids.as_ref().map(|i| i.1.as_str()),
        };
        self.audit.write_start(&start).map_err(|e| CallError::AuditUnavailable {
            tool: entry.def.name.clone(),
            message: format!(
                "its audit record could not be written first ({e}), and this tool writes (audit.fail_closed); the operator must free the audit trail's disk or fix its file"
            ),
        })
    }

    /// Counts a call for `/metrics`, with bounded labels.
    fn count_call(
        &self,
        known: bool,
        agent: Option<&str>,
        tool: &str,
        result: &Result<ToolOutput, CallError>,
        refused: bool,
        duration: Duration,
    ) {
        use crate::counters::{OPERATOR, OTHER, UNKNOWN_TOOL};
        // A name the registry does not have is one label, whatever it was.
        let tool = if known { tool } else { UNKNOWN_TOOL };
        let ran = known && !refused;
        let agent = match agent {
            None => OPERATOR,
            Some(a) if self.budget.agent(a).is_ok() => a,
            Some(_) => OTHER,
        };
        let outcome = match (result, refused) {
            (_, true) => "refused",
            (Ok(_), _) => "ok",
            (Err(e), _) => e.kind(),
        };
        self.metrics.record(tool, agent, outcome, ran.then_some(duration));
    }

    fn audit_call(
        &self,
        call: &AuditedCall<'_>,
        entry: Option<&crate::registry::RegisteredTool>,
        result: &Result<ToolOutput, CallError>,
        audited: Audited,
    ) {
        let Audited { stats, contacts, served_by, refused, duration } = audited;
        let raw = self.audit.include_arguments();
        let (error, error_text_sha256, error_text_bytes) = match result {
            Err(e) => {
                let (m, h, n) = audit::redact_error(e, raw);
                (Some(m), h, n)
            }
            Ok(_) => (None, None, None),
        };
        self.audit.write(&audit::Record {
            time: audit::now_rfc3339(),
            event: "call",
            agent: call.agent,
            session: call.session,
            token: call.token,
            tool: call.tool,
            provider: entry.map(|e| e.provider.name()),
            provider_digest: served_by.or_else(|| entry.and_then(|e| e.provider.fingerprint()).map(str::to_string)),
            arguments_sha256: audit::hash_arguments(call.arguments),
            arguments: raw.then_some(call.arguments),
            outcome: match (result, refused) {
                (_, true) => "refused",
                (Ok(_), _) => "ok",
                (Err(e), _) => e.kind(),
            },
            error,
            error_text_sha256,
            error_text_bytes,
            duration_ms: audit::ms(duration),
            fuel_used: stats.fuel_used,
            peak_memory_bytes: stats.peak_memory_bytes,
            capabilities_held: entry.map(|e| e.provider.held().names()).unwrap_or_default(),
            cached: stats.cached,
            capabilities_used: {
                let mut used = stats.capabilities_used.names();
                if !contacts.is_empty() && !used.contains(&"http") {
                    used.push("http");
                }
                used
            },
            http: contacts,
            actor: call.agent.map_or_else(|| "operator".to_string(), |a| format!("agent {a}")),
            trace_id: call.trace.as_ref().map(|t| t.0.clone()),
            span_id: call.trace.as_ref().map(|t| t.1.clone()),
            schema_sha256: entry.map(|e| e.schema_sha256.as_str()),
            model: call.model.and_then(|m| m.model.as_deref()),
            prompt_hash: call.model.and_then(|m| m.prompt_hash.as_deref()),
        });
    }
}

/// What a call cost and did, for its audit record.
struct Audited {
    stats: crate::tool::CallStats,
    contacts: Vec<crate::tool::HostContact>,
    /// The version that ran it, when the provider holds several (a canary).
    served_by: Option<String>,
    refused: bool,
    duration: Duration,
}

/// Who asked for a call, and what: the audit record's subject.
struct AuditedCall<'a> {
    agent: Option<&'a str>,
    session: Option<&'a str>,
    token: Option<&'a str>,
    tool: &'a str,
    arguments: &'a serde_json::Value,
    /// (trace id, span id), hex.
    trace: Option<(String, String)>,
    model: Option<&'a crate::tool::ModelNote>,
}

/// Whether a call of `entry` cannot change anything, for the audit gate:
/// a wasm plugin holding no capability it could write through (files,
/// sockets, HTTP, memory writes), whatever it claims; any other provider
/// (an external server) when its tool says so (`readOnlyHint: true`, the
/// server's claim: `audit.fail_closed_tools` gates a tool whatever it says).
pub(crate) fn writes_nothing(entry: &crate::registry::RegisteredTool) -> bool {
    use crate::tool::Capability;
    if entry.provider.kind() == crate::tool::ProviderKind::Wasm {
        let held = entry.provider.held();
        return ![Capability::Files, Capability::Network, Capability::Http, Capability::MemoryWrite]
            .into_iter()
            .any(|c| held.contains(c));
    }
    entry.def.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true)
}

/// The budget's decision on a call, as a span of its own under the call's.
fn budget_span(
    parent: Option<&trace::Context>,
    tier: Option<Tier>,
    decision: &'static str,
    why: impl FnOnce() -> String,
) {
    if parent.is_none() {
        return;
    }
    let span = trace::start(trace::Kind::Internal, parent, || {
        let mut attributes =
            vec![trace::attr("toolhost.budget.decision", decision), trace::attr("toolhost.budget.why", why())];
        if let Some(t) = tier {
            attributes.push(trace::attr("toolhost.tier", t.to_string()));
        }
        ("budget", attributes)
    });
    trace::end(span.as_ref(), None);
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
