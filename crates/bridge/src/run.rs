//! Running a bridge: declarations, turns, and the engine's function calls.

use super::*;
use crate::mcp::declare::{gemini_tools, openai_tools};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

impl Bridge {
    /// A bridge for `agent` (an `npcs[].name`) in `format`, with its own
    /// conversation (turns, anti-spam clock). Before the first
    /// [`Bridge::update_tier`] it works at the agent's ceiling.
    pub fn new(host: Arc<Pipeline>, agent: &str, format: Format) -> Result<Bridge, BridgeError> {
        let conversation = host.conversation(Some(agent))?;
        let mut id = [0u8; 8];
        // Without OS randomness the id only loses uniqueness: it names the
        // session in the audit trail and grants nothing.
        let _ = getrandom::fill(&mut id);
        let session = format!("bridge-{}", hex::encode(id));
        tracing::debug!(agent, format = format.as_str(), session, "bridge opened");
        Ok(Bridge {
            host,
            agent: agent.to_string(),
            format,
            conversation,
            timeout: MAX_TOOL_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT_BYTES,
            session,
            closed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        })
    }

    /// Bounds each call by `timeout` (clamped to at most
    /// [`MAX_TOOL_TIMEOUT`] and at least 1 ms). A tool whose own deadline
    /// is shorter keeps it.
    #[must_use]
    pub fn with_tool_timeout(mut self, timeout: Duration) -> Bridge {
        self.timeout = timeout.clamp(Duration::from_millis(1), MAX_TOOL_TIMEOUT);
        self
    }

    /// Cuts each function output at `bytes` (at least 256).
    #[must_use]
    pub fn with_max_output(mut self, bytes: usize) -> Bridge {
        self.max_output = bytes.max(256);
        self
    }

    /// Names this bridge's session in the audit trail (by default
    /// `bridge-` and 16 random hex digits); the engine's own session id is
    /// a good choice.
    #[must_use]
    pub fn with_session_id(mut self, id: impl Into<String>) -> Bridge {
        self.session = id.into();
        self
    }

    /// The agent.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The wire format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The tool timeout.
    pub fn tool_timeout(&self) -> Duration {
        self.timeout
    }

    /// The session id the audit trail records for this bridge's calls.
    pub fn session_id(&self) -> &str {
        &self.session
    }

    /// The tier the bridge works at now, and why.
    pub fn tier(&self) -> TurnTier {
        self.host.turn_tier(&self.conversation)
    }

    /// Whether [`Bridge::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the bridge: later calls run nothing and are answered with an
    /// `unavailable` error output; declarations are empty. Closing twice
    /// is harmless. The engine session and the host are the caller's.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            tracing::debug!(agent = %self.agent, session = %self.session, "bridge closed");
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tools the agent may see now (none once closed).
    fn visible(&self) -> Vec<Arc<RegisteredTool>> {
        if self.is_closed() {
            return Vec::new();
        }
        let catalog = self.host.registry().snapshot();
        // The agent was checked when the bridge was made.
        self.host.budget().available_tools(&catalog, Some(&self.agent), self.tier().tier).unwrap_or_default()
    }

    /// Gemini: the functions last declared `NON_BLOCKING` (their tier is
    /// above FAST), whose responses carry a `scheduling`.
    pub fn non_blocking(&self) -> HashSet<String> {
        self.state().non_blocking.clone()
    }

    /// The names of the tools the agent may see now, sorted.
    pub fn visible_names(&self) -> Vec<String> {
        self.visible().iter().map(|t| t.def.name.clone()).collect()
    }

    /// The engine-native tools payload for the tools visible now: OpenAI's
    /// `session.tools` array or Gemini's `setup.tools` array. Remembered as
    /// what the engine was told (see [`Bridge::update_tier`]).
    pub fn declarations(&self) -> Value {
        let tools = self.visible();
        self.remember(&tools);
        self.payload(&tools)
    }

    /// The client event that declares the visible tools: for OpenAI a
    /// complete `session.update` (`session.type` `realtime`, `tools`,
    /// `tool_choice` `auto`); for Gemini `{"setup": {"tools": [...]}}`, to
    /// merge into the setup message with the model and its configuration.
    pub fn declare_event(&self) -> Value {
        let tools = self.visible();
        self.remember(&tools);
        self.event(&tools)
    }

    /// Starts a turn for `utterance` (the seed's tier selector, capped at
    /// the agent's ceiling; a DM override in force wins) and, when the
    /// visible tools changed from what the engine was last told, the event
    /// that re-declares them.
    pub fn update_tier(&self, utterance: &str, cues: TurnCues) -> Result<TierUpdate, BridgeError> {
        self.admit_utterance(utterance)?;
        let tier = self.host.begin_turn(&self.conversation, utterance, cues);
        toolhost_core::trace::event("voice turn", || {
            vec![
                toolhost_core::trace::attr("toolhost.agent", self.agent.clone()),
                toolhost_core::trace::attr("toolhost.tier", tier.tier.to_string()),
            ]
        });
        let declare = self.refresh();
        tracing::debug!(
            agent = %self.agent, tier = %tier.tier, reason = %tier.reason, redeclare = declare.is_some(),
            "bridge turn"
        );
        Ok(TierUpdate { tier, declare })
    }

    /// Refuses an utterance on a closed bridge, or one over the limit.
    fn admit_utterance(&self, utterance: &str) -> Result<(), BridgeError> {
        if self.is_closed() {
            return Err(BridgeError::Closed);
        }
        if utterance.len() > MAX_UTTERANCE_BYTES {
            return Err(BridgeError::UtteranceTooLong { bytes: utterance.len(), limit: MAX_UTTERANCE_BYTES });
        }
        Ok(())
    }

    /// [`Bridge::update_tier`] for more words of the same utterance (a
    /// transcript that arrives in pieces): the turn is refined, not begun
    /// again ([`Pipeline::refine_turn`]): its calls stay counted.
    pub fn refine_tier(&self, utterance: &str, cues: TurnCues) -> Result<TierUpdate, BridgeError> {
        self.admit_utterance(utterance)?;
        let tier = self.host.refine_turn(&self.conversation, utterance, cues);
        Ok(TierUpdate { tier, declare: self.refresh() })
    }

    /// The event that re-declares the tools when the visible set changed
    /// since the engine was last told (a DM override set or expired, a
    /// plugin added or removed, a tool measured into another tier), else
    /// `None`.
    pub fn refresh(&self) -> Option<Value> {
        let tools = self.visible();
        let names: Vec<String> = tools.iter().map(|t| t.def.name.clone()).collect();
        {
            let mut state = self.state();
            if state.declared.as_ref() == Some(&names) {
                return None;
            }
            state.declared = Some(names);
        }
        Some(self.event(&tools))
    }

    fn remember(&self, tools: &[Arc<RegisteredTool>]) {
        self.state().declared = Some(tools.iter().map(|t| t.def.name.clone()).collect());
    }

    fn payload(&self, tools: &[Arc<RegisteredTool>]) -> Value {
        match self.format {
            Format::OpenAiRealtime => openai_tools(tools),
            Format::GeminiLive => {
                let payload = gemini_tools(&self.host, Some(&self.agent), tools);
                let slow = payload
                    .get(0)
                    .and_then(|t| t.get("functionDeclarations"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|f| f.get("behavior").and_then(Value::as_str) == Some("NON_BLOCKING"))
                    .filter_map(|f| f.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect();
                self.state().non_blocking = slow;
                payload
            }
        }
    }

    fn event(&self, tools: &[Arc<RegisteredTool>]) -> Value {
        let payload = self.payload(tools);
        match self.format {
            Format::OpenAiRealtime => json!({
                "type": "session.update",
                "session": {"type": "realtime", "tools": payload, "tool_choice": "auto"},
            }),
            Format::GeminiLive => json!({"setup": {"tools": payload}}),
        }
    }

    /// Runs the function call `name` with `arguments`, the JSON text the
    /// engine sent (empty text is `{}`), through the host's pipeline as
    /// this bridge's agent in its current turn. Never fails: every failure
    /// is an output the model can read.
    pub fn handle_call(&self, name: &str, arguments: &str) -> CallOutcome {
        self.call(name, Arguments::parse(arguments))
    }

    fn call(&self, name: &str, arguments: Arguments) -> CallOutcome {
        let started = Instant::now();
        let tier = self.tier().tier;
        let refuse = |code: &'static str, kind: &'static str, message: String| CallFailure { code, kind, message };
        let (result, truncated) = if self.is_closed() {
            let message = "the tool bridge is closed: no tool can be called through it".to_string();
            (Err(refuse("unavailable", "closed", message)), false)
        } else if !valid_tool_name(name) {
            // Cannot name a tool: answered as the pipeline answers a
            // missing one, without sending the text down it.
            let e = CallError::UnknownTool(log_safe(&truncate(name, 80).0).into_owned());
            (Err(refuse(e.code(), e.kind(), e.to_string())), false)
        } else {
            match arguments {
                Arguments::TooLarge(bytes) => {
                    let message = format!(
                        "invalid input for {name}: the arguments are {bytes} bytes, over the bridge's limit of {MAX_ARGUMENTS_BYTES} bytes"
                    );
                    (Err(refuse("invalid_input", "invalid_input", message)), false)
                }
                Arguments::Value(v) => self.run(name, &v, None),
                Arguments::NotJson { text, error } => self.run(name, &Value::String(text), Some(&error)),
            }
        };
        let outcome = CallOutcome { tool: name.to_string(), result, tier, duration: started.elapsed(), truncated };
        let tool = log_safe(&truncate(name, 80).0).into_owned();
        match &outcome.result {
            Ok(_) => tracing::info!(
                agent = %self.agent, session = %self.session, tool, tier = %tier,
                duration_ms = outcome.duration.as_secs_f64() * 1e3, truncated, "bridged call"
            ),
            Err(f) => tracing::info!(
                agent = %self.agent, session = %self.session, tool, tier = %tier,
                duration_ms = outcome.duration.as_secs_f64() * 1e3, code = f.code, kind = f.kind, "bridged call failed"
            ),
        }
        outcome
    }

    /// One call through the pipeline. `not_json`: the arguments were text
    /// that does not parse, sent as a string; its error replaces the
    /// pipeline's "must be an object".
    fn run(&self, name: &str, arguments: &Value, not_json: Option<&str>) -> (Result<Value, CallFailure>, bool) {
        use toolhost_core::trace;
        // The voice relay's call: a trace of its own (the voice engine
        // sends no trace context).
        let span = trace::start(trace::Kind::Server, None, || {
            (
                format!("voice call {name}"),
                vec![
                    trace::attr("gen_ai.tool.name", name.to_string()),
                    trace::attr("toolhost.agent", self.agent.clone()),
                    trace::attr("toolhost.voice.session", self.session.clone()),
                ],
            )
        });
        let ctx = CallContext {
            agent: Some(self.agent.clone()),
            deadline: Some(self.timeout),
            session: Some(self.session.clone()),
            trace: span.clone(),
            ..CallContext::default()
        };
        let result = self.host.call_in_turn(&self.conversation, name, arguments, &ctx);
        trace::end(span.as_ref(), result.as_ref().err().map(CallError::kind));
        match result {
            Ok(out) => {
                let (v, truncated) = render(&out, self.max_output);
                (Ok(v), truncated)
            }
            Err(e) => {
                let message = match (&e, not_json) {
                    (CallError::InvalidInput { tool, .. }, Some(error)) => {
                        format!("invalid input for {tool}: the arguments are not valid JSON ({error})")
                    }
                    _ => e.to_string(),
                };
                (Err(CallFailure { code: e.code(), kind: e.kind(), message: truncate(&message, 2048).0 }), false)
            }
        }
    }

    /// Handles one server event of the engine: for a function call, runs
    /// it and returns the client events to send back (OpenAI:
    /// `conversation.item.create` with the `function_call_output`, then
    /// `response.create`; Gemini: one `toolResponse`). `Ok(None)`: nothing
    /// to send (an event that is not a function call, a call already
    /// answered, a `toolCallCancellation`, calls all cancelled). A call
    /// event without a usable call id is an error, and nothing runs.
    pub fn handle_event(&self, event: &Value) -> Result<Option<Vec<Value>>, BridgeError> {
        match self.format {
            Format::OpenAiRealtime => self.openai_event(event),
            Format::GeminiLive => self.gemini_event(event),
        }
    }

    fn malformed(&self, event: &str, reason: impl Into<String>) -> BridgeError {
        let e = BridgeError::MalformedEvent {
            format: self.format.as_str(),
            event: log_safe(&truncate(event, 80).0).into_owned(),
            reason: reason.into(),
        };
        tracing::warn!(agent = %self.agent, session = %self.session, error = %e, "bridge event refused");
        e
    }

    fn openai_event(&self, event: &Value) -> Result<Option<Vec<Value>>, BridgeError> {
        let Some(kind) = event.get("type").and_then(Value::as_str) else { return Ok(None) };
        let call = match kind {
            "response.function_call_arguments.done" => event,
            "response.output_item.done" | "conversation.item.done" => match event.get("item") {
                Some(item) if item.get("type").and_then(Value::as_str) == Some("function_call") => item,
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let call_id = call_id(call, "call_id").map_err(|r| self.malformed(kind, r))?;
        if !self.state().answered.insert(call_id) {
            tracing::debug!(call_id = %log_safe(call_id), "function call already answered");
            return Ok(None);
        }
        let outcome = match call.get("name") {
            Some(Value::String(name)) => match call.get("arguments") {
                None | Some(Value::Null) => self.call(name, Arguments::Value(json!({}))),
                Some(Value::String(text)) => self.handle_call(name, text),
                Some(other) => self.call(name, Arguments::Value(other.clone())),
            },
            _ => self.no_name(),
        };
        Ok(Some(vec![
            json!({
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": call_id, "output": outcome.output_text()},
            }),
            json!({"type": "response.create"}),
        ]))
    }

    fn no_name(&self) -> CallOutcome {
        self.failed("", "invalid_input", "invalid_input", "the function call names no function".into())
    }

    /// An outcome for a call the bridge answers without running anything.
    fn failed(&self, tool: &str, code: &'static str, kind: &'static str, message: String) -> CallOutcome {
        CallOutcome {
            tool: tool.to_string(),
            result: Err(CallFailure { code, kind, message }),
            tier: self.tier().tier,
            duration: Duration::ZERO,
            truncated: false,
        }
    }

    fn gemini_event(&self, event: &Value) -> Result<Option<Vec<Value>>, BridgeError> {
        if let Some(cancel) = event.get("toolCallCancellation") {
            let ids = cancel.get("ids").and_then(Value::as_array).ok_or_else(|| {
                self.malformed("toolCallCancellation", "toolCallCancellation.ids must be an array of call ids")
            })?;
            let mut state = self.state();
            for id in ids.iter().filter_map(Value::as_str).filter(|id| id.len() <= MAX_CALL_ID_BYTES) {
                state.cancelled.insert(id);
            }
            tracing::debug!(agent = %self.agent, n = ids.len(), "tool calls cancelled by the engine");
            return Ok(None);
        }
        let Some(tool_call) = event.get("toolCall") else { return Ok(None) };
        let calls = tool_call
            .get("functionCalls")
            .and_then(Value::as_array)
            .ok_or_else(|| self.malformed("toolCall", "toolCall.functionCalls must be an array"))?;
        // Every call needs an id before any runs: a response without one
        // cannot be matched, and half an answer leaves the model waiting.
        let mut ids = Vec::with_capacity(calls.len());
        for (i, c) in calls.iter().enumerate() {
            ids.push(call_id(c, "id").map_err(|r| self.malformed("toolCall", format!("functionCalls[{i}]: {r}")))?);
        }
        let todo: Vec<(usize, &str)> = {
            let mut state = self.state();
            ids.iter()
                .enumerate()
                .filter(|(_, id)| !state.cancelled.contains(id) && state.answered.insert(id))
                .map(|(i, id)| (i, *id))
                .collect()
        };
        let outcomes: Vec<CallOutcome> = std::thread::scope(|s| {
            let handles: Vec<_> = todo
                .iter()
                .enumerate()
                .map(|(n, &(i, _))| {
                    let c = &calls[i];
                    s.spawn(move || {
                        if n >= MAX_CALLS_PER_EVENT {
                            let message = format!(
                                "at most {MAX_CALLS_PER_EVENT} function calls run per tool call; call again with fewer"
                            );
                            let tool = c.get("name").and_then(Value::as_str).unwrap_or_default();
                            return self.failed(tool, "capacity_exceeded", "capacity_exceeded", message);
                        }
                        match c.get("name") {
                            Some(Value::String(name)) => {
                                let args = match c.get("args") {
                                    None | Some(Value::Null) => Arguments::Value(json!({})),
                                    Some(v) => sized(v),
                                };
                                self.call(name, args)
                            }
                            _ => self.no_name(),
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        self.failed("", "handler_error", "trap", "the call failed inside the bridge".into())
                    })
                })
                .collect()
        });
        let state = self.state();
        let responses: Vec<Value> = todo
            .iter()
            .zip(outcomes)
            .filter(|((_, id), _)| {
                let keep = !state.cancelled.contains(id);
                if !keep {
                    tracing::debug!(call_id = %log_safe(id), "response to a cancelled call dropped");
                }
                keep
            })
            .map(|((i, id), outcome)| {
                let name = calls[*i].get("name").and_then(Value::as_str).unwrap_or_default();
                json!({"id": id, "name": name, "response": outcome.gemini_response()})
            })
            .collect();
        if responses.is_empty() {
            return Ok(None);
        }
        Ok(Some(vec![json!({"toolResponse": {"functionResponses": responses}})]))
    }
}

/// A Gemini call's parsed `args`, held to the arguments limit.
pub(crate) fn sized(v: &Value) -> Arguments {
    let bytes = v.to_string().len();
    if bytes > MAX_ARGUMENTS_BYTES { Arguments::TooLarge(bytes) } else { Arguments::Value(v.clone()) }
}

/// The call id under `key`: a non-empty string of at most
/// [`MAX_CALL_ID_BYTES`].
pub(crate) fn call_id<'a>(call: &'a Value, key: &str) -> Result<&'a str, String> {
    match call.get(key) {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_CALL_ID_BYTES => Ok(id),
        Some(Value::String(id)) if id.is_empty() => Err(format!("{key} is empty")),
        Some(Value::String(id)) => Err(format!("{key} is {} bytes, over {MAX_CALL_ID_BYTES}", id.len())),
        Some(_) => Err(format!("{key} must be a string")),
        None => Err(format!("no {key}")),
    }
}

/// `s` cut at `max` bytes (on a character boundary), and whether it was.
pub(crate) fn truncate(s: &str, max: usize) -> (String, bool) {
    let (head, cut) = crate::tool::cut_at(s, max);
    (head.to_string(), cut)
}

/// A successful result for the model, within `cap` bytes: a structured
/// result as JSON, else the blocks as text (binary ones summarized).
pub(crate) fn render(out: &ToolOutput, cap: usize) -> (Value, bool) {
    if let Some(v) = out.structured.clone().or_else(|| toolhost_mcp_wire::content::structured(&out.content)) {
        let text = v.to_string();
        if text.len() <= cap {
            return (v, false);
        }
        return (Value::String(cut(&text, cap)), true);
    }
    let text = out.content.iter().map(block_text).collect::<Vec<_>>().join("\n");
    if text.len() <= cap {
        return (Value::String(text), false);
    }
    (Value::String(cut(&text, cap)), true)
}

/// `text` cut to fit `cap` bytes with a note saying how much was left out.
pub(crate) fn cut(text: &str, cap: usize) -> String {
    crate::tool::cut_with_note(text, cap).into_owned()
}

/// One block as text for a voice model: binary content summarized.
pub(crate) fn block_text(c: &Content) -> String {
    match c.plain() {
        Content::Text(t) => t.clone(),
        Content::Json(v) => v.to_string(),
        Content::Image { mime_type, data } => format!("[image: {mime_type}, {} bytes, not shown]", data.len()),
        Content::Audio { mime_type, data } => format!("[audio: {mime_type}, {} bytes, not played]", data.len()),
        Content::Resource { uri, body: ResourceBody::Text(t), .. } => format!("[resource {uri}]\n{t}"),
        Content::Resource { uri, mime_type, body: ResourceBody::Blob(b) } => format!(
            "[resource {uri}: {}, {} bytes, not shown]",
            mime_type.as_deref().unwrap_or("application/octet-stream"),
            b.len()
        ),
        Content::ResourceLink(l) => {
            let mut s = format!("[resource link: {} <{}>", l.name, l.uri);
            if let Some(d) = &l.description {
                s.push_str(": ");
                s.push_str(d);
            }
            s.push(']');
            s
        }
        // `plain` never returns an annotated block.
        Content::Annotated { block, .. } => block_text(block),
    }
}
