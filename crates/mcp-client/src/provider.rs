//! A connected server's tools as a registry provider: calls go to the
//! server with the budget's deadline.

use super::block_on;
use super::server::Server;
use crate::content::from_mcp;
use crate::tool::{CallContext, CallError, CallStats, Content, Provider, ProviderKind, ToolDef, ToolOutput};
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ErrorCode, ServerResult};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub(super) use toolhost_mcp_wire::upstream::cut;

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
        let mut params = CallToolRequestParams::new(remote);
        if let Value::Object(o) = arguments {
            params = params.with_arguments(o.clone());
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(timeout);
        // The caller's cancellation, as a future the request races.
        let (cancelled_tx, cancelled_rx) = tokio::sync::oneshot::channel::<()>();
        if let Some(cancel) = &ctx.cancel {
            cancel.on_cancel(move || {
                let _ = cancelled_tx.send(());
            });
        }
        let relay = &self.server.relay;
        let events = ctx.events.clone();
        let fut = async move {
            let handle = peer.send_request_with_option(request, options).await?;
            // rmcp puts a progress token of its own on every request: the
            // server's progress for it (and its log lines, while this is its
            // only call) go to this call's caller, under the client's token.
            let _relayed = events.map(|sink| relay.register(&handle.progress_token, sink));
            let (id, peer) = (handle.id.clone(), handle.peer.clone());
            tokio::select! {
                r = handle.await_response() => r.map(Some),
                Ok(()) = cancelled_rx => {
                    // The caller gave up: so does the server's work.
                    let cancel = rmcp::model::CancelledNotification::new(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some("cancelled by the client".into()),
                    ));
                    let _ = peer.send_notification(cancel.into()).await;
                    Ok(None)
                }
            }
        };
        let response = match block_on(&self.server.rt, fut) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => return Err(CallError::Cancelled { tool: tool.to_string() }),
            Err(e) => Err(e),
        };
        // A call that failed as if the server were gone (a restart, a stale
        // session): have the supervisor check the connection now rather
        // than at its next ping.
        if matches!(
            response,
            Err(ServiceError::Timeout { .. }
                | ServiceError::TransportClosed
                | ServiceError::TransportSend(_)
                | ServiceError::Cancelled { .. })
        ) {
            self.server.recheck.notify_one();
        }
        let result = match response {
            Ok(ServerResult::CallToolResult(r)) => r,
            Ok(other) => {
                return Err(CallError::Failed {
                    tool: tool.to_string(),
                    message: format!("the server answered tools/call with an unexpected result: {other:?}"),
                });
            }
            Err(ServiceError::Timeout { .. }) => {
                return Err(CallError::Timeout {
                    tool: tool.to_string(),
                    limit_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
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
