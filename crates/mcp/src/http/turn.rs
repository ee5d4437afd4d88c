//! `POST /mcp/<agent>/turn`: a turn started by a pipeline's speech-to-text
//! hook, for a stock MCP client's session (see [`crate::server::room`]).
//!
//! The body is `{"utterance": "...", "queue_depth": 0, "first_turn":
//! false}` (only `utterance` is required; other keys are refused). With
//! `Mcp-Session-Id`, the turn starts in that session, which must be a live
//! session of this agent (403 for another agent's, 404 for none). Without
//! it, the turn starts in every live session of the agent. The answer is
//! `{"tier", "reason", "turn", "sessions", "tools"}`; `?format=` picks the
//! tools' shape: `mcp` (the default, as `tools/list` gives them), `openai`
//! (Realtime `session.tools`) or `gemini` (Live `setup.tools`).
//!
//! The agent's token or an operator token; checks 1 to 4 of the front
//! apply as to `/mcp/<agent>`.

use super::*;
use crate::server::MAX_UTTERANCE_BYTES;
use crate::{TurnCues, TurnTier};
use serde::Deserialize;

/// The largest body a turn may have.
const MAX_TURN_BODY: usize = MAX_UTTERANCE_BYTES + 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnBody {
    utterance: String,
    #[serde(default)]
    queue_depth: u32,
    #[serde(default)]
    first_turn: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Mcp,
    OpenAi,
    Gemini,
}

#[allow(clippy::result_large_err)]
fn shape(query: Option<&str>) -> Result<Shape, Response> {
    let mut shape = Shape::Mcp;
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if k != "format" {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                &format!("unknown query parameter {k:?}: the turn endpoint takes only format=mcp|openai|gemini"),
            ));
        }
        shape = match &*v {
            "mcp" => Shape::Mcp,
            "openai" => Shape::OpenAi,
            "gemini" => Shape::Gemini,
            other => {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    &format!("unknown format {other:?}: use mcp, openai or gemini"),
                ));
            }
        };
    }
    Ok(shape)
}

/// Serves `POST /mcp/<slug>/turn` for the agent `slug` names (already
/// authenticated as that agent or the operator).
pub(super) async fn post(front: &Front, endpoints: &Endpoints, slug: &str, request: Request) -> Response {
    if request.method() != axum::http::Method::POST {
        let mut r = error(StatusCode::METHOD_NOT_ALLOWED, "invalid_input", "POST a turn: {\"utterance\": \"...\"}");
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let Some(agent) = endpoints.slugs.get(slug).cloned() else {
        return error(StatusCode::NOT_FOUND, "not_found", &format!("no agent endpoint /mcp/{slug}"));
    };
    let target = Identity::Agent(agent.clone());
    let Some((_, _, endpoint)) = endpoints.services.get(&target) else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such agent");
    };
    let room = endpoint.room();
    let shape = match shape(request.uri().query()) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let session = request.headers().get("mcp-session-id").map(|v| v.to_str().map(str::to_string));
    let session = match session {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => return error(StatusCode::BAD_REQUEST, "invalid_input", "Mcp-Session-Id is not text"),
    };
    if let Some(id) = &session {
        // A session of another agent is refused, not reported as missing:
        // the caller named it, and must learn it is not theirs to steer.
        let owner = front.sessions.lock().get(id).map(|(who, _)| who.clone());
        match owner {
            Some(who) if who != target => {
                return error(StatusCode::FORBIDDEN, "forbidden", "that session belongs to another endpoint");
            }
            Some(_) => front.sessions.touch(id),
            None => return error(StatusCode::NOT_FOUND, "not_found", "no live session with that Mcp-Session-Id"),
        }
    }
    // Within the body deadline and budget; a declared length over the
    // limit is answered at once (it was left waiting for a body that never came).
    let body = match read_body(front, request, MAX_TURN_BODY, 0, "a turn's body").await {
        Ok(r) => match r.extensions().get::<BodyBytes>() {
            Some(b) => b.0.clone(),
            None => axum::body::Bytes::new(),
        },
        Err(r) => return r,
    };
    let body: TurnBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                &format!(
                    "the body must be {{\"utterance\": string, \"queue_depth\"?: integer, \"first_turn\"?: bool}}: {e}"
                ),
            );
        }
    };
    if body.utterance.len() > MAX_UTTERANCE_BYTES {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_input",
            &format!("the utterance is {} bytes, over the limit of {MAX_UTTERANCE_BYTES}", body.utterance.len()),
        );
    }
    let cues = TurnCues { queue_depth: body.queue_depth, first_turn: body.first_turn };
    let host = &front.host;
    let turn = match &session {
        Some(id) => match room.turn_in(host, id, &body.utterance, cues) {
            Ok(t) => t,
            // Open, but its client has not sent `initialized` yet.
            Err(e) => return error(StatusCode::CONFLICT, "not_ready", &format!("{e}: initialize the session first")),
        },
        None => room.turn_all(host, &body.utterance, cues),
    };
    let TurnTier { tier, reason, turn: number } = turn.tier;
    let catalog = host.registry().snapshot();
    let visible = host.budget().available_tools(&catalog, Some(&agent), tier).unwrap_or_default();
    let tools = match shape {
        Shape::Mcp => serde_json::to_value(crate::server::tools_at(host, Some(&agent), tier)).unwrap_or_default(),
        Shape::OpenAi => crate::declare::openai_tools(&visible),
        Shape::Gemini => crate::declare::gemini_tools(host, Some(&agent), &visible),
    };
    tracing::debug!(agent, tier = %tier, reason, sessions = turn.sessions, "turn posted");
    axum::Json(serde_json::json!({
        "tier": tier.as_str(),
        "reason": reason,
        "turn": number,
        "sessions": turn.sessions,
        "tools": tools,
    }))
    .into_response()
}
