//! The speech-to-speech (S2S) bridge: a voice engine's native function
//! calling, served from the host's tools for one agent.
//!
//! Speech-to-speech engines (the OpenAI Realtime API, Gemini Live) call
//! functions the client declared on the session, and know nothing of MCP.
//! A [`Bridge`] is one engine session's view of the host, on behalf of one
//! agent, in one wire [`Format`]:
//!
//! - **Declarations** ([`Bridge::declarations`], [`Bridge::declare_event`]):
//!   the tools the agent may see at its current tier, as the engine's
//!   function declarations: OpenAI Realtime `session.update` with
//!   `session.tools: [{"type": "function", "name", "description",
//!   "parameters"}]`; Gemini Live `setup.tools: [{"functionDeclarations":
//!   [{"name", "description", "parameters"}]}]`.
//! - **Turns** ([`Bridge::update_tier`]): each utterance starts a turn of
//!   the bridge's [`Conversation`] (the seed's tier selector, capped at the
//!   agent's ceiling; a DM override wins), and the bridge hands back new
//!   declarations only when the visible set changed, so the engine
//!   re-declares its tools. Gemini Live fixes its tools at `setup`: the
//!   engine applies a change by resuming the session with the new setup.
//! - **Calls** ([`Bridge::handle_event`], [`Bridge::handle_call`]): a
//!   function call event (OpenAI `response.function_call_arguments.done`,
//!   or a `function_call` item in `response.output_item.done` /
//!   `conversation.item.done`; Gemini `toolCall.functionCalls`) runs
//!   through [`Host::call_in_turn`], so the allow-list, the turn's tier and
//!   call cap, schema validation, the result cache and the audit trail are
//!   the MCP front's. The deadline is the bridge's tool timeout (30 s by
//!   default, the seed's `WithToolTimeout`, and never more), or the tool's
//!   own when that is shorter. The answer is the client events to send
//!   back: OpenAI `conversation.item.create` with a `function_call_output`,
//!   then `response.create`; Gemini one `toolResponse.functionResponses`.
//! - **Close** ([`Bridge::close`]): later calls are answered with an error
//!   output and run nothing; declarations are empty.
//!
//! Every failure the model caused is an output it can read, never a panic
//! or a dropped call: `{"error": {"code": ..., "message": ...}}` with the
//! codes of [`CallError::code`]. A tool the agent cannot see is answered
//! exactly like a tool that does not exist. Results: a structured (JSON
//! object) result is passed as JSON; otherwise text blocks are joined with
//! newlines and binary blocks (images, audio, blobs) are summarized by MIME
//! type and size, never dumped; the whole output is cut at
//! [`DEFAULT_MAX_OUTPUT_BYTES`] (see [`Bridge::with_max_output`]), saying so.
//!
//! Gemini's parameter schema is an OpenAPI 3.0 subset, so declarations for
//! Gemini keep only the keywords it knows (`type`, `format`, `description`,
//! `nullable`, `enum`, `properties`, `required`, `items`, `anyOf`,
//! `minimum`, `maximum`, `minItems`, `maxItems`, `minLength`, `maxLength`,
//! `minProperties`, `maxProperties`, `pattern`, `default`, `example`,
//! `title`); types are written in Gemini's upper case (`OBJECT`), a type
//! list with `"null"` becomes `nullable`, `oneOf` becomes `anyOf`, a string
//! `const` becomes a one-value `enum`, formats Gemini does not know
//! (`uint64`) are dropped, and an object without properties declares no
//! parameters. Everything else (`$schema`, `additionalProperties`, `$ref`,
//! `allOf`, `not`, `exclusiveMinimum`, `multipleOf`, `uniqueItems`, ...)
//! is dropped: the host still validates every call against the tool's full
//! schema, so a dropped constraint is still enforced, only not announced.
//! OpenAI declarations carry the tool's schema without `$schema`. A tool
//! whose name Gemini does not accept (it must start with a letter or an
//! underscore) is left out of Gemini declarations, with a warning.
//!
//! Calls block the calling thread for up to the tool timeout: call the
//! bridge from a blocking thread (`tokio::task::spawn_blocking`), as
//! [`Host`] calls are. Several calls in one Gemini `toolCall` run in
//! parallel. Refusals that never reach the host (a closed bridge, arguments
//! over [`MAX_ARGUMENTS_BYTES`], a name that cannot be a tool name) are
//! logged but leave no audit record, as a request the HTTP front refuses
//! before the pipeline leaves none; everything else, unparsable arguments
//! included, leaves exactly one.

use crate::Host;
use crate::budget::{BudgetError, Tier};
use crate::registry::RegisteredTool;
use crate::tool::{CallContext, CallError, Content, ResourceBody, ToolOutput, log_safe, valid_tool_name};
use crate::{Conversation, TurnCues, TurnTier};
use serde_json::{Map, Value, json};
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest tool timeout a bridge allows, and its default (the seed's
/// 30 seconds).
pub const MAX_TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest arguments text a call may carry, in bytes; larger ones are
/// refused with `invalid_input` before they are parsed.
pub const MAX_ARGUMENTS_BYTES: usize = 64 * 1024;

/// The default cap on a function output, in bytes.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 16 * 1024;

/// The most calls of one Gemini `toolCall` that run; the rest are answered
/// with `capacity_exceeded`.
pub const MAX_CALLS_PER_EVENT: usize = 16;

/// The longest utterance [`Bridge::update_tier`] reads, in bytes (as the
/// MCP front's `toolhost/utterance`).
pub const MAX_UTTERANCE_BYTES: usize = crate::mcp::server::MAX_UTTERANCE_BYTES;

/// The longest call id the bridge accepts, in bytes.
const MAX_CALL_ID_BYTES: usize = 256;

/// Call ids remembered (answered, cancelled) per bridge.
const REMEMBERED_IDS: usize = 512;

/// The voice engine's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The OpenAI Realtime API: `session.update` tools, `function_call`
    /// items, `function_call_output` replies.
    OpenAiRealtime,
    /// Gemini Live (`BidiGenerateContent`): `setup.tools`, `toolCall`,
    /// `toolResponse`, `toolCallCancellation`.
    GeminiLive,
}

impl Format {
    /// A short name for logs and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::OpenAiRealtime => "openai-realtime",
            Format::GeminiLive => "gemini-live",
        }
    }
}

/// Why the bridge refused a request of the engine's client (as opposed to
/// a call, whose failures are function outputs: see [`CallOutcome`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    /// The agent is not in the config.
    #[error("no bridge for this agent: {0}")]
    Agent(#[from] BudgetError),
    /// The bridge was closed.
    #[error("the tool bridge is closed")]
    Closed,
    /// The utterance is longer than [`MAX_UTTERANCE_BYTES`].
    #[error("the utterance is {bytes} bytes, over the bridge's limit of {limit} bytes")]
    UtteranceTooLong {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A function-call event that cannot be answered: no call id, or one
    /// that is not a short string. Nothing ran.
    #[error("malformed {format} event {event:?}: {reason}")]
    MalformedEvent {
        /// The engine's format.
        format: &'static str,
        /// The event's type (`toolCall` for Gemini).
        event: String,
        /// What is wrong.
        reason: String,
    },
}

/// A call that failed, as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailure {
    /// A stable code: [`CallError::code`]'s (`not_found`, `invalid_input`,
    /// `timeout`, `capacity_exceeded`, `unavailable`, ...).
    pub code: &'static str,
    /// A finer kind for logs ([`CallError::kind`]'s, or `closed`).
    pub kind: &'static str,
    /// What went wrong, in words.
    pub message: String,
}

/// What one bridged call came to.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// The tool the engine asked for, as it named it.
    pub tool: String,
    /// The result for the model: a JSON document (a structured result) or
    /// a string (text), or the failure.
    pub result: Result<Value, CallFailure>,
    /// The tier the call was held to.
    pub tier: Tier,
    /// How long the bridge took over it.
    pub duration: Duration,
    /// The output was cut at the bridge's output cap.
    pub truncated: bool,
}

impl CallOutcome {
    /// The call failed.
    pub fn is_error(&self) -> bool {
        self.result.is_err()
    }

    /// The failure's code, when it failed.
    pub fn code(&self) -> Option<&'static str> {
        self.result.as_ref().err().map(|f| f.code)
    }

    /// The output as JSON: the result, or `{"error": {"code", "message"}}`.
    pub fn output(&self) -> Value {
        match &self.result {
            Ok(v) => v.clone(),
            Err(f) => json!({"error": {"code": f.code, "message": f.message}}),
        }
    }

    /// The output as the text of an OpenAI `function_call_output`: a text
    /// result as is, anything else as its JSON.
    pub fn output_text(&self) -> String {
        match &self.result {
            Ok(Value::String(s)) => s.clone(),
            _ => self.output().to_string(),
        }
    }

    /// The output as a Gemini `functionResponse.response` object:
    /// `{"output": result}` or `{"error": {"code", "message"}}`.
    pub fn gemini_response(&self) -> Value {
        match &self.result {
            Ok(v) => json!({"output": v}),
            Err(_) => self.output(),
        }
    }
}

/// What [`Bridge::update_tier`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct TierUpdate {
    /// The tier the new turn works at, and why.
    pub tier: TurnTier,
    /// The client event that re-declares the tools
    /// ([`Bridge::declare_event`]), when the visible set changed; `None`
    /// when the engine's declarations still hold.
    pub declare: Option<Value>,
}

/// A bounded set of call ids, oldest forgotten first.
#[derive(Debug, Default)]
struct Ids {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl Ids {
    /// Adds `id`; false when it was already there.
    fn insert(&mut self, id: &str) -> bool {
        if self.set.contains(id) {
            return false;
        }
        if self.order.len() >= REMEMBERED_IDS
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        self.order.push_back(id.to_string());
        self.set.insert(id.to_string());
        true
    }

    fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The tool names last declared to the engine (`None`: not yet).
    declared: Option<Vec<String>>,
    /// Calls already answered (or being answered): an engine that sends
    /// both `response.function_call_arguments.done` and
    /// `response.output_item.done` for one call gets one answer.
    answered: Ids,
    /// Gemini calls the engine cancelled.
    cancelled: Ids,
}

/// One voice-engine session's bridge to the host, on behalf of one agent.
#[derive(Debug)]
pub struct Bridge {
    host: Arc<Host>,
    agent: String,
    format: Format,
    conversation: Conversation,
    timeout: Duration,
    max_output: usize,
    session: String,
    closed: AtomicBool,
    state: Mutex<State>,
}

/// The arguments of a call, as the engine sent them.
enum Arguments {
    /// A JSON value (an object, or not: the pipeline refuses a non-object).
    Value(Value),
    /// Text that is not JSON: sent down the pipeline as a string (so it is
    /// refused, audited and spends the rate like any bad call), its parse
    /// error kept for the model.
    NotJson { text: String, error: String },
    /// Over [`MAX_ARGUMENTS_BYTES`].
    TooLarge(usize),
}

impl Arguments {
    fn parse(text: &str) -> Arguments {
        if text.len() > MAX_ARGUMENTS_BYTES {
            return Arguments::TooLarge(text.len());
        }
        if text.trim().is_empty() {
            return Arguments::Value(Value::Object(Map::new()));
        }
        match serde_json::from_str(text) {
            Ok(v) => Arguments::Value(v),
            Err(e) => Arguments::NotJson { text: text.to_string(), error: e.to_string() },
        }
    }
}

impl Bridge {
    /// A bridge for `agent` (an `npcs[].name`) in `format`, with its own
    /// conversation (turns, anti-spam clock). Before the first
    /// [`Bridge::update_tier`] it works at the agent's ceiling.
    pub fn new(host: Arc<Host>, agent: &str, format: Format) -> Result<Bridge, BridgeError> {
        let conversation = host.conversation(Some(agent))?;
        let mut id = [0u8; 8];
        // Without OS randomness the id only loses uniqueness: it names the
        // session in the audit trail and grants nothing.
        let _ = getrandom::fill(&mut id);
        let session = format!("bridge-{}", hex::encode(id));
        tracing::debug!(agent, format = format.as_str(), session, "bridge opened");
        Ok(Bridge {
            host,
            agent: agent.to_string(),
            format,
            conversation,
            timeout: MAX_TOOL_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT_BYTES,
            session,
            closed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        })
    }

    /// Bounds each call by `timeout` (clamped to at most
    /// [`MAX_TOOL_TIMEOUT`] and at least 1 ms). A tool whose own deadline
    /// is shorter keeps it.
    #[must_use]
    pub fn with_tool_timeout(mut self, timeout: Duration) -> Bridge {
        self.timeout = timeout.clamp(Duration::from_millis(1), MAX_TOOL_TIMEOUT);
        self
    }

    /// Cuts each function output at `bytes` (at least 256).
    #[must_use]
    pub fn with_max_output(mut self, bytes: usize) -> Bridge {
        self.max_output = bytes.max(256);
        self
    }

    /// Names this bridge's session in the audit trail (by default
    /// `bridge-` and 16 random hex digits); the engine's own session id is
    /// a good choice.
    #[must_use]
    pub fn with_session_id(mut self, id: impl Into<String>) -> Bridge {
        self.session = id.into();
        self
    }

    /// The agent.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The wire format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The tool timeout.
    pub fn tool_timeout(&self) -> Duration {
        self.timeout
    }

    /// The session id the audit trail records for this bridge's calls.
    pub fn session_id(&self) -> &str {
        &self.session
    }

    /// The tier the bridge works at now, and why.
    pub fn tier(&self) -> TurnTier {
        self.host.turn_tier(&self.conversation)
    }

    /// Whether [`Bridge::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the bridge: later calls run nothing and are answered with an
    /// `unavailable` error output; declarations are empty. Closing twice
    /// is harmless. The engine session and the host are the caller's.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            tracing::debug!(agent = %self.agent, session = %self.session, "bridge closed");
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tools the agent may see now (none once closed).
    fn visible(&self) -> Vec<Arc<RegisteredTool>> {
        if self.is_closed() {
            return Vec::new();
        }
        let catalog = self.host.registry().snapshot();
        // The agent was checked when the bridge was made.
        self.host.budget().available_tools(&catalog, Some(&self.agent), self.tier().tier).unwrap_or_default()
    }

    /// The names of the tools the agent may see now, sorted.
    pub fn visible_names(&self) -> Vec<String> {
        self.visible().iter().map(|t| t.def.name.clone()).collect()
    }

    /// The engine-native tools payload for the tools visible now: OpenAI's
    /// `session.tools` array or Gemini's `setup.tools` array. Remembered as
    /// what the engine was told (see [`Bridge::update_tier`]).
    pub fn declarations(&self) -> Value {
        let tools = self.visible();
        self.remember(&tools);
        self.payload(&tools)
    }

    /// The client event that declares the visible tools: for OpenAI a
    /// complete `session.update` (`session.type` `realtime`, `tools`,
    /// `tool_choice` `auto`); for Gemini `{"setup": {"tools": [...]}}`, to
    /// merge into the setup message with the model and its configuration.
    pub fn declare_event(&self) -> Value {
        let tools = self.visible();
        self.remember(&tools);
        self.event(&tools)
    }

    /// Starts a turn for `utterance` (the seed's tier selector, capped at
    /// the agent's ceiling; a DM override in force wins) and, when the
    /// visible tools changed from what the engine was last told, the event
    /// that re-declares them.
    pub fn update_tier(&self, utterance: &str, cues: TurnCues) -> Result<TierUpdate, BridgeError> {
        if self.is_closed() {
            return Err(BridgeError::Closed);
        }
        if utterance.len() > MAX_UTTERANCE_BYTES {
            return Err(BridgeError::UtteranceTooLong { bytes: utterance.len(), limit: MAX_UTTERANCE_BYTES });
        }
        let tier = self.host.begin_turn(&self.conversation, utterance, cues);
        let declare = self.refresh();
        tracing::debug!(
            agent = %self.agent, tier = %tier.tier, reason = %tier.reason, redeclare = declare.is_some(),
            "bridge turn"
        );
        Ok(TierUpdate { tier, declare })
    }

    /// The event that re-declares the tools when the visible set changed
    /// since the engine was last told (a DM override set or expired, a
    /// plugin added or removed, a tool measured into another tier), else
    /// `None`.
    pub fn refresh(&self) -> Option<Value> {
        let tools = self.visible();
        let names: Vec<String> = tools.iter().map(|t| t.def.name.clone()).collect();
        {
            let mut state = self.state();
            if state.declared.as_ref() == Some(&names) {
                return None;
            }
            state.declared = Some(names);
        }
        Some(self.event(&tools))
    }

    fn remember(&self, tools: &[Arc<RegisteredTool>]) {
        self.state().declared = Some(tools.iter().map(|t| t.def.name.clone()).collect());
    }

    fn payload(&self, tools: &[Arc<RegisteredTool>]) -> Value {
        match self.format {
            Format::OpenAiRealtime => Value::Array(tools.iter().map(|t| openai_tool(t)).collect()),
            Format::GeminiLive => {
                let functions: Vec<Value> = tools.iter().filter_map(|t| gemini_function(t)).collect();
                if functions.is_empty() { json!([]) } else { json!([{"functionDeclarations": functions}]) }
            }
        }
    }

    fn event(&self, tools: &[Arc<RegisteredTool>]) -> Value {
        let payload = self.payload(tools);
        match self.format {
            Format::OpenAiRealtime => json!({
                "type": "session.update",
                "session": {"type": "realtime", "tools": payload, "tool_choice": "auto"},
            }),
            Format::GeminiLive => json!({"setup": {"tools": payload}}),
        }
    }

    /// Runs the function call `name` with `arguments`, the JSON text the
    /// engine sent (empty text is `{}`), through the host's pipeline as
    /// this bridge's agent in its current turn. Never fails: every failure
    /// is an output the model can read.
    pub fn handle_call(&self, name: &str, arguments: &str) -> CallOutcome {
        self.call(name, Arguments::parse(arguments))
    }

    fn call(&self, name: &str, arguments: Arguments) -> CallOutcome {
        let started = Instant::now();
        let tier = self.tier().tier;
        let refuse = |code: &'static str, kind: &'static str, message: String| CallFailure { code, kind, message };
        let (result, truncated) = if self.is_closed() {
            let message = "the tool bridge is closed: no tool can be called through it".to_string();
            (Err(refuse("unavailable", "closed", message)), false)
        } else if !valid_tool_name(name) {
            // Cannot name a tool: answered as the pipeline answers a
            // missing one, without sending the text down it.
            let e = CallError::UnknownTool(log_safe(&truncate(name, 80).0).into_owned());
            (Err(refuse(e.code(), e.kind(), e.to_string())), false)
        } else {
            match arguments {
                Arguments::TooLarge(bytes) => {
                    let message = format!(
                        "invalid input for {name}: the arguments are {bytes} bytes, over the bridge's limit of {MAX_ARGUMENTS_BYTES} bytes"
                    );
                    (Err(refuse("invalid_input", "invalid_input", message)), false)
                }
                Arguments::Value(v) => self.run(name, &v, None),
                Arguments::NotJson { text, error } => self.run(name, &Value::String(text), Some(&error)),
            }
        };
        let outcome = CallOutcome { tool: name.to_string(), result, tier, duration: started.elapsed(), truncated };
        let tool = log_safe(&truncate(name, 80).0).into_owned();
        match &outcome.result {
            Ok(_) => tracing::info!(
                agent = %self.agent, session = %self.session, tool, tier = %tier,
                duration_ms = outcome.duration.as_secs_f64() * 1e3, truncated, "bridged call"
            ),
            Err(f) => tracing::info!(
                agent = %self.agent, session = %self.session, tool, tier = %tier,
                duration_ms = outcome.duration.as_secs_f64() * 1e3, code = f.code, kind = f.kind, "bridged call failed"
            ),
        }
        outcome
    }

    /// One call through the pipeline. `not_json`: the arguments were text
    /// that does not parse, sent as a string; its error replaces the
    /// pipeline's "must be an object".
    fn run(&self, name: &str, arguments: &Value, not_json: Option<&str>) -> (Result<Value, CallFailure>, bool) {
        let ctx = CallContext {
            agent: Some(self.agent.clone()),
            deadline: Some(self.timeout),
            session: Some(self.session.clone()),
            ..CallContext::default()
        };
        match self.host.call_in_turn(&self.conversation, name, arguments, &ctx) {
            Ok(out) => {
                let (v, truncated) = render(&out, self.max_output);
                (Ok(v), truncated)
            }
            Err(e) => {
                let message = match (&e, not_json) {
                    (CallError::InvalidInput { tool, .. }, Some(error)) => {
                        format!("invalid input for {tool}: the arguments are not valid JSON ({error})")
                    }
                    _ => e.to_string(),
                };
                (Err(CallFailure { code: e.code(), kind: e.kind(), message: truncate(&message, 2048).0 }), false)
            }
        }
    }

    /// Handles one server event of the engine: for a function call, runs
    /// it and returns the client events to send back (OpenAI:
    /// `conversation.item.create` with the `function_call_output`, then
    /// `response.create`; Gemini: one `toolResponse`). `Ok(None)`: nothing
    /// to send (an event that is not a function call, a call already
    /// answered, a `toolCallCancellation`, calls all cancelled). A call
    /// event without a usable call id is an error, and nothing runs.
    pub fn handle_event(&self, event: &Value) -> Result<Option<Vec<Value>>, BridgeError> {
        match self.format {
            Format::OpenAiRealtime => self.openai_event(event),
            Format::GeminiLive => self.gemini_event(event),
        }
    }

    fn malformed(&self, event: &str, reason: impl Into<String>) -> BridgeError {
        let e = BridgeError::MalformedEvent {
            format: self.format.as_str(),
            event: log_safe(&truncate(event, 80).0).into_owned(),
            reason: reason.into(),
        };
        tracing::warn!(agent = %self.agent, session = %self.session, error = %e, "bridge event refused");
        e
    }

    fn openai_event(&self, event: &Value) -> Result<Option<Vec<Value>>, BridgeError> {
        let Some(kind) = event.get("type").and_then(Value::as_str) else { return Ok(None) };
        let call = match kind {
            "response.function_call_arguments.done" => event,
            "response.output_item.done" | "conversation.item.done" => match event.get("item") {
                Some(item) if item.get("type").and_then(Value::as_str) == Some("function_call") => item,
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let call_id = call_id(call, "call_id").map_err(|r| self.malformed(kind, r))?;
        if !self.state().answered.insert(call_id) {
            tracing::debug!(call_id = %log_safe(call_id), "function call already answered");
            return Ok(None);
        }
        let outcome = match call.get("name") {
            Some(Value::String(name)) => match call.get("arguments") {
                None | Some(Value::Null) => self.call(name, Arguments::Value(json!({}))),
                Some(Value::String(text)) => self.handle_call(name, text),
                Some(other) => self.call(name, Arguments::Value(other.clone())),
            },
            _ => self.no_name(),
        };
        Ok(Some(vec![
            json!({
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": call_id, "output": outcome.output_text()},
            }),
            json!({"type": "response.create"}),
        ]))
    }

    fn no_name(&self) -> CallOutcome {
        self.failed("", "invalid_input", "invalid_input", "the function call names no function".into())
    }

    /// An outcome for a call the bridge answers without running anything.
    fn failed(&self, tool: &str, code: &'static str, kind: &'static str, message: String) -> CallOutcome {
        CallOutcome {
            tool: tool.to_string(),
            result: Err(CallFailure { code, kind, message }),
            tier: self.tier().tier,
            duration: Duration::ZERO,
            truncated: false,
        }
    }

    fn gemini_event(&self, event: &Value) -> Result<Option<Vec<Value>>, BridgeError> {
        if let Some(cancel) = event.get("toolCallCancellation") {
            let ids = cancel.get("ids").and_then(Value::as_array).ok_or_else(|| {
                self.malformed("toolCallCancellation", "toolCallCancellation.ids must be an array of call ids")
            })?;
            let mut state = self.state();
            for id in ids.iter().filter_map(Value::as_str).filter(|id| id.len() <= MAX_CALL_ID_BYTES) {
                state.cancelled.insert(id);
            }
            tracing::debug!(agent = %self.agent, n = ids.len(), "tool calls cancelled by the engine");
            return Ok(None);
        }
        let Some(tool_call) = event.get("toolCall") else { return Ok(None) };
        let calls = tool_call
            .get("functionCalls")
            .and_then(Value::as_array)
            .ok_or_else(|| self.malformed("toolCall", "toolCall.functionCalls must be an array"))?;
        // Every call needs an id before any runs: a response without one
        // cannot be matched, and half an answer leaves the model waiting.
        let mut ids = Vec::with_capacity(calls.len());
        for (i, c) in calls.iter().enumerate() {
            ids.push(call_id(c, "id").map_err(|r| self.malformed("toolCall", format!("functionCalls[{i}]: {r}")))?);
        }
        let todo: Vec<(usize, &str)> = {
            let mut state = self.state();
            ids.iter()
                .enumerate()
                .filter(|(_, id)| !state.cancelled.contains(id) && state.answered.insert(id))
                .map(|(i, id)| (i, *id))
                .collect()
        };
        let outcomes: Vec<CallOutcome> = std::thread::scope(|s| {
            let handles: Vec<_> = todo
                .iter()
                .enumerate()
                .map(|(n, &(i, _))| {
                    let c = &calls[i];
                    s.spawn(move || {
                        if n >= MAX_CALLS_PER_EVENT {
                            let message = format!(
                                "at most {MAX_CALLS_PER_EVENT} function calls run per tool call; call again with fewer"
                            );
                            let tool = c.get("name").and_then(Value::as_str).unwrap_or_default();
                            return self.failed(tool, "capacity_exceeded", "capacity_exceeded", message);
                        }
                        match c.get("name") {
                            Some(Value::String(name)) => {
                                let args = match c.get("args") {
                                    None | Some(Value::Null) => Arguments::Value(json!({})),
                                    Some(v) => sized(v),
                                };
                                self.call(name, args)
                            }
                            _ => self.no_name(),
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        self.failed("", "handler_error", "trap", "the call failed inside the bridge".into())
                    })
                })
                .collect()
        });
        let state = self.state();
        let responses: Vec<Value> = todo
            .iter()
            .zip(outcomes)
            .filter(|((_, id), _)| {
                let keep = !state.cancelled.contains(id);
                if !keep {
                    tracing::debug!(call_id = %log_safe(id), "response to a cancelled call dropped");
                }
                keep
            })
            .map(|((i, id), outcome)| {
                let name = calls[*i].get("name").and_then(Value::as_str).unwrap_or_default();
                json!({"id": id, "name": name, "response": outcome.gemini_response()})
            })
            .collect();
        if responses.is_empty() {
            return Ok(None);
        }
        Ok(Some(vec![json!({"toolResponse": {"functionResponses": responses}})]))
    }
}

/// A Gemini call's parsed `args`, held to the arguments limit.
fn sized(v: &Value) -> Arguments {
    let bytes = v.to_string().len();
    if bytes > MAX_ARGUMENTS_BYTES { Arguments::TooLarge(bytes) } else { Arguments::Value(v.clone()) }
}

/// The call id under `key`: a non-empty string of at most
/// [`MAX_CALL_ID_BYTES`].
fn call_id<'a>(call: &'a Value, key: &str) -> Result<&'a str, String> {
    match call.get(key) {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_CALL_ID_BYTES => Ok(id),
        Some(Value::String(id)) if id.is_empty() => Err(format!("{key} is empty")),
        Some(Value::String(id)) => Err(format!("{key} is {} bytes, over {MAX_CALL_ID_BYTES}", id.len())),
        Some(_) => Err(format!("{key} must be a string")),
        None => Err(format!("no {key}")),
    }
}

/// `s` cut at `max` bytes (on a character boundary), and whether it was.
fn truncate(s: &str, max: usize) -> (String, bool) {
    let (head, cut) = crate::tool::cut_at(s, max);
    (head.to_string(), cut)
}

/// A successful result for the model, within `cap` bytes: a structured
/// result as JSON, else the blocks as text (binary ones summarized).
fn render(out: &ToolOutput, cap: usize) -> (Value, bool) {
    if let Some(v) = out.structured.clone().or_else(|| crate::mcp::content::structured(&out.content)) {
        let text = v.to_string();
        if text.len() <= cap {
            return (v, false);
        }
        return (Value::String(cut(&text, cap)), true);
    }
    let text = out.content.iter().map(block_text).collect::<Vec<_>>().join("\n");
    if text.len() <= cap {
        return (Value::String(text), false);
    }
    (Value::String(cut(&text, cap)), true)
}

/// `text` cut to fit `cap` bytes with a note saying how much was left out.
fn cut(text: &str, cap: usize) -> String {
    crate::tool::cut_with_note(text, cap).into_owned()
}

/// One block as text for a voice model: binary content summarized.
fn block_text(c: &Content) -> String {
    match c.plain() {
        Content::Text(t) => t.clone(),
        Content::Json(v) => v.to_string(),
        Content::Image { mime_type, data } => format!("[image: {mime_type}, {} bytes, not shown]", data.len()),
        Content::Audio { mime_type, data } => format!("[audio: {mime_type}, {} bytes, not played]", data.len()),
        Content::Resource { uri, body: ResourceBody::Text(t), .. } => format!("[resource {uri}]\n{t}"),
        Content::Resource { uri, mime_type, body: ResourceBody::Blob(b) } => format!(
            "[resource {uri}: {}, {} bytes, not shown]",
            mime_type.as_deref().unwrap_or("application/octet-stream"),
            b.len()
        ),
        Content::ResourceLink(l) => {
            let mut s = format!("[resource link: {} <{}>", l.name, l.uri);
            if let Some(d) = &l.description {
                s.push_str(": ");
                s.push_str(d);
            }
            s.push(']');
            s
        }
        // `plain` never returns an annotated block.
        Content::Annotated { block, .. } => block_text(block),
    }
}

/// A tool as an OpenAI Realtime function tool.
fn openai_tool(t: &RegisteredTool) -> Value {
    let mut parameters = match &t.def.input_schema {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    parameters.remove("$schema");
    if !parameters.contains_key("type") {
        parameters.insert("type".into(), json!("object"));
    }
    json!({"type": "function", "name": t.def.name, "description": t.def.description, "parameters": parameters})
}

/// A tool as a Gemini function declaration; `None` when Gemini would
/// refuse its name.
fn gemini_function(t: &RegisteredTool) -> Option<Value> {
    let name = &t.def.name;
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        tracing::warn!(tool = %name, "left out of Gemini declarations: its name must start with a letter or '_'");
        return None;
    }
    let mut f = json!({"name": name, "description": t.def.description});
    let parameters = gemini_schema(&t.def.input_schema);
    let has_properties = parameters.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
    if has_properties {
        f["parameters"] = parameters;
    }
    Some(f)
}

/// Keywords of Gemini's schema (an OpenAPI 3.0 subset) kept as they are.
const GEMINI_KEEP: [&str; 13] = [
    "description",
    "title",
    "nullable",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "pattern",
    "example",
];

/// Formats Gemini knows.
const GEMINI_FORMATS: [&str; 6] = ["int32", "int64", "float", "double", "enum", "date-time"];

/// A JSON Schema in Gemini's subset (see the module documentation).
pub fn gemini_schema(schema: &Value) -> Value {
    let Value::Object(s) = schema else { return json!({}) };
    let mut out = Map::new();
    for key in GEMINI_KEEP {
        if let Some(v) = s.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(v) = s.get("default") {
        out.insert("default".into(), v.clone());
    }
    match s.get("type") {
        Some(Value::String(t)) => {
            out.insert("type".into(), json!(t.to_ascii_uppercase()));
        }
        Some(Value::Array(types)) => {
            let named: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            let non_null: Vec<&str> = named.iter().copied().filter(|t| *t != "null").collect();
            if non_null.len() < named.len() {
                out.insert("nullable".into(), json!(true));
            }
            match non_null.as_slice() {
                [one] => {
                    out.insert("type".into(), json!(one.to_ascii_uppercase()));
                }
                [] => {}
                several => {
                    let any: Vec<Value> = several.iter().map(|t| json!({"type": t.to_ascii_uppercase()})).collect();
                    out.insert("anyOf".into(), Value::Array(any));
                }
            }
        }
        _ => {}
    }
    if let Some(Value::String(f)) = s.get("format")
        && GEMINI_FORMATS.contains(&f.as_str())
    {
        out.insert("format".into(), json!(f));
    }
    match (s.get("enum"), s.get("const")) {
        (Some(Value::Array(values)), _) if values.iter().all(Value::is_string) => {
            out.insert("enum".into(), Value::Array(values.clone()));
        }
        (None, Some(Value::String(c))) => {
            out.insert("enum".into(), json!([c]));
            out.entry("type").or_insert(json!("STRING"));
        }
        _ => {}
    }
    if let Some(Value::Object(props)) = s.get("properties") {
        let props: Map<String, Value> = props.iter().map(|(k, v)| (k.clone(), gemini_schema(v))).collect();
        if !props.is_empty() {
            out.insert("properties".into(), Value::Object(props));
        }
    }
    if let Some(Value::Array(required)) = s.get("required") {
        let known: Vec<Value> = required
            .iter()
            .filter(|r| r.as_str().is_some_and(|r| out.get("properties").and_then(|p| p.get(r)).is_some()))
            .cloned()
            .collect();
        if !known.is_empty() {
            out.insert("required".into(), Value::Array(known));
        }
    }
    if let Some(items @ Value::Object(_)) = s.get("items") {
        out.insert("items".into(), gemini_schema(items));
    }
    if let Some(Value::Array(any)) = s.get("anyOf").or_else(|| s.get("oneOf")) {
        out.insert("anyOf".into(), Value::Array(any.iter().map(gemini_schema).collect()));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{AgentProfile, Budget, BudgetConfig};
    use crate::tool::{CallStats, Provider, ProviderKind, ToolDef, ToolMeta};

    #[test]
    fn gemini_schemas_keep_only_the_openapi_subset() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "expression": {"type": "string", "minLength": 1, "maxLength": 200, "description": "dice"},
                "seed": {"type": "integer", "format": "uint64", "minimum": 0},
                "count": {"type": "integer", "format": "int32", "exclusiveMinimum": 0},
                "note": {"type": ["string", "null"]},
                "mode": {"const": "fast"},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "uniqueItems": true},
                "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "numbers": {"enum": [1, 2]},
            },
            "required": ["expression", "ghost"],
        });
        assert_eq!(
            gemini_schema(&schema),
            json!({
                "type": "OBJECT",
                "properties": {
                    "expression": {"type": "STRING", "minLength": 1, "maxLength": 200, "description": "dice"},
                    "seed": {"type": "INTEGER", "minimum": 0},
                    "count": {"type": "INTEGER", "format": "int32"},
                    "note": {"type": "STRING", "nullable": true},
                    "mode": {"type": "STRING", "enum": ["fast"]},
                    "tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["a", "b"]}},
                    "either": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
                    "numbers": {},
                },
                "required": ["expression"],
            })
        );
        assert_eq!(gemini_schema(&json!(true)), json!({}), "a boolean schema says nothing Gemini reads");
    }

    #[test]
    fn outputs_are_bounded_and_binary_content_is_summarized() {
        let out = |content| ToolOutput { content, structured: None, stats: CallStats::default() };
        let (v, cut_) = render(
            &out(vec![
                Content::Text("a".into()),
                Content::Image { mime_type: "image/png".into(), data: vec![0; 5000] },
                Content::Audio { mime_type: "audio/wav".into(), data: vec![0; 7] },
            ]),
            1024,
        );
        assert_eq!(v, json!("a\n[image: image/png, 5000 bytes, not shown]\n[audio: audio/wav, 7 bytes, not played]"));
        assert!(!cut_);
        let (v, cut_) = render(&out(vec![Content::Text("é".repeat(5000))]), 1000);
        let s = v.as_str().unwrap();
        assert!(cut_ && s.len() <= 1000 && s.ends_with("[output truncated: 10000 bytes in all]"), "{s}");
        let (v, cut_) = render(&out(vec![Content::Json(json!({"total": 7}))]), 1000);
        assert_eq!((v, cut_), (json!({"total": 7}), false), "a structured result stays JSON");
        let (v, cut_) = render(&out(vec![Content::Json(json!({"big": "x".repeat(2000)}))]), 500);
        assert!(cut_ && v.as_str().is_some_and(|s| s.len() <= 500), "{v}");
    }

    #[test]
    fn remembered_ids_are_bounded() {
        let mut ids = Ids::default();
        assert!(ids.insert("a") && !ids.insert("a"));
        for i in 0..REMEMBERED_IDS {
            ids.insert(&i.to_string());
        }
        assert!(!ids.contains("a"), "the oldest is forgotten");
        assert_eq!(ids.set.len(), REMEMBERED_IDS);
    }

    /// A provider whose tools return a picture, a long text, and nothing.
    #[derive(Debug)]
    struct Fake(Vec<ToolDef>);

    impl Provider for Fake {
        fn name(&self) -> &str {
            "fake"
        }
        fn kind(&self) -> ProviderKind {
            ProviderKind::Other
        }
        fn tools(&self) -> &[ToolDef] {
            &self.0
        }
        fn call(&self, tool: &str, _: &Value, _: &CallContext) -> Result<ToolOutput, CallError> {
            let content = match tool {
                "picture" => vec![
                    Content::Text("a map".into()),
                    Content::Image { mime_type: "image/png".into(), data: vec![1; 300_000] },
                ],
                _ => vec![Content::Text("x".repeat(100_000))],
            };
            Ok(ToolOutput { content, structured: None, stats: CallStats::default() })
        }
    }

    fn bridge(format: Format) -> Bridge {
        let agents = vec![AgentProfile {
            name: "npc".into(),
            budget_tier: Tier::Deep,
            tools: vec!["picture".into(), "chatty".into(), "9lives".into()],
            instructions: None,
            rate_limit: None,
            max_calls_per_turn: None,
            personality: None,
            engine: None,
        }];
        let runtime = crate::runtime::Runtime::new(crate::runtime::Limits::default(), None).unwrap();
        let host = Host::with_budget(runtime, Budget::new(BudgetConfig::default(), agents));
        let def = |name: &str| ToolDef {
            name: name.into(),
            description: format!("the {name} tool"),
            input_schema: json!({"type": "object"}),
            meta: ToolMeta { estimated_duration_ms: Some(5), ..ToolMeta::default() },
            ..ToolDef::default()
        };
        host.registry().upsert(Arc::new(Fake(vec![def("picture"), def("chatty"), def("9lives")]))).unwrap();
        assert!(matches!(
            Bridge::new(
                Arc::new(Host::new(crate::runtime::Runtime::new(crate::runtime::Limits::default(), None).unwrap())),
                "npc",
                format
            ),
            Err(BridgeError::Agent(_))
        ));
        Bridge::new(Arc::new(host), "npc", format).unwrap()
    }

    #[test]
    fn results_through_the_bridge_are_summarized_and_bounded() {
        let b = bridge(Format::OpenAiRealtime).with_max_output(4096);
        let out = b.handle_call("picture", "{}");
        assert_eq!(out.result, Ok(json!("a map\n[image: image/png, 300000 bytes, not shown]")));
        let out = b.handle_call("chatty", "");
        assert!(out.truncated && out.output_text().len() <= 4096, "{}", out.output_text().len());
        // No parameters: Gemini declares none; a name starting with a digit is left out.
        let g = bridge(Format::GeminiLive);
        let decl = g.declarations();
        let names: Vec<&str> =
            decl[0]["functionDeclarations"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["chatty", "picture"]);
        assert!(decl[0]["functionDeclarations"][0].get("parameters").is_none(), "{decl}");
        assert_eq!(b.declarations().as_array().unwrap().len(), 3, "OpenAI takes any toolhost name");
    }

    #[test]
    fn hostile_events_get_clear_errors_and_never_run_anything() {
        let b = bridge(Format::OpenAiRealtime);
        for event in [
            json!({"type": "response.function_call_arguments.done", "name": "picture", "arguments": "{}"}),
            json!({"type": "response.function_call_arguments.done", "call_id": 7, "name": "picture"}),
            json!({"type": "response.output_item.done", "item": {"type": "function_call", "call_id": "x".repeat(300)}}),
        ] {
            let e = b.handle_event(&event).unwrap_err();
            assert!(matches!(e, BridgeError::MalformedEvent { .. }), "{e}");
            assert!(e.to_string().contains("call_id"), "{e}");
        }
        for ignored in [json!({"type": "response.audio.delta", "delta": "AAAA"}), json!(42), json!({"no": "type"})] {
            assert_eq!(b.handle_event(&ignored), Ok(None));
        }
        // A call with an id but no name, or with arguments that are not an
        // object, is answered with an error the model can read.
        let r = b.handle_event(&json!({"type": "response.function_call_arguments.done", "call_id": "c1"})).unwrap();
        assert!(r.unwrap()[0]["item"]["output"].as_str().unwrap().contains("invalid_input"));
        let r = b.handle_call("picture", "[1, 2]");
        assert_eq!(r.code(), Some("invalid_input"));
        assert!(r.output_text().contains("not an array"), "{}", r.output_text());
        let huge = format!("{{\"x\": \"{}\"}}", "y".repeat(MAX_ARGUMENTS_BYTES));
        assert_eq!(b.handle_call("picture", &huge).code(), Some("invalid_input"));
        assert_eq!(b.handle_call(&"n".repeat(100_000), "{}").code(), Some("not_found"));
        let g = bridge(Format::GeminiLive);
        let e = g
            .handle_event(&json!({"toolCall": {"functionCalls": [{"id": "a", "name": "picture"}, {"name": "chatty"}]}}))
            .unwrap_err();
        assert!(e.to_string().contains("functionCalls[1]: no id"), "{e}");
        assert!(g.handle_event(&json!({"toolCall": {"functionCalls": "roll"}})).is_err());
        assert!(g.handle_event(&json!({"toolCallCancellation": {}})).is_err());
        assert_eq!(g.handle_event(&json!({"serverContent": {"turnComplete": true}})), Ok(None));
        assert_eq!(
            g.update_tier(&"x".repeat(MAX_UTTERANCE_BYTES + 1), TurnCues::default()).unwrap_err(),
            BridgeError::UtteranceTooLong { bytes: MAX_UTTERANCE_BYTES + 1, limit: MAX_UTTERANCE_BYTES }
        );
    }

    #[test]
    fn gemini_calls_past_the_per_event_cap_and_cancelled_calls() {
        let g = bridge(Format::GeminiLive);
        let calls: Vec<Value> = (0..MAX_CALLS_PER_EVENT + 2)
            .map(|i| json!({"id": format!("function-call-{i}"), "name": "picture"}))
            .collect();
        let r = g.handle_event(&json!({"toolCall": {"functionCalls": calls}})).unwrap().unwrap();
        let responses = r[0]["toolResponse"]["functionResponses"].as_array().unwrap();
        assert_eq!(responses.len(), MAX_CALLS_PER_EVENT + 2);
        assert!(responses[0]["response"]["output"].is_string());
        assert_eq!(responses[MAX_CALLS_PER_EVENT]["response"]["error"]["code"], "capacity_exceeded");
        // Cancelled before it arrived: not run, not answered.
        assert_eq!(g.handle_event(&json!({"toolCallCancellation": {"ids": ["function-call-99"]}})), Ok(None));
        let r =
            g.handle_event(&json!({"toolCall": {"functionCalls": [{"id": "function-call-99", "name": "picture"}]}}));
        assert_eq!(r, Ok(None));
        // Answered once only.
        let again =
            g.handle_event(&json!({"toolCall": {"functionCalls": [{"id": "function-call-0", "name": "picture"}]}}));
        assert_eq!(again, Ok(None));
    }
}
