//! A stdio server as an rmcp transport, its messages held to a size as
//! they arrive.
//!
//! rmcp's own line reader drops a line over 16 MiB without a word, so a
//! call whose answer is that large waits for its whole deadline. Here each
//! line is measured as it streams in: one over the limit is cut there (the
//! bytes already passed end as a line rmcp cannot parse and ignores), the
//! rest of it is skipped without being kept, and when it was the answer to
//! a request, that request is answered at once with an error
//! ([`OVERSIZED_CODE`]) that the call path reports as `output_too_large`.

use rmcp::RoleClient;
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The JSON-RPC error code of the answer that stands in for a message cut
/// at the limit (in the range JSON-RPC leaves to implementations).
pub(crate) const OVERSIZED_CODE: i32 = -32098;

/// How long a closed server gets to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A running stdio server: its stdin and its capped stdout. Dropping it
/// kills the process.
pub(super) struct ChildTransport {
    child: Child,
    transport: AsyncRwTransport<RoleClient, CappedLines<ChildStdout>, ChildStdin>,
}

impl ChildTransport {
    /// Starts `cmd` with piped stdio; messages over `limit` bytes are cut.
    /// Returns the transport and the server's stderr.
    pub(super) fn spawn(
        mut cmd: tokio::process::Command,
        limit: usize,
    ) -> std::io::Result<(Self, tokio::process::ChildStderr)> {
        use std::process::Stdio;
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let missing = || std::io::Error::other("the child's stdio was not piped");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        // rmcp's own cap must not cut first: it answers nothing.
        let transport =
            AsyncRwTransport::new(CappedLines::new(stdout, limit), stdin).with_max_line_length(limit.saturating_add(1));
        Ok((ChildTransport { child, transport }, stderr))
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    /// The MCP stdio shutdown: close its stdin, give it [`EXIT_GRACE`] to
    /// exit, then kill it.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.transport.close().await?;
        if tokio::time::timeout(EXIT_GRACE, self.child.wait()).await.is_err() {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// A reader of newline-delimited JSON-RPC that cuts every message at
/// `limit` bytes, answering a cut response with an [`OVERSIZED_CODE`]
/// error of its own. Nothing over the limit is ever held in memory.
pub(crate) struct CappedLines<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line passed on so far.
    line: usize,
    /// Skipping the rest of a line cut at the limit.
    skipping: bool,
    /// Bytes of the line being skipped, counted for the error's text.
    skipped: usize,
    scan: Scan,
    /// Read from `inner`, not yet processed.
    raw: Box<[u8]>,
    /// Processed, not yet handed to the reader.
    out: Vec<u8>,
    out_at: usize,
}

impl<R> CappedLines<R> {
    pub(crate) fn new(inner: R, limit: usize) -> Self {
        CappedLines {
            inner,
            limit: limit.max(1),
            line: 0,
            skipping: false,
            skipped: 0,
            scan: Scan::default(),
            raw: vec![0; 64 * 1024].into_boxed_slice(),
            out: Vec::with_capacity(64 * 1024),
            out_at: 0,
        }
    }

    /// Processes bytes read from the server into `out`.
    fn process(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = memchr(bytes);
            let (segment, ends) = match newline {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            bytes = &bytes[segment.len() + usize::from(ends)..];
            if self.skipping {
                self.scan.feed(segment);
                self.skipped = self.skipped.saturating_add(segment.len());
                if ends {
                    self.end_cut_line();
                }
                continue;
            }
            if self.line + segment.len() > self.limit {
                // Over the limit: what passes, up to the limit, ends as a
                // line of its own.
                self.scan.feed(segment);
                self.skipped = self.line + segment.len();
                self.out.extend_from_slice(&segment[..self.limit - self.line]);
                self.out.push(b'\n');
                self.line = 0;
                self.skipping = true;
                if ends {
                    self.end_cut_line();
                }
                continue;
            }
            self.scan.feed(segment);
            self.out.extend_from_slice(segment);
            self.line += segment.len();
            if ends {
                self.out.push(b'\n');
                self.line = 0;
                self.scan = Scan::default();
            }
        }
    }

    /// The end of a line cut at the limit: when it answered a request,
    /// the answer that stands in for it.
    fn end_cut_line(&mut self) {
        let scan = std::mem::take(&mut self.scan);
        let bytes = std::mem::take(&mut self.skipped);
        self.skipping = false;
        match scan.response_id() {
            Some(id) => {
                tracing::warn!(bytes, limit = self.limit, "an upstream answer over the message limit was cut");
                let answer = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {
                        "code": OVERSIZED_CODE,
                        "message": format!("the server's answer is over {} bytes", self.limit),
                        "data": {"toolhost": "oversized", "bytes": bytes},
                    },
                });
                self.out.extend_from_slice(answer.to_string().as_bytes());
                self.out.push(b'\n');
            }
            None => {
                tracing::warn!(bytes, limit = self.limit, "an upstream message over the message limit was dropped");
            }
        }
    }
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

impl<R: AsyncRead + Unpin> AsyncRead for CappedLines<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.out_at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_at);
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                return Poll::Ready(Ok(()));
            }
            this.out.clear();
            this.out_at = 0;
            let mut raw = ReadBuf::new(&mut this.raw);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut raw))?;
            let n = raw.filled().len();
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            let raw = std::mem::take(&mut this.raw);
            this.process(&raw[..n]);
            this.raw = raw;
        }
    }
}

/// What a message's top level says about it, read a byte at a time until
/// that is known: its `id`, and whether it is a response (`result` or
/// `error`) or a request or notification (`method`). A well-formed answer
/// names its id before its result, so the scan usually stops within the
/// first few dozen bytes.
#[derive(Default)]
struct Scan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At the top level, the next string is a key.
    want_key: bool,
    in_key: bool,
    key: Vec<u8>,
    /// The value being read belongs to `"id"`.
    in_id: bool,
    id: Vec<u8>,
    id_done: bool,
    response: bool,
    request: bool,
    done: bool,
}

/// The longest id (as JSON text) an answer is written for.
const MAX_ID: usize = 256;

impl Scan {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.done {
                return;
            }
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if self.in_string {
            let closing = !self.escaped && b == b'"';
            self.escaped = !self.escaped && b == b'\\';
            if self.in_key {
                if closing {
                    self.in_string = false;
                    self.in_key = false;
                    self.end_key();
                } else if self.key.len() < 16 {
                    self.key.push(b);
                }
            } else {
                if self.in_id {
                    self.push_id(b);
                }
                if closing {
                    self.in_string = false;
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.want_key {
                    self.in_key = true;
                    self.key.clear();
                } else if self.in_id {
                    self.push_id(b);
                }
            }
            b'{' | b'[' => {
                if self.in_id {
                    self.id.clear();
                    self.in_id = false;
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.want_key = b == b'{';
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.end_value();
                    self.done = true;
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => self.want_key = false,
            b',' if self.depth == 1 => {
                self.end_value();
                self.want_key = true;
            }
            b' ' | b'\t' | b'\r' => {}
            _ if self.in_id => self.push_id(b),
            _ => {}
        }
    }

    fn push_id(&mut self, b: u8) {
        if self.id.len() < MAX_ID {
            self.id.push(b);
        } else {
            self.in_id = false;
            self.id.clear();
        }
    }

    fn end_key(&mut self) {
        match self.key.as_slice() {
            b"id" => {
                self.in_id = true;
                self.id.clear();
            }
            b"result" | b"error" => self.response = true,
            b"method" => {
                self.request = true;
                self.done = true;
            }
            _ => {}
        }
    }

    fn end_value(&mut self) {
        if self.in_id {
            self.in_id = false;
            self.id_done = true;
        }
        if self.id_done && self.response {
            self.done = true;
        }
    }

    /// The id of a response, when the message was one and its id is a
    /// JSON number or string.
    fn response_id(&self) -> Option<serde_json::Value> {
        if !self.response || self.request || !self.id_done {
            return None;
        }
        let id: serde_json::Value = serde_json::from_slice(&self.id).ok()?;
        (id.is_number() || id.is_string()).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn through(input: &[u8], limit: usize, chunk: usize) -> String {
        let (mut tx, rx) = tokio::io::duplex(1 << 16);
        let input = input.to_vec();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for c in input.chunks(chunk) {
                tx.write_all(c).await.unwrap();
            }
        });
        let mut out = String::new();
        CappedLines::new(rx, limit).read_to_string(&mut out).await.unwrap();
        writer.await.unwrap();
        out
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_unchanged_in_any_chunking() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n";
        for chunk in [1, 3, 7, 1000] {
            assert_eq!(through(input, 100, chunk).await.as_bytes(), input);
        }
    }

    #[tokio::test]
    async fn an_oversized_answer_is_cut_and_answered_with_its_id() {
        let big =
            format!("{{\"jsonrpc\":\"2.0\",\"id\":\"a\\\"7\",\"result\":{{\"t\":\"{}\"}}}}\n", "x".repeat(10_000));
        let input = format!("{big}{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{}}}}\n");
        for chunk in [1, 100, 100_000] {
            let out = through(input.as_bytes(), 1000, chunk).await;
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 3, "{out:.200}");
            assert_eq!(lines[0].len(), 1000, "the cut prefix ends at the limit");
            let answer: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
            assert_eq!(answer["id"], "a\"7");
            assert_eq!(answer["error"]["code"], OVERSIZED_CODE);
            assert_eq!(lines[2], "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}");
        }
    }

    #[tokio::test]
    async fn an_id_after_the_result_is_still_found() {
        let input = format!("{{\"result\":{{\"t\":\"{}\",\"id\":9}},\"id\":42}}\n", "x".repeat(5000));
        let out = through(input.as_bytes(), 100, 512).await;
        let answer: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
        assert_eq!(answer["id"], 42, "the nested id is not the message's");
    }

    #[tokio::test]
    async fn an_id_ending_in_an_escaped_backslash_is_read_whole() {
        let input = format!("{{\"id\":\"k\\\\\",\"result\":\"{}\"}}\n", "x".repeat(500));
        let out = through(input.as_bytes(), 100, 7).await;
        let answer: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
        assert_eq!(answer["id"], "k\\");
    }

    #[tokio::test]
    async fn an_oversized_notification_or_request_is_dropped_unanswered() {
        let input =
            format!("{{\"method\":\"x\",\"id\":3,\"params\":\"{}\"}}\n{{\"id\":1,\"result\":1}}\n", "x".repeat(5000));
        let out = through(input.as_bytes(), 100, 64).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1], "{\"id\":1,\"result\":1}");
    }
}
