//! `toolhost:plugin/client`: a call asking the person (elicitation) and
//! the model (sampling) through the MCP client that made it.
//!
//! The question goes out through the call's [`Asker`] (the MCP front's,
//! in whichever protocol revision its client speaks) and the call's own
//! thread waits for the answer, at most `limits.input_wait_ms`. The wait
//! does not count against the call's deadline: the deadline moves by as
//! long as the wait took (the epoch callback in `lib.rs` reads it), and
//! no fuel burns meanwhile. A call asks at most `limits.asks_per_call`
//! times.

use crate::bindings::toolhost::plugin::client::{
    AskError, ElicitAction, ElicitResult, Host, SamplingRequest, SamplingResult,
};
use crate::bindings::toolhost::plugin::types::{Content, Media, Role};
use crate::state::State;
use serde_json::{Value, json};
use std::time::Instant;
use toolhost_types::offer::AskError as FrontError;

/// The longest message, URL or schema a question may carry, in bytes.
const MAX_QUESTION_BYTES: usize = 64 << 10;

impl State {
    /// Sends one question, bounded and timed; the deadline moves by the
    /// wait. The outer error ends the call (its answer comes with the
    /// client's next try).
    fn ask(&mut self, method: &str, params: Value) -> wasmtime::Result<Result<Value, AskError>> {
        let Some(asker) = self.asker.clone() else {
            return Ok(Err(AskError::Unsupported(
                "this call came from no client that can be asked (a calibration probe, or a caller without one)".into(),
            )));
        };
        if self.asks_left == 0 {
            return Ok(Err(AskError::Refused(format!(
                "this call has asked its client {} times already (limits.asks_per_call)",
                self.asks_made
            ))));
        }
        let size = serde_json::to_vec(&params).map_or(usize::MAX, |v| v.len());
        if size > MAX_QUESTION_BYTES {
            return Ok(Err(AskError::Refused(format!("a question of {size} bytes (at most {MAX_QUESTION_BYTES})"))));
        }
        self.asks_left -= 1;
        self.asks_made += 1;
        let started = Instant::now();
        let answer = asker.ask(method, params, self.input_wait);
        let waited = started.elapsed();
        self.deadline += waited;
        self.waited += waited;
        tracing::debug!(
            plugin = &*self.plugin,
            tool = &*self.tool,
            method,
            ms = waited.as_millis() as u64,
            "asked the client"
        );
        match answer {
            Ok(v) => Ok(Ok(v)),
            Err(FrontError::Suspended) => {
                self.suspended = true;
                Err(wasmtime::Error::msg("the call waits for its client's input"))
            }
            Err(FrontError::Unsupported(m)) => Ok(Err(AskError::Unsupported(m))),
            Err(FrontError::Timeout(m)) => Ok(Err(AskError::Timeout(m))),
            Err(FrontError::Failed(m)) => Ok(Err(AskError::Failed(m))),
        }
    }

    fn elicit(&mut self, params: Value) -> wasmtime::Result<Result<ElicitResult, AskError>> {
        let answer = match self.ask("elicitation/create", params)? {
            Ok(a) => a,
            Err(e) => return Ok(Err(e)),
        };
        let action = match answer.get("action").and_then(Value::as_str) {
            Some("accept") => ElicitAction::Accept,
            Some("decline") => ElicitAction::Decline,
            Some("cancel") => ElicitAction::Cancel,
            other => return Ok(Err(AskError::Failed(format!("the client answered with action {other:?}")))),
        };
        let content = answer.get("content").filter(|c| c.is_object()).map(Value::to_string);
        Ok(Ok(ElicitResult { action, content }))
    }
}

fn role(r: Role) -> &'static str {
    match r {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn b64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A sampling message's content, as MCP carries it: text, an image or audio.
fn sampling_content(c: Content) -> Result<Value, AskError> {
    Ok(match c {
        Content::Text(text) => json!({"type": "text", "text": text}),
        Content::Image(Media { mime_type, data }) => {
            json!({"type": "image", "mimeType": mime_type, "data": b64(&data)})
        }
        Content::Audio(Media { mime_type, data }) => {
            json!({"type": "audio", "mimeType": mime_type, "data": b64(&data)})
        }
        Content::Json(_) | Content::Resource(_) => {
            return Err(AskError::Refused("a sampling message is text, an image or audio".into()));
        }
    })
}

/// The model's answer's content: text, or an image or audio.
fn answered_content(v: &Value) -> Result<Content, AskError> {
    // 2025-11-25 allows a list of blocks: the first is taken.
    let v = v.as_array().and_then(|a| a.first()).unwrap_or(v);
    let media = |v: &Value| -> Result<Media, AskError> {
        use base64::Engine as _;
        let data = v.get("data").and_then(Value::as_str).unwrap_or_default();
        let data = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| AskError::Failed(format!("the client's media is not base64: {e}")))?;
        Ok(Media { mime_type: v.get("mimeType").and_then(Value::as_str).unwrap_or_default().to_string(), data })
    };
    match v.get("type").and_then(Value::as_str) {
        Some("text") => Ok(Content::Text(v.get("text").and_then(Value::as_str).unwrap_or_default().to_string())),
        Some("image") => Ok(Content::Image(media(v)?)),
        Some("audio") => Ok(Content::Audio(media(v)?)),
        other => Err(AskError::Failed(format!("the client's model answered with content of type {other:?}"))),
    }
}

impl Host for State {
    fn elicit_form(
        &mut self,
        message: String,
        requested_schema: String,
    ) -> wasmtime::Result<Result<ElicitResult, AskError>> {
        let schema: Value = match serde_json::from_str(&requested_schema) {
            Ok(s) => s,
            Err(e) => return Ok(Err(AskError::Refused(format!("requested-schema is not JSON: {e}")))),
        };
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Ok(Err(AskError::Refused(
                "requested-schema must be a JSON Schema with \"type\": \"object\"".into(),
            )));
        }
        let message = self.values.redact(&message).into_owned();
        self.elicit(json!({"mode": "form", "message": message, "requestedSchema": schema}))
    }

    fn elicit_url(
        &mut self,
        message: String,
        url: String,
        elicitation_id: String,
    ) -> wasmtime::Result<Result<ElicitResult, AskError>> {
        if !toolhost_types::offer::is_web_url(&url) {
            return Ok(Err(AskError::Refused("an elicitation URL is http: or https:".into())));
        }
        let message = self.values.redact(&message).into_owned();
        self.elicit(json!({"mode": "url", "message": message, "url": url, "elicitationId": elicitation_id}))
    }

    fn create_message(&mut self, request: SamplingRequest) -> wasmtime::Result<Result<SamplingResult, AskError>> {
        let params = match sampling_params(request) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        let answer = match self.ask("sampling/createMessage", params)? {
            Ok(a) => a,
            Err(e) => return Ok(Err(e)),
        };
        let role = match answer.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            _ => Role::Assistant,
        };
        let content = match answered_content(answer.get("content").unwrap_or(&Value::Null)) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(Ok(SamplingResult {
            role,
            content,
            model: answer.get("model").and_then(Value::as_str).unwrap_or_default().chars().take(256).collect(),
            stop_reason: answer.get("stopReason").and_then(Value::as_str).map(|s| s.chars().take(256).collect()),
        }))
    }
}

/// A sampling request as MCP's `sampling/createMessage` params.
fn sampling_params(request: SamplingRequest) -> Result<Value, AskError> {
    let mut messages = Vec::with_capacity(request.messages.len());
    for m in request.messages {
        messages.push(json!({"role": role(m.role), "content": sampling_content(m.content)?}));
    }
    let mut params = json!({"messages": messages, "maxTokens": request.max_tokens});
    if let Some(s) = request.system_prompt {
        params["systemPrompt"] = json!(s);
    }
    if let Some(t) = request.temperature {
        params["temperature"] = json!(t);
    }
    if !request.stop_sequences.is_empty() {
        params["stopSequences"] = json!(request.stop_sequences);
    }
    if let Some(p) = request.model_preferences {
        let p: Value =
            serde_json::from_str(&p).map_err(|e| AskError::Refused(format!("model-preferences is not JSON: {e}")))?;
        params["modelPreferences"] = p;
    }
    Ok(params)
}
