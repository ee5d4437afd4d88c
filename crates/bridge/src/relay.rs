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
//! - **Everything else** passes unchanged, both ways.
//!
//! Bounds: each message is at most `voice.max_message_bytes`, each side's
//! unsent messages at most `voice.max_buffered_bytes` (a side that does not
//! read is closed), `voice.max_sessions` sessions at once, and 8 calls
//! running at once per session (an upstream's further calls wait). When the
//! upstream fails or closes, the client's session is closed with a close
//! code and a reason saying so: 1014 (bad gateway) when the upstream fails,
//! closes or says nothing for 15 s after connecting, 1009 for a message
//! over the cap, 1008 for a side that does not read. Before the upgrade,
//! HTTP answers: 503 with `Retry-After` at the session limit, 502 when
//! the upstream cannot be reached, 404 for a path or format not served.

use crate::{Bridge, Format};
use axum::extract::FromRequestParts as _;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};
use toolhost_core::config::{VoiceConfig, VoiceUpstream};
use toolhost_core::{Host, TurnCues};

/// The default cap on one WebSocket message.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;
/// The default cap on one side's unsent messages.
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 8 << 20;
/// The default cap on relayed sessions at once.
pub const DEFAULT_MAX_SESSIONS: usize = 200;

/// How often the relay checks whether the visible tools changed without a
/// turn (an override set or expired, a plugin added or removed).
const REFRESH: Duration = Duration::from_secs(1);

/// The calls one session runs at once; later ones wait their turn.
const CALLS_AT_ONCE: usize = 8;

/// The most call ids a session remembers as the relay's (older ones are
/// forgotten: a client's late answer to one then reaches the upstream,
/// which refuses it as answered).
const REMEMBERED_CALLS: usize = 4096;

/// How long the upstream has to send its first event (OpenAI
/// `session.created`; Gemini `setupComplete`, once the client's setup went).
const FIRST_EVENT_WAIT: Duration = Duration::from_secs(15);

/// How long a closing session waits for its close frame to be written.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

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
        Ok(Upstream { base: cfg.url.trim_end_matches('/').to_string(), key })
    }
}

/// The relay: [`Relay::serve`] takes an authenticated session request.
#[derive(Debug)]
pub struct Relay {
    host: Arc<Host>,
    openai: Option<Upstream>,
    gemini: Option<Upstream>,
    max_message: usize,
    max_buffered: usize,
    max_sessions: usize,
    sessions: Arc<AtomicUsize>,
}

/// One session counted against `voice.max_sessions` until dropped.
struct SessionSlot(Arc<AtomicUsize>);

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(json!({"error": {"code": code, "message": message}}))).into_response()
}

impl Relay {
    /// A relay for the upstreams `cfg` configures; `None` when it
    /// configures none. Fails when a URL is unusable or an API key is
    /// missing from the environment.
    pub fn new(host: Arc<Host>, cfg: &VoiceConfig) -> Result<Option<Relay>, RelayError> {
        let openai = cfg.openai.as_ref().map(|u| Upstream::from_config("openai", u, "OPENAI_API_KEY")).transpose()?;
        let gemini = cfg.gemini.as_ref().map(|u| Upstream::from_config("gemini", u, "GEMINI_API_KEY")).transpose()?;
        if openai.is_none() && gemini.is_none() {
            return Ok(None);
        }
        Ok(Some(Relay {
            host,
            openai,
            gemini,
            max_message: cfg.max_message_bytes.unwrap_or(DEFAULT_MAX_MESSAGE_BYTES).max(64 * 1024),
            max_buffered: cfg.max_buffered_bytes.unwrap_or(DEFAULT_MAX_BUFFERED_BYTES).max(64 * 1024),
            max_sessions: cfg.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS).max(1),
            sessions: Arc::default(),
        }))
    }

    /// Relayed sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.sessions.load(Ordering::Acquire)
    }

    /// Serves one session request for `agent` at `path` (after `/voice`
    /// and the agent's slug): connects upstream, then upgrades the client.
    pub async fn serve(self: Arc<Self>, agent: String, path: String, request: axum::extract::Request) -> Response {
        let (format, upstream, url) = if path == "/realtime" {
            let Some(up) = &self.openai else {
                return refuse(StatusCode::NOT_FOUND, "not_found", "no OpenAI Realtime upstream: set voice.openai.url");
            };
            let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
            (Format::OpenAiRealtime, up.clone(), format!("{}/realtime{query}", up.base))
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
        if self.sessions.fetch_add(1, Ordering::AcqRel) >= self.max_sessions {
            self.sessions.fetch_sub(1, Ordering::AcqRel);
            let mut r = refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "capacity_exceeded",
                &format!("this host relays at most {} voice sessions at once (voice.max_sessions)", self.max_sessions),
            );
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("5"));
            return r;
        }
        let slot = SessionSlot(self.sessions.clone());
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
                let session = Session::new(relay, bridge, url, upstream.key);
                session.run(client, up).await;
                drop(slot);
            })
            .into_response()
    }
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

/// A queue of messages to one side, bounded by their bytes.
#[derive(Clone)]
struct Outbox<T> {
    tx: mpsc::UnboundedSender<T>,
    bytes: Arc<AtomicUsize>,
    max: usize,
}

impl<T> Outbox<T> {
    fn new(max: usize) -> (Outbox<T>, mpsc::UnboundedReceiver<T>, Arc<AtomicUsize>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let bytes = Arc::new(AtomicUsize::new(0));
        (Outbox { tx, bytes: bytes.clone(), max }, rx, bytes)
    }

    /// Queues `message` of `len` bytes; `false` when the side holds more
    /// than its bound unsent (or is gone).
    fn push(&self, message: T, len: usize) -> bool {
        if self.bytes.fetch_add(len, Ordering::AcqRel) + len > self.max {
            return false;
        }
        self.tx.send(message).is_ok()
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
    url: String,
    key: String,
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
}

impl Session {
    fn new(relay: Arc<Relay>, bridge: Arc<Bridge>, url: String, key: String) -> Session {
        Session {
            relay,
            bridge,
            running: Arc::new(tokio::sync::Semaphore::new(CALLS_AT_ONCE)),
            url,
            key,
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
        }
    }

    async fn run(mut self, client: WebSocket, upstream: UpStream) {
        let max_buffered = self.relay.max_buffered;
        let (mut client_tx, mut client_rx) = client.split();
        let (up_tx, mut up_rx) = upstream.split();
        let (to_client, mut client_queue, client_bytes) = Outbox::<Message>::new(max_buffered);
        let (to_up, mut up_queue, up_bytes) = Outbox::<ToUpstream>::new(max_buffered);
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
                        client_bytes.fetch_sub(len, Ordering::AcqRel);
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
                        up_bytes.fetch_sub(len, Ordering::AcqRel);
                    }
                    ToUpstream::Swap(new) => {
                        let mut old = std::mem::replace(&mut sink, new);
                        let _ = old.close().await;
                    }
                    ToUpstream::Close => {
                        let _ = sink.close().await;
                        break;
                    }
                }
            }
        });
        let (calls_tx, mut calls_rx) = mpsc::unbounded_channel::<Vec<Value>>();
        let mut changes = self.relay.host.registry().subscribe();
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
                        if let Err(c) = self.on_client(t.as_str(), &to_up) { break c }
                    }
                    Some(Ok(Message::Binary(b))) => {
                        // Text in a binary frame is read as text: a client
                        // must not slip an event past the relay's checks.
                        if let Ok(t) = std::str::from_utf8(&b) {
                            let t = t.to_string();
                            if let Err(c) = self.on_client(&t, &to_up) { break c }
                            continue;
                        }
                        let len = b.len();
                        if !to_up.push(ToUpstream::Send(tungstenite::Message::Binary(b)), len) {
                            break up_not_reading()
                        }
                    }
                    Some(Ok(Message::Close(_))) | None => break Close::new(1000, ""),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break client_error(&e.to_string()),
                },
                m = up_rx.next() => match m {
                    Some(Ok(tungstenite::Message::Text(t))) => {
                        heard_upstream = true;
                        if let Err(c) = self.on_upstream(t.as_str(), &to_client, &to_up, &calls_tx, &mut up_rx).await { break c }
                    }
                    Some(Ok(tungstenite::Message::Binary(b))) => {
                        heard_upstream = true;
                        // Gemini Live sends its JSON messages as binary frames.
                        let text = match std::str::from_utf8(&b) { Ok(t) => Some(t.to_string()), Err(_) => None };
                        match text {
                            Some(t) if self.bridge.format() == Format::GeminiLive => {
                                if let Err(c) = self.on_upstream(&t, &to_client, &to_up, &calls_tx, &mut up_rx).await { break c }
                            }
                            _ => {
                                let len = b.len();
                                if !to_client.push(Message::Binary(b), len) { break not_reading() }
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
                Some(events) = calls_rx.recv() => {
                    // An output that cannot be queued ends the session: the
                    // model would otherwise wait on it for ever.
                    if let Err(c) = events.iter().try_for_each(|e| push_up(&to_up, e)) { break c }
                }
                changed = changes.changed() => {
                    if changed.is_ok() && let Err(c) = self.redeclare(&to_up, &mut up_rx).await { break c }
                }
                _ = refresh.tick() => {
                    if let Err(c) = self.redeclare(&to_up, &mut up_rx).await { break c }
                }
            }
        };
        self.bridge.close();
        tracing::info!(
            agent = self.bridge.agent(), session = self.bridge.session_id(), code = close.code, reason = %close.reason,
            "voice session ended"
        );
        let _ = to_up.tx.send(ToUpstream::Close);
        let _ = close_now.send(CloseFrame { code: close.code, reason: close.reason.into() });
        drop(to_client);
        // The client's messages are read (and dropped) until it answers the
        // close: a socket closed with unread input is reset, and a reset
        // makes the client discard the close frame and its reason.
        let drain_client = async {
            while let Some(Ok(m)) = client_rx.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_WAIT + Duration::from_secs(1), async {
            let _ = upstream_writer.await;
            let _ = tokio::join!(client_writer, drain_client);
        })
        .await;
    }

    /// A client's text message: Gemini's first is its setup; OpenAI
    /// `session.update` gets the agent's tools; answers to the relay's
    /// calls are dropped; the rest passes.
    fn on_client(&mut self, text: &str, to_up: &Outbox<ToUpstream>) -> Result<(), Close> {
        let forward = |t: String| push_text(to_up, t);
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(text) else {
            // Not ours to judge: the upstream answers what it cannot parse.
            return forward(text.to_string());
        };
        match self.bridge.format() {
            Format::OpenAiRealtime => match event.get("type").and_then(Value::as_str) {
                Some("session.update") => {
                    if let Some(Value::Object(session)) = event.get_mut("session") {
                        if let Some(Value::Array(tools)) = session.get("tools") {
                            self.take_client_tools(tools.clone());
                        }
                        session.insert("tools".into(), self.with_client_tools(self.bridge.declarations()));
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
                if let Some(Value::Object(setup)) = event.remove("setup") {
                    if self.setup.is_some() {
                        return Err(Close::new(1008, "a second setup message: a session is set up once"));
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
        calls: &mpsc::UnboundedSender<Vec<Value>>,
        up_rx: &mut futures::stream::SplitStream<UpStream>,
    ) -> Result<(), Close> {
        let event: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let mut send_to_client = true;
        match self.bridge.format() {
            Format::OpenAiRealtime => match event.get("type").and_then(Value::as_str) {
                Some("session.created") => {
                    self.declared = true;
                    let update = json!({
                        "type": "session.update",
                        "session": {"type": "realtime", "tools": self.with_client_tools(self.bridge.declarations()), "tool_choice": "auto"},
                    });
                    push_up(to_up, &update)?;
                }
                Some("conversation.item.input_audio_transcription.completed") => {
                    let words = event.get("transcript").and_then(Value::as_str).unwrap_or_default().to_string();
                    self.turn(&words, false, to_up, up_rx).await?;
                }
                // Calls the model makes, not items a client created (which
                // the upstream echoes as conversation.item.*).
                Some("response.function_call_arguments.done" | "response.output_item.done") => {
                    self.call(&event, calls);
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
                    self.call(&event, calls);
                }
                if event.get("toolCallCancellation").is_some() {
                    let _ = self.bridge.handle_event(&event);
                }
            }
        }
        if send_to_client {
            let len = text.len();
            if !to_client.push(Message::text(text.to_string()), len) {
                return Err(not_reading());
            }
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
        calls: &mpsc::UnboundedSender<Vec<Value>>,
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
    fn call(&mut self, event: &Value, calls: &mpsc::UnboundedSender<Vec<Value>>) {
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
                    return;
                }
                if let Some(id) = call.get("call_id").and_then(Value::as_str) {
                    self.remember(id);
                }
            }
            Format::GeminiLive => {
                let Some(list) = event.get("toolCall").and_then(|c| c.get("functionCalls")).and_then(Value::as_array)
                else {
                    return;
                };
                let ours: Vec<Value> = list
                    .iter()
                    .filter(|c| mine(c.get("name").and_then(Value::as_str).unwrap_or_default()))
                    .cloned()
                    .collect();
                if ours.is_empty() {
                    return;
                }
                for id in ours.iter().filter_map(|c| c.get("id").and_then(Value::as_str)) {
                    self.remember(id);
                }
                let event = json!({"toolCall": {"functionCalls": ours}});
                return self.run_call(event, calls);
            }
        }
        self.run_call(event.clone(), calls);
    }

    /// Remembers `id` as a call the relay answers.
    fn remember(&mut self, id: &str) {
        if self.ours.len() >= REMEMBERED_CALLS {
            self.ours.clear();
        }
        self.ours.insert(id.to_string());
    }

    fn run_call(&self, event: Value, calls: &mpsc::UnboundedSender<Vec<Value>>) {
        let (bridge, calls, running) = (self.bridge.clone(), calls.clone(), self.running.clone());
        tokio::spawn(async move {
            let Ok(_permit) = running.acquire_owned().await else { return };
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
                    let _ = calls.send(events);
                }
                Ok((Ok(None), _)) => {}
                Ok((Err(e), _)) => tracing::warn!("a function call the relay could not answer: {e}"),
                Err(e) => tracing::error!("a relayed call failed: {e}"),
            }
        });
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
                let up = connect(&self.url, Format::GeminiLive, &self.key, self.relay.max_message)
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
                if !to_up.push(ToUpstream::Swap(tx), 0) {
                    return Err(up_not_reading());
                }
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

/// Queues `text` for the upstream, or the close for one that does not read.
fn push_text(to_up: &Outbox<ToUpstream>, text: String) -> Result<(), Close> {
    let len = text.len();
    if to_up.push(ToUpstream::Send(tungstenite::Message::text(text)), len) { Ok(()) } else { Err(up_not_reading()) }
}

fn up_not_reading() -> Close {
    Close::new(1008, "the upstream voice API is not reading; session closed")
}

fn not_reading() -> Close {
    Close::new(1008, "the client is not reading its events (voice.max_buffered_bytes); session closed")
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
