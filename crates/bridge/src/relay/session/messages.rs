//! What the relay does with each side's messages: the client's checked
//! and amended before they go upstream, the upstream's read for turns,
//! calls and resumption handles before they reach the client.

use super::calls::Answered;
use super::{Close, Session, ToUpstream, push_text, push_up};
use crate::Format;
use crate::relay::budget::Outbox;
use crate::relay::close::client_full;
use crate::relay::upstream::UpStream;
use axum::extract::ws::Message;
use serde_json::{Value, json};
use tokio::sync::mpsc;

impl Session {
    /// A client's text message: Gemini's first is its setup; OpenAI
    /// `session.update` gets the agent's tools; models and generation
    /// settings are held to the operator's; answers to the relay's calls
    /// are dropped; the rest passes.
    pub(super) fn on_client(
        &mut self,
        text: &str,
        to_client: &Outbox<Message>,
        to_up: &Outbox<ToUpstream>,
    ) -> Result<(), Close> {
        let forward = |t: String| push_text(to_up, t);
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(text) else {
            // Never passed on: an upstream's parser may read what this one
            // refuses (a lone surrogate escape, deeper nesting), and so see
            // a model, a setting or a call's answer the relay never checked.
            return Err(self.refuse_client("a client message must be one JSON object (RFC 8259)"));
        };
        match self.bridge.format() {
            Format::OpenAiRealtime => match event.get("type").and_then(Value::as_str) {
                Some("session.update") => {
                    if let Some(Value::Object(session)) = event.get_mut("session") {
                        if let Some(asked) = session.get("model") {
                            let asked = asked.as_str().unwrap_or("(not a string)");
                            if let Err(e) = self.upstream.models.pick(Some(asked)) {
                                // Refused as the API refuses an event: the
                                // session goes on with its model.
                                let event_id = event.get("event_id").cloned().unwrap_or(Value::Null);
                                let error = json!({"type": "error", "event_id": "event_relay_refused", "error": {
                                    "type": "invalid_request_error", "code": "model_not_allowed", "message": e,
                                    "param": "session.model", "event_id": event_id}});
                                let text = error.to_string();
                                let len = text.len();
                                return to_client.push(Message::text(text), len).map_err(client_full);
                            }
                        }
                        if let Some(Value::Array(tools)) = session.get("tools") {
                            self.take_client_tools(tools.clone());
                        }
                        session.insert("tools".into(), self.with_client_tools(self.bridge.declarations()));
                        self.relay.caps.openai(session, false);
                    }
                }
                Some("response.create") => {
                    if let Some(Value::Object(response)) = event.get_mut("response") {
                        self.relay.caps.openai(response, false);
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
                if let Some(Value::Object(mut setup)) = event.remove("setup") {
                    if self.setup.is_some() {
                        return Err(Close::new(1008, "a second setup message: a session is set up once"));
                    }
                    // The handle checked must be the one forwarded: one
                    // spelling only.
                    if setup.contains_key("sessionResumption") && setup.contains_key("session_resumption") {
                        return Err(
                            self.refuse_client("setup has both sessionResumption and session_resumption: send one")
                        );
                    }
                    let asked = setup.get("model").map(|m| m.as_str().unwrap_or("(not a string)"));
                    let model = self.upstream.models.pick(asked).map_err(|e| Close::new(1008, e))?;
                    setup.insert("model".into(), Value::String(model));
                    self.relay.caps.gemini(&mut setup);
                    let handle = ["sessionResumption", "session_resumption"]
                        .iter()
                        .find_map(|k| setup.get(*k))
                        .and_then(|r| r.get("handle"))
                        .and_then(Value::as_str)
                        .filter(|h| !h.is_empty());
                    if let Some(h) = handle
                        && !self.relay.handles.given_to(h, self.bridge.agent())
                    {
                        tracing::warn!(
                            agent = self.bridge.agent(),
                            "a resumption handle this agent's sessions were not given, refused"
                        );
                        return Err(Close::new(
                            1008,
                            "this resumption handle was not given to this agent's sessions here; start a new session",
                        ));
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
    pub(super) async fn on_upstream(
        &mut self,
        text: &str,
        to_client: &Outbox<Message>,
        to_up: &Outbox<ToUpstream>,
        calls: &mpsc::UnboundedSender<Answered>,
        up_rx: &mut futures::stream::SplitStream<UpStream>,
    ) -> Result<(), Close> {
        let event: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let mut send_to_client = true;
        match self.bridge.format() {
            Format::OpenAiRealtime => match event.get("type").and_then(Value::as_str) {
                Some("session.created") => {
                    self.declared = true;
                    let mut session = json!({
                        "type": "realtime", "tools": self.with_client_tools(self.bridge.declarations()), "tool_choice": "auto",
                    });
                    // The session's default is unbounded ("inf").
                    if let Value::Object(s) = &mut session {
                        self.relay.caps.openai(s, true);
                    }
                    push_up(to_up, &json!({"type": "session.update", "session": session}))?;
                }
                Some("conversation.item.input_audio_transcription.completed") => {
                    let words = event.get("transcript").and_then(Value::as_str).unwrap_or_default().to_string();
                    self.turn(&words, false, to_up, up_rx).await?;
                }
                // Calls the model makes, not items a client created (which
                // the upstream echoes as conversation.item.*).
                Some("response.function_call_arguments.done" | "response.output_item.done") => {
                    self.call(&event, calls)?;
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
                        if self.client_resumes {
                            // Resumable by this agent's sessions only.
                            self.relay.handles.given(h, self.bridge.agent());
                        }
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
                    self.call(&event, calls)?;
                }
                if event.get("toolCallCancellation").is_some() {
                    let _ = self.bridge.handle_event(&event);
                }
            }
        }
        if send_to_client {
            let len = text.len();
            to_client.push(Message::text(text.to_string()), len).map_err(client_full)?;
        }
        Ok(())
    }

    /// A message of the connection a resumption replaced: its calls and
    /// model output still count; its resumption handles are stale.
    pub(super) async fn on_retired(
        &mut self,
        text: &str,
        to_client: &Outbox<Message>,
        to_up: &Outbox<ToUpstream>,
        calls: &mpsc::UnboundedSender<Answered>,
        up_rx: &mut futures::stream::SplitStream<UpStream>,
    ) -> Result<(), Close> {
        let stale = serde_json::from_str::<serde_json::Map<String, Value>>(text)
            .is_ok_and(|m| m.contains_key("sessionResumptionUpdate") || m.contains_key("goAway"));
        if stale {
            return Ok(());
        }
        self.on_upstream(text, to_client, to_up, calls, up_rx).await
    }
}
