//! JSON-RPC checks in front of rmcp, on both transports, so that every
//! malformed message gets the answer the specification and the reference
//! SDKs give (rmcp answers some with 415 or `-32601`, and over stdio drops
//! them unanswered).

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};

/// Parse error.
pub const PARSE_ERROR: i64 = -32700;
/// Invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// Invalid params.
pub const INVALID_PARAMS: i64 = -32602;

/// A message refused before it reached the protocol layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The JSON-RPC error code.
    pub code: i64,
    /// The JSON-RPC error response to send.
    pub response: Value,
}

impl Rejection {
    fn new(id: Value, code: i64, message: String) -> Rejection {
        Rejection { code, response: json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}) }
    }
}

/// What to do with one incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Well formed: pass it on.
    Pass,
    /// A notification that is not well formed: JSON-RPC answers no
    /// notification, so it is dropped.
    Drop,
}

/// Checks one message: JSON (else -32700), a single JSON-RPC 2.0 object
/// (else -32600; a batch too: the protocol versions served here have
/// none) that is a request (string `method`, string or integer `id`), a
/// notification (string `method`, no `id`) or a response (`result` or
/// `error`, no `method`); `params`, when present, an object. A request with
/// bad params, and a `tools/call` whose params are not
/// `{name: string, arguments?: object}`, get -32602 with the request's id;
/// a malformed notification is dropped, never answered.
pub fn check_message(body: &[u8]) -> Result<Verdict, Rejection> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| Rejection::new(Value::Null, PARSE_ERROR, format!("Parse error: {e}")))?;
    let invalid = |why: &str| Rejection::new(Value::Null, INVALID_REQUEST, format!("Invalid Request: {why}"));
    let Value::Object(m) = &v else {
        return Err(invalid(if v.is_array() {
            "batches are not supported; send one message at a time"
        } else {
            "a message must be a JSON object"
        }));
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("\"jsonrpc\" must be \"2.0\""));
    }
    let id = match m.get("id") {
        None => None,
        Some(id @ Value::String(_)) => Some(id.clone()),
        Some(id @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(id.clone()),
        Some(_) => return Err(invalid("\"id\" must be a string or an integer")),
    };
    let is_response = m.contains_key("result") || m.contains_key("error");
    let method = match m.get("method") {
        Some(Value::String(method)) if !is_response => method,
        Some(Value::String(_)) => return Err(invalid("a message is a request or a response, not both")),
        Some(_) => return Err(invalid("\"method\" must be a string")),
        None if is_response && id.is_some() => return Ok(Verdict::Pass),
        None if is_response => return Err(invalid("a response needs the \"id\" of its request")),
        None => return Err(invalid("a message needs a \"method\", or a \"result\" or \"error\"")),
    };
    let params = m.get("params");
    let bad_params = if params.is_some_and(|p| !p.is_object()) {
        Some("\"params\" must be an object")
    } else if params.and_then(|p| p.get("_meta")).is_some_and(|meta| !meta.is_object()) {
        Some("\"_meta\" must be an object")
    } else if method == "tools/call" {
        let name_ok = params.and_then(|p| p.get("name")).is_some_and(Value::is_string);
        let args_ok = params.and_then(|p| p.get("arguments")).is_none_or(|a| a.is_object() || a.is_null());
        match (name_ok, args_ok) {
            (false, _) => Some("\"name\" must be a string"),
            (true, false) => Some("\"arguments\" must be an object"),
            (true, true) => None,
        }
    } else {
        None
    };
    match (bad_params, id) {
        (None, _) => Ok(Verdict::Pass),
        (Some(_), None) => Ok(Verdict::Drop),
        (Some(why), Some(id)) => Err(Rejection::new(id, INVALID_PARAMS, format!("Invalid params: {why}"))),
    }
}

/// The longest stdio message accepted, in bytes; a longer line is answered
/// with -32600 and skipped without being held in memory.
pub const MAX_STDIO_MESSAGE: usize = 4 << 20;

/// A stdio transport for rmcp that answers malformed lines itself: reads
/// newline-delimited messages from `input`, passes the good ones on, and
/// writes the JSON-RPC error for the others to `output`, whole lines never
/// interleaved with rmcp's own.
pub fn strict_stdio<R, W>(input: R, output: W) -> (impl AsyncRead + Send + Unpin, impl AsyncWrite + Send + Unpin)
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    // Bounded both ways: a client that does not read its answers stops
    // being read (as with rmcp's own stdio transport), it never makes the
    // host queue them.
    let (lines_tx, mut lines_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(OUTPUT_LINES);
    // One writer owns `output`: rmcp's lines and the refusals queue here.
    tokio::spawn(async move {
        let mut output = output;
        while let Some(line) = lines_rx.recv().await {
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    let (to_rmcp, from_filter) = tokio::io::duplex(1 << 16);
    let refusals = lines_tx.clone();
    tokio::spawn(async move {
        let mut input = tokio::io::BufReader::new(input);
        let mut to_rmcp = to_rmcp;
        let mut line = Vec::new();
        while let Ok(Some(cut)) = super::read_line_capped(&mut input, &mut line, MAX_STDIO_MESSAGE).await {
            let verdict = if cut {
                Err(Rejection::new(
                    Value::Null,
                    INVALID_REQUEST,
                    format!("Invalid Request: a message over {MAX_STDIO_MESSAGE} bytes"),
                ))
            } else if line.trim_ascii().is_empty() {
                continue;
            } else {
                check_message(line.trim_ascii())
            };
            match verdict {
                Ok(Verdict::Drop) => tracing::debug!("dropped a malformed notification"),
                Ok(Verdict::Pass) => {
                    let mut msg = line.trim_ascii().to_vec();
                    msg.push(b'\n');
                    if to_rmcp.write_all(&msg).await.is_err() {
                        return;
                    }
                }
                Err(r) => {
                    if refusals.send(format!("{}\n", r.response).into_bytes()).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    (from_filter, LineSink { tx: tokio_util::sync::PollSender::new(lines_tx), partial: Vec::new() })
}

/// Lines waiting for the output, at most.
const OUTPUT_LINES: usize = 64;

/// rmcp's side of the shared output: complete lines go to the writer.
struct LineSink {
    tx: tokio_util::sync::PollSender<Vec<u8>>,
    partial: Vec<u8>,
}

impl AsyncWrite for LineSink {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        // Room for one more line first: a full queue holds rmcp back.
        if std::task::ready!(self.tx.poll_reserve(cx)).is_err() {
            return std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        self.partial.extend_from_slice(buf);
        if let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') {
            let rest = self.partial.split_off(end + 1);
            let lines = std::mem::replace(&mut self.partial, rest);
            if self.tx.send_item(lines).is_err() {
                return std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
            }
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> Option<i64> {
        check_message(body.as_bytes()).err().map(|r| r.code)
    }

    #[test]
    fn ids_params_and_mixed_messages_are_checked() {
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":5}"#), Some(INVALID_PARAMS));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":5}}"#), Some(INVALID_PARAMS));
        assert_eq!(code(r#"{"jsonrpc":"2.0","result":{}}"#), Some(INVALID_REQUEST));
        let drop = |b: &str| check_message(b.as_bytes()).unwrap();
        assert_eq!(drop(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#), Verdict::Drop);
        assert_eq!(drop(r#"{"jsonrpc":"2.0","method":"tools/call","params":{}}"#), Verdict::Drop);
    }

    #[test]
    fn each_malformation_gets_its_code() {
        assert_eq!(code("{not json"), Some(PARSE_ERROR));
        assert_eq!(code(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#), Some(INVALID_REQUEST));
        assert_eq!(code("42"), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), Some(INVALID_REQUEST));
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#),
            Some(INVALID_PARAMS)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"roll","arguments":"1d20"}}"#),
            Some(INVALID_PARAMS)
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"roll"}}"#), None);
        assert_eq!(code(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#), None);
    }

    #[test]
    fn invalid_params_keep_the_request_id() {
        let r = check_message(br#"{"jsonrpc":"2.0","id":"x7","method":"tools/call","params":{}}"#).unwrap_err();
        assert_eq!(r.response["id"], "x7");
        let r = check_message(b"{oops").unwrap_err();
        assert_eq!(r.response["id"], Value::Null);
    }
}
