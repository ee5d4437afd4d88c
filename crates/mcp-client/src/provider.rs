//! A connected server's tools as a registry provider: calls go to the
//! server with the budget's deadline.

use super::block_on;
use super::questions::Asking;
use super::server::Server;
use crate::content::from_mcp;
use crate::tool::{CallContext, CallError, CallStats, Content, Provider, ProviderKind, ToolDef, ToolOutput};
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ErrorCode, ServerResult};
use rmcp::model::{InputRequest, InputRequests, InputResponses};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(super) use toolhost_mcp_wire::upstream::cut;

/// How many times one call may be answered `input_required` before it
/// is given up (rmcp's own bound for the same loop).
const MAX_INPUT_ROUNDS: u32 = 8;

/// How one request of a call ended.
#[allow(clippy::large_enum_variant)] // one per request, never stored
enum Round {
    Answer(Result<ServerResult, ServiceError>),
    /// The caller gave up; the server was told.
    Cancelled,
    /// The deadline passed (the time spent waiting for the caller's
    /// answers not counted); the server was told.
    TimedOut,
}

/// Deadline of a call when the budget gave none.
const DEFAULT_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One connection's tools, as a registry provider.
#[derive(Debug)]
pub(super) struct McpTools {
    pub(super) server: Arc<Server>,
    pub(super) tools: Vec<ToolDef>,
    /// Exposed name -> the server's own name.
    pub(super) remote: HashMap<String, String>,
    /// The largest result accepted, in bytes of JSON (the wasm output cap).
    pub(super) max_output_bytes: usize,
    /// By exposed name: the tool's declared outputSchema, which its
    /// `structuredContent` must match.
    pub(super) output_validators: HashMap<String, crate::validate::Validator>,
    /// The server as the MCP front uses it beyond its tools.
    pub(super) upstream: toolhost_mcp_wire::upstream::UpstreamHandle,
}

impl McpTools {
    /// Sends one request of a call and waits for its answer, the caller's
    /// cancellation or the deadline, whichever comes first.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        peer: &rmcp::Peer<rmcp::RoleClient>,
        params: CallToolRequestParams,
        ctx: &CallContext,
        asking: Option<&Arc<Asking>>,
        started: Instant,
        timeout: Duration,
        cancelled: &tokio_util::sync::CancellationToken,
    ) -> Round {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let server = &self.server;
        let events = ctx.events.clone();
        let fut = async move {
            // The deadline is the call's own: no rmcp timeout, which would
            // count the time the caller takes to answer a question.
            let handle = match peer.send_request_with_option(request, PeerRequestOptions::no_options()).await {
                Ok(h) => h,
                Err(e) => return Round::Answer(Err(e)),
            };
            // rmcp puts a progress token of its own on every request: the
            // server's progress for it (and its log lines, while this is its
            // only call) go to this call's caller, under the client's token.
            let _relayed = events.map(|sink| server.relay.register(&handle.progress_token, sink));
            let _asks = asking.map(|a| server.questions.register(handle.id.clone(), a.clone()));
            let (id, peer) = (handle.id.clone(), handle.peer.clone());
            let deadline = async {
                loop {
                    let budget = timeout + asking.map_or(Duration::ZERO, |a| a.waited());
                    let spent = started.elapsed();
                    if spent >= budget {
                        return;
                    }
                    tokio::time::sleep(budget - spent).await;
                }
            };
            let ended = tokio::select! {
                r = handle.await_response() => return Round::Answer(r),
                () = cancelled.cancelled() => (Round::Cancelled, "cancelled by the client"),
                () = deadline => (Round::TimedOut, "the call's deadline passed"),
            };
            // The caller gave up, or time ran out: so does the server's work.
            let cancel = rmcp::model::CancelledNotification::new(rmcp::model::CancelledNotificationParam::new(
                Some(id),
                Some(ended.1.into()),
            ));
            let _ = peer.send_notification(cancel.into()).await;
            ended.0
        };
        block_on(&self.server.rt, fut)
    }

    /// Answers a 2026-07-28 server's `input_required` through the call's
    /// client, one question at a time (each blocks until answered).
    fn answer(
        &self,
        tool: &str,
        requests: InputRequests,
        asking: Option<&Arc<Asking>>,
    ) -> Result<InputResponses, CallError> {
        let failed = |message: String| CallError::Failed { tool: tool.to_string(), message };
        let mut answers = InputResponses::new();
        for (key, request) in requests {
            let (method, decline) = match &request {
                InputRequest::Elicitation(_) => ("elicitation/create", true),
                InputRequest::CreateMessage(_) => ("sampling/createMessage", false),
                // toolhost offers no roots: an empty list.
                InputRequest::ListRoots(_) => {
                    answers.insert(key, serde_json::json!({"roots": []}));
                    continue;
                }
                other => {
                    return Err(failed(format!(
                        "MCP server {:?} asked for input toolhost does not know: {}",
                        self.server.cfg.name,
                        cut(&serde_json::to_string(other).unwrap_or_default())
                    )));
                }
            };
            let question = serde_json::to_value(&request).map_err(|e| failed(e.to_string()))?;
            let params = question.get("params").cloned().unwrap_or(Value::Object(Default::default()));
            let answer = match asking {
                Some(a) => a.ask(method, params),
                None => Err(crate::tool::offer::AskError::Unsupported(
                    "this call came from no client that can be asked".into(),
                )),
            };
            match answer {
                Ok(v) => {
                    answers.insert(key, v);
                }
                Err(crate::tool::offer::AskError::Suspended) => {
                    return Err(CallError::Cancelled { tool: tool.to_string() });
                }
                // Nobody to ask: an elicitation is declined, as a client
                // without a person would.
                Err(crate::tool::offer::AskError::Unsupported(_)) if decline => {
                    answers.insert(key, serde_json::json!({"action": "decline"}));
                }
                Err(e) => {
                    return Err(failed(format!(
                        "MCP server {:?} asked its caller ({method}) and got no answer: {e}",
                        self.server.cfg.name
                    )));
                }
            }
        }
        Ok(answers)
    }
}

impl Provider for McpTools {
    fn name(&self) -> &str {
        &self.server.cfg.name
    }

    fn kind(&self) -> ProviderKind {
        ProviderKind::Mcp
    }

    fn tools(&self) -> &[ToolDef] {
        &self.tools
    }

    fn is_available(&self) -> bool {
        self.server.available.load(Ordering::Acquire)
    }

    fn extension(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        Some(&self.upstream)
    }

    fn call(&self, tool: &str, arguments: &Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        let started = Instant::now();
        let unavailable = |message: String| {
            self.server.unavailable_calls.fetch_add(1, Ordering::Relaxed);
            CallError::Unavailable { tool: tool.to_string(), message }
        };
        let peer = self.server.peer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(peer) = peer.filter(|_| self.is_available()) else {
            let why = self.server.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(unavailable(format!(
                "MCP server {:?} is not connected ({}); reconnecting",
                self.server.cfg.name,
                why.unwrap_or_else(|| "connecting".into())
            )));
        };
        let remote = self.remote.get(tool).cloned().unwrap_or_else(|| tool.to_string());
        let timeout = ctx.deadline.unwrap_or(DEFAULT_CALL_TIMEOUT);
        let span = toolhost_core::trace::start(toolhost_core::trace::Kind::Client, ctx.trace.as_ref(), || {
            (
                format!("tools/call {remote}"),
                vec![
                    toolhost_core::trace::attr("mcp.method.name", "tools/call"),
                    toolhost_core::trace::attr("gen_ai.tool.name", remote.clone()),
                    toolhost_core::trace::attr("toolhost.server", self.server.cfg.name.clone()),
                ],
            )
        });
        let mut params = CallToolRequestParams::new(remote);
        if let Value::Object(o) = arguments {
            params = params.with_arguments(o.clone());
        }
        // The trace goes on in the request's `_meta` (and, over HTTP, in
        // its headers: [`crate::traced`]).
        if let Some(cx) = span.as_ref().or(ctx.trace.as_ref()) {
            let mut meta = serde_json::Map::new();
            toolhost_core::trace::inject_meta(cx, &mut meta);
            params.meta = Some(rmcp::model::RequestMetaObject::from(meta));
        }
        let _span = Ended(span);
        // The caller's cancellation, as a token every round's request races.
        let cancelled = tokio_util::sync::CancellationToken::new();
        if let Some(cancel) = &ctx.cancel {
            let cancelled = cancelled.clone();
            cancel.on_cancel(move || cancelled.cancel());
        }
        // The server's questions reach the caller ([`super::questions`]).
        let (wait, asks) = self.server.ask_limits;
        let asking = ctx.asker.clone().map(|a| Asking::new(a, wait, asks));
        let mut rounds = 0;
        let response = loop {
            let round = self.send(&peer, params.clone(), ctx, asking.as_ref(), started, timeout, &cancelled);
            let input = match round {
                Round::Answer(Ok(ServerResult::InputRequiredResult(input))) => input,
                Round::Answer(r) => break r,
                Round::Cancelled => return Err(CallError::Cancelled { tool: tool.to_string() }),
                Round::TimedOut => {
                    // As if the server were gone: the supervisor pings now.
                    self.server.recheck.notify_one();
                    return Err(CallError::Timeout {
                        tool: tool.to_string(),
                        limit_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                    });
                }
            };
            // A 2026-07-28 server asks by ending the call unanswered: ask,
            // then try again with the answers and its state.
            rounds += 1;
            if rounds > MAX_INPUT_ROUNDS {
                return Err(CallError::Failed {
                    tool: tool.to_string(),
                    message: format!(
                        "MCP server {:?} asked for input {MAX_INPUT_ROUNDS} times without answering the call",
                        self.server.cfg.name
                    ),
                });
            }
            params.input_responses =
                Some(self.answer(tool, input.input_requests.unwrap_or_default(), asking.as_ref())?);
            params.request_state = input.request_state;
        };
        if let (Some(asking), Some(cost)) = (&asking, &ctx.cost) {
            cost.set_waited(asking.waited());
        }
        // A call that failed as if the server were gone (a restart, a stale
        // session; a timed-out one above): have the supervisor check the
        // connection now rather than at its next ping.
        if matches!(
            response,
            Err(ServiceError::TransportClosed | ServiceError::TransportSend(_) | ServiceError::Cancelled { .. })
        ) {
            self.server.recheck.notify_one();
        }
        let result = match response {
            Ok(ServerResult::CallToolResult(r)) => r,
            Ok(other) => {
                return Err(CallError::Failed {
                    tool: tool.to_string(),
                    message: format!(
                        "the server answered tools/call with something that is not a tool result: {}",
                        cut(&serde_json::to_string(&other).unwrap_or_default())
                    ),
                });
            }
            // An answer cut at the message limit as it arrived.
            Err(ServiceError::McpError(e))
                if e.code.0 == super::child::OVERSIZED_CODE
                    && e.data.as_ref().and_then(|d| d.get("toolhost")).and_then(Value::as_str) == Some("oversized") =>
            {
                let size = e.data.as_ref().and_then(|d| d.get("bytes")).and_then(Value::as_u64).unwrap_or(0);
                return Err(CallError::OutputTooLarge {
                    tool: tool.to_string(),
                    size: usize::try_from(size).unwrap_or(usize::MAX),
                    limit: self.max_output_bytes,
                });
            }
            // An error's text is the server's: held to a line's worth, not
            // the output cap's megabyte.
            Err(ServiceError::McpError(e)) if e.code == ErrorCode::INVALID_PARAMS => {
                return Err(CallError::InvalidInput { tool: tool.to_string(), message: cut(&e.message) });
            }
            Err(ServiceError::McpError(e)) => {
                return Err(CallError::Failed {
                    tool: tool.to_string(),
                    message: format!("server error {}: {}", e.code.0, cut(&e.message)),
                });
            }
            Err(
                e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_) | ServiceError::Cancelled { .. }),
            ) => {
                return Err(unavailable(format!(
                    "MCP server {:?} went away during the call ({e})",
                    self.server.cfg.name
                )));
            }
            Err(e) => return Err(CallError::Failed { tool: tool.to_string(), message: e.to_string() }),
        };
        // The same cap as a wasm tool's output: an upstream cannot flood
        // the model's context (or the host's memory downstream).
        let size = serde_json::to_vec(&result.content).map_or(usize::MAX, |v| v.len())
            + result.structured_content.as_ref().map_or(0, |v| v.to_string().len());
        if size > self.max_output_bytes {
            return Err(CallError::OutputTooLarge { tool: tool.to_string(), size, limit: self.max_output_bytes });
        }
        let content = from_mcp(&result.content);
        if result.is_error == Some(true) {
            let message = content
                .iter()
                .filter_map(|c| if let Content::Text(t) = c.plain() { Some(t.as_str()) } else { None })
                .collect::<Vec<_>>()
                .join("\n");
            return Err(CallError::Failed {
                tool: tool.to_string(),
                message: if message.is_empty() { "the tool reported an error".into() } else { message },
            });
        }
        // A tool that declares an outputSchema promises structuredContent
        // matching it; a client that validates would reject anything else.
        if let Some(validator) = self.output_validators.get(tool) {
            let checked = match &result.structured_content {
                Some(v) => validator.check(v).map_err(|e| e.0),
                None => Err("it returned no structuredContent".to_string()),
            };
            if let Err(why) = checked {
                return Err(CallError::Failed {
                    tool: tool.to_string(),
                    message: format!(
                        "MCP server {:?} broke the tool's outputSchema: {}",
                        self.server.cfg.name,
                        crate::tool::log_safe(&why)
                    ),
                });
            }
        }
        // The blocks and the structured result go on as the server sent
        // them (annotations, resource links and all).
        Ok(ToolOutput {
            content,
            structured: result.structured_content,
            stats: CallStats { duration: started.elapsed(), ..CallStats::default() },
        })
    }
}

/// Ends the upstream request's span when the call returns, however it does.
struct Ended(Option<toolhost_core::trace::Context>);

impl Drop for Ended {
    fn drop(&mut self) {
        toolhost_core::trace::end(self.0.as_ref(), None);
    }
}
