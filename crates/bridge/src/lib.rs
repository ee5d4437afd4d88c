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
//!   through [`Pipeline::call_in_turn`], so the allow-list, the turn's tier and
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
//! [`Pipeline`] calls are. Several calls in one Gemini `toolCall` run in
//! parallel. Refusals that never reach the host (a closed bridge, arguments
//! over [`MAX_ARGUMENTS_BYTES`], a name that cannot be a tool name) are
//! logged but leave no audit record, as a request the HTTP front refuses
//! before the pipeline leaves none; everything else, unparsable arguments
//! included, leaves exactly one.

#![deny(unsafe_code)]

pub mod relay;
mod run;
#[cfg(test)]
mod tests;

pub use toolhost_mcp::declare::gemini_schema;

use budget::{BudgetError, Tier};
use registry::RegisteredTool;
use serde_json::{Map, Value, json};
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tool::{CallContext, CallError, Content, ResourceBody, ToolOutput, log_safe, valid_tool_name};
use toolhost_core::{Conversation, Pipeline, TurnCues, TurnTier, budget, registry, tool};
use toolhost_mcp as mcp;

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
    /// Gemini: the functions last declared `NON_BLOCKING`.
    non_blocking: HashSet<String>,
}

/// One voice-engine session's bridge to the host, on behalf of one agent.
#[derive(Debug)]
pub struct Bridge {
    host: Arc<Pipeline>,
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
