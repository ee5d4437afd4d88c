//! The tools the upstream is told of: the agent's at the turn's tier and
//! the client's own, declared again when the visible set changes (OpenAI
//! `session.update`; Gemini by resuming on a new connection).

use super::{Close, Session, ToUpstream, push_up};
use crate::Format;
use crate::relay::budget::Outbox;
use crate::relay::close::up_full;
use crate::relay::upstream::{CONNECT_TIMEOUT, UpStream, connect};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use std::collections::HashSet;
use tokio_tungstenite::tungstenite;
use toolhost_core::TurnCues;

impl Session {
    /// Starts a turn for `words` (with `more`, refines the current one: more
    /// words of the same utterance); re-declares when the visible set
    /// changed.
    pub(super) async fn turn(
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
    pub(super) async fn redeclare(
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
                let up = connect(&self.url, Format::GeminiLive, &self.upstream.key, self.relay.max_message)
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
                to_up.push(ToUpstream::Swap(tx), 0).map_err(up_full)?;
                self.retired = Some(std::mem::replace(up_rx, rx));
                Ok(())
            }
        }
    }

    /// Keeps the client's own function declarations, less any named like
    /// one of the agent's tools.
    pub(super) fn take_client_tools(&mut self, tools: Vec<Value>) {
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
    pub(super) fn with_client_tools(&self, ours: Value) -> Value {
        let mut tools = match ours {
            Value::Array(t) => t,
            _ => Vec::new(),
        };
        tools.extend(self.client_tools.iter().cloned());
        Value::Array(tools)
    }

    /// The client's setup with the agent's tools and resumption asked for.
    pub(super) fn gemini_setup(&mut self, mut setup: serde_json::Map<String, Value>) -> Value {
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
