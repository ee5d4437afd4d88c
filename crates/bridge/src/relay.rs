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
use axum::extract::ws::{CloseFrame, Message, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use toolhost_config::VoiceConfig;
use toolhost_core::Pipeline;

mod budget;
mod close;
mod handles;
mod policy;
mod session;
mod upstream;

use close::Close;
use session::Session;
use upstream::{Upstream, connect};

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

/// The largest message a refused session reads (and drops) from its client.
const REFUSED_MESSAGE_BYTES: usize = 64 * 1024;

/// How long a refused session waits for its close to be written and
/// answered.
const REFUSED_WAIT: Duration = Duration::from_secs(2);

/// Gemini Live's path, after the version.
const GEMINI_PATH: (&str, &str) = ("/ws/google.ai.generativelanguage.", ".GenerativeService.BidiGenerateContent");

/// Why the relay cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The `voice:` config is unusable.
    #[error("voice.{0}")]
    Config(String),
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
