//! 2025-11-25's tasks over HTTP, around rmcp (which knows only
//! 2026-07-28's): which requests are answered here
//! ([`crate::server::is_legacy_task`]), and the `tasks` declarations added
//! to rmcp's `initialize` and `tools/list` answers.

use super::*;

/// A 2025-11-25 session's task request, answered here; the request back
/// when it is none. Only what rmcp's own checks would pass is taken (a
/// JSON body, an `Accept` of both kinds, a 2025-11-25 session): rmcp
/// refuses anything else.
pub(super) async fn answer_legacy(
    request: Request,
    session: Option<&str>,
    manager: &LocalSessionManager,
    endpoint: &McpFront,
    token: Option<&TokenId>,
) -> Result<Response, Request> {
    let Some(id) = session else { return Err(request) };
    if !legacy_headers(request.headers()) {
        return Err(request);
    }
    let Some(message) = request.extensions().get::<BodyBytes>().and_then(|b| legacy_task(&b.0)) else {
        return Err(request);
    };
    if !manager.has_session(&id.into()).await.unwrap_or(false) {
        return Ok(invalid_request(StatusCode::NOT_FOUND, "Not Found: Session not found"));
    }
    // Its body's share of the budget goes back: a `tasks/result` may wait.
    drop(request);
    let answer = endpoint.legacy_task(&message, Some(id.to_string()), token.map(|t| t.0.to_string())).await;
    Ok(axum::Json(answer).into_response())
}

/// Whether a session's request says what rmcp requires of one (JSON in,
/// JSON or SSE accepted) and, when it names its revision, 2025-11-25.
pub(super) fn legacy_headers(headers: &HeaderMap) -> bool {
    let has = |name: header::HeaderName, what: &str| {
        headers.get_all(name).iter().any(|v| v.to_str().is_ok_and(|v| v.to_ascii_lowercase().contains(what)))
    };
    has(header::CONTENT_TYPE, "application/json")
        && has(header::ACCEPT, "application/json")
        && has(header::ACCEPT, "text/event-stream")
        && headers.get("mcp-protocol-version").is_none_or(|v| v.as_bytes() == b"2025-11-25")
}

/// The body's message when it is a 2025-11-25 task request
/// ([`crate::server::is_legacy_task`]).
pub(super) fn legacy_task(body: &[u8]) -> Option<serde_json::Value> {
    // Cheap first: most bodies are no task's.
    if !body.windows(5).any(|w| w == b"task\"") && !body.windows(6).any(|w| w == b"tasks/") {
        return None;
    }
    let message: serde_json::Value = serde_json::from_slice(body).ok()?;
    crate::server::is_legacy_task(&message).then_some(message)
}

/// Whether a POST body is a request whose answer carries 2025-11-25's task
/// declarations ([`crate::server::declare_legacy_tasks`]): `initialize`,
/// and `tools/list` in a session (a 2026-07-28 client has none).
pub(super) fn declares_tasks(body: &[u8], in_session: bool) -> bool {
    let method = |m: &[u8]| body.windows(m.len()).any(|w| w == m);
    (method(b"\"initialize\"") || (in_session && method(b"\"tools/list\"")))
        && serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| match v["method"].as_str() {
            Some("initialize") => true,
            Some("tools/list") => in_session,
            _ => false,
        })
}

/// The largest answer [`declare_tasks`] rewrites; a larger one is refused
/// (500: its body is read by then).
const DECLARED_MAX: usize = 32 << 20;

/// rmcp's answer to an `initialize` or a session's `tools/list` (a JSON body
/// or an SSE stream that ends with the answer) with 2025-11-25's task
/// declarations added to the answer.
pub(super) async fn declare_tasks(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, DECLARED_MAX).await else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", "the answer was too large to send");
    };
    let patch = |json: &[u8]| -> Option<Vec<u8>> {
        let mut v: serde_json::Value = serde_json::from_slice(json).ok()?;
        crate::server::declare_legacy_tasks(&mut v).then(|| serde_json::to_vec(&v).ok())?
    };
    let sse = parts.headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let out = if sse {
        let mut out = Vec::with_capacity(bytes.len() + 128);
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            match line.strip_prefix(b"data:").map(|d| d.trim_ascii()).and_then(patch) {
                Some(patched) => {
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(&patched);
                    out.push(b'\n');
                }
                None => out.extend_from_slice(line),
            }
        }
        out
    } else {
        patch(&bytes).unwrap_or_else(|| bytes.to_vec())
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}
