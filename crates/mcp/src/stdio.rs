//! The stdio transport: newline-delimited JSON-RPC on stdin and stdout,
//! as an rmcp [`Transport`] of its own.
//!
//! rmcp's `AsyncRwTransport` over `tokio::io::stdin()`/`stdout()` runs
//! every read and write on the blocking pool (a thread hand-off and a futex
//! wake-up each way), and toolhost's checks used to sit in front of it as a
//! filter task and a duplex pipe: three hand-offs per message in, two out,
//! and one write and flush per response. Here:
//!
//! - input is read on the IO reactor (stdin reopened non-blocking when it is
//!   a pipe, rmcp's [`stdio_pipes`]), and each line goes through
//!   [`check_parsed`] and rmcp's own decoder inside [`Transport::receive`]
//!   (a `tools/call` request straight into rmcp's `CallToolRequest`, see
//!   `tool_call`): no task and no pipe between them;
//! - output is appended to one buffer by [`Transport::send`] (in the order
//!   rmcp sends) and written by one writer task, which takes everything
//!   queued in one write and flushes only when the queue has drained;
//! - malformed lines are answered through the same buffer, so a refusal is
//!   never interleaved with another line;
//! - a client that stops reading its answers stops being read: `receive`
//!   waits while more than [`OUTPUT_HIGH_WATER`] bytes are queued;
//! - a `tools/call` is first offered to [`DirectCalls`] (`serve --stdio`:
//!   the session's call lane), which may answer it itself through the same
//!   buffer, around rmcp's service; at the end of the input every answer
//!   owed goes out before rmcp is told;
//! - the session ends when a write finds that the client closed its end of
//!   the output, and `close` (or [`Replies::finish`], when rmcp drops the
//!   transport unclosed after a failed initialization) returns only once
//!   everything queued is written (for as long as the client reads:
//!   [`OUTPUT_STALL`]), since the session's runtime is shut down right
//!   after it;
//! - a request reusing the id of one in flight, or of one cancelled lately,
//!   is refused (rmcp keeps one entry per id).
//!
//! Every line gets the answer it got before (tested by
//! `mcp::stdio_answers_every_malformed_line_and_keeps_serving`).

use super::jsonrpc::{INVALID_REQUEST, MAX_STDIO_MESSAGE, Rejection, Verdict, check_parsed};
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequest, ClientRequest, ErrorData, JsonRpcError, JsonRpcRequest, JsonRpcResponse, RequestId,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{JsonRpcMessageCodec, JsonRpcMessageCodecError};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::Notify;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder as _;

/// Queued output, in bytes, past which no more input is read until the
/// client has read some.
pub const OUTPUT_HIGH_WATER: usize = 1 << 20;

/// How long the end of the input waits for the answers owed
/// ([`Replies::owe`]) before rmcp is told: rmcp's own wait for its
/// handlers' answers when the input closes.
pub const END_OF_INPUT_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the end of the session waits for the writer while the client
/// reads nothing: what is queued then is given up (the client stopped
/// reading, or left its end of our output open without reading it).
pub const OUTPUT_STALL: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a stdio session polls its input for the next message, once
/// nothing is left to read, before its thread sleeps on it
/// (`server.stdio_input_poll_us`). A client that sends its next request
/// within this window finds the session awake: on a virtual machine,
/// waking a thread whose CPU has gone idle costs tens of microseconds,
/// more than a fast tool's whole call (BENCHMARKS.md, "The stdio hot path
/// as every client sees it"). The window covers the turnaround of the
/// SDK clients measured (Node's is about 250 us). A client that pauses
/// longer costs the session at most this much CPU per message, and the
/// polling thread yields its core to anything else runnable on it.
pub const INPUT_POLL: std::time::Duration = std::time::Duration::from_micros(1000);

/// How many ids of cancelled requests stay refused (see
/// `LineTransport::cancelled`), and how many bytes of ids at most.
const CANCELLED_IDS_KEPT: usize = 1024;
const CANCELLED_ID_BYTES_KEPT: usize = 64 * 1024;

/// The stdio transport of `toolhost serve --stdio`: stdin and stdout
/// (non-blocking pipes when they are pipes, else tokio's blocking handles).
pub type Stdio = LineTransport<BufReader<StdinReader>>;

/// A failed or closed output.
#[derive(Debug, thiserror::Error)]
#[error("the output is closed")]
pub struct OutputClosed;

/// Newline-delimited JSON-RPC over any reader and writer, with toolhost's
/// message checks in `receive` and coalesced writes in `send`.
pub struct LineTransport<R> {
    input: R,
    /// The line being read: kept across calls, because rmcp polls
    /// `receive` in a `select!` and may drop it between two reads.
    line: BytesMut,
    /// Whether the line being read has passed [`MAX_STDIO_MESSAGE`].
    cut: bool,
    codec: JsonRpcMessageCodec<RxJsonRpcMessage<RoleServer>>,
    out: Arc<Outbox>,
    /// Who answers `tools/call` requests around rmcp's service, if anyone.
    direct: Option<Arc<dyn DirectCalls>>,
    /// When the wait for answers owed ends, once the input has ended (rmcp
    /// asks for a new `receive` on every event, so the limit is kept here).
    drain_deadline: Option<tokio::time::Instant>,
    /// The ids of requests passed to rmcp and not answered yet. A request
    /// reusing one is refused: rmcp keeps one entry per id, so a second
    /// request under it took over the first's answer or cancellation, and
    /// one of the two answers was lost (MCP ids are unique in a session).
    in_flight: std::collections::HashSet<RequestId>,
    /// Ids of requests cancelled lately, oldest first (at most
    /// [`CANCELLED_IDS_KEPT`]), also refused: rmcp drops a cancelled
    /// request's answer when its handler ends, which this transport does not
    /// see, and a request reusing the id before then is cancelled with it.
    cancelled: CancelledIds,
    /// How long to poll for input before sleeping on it ([`INPUT_POLL`]).
    input_poll: std::time::Duration,
}

/// The ids of the requests cancelled last, oldest first: at most
/// [`CANCELLED_IDS_KEPT`] of them and [`CANCELLED_ID_BYTES_KEPT`] bytes of
/// string ids (an id may be megabytes long).
#[derive(Debug, Default)]
struct CancelledIds {
    order: std::collections::VecDeque<RequestId>,
    kept: std::collections::HashSet<RequestId>,
    bytes: usize,
}

impl CancelledIds {
    fn size(id: &RequestId) -> usize {
        match id {
            RequestId::String(s) => s.len(),
            RequestId::Number(_) => 8,
        }
    }

    fn keep(&mut self, id: RequestId) {
        let size = Self::size(&id);
        if size > CANCELLED_ID_BYTES_KEPT {
            return;
        }
        while self.order.len() >= CANCELLED_IDS_KEPT || self.bytes + size > CANCELLED_ID_BYTES_KEPT {
            let Some(oldest) = self.order.pop_front() else { break };
            self.bytes -= Self::size(&oldest);
            self.kept.remove(&oldest);
        }
        if self.kept.insert(id.clone()) {
            self.bytes += size;
            self.order.push_back(id);
        }
    }
}

/// Answers `tools/call` requests around rmcp's service (`serve --stdio`'s
/// call lane): rmcp's service spends a task, a cancellation token, a
/// request context and a channel hop on every request, more than a fast
/// tool's whole call. What is not taken goes to rmcp as before.
pub trait DirectCalls: Send + Sync + 'static {
    /// Takes `request` and answers it later through an [`Owed`] of
    /// `replies` (`None`), or gives it back for rmcp's service.
    fn take(
        &self,
        request: JsonRpcRequest<CallToolRequest>,
        replies: &Replies,
    ) -> Option<JsonRpcRequest<CallToolRequest>>;
    /// The client gave up on request `id` (`notifications/cancelled`; rmcp
    /// is told too, for the requests it holds).
    fn cancel(&self, id: &RequestId);
    /// Whether a request taken under `id` has not been answered (or let go)
    /// yet: a request reusing the id is refused.
    fn in_flight(&self, id: &RequestId) -> bool;
    /// Takes a 2025-11-25 task request ([`crate::server::is_legacy_task`])
    /// and answers it later through `replies`; false: rmcp's to answer.
    fn legacy_task(&self, message: &Value, replies: &Replies) -> bool;
}

/// The transport's output, for answers sent around rmcp's service.
#[derive(Debug, Clone)]
pub struct Replies(Arc<Outbox>);

impl Replies {
    /// Closes the output and waits until what is queued is written (as
    /// the transport's `close` does): for a session that ended without
    /// rmcp closing its transport (it drops it when initialization fails),
    /// so that what was answered before still goes out.
    pub async fn finish(&self) {
        self.0.finish().await;
    }

    /// Queues `messages` back to back (notifications of a call still
    /// running); false once the output is closed.
    pub fn send(&self, messages: &[TxJsonRpcMessage<RoleServer>]) -> bool {
        self.0.push_all(messages)
    }

    /// An answer this transport owes: the end of the input is reported to
    /// rmcp (which then closes the output) only once every answer owed has
    /// been sent or dropped, so a client that writes its calls and closes
    /// its end still gets every answer.
    pub fn owe(&self) -> Owed {
        self.0.lock().owed += 1;
        Owed(self.0.clone())
    }

    /// Requests not answered yet, whoever answers them (rmcp's service or
    /// the calls taken around it): what a stop waits for
    /// ([`StdioSession::unanswered`]).
    pub fn unanswered(&self) -> usize {
        self.0.requests.load(std::sync::atomic::Ordering::Acquire) + self.0.lock().owed
    }
}

/// One answer owed (see [`Replies::owe`]), settled when dropped (sent or not).
#[derive(Debug)]
pub struct Owed(Arc<Outbox>);

impl Owed {
    /// Queues `messages` back to back (a call's held notifications, then
    /// its response: nothing of rmcp's comes between them); false once the
    /// output is closed.
    pub fn send(&self, messages: &[TxJsonRpcMessage<RoleServer>]) -> bool {
        self.0.push_all(messages)
    }

    /// Queues one message made here (not rmcp's types).
    pub fn send_value(&self, message: &Value) -> bool {
        self.0.push(message)
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        let settled = {
            let mut s = self.0.lock();
            s.owed -= 1;
            s.owed == 0
        };
        if settled {
            self.0.settled.notify_waiters();
        }
    }
}

/// Output waiting for the writer task.
#[derive(Debug, Default)]
struct Outbox {
    state: Mutex<OutState>,
    /// Wakes the writer: something was queued, or the output closed.
    queued: Notify,
    /// Wakes a reader held back by a full queue.
    drained: Notify,
    /// Wakes a reader at the end of the input when no answer is owed.
    settled: Notify,
    /// Wakes a reader waiting for input when the output closes.
    closing: Notify,
    /// Bytes written so far (the writer's progress).
    written: std::sync::atomic::AtomicU64,
    /// Bytes queued so far.
    queued_bytes: std::sync::atomic::AtomicU64,
    /// Requests passed to rmcp's service and not answered yet (the
    /// transport's `in_flight`, as others may read it).
    requests: std::sync::atomic::AtomicUsize,
    /// The writer task, until the end of the session waits for it
    /// ([`Outbox::finish`]): the session's runtime is shut down right after,
    /// and a write still pending then would be lost.
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How long [`Outbox::finish`] waits with nothing written
    /// ([`OUTPUT_STALL`]; shorter in tests).
    stall: Mutex<std::time::Duration>,
}

#[derive(Debug, Default)]
struct OutState {
    buf: Vec<u8>,
    closed: bool,
    /// Answers owed around rmcp's service ([`Owed`]).
    owed: usize,
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `message` as one line; false once the output is closed. A
    /// message that does not serialize is logged and leaves nothing behind
    /// (never half a line).
    fn push(&self, message: &impl serde::Serialize) -> bool {
        self.push_all(std::slice::from_ref(message))
    }

    /// Appends `messages` back to back, as [`Outbox::push`] does each.
    fn push_all(&self, messages: &[impl serde::Serialize]) -> bool {
        {
            let mut s = self.lock();
            if s.closed {
                return false;
            }
            for message in messages {
                let start = s.buf.len();
                match serde_json::to_writer(&mut s.buf, message) {
                    Ok(()) => {
                        s.buf.push(b'\n');
                        let len = (s.buf.len() - start) as u64;
                        self.queued_bytes.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::error!("could not serialize an outgoing message: {e}");
                        s.buf.truncate(start);
                    }
                }
            }
        }
        self.queued.notify_one();
        true
    }

    fn close(&self) {
        self.lock().closed = true;
        self.queued.notify_one();
        self.drained.notify_waiters();
        self.closing.notify_waiters();
    }

    /// Waits until the output is closed (by the transport, or because the
    /// client closed its end).
    async fn closed(&self) {
        loop {
            let closing = self.closing.notified();
            tokio::pin!(closing);
            closing.as_mut().enable();
            if self.lock().closed {
                return;
            }
            closing.await;
        }
    }

    /// Waits until at most [`OUTPUT_HIGH_WATER`] bytes are queued (or the
    /// output closed).
    async fn room(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let s = self.lock();
                if s.closed || s.buf.len() <= OUTPUT_HIGH_WATER {
                    return;
                }
            }
            drained.await;
        }
    }

    /// Waits until no answer is owed.
    async fn settled(&self) {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            if self.lock().owed == 0 {
                return;
            }
            settled.await;
        }
    }

    /// Closes the output and waits for the writer to write everything
    /// queued, for as long as the client keeps reading: after the stall
    /// limit ([`OUTPUT_STALL`]) with nothing written, what is left is given
    /// up. Waits once; later calls return at once.
    async fn finish(&self) {
        use std::sync::atomic::Ordering;
        self.close();
        let Some(mut writer) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        let stall = *self.stall.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = self.written.load(Ordering::Relaxed);
        loop {
            tokio::select! {
                _ = &mut writer => return,
                () = tokio::time::sleep(stall) => {
                    let now = self.written.load(Ordering::Relaxed);
                    if now == seen {
                        let left = self.queued_bytes.load(Ordering::Relaxed).saturating_sub(now);
                        tracing::warn!(
                            "the session ended; its output was not read for {stall:?}, {left} bytes of it were not written"
                        );
                        writer.abort();
                        return;
                    }
                    seen = now;
                }
            }
        }
    }
}

/// Writes what is queued: everything queued so far in one write, a flush
/// only when nothing more is waiting. Ends when the output closes (after
/// writing what was queued) or fails.
async fn write_out<W: AsyncWrite + Unpin>(out: Arc<Outbox>, mut output: W) {
    let mut chunk = Vec::new();
    let mut dirty = false;
    loop {
        let closed = {
            let mut s = out.lock();
            std::mem::swap(&mut chunk, &mut s.buf);
            s.closed
        };
        if chunk.is_empty() {
            if dirty {
                if output.flush().await.is_err() {
                    break;
                }
                dirty = false;
                // A flush can take a while (a blocking stdout): look again.
                continue;
            }
            if closed {
                break;
            }
            out.queued.notified().await;
            continue;
        }
        // Write by write, so that a slow reader's progress is counted
        // (`Outbox::finish` gives up only on a reader that reads nothing).
        let mut failed = false;
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            match output.write(rest).await {
                Ok(n) if n > 0 => {
                    out.written.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                    rest = &rest[n..];
                }
                _ => {
                    failed = true;
                    break;
                }
            }
        }
        chunk.clear();
        dirty = true;
        out.drained.notify_waiters();
        if failed {
            tracing::debug!("the output failed (the client closed its end?): the session ends");
            break;
        }
    }
    let _ = output.shutdown().await;
    out.close();
}

/// The transport over this process's stdin and stdout. Must be called
/// inside a tokio runtime (the writer is a task of it).
pub fn stdio() -> Stdio {
    let (input, output) = streams::stdio();
    LineTransport::new(BufReader::new(input), output)
}

impl<R: AsyncBufRead + Send + Unpin> LineTransport<R> {
    /// Reads messages from `input` and writes to `output`, through a writer
    /// task spawned on the current tokio runtime.
    pub fn new<W: AsyncWrite + Send + Unpin + 'static>(input: R, output: W) -> LineTransport<R> {
        let out = Arc::new(Outbox { stall: Mutex::new(OUTPUT_STALL), ..Outbox::default() });
        let writer = tokio::spawn(write_out(out.clone(), output));
        *out.writer.lock().unwrap_or_else(|p| p.into_inner()) = Some(writer);
        LineTransport {
            input,
            line: BytesMut::new(),
            cut: false,
            codec: JsonRpcMessageCodec::new(),
            out,
            direct: None,
            drain_deadline: None,
            in_flight: Default::default(),
            cancelled: Default::default(),
            input_poll: INPUT_POLL,
        }
    }

    /// How long the session polls its input for the next message before
    /// its thread sleeps on it ([`INPUT_POLL`] unless set; zero: never).
    pub fn with_input_poll(mut self, window: std::time::Duration) -> LineTransport<R> {
        self.input_poll = window;
        self
    }

    /// Why a request under `id` is refused, if it is: the id is in use by a
    /// request not answered yet, or by one cancelled lately.
    fn id_in_use(&self, id: &RequestId) -> Option<String> {
        if self.in_flight.contains(id) || self.direct.as_ref().is_some_and(|d| d.in_flight(id)) {
            Some("is in use by a request not answered yet".into())
        } else if self.cancelled.kept.contains(id) {
            Some(format!(
                "belongs to a cancelled request, which may still be running (the ids of up to the \
                 last {CANCELLED_IDS_KEPT} cancelled requests stay taken)"
            ))
        } else {
            None
        }
    }

    /// The client cancelled request `id`: it is no longer in flight, and
    /// its id stays refused for a while.
    fn note_cancelled(&mut self, id: RequestId) {
        if self.in_flight.remove(&id) {
            self.cancelled.keep(id);
        }
        self.count_requests();
    }

    /// Publishes how many requests rmcp's service has not answered.
    fn count_requests(&self) {
        self.out.requests.store(self.in_flight.len(), std::sync::atomic::Ordering::Release);
    }

    /// A handle on this transport's output, for messages sent around
    /// rmcp's service (a call's notifications: [`crate::McpFront::with_replies`]).
    pub fn replies(&self) -> Replies {
        Replies(self.out.clone())
    }

    /// This transport with `tools/call` requests offered to `direct` first.
    pub fn with_direct(mut self, direct: Arc<dyn DirectCalls>) -> LineTransport<R> {
        self.direct = Some(direct);
        self
    }

    /// Returns once input is buffered, or after polling for it for
    /// [`LineTransport::with_input_poll`]'s window (the caller then waits
    /// as usual). Each poll yields to the session's other tasks (the
    /// writer), and lets the runtime check its IO without parking. Cancel-safe.
    async fn poll_input(&mut self) {
        if self.input_poll.is_zero() {
            return;
        }
        let until = std::time::Instant::now() + self.input_poll;
        loop {
            let input = &mut self.input;
            let ready = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::pin::Pin::new(&mut *input).poll_fill_buf(cx).is_ready())
            })
            .await;
            if ready || std::time::Instant::now() >= until {
                return;
            }
            // The core goes to anything else runnable on it (a client
            // sharing it), and the session's other tasks run.
            std::thread::yield_now();
            tokio::task::yield_now().await;
        }
    }

    /// Reads until the end of a line, into `self.line` (at most
    /// [`MAX_STDIO_MESSAGE`] bytes of it). Cancel-safe: a dropped call
    /// leaves the partial line in place for the next. `None` at the end of
    /// the input (a last line without its newline is read as a line first).
    async fn read_line(&mut self) -> Option<()> {
        loop {
            self.poll_input().await;
            let buf = self.input.fill_buf().await.ok()?;
            if buf.is_empty() {
                // A last line without its newline (`printf '%s' …`, `echo
                // -n`) is still read, once; then the input has ended.
                let unterminated = self.cut || !self.line.trim_ascii().is_empty();
                return unterminated.then_some(());
            }
            let newline = buf.iter().position(|&b| b == b'\n');
            let chunk = &buf[..newline.unwrap_or(buf.len())];
            let room = MAX_STDIO_MESSAGE.saturating_sub(self.line.len());
            self.cut |= chunk.len() > room;
            self.line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let consumed = newline.map_or(buf.len(), |i| i + 1);
            self.input.consume(consumed);
            if newline.is_some() {
                return Some(());
            }
        }
    }

    /// Queues a refusal; false when the output is gone.
    fn refuse(&self, response: &Value) -> bool {
        self.out.push(response)
    }

    /// What one complete line (in `self.line`) is: a message for rmcp, or
    /// `None` when it was answered here or dropped. Clears the line.
    fn take_message(&mut self) -> Result<Option<RxJsonRpcMessage<RoleServer>>, OutputClosed> {
        let cut = std::mem::take(&mut self.cut);
        let verdict = if cut {
            // The id, when it came before the cut: the client matches the
            // refusal to its call and returns at once.
            Err(Rejection::new(
                crate::jsonrpc::leading_id(&self.line).unwrap_or(Value::Null),
                INVALID_REQUEST,
                format!("Invalid Request: a message over {MAX_STDIO_MESSAGE} bytes"),
            ))
        } else if self.line.trim_ascii().is_empty() {
            self.line.clear();
            return Ok(None);
        } else {
            check_parsed(self.line.trim_ascii())
        };
        match verdict {
            Ok((Verdict::Drop, _)) => {
                tracing::debug!("dropped a malformed notification");
                self.line.clear();
                Ok(None)
            }
            Err(r) => {
                self.line.clear();
                if self.refuse(&r.response) { Ok(None) } else { Err(OutputClosed) }
            }
            Ok((Verdict::Pass, parsed)) => {
                if parsed.get("method").is_some()
                    && let Some(raw) = parsed.get("id")
                    && let Ok(id) = <RequestId as serde::Deserialize>::deserialize(raw)
                    && let Some(why) = self.id_in_use(&id)
                {
                    self.line.clear();
                    let r = Rejection::new(
                        raw.clone(),
                        INVALID_REQUEST,
                        format!("Invalid Request: the id {raw} {why} (MCP ids are unique within a session)"),
                    );
                    return if self.refuse(&r.response) { Ok(None) } else { Err(OutputClosed) };
                }
                if let Some(direct) = &self.direct
                    && crate::server::is_legacy_task(&parsed)
                    && direct.legacy_task(&parsed, &Replies(self.out.clone()))
                {
                    self.line.clear();
                    return Ok(None);
                }
                if let Some(call) = tool_call(&parsed, self.line.trim_ascii()) {
                    self.line.clear();
                    let call = match &self.direct {
                        // Nobody reads the answers any more: the session ends.
                        Some(_) if self.out.lock().closed => return Err(OutputClosed),
                        Some(direct) => match direct.take(call, &Replies(self.out.clone())) {
                            None => return Ok(None),
                            Some(call) => call,
                        },
                        None => call,
                    };
                    return Ok(Some(RxJsonRpcMessage::<RoleServer>::Request(JsonRpcRequest::new(
                        call.id,
                        ClientRequest::CallToolRequest(call.request),
                    ))));
                }
                if parsed.get("method").and_then(Value::as_str) == Some("notifications/cancelled")
                    && let Some(id) = parsed.pointer("/params/requestId")
                    && let Ok(id) = <RequestId as serde::Deserialize>::deserialize(id)
                {
                    if let Some(direct) = &self.direct {
                        direct.cancel(&id);
                    }
                    self.note_cancelled(id);
                }
                // rmcp's own decoder, so that what passes is read exactly as
                // rmcp reads it (non-standard notifications ignored, a shape
                // rmcp does not know answered with -32600).
                let start = self.line.len() - self.line.trim_ascii_start().len();
                let end = self.line.trim_ascii_end().len();
                let mut msg = self.line.split_to(end).split_off(start);
                self.line.clear();
                msg.extend_from_slice(b"\n");
                match self.codec.decode(&mut msg) {
                    Ok(m) => Ok(m),
                    Err(JsonRpcMessageCodecError::Serde(e))
                        if matches!(
                            e.classify(),
                            serde_json::error::Category::Data | serde_json::error::Category::Io
                        ) =>
                    {
                        tracing::debug!("protocol error on an incoming message: {e}");
                        let error = ErrorData::invalid_request("Invalid request", None);
                        let response = json!({"jsonrpc": "2.0", "id": null, "error": error});
                        if self.refuse(&response) { Ok(None) } else { Err(OutputClosed) }
                    }
                    Err(e) => {
                        tracing::debug!("ignoring an unparsable incoming message: {e}");
                        Ok(None)
                    }
                }
            }
        }
    }
}

/// A `tools/call` request (`parsed` is its checked form, `line` its text)
/// read straight as rmcp's `CallToolRequest`: the message rmcp's decoder
/// makes of it, without trying the thirteen request types before
/// `CallToolRequest` in rmcp's untagged `ClientRequest` first (each fails
/// on its method, building an error). Read from the text with rmcp's own
/// types, which refuse a duplicate key (the parsed `Value` would keep the
/// last): such a line leaves the fast path and gets whatever rmcp's decoder
/// makes of it, as does anything else this cannot read.
fn tool_call(parsed: &Value, line: &[u8]) -> Option<JsonRpcRequest<CallToolRequest>> {
    if parsed.get("method").and_then(Value::as_str) != Some("tools/call") || parsed.get("id").is_none() {
        return None;
    }
    serde_json::from_slice(line).ok()
}

impl<R: AsyncBufRead + Send + Unpin> Transport<RoleServer> for LineTransport<R> {
    type Error = OutputClosed;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let TxJsonRpcMessage::<RoleServer>::Response(JsonRpcResponse { id, .. })
        | TxJsonRpcMessage::<RoleServer>::Error(JsonRpcError { id: Some(id), .. }) = &item
        {
            self.in_flight.remove(id);
        }
        // Queued now, in the order rmcp sends: the future only reports it.
        let declared = crate::server::with_legacy_declarations(&item); // 2025-11-25's tasks
        let queued = declared.map_or_else(|| self.out.push(&item), |d| self.out.push(&d));
        self.count_requests();
        std::future::ready(if queued { Ok(()) } else { Err(OutputClosed) })
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            // A client that does not read its answers is not read either.
            self.out.room().await;
            let out = self.out.clone();
            let line = tokio::select! {
                line = self.read_line() => line,
                // The client closed its end of the output: nothing more can
                // be answered, so the session ends (rmcp alone would go on
                // reading, and log a failed send per answer).
                () = out.closed() => return None,
            };
            if line.is_none() {
                // The end of the input: rmcp closes the output once told,
                // so first every answer owed goes out (for as long as rmcp
                // waits for its own handlers' answers then).
                let deadline =
                    *self.drain_deadline.get_or_insert_with(|| tokio::time::Instant::now() + END_OF_INPUT_DRAIN);
                if tokio::time::timeout_at(deadline, self.out.settled()).await.is_err() {
                    tracing::warn!("the input ended; gave up waiting for the answers of calls still running");
                }
                return None;
            }
            match self.take_message() {
                Ok(Some(m)) => {
                    if let RxJsonRpcMessage::<RoleServer>::Request(r) = &m {
                        self.in_flight.insert(r.id.clone());
                        self.count_requests();
                    }
                    return Some(m);
                }
                Ok(None) => {}
                Err(OutputClosed) => return None,
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Everything queued goes out before the session (and its runtime)
        // ends: through a blocking stdout (a file) or to a slow reader, the
        // writer may still be writing.
        self.out.finish().await;
        Ok(())
    }
}

impl<R> Drop for LineTransport<R> {
    fn drop(&mut self) {
        // The writer writes what is queued, then ends.
        self.out.close();
    }
}

/// Reads and writes for a [`LineTransport`] over plain async streams (tests).
pub fn over<R, W>(input: R, output: W) -> LineTransport<BufReader<R>>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    LineTransport::new(BufReader::new(input), output)
}

mod session;
mod streams;
pub use session::{SessionError, SessionOptions, StdioSession, Unanswered};
pub use streams::{SocketStream, StdinReader, StdoutWriter};

#[cfg(test)]
mod tests;
