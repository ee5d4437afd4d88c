//! Request bodies: bounded, read within a deadline, shared fairly.

use super::*;

/// The most of a body over `server.max_body_bytes` read (and discarded)
/// before its 413. A client still sending when the answer comes may never
/// read it: its write fails first, or the connection resets under it (the
/// Python SDK's client then loses its session). Read to the end, the body
/// leaves the connection ready for the next request. Past this much, the
/// 413 closes the connection.
pub const DRAIN_MAX: usize = 64 << 20;

/// Reads the body up to `max` bytes, then checks it is well-formed
/// JSON-RPC ([`read_body`] with [`DRAIN_MAX`], then [`refuse_malformed`]).
pub(super) async fn limit_body(front: &Front, request: Request, max: usize) -> Result<Request, Response> {
    let request = read_body(front, request, max, DRAIN_MAX, "server.max_body_bytes").await?;
    if request.method() == axum::http::Method::POST
        && let Some(bytes) = request.extensions().get::<BodyBytes>()
        && let Some(refusal) = refuse_malformed(&bytes.0)
    {
        return Err(refusal);
    }
    Ok(request)
}

/// The body [`read_body`] read, for checks after it.
#[derive(Clone)]
pub(super) struct BodyBytes(pub(super) axum::body::Bytes);

/// A body's share of `server.max_bodies_bytes`, held while its request
/// lives.
#[derive(Clone)]
pub(super) struct BodyShare(#[allow(dead_code)] Arc<tokio::sync::OwnedSemaphorePermit>);

/// Reads the body up to `max` bytes, within `server.body_timeout_secs`
/// (else 408) and from the bodies' shared budget, `server.max_bodies_bytes`
/// (what the body may hold is taken before reading: a request that finds
/// no room within a second gets 503 with `Retry-After`). Beyond `max`, 413:
/// after reading the rest (discarded) when the whole body is at most
/// `drain`, and with the connection closed when it is more (a
/// `Content-Length` saying so is answered at once, unread).
pub(super) async fn read_body(
    front: &Front,
    request: Request,
    max: usize,
    drain: usize,
    limit_name: &str,
) -> Result<Request, Response> {
    use futures::StreamExt as _;
    let http1 = request.version() <= axum::http::Version::HTTP_11;
    let refuse = |status: StatusCode, code: &str, message: &str, close: bool| {
        let mut r = error(status, code, message);
        // HTTP/2 has no `Connection` header: hyper resets the stream
        // whose body is left unread.
        if close && http1 {
            r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    };
    let too_large = |close: bool| {
        let message = format!("request body over the {max} byte limit ({limit_name})");
        refuse(StatusCode::PAYLOAD_TOO_LARGE, "invalid_input", &message, close)
    };
    let declared =
        request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64 && n > drain as u64) {
        return Err(too_large(true));
    }
    // The most this body may hold in memory, from the shared budget.
    let want = declared.map_or(max, |n| (n as usize).min(max)).max(1);
    let want = u32::try_from(want.min(front.bodies_max)).unwrap_or(u32::MAX);
    let mut permit =
        match tokio::time::timeout(Duration::from_secs(1), front.bodies.clone().acquire_many_owned(want)).await {
            Ok(Ok(permit)) => permit,
            _ => {
                let mut r = refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "capacity_exceeded",
                    "the server holds as many request bodies as it may (server.max_bodies_bytes); retry shortly",
                    false,
                );
                r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(1));
                return Err(r);
            }
        };
    let (mut parts, body) = request.into_parts();
    let read_all = async {
        // A body of unknown length grows as it comes.
        let mut kept = Vec::with_capacity(if declared.is_some() { want as usize } else { 64 << 10 }.min(want as usize));
        let mut read = 0usize;
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let Ok(chunk) = chunk else {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    "the request body could not be read",
                    true,
                ));
            };
            read = read.saturating_add(chunk.len());
            if read <= max {
                kept.extend_from_slice(&chunk);
            } else if read > drain {
                return Err(too_large(true));
            } else {
                // Over the limit: nothing more is kept.
                kept = Vec::new();
            }
        }
        if read > max {
            return Err(too_large(false));
        }
        Ok(kept)
    };
    let kept = match tokio::time::timeout(front.body_timeout, read_all).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(refuse(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_input",
                &format!(
                    "the request body did not arrive within {} s (server.body_timeout_secs)",
                    front.body_timeout.as_secs()
                ),
                true,
            ));
        }
    };
    // What the body holds now, not what it might have: the rest of the
    // share goes back (a chunked body reserved the whole limit), so a
    // request held open (a call, a task's result) holds only its bytes.
    let held = kept.len().max(1);
    if held < permit.num_permits() {
        drop(permit.split(permit.num_permits() - held));
    }
    let share = BodyShare(Arc::new(permit));
    let bytes = axum::body::Bytes::from(kept);
    parts.extensions.insert(BodyBytes(bytes.clone()));
    parts.extensions.insert(share);
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The answer to a POST body that is not a well-formed JSON-RPC message,
/// before rmcp reads it: 400 for invalid JSON (-32700) or an invalid
/// request (-32600), 200 with -32602 for invalid `tools/call` params, as the
/// specification and the reference SDKs answer.
pub(super) fn refuse_malformed(body: &[u8]) -> Option<Response> {
    let r = match crate::jsonrpc::check_message(body) {
        Ok(crate::jsonrpc::Verdict::Pass) => return None,
        // A notification gets no answer, only the 202 that says it arrived.
        Ok(crate::jsonrpc::Verdict::Drop) => return Some(StatusCode::ACCEPTED.into_response()),
        Err(r) => r,
    };
    let status = if r.code == crate::jsonrpc::INVALID_PARAMS { StatusCode::OK } else { StatusCode::BAD_REQUEST };
    Some((status, axum::Json(r.response)).into_response())
}
