//! One relayed session: its state, the writers that drain its queues into
//! each side, and the loop that reads both sides until the session ends.

mod calls;
mod messages;
mod tools;

use super::Relay;
use super::budget::{self, Outbox};
use super::close::{Close, client_error, client_full, going_away, up_full, upstream_error};
use super::upstream::{UpStream, Upstream};
use crate::{Bridge, Format};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use calls::{Answered, CALLS_AT_ONCE};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite;

/// How often the relay checks whether the visible tools changed without a
/// turn (an override set or expired, a plugin added or removed).
const REFRESH: Duration = Duration::from_secs(1);

/// How long the upstream has to send its first event (OpenAI
/// `session.created`; Gemini `setupComplete`, once the client's setup went).
const FIRST_EVENT_WAIT: Duration = Duration::from_secs(15);

/// How long a closing session waits for its close frame to be written.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// How long an ended session's upstream writer has to send what was
/// queued and the close; then it is stopped, and the connection closed.
const UPSTREAM_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What the upstream writer is told.
enum ToUpstream {
    Send(tungstenite::Message),
    /// Resumed on a new connection: write there from now on.
    Swap(futures::stream::SplitSink<UpStream, tungstenite::Message>),
    Close,
}

/// One relayed session.
pub(super) struct Session {
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
    pub(super) fn new(relay: Arc<Relay>, bridge: Arc<Bridge>, url: String, upstream: Upstream) -> Session {
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

    pub(super) async fn run(mut self, client: WebSocket, upstream: UpStream, share: Arc<budget::Total>) {
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

fn message_len(m: &Message) -> usize {
    match m {
        Message::Text(t) => t.len(),
        Message::Binary(b) => b.len(),
        _ => 0,
    }
}
