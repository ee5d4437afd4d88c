//! The host's own vocabulary for tools, independent of where a tool comes from
//! (a wasm plugin or an external MCP server) and of any wire format.

use crate::{Capabilities, Tier};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Everything the host knows about a tool before calling it.
#[derive(Debug, Clone, Default)]
pub struct ToolDef {
    /// Unique name in the registry.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: serde_json::Value,
    /// Declared latency and behaviour.
    pub meta: ToolMeta,
    /// A minimal valid arguments object for latency probes, when declared.
    pub probe_arguments: Option<serde_json::Value>,
    /// A human-readable title, when the provider gave one (an external
    /// server's tool `title`).
    pub title: Option<String>,
    /// JSON Schema of the tool's structured result ([`ToolOutput::structured`]),
    /// when the provider declared one (an external server's `outputSchema`).
    pub output_schema: Option<serde_json::Value>,
    /// Hints about the tool's behaviour for clients, when the provider gave
    /// them (an external server's tool `annotations`). Hints only: nothing
    /// in the host trusts them.
    pub annotations: Option<ToolAnnotations>,
}

/// Declared latency and behaviour of a tool (the seed's tool definition
/// fields), and what the operator set for a tool that declares none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolMeta {
    /// Declared p50 in milliseconds; `None` when the provider declared nothing.
    pub estimated_duration_ms: Option<u32>,
    /// Declared upper bound (p99) in milliseconds; `None` when undeclared.
    pub max_duration_ms: Option<u32>,
    /// Safe to retry or call speculatively.
    pub idempotent: bool,
    /// How long a result may be cached; 0 means never.
    pub cacheable_seconds: u32,
    /// The deadline the operator set for a tool that declares no max
    /// duration (an external server's `timeout_ms`), in milliseconds. It
    /// replaces the tier's ceiling as the call's deadline, still within the
    /// operator's floor and ceiling ([`crate::DeadlinePolicy`]).
    pub deadline_ms: Option<u32>,
    /// The tier the operator assigned a tool that declares no p50 (an
    /// external server's `tier`), until it is measured; `None`: the
    /// budget's default for unmeasured tools.
    pub unmeasured_tier: Option<Tier>,
    /// Nobody declared how long it takes (an external server's tool with
    /// neither a max duration nor the server's `timeout_ms`): until it is
    /// measured, its calls get the DEEP tier's ceiling as their deadline
    /// rather than its tier's, so a slow tool is not cut off for what
    /// nobody said.
    pub deep_until_measured: bool,
    /// The tool says it runs long: a client that speaks MCP tasks may call
    /// it as a task (a DEEP-tier tool may be called so too), which answers
    /// at once and is polled for its result.
    pub long_running: bool,
}

/// Hints about a tool's behaviour, as MCP's tool annotations carry them.
/// A client may show or use them; they are the provider's claims, never
/// checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolAnnotations {
    /// A human-readable title.
    pub title: Option<String>,
    /// The tool does not change its environment.
    pub read_only_hint: Option<bool>,
    /// The tool may change its environment destructively (meaningful when
    /// not read-only).
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    pub idempotent_hint: Option<bool>,
    /// The tool may reach an open world of external entities.
    pub open_world_hint: Option<bool>,
}

/// One block of a tool result.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// A JSON document.
    Json(serde_json::Value),
    /// An image.
    Image {
        /// MIME type such as `image/png`.
        mime_type: String,
        /// Raw bytes.
        data: Vec<u8>,
    },
    /// Audio.
    Audio {
        /// MIME type such as `audio/wav`.
        mime_type: String,
        /// Raw bytes.
        data: Vec<u8>,
    },
    /// An embedded resource: a document named by a URI.
    Resource {
        /// The resource's URI.
        uri: String,
        /// MIME type, when known.
        mime_type: Option<String>,
        /// Text or raw bytes.
        body: ResourceBody,
    },
    /// A link to a resource the client may read later (MCP's
    /// `resource_link`): its URI and description, not its contents.
    ResourceLink(ResourceLink),
    /// A block with annotations for the client: who it is meant for, how
    /// important it is, when it last changed. Never nested: see
    /// [`Content::annotated`].
    Annotated {
        /// The block itself.
        block: Box<Content>,
        /// Its annotations.
        annotations: Annotations,
    },
}

/// A link to a resource, as a content block carries it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ResourceLink {
    /// The resource's URI.
    pub uri: String,
    /// Its programmatic name.
    pub name: String,
    /// A human-readable title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Size in bytes, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// Annotations on a content block: hints for the client, never checked.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Annotations {
    /// Who the block is meant for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<Audience>>,
    /// How important it is, from 0 (least) to 1 (most).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<f32>,
    /// When it last changed (ISO 8601), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

/// Who a content block is meant for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Audience {
    /// The person using the client.
    User,
    /// The model.
    Assistant,
}

/// The contents of an embedded resource.
#[derive(Debug, Clone, PartialEq)]
pub enum ResourceBody {
    /// Text.
    Text(String),
    /// Raw bytes.
    Blob(Vec<u8>),
}

impl Content {
    /// Size of the block's payload in bytes.
    pub fn len(&self) -> usize {
        match self {
            Content::Text(s) => s.len(),
            Content::Json(v) => v.to_string().len(),
            Content::Image { data, .. } | Content::Audio { data, .. } => data.len(),
            Content::Resource { body: ResourceBody::Text(t), .. } => t.len(),
            Content::Resource { body: ResourceBody::Blob(b), .. } => b.len(),
            Content::ResourceLink(l) => l.uri.len(),
            Content::Annotated { block, .. } => block.len(),
        }
    }

    /// True when the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The block without its annotations.
    pub fn plain(&self) -> &Content {
        match self {
            Content::Annotated { block, .. } => block.plain(),
            c => c,
        }
    }

    /// The block's annotations, if it has any.
    pub fn annotations(&self) -> Option<&Annotations> {
        match self {
            Content::Annotated { annotations, .. } => Some(annotations),
            _ => None,
        }
    }

    /// This block with `annotations`, replacing any it had.
    pub fn annotated(self, annotations: Annotations) -> Content {
        let block = match self {
            Content::Annotated { block, .. } => block,
            c => Box::new(c),
        };
        Content::Annotated { block, annotations }
    }
}

/// The JSON shape of a block in `toolhost call --json` and the admin API:
/// `{"type": "text", "text": ...}`, `{"type": "json", "json": ...}`,
/// `{"type": "image"|"audio", "mime_type": ..., "data": base64}`,
/// `{"type": "resource", "uri": ..., "mime_type": ..., "text"|"blob": ...}`,
/// `{"type": "resource_link", "uri": ..., "name": ..., ...}`; an annotated
/// block is its block's shape with `"annotations": {...}` added.
impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine as _;
        use serde::ser::SerializeMap;
        let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
        let mut m = s.serialize_map(None)?;
        match self {
            Content::Text(t) => {
                m.serialize_entry("type", "text")?;
                m.serialize_entry("text", t)?;
            }
            Content::Json(v) => {
                m.serialize_entry("type", "json")?;
                m.serialize_entry("json", v)?;
            }
            Content::Image { mime_type, data } | Content::Audio { mime_type, data } => {
                m.serialize_entry("type", if matches!(self, Content::Image { .. }) { "image" } else { "audio" })?;
                m.serialize_entry("mime_type", mime_type)?;
                m.serialize_entry("data", &b64(data))?;
            }
            Content::Resource { uri, mime_type, body } => {
                m.serialize_entry("type", "resource")?;
                m.serialize_entry("uri", uri)?;
                m.serialize_entry("mime_type", mime_type)?;
                match body {
                    ResourceBody::Text(t) => m.serialize_entry("text", t)?,
                    ResourceBody::Blob(b) => m.serialize_entry("blob", &b64(b))?,
                }
            }
            Content::ResourceLink(link) => {
                m.serialize_entry("type", "resource_link")?;
                let fields = serde_json::to_value(link).map_err(serde::ser::Error::custom)?;
                for (k, v) in fields.as_object().into_iter().flatten() {
                    m.serialize_entry(k, v)?;
                }
            }
            Content::Annotated { block, annotations } => {
                let inner = serde_json::to_value(block).map_err(serde::ser::Error::custom)?;
                for (k, v) in inner.as_object().into_iter().flatten() {
                    if k != "annotations" {
                        m.serialize_entry(k, v)?;
                    }
                }
                m.serialize_entry("annotations", annotations)?;
            }
        }
        m.end()
    }
}

/// A successful call.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// The result blocks, in order.
    pub content: Vec<Content>,
    /// The structured result beside the blocks (MCP's `structuredContent`),
    /// when the provider returned one of its own (an external server). For
    /// a wasm tool it is `None`, and a result that is one JSON object block
    /// is its structured result.
    pub structured: Option<serde_json::Value>,
    /// Execution facts for metrics and audit.
    pub stats: CallStats,
}

/// What a call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Wall-clock time of the call, instantiation included.
    pub duration: Duration,
    /// Fuel the guest consumed (wasm tools only).
    pub fuel_used: u64,
    /// Largest linear memory the guest reached, in bytes (wasm tools only).
    pub peak_memory_bytes: usize,
    /// Capabilities the call used (not only held): asked for its
    /// directories, read its environment, queried the memory store, opened a
    /// granted connection.
    pub capabilities_used: Capabilities,
    /// Answered from the host's result cache: the tool did not run, and
    /// the other figures are those of the call that filled the cache.
    pub cached: bool,
}

/// Why a call failed. Every variant carries what the model or the operator
/// needs to understand it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No such tool (or not visible to this caller: the two are indistinguishable).
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    /// The arguments do not match the tool's schema, or the tool judged them invalid.
    #[error("invalid input for {tool}: {message}")]
    InvalidInput {
        /// Tool name.
        tool: String,
        /// What was wrong, naming the field when known.
        message: String,
    },
    /// The tool reported that what was asked for does not exist.
    #[error("{tool}: not found: {message}")]
    NotFound {
        /// Tool name.
        tool: String,
        /// The tool's message.
        message: String,
    },
    /// The tool refused for lack of a capability.
    #[error("{tool}: forbidden: {message}")]
    Forbidden {
        /// Tool name.
        tool: String,
        /// The tool's message.
        message: String,
    },
    /// The tool ran and reported a failure.
    #[error("{tool} failed: {message}")]
    Failed {
        /// Tool name.
        tool: String,
        /// The tool's message.
        message: String,
    },
    /// The call ran past its deadline and was stopped.
    #[error("{tool} timed out after {limit_ms} ms")]
    Timeout {
        /// Tool name.
        tool: String,
        /// The deadline that was enforced.
        limit_ms: u64,
    },
    /// The guest used up its fuel (instruction budget).
    #[error("{tool} ran out of fuel ({fuel} units)")]
    OutOfFuel {
        /// Tool name.
        tool: String,
        /// The fuel budget.
        fuel: u64,
    },
    /// The guest tried to grow its memory past the limit.
    #[error("{tool} exceeded its memory limit of {limit_bytes} bytes")]
    MemoryLimit {
        /// Tool name.
        tool: String,
        /// The limit.
        limit_bytes: usize,
    },
    /// The guest made more host-side resources in one call (WASI handles:
    /// HTTP fields, requests, bodies, streams, pollables, files) than its
    /// limit allows. They live in the host's memory and count against the
    /// plugin's: the kind is `memory_limit`.
    #[error("{tool} {what}: host-side resources count against its memory")]
    HostResources {
        /// Tool name.
        tool: String,
        /// What it did, with the limit it went past.
        what: String,
    },
    /// The guest tried to grow a table past the limit.
    #[error("{tool} exceeded its table limit of {limit_elements} elements")]
    TableLimit {
        /// Tool name.
        tool: String,
        /// The limit.
        limit_elements: usize,
    },
    /// The guest overflowed its wasm stack.
    #[error("{tool} overflowed its stack (deep recursion)")]
    StackOverflow {
        /// Tool name.
        tool: String,
    },
    /// The guest panicked.
    #[error("{tool} panicked: {message}")]
    GuestPanic {
        /// Tool name.
        tool: String,
        /// The panic message, from the guest's stderr when it printed one.
        message: String,
    },
    /// The result was larger than the host accepts.
    #[error("{tool} returned at least {size} bytes, over the {limit} byte output limit")]
    OutputTooLarge {
        /// Tool name.
        tool: String,
        /// Size of the result (when the copy out of the guest was stopped
        /// at the limit: the bytes counted until then).
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The guest trapped for another reason.
    #[error("{tool} trapped: {message}")]
    Trap {
        /// Tool name.
        tool: String,
        /// The trap.
        message: String,
    },
    /// The provider is not available right now (an external server is down).
    #[error("{tool} is unavailable: {message}")]
    Unavailable {
        /// Tool name.
        tool: String,
        /// Why.
        message: String,
    },
    /// Too many calls: a rate limit or concurrency cap.
    #[error("capacity exceeded: {0}")]
    CapacityExceeded(String),
    /// The caller gave up on the call, and it was stopped.
    #[error("{tool} was cancelled by the caller")]
    Cancelled {
        /// Tool name.
        tool: String,
    },
    /// The call would write, and its audit record could not be written
    /// first (`audit.fail_closed`): nothing ran.
    #[error("audit_unavailable: {tool} was not run: {message}")]
    AuditUnavailable {
        /// Tool name.
        tool: String,
        /// Why the record could not be written.
        message: String,
    },
}

impl CallError {
    /// A stable machine-readable code, as in the Limina MCP interface:
    /// `not_found`, `invalid_input`, `forbidden`, `handler_error`,
    /// `capacity_exceeded`, plus `timeout`, `unavailable` and `cancelled`.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::UnknownTool(_) | CallError::NotFound { .. } => "not_found",
            CallError::InvalidInput { .. } => "invalid_input",
            CallError::Forbidden { .. } => "forbidden",
            CallError::Timeout { .. } => "timeout",
            CallError::Unavailable { .. } | CallError::AuditUnavailable { .. } => "unavailable",
            CallError::CapacityExceeded(_) => "capacity_exceeded",
            CallError::Cancelled { .. } => "cancelled",
            CallError::Failed { .. }
            | CallError::OutOfFuel { .. }
            | CallError::MemoryLimit { .. }
            | CallError::TableLimit { .. }
            | CallError::HostResources { .. }
            | CallError::StackOverflow { .. }
            | CallError::GuestPanic { .. }
            | CallError::OutputTooLarge { .. }
            | CallError::Trap { .. } => "handler_error",
        }
    }

    /// The part of the message the tool itself wrote (or, for invalid
    /// input, that may quote the caller's arguments): what an audit trail
    /// keeps only as a hash unless the operator allows raw text. `None` when
    /// the whole message is the host's own words.
    pub fn provider_text(&self) -> Option<&str> {
        match self {
            CallError::InvalidInput { message, .. }
            | CallError::NotFound { message, .. }
            | CallError::Forbidden { message, .. }
            | CallError::Failed { message, .. }
            | CallError::GuestPanic { message, .. }
            // An external server's state, in its own words among them.
            | CallError::Unavailable { message, .. } => Some(message),
            _ => None,
        }
    }

    /// A short name for the kind of failure, finer than [`CallError::code`]
    /// (`out_of_fuel`, `memory_limit`, `guest_panic` ...), for logs and audit.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::UnknownTool(_) => "unknown_tool",
            CallError::InvalidInput { .. } => "invalid_input",
            CallError::NotFound { .. } => "not_found",
            CallError::Forbidden { .. } => "forbidden",
            CallError::Failed { .. } => "failed",
            CallError::Timeout { .. } => "timeout",
            CallError::OutOfFuel { .. } => "out_of_fuel",
            CallError::MemoryLimit { .. } => "memory_limit",
            CallError::TableLimit { .. } => "table_limit",
            CallError::HostResources { .. } => "memory_limit",
            CallError::StackOverflow { .. } => "stack_overflow",
            CallError::GuestPanic { .. } => "guest_panic",
            CallError::OutputTooLarge { .. } => "output_too_large",
            CallError::Trap { .. } => "trap",
            CallError::Unavailable { .. } => "unavailable",
            CallError::AuditUnavailable { .. } => "audit_unavailable",
            CallError::CapacityExceeded(_) => "capacity_exceeded",
            CallError::Cancelled { .. } => "cancelled",
        }
    }
}

/// What kind of provider runs a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// A WebAssembly component, run in a fresh instance per call.
    Wasm,
    /// An external MCP server.
    Mcp,
    /// Anything else (test doubles, embedders' own providers).
    Other,
}

impl ProviderKind {
    /// Lowercase name for listings.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Wasm => "wasm",
            ProviderKind::Mcp => "mcp",
            ProviderKind::Other => "other",
        }
    }
}

/// What a provider says about itself, as plain data, for reports (`toolhost
/// grants`, `plugin list`, the admin API) and the audit trail.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderInfo {
    /// What kind of provider it is.
    pub kind: ProviderKind,
    /// The version's digest (a wasm component's sha256), when it has one.
    pub digest: Option<String>,
    /// Size of the code in bytes, when known.
    pub size: Option<usize>,
    /// The interfaces a component imports (what it could ask for).
    pub imports: Vec<String>,
    /// Capabilities it asks for: imports that reach outside the sandbox and
    /// mean nothing without a grant.
    pub asks: Capabilities,
    /// Capabilities it imports that expose nothing unless granted (the
    /// Rust standard library imports the environment and the filesystem
    /// whether or not a plugin uses them).
    pub inert: Capabilities,
    /// Capabilities it holds: what the operator granted.
    pub held: Capabilities,
    /// Each held capability's grant in detail, by capability name.
    pub grants: BTreeMap<&'static str, serde_json::Value>,
    /// In plain words, what each grant allows.
    pub allows: Vec<String>,
    /// Which code a wasm component runs on now: `fast` (its optimized
    /// code still compiling) or `optimized`.
    pub code: Option<&'static str>,
}

impl ProviderInfo {
    /// The description of a provider that has no code of its own to show.
    pub fn of_kind(kind: ProviderKind) -> ProviderInfo {
        ProviderInfo {
            kind,
            digest: None,
            size: None,
            imports: Vec::new(),
            asks: Capabilities::EMPTY,
            inert: Capabilities::EMPTY,
            held: Capabilities::EMPTY,
            grants: BTreeMap::new(),
            allows: Vec::new(),
            code: None,
        }
    }
}

/// Something that can run tools: a wasm plugin, an external MCP server.
///
/// A provider is [`std::any::Any`], so the edge that made one can find it
/// again in the registry as its own type (the MCP front reaches an external
/// server's resources and prompts through its provider).
pub trait Provider: std::any::Any + Send + Sync + std::fmt::Debug {
    /// Provider name (plugin or server name), unique in the registry.
    fn name(&self) -> &str;
    /// What kind of provider this is.
    fn kind(&self) -> ProviderKind;
    /// The tools it provides.
    fn tools(&self) -> &[ToolDef];
    /// Identifies this version of the provider (a wasm plugin's digest), so
    /// stored measurements of an older version are not reused.
    fn fingerprint(&self) -> Option<&str> {
        None
    }
    /// The capabilities it holds (cheap: read on every call for the audit).
    fn held(&self) -> Capabilities {
        Capabilities::EMPTY
    }
    /// Describes it for reports.
    fn describe(&self) -> ProviderInfo {
        ProviderInfo {
            digest: self.fingerprint().map(str::to_string),
            held: self.held(),
            ..ProviderInfo::of_kind(self.kind())
        }
    }
    /// Whether its tools can be called now. An external server that is down
    /// (and being reconnected) is unavailable: its tools are hidden from
    /// listings, and calls to them fail with [`CallError::Unavailable`].
    fn is_available(&self) -> bool {
        true
    }
    /// Whether its calls may ask their client questions (and wait for the answers).
    fn may_ask(&self) -> bool {
        false
    }
    /// What more a front may use of this provider, by type (an external
    /// MCP server's resources and prompts: the MCP crates' `UpstreamHandle`).
    /// `None` by default.
    fn extension(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        None
    }
    /// Runs `tool` with `arguments`, which the host has already validated
    /// against the tool's schema.
    fn call(&self, tool: &str, arguments: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError>;
}

/// Per-call context from the caller.
#[derive(Clone, Default)]
pub struct CallContext {
    /// The agent on whose behalf the call runs, if known.
    pub agent: Option<String>,
    /// The deadline the budget set for this call; providers may shorten it
    /// (operator floor and ceiling) but never exceed the ceiling.
    pub deadline: Option<std::time::Duration>,
    /// Where the plugin's log lines and progress reports go, besides the host log.
    pub events: Option<Arc<dyn Fn(PluginEvent) + Send + Sync>>,
    /// The caller's session (an MCP session id), for the audit trail.
    pub session: Option<String>,
    /// Which credential the caller presented (a token's id, never the
    /// secret), for the audit trail.
    pub token: Option<String>,
    /// Where the provider leaves what the call cost, whatever its outcome:
    /// a failed call's fuel and memory are in no [`ToolOutput`].
    pub cost: Option<Arc<CallCost>>,
    /// Set when the caller gives up on the call (an MCP client's
    /// `notifications/cancelled`): a provider that can stop the work (an
    /// upstream server's request) does, and answers
    /// [`CallError::Cancelled`].
    pub cancel: Option<Cancel>,
    /// A latency probe of the host's own (calibration), not a caller's
    /// call: a canary does not count it.
    pub probe: bool,
    /// How the call asks its MCP client (elicitation, sampling); `None`: it cannot.
    pub asker: Option<Arc<dyn crate::offer::Asker>>,
    /// The caller has already spent the agent's tool-call rate on this
    /// call (a task: refused when it is made, not when it runs).
    pub rate_spent: bool,
    /// The trace the call belongs to: the caller's span (the MCP request's),
    /// or the remote context a client sent when spans are off.
    pub trace: Option<crate::trace::Context>,
    /// What the client said about the model behind the call
    /// (`_meta["toolhost/model"]` and `_meta["toolhost/prompt_hash"]`),
    /// recorded as given.
    pub model: Option<Arc<ModelNote>>,
}

/// The model and prompt a client says a call came from, as given (cut to
/// [`ModelNote::MAX`] characters each).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelNote {
    /// `_meta["toolhost/model"]`.
    pub model: Option<String>,
    /// `_meta["toolhost/prompt_hash"]`.
    pub prompt_hash: Option<String>,
}

impl ModelNote {
    /// The longest value kept, in characters.
    pub const MAX: usize = 200;

    /// From a request's `_meta`; `None` when it says neither.
    pub fn from_meta(meta: &serde_json::Map<String, serde_json::Value>) -> Option<ModelNote> {
        let get = |k: &str| {
            meta.get(k).and_then(serde_json::Value::as_str).map(|s| s.chars().take(ModelNote::MAX).collect::<String>())
        };
        let note = ModelNote { model: get("toolhost/model"), prompt_hash: get("toolhost/prompt_hash") };
        (note.model.is_some() || note.prompt_hash.is_some()).then_some(note)
    }
}

pub use crate::cancel::Cancel;

/// What a call cost, left by the provider for the caller to read after the
/// call ends, success or failure.
#[derive(Debug, Default)]
pub struct CallCost {
    stats: std::sync::Mutex<Option<CallStats>>,
    contacts: std::sync::Mutex<Vec<HostContact>>,
    served_by: std::sync::OnceLock<String>,
    waited_us: std::sync::atomic::AtomicU64,
}

impl CallCost {
    /// Records how long the call waited for its client's answers (time
    /// that is not the tool's: its latency is measured without it).
    pub fn set_waited(&self, waited: Duration) {
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.waited_us.store(us, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long the call waited for its client's answers.
    pub fn waited(&self) -> Duration {
        Duration::from_micros(self.waited_us.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Records which version ran the call (its digest), when the provider
    /// holds more than one (a canary).
    pub fn set_served_by(&self, digest: &str) {
        let _ = self.served_by.set(digest.to_string());
    }

    /// The version that ran the call, when the provider said.
    pub fn served_by(&self) -> Option<String> {
        self.served_by.get().cloned()
    }

    /// Records the call's cost.
    pub fn set(&self, stats: CallStats) {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner()) = Some(stats);
    }

    /// The recorded cost, if the provider left one.
    pub fn get(&self) -> Option<CallStats> {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the origins the call sent HTTP requests to.
    pub fn set_contacts(&self, contacts: Vec<HostContact>) {
        *self.contacts.lock().unwrap_or_else(|p| p.into_inner()) = contacts;
    }

    /// The origins the call sent HTTP requests to, by origin.
    pub fn contacts(&self) -> Vec<HostContact> {
        self.contacts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// One origin a call sent HTTP requests to (`wasi:http`), for the audit.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostContact {
    /// `scheme://host:port`.
    pub origin: String,
    /// Requests sent to it.
    pub requests: u32,
    /// Request body bytes sent.
    pub bytes_out: u64,
    /// Response body bytes received (as far as the plugin read them).
    pub bytes_in: u64,
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("agent", &self.agent)
            .field("deadline", &self.deadline)
            .field("session", &self.session)
            .field("token", &self.token)
            .field("trace", &self.trace)
            .finish_non_exhaustive()
    }
}

/// Something a plugin reported while it ran.
#[derive(Debug, Clone, PartialEq)]
pub enum PluginEvent {
    /// A log line.
    Log {
        /// Severity: trace, debug, info, warn, error.
        level: &'static str,
        /// The line.
        message: String,
    },
    /// Progress of a long call.
    Progress {
        /// Progress so far.
        progress: f64,
        /// Total, when known.
        total: Option<f64>,
        /// Human-readable status.
        message: Option<String>,
    },
}

#[cfg(test)]
mod tests;
