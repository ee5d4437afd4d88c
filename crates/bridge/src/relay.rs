//! The voice relay: speech-to-speech WebSocket sessions in the OpenAI
//! Realtime and Gemini Live wire formats, relayed to the upstream voice
//! API, with the agent's tools declared and run by the host.
//!
//! The official SDKs are pointed at the host by their base-URL options:
//! the `openai` SDK connects to `<base>/realtime?model=...` with its key in
//! `Authorization: Bearer`; the `google-genai` SDK to
//! `<base>/ws/google.ai.generativelanguage.<version>.GenerativeService.BidiGenerateContent`
//! with its key in `x-goog-api-key`, over `wss://` only. The key a client
//! sends is its agent's toolhost token; the relay connects upstream with the
//! operator's own key, which the client never sees.
//!
//! What the relay does to the conversation, and nothing more:
//!
//! - **Declarations.** The relay owns the tool declarations: the agent's
//!   tools at the session's current tier ([`crate::Bridge`]), beside any
//!   tools the client declares itself (a client tool named like one of the
//!   agent's is dropped). OpenAI: the relay sends `session.update` once the
//!   upstream says `session.created`, and puts its tools into every
//!   `session.update` of the client. Gemini: the relay puts them into the
//!   client's `setup`, asks for session resumption, and declares tools
//!   whose tier is above FAST `NON_BLOCKING`.
//! - **Turns.** Each user transcript the upstream reports (OpenAI
//!   `conversation.item.input_audio_transcription.completed`; Gemini
//!   `serverContent.inputTranscription`, whose pieces are joined until the
//!   turn completes) starts a turn: the seed's selector, the agent's
//!   ceiling and cap, a DM override. When the visible set changes (a turn,
//!   an override, a plugin added or removed, checked every second), the
//!   relay re-declares: OpenAI `session.update`; Gemini, whose tools are
//!   fixed at `setup`, by resuming the session on a new upstream connection
//!   with the new setup and the last resumption handle, unseen by the
//!   client (until the upstream has given a handle, the change waits).
//! - **Calls.** A function call of the upstream for anything but the
//!   client's own tools runs through the host's pipeline (allow-list, the
//!   turn's tier and cap, schema, cache, audit); a tool the agent may not
//!   see is answered as an unknown one. The output goes back upstream
//!   (OpenAI `function_call_output` and `response.create`; Gemini
//!   `toolResponse`, with `scheduling` for a NON_BLOCKING function:
//!   `INTERRUPT` in a FAST turn, where the player waits on the answer,
//!   `WHEN_IDLE` otherwise). The client sees the call events pass, and an
//!   answer it sends itself to a call the relay runs is dropped.
//! - **Everything else** passes unchanged, both ways; but a client message
//!   the relay cannot read as one JSON object (an empty frame, a binary
//!   frame that is not UTF-8, a lone surrogate escape) closes the session
//!   with 1008: what the relay has not checked never reaches the upstream.
//!
//! What the operator decides: the models clients may ask for
//! (`voice.openai.models`, `voice.gemini.models`; by default the configured
//! `model` only: OpenAI's `?model=` and `session.model`, Gemini's
//! `setup.model`), and caps on generation settings (`max_output_tokens`,
//! set on every session, and `max_temperature`). A client asking for
//! another model gets an error (OpenAI: an `error` event, then a close with
//! 1008; Gemini: a close with 1008 and the reason) and the upstream never
//! hears of it. Only `model` goes upstream in OpenAI's query. A Gemini
//! resumption handle is passed upstream only for the agent whose session
//! received it ([`handles`]).
//!
//! Bounds: each message is at most `voice.max_message_bytes`; each side's
//! unsent messages at most `voice.max_buffered_bytes` per session and
//! `voice.max_buffered_total_bytes` for all sessions together, an agent's
//! sessions at most its share of that total (as its share of the
//! sessions), each message counting its bytes and [`budget::FRAME_COST`]
//! more (a session past any of them is closed with 1008); `voice.max_sessions` sessions at once, an
//! agent at most `voice.max_sessions_per_agent` of them (503 with
//! `Retry-After` past either); a session where neither side sent a message
//! for `voice.session_idle_secs` is closed (1000), and so is a Gemini
//! client that sends no setup within `voice.setup_timeout_secs` (1008); 8
//! calls run at once per session (an upstream's further calls wait, 64 at
//! most started and unanswered: past it the session is closed, 1014). When
//! a session ends, its upstream connection and tasks end with it. When the
//! upstream fails or closes, the client's session is closed with a close
//! code and a reason saying so: 1014 (bad gateway) when the upstream fails,
//! closes or says nothing for 15 s after connecting, 1009 for a message
//! over the cap. Before the upgrade, HTTP answers 502 when the upstream
//! cannot be reached, 404 for a path or format not served.
//!
//! Stopping ([`Relay::drain`], on SIGTERM): each session's calls in flight
//! finish and their outputs go upstream, then the client is closed with
//! 1001; calls the upstream makes meanwhile are answered as closed.

use crate::{Bridge, Format};
use axum::extract::FromRequestParts as _;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use budget::{Full, Outbox};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};
use toolhost_config::{VoiceConfig, VoiceUpstream};
use toolhost_core::{Pipeline, TurnCues};

mod budget;
mod handles;
mod policy;

pub use policy::{DEFAULT_GEMINI_MODEL, DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_OPENAI_MODEL};

/// The default cap on one WebSocket message.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;
/// The default cap on one side's unsent messages.
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 8 << 20;
/// The default cap on all sessions' unsent messages together.
pub const DEFAULT_MAX_BUFFERED_TOTAL_BYTES: usize = 128 << 20;
/// The default cap on relayed sessions at once.
pub const DEFAULT_MAX_SESSIONS: usize = 200;
/// How long a session may go without a message either way, by default.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(120);
/// How long a Gemini client has to send its setup, by default.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the relay checks whether the visible tools changed without a
/// turn (an override set or expired, a plugin added or removed).
const REFRESH: Duration = Duration::from_secs(1);

/// The calls one session runs at once; later ones wait their turn.
const CALLS_AT_ONCE: usize = 8;

/// The most calls a session holds started and not yet answered (running
/// or waiting their turn); an upstream asking for more closes it (1014).
const CALLS_QUEUED: usize = 64;

/// The most call ids a session remembers as the relay's (older ones are
/// forgotten: a client's late answer to one then reaches the upstream,
/// which refuses it as answered).
const REMEMBERED_CALLS: usize = 4096;

/// How long the upstream has to send its first event (OpenAI
/// `session.created`; Gemini `setupComplete`, once the client's setup went).
const FIRST_EVENT_WAIT: Duration = Duration::from_secs(15);

/// How long a closing session waits for its close frame to be written.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// How long an ended session's upstream writer has to send what was
/// queued and the close; then it is stopped, and the connection closed.
const UPSTREAM_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The largest message a refused session reads (and drops) from its client.
const REFUSED_MESSAGE_BYTES: usize = 64 * 1024;

/// How long a refused session waits for its close to be written and
/// answered.
const REFUSED_WAIT: Duration = Duration::from_secs(2);

/// How long the relay waits for an upstream to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Gemini Live's path, after the version.
const GEMINI_PATH: (&str, &str) = ("/ws/google.ai.generativelanguage.", ".GenerativeService.BidiGenerateContent");

/// Why the relay cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The `voice:` config is unusable.
    #[error("voice.{0}")]
    Config(String),
}

/// One upstream voice API, ready to connect to.
#[derive(Clone)]
struct Upstream {
    base: String,
    key: String,
    models: policy::Models,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("base", &self.base).field("key", &"<redacted>").finish()
    }
}

impl Upstream {
    fn from_config(which: &str, cfg: &VoiceUpstream, default_env: &str) -> Result<Upstream, RelayError> {
        let url = url::Url::parse(&cfg.url)
            .map_err(|e| RelayError::Config(format!("{which}.url {:?} is not a URL: {e}", cfg.url)))?;
        if !matches!(url.scheme(), "ws" | "wss") || url.query().is_some() || url.fragment().is_some() {
            return Err(RelayError::Config(format!(
                "{which}.url must be a ws:// or wss:// base URL without query, like wss://api.openai.com/v1; got {:?}",
                cfg.url
            )));
        }
        let env = cfg.api_key_env.as_deref().unwrap_or(default_env);
        let key = std::env::var(env).ok().filter(|k| !k.is_empty()).ok_or_else(|| {
            RelayError::Config(format!(
                "{which}: the operator's API key is read from ${env} (voice.{which}.api_key_env), which is not set"
            ))
        })?;
        let models = policy::Models::from_config(cfg, which == "gemini")?;
        Ok(Upstream { base: cfg.url.trim_end_matches('/').to_string(), key, models })
    }
}

/// The relay: [`Relay::serve`] takes an authenticated session request.
#[derive(Debug)]
pub struct Relay {
    host: Arc<Pipeline>,
    openai: Option<Upstream>,
    gemini: Option<Upstream>,
    max_message: usize,
    max_buffered: usize,
    total: Arc<budget::Total>,
    max_sessions: usize,
    per_agent: usize,
    idle: Duration,
    setup_wait: Duration,
    caps: policy::Caps,
    slots: Arc<Slots>,
    handles: handles::Handles,
    /// Set once the host stops: every session ends after its calls.
    stopping: watch::Sender<bool>,
}

/// The sessions open, in all and by agent (with the agent's share of what
/// the queues may hold).
#[derive(Debug, Default)]
struct Slots {
    open: Mutex<Open>,
}

/// Sessions open in all, and by agent with the agent's share.
type Open = (usize, HashMap<String, (usize, Arc<budget::Total>)>);

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One session counted against `voice.max_sessions` and its agent's share
/// until dropped.
struct SessionSlot {
    slots: Arc<Slots>,
    agent: String,
    /// The agent's share of `voice.max_buffered_total_bytes`.
    share: Arc<budget::Total>,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut open = self.slots.lock();
        open.0 -= 1;
        if let Some((n, _)) = open.1.get_mut(&self.agent) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.agent);
            }
        }
    }
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(json!({"error": {"code": code, "message": message}}))).into_response()
}

fn busy(message: &str) -> Response {
    let mut r = refuse(StatusCode::SERVICE_UNAVAILABLE, "capacity_exceeded", message);
    r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("5"));
    r
}

impl Relay {
    /// A relay for the upstreams `cfg` configures; `None` when it
    /// configures none. Fails when a URL is unusable, a model list does not
    /// hold its default, or an API key is missing from the environment.
    pub fn new(host: Arc<Pipeline>, cfg: &VoiceConfig) -> Result<Option<Relay>, RelayError> {
        let openai = cfg.openai.as_ref().map(|u| Upstream::from_config("openai", u, "OPENAI_API_KEY")).transpose()?;
        let gemini = cfg.gemini.as_ref().map(|u| Upstream::from_config("gemini", u, "GEMINI_API_KEY")).transpose()?;
        if openai.is_none() && gemini.is_none() {
            return Ok(None);
        }
        let max_sessions = cfg.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS).max(1);
        let max_buffered = cfg.max_buffered_bytes.unwrap_or(DEFAULT_MAX_BUFFERED_BYTES).max(64 * 1024);
        let total = cfg.max_buffered_total_bytes.unwrap_or(DEFAULT_MAX_BUFFERED_TOTAL_BYTES).max(max_buffered);
        if cfg.max_temperature.is_some_and(|t| !t.is_finite() || t < 0.0) {
            return Err(RelayError::Config("max_temperature must be a number of at least 0".into()));
        }
        Ok(Some(Relay {
            host,
            openai,
            gemini,
            max_message: cfg.max_message_bytes.unwrap_or(DEFAULT_MAX_MESSAGE_BYTES).max(64 * 1024),
            max_buffered,
            total: Arc::new(budget::Total::new(total)),
            max_sessions,
            per_agent: cfg.max_sessions_per_agent.unwrap_or(max_sessions / 4).clamp(1, max_sessions),
            idle: cfg
                .session_idle_secs
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_SESSION_IDLE)
                .max(Duration::from_secs(1)),
            setup_wait: cfg
                .setup_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_SETUP_TIMEOUT)
                .max(Duration::from_secs(1)),
            caps: policy::Caps {
                max_output_tokens: cfg.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS).max(1),
                max_temperature: cfg.max_temperature,
            },
            slots: Arc::default(),
            handles: handles::Handles::default(),
            stopping: watch::Sender::new(false),
        }))
    }

    /// Relayed sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.slots.lock().0
    }

    /// What every session's queues hold now, in bytes (each message
    /// counting [`budget::FRAME_COST`] more than its payload).
    pub fn buffered_bytes(&self) -> usize {
        self.total.held()
    }

    /// The host stops: each open session ends once its calls in flight have
    /// finished and their outputs are queued upstream, its client closed
    /// with 1001. (New sessions are refused by the front meanwhile.) Wait
    /// for [`Relay::open_sessions`] to reach 0.
    pub fn drain(&self) {
        self.stopping.send_replace(true);
    }

    /// Counts a session of `agent`, or says why a full relay or a full
    /// share refuses it (503).
    fn admit(&self, agent: &str) -> Result<SessionSlot, String> {
        let mut open = self.slots.lock();
        if open.0 >= self.max_sessions {
            return Err(format!(
                "this host relays at most {} voice sessions at once (voice.max_sessions)",
                self.max_sessions
            ));
        }
        let mine = open.1.get(agent).map_or(0, |(n, _)| *n);
        if mine >= self.per_agent {
            return Err(format!(
                "this agent has {mine} voice sessions open, its share of this host (voice.max_sessions_per_agent)"
            ));
        }
        open.0 += 1;
        // An agent's sessions hold at most its share of the total: as many
        // sessions' worth as its share of the sessions.
        let share = (self.total.max() / self.max_sessions).saturating_mul(self.per_agent).max(self.max_buffered);
        let (n, share) =
            open.1.entry(agent.to_string()).or_insert_with(|| (0, Arc::new(budget::Total::share(share, &self.total))));
        *n += 1;
        Ok(SessionSlot { slots: self.slots.clone(), agent: agent.to_string(), share: share.clone() })
    }

    /// Serves one session request for `agent` at `path` (after `/voice`
    /// and the agent's slug): connects upstream, then upgrades the client.
    pub async fn serve(self: Arc<Self>, agent: String, path: String, request: axum::extract::Request) -> Response {
        let (format, upstream, url) = if path == "/realtime" {
            let Some(up) = &self.openai else {
                return refuse(StatusCode::NOT_FOUND, "not_found", "no OpenAI Realtime upstream: set voice.openai.url");
            };
            // Only the model goes upstream, and only one the operator allows.
            let asked = request
                .uri()
                .query()
                .and_then(|q| url::form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "model"))
                .map(|(_, v)| v.into_owned());
            let model = match up.models.pick(asked.as_deref()) {
                Ok(m) => m,
                Err(e) => return refuse_in_session(request, Format::OpenAiRealtime, e).await,
            };
            let query: String =
                url::form_urlencoded::Serializer::new(String::new()).append_pair("model", &model).finish();
            (Format::OpenAiRealtime, up.clone(), format!("{}/realtime?{query}", up.base))
        } else if let Some(version) =
            path.strip_prefix(GEMINI_PATH.0).and_then(|v| v.strip_suffix(GEMINI_PATH.1)).filter(|v| is_version(v))
        {
            let Some(up) = &self.gemini else {
                return refuse(StatusCode::NOT_FOUND, "not_found", "no Gemini Live upstream: set voice.gemini.url");
            };
            (Format::GeminiLive, up.clone(), format!("{}{}{version}{}", up.base, GEMINI_PATH.0, GEMINI_PATH.1))
        } else {
            return refuse(
                StatusCode::NOT_FOUND,
                "not_found",
                "the voice relay serves /voice/realtime (OpenAI Realtime) and /voice/ws/google.ai.generativelanguage.<version>.GenerativeService.BidiGenerateContent (Gemini Live)",
            );
        };
        let (mut parts, _) = request.into_parts();
        let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
            Ok(u) => u,
            Err(e) => return e.into_response(),
        };
        let bridge = match Bridge::new(self.host.clone(), &agent, format) {
            Ok(b) => Arc::new(b),
            Err(e) => return refuse(StatusCode::NOT_FOUND, "not_found", &e.to_string()),
        };
        let slot = match self.admit(&agent) {
            Ok(s) => s,
            Err(why) => return busy(&why),
        };
        let up = match connect(&url, format, &upstream.key, self.max_message).await {
            Ok(up) => up,
            Err(e) => {
                tracing::warn!(agent, format = format.as_str(), "voice upstream unreachable: {e}");
                return refuse(StatusCode::BAD_GATEWAY, "unavailable", &format!("the upstream voice API: {e}"));
            }
        };
        tracing::info!(agent, format = format.as_str(), session = bridge.session_id(), "voice session relayed");
        let relay = self.clone();
        upgrade
            .max_message_size(self.max_message)
            .max_frame_size(self.max_message)
            .on_upgrade(move |client| async move {
                let session = Session::new(relay, bridge, url, upstream);
                session.run(client, up, slot.share.clone()).await;
                drop(slot);
            })
            .into_response()
    }
}

/// A session refused once open, so that the client's SDK shows why: an
/// OpenAI `error` event (`model_not_allowed`), then a close with 1008 and
/// the reason. Nothing is connected upstream. What the client sends
/// meanwhile is read in frames of at most [`REFUSED_MESSAGE_BYTES`], for
/// at most [`REFUSED_WAIT`]: a refused session holds next to nothing.
async fn refuse_in_session(request: axum::extract::Request, format: Format, message: String) -> Response {
    let (mut parts, _) = request.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(u) => u,
        Err(_) => return refuse(StatusCode::BAD_REQUEST, "invalid_input", &message),
    };
    upgrade
        .max_message_size(REFUSED_MESSAGE_BYTES)
        .max_frame_size(REFUSED_MESSAGE_BYTES)
        .on_upgrade(move |client| async move {
            let (mut tx, mut rx) = client.split();
            if format == Format::OpenAiRealtime {
                let event = json!({"type": "error", "event_id": "event_relay_refused", "error": {
                    "type": "invalid_request_error", "code": "model_not_allowed", "message": message, "param": "model"}});
                let _ = tx.send(Message::text(event.to_string())).await;
            }
            let close = Close::new(1008, message);
            let _ = tokio::time::timeout(
                REFUSED_WAIT,
                tx.send(Message::Close(Some(CloseFrame { code: close.code, reason: close.reason.into() }))),
            )
            .await;
            let _ = tokio::time::timeout(REFUSED_WAIT, async {
                while let Some(Ok(m)) = rx.next().await {
                    if matches!(m, Message::Close(_)) {
                        break;
                    }
                }
            })
            .await;
        })
        .into_response()
}

/// `v1beta`, `v1alpha`, `v1`: letters and digits.
fn is_version(v: &str) -> bool {
    !v.is_empty() && v.len() <= 16 && v.bytes().all(|b| b.is_ascii_alphanumeric())
}

type UpStream = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the upstream WebSocket with the operator's key.
async fn connect(url: &str, format: Format, key: &str, max_message: usize) -> Result<UpStream, String> {
    let mut request = url.into_client_request().map_err(|e| format!("bad URL: {e}"))?;
    let value = match format {
        Format::OpenAiRealtime => format!("Bearer {key}"),
        Format::GeminiLive => key.to_string(),
    };
    let name = match format {
        Format::OpenAiRealtime => "authorization",
        Format::GeminiLive => "x-goog-api-key",
    };
    request.headers_mut().insert(name, value.parse().map_err(|_| "the API key is not a valid header value")?);
    let config = tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(r))) => Err(format!("it answered HTTP {}", r.status())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no connection within {} s", CONNECT_TIMEOUT.as_secs())),
    }
}

/// Why a session ends, as the client is told.
struct Close {
    code: u16,
    reason: String,
}

impl Close {
    fn new(code: u16, reason: impl Into<String>) -> Close {
        let mut reason = reason.into();
        // A close frame's reason is at most 123 bytes.
        if reason.len() > 120 {
            let mut end = 120;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Close { code, reason }
    }
}

/// A relayed call's events for the upstream, and its place in the
/// session's count of calls in flight (given back when dropped: once
/// queued upstream, or with the channel of a session that ended).
struct Answered(Vec<Value>, InFlight);

/// One call counted in a session's calls in flight until dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn count(n: &Arc<AtomicUsize>) -> InFlight {
        n.fetch_add(1, Ordering::AcqRel);
        InFlight(n.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the upstream writer is told.
enum ToUpstream {
    Send(tungstenite::Message),
    /// Resumed on a new connection: write there from now on.
    Swap(futures::stream::SplitSink<UpStream, tungstenite::Message>),
    Close,
}

/// One relayed session.
struct Session {
    relay: Arc<Relay>,
    bridge: Arc<Bridge>,
    /// Bounds the calls this session runs at once: an upstream sending call
    /// after call queues them here, not on the host's blocking threads.
    running: Arc<tokio::sync::Semaphore>,
    /// Calls started and not yet answered (running or waiting their turn).
    in_flight: Arc<AtomicUsize>,
    url: String,
    upstream: Upstream,
    /// The client's own function tools (declarations) and their names.
    client_tools: Vec<Value>,
    client_names: HashSet<String>,
    /// Call ids the relay answers: the client's answers to them are dropped.
    ours: HashSet<String>,
    /// Gemini: the client's setup, the last resumption handle, the user's
    /// words so far this turn, and a re-declaration waiting for a handle.
    setup: Option<Value>,
    handle: Option<String>,
    heard: String,
    redeclare: bool,
    /// Gemini: the client asked for resumption updates itself.
    client_resumes: bool,
    /// The tools were declared upstream once.
    declared: bool,
    /// Gemini: the connection a resumption replaced, read until it ends (a
    /// call the model made there, before it heard of the new one, is still
    /// answered).
    retired: Option<futures::stream::SplitStream<UpStream>>,
    /// When either side last sent a message (pings aside).
    last_message: Instant,
    /// The host is stopping: the session ends once its calls are answered.
    stopping: bool,
}

impl Session {
    fn new(relay: Arc<Relay>, bridge: Arc<Bridge>, url: String, upstream: Upstream) -> Session {
        Session {
            relay,
            bridge,
            running: Arc::new(tokio::sync::Semaphore::new(CALLS_AT_ONCE)),
            in_flight: Arc::default(),
            url,
            upstream,
            client_tools: Vec::new(),
            client_names: HashSet::new(),
            ours: HashSet::new(),
            setup: None,
            handle: None,
            heard: String::new(),
            redeclare: false,
            client_resumes: false,
            declared: false,
            retired: None,
            last_message: Instant::now(),
            stopping: false,
        }
    }

    async fn run(mut self, client: WebSocket, upstream: UpStream, share: Arc<budget::Total>) {
        let started = Instant::now();
        let (max_buffered, total) = (self.relay.max_buffered, share);
        let (mut client_tx, mut client_rx) = client.split();
        let (up_tx, mut up_rx) = upstream.split();
        let (to_client, mut client_queue) = budget::outbox::<Message>(max_buffered, &total);
        let (to_up, mut up_queue) = budget::outbox::<ToUpstream>(max_buffered, &total);
        // The writers: each drains its queue into its side.
        // On `close_now` the writer drops what is queued and sends only the
        // close frame: a client that stopped reading gets it (and its
        // reason) once it reads again, within CLOSE_WAIT.
        let (close_now, mut closing) = tokio::sync::oneshot::channel::<CloseFrame>();
        let client_writer = tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    frame = &mut closing => {
                        drop(client_queue);
                        if let Ok(frame) = frame {
                            let _ = tokio::time::timeout(CLOSE_WAIT, client_tx.send(Message::Close(Some(frame)))).await;
                        }
                        break;
                    }
                    m = client_queue.recv() => {
                        let Some(m) = m else { break };
                        let len = message_len(&m);
                        if client_tx.send(m).await.is_err() {
                            break;
                        }
                        client_queue.sent(len);
                    }
                }
            }
        });
        let upstream_writer = tokio::spawn(async move {
            let mut sink = up_tx;
            while let Some(m) = up_queue.recv().await {
                match m {
                    ToUpstream::Send(m) => {
                        let len = m.len();
                        if sink.send(m).await.is_err() {
                            break;
                        }
                        up_queue.sent(len);
                    }
                    ToUpstream::Swap(new) => {
                        up_queue.sent(0);
                        let mut old = std::mem::replace(&mut sink, new);
                        let _ = tokio::time::timeout(UPSTREAM_CLOSE_WAIT, old.close()).await;
                    }
                    ToUpstream::Close => {
                        let _ = sink.close().await;
                        break;
                    }
                }
            }
        });
        let (calls_tx, mut calls_rx) = mpsc::unbounded_channel::<Answered>();
        let mut changes = self.relay.host.registry().subscribe();
        let mut stopping = self.relay.stopping.subscribe();
        let mut refresh = tokio::time::interval(REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // An upstream that accepts and then says nothing is given up on.
        let silence = tokio::time::sleep(FIRST_EVENT_WAIT);
        tokio::pin!(silence);
        let mut heard_upstream = false;
        let close = loop {
            tokio::select! {
                // (Gemini's upstream speaks once the client's setup is in.)
                () = &mut silence, if !heard_upstream && (self.setup.is_some() || self.bridge.format() == Format::OpenAiRealtime) => {
                    break Close::new(1014, format!("the upstream voice API sent nothing within {} s", FIRST_EVENT_WAIT.as_secs()))
                }
                m = client_rx.next() => match m {
                    Some(Ok(Message::Text(t))) => {
                        self.last_message = Instant::now();
                        if let Err(c) = self.on_client(t.as_str(), &to_client, &to_up) { break c }
                    }
                    Some(Ok(Message::Binary(b))) => {
                        self.last_message = Instant::now();
                        // Text in a binary frame is read as text: a client
                        // must not slip an event past the relay's checks.
                        if let Ok(t) = std::str::from_utf8(&b) {
                            let t = t.to_string();
                            if let Err(c) = self.on_client(&t, &to_client, &to_up) { break c }
                            continue;
                        }
                        // Neither API takes anything but JSON from a client.
                        break self.refuse_client("a client message must be one JSON object (RFC 8259); this binary frame is not UTF-8")
                    }
                    Some(Ok(Message::Close(_))) | None => break Close::new(1000, ""),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break client_error(&e.to_string()),
                },
                m = up_rx.next() => match m {
                    Some(Ok(tungstenite::Message::Text(t))) => {
                        heard_upstream = true;
                        self.last_message = Instant::now();
                        if let Err(c) = self.on_upstream(t.as_str(), &to_client, &to_up, &calls_tx, &mut up_rx).await { break c }
                    }
                    Some(Ok(tungstenite::Message::Binary(b))) => {
                        heard_upstream = true;
                        self.last_message = Instant::now();
                        // Gemini Live sends its JSON messages as binary frames.
                        let text = match std::str::from_utf8(&b) { Ok(t) => Some(t.to_string()), Err(_) => None };
                        match text {
                            Some(t) if self.bridge.format() == Format::GeminiLive => {
                                if let Err(c) = self.on_upstream(&t, &to_client, &to_up, &calls_tx, &mut up_rx).await { break c }
                            }
                            _ => {
                                let len = b.len();
                                if let Err(full) = to_client.push(Message::Binary(b), len) { break client_full(full) }
                            }
                        }
                    }
                    Some(Ok(tungstenite::Message::Close(frame))) => {
                        let why = frame.map(|f| format!("{} {}", u16::from(f.code), f.reason)).unwrap_or_default();
                        break Close::new(1014, format!("the upstream voice API closed the session {why}").trim().to_string())
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break upstream_error(&e),
                    None => break Close::new(1014, "the upstream voice API dropped the connection"),
                },
                m = next_of(&mut self.retired) => match m {
                    Some(Ok(tungstenite::Message::Text(t))) => {
                        if let Err(c) = self.on_retired(t.as_str(), &to_client, &to_up, &calls_tx, &mut up_rx).await { break c }
                    }
                    Some(Ok(tungstenite::Message::Binary(b))) => {
                        if let Ok(t) = std::str::from_utf8(&b) {
                            let t = t.to_string();
                            if let Err(c) = self.on_retired(&t, &to_client, &to_up, &calls_tx, &mut up_rx).await { break c }
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => self.retired = None,
                },
                Some(Answered(events, counted)) = calls_rx.recv() => {
                    // An output that cannot be queued ends the session: the
                    // model would otherwise wait on it for ever.
                    if let Err(c) = events.iter().try_for_each(|e| push_up(&to_up, e)) { break c }
                    // Uncounted once queued upstream: a stopping session
                    // never ends with an answer still in this channel.
                    drop(counted);
                    if self.stopping && self.in_flight.load(Ordering::Acquire) == 0 { break going_away() }
                }
                () = async { let _ = stopping.wait_for(|s| *s).await; }, if !self.stopping => {
                    // Calls the upstream makes from now on are answered as
                    // closed; those in flight finish first.
                    self.stopping = true;
                    self.bridge.close();
                    if self.in_flight.load(Ordering::Acquire) == 0 { break going_away() }
                }
                changed = changes.changed() => {
                    if changed.is_ok() && let Err(c) = self.redeclare(&to_up, &mut up_rx).await { break c }
                }
                _ = refresh.tick() => {
                    if let Some(c) = self.overdue(started) { break c }
                    if let Err(c) = self.redeclare(&to_up, &mut up_rx).await { break c }
                }
            }
        };
        self.bridge.close();
        tracing::info!(
            agent = self.bridge.agent(), session = self.bridge.session_id(), code = close.code, reason = %close.reason,
            "voice session ended"
        );
        to_up.push_last(ToUpstream::Close);
        let _ = close_now.send(CloseFrame { code: close.code, reason: close.reason.into() });
        drop((to_client, to_up));
        // Once the close frame is written, the client's messages are read
        // (and dropped) until it answers the close: a socket closed with
        // unread input is reset, and a reset makes the client discard the
        // close frame and its reason. (Not while it is written: a client
        // that floods keeps the reader busy enough to starve the writer of
        // their shared socket, and its flood goes on unanswered.)
        let drain_client = async {
            while let Some(Ok(m)) = client_rx.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        };
        // Neither writer outlives its wait: one stuck on a side that does
        // not read is stopped, and with it what it held and its connection.
        let (stop_up, stop_client) = (upstream_writer.abort_handle(), client_writer.abort_handle());
        let upstream_done = async {
            if tokio::time::timeout(UPSTREAM_CLOSE_WAIT, upstream_writer).await.is_err() {
                stop_up.abort();
            }
        };
        let client_done = async {
            let in_turn = async {
                let _ = client_writer.await;
                drain_client.await;
            };
            if tokio::time::timeout(CLOSE_WAIT + Duration::from_secs(1), in_turn).await.is_err() {
                stop_client.abort();
            }
        };
        tokio::join!(upstream_done, client_done);
    }

    /// A client message refused: the session is closed with 1008 and `why`.
    fn refuse_client(&self, why: &str) -> Close {
        tracing::warn!(agent = self.bridge.agent(), "voice session closed: {why}");
        Close::new(1008, why)
    }

    /// The close of a session gone quiet: no message either way for
    /// `voice.session_idle_secs`, or (Gemini) no setup within
    /// `voice.setup_timeout_secs`; or of a stopping session whose calls are
    /// all answered.
    fn overdue(&self, started: Instant) -> Option<Close> {
        if self.stopping && self.in_flight.load(Ordering::Acquire) == 0 {
            return Some(going_away());
        }
        if self.bridge.format() == Format::GeminiLive
            && self.setup.is_none()
            && started.elapsed() >= self.relay.setup_wait
        {
            return Some(Close::new(
                1008,
                format!("no setup message within {} s (voice.setup_timeout_secs)", self.relay.setup_wait.as_secs()),
            ));
        }
        // A session waiting on a long call of its own is not idle.
        if self.last_message.elapsed() >= self.relay.idle && self.in_flight.load(Ordering::Acquire) == 0 {
            return Some(Close::new(
                1000,
                format!("no message either way for {} s (voice.session_idle_secs)", self.relay.idle.as_secs()),
            ));
        }
        None
    }

    /// A client's text message: Gemini's first is its setup; OpenAI
    /// `session.update` gets the agent's tools; models and generation
    /// settings are held to the operator's; answers to the relay's calls
    /// are dropped; the rest passes.
    fn on_client(&mut self, text: &str, to_client: &Outbox<Message>, to_up: &Outbox<ToUpstream>) -> Result<(), Close> {
        let forward = |t: String| push_text(to_up, t);
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(text) else {
            // Never passed on: an upstream's parser may read what this one
            // refuses (a lone surrogate escape, deeper nesting), and so see
            // a model, a setting or a call's answer the relay never checked.
            return Err(self.refuse_client("a client message must be one JSON object (RFC 8259)"));
        };
        match self.bridge.format() {
            Format::OpenAiRealtime => match event.get("type").and_then(Value::as_str) {
                Some("session.update") => {
                    if let Some(Value::Object(session)) = event.get_mut("session") {
                        if let Some(asked) = session.get("model") {
                            let asked = asked.as_str().unwrap_or("(not a string)");
                            if let Err(e) = self.upstream.models.pick(Some(asked)) {
                                // Refused as the API refuses an event: the
                                // session goes on with its model.
                                let event_id = event.get("event_id").cloned().unwrap_or(Value::Null);
                                let error = json!({"type": "error", "event_id": "event_relay_refused", "error": {
                                    "type": "invalid_request_error", "code": "model_not_allowed", "message": e,
                                    "param": "session.model", "event_id": event_id}});
                                let text = error.to_string();
                                let len = text.len();
                                return to_client.push(Message::text(text), len).map_err(client_full);
                            }
                        }
                        if let Some(Value::Array(tools)) = session.get("tools") {
                            self.take_client_tools(tools.clone());
                        }
                        session.insert("tools".into(), self.with_client_tools(self.bridge.declarations()));
                        self.relay.caps.openai(session, false);
                    }
                }
                Some("response.create") => {
                    if let Some(Value::Object(response)) = event.get_mut("response") {
                        self.relay.caps.openai(response, false);
                    }
                }
                Some("conversation.item.create") => {
                    let item = event.get("item");
                    if item.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("function_call_output")
                        && let Some(id) = item.and_then(|i| i.get("call_id")).and_then(Value::as_str)
                        && self.ours.contains(id)
                    {
                        tracing::debug!("a client's answer to a call the relay runs, dropped");
                        return Ok(());
                    }
                }
                _ => {}
            },
            Format::GeminiLive => {
                if let Some(Value::Object(mut setup)) = event.remove("setup") {
                    if self.setup.is_some() {
                        return Err(Close::new(1008, "a second setup message: a session is set up once"));
                    }
                    // The handle checked must be the one forwarded: one
                    // spelling only.
                    if setup.contains_key("sessionResumption") && setup.contains_key("session_resumption") {
                        return Err(
                            self.refuse_client("setup has both sessionResumption and session_resumption: send one")
                        );
                    }
                    let asked = setup.get("model").map(|m| m.as_str().unwrap_or("(not a string)"));
                    let model = self.upstream.models.pick(asked).map_err(|e| Close::new(1008, e))?;
                    setup.insert("model".into(), Value::String(model));
                    self.relay.caps.gemini(&mut setup);
                    let handle = ["sessionResumption", "session_resumption"]
                        .iter()
                        .find_map(|k| setup.get(*k))
                        .and_then(|r| r.get("handle"))
                        .and_then(Value::as_str)
                        .filter(|h| !h.is_empty());
                    if let Some(h) = handle
                        && !self.relay.handles.given_to(h, self.bridge.agent())
                    {
                        tracing::warn!(
                            agent = self.bridge.agent(),
                            "a resumption handle this agent's sessions were not given, refused"
                        );
                        return Err(Close::new(
                            1008,
                            "this resumption handle was not given to this agent's sessions here; start a new session",
                        ));
                    }
                    let setup = self.gemini_setup(setup);
                    self.setup = Some(setup.clone());
                    return forward(json!({"setup": setup}).to_string());
                }
                // Answers to the relay's calls are dropped, under either
                // spelling of either key.
                let mut answered_any = false;
                let mut left = 0;
                for outer in ["toolResponse", "tool_response"] {
                    let Some(Value::Object(r)) = event.get_mut(outer) else { continue };
                    answered_any = true;
                    for inner in ["functionResponses", "function_responses"] {
                        if let Some(Value::Array(list)) = r.get_mut(inner) {
                            list.retain(|f| {
                                !f.get("id").and_then(Value::as_str).is_some_and(|id| self.ours.contains(id))
                            });
                            left += list.len();
                        }
                    }
                }
                if answered_any && left == 0 {
                    tracing::debug!("a client's answer to a call the relay runs, dropped");
                    return Ok(());
                }
            }
        }
        forward(Value::Object(event).to_string())
    }

    /// An upstream's text message: turns, calls, resumption handles; then
    /// to the client.
    async fn on_upstream(
        &mut self,
        text: &str,
        to_client: &Outbox<Message>,
        to_up: &Outbox<ToUpstream>,
        calls: &mpsc::UnboundedSender<Answered>,
        up_rx: &mut futures::stream::SplitStream<UpStream>,
    ) -> Result<(), Close> {
        let event: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let mut send_to_client = true;
        match self.bridge.format() {
            Format::OpenAiRealtime => match event.get("type").and_then(Value::as_str) {
                Some("session.created") => {
                    self.declared = true;
                    let mut session = json!({
                        "type": "realtime", "tools": self.with_client_tools(self.bridge.declarations()), "tool_choice": "auto",
                    });
                    // The session's default is unbounded ("inf").
                    if let Value::Object(s) = &mut session {
                        self.relay.caps.openai(s, true);
                    }
                    push_up(to_up, &json!({"type": "session.update", "session": session}))?;
                }
                Some("conversation.item.input_audio_transcription.completed") => {
                    let words = event.get("transcript").and_then(Value::as_str).unwrap_or_default().to_string();
                    self.turn(&words, false, to_up, up_rx).await?;
                }
                // Calls the model makes, not items a client created (which
                // the upstream echoes as conversation.item.*).
                Some("response.function_call_arguments.done" | "response.output_item.done") => {
                    self.call(&event, calls)?;
                }
                // Known as the relay's from the moment the call starts: a
                // client cannot answer it first.
                Some("response.output_item.added") => {
                    let item = event.get("item");
                    let name = item.and_then(|i| i.get("name")).and_then(Value::as_str).unwrap_or_default();
                    if item.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("function_call")
                        && !self.client_names.contains(name)
                        && let Some(id) = item.and_then(|i| i.get("call_id")).and_then(Value::as_str)
                    {
                        let id = id.to_string();
                        self.remember(&id);
                    }
                }
                _ => {}
            },
            Format::GeminiLive => {
                if let Some(update) = event.get("sessionResumptionUpdate") {
                    if let Some(h) = update.get("newHandle").and_then(Value::as_str).filter(|h| !h.is_empty()) {
                        self.handle = Some(h.to_string());
                        if self.client_resumes {
                            // Resumable by this agent's sessions only.
                            self.relay.handles.given(h, self.bridge.agent());
                        }
                    }
                    send_to_client = self.client_resumes;
                    if self.redeclare {
                        self.redeclare(to_up, up_rx).await?;
                    }
                }
                if let Some(content) = event.get("serverContent") {
                    if let Some(words) =
                        content.get("inputTranscription").and_then(|t| t.get("text")).and_then(Value::as_str)
                    {
                        let first = self.heard.is_empty();
                        self.heard.push_str(words);
                        let heard = self.heard.clone();
                        self.turn(heard.trim(), !first, to_up, up_rx).await?;
                    }
                    if content.get("turnComplete").and_then(Value::as_bool) == Some(true) {
                        self.heard.clear();
                    }
                }
                if event.get("toolCall").is_some() {
                    self.call(&event, calls)?;
                }
                if event.get("toolCallCancellation").is_some() {
                    let _ = self.bridge.handle_event(&event);
                }
            }
        }
        if send_to_client {
            let len = text.len();
            to_client.push(Message::text(text.to_string()), len).map_err(client_full)?;
        }
        Ok(())
    }

    /// A message of the connection a resumption replaced: its calls and
    /// model output still count; its resumption handles are stale.
    async fn on_retired(
        &mut self,
        text: &str,
        to_client: &Outbox<Message>,
        to_up: &Outbox<ToUpstream>,
        calls: &mpsc::UnboundedSender<Answered>,
        up_rx: &mut futures::stream::SplitStream<UpStream>,
    ) -> Result<(), Close> {
        let stale = serde_json::from_str::<serde_json::Map<String, Value>>(text)
            .is_ok_and(|m| m.contains_key("sessionResumptionUpdate") || m.contains_key("goAway"));
        if stale {
            return Ok(());
        }
        self.on_upstream(text, to_client, to_up, calls, up_rx).await
    }

    /// A function call event: run by the relay unless it is the client's.
    fn call(&mut self, event: &Value, calls: &mpsc::UnboundedSender<Answered>) -> Result<(), Close> {
        let mine = |name: &str| !self.client_names.contains(name);
        match self.bridge.format() {
            Format::OpenAiRealtime => {
                let call = match event.get("item") {
                    Some(item) => item,
                    None => event,
                };
                let is_call = event.get("type").and_then(Value::as_str)
                    == Some("response.function_call_arguments.done")
                    || call.get("type").and_then(Value::as_str) == Some("function_call");
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                if !is_call || !mine(name) {
                    return Ok(());
                }
                if let Some(id) = call.get("call_id").and_then(Value::as_str) {
                    self.remember(id);
                }
            }
            Format::GeminiLive => {
                let Some(list) = event.get("toolCall").and_then(|c| c.get("functionCalls")).and_then(Value::as_array)
                else {
                    return Ok(());
                };
                let ours: Vec<Value> = list
                    .iter()
                    .filter(|c| mine(c.get("name").and_then(Value::as_str).unwrap_or_default()))
                    .cloned()
                    .collect();
                if ours.is_empty() {
                    return Ok(());
                }
                for id in ours.iter().filter_map(|c| c.get("id").and_then(Value::as_str)) {
                    self.remember(id);
                }
                let event = json!({"toolCall": {"functionCalls": ours}});
                return self.run_call(event, calls);
            }
        }
        self.run_call(event.clone(), calls)
    }

    /// Remembers `id` as a call the relay answers.
    fn remember(&mut self, id: &str) {
        if self.ours.len() >= REMEMBERED_CALLS {
            self.ours.clear();
        }
        self.ours.insert(id.to_string());
    }

    fn run_call(&self, event: Value, calls: &mpsc::UnboundedSender<Answered>) -> Result<(), Close> {
        // An upstream asking for call after call queues them behind the
        // session's CALLS_AT_ONCE, each holding its event: at most
        // CALLS_QUEUED of them, or the session ends.
        if self.in_flight.load(Ordering::Acquire) >= CALLS_QUEUED {
            return Err(Close::new(
                1014,
                format!(
                    "the upstream voice API asked for more than {CALLS_QUEUED} function calls at once; session closed"
                ),
            ));
        }
        let (bridge, calls, running) = (self.bridge.clone(), calls.clone(), self.running.clone());
        // Counted until answered: a stopping session waits for it.
        let counted = InFlight::count(&self.in_flight);
        tokio::spawn(async move {
            let events = match running.acquire_owned().await {
                Ok(_permit) => {
                    let answered = tokio::task::spawn_blocking(move || {
                        let out = bridge.handle_event(&event);
                        (out, bridge)
                    })
                    .await;
                    match answered {
                        Ok((Ok(Some(mut events)), bridge)) => {
                            if bridge.format() == Format::GeminiLive {
                                schedule(&bridge, &mut events);
                            }
                            events
                        }
                        Ok((Ok(None), _)) => Vec::new(),
                        Ok((Err(e), _)) => {
                            tracing::warn!("a function call the relay could not answer: {e}");
                            Vec::new()
                        }
                        Err(e) => {
                            tracing::error!("a relayed call failed: {e}");
                            Vec::new()
                        }
                    }
                }
                Err(_) => Vec::new(),
            };
            // Counted until the session has queued it upstream (or the
            // session is gone and the answer dropped with its channel).
            let _ = calls.send(Answered(events, counted));
        });
        Ok(())
    }

    /// Starts a turn for `words` (with `more`, refines the current one: more
    /// words of the same utterance); re-declares when the visible set
    /// changed.
    async fn turn(
        &mut self,
        words: &str,
        more: bool,
        to_up: &Outbox<ToUpstream>,
        up_rx: &mut futures::stream::SplitStream<UpStream>,
    ) -> Result<(), Close> {
        if words.is_empty() {
            return Ok(());
        }
        let words = crate::run::truncate(words, crate::MAX_UTTERANCE_BYTES).0;
        let update = if more {
            self.bridge.refine_tier(&words, TurnCues::default())
        } else {
            self.bridge.update_tier(&words, TurnCues::default())
        };
        match update {
            Ok(update) if update.declare.is_some() => self.declare(to_up, up_rx).await,
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!("a relayed turn not started: {e}");
                Ok(())
            }
        }
    }

    /// Re-declares when the visible set changed since the upstream was told.
    async fn redeclare(
        &mut self,
        to_up: &Outbox<ToUpstream>,
        up_rx: &mut futures::stream::SplitStream<UpStream>,
    ) -> Result<(), Close> {
        // Before its first declaration (OpenAI's answer to session.created,
        // Gemini's setup) the upstream has nothing to be told again.
        if !self.declared {
            return Ok(());
        }
        if self.redeclare || self.bridge.refresh().is_some() {
            return self.declare(to_up, up_rx).await;
        }
        Ok(())
    }

    /// Tells the upstream the tools visible now.
    async fn declare(
        &mut self,
        to_up: &Outbox<ToUpstream>,
        up_rx: &mut futures::stream::SplitStream<UpStream>,
    ) -> Result<(), Close> {
        match self.bridge.format() {
            Format::OpenAiRealtime => {
                let update = json!({
                    "type": "session.update",
                    "session": {"type": "realtime", "tools": self.with_client_tools(self.bridge.declarations())},
                });
                push_up(to_up, &update)
            }
            Format::GeminiLive => {
                let (Some(setup), Some(handle)) = (self.setup.clone(), self.handle.clone()) else {
                    // No handle yet: re-declare once the upstream gives one.
                    self.redeclare = true;
                    return Ok(());
                };
                self.redeclare = false;
                let mut setup = match setup {
                    Value::Object(s) => s,
                    _ => return Ok(()),
                };
                let tools = self.with_client_tools(self.bridge.declarations());
                setup.insert("tools".into(), tools);
                setup.insert("sessionResumption".into(), json!({"handle": handle}));
                let up = connect(&self.url, Format::GeminiLive, &self.upstream.key, self.relay.max_message)
                    .await
                    .map_err(|e| Close::new(1014, format!("the upstream voice API could not be resumed: {e}")))?;
                let (mut tx, mut rx) = up.split();
                tx.send(tungstenite::Message::text(json!({"setup": Value::Object(setup)}).to_string()))
                    .await
                    .map_err(|e| Close::new(1014, format!("the upstream voice API could not be resumed: {e}")))?;
                // The resumed session's setupComplete is the relay's, not the client's.
                let first = tokio::time::timeout(CONNECT_TIMEOUT, rx.next()).await;
                match first {
                    Ok(Some(Ok(m))) if m.to_text().is_ok_and(|t| t.contains("setupComplete")) => {}
                    _ => return Err(Close::new(1014, "the upstream voice API refused to resume the session")),
                }
                tracing::debug!(session = self.bridge.session_id(), "gemini session resumed with new tools");
                to_up.push(ToUpstream::Swap(tx), 0).map_err(up_full)?;
                self.retired = Some(std::mem::replace(up_rx, rx));
                Ok(())
            }
        }
    }

    /// Keeps the client's own function declarations, less any named like
    /// one of the agent's tools.
    fn take_client_tools(&mut self, tools: Vec<Value>) {
        let agents: HashSet<String> = self.bridge.visible_names().into_iter().collect();
        let all = self.relay.host.registry().snapshot();
        self.client_tools = tools
            .into_iter()
            .filter(|t| {
                let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
                let clash = agents.contains(name) || all.get(name).is_some();
                if clash {
                    tracing::warn!(tool = name, "a client tool named like a host tool, dropped");
                }
                !clash
            })
            .collect();
        self.client_names = self
            .client_tools
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
    }

    /// The agent's tools (`ours`, the bridge's declarations) and the
    /// client's own, as one `tools` array (OpenAI's or Gemini's).
    fn with_client_tools(&self, ours: Value) -> Value {
        let mut tools = match ours {
            Value::Array(t) => t,
            _ => Vec::new(),
        };
        tools.extend(self.client_tools.iter().cloned());
        Value::Array(tools)
    }

    /// The client's setup with the agent's tools and resumption asked for.
    fn gemini_setup(&mut self, mut setup: serde_json::Map<String, Value>) -> Value {
        // Client tools: its function declarations (other tool kinds, such as
        // search, pass as they are).
        let mut client = Vec::new();
        let mut names = HashSet::new();
        let all = self.relay.host.registry().snapshot();
        if let Some(Value::Array(tools)) = setup.remove("tools") {
            for mut tool in tools {
                // Both spellings the API accepts are read, so neither slips by.
                let mut empty = true;
                for key in ["functionDeclarations", "function_declarations"] {
                    if let Some(Value::Array(fs)) = tool.get_mut(key) {
                        fs.retain(|f| {
                            let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
                            let clash = all.get(name).is_some();
                            if clash {
                                tracing::warn!(tool = name, "a client tool named like a host tool, dropped");
                            } else {
                                names.insert(name.to_string());
                            }
                            !clash
                        });
                        empty &= fs.is_empty();
                    }
                }
                let declares =
                    tool.get("functionDeclarations").is_some() || tool.get("function_declarations").is_some();
                if declares && empty {
                    continue;
                }
                client.push(tool);
            }
        }
        self.client_tools = client;
        self.client_names = names;
        // One spelling: the relay's re-declarations set `sessionResumption`.
        let resumption = setup.remove("sessionResumption").or_else(|| setup.remove("session_resumption"));
        self.client_resumes = resumption.is_some();
        setup.insert("sessionResumption".into(), resumption.unwrap_or_else(|| json!({})));
        // Turns come from the user's transcript: ask for it.
        if !setup.contains_key("inputAudioTranscription") && !setup.contains_key("input_audio_transcription") {
            setup.insert("inputAudioTranscription".into(), json!({}));
        }
        setup.insert("tools".into(), self.with_client_tools(self.bridge.declarations()));
        self.declared = true;
        Value::Object(setup)
    }
}

/// Gemini `toolResponse`s of NON_BLOCKING functions get their scheduling:
/// `INTERRUPT` in a FAST turn, `WHEN_IDLE` otherwise.
fn schedule(bridge: &Bridge, events: &mut [Value]) {
    let fast = bridge.tier().tier == toolhost_core::budget::Tier::Fast;
    let slow = bridge.non_blocking();
    for e in events {
        let Some(list) =
            e.get_mut("toolResponse").and_then(|r| r.get_mut("functionResponses")).and_then(Value::as_array_mut)
        else {
            continue;
        };
        for r in list {
            let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
            if slow.contains(name) {
                r["scheduling"] = json!(if fast { "INTERRUPT" } else { "WHEN_IDLE" });
            }
        }
    }
}

/// The next message of `stream`, or never when there is none.
async fn next_of(
    stream: &mut Option<futures::stream::SplitStream<UpStream>>,
) -> Option<Result<tungstenite::Message, tungstenite::Error>> {
    match stream {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

fn push_up(to_up: &Outbox<ToUpstream>, event: &Value) -> Result<(), Close> {
    push_text(to_up, event.to_string())
}

/// Queues `text` for the upstream, or the close for a session past its
/// budget.
fn push_text(to_up: &Outbox<ToUpstream>, text: String) -> Result<(), Close> {
    let len = text.len();
    to_up.push(ToUpstream::Send(tungstenite::Message::text(text)), len).map_err(up_full)
}

/// The close of a session whose messages to the upstream passed a bound.
fn up_full(full: Full) -> Close {
    past_bound(full, "the upstream voice API is not keeping up")
}

/// The close of a session whose messages to the client passed a bound.
fn client_full(full: Full) -> Close {
    past_bound(full, "the client is not reading its events")
}

/// The close of a session past `full`, whose own side (`side`) did not
/// keep up when the bound was the session's.
fn past_bound(full: Full, side: &str) -> Close {
    match full {
        Full::Session | Full::Gone => Close::new(1008, format!("{side} (voice.max_buffered_bytes); session closed")),
        Full::Agent => agent_full(),
        Full::Total => total_full(),
    }
}

fn agent_full() -> Close {
    Close::new(
        1008,
        "this agent's sessions hold all their share may (voice.max_buffered_total_bytes, shared as voice.max_sessions_per_agent); session closed",
    )
}

fn total_full() -> Close {
    Close::new(1008, "the relay holds all it may for every session (voice.max_buffered_total_bytes); session closed")
}

/// The close of a session when the host stops.
fn going_away() -> Close {
    Close::new(1001, "the host is stopping; connect again to continue")
}

fn client_error(e: &str) -> Close {
    if e.contains("too long") || e.contains("Message too big") || e.contains("size") {
        Close::new(1009, "a client message over voice.max_message_bytes")
    } else {
        Close::new(1002, format!("client protocol error: {e}"))
    }
}

fn upstream_error(e: &tungstenite::Error) -> Close {
    match e {
        tungstenite::Error::Capacity(_) => {
            Close::new(1014, "the upstream voice API sent a message over voice.max_message_bytes; session closed")
        }
        other => Close::new(1014, format!("the upstream voice API failed: {other}")),
    }
}

fn message_len(m: &Message) -> usize {
    match m {
        Message::Text(t) => t.len(),
        Message::Binary(b) => b.len(),
        _ => 0,
    }
}
