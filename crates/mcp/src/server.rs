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

use super::client::Upstream;
use super::content::Dialect;
use crate::Host;
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

/// How often a session re-checks its visible tool set for changes that no
/// registry event announces (measured latency, health demotion, an expiring
/// DM override).
const VISIBILITY_POLL: Duration = Duration::from_secs(1);

/// One MCP session's view of the host: everything it does is on behalf of
/// `agent` (the operator when `None`).
#[derive(Clone, Debug)]
pub struct McpFront {
    host: Arc<Host>,
    agent: Option<String>,
    /// Lowest log level forwarded to this session (a [`level_rank`]).
    log_level: Arc<AtomicU8>,
    /// This session's id in the audit trail when the transport has none of
    /// its own (stdio); over HTTP the `Mcp-Session-Id` is used.
    session_id: Arc<str>,
    /// This session's turns: its tier selector and the current turn.
    conversation: Arc<Conversation>,
    /// The tool names this session was last shown (listed or announced):
    /// a change from these is announced with `list_changed`.
    shown: Arc<std::sync::Mutex<Vec<String>>>,
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
    pub fn new(host: Arc<Host>, agent: Option<String>) -> Result<McpFront, crate::budget::BudgetError> {
        let conversation = Arc::new(host.conversation(agent.as_deref())?);
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
        })
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
        let catalog = self.host.registry().snapshot();
        let tools =
            self.host.budget().available_tools(&catalog, self.agent.as_deref(), self.tier()).unwrap_or_default();
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
                let status = self.host.budget().status(&t.def);
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
                if let Some(d) = self.host.budget().long_deadline(&t.def.name, self.agent.as_deref()) {
                    m["toolhost"]["long_timeout_ms"] = json!(d.as_millis() as u64);
                }
                tool.meta = Some(MetaObject(m.as_object().cloned().unwrap_or_default()));
                tool
            })
            .collect()
    }

    /// The connected external servers this session may use beyond their
    /// tools (resources, templates, prompts, completions), in server-name
    /// order: every one for the operator; for an agent, those with at least
    /// one tool on its allow-list.
    fn upstreams(&self) -> Vec<Upstream> {
        let catalog = self.host.registry().snapshot();
        let allowed: Option<Vec<String>> =
            self.agent.as_deref().map(|a| self.host.budget().agent(a).map(|p| p.tools.clone()).unwrap_or_default());
        super::client::upstreams(&catalog, |tools| match &allowed {
            None => true,
            Some(list) => tools.iter().any(|t| list.contains(&t.name)),
        })
    }

    /// Spends one of this session's agent's tool calls on a request that
    /// reaches an external server (a resource read, a prompt, a completion):
    /// they cost the server as much as a call.
    fn spend_upstream_request(&self) -> Result<(), ErrorData> {
        self.host
            .spend_call(self.agent.as_deref())
            .map_err(|e| ErrorData::new(rmcp::model::ErrorCode(-32000), e.to_string(), Some(json!({"code": e.code()}))))
    }

    /// The deadline of a request to an external server without a
    /// `timeout_ms` of its own (the operator's ceiling), and the output cap.
    fn upstream_limits(&self) -> (Duration, usize) {
        let limits = self.host.runtime().limits();
        (limits.timeout_ceiling, limits.output_bytes)
    }

    /// The resources this session may read, as their servers listed them
    /// (a URI listed by several servers once, from the first by name).
    pub fn visible_resources(&self) -> Vec<Resource> {
        let mut seen = std::collections::HashSet::new();
        self.upstreams()
            .iter()
            .flat_map(|u| u.offer().resources.iter())
            .filter(|r| seen.insert(r.uri.clone()))
            .cloned()
            .collect()
    }

    /// The resource templates this session may read through, as their
    /// servers listed them.
    pub fn visible_resource_templates(&self) -> Vec<ResourceTemplate> {
        let mut seen = std::collections::HashSet::new();
        self.upstreams()
            .iter()
            .flat_map(|u| u.offer().templates.iter())
            .filter(|t| seen.insert(t.uri_template.clone()))
            .cloned()
            .collect()
    }

    /// The prompts this session may get, named `<server>_<prompt>`.
    pub fn visible_prompts(&self) -> Vec<Prompt> {
        let mut seen = std::collections::HashSet::new();
        self.upstreams()
            .iter()
            .flat_map(|u| u.offer().prompts.iter())
            .filter(|(exposed, _)| seen.insert(exposed.clone()))
            .map(|(exposed, p)| {
                let mut p = p.clone();
                p.name = exposed.clone();
                p
            })
            .collect()
    }

    /// What changes when the resources (first) or prompts (second) this
    /// session may use change: the servers that offer some, and their
    /// listings' counters. A server offering none comes and goes unnoticed.
    fn offer_signature(&self) -> (Signature, Signature) {
        let (mut resources, mut prompts) = (Vec::new(), Vec::new());
        for u in self.upstreams() {
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
        self.call_in(name, arguments, ctx)
    }

    /// Runs a call in `ctx` (its events, session and token), as this
    /// session's agent at its tier.
    fn call_in(&self, name: &str, arguments: Value, ctx: CallContext) -> Result<CallToolResult, ErrorData> {
        let tier = self.tier();
        let started = std::time::Instant::now();
        let ctx = CallContext { agent: self.agent.clone(), ..ctx };
        let result = self.host.call_in_turn(&self.conversation, name, &arguments, &ctx);
        let duration_ms = started.elapsed().as_secs_f64() * 1e3;
        if let Err(e @ CallError::UnknownTool(_)) = &result {
            return Err(ErrorData::invalid_params(e.to_string(), Some(json!({"code": e.code()}))));
        }
        Ok(to_result(result, tier, duration_ms))
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

/// `serve --stdio`'s calls taken around rmcp's service
/// ([`super::stdio::DirectCalls`]): a `tools/call` the session's lane
/// admits is queued there straight from the transport, and answered from
/// the lane into the transport's output, the plugin's reports first. It is
/// the call `McpFront::call_tool` makes (same checks, audit, errors, and
/// the result shaped as rmcp shapes it for the agreed protocol version)
/// without the task, request context, cancellation token and channels
/// rmcp's service spends per request.
///
/// Left to rmcp (and `call_tool`): every call before the session is
/// initialized (and a session without `initialize`, which never is); a
/// call whose `_meta` carries protocol keys (`io.modelcontextprotocol/…`:
/// rmcp checks them); a call whose id is already in flight here (the
/// stdio transport refuses such a request first; this stays as a guard); and
/// whatever the lane does not admit. A plugin's reports are held while
/// its call runs in the lane (the session is not running then) and sent
/// as they come while it runs on the pool (a queued call sent there at its
/// turn), always before the response.
#[derive(Debug)]
pub struct DirectFront {
    front: McpFront,
    pending: Pending,
    /// Calls taken so far.
    taken: std::sync::atomic::AtomicU64,
}

impl DirectFront {
    /// Direct calls for `front`'s session (which must have a lane to take any).
    pub fn new(front: McpFront) -> DirectFront {
        DirectFront { front, pending: Arc::default(), taken: Default::default() }
    }

    /// How many calls were taken around rmcp's service.
    pub fn calls_taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}

/// Direct calls taken and not answered yet, by request id: a cancelled one
/// is flagged (it leaves the lane for the pool and is not answered).
type Pending = Arc<std::sync::Mutex<std::collections::HashMap<RequestId, Arc<std::sync::atomic::AtomicBool>>>>;

/// A direct call's plugin reports: held while the call runs in the lane,
/// on the session's own thread (nothing is written then); sent as they
/// come from any other thread (the pool).
struct Reports {
    /// The thread that drives the session (and runs its lane calls).
    lane_thread: std::thread::ThreadId,
    held: std::sync::Mutex<Vec<PluginEvent>>,
    replies: super::stdio::Replies,
    progress_token: Option<ProgressToken>,
    /// The session's log level, read when a report goes out (a
    /// `logging/setLevel` read just before the call has been handled by then).
    log_level: Arc<AtomicU8>,
    tool: String,
    /// A cancelled call's reports go nowhere (nor does its response).
    cancelled: Arc<std::sync::atomic::AtomicBool>,
}

impl Reports {
    fn take(&self, event: PluginEvent) {
        if std::thread::current().id() == self.lane_thread {
            self.held.lock().unwrap_or_else(|p| p.into_inner()).push(event);
        } else if !self.cancelled.load(Ordering::Acquire)
            && let Some(n) = self.notification(event)
        {
            self.replies.send(&[n]);
        }
    }

    fn notification(&self, event: PluginEvent) -> Option<ServerJsonRpcMessage> {
        let min_level = self.log_level.load(Ordering::Relaxed);
        report(event, self.progress_token.as_ref(), min_level, &self.tool).map(ServerJsonRpcMessage::notification)
    }

    /// The held reports, as notifications.
    fn held(&self) -> Vec<ServerJsonRpcMessage> {
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()));
        held.into_iter().filter_map(|e| self.notification(e)).collect()
    }
}

/// Where a direct call's result goes: the transport's output.
struct DirectAnswer {
    owed: super::stdio::Owed,
    id: RequestId,
    pending: Pending,
    /// Its reports, and its cancelled flag (the one in `pending`).
    reports: Arc<Reports>,
    dialect: Dialect,
    /// The agreed protocol version is 2026-07-28 or later.
    current: bool,
}

impl DirectAnswer {
    /// Frees its id in `pending` (if the entry there is still this call's).
    fn release(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.get(&self.id).is_some_and(|c| Arc::ptr_eq(c, &self.reports.cancelled)) {
            pending.remove(&self.id);
        }
    }
}

impl Drop for DirectAnswer {
    fn drop(&mut self) {
        self.release();
    }
}

impl super::lane::Answer<Result<CallToolResult, ErrorData>> for DirectAnswer {
    fn wanted(&self) -> bool {
        !self.reports.cancelled.load(Ordering::Acquire)
    }

    fn give(self, result: Option<Result<CallToolResult, ErrorData>>) {
        if !self.wanted() {
            // Cancelled: no response is expected (the call itself ran, and
            // was audited).
            return;
        }
        let mut messages = self.reports.held();
        let id = self.id.clone();
        tracing::debug!(%id, tool = self.reports.tool, "answering a direct call");
        messages.push(match result {
            Some(Ok(mut r)) => {
                super::content::shape_result(&mut r, self.dialect);
                let mut result = ServerResult::from(CallToolResponse::from(r));
                // What rmcp's request handler does to every result.
                if self.current {
                    result.fill_missing_cache_hints();
                } else {
                    result.strip_result_type_for_legacy_peer();
                    result.strip_non_object_output_for_legacy_peer();
                }
                ServerJsonRpcMessage::response(result, id)
            }
            Some(Err(mut e)) => {
                // rmcp's handler's one rewrite of errors.
                if self.current && e.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
                    e.code = rmcp::model::ErrorCode::INVALID_PARAMS;
                }
                ServerJsonRpcMessage::error(e, Some(id))
            }
            None => ServerJsonRpcMessage::error(
                ErrorData::internal_error("call task failed: the call panicked", None),
                Some(id),
            ),
        });
        // The id is free before the client can read the answer (and reuse
        // it); the answer is settled when `self` drops, after its messages
        // are queued.
        self.release();
        self.owed.send(&messages);
    }
}

impl super::stdio::DirectCalls for DirectFront {
    fn take(
        &self,
        request: JsonRpcRequest<CallToolRequest>,
        replies: &super::stdio::Replies,
    ) -> Option<JsonRpcRequest<CallToolRequest>> {
        let front = &self.front;
        let (Some(lane), Some(negotiated)) = (&front.lane, front.negotiated.get()) else { return Some(request) };
        // Where rmcp's decoder leaves `params._meta` (its request context's
        // `meta`): protocol keys go to rmcp, which checks them.
        if let Some(meta) = request.request.extensions.get::<RequestMetaObject>()
            && meta.0.0.keys().any(|k| k.starts_with("io.modelcontextprotocol/"))
        {
            return Some(request);
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.contains_key(&request.id) {
            return Some(request);
        }
        // After the id check: a call given back to rmcp holds no place.
        let Some(ticket) = lane.reserve(&front.host, &request.request.params.name) else { return Some(request) };
        let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        pending.insert(request.id.clone(), cancelled.clone());
        drop(pending);
        self.queue(ticket, request, cancelled, negotiated, replies);
        None
    }

    fn cancel(&self, id: &RequestId) {
        if let Some(flag) = self.pending.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
            flag.store(true, Ordering::Release);
        }
    }

    fn in_flight(&self, id: &RequestId) -> bool {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).contains_key(id)
    }
}

impl DirectFront {
    /// Queues a call taken (its id now pending) in its place in the lane.
    fn queue(
        &self,
        ticket: super::lane::Ticket,
        request: JsonRpcRequest<CallToolRequest>,
        cancelled: Arc<std::sync::atomic::AtomicBool>,
        negotiated: &ProtocolVersion,
        replies: &super::stdio::Replies,
    ) {
        let front = &self.front;
        let JsonRpcRequest { id, request, .. } = request;
        let progress_token =
            request.extensions.get::<RequestMetaObject>().and_then(RequestMetaObject::get_progress_token);
        let params = request.params;
        let tool = params.name.to_string();
        tracing::debug!(%id, tool, "a direct call");
        let args = Value::Object(params.arguments.unwrap_or_default());
        let reports = Arc::new(Reports {
            // `take` runs in the session's runtime, on the thread driving it.
            lane_thread: std::thread::current().id(),
            held: std::sync::Mutex::default(),
            replies: replies.clone(),
            progress_token,
            log_level: front.log_level.clone(),
            tool: tool.clone(),
            cancelled,
        });
        let sink = reports.clone();
        let events: Arc<dyn Fn(PluginEvent) + Send + Sync> = Arc::new(move |e| sink.take(e));
        let ctx =
            CallContext { events: Some(events), session: Some(front.session_id.to_string()), ..CallContext::default() };
        let answer = DirectAnswer {
            owed: replies.owe(),
            id,
            pending: self.pending.clone(),
            reports,
            dialect: Dialect::of(Some(negotiated)),
            current: negotiated.as_str() >= ProtocolVersion::V_2026_07_28.as_str(),
        };
        let front = front.clone();
        ticket.queue(move || front.call_in(&tool, args, ctx), answer);
        self.taken.fetch_add(1, Ordering::Relaxed);
    }
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
fn route_resource<'a>(upstreams: &'a [Upstream], uri: &str) -> Result<&'a Upstream, ErrorData> {
    let listing: Vec<&Upstream> = upstreams.iter().filter(|u| u.lists(uri)).collect();
    let candidates =
        if listing.is_empty() { upstreams.iter().filter(|u| u.expands_to(uri)).collect() } else { listing };
    only_one(candidates, "resource", uri)
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

fn to_result(result: Result<ToolOutput, CallError>, tier: Tier, duration_ms: f64) -> CallToolResult {
    match result {
        Ok(out) => {
            let structured = match out.structured {
                Some(s) => Some(s),
                None => super::content::structured(&out.content),
            };
            let content = super::content::to_mcp(&out.content);
            let mut r = CallToolResult::success(content);
            r.structured_content = structured;
            r.meta = Some(meta(json!({
                "duration_ms": duration_ms,
                "tier": tier.as_str(),
                "fuel_used": out.stats.fuel_used,
                "cached": out.stats.cached,
            })));
            r
        }
        Err(e) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
            r.meta = Some(meta(json!({
                "code": e.code(),
                "kind": e.kind(),
                "duration_ms": duration_ms,
                "tier": tier.as_str(),
            })));
            r
        }
    }
}

impl ServerHandler for McpFront {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities =
            ServerCapabilities::builder().enable_tools().enable_tool_list_changed().enable_logging().build();
        let mut resources = ResourcesCapability::default();
        resources.list_changed = Some(true);
        capabilities.resources = Some(resources);
        let mut prompts = PromptsCapability::default();
        prompts.list_changed = Some(true);
        capabilities.prompts = Some(prompts);
        capabilities.completions = Some(JsonObject::new());
        let mut info = ServerConfig::new(capabilities);
        info.server_info.name = "toolhost".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        let profile = self.agent.as_deref().and_then(|a| self.host.budget().agent(a).ok());
        info.instructions = Some(match profile.and_then(|p| p.instructions.clone()) {
            Some(i) => i,
            None => match &self.agent {
                Some(a) => format!(
                    "Tools for {a}. Every tool answers within its latency tier ({}); failures come back as results with isError so you can correct the call.",
                    self.tier()
                ),
                None => "toolhost: sandboxed WebAssembly tools (dice, D&D 5e SRD rules, ...). Failures come back as results with isError so you can correct the call.".into(),
            },
        });
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let turn = match turn_request(&context.meta.0.0)? {
            Some((utterance, cues)) => self.begin_turn(&utterance, cues),
            None => self.turn_tier(),
        };
        let mut tools = self.visible_tools();
        *self.shown.lock().unwrap_or_else(|p| p.into_inner()) = tools.iter().map(|t| t.name.to_string()).collect();
        super::content::shape_tools(&mut tools, Dialect::of(context.protocol_version().as_ref()));
        let mut result = ListToolsResult::with_all_items(tools);
        result.meta = Some(meta(json!({"tier": turn.tier.as_str(), "reason": turn.reason, "turn": turn.turn})));
        Ok(result)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(self.visible_resources()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(self.visible_resource_templates()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        if uri.len() > super::client::MAX_URI_BYTES {
            return Err(ErrorData::invalid_params(
                format!("a resource URI of {} bytes (at most {})", uri.len(), super::client::MAX_URI_BYTES),
                None,
            ));
        }
        self.spend_upstream_request()?;
        let upstreams = self.upstreams();
        let server = route_resource(&upstreams, &uri)?;
        let (timeout, cap) = self.upstream_limits();
        Ok(ReadResourceResponse::Complete(server.read(&uri, timeout, cap).await?))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(self.visible_prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.spend_upstream_request()?;
        let upstreams = self.upstreams();
        let (server, remote) = route_prompt(&upstreams, &request.name)?;
        let (timeout, cap) = self.upstream_limits();
        let mut result = server.get_prompt(remote, request.arguments, timeout, cap).await?;
        super::content::shape_prompt(&mut result, Dialect::of(context.protocol_version().as_ref()));
        Ok(GetPromptResponse::Complete(result))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.spend_upstream_request()?;
        let upstreams = self.upstreams();
        let mut params = request;
        params.meta = None;
        let server = match &params.r#ref {
            Reference::Prompt(p) => {
                let (server, remote) = route_prompt(&upstreams, &p.name)?;
                let remote = PromptReference::new(remote);
                params.r#ref = Reference::Prompt(remote);
                server
            }
            Reference::Resource(r) => {
                let owners: Vec<&Upstream> = upstreams.iter().filter(|u| u.has_template(&r.uri)).collect();
                if owners.is_empty() {
                    route_resource(&upstreams, &r.uri)?
                } else {
                    only_one(owners, "resource template", &r.uri)?
                }
            }
            _ => return Err(ErrorData::invalid_params("unknown kind of completion reference", None)),
        };
        let (timeout, cap) = self.upstream_limits();
        server.complete(params, timeout, cap).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let front = self.clone();
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());

        // The plugin reports from a blocking thread; a task forwards its
        // reports to the client in order, and is drained before the result
        // goes out, so every notification precedes the response.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PluginEvent>();
        let progress_token = context.meta.get_progress_token();
        let peer = context.peer.clone();
        let min_level = self.log_level.load(Ordering::Relaxed);
        let logger = name.clone();
        let replies = self.replies.clone();
        let forward = async |event: PluginEvent| {
            let Some(n) = report(event, progress_token.as_ref(), min_level, &logger) else { return };
            match &replies {
                // Queued in the output now: the response, sent by rmcp once
                // this returns, comes after it.
                Some(replies) => {
                    replies.send(&[ServerJsonRpcMessage::notification(n)]);
                }
                None => {
                    let _ = peer.send_notification(n).await;
                }
            }
        };
        let sink: Arc<dyn Fn(PluginEvent) + Send + Sync> = Arc::new(move |e| {
            let _ = tx.send(e);
        });
        // The reports' channel closes here, after the result, never when the
        // call drops its context: closing it from a lane call (outside the
        // runtime) would wake this task through the runtime's eventfd.
        let _reports = sink.clone();
        // Wasm calls are synchronous and CPU-bound: they never run on an
        // async worker. This task forwards the plugin's reports while a pool
        // call runs (no extra task per call) and drains the rest before the
        // result goes out, so every notification precedes the response.
        // Over HTTP, rmcp hands the handler the request's parts: the
        // transport's session id and the token's audit id come from there.
        let parts = context.extensions.get::<http::request::Parts>();
        let session = parts
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| self.session_id.to_string(), str::to_string);
        let token = parts.and_then(|p| p.extensions.get::<super::http::TokenId>()).map(|t| t.0.to_string());
        let ctx = CallContext { events: Some(sink), session: Some(session), token, ..CallContext::default() };
        // Measured fast on the stdio session: on the thread driving it, no
        // hop ([`super::lane`]). Otherwise on the blocking pool.
        let tool = name.clone();
        let run = move || front.call_in(&tool, args, ctx);
        let run = match &self.lane {
            Some(lane) => lane.try_run(&self.host, &name, run),
            None => Err(run),
        };
        type Pending =
            std::pin::Pin<Box<dyn Future<Output = Result<Result<CallToolResult, ErrorData>, String>> + Send>>;
        let mut call: Pending = match run {
            Ok(answer) => Box::pin(async move { answer.await.map_err(|_| "the call panicked".to_string()) }),
            Err(run) => {
                let lane = self.lane.clone();
                let tool = name.clone();
                let task = tokio::task::spawn_blocking(move || {
                    // Beside a lane, the session's runtime is driven only
                    // between lane calls: a pool call's blocking host
                    // functions use the lane's runtime (the host's main one).
                    let _calls = lane.as_ref().map(|l| l.calls().enter());
                    let started = std::time::Instant::now();
                    let result = run();
                    if let Some(lane) = lane {
                        lane.record(&tool, started.elapsed());
                    }
                    result
                });
                Box::pin(async move { task.await.map_err(|e| e.to_string()) })
            }
        };
        let result = loop {
            tokio::select! {
                r = &mut call => break r.map_err(|e| ErrorData::internal_error(format!("call task failed: {e}"), None))?,
                // Never closed while `_reports` is held.
                Some(e) = rx.recv() => forward(e).await,
                () = context.ct.cancelled() => {
                    // The client gave up (notifications/cancelled): no response is
                    // expected. The call itself ends at its deadline.
                    return Err(ErrorData::internal_error("request cancelled by the client", None));
                }
            }
        };
        while let Ok(e) = rx.try_recv() {
            forward(e).await;
        }
        let dialect = Dialect::of(context.protocol_version().as_ref());
        result.map(|mut r| {
            super::content::shape_result(&mut r, dialect);
            r.into()
        })
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.store(level_rank(request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(info) = context.peer.peer_info() {
            let _ = self.negotiated.set(info.protocol_version.clone());
        }
        let front = self.clone();
        let peer = context.peer;
        let mut changes = self.host.registry().subscribe();
        tokio::spawn(async move {
            *front.shown.lock().unwrap_or_else(|p| p.into_inner()) = front.visible_names();
            let (mut last_resources, mut last_prompts) = front.offer_signature();
            let mut poll = tokio::time::interval(VISIBILITY_POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    _ = poll.tick() => {}
                }
                if peer.is_transport_closed() {
                    break;
                }
                let now = front.visible_names();
                let changed = {
                    let mut shown = front.shown.lock().unwrap_or_else(|p| p.into_inner());
                    let changed = *shown != now;
                    *shown = now;
                    changed
                };
                if changed {
                    tracing::debug!(agent = ?front.agent, "visible tools changed");
                    if peer.notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
                let (resources, prompts) = front.offer_signature();
                if resources != last_resources {
                    tracing::debug!(agent = ?front.agent, "visible resources changed");
                    last_resources = resources;
                    if peer.notify_resource_list_changed().await.is_err() {
                        break;
                    }
                }
                if prompts != last_prompts {
                    tracing::debug!(agent = ?front.agent, "visible prompts changed");
                    last_prompts = prompts;
                    if peer.notify_prompt_list_changed().await.is_err() {
                        break;
                    }
                }
            }
        });
    }
}
