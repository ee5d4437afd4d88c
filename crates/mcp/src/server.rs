//! toolhost as an MCP server: the registry, filtered by the budget enforcer
//! for one agent, over any rmcp transport (stdio, streamable HTTP).
//!
//! Protocol errors are JSON-RPC errors; tool failures and invalid input are
//! tool results with `isError: true`, so the model can read them and correct
//! itself. Every result carries `_meta.toolhost` with a machine-readable
//! `code` (on errors), the duration and the tier.
//!
//! While a tool runs, the plugin's `log` lines and `progress` reports are
//! forwarded to the client as `notifications/message` (at or above the level
//! the client set with `logging/setLevel`, `info` by default) and
//! `notifications/progress` (when the request carried a progress token).
//! Each session watches the registry and the budget and sends
//! `notifications/tools/list_changed` when its agent's visible set changes.
//!
//! External servers' tools are served as they defined them (title,
//! `outputSchema`, annotations) and their results as they sent them
//! (`structuredContent`, annotations, resource links), shaped for the
//! protocol version the client negotiated ([`super::content::Dialect`]).
//! Their resources, resource templates, prompts and completions are served
//! here too, from every external server the session may use: the operator
//! may use every connected one; an agent the ones at least one of whose
//! tools is on its allow-list (whatever the tier). Resources keep their
//! URIs; a read goes to the server that listed the URI (or, failing that,
//! whose template it expands), the first in server-name order when several
//! did, and a URI no such server listed is refused as not found. Prompts
//! are `<server>_<prompt>`. Reads and prompts are held to the output cap
//! like a tool's result. The `resources`, `prompts` and `completions`
//! capabilities are always declared (the lists are empty without external
//! servers), with `listChanged`: a session is told when what it may use
//! changes.
#![allow(deprecated)] // MCP logging is deprecated by SEP-2577 but still part of the protocol versions clients speak.

use super::content::Dialect;
use crate::Pipeline;
use crate::budget::Tier;
use crate::tool::{CallContext, CallError, PluginEvent, ToolOutput};
use crate::{Conversation, TurnCues, TurnTier};
use rmcp::model::{
    CallToolRequest, JsonRpcRequest, LoggingMessageNotification, ProgressNotification, ProgressToken, ProtocolVersion,
    RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerNotification, ServerResult,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult, ContentBlock,
    ErrorData, GetPromptRequestParams, GetPromptResponse, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam, MetaObject,
    PaginatedRequestParams, ProgressNotificationParam, Prompt, PromptReference, PromptsCapability,
    ReadResourceRequestParams, ReadResourceResponse, Reference, Resource, ResourceTemplate, ResourcesCapability,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use toolhost_mcp_wire::upstream::Upstream;

/// How often a session re-checks its visible tool set for changes that no
/// registry event announces (measured latency, health demotion, an expiring
/// DM override).
const VISIBILITY_POLL: Duration = Duration::from_secs(1);

/// One MCP session's view of the host: everything it does is on behalf of
/// `agent` (the operator when `None`).
#[derive(Clone, Debug)]
pub struct McpFront {
    host: Arc<Pipeline>,
    agent: Option<String>,
    /// Lowest log level forwarded to this session (a [`level_rank`]).
    log_level: Arc<AtomicU8>,
    /// This session's id in the audit trail when the transport has none of
    /// its own (stdio); over HTTP the `Mcp-Session-Id` is used.
    session_id: Arc<str>,
    /// This session's turns: its tier selector and the current turn.
    conversation: Arc<Conversation>,
    /// The tool names this session was last shown (listed or announced):
    /// a change from these is announced with `list_changed`. `None` until
    /// its first list or the host is ready, whichever is first.
    shown: Arc<std::sync::Mutex<Option<Vec<String>>>>,
    /// Where fast calls run without a thread hop (`serve --stdio`);
    /// `None`: every call on the blocking pool.
    lane: Option<Arc<super::lane::CallLane>>,
    /// The protocol version agreed at `initialize`, once the session is
    /// initialized (what rmcp's request context falls back to): until then
    /// no call is taken around rmcp's service ([`DirectFront`]).
    negotiated: Arc<std::sync::OnceLock<ProtocolVersion>>,
    /// Where a call's notifications (its plugin's progress and log lines)
    /// go on `serve --stdio`: straight into the transport's output, not
    /// through rmcp's service. Once the input has ended, rmcp's loop only
    /// drains responses and no longer takes a handler's notifications, so a
    /// call that reported then would hang until rmcp gave up on it and its
    /// answer would be lost. `None`: through rmcp's peer (HTTP).
    replies: Option<super::stdio::Replies>,
    /// Until when this session's lists wait for the host to be ready: set
    /// by its first list ([`toolhost_core::readiness`]).
    first_list: Arc<std::sync::OnceLock<std::time::Instant>>,
    /// This session, counted among its agent's open sessions from
    /// `initialize` until every clone of this front is dropped.
    live: Arc<std::sync::OnceLock<toolhost_core::activity::SessionMark>>,
    /// Whether this session's `initialize` was answered: a second is refused.
    initialized: Arc<std::sync::atomic::AtomicBool>,
    /// Every live session of this endpoint, for turns started from outside
    /// a session (shared by the endpoint's sessions).
    room: Arc<room::Room>,
    /// Wakes this session's watcher when a turn started from outside it
    /// may have changed what it sees.
    nudge: Arc<tokio::sync::Notify>,
    /// This endpoint's tasks (shared by its sessions: [`tasks`]).
    tasks: Arc<tasks::Tasks>,
}

/// `params._meta` keys of a `tools/list` that starts a turn.
pub const META_UTTERANCE: &str = "toolhost/utterance";
/// Players waiting for an answer (integer), with [`META_UTTERANCE`].
pub const META_QUEUE_DEPTH: &str = "toolhost/queue_depth";
/// The first turn of the conversation (bool), with [`META_UTTERANCE`].
pub const META_FIRST_TURN: &str = "toolhost/first_turn";
/// The longest utterance a turn reads, in bytes; longer ones are refused.
pub const MAX_UTTERANCE_BYTES: usize = 16 * 1024;

/// A fresh random session id (128 bits, hex).
fn new_session_id() -> Arc<str> {
    let mut bytes = [0u8; 16];
    // Without OS randomness the id only loses uniqueness, not safety: it
    // names a session in the audit trail and grants nothing.
    let _ = getrandom::fill(&mut bytes);
    hex::encode(bytes).into()
}

/// Orders MCP log levels, debug lowest.
fn level_rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// A plugin's log level as an MCP one (`trace` folds into debug).
fn mcp_level(level: &str) -> LoggingLevel {
    match level {
        "trace" | "debug" => LoggingLevel::Debug,
        "info" => LoggingLevel::Info,
        "warn" => LoggingLevel::Warning,
        _ => LoggingLevel::Error,
    }
}

impl McpFront {
    /// A front for `agent`; fails if the agent is not in the config.
    pub fn new(host: Arc<Pipeline>, agent: Option<String>) -> Result<McpFront, crate::budget::BudgetError> {
        let conversation = Arc::new(host.conversation(agent.as_deref())?);
        let room = Arc::new(room::Room::new(&host, agent.as_deref()));
        Ok(McpFront {
            host,
            agent,
            log_level: Arc::new(AtomicU8::new(level_rank(LoggingLevel::Info))),
            session_id: new_session_id(),
            conversation,
            shown: Arc::default(),
            lane: None,
            negotiated: Arc::default(),
            replies: None,
            first_list: Arc::default(),
            live: Arc::default(),
            initialized: Arc::default(),
            room,
            nudge: Arc::default(),
            tasks: Arc::default(),
        })
    }

    /// This front with its endpoint's tasks shared with a fleet's other
    /// hosts through `share` ([`TaskShare`]); before any session is made.
    pub fn with_task_share(mut self, share: Arc<dyn TaskShare>) -> McpFront {
        let endpoint = self.agent.clone().unwrap_or_default();
        self.tasks = Arc::new(Tasks::shared(share, &endpoint));
        self
    }

    /// This front with fast calls run in `lane` ([`super::lane`]): for
    /// `serve --stdio`, whose session is driven by the lane's thread.
    pub fn with_lane(mut self, lane: Arc<super::lane::CallLane>) -> McpFront {
        self.lane = Some(lane);
        self
    }

    /// This front with its calls' notifications written straight into
    /// `replies`, the output of the stdio transport serving it (see
    /// [`super::stdio::LineTransport::replies`]): they then reach the
    /// client, before the call's response, also after the input has ended.
    pub fn with_replies(mut self, replies: super::stdio::Replies) -> McpFront {
        self.replies = Some(replies);
        self
    }

    /// A fresh front for a new session of the same agent (its own log
    /// level and turns).
    pub fn session(&self) -> McpFront {
        McpFront {
            host: self.host.clone(),
            agent: self.agent.clone(),
            log_level: Arc::new(AtomicU8::new(level_rank(LoggingLevel::Info))),
            session_id: new_session_id(),
            // The agent was checked when the first front was made.
            // Never the operator's in its place, should the agent be gone.
            conversation: Arc::new(self.host.conversation_unchecked(self.agent.as_deref())),
            shown: Arc::default(),
            lane: self.lane.clone(),
            negotiated: Arc::default(),
            // A new session has a transport of its own.
            replies: None,
            first_list: Arc::default(),
            live: Arc::default(),
            initialized: Arc::default(),
            room: self.room.clone(),
            nudge: Arc::default(),
            tasks: self.tasks.clone(),
        }
    }

    /// Every live session of this front's endpoint.
    pub fn room(&self) -> &Arc<room::Room> {
        &self.room
    }

    /// The caller's session: over HTTP the `Mcp-Session-Id`, else this
    /// front's own id.
    pub(crate) fn session_of(&self, context: &RequestContext<RoleServer>) -> String {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| self.session_id.to_string(), str::to_string)
    }

    /// Waits, for a list request, until the host is ready (plugins
    /// compiled, upstreams connected or failed), at most
    /// `server.first_list_wait_ms` from this session's first list: a
    /// client that lists once sees every configured tool; what is ready
    /// later joins with `list_changed`.
    pub(crate) async fn await_first_list(&self) {
        let readiness = self.host.readiness();
        if readiness.is_ready() {
            return;
        }
        let deadline = *self.first_list.get_or_init(|| std::time::Instant::now() + readiness.first_list_wait());
        if !readiness.ready_by(deadline).await {
            tracing::debug!("a first list answered before every upstream was ready (server.first_list_wait_ms)");
        }
    }

    /// Waits, for a call of `name`, until a tool of that name is
    /// registered or the host is ready (nothing left loading or
    /// connecting), at most `server.first_list_wait_ms` from now: a call
    /// to a plugin still compiling waits for that compile, not for the
    /// others.
    pub(crate) async fn await_tool(&self, name: &str) {
        let readiness = self.host.readiness();
        let mut changes = self.host.registry().subscribe();
        let deadline = std::time::Instant::now() + readiness.first_list_wait();
        let registered = async {
            while !readiness.is_ready() && self.host.registry().snapshot().get(name).is_none() {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    _ = readiness.ready_by(deadline) => {}
                }
            }
        };
        if tokio::time::timeout_at(deadline.into(), registered).await.is_err() {
            tracing::debug!("a call answered before its tool was registered (server.first_list_wait_ms)");
        }
    }

    /// Starts a turn for `utterance` in this session (what a `tools/list`
    /// with `_meta["toolhost/utterance"]` does): the tier it works at, and why.
    pub fn begin_turn(&self, utterance: &str, cues: TurnCues) -> TurnTier {
        self.host.begin_turn(&self.conversation, utterance, cues)
    }

    /// The tier this session works at now, and why.
    pub fn turn_tier(&self) -> TurnTier {
        self.host.turn_tier(&self.conversation)
    }

    /// This session's id in the audit trail (stdio; over HTTP the
    /// transport's `Mcp-Session-Id` is recorded instead).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The agent this front serves (`None`: the operator).
    pub fn agent(&self) -> Option<&str> {
        self.agent.as_deref()
    }

    /// The names of the tools this session may see now, sorted.
    pub fn visible_names(&self) -> Vec<String> {
        let catalog = self.host.registry().snapshot();
        let mut names: Vec<String> = self
            .host
            .budget()
            .available_tools(&catalog, self.agent.as_deref(), self.tier())
            .unwrap_or_default()
            .iter()
            .map(|t| t.def.name.clone())
            .collect();
        names.sort_unstable();
        names
    }

    /// The tier this session works at now: a DM override, else its turn's
    /// selection, else the agent's ceiling (DEEP for the operator).
    fn tier(&self) -> Tier {
        self.turn_tier().tier
    }

    /// The tools this session may see, as MCP tool definitions.
    pub fn visible_tools(&self) -> Vec<Tool> {
        tools_at(&self.host, self.agent.as_deref(), self.tier())
    }

    /// The connected external servers this session may use beyond their
    /// tools (resources, templates, prompts, completions), in server-name
    /// order: every one for the operator; for an agent, those with at least
    /// one tool on its allow-list.
    fn upstreams(&self) -> Vec<Upstream> {
        self.upstreams_with(true)
    }

    /// [`McpFront::upstreams`]; `named: false` skips working out the names
    /// their prompts and resources are offered under.
    fn upstreams_with(&self, named: bool) -> Vec<Upstream> {
        let catalog = self.host.registry().snapshot();
        let allowed: Option<Vec<String>> =
            self.agent.as_deref().map(|a| self.host.budget().agent(a).map(|p| p.tools.clone()).unwrap_or_default());
        let allowed = |tools: &[crate::tool::ToolDef]| match &allowed {
            None => true,
            Some(list) => tools.iter().any(|t| list.contains(&t.name)),
        };
        if named {
            toolhost_mcp_wire::upstream::upstreams(&catalog, allowed)
        } else {
            toolhost_mcp_wire::upstream::upstreams_unnamed(&catalog, allowed)
        }
    }

    /// Spends one of this session's agent's tool calls on a request that
    /// reaches an external server (a resource read, a prompt, a completion):
    /// they cost the server as much as a call.
    fn spend_upstream_request(
        &self,
        context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<(), ErrorData> {
        let token =
            context.extensions.get::<http::request::Parts>().and_then(|p| p.extensions.get::<crate::http::TokenId>());
        self.host
            .spend_call(self.agent.as_deref(), token.map(|t| &*t.0))
            .map_err(|e| ErrorData::new(rmcp::model::ErrorCode(-32000), e.to_string(), Some(json!({"code": e.code()}))))
    }

    /// The deadline of a request to an external server without a
    /// `timeout_ms` of its own (the operator's ceiling), and the output cap.
    fn upstream_limits(&self) -> (Duration, usize) {
        let limits = self.host.runtime().limits();
        (limits.timeout_ceiling, limits.output_bytes)
    }

    /// The resources this session may read, as their servers listed them;
    /// a URI an earlier server (config order) offers too is listed as
    /// `<server>+<uri>` for the later one.
    pub fn visible_resources(&self) -> Vec<Resource> {
        self.upstreams()
            .iter()
            .flat_map(|u| {
                u.offer().resources.iter().map(move |r| {
                    let mut r = r.clone();
                    r.uri = u.offered_uri(&r.uri);
                    r
                })
            })
            .collect()
    }

    /// The resource templates this session may read through, as their
    /// servers listed them (one an earlier server has too, as
    /// `<server>+<template>`).
    pub fn visible_resource_templates(&self) -> Vec<ResourceTemplate> {
        self.upstreams()
            .iter()
            .flat_map(|u| {
                u.offer().templates.iter().map(move |t| {
                    let mut t = t.clone();
                    t.uri_template = u.offered_uri(&t.uri_template);
                    t
                })
            })
            .collect()
    }

    /// The prompts this session may get: under their own names, or
    /// `<server>_<prompt>` where an earlier server has the name.
    pub fn visible_prompts(&self) -> Vec<Prompt> {
        self.upstreams()
            .iter()
            .flat_map(|u| {
                u.prompts().map(|(exposed, p)| {
                    let mut p = p.clone();
                    p.name = exposed.to_string();
                    p
                })
            })
            .collect()
    }

    /// What changes when the resources (first) or prompts (second) this
    /// session may use change: the servers that offer some, and their
    /// listings' counters. A server offering none comes and goes unnoticed.
    fn offer_signature(&self) -> (Signature, Signature) {
        let (mut resources, mut prompts) = (Vec::new(), Vec::new());
        // Polled once a second per session: no names worked out.
        for u in self.upstreams_with(false) {
            let (r, p) = u.generations();
            let offer = u.offer();
            if !offer.resources.is_empty() || !offer.templates.is_empty() {
                resources.push((u.name().to_string(), r));
            }
            if !offer.prompts.is_empty() {
                prompts.push((u.name().to_string(), p));
            }
        }
        (resources, prompts)
    }

    /// Runs a call and shapes the MCP result. An unknown (or invisible) tool
    /// is a protocol error, as the MCP specification says; everything else,
    /// invalid input included, is a tool result the model can read.
    pub fn call(&self, name: &str, arguments: Value) -> Result<CallToolResult, ErrorData> {
        self.call_with_events(name, arguments, None)
    }

    /// [`McpFront::call`], with the plugin's log lines and progress reports
    /// sent to `events` while it runs.
    pub fn call_with_events(
        &self,
        name: &str,
        arguments: Value,
        events: Option<Arc<dyn Fn(PluginEvent) + Send + Sync>>,
    ) -> Result<CallToolResult, ErrorData> {
        let ctx = CallContext { events, session: Some(self.session_id.to_string()), ..CallContext::default() };
        self.call_in(name, arguments, ctx, Cost::Omitted)
    }

    /// Runs a call in `ctx` (its events, session and token), as this
    /// session's agent at its tier; `cost` says whether the result's
    /// `_meta.toolhost` reports what the call cost.
    fn call_in(&self, name: &str, arguments: Value, ctx: CallContext, cost: Cost) -> Result<CallToolResult, ErrorData> {
        // The tier the call runs at (a turn may change it meanwhile).
        let tier = (cost == Cost::Reported).then(|| self.tier());
        let started = std::time::Instant::now();
        // The request's span, under the client's trace context (`_meta`
        // or headers): what the handler put in `ctx.trace`.
        let span = crate::trace::start(crate::trace::Kind::Server, ctx.trace.as_ref(), || {
            (
                format!("tools/call {}", toolhost_core::audit::loggable_name(name)),
                vec![
                    crate::trace::attr("mcp.method.name", "tools/call"),
                    crate::trace::attr("gen_ai.tool.name", toolhost_core::audit::loggable_name(name).into_owned()),
                    crate::trace::attr("toolhost.agent", self.agent.clone().unwrap_or_else(|| "(operator)".into())),
                    crate::trace::attr("toolhost.token_id", ctx.token.clone().unwrap_or_else(|| "-".into())),
                    crate::trace::attr("mcp.session.id", ctx.session.clone().unwrap_or_else(|| "-".into())),
                ],
            )
        });
        let trace = span.clone().or_else(|| ctx.trace.clone());
        let ctx = CallContext { agent: self.agent.clone(), trace, ..ctx };
        let result = self.host.call_in_turn(&self.conversation, name, &arguments, &ctx);
        crate::trace::end(span.as_ref(), result.as_ref().err().map(CallError::kind));
        let cost = tier.map(|tier| (tier, started.elapsed().as_secs_f64() * 1e3));
        if let Err(e @ CallError::UnknownTool(_)) = &result {
            return Err(ErrorData::invalid_params(e.to_string(), Some(json!({"code": e.code()}))));
        }
        Ok(to_result(result, cost))
    }
}

/// The notification a plugin's report makes for this session, if any: a
/// progress report only for a call that asked for progress, a log line
/// only at or above the session's level.
fn report(
    event: PluginEvent,
    progress_token: Option<&ProgressToken>,
    min_level: u8,
    logger: &str,
) -> Option<ServerNotification> {
    match event {
        PluginEvent::Progress { progress, total, message } => {
            let mut p = ProgressNotificationParam::new(progress_token?.clone(), progress);
            p.total = total;
            p.message = message;
            Some(ServerNotification::ProgressNotification(ProgressNotification::new(p)))
        }
        PluginEvent::Log { level, message } => {
            let level = mcp_level(level);
            (level_rank(level) >= min_level).then(|| {
                let mut p = LoggingMessageNotificationParam::new(level, Value::String(message));
                p.logger = Some(logger.to_string());
                ServerNotification::LoggingMessageNotification(LoggingMessageNotification::new(p))
            })
        }
    }
}

/// The tools `agent` (`None`: the operator) may see at `tier`, as MCP tool
/// definitions with their `_meta.toolhost` figures (this agent's own).
pub fn tools_at(host: &Pipeline, agent: Option<&str>, tier: Tier) -> Vec<Tool> {
    let catalog = host.registry().snapshot();
    let tools = host.budget().available_tools(&catalog, agent, tier).unwrap_or_default();
    tools
        .iter()
        .map(|t| {
            let schema = match &t.def.input_schema {
                Value::Object(o) => o.clone(),
                _ => serde_json::Map::new(),
            };
            let mut tool = Tool::new(t.def.name.clone(), t.def.description.clone(), Arc::new(schema));
            tool.title = t.def.title.clone();
            tool.output_schema = match &t.def.output_schema {
                Some(Value::Object(o)) => Some(Arc::new(o.clone())),
                _ => None,
            };
            tool.annotations = t.def.annotations.as_ref().map(|a| {
                let mut m = rmcp::model::ToolAnnotations::new();
                m.title = a.title.clone();
                m.read_only_hint = a.read_only_hint;
                m.destructive_hint = a.destructive_hint;
                m.idempotent_hint = a.idempotent_hint;
                m.open_world_hint = a.open_world_hint;
                m
            });
            // This agent's view: its own calls' figures, not everyone's.
            let status = host.budget().status_for(&t.def, agent);
            let measured = status.real.or(status.probes);
            let mut m = json!({"toolhost": {
                "estimated_duration_ms": t.def.meta.estimated_duration_ms,
                "max_duration_ms": t.def.meta.max_duration_ms,
                "idempotent": t.def.meta.idempotent,
                "cacheable_seconds": t.def.meta.cacheable_seconds,
                "tier": status.tier.map(Tier::as_str),
                "provider": t.provider.name(),
                // Real calls' figures, else calibration probes' (ms, to 0.01); null until measured.
                "measured_p50_ms": measured.map(|m| (m.p50.as_secs_f64() * 1e5).round() / 100.0),
                "measured_p99_ms": measured.map(|m| (m.p99.as_secs_f64() * 1e5).round() / 100.0),
            }});
            // Whether it runs as a task when the client asks ([`tasks`]).
            m["toolhost"]["task"] = json!(tasks::runs_as_task(host, &t.def, agent, status.tier));
            if let Some(d) = host.budget().long_deadline(&t.def.name, agent) {
                m["toolhost"]["long_timeout_ms"] = json!(d.as_millis() as u64);
            }
            tool.meta = Some(MetaObject(m.as_object().cloned().unwrap_or_default()));
            tool
        })
        .collect()
}

/// The turn a `tools/list` starts, from its `params._meta`: the utterance
/// and the cues; `None` without an utterance. Keys of the wrong type are
/// invalid params, never ignored.
fn turn_request(meta: &serde_json::Map<String, Value>) -> Result<Option<(String, TurnCues)>, ErrorData> {
    let bad = |key: &str, want: &str| {
        ErrorData::invalid_params(format!("_meta[{key:?}] must be {want}"), Some(json!({"code": "invalid_input"})))
    };
    if let Some(k) = meta.keys().find(|k| {
        k.starts_with("toolhost/") && ![META_UTTERANCE, META_QUEUE_DEPTH, META_FIRST_TURN].contains(&k.as_str())
    }) {
        return Err(bad(
            k,
            &format!("one of the keys toolhost reads ({META_UTTERANCE}, {META_QUEUE_DEPTH}, {META_FIRST_TURN})"),
        ));
    }
    let utterance = match meta.get(META_UTTERANCE) {
        None => None,
        Some(Value::String(u)) if u.len() <= MAX_UTTERANCE_BYTES => Some(u.clone()),
        Some(Value::String(_)) => {
            return Err(bad(META_UTTERANCE, &format!("a string of at most {MAX_UTTERANCE_BYTES} bytes")));
        }
        Some(_) => return Err(bad(META_UTTERANCE, "a string")),
    };
    let queue_depth = match meta.get(META_QUEUE_DEPTH) {
        None => 0,
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad(META_QUEUE_DEPTH, "a non-negative integer"))?,
    };
    let first_turn = match meta.get(META_FIRST_TURN) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad(META_FIRST_TURN, "true or false")),
    };
    if utterance.is_none() && (meta.contains_key(META_QUEUE_DEPTH) || meta.contains_key(META_FIRST_TURN)) {
        return Err(bad(META_UTTERANCE, &format!("given with {META_QUEUE_DEPTH} and {META_FIRST_TURN}")));
    }
    Ok(utterance.map(|u| (u, TurnCues { queue_depth, first_turn })))
}

/// Each server a session may use, with a listing's change counter.
type Signature = Vec<(String, u64)>;

/// The server a read of `uri` goes to: the first that listed it, else the
/// first with a template it expands.
/// The server that answers for `uri`, and the URI to send it: for
/// `<server>+<uri>`, that server (when it offers the URI); otherwise the
/// first server (config order) this session may use that lists it, else
/// the first with a template it expands. A later server never takes over a
/// URI an earlier one offers.
fn route_resource<'a>(upstreams: &'a [Upstream], uri: &str) -> Result<(&'a Upstream, String), ErrorData> {
    for u in upstreams {
        if let Some(rest) = uri.strip_prefix(u.name()).and_then(|r| r.strip_prefix('+'))
            && (u.lists(rest) || u.expands_to(rest))
        {
            return Ok((u, rest.to_string()));
        }
    }
    let owner = upstreams
        .iter()
        .find(|u| u.lists(uri) && !u.is_shadowed(uri))
        .or_else(|| upstreams.iter().find(|u| u.lists(uri)))
        .or_else(|| upstreams.iter().find(|u| u.expands_to(uri)));
    match owner {
        Some(u) => Ok((u, uri.to_string())),
        None => Err(ErrorData::resource_not_found(
            format!("no resource {:?}: no server this session may use offers it", crate::tool::log_safe(uri)),
            Some(json!({"code": "not_found", "uri": uri})),
        )),
    }
}

/// The one server among `candidates`: none is "not found", several are
/// refused rather than guessed between, so no server can take over what
/// another offers by listing it too.
fn only_one<'a>(candidates: Vec<&'a Upstream>, what: &str, subject: &str) -> Result<&'a Upstream, ErrorData> {
    match candidates.as_slice() {
        [one] => Ok(one),
        [] => Err(ErrorData::resource_not_found(
            format!("no {what} {:?}: no server this session may use offers it", crate::tool::log_safe(subject)),
            Some(json!({"code": "not_found", "uri": subject})),
        )),
        several => Err(ErrorData::invalid_params(
            format!(
                "the {what} {:?} is offered by several servers ({}); refused rather than guessed",
                crate::tool::log_safe(subject),
                several.iter().map(|u| u.name()).collect::<Vec<_>>().join(", ")
            ),
            Some(json!({"code": "forbidden"})),
        )),
    }
}

/// The server offering the prompt `exposed`, and its own name for it.
fn route_prompt<'a>(upstreams: &'a [Upstream], exposed: &str) -> Result<(&'a Upstream, &'a str), ErrorData> {
    let candidates: Vec<&Upstream> = upstreams.iter().filter(|u| u.prompt(exposed).is_some()).collect();
    let server = only_one(candidates, "prompt", exposed).map_err(|e| {
        if e.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
            ErrorData::invalid_params(
                format!("unknown prompt {:?}", crate::tool::log_safe(exposed)),
                Some(json!({"code": "not_found"})),
            )
        } else {
            e
        }
    })?;
    let remote = server.prompt(exposed).ok_or_else(|| ErrorData::internal_error("the prompt went away", None))?;
    Ok((server, remote))
}

fn meta(v: Value) -> MetaObject {
    let mut m = JsonObject::new();
    m.insert("toolhost".into(), v);
    MetaObject(m)
}

/// The `params._meta` key by which a `tools/call` asks for its cost in the
/// result's `_meta.toolhost` (`duration_ms`, `tier`, and `fuel_used` for a
/// call that ran): `"toolhost/cost": true`.
pub const COST_META_KEY: &str = "toolhost/cost";

/// Whether a call's result reports what the call cost (see
/// [`COST_META_KEY`]). Every result says whether it was `cached`, and every
/// error its `code` and `kind`; the rest is decoded by every client on
/// every call, so it is sent only to callers that ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cost {
    Omitted,
    Reported,
}

impl Cost {
    /// What a request's `params._meta` asks for.
    pub(crate) fn asked(meta: Option<&JsonObject>) -> Cost {
        match meta.and_then(|m| m.get(COST_META_KEY)) {
            Some(Value::Bool(true)) => Cost::Reported,
            _ => Cost::Omitted,
        }
    }
}

/// The call's result as MCP shapes it; `cost`: its tier and duration, when
/// the caller asked for them.
fn to_result(result: Result<ToolOutput, CallError>, cost: Option<(Tier, f64)>) -> CallToolResult {
    let (mut r, mut m) = match result {
        Ok(out) => {
            let structured = match out.structured {
                Some(s) => Some(s),
                None => super::content::structured(&out.content),
            };
            let content = super::content::to_mcp(&out.content);
            let mut r = CallToolResult::success(content);
            r.structured_content = structured;
            let mut m = JsonObject::new();
            m.insert("cached".into(), out.stats.cached.into());
            if cost.is_some() {
                m.insert("fuel_used".into(), out.stats.fuel_used.into());
            }
            (r, m)
        }
        Err(e) => {
            let r = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
            let mut m = JsonObject::new();
            m.insert("code".into(), e.code().into());
            m.insert("kind".into(), e.kind().into());
            (r, m)
        }
    };
    if let Some((tier, duration_ms)) = cost {
        m.insert("duration_ms".into(), duration_ms.into());
        m.insert("tier".into(), tier.as_str().into());
    }
    r.meta = Some(meta(Value::Object(m)));
    r
}

mod ask;
mod direct;
mod handler;
pub mod room;
mod tasks;
pub use tasks::{ShareError, TaskShare, Tasks, declare_legacy_tasks, is_legacy_task, with_legacy_declarations};

pub use direct::DirectFront;
