//! toolhost as an MCP server: the registry, filtered by the budget enforcer
//! for one agent, over any rmcp transport (stdio, streamable HTTP).
//!
//! Protocol errors are JSON-RPC errors; tool failures and invalid input are
//! tool results with `isError: true`, so the model can read them and correct
//! itself. Every result carries `_meta.toolhost` with a machine-readable
//! `code` (on errors), the duration and the tier.

use crate::Host;
use crate::budget::Tier;
use crate::tool::{CallContext, CallError, Content, ToolOutput};
use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult, MetaObject,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;

/// One MCP session's view of the host: everything it does is on behalf of
/// `agent` (the operator when `None`).
#[derive(Clone, Debug)]
pub struct McpFront {
    host: Arc<Host>,
    agent: Option<String>,
}

impl McpFront {
    /// A front for `agent`; fails if the agent is not in the config.
    pub fn new(host: Arc<Host>, agent: Option<String>) -> Result<McpFront, crate::budget::BudgetError> {
        if let Some(a) = &agent {
            host.budget().agent(a)?;
        }
        Ok(McpFront { host, agent })
    }

    /// The tier this session works at now: the agent's ceiling or a DM
    /// override; DEEP for the operator.
    fn tier(&self) -> Tier {
        self.host.budget().effective_tier(self.agent.as_deref(), Tier::Deep).unwrap_or(Tier::Fast)
    }

    /// The tools this session may see, as MCP tool definitions.
    pub fn visible_tools(&self) -> Vec<Tool> {
        let catalog = self.host.registry().snapshot();
        let tools =
            self.host.budget().available_tools(&catalog, self.agent.as_deref(), self.tier()).unwrap_or_default();
        tools
            .iter()
            .map(|t| {
                let schema = match &t.def.input_schema {
                    Value::Object(o) => o.clone(),
                    _ => serde_json::Map::new(),
                };
                let mut tool = Tool::new(t.def.name.clone(), t.def.description.clone(), Arc::new(schema));
                let status = self.host.budget().status(&t.def);
                tool.meta = Some(MetaObject(
                    json!({"toolhost": {
                        "estimated_duration_ms": t.def.meta.estimated_duration_ms,
                        "max_duration_ms": t.def.meta.max_duration_ms,
                        "idempotent": t.def.meta.idempotent,
                        "cacheable_seconds": t.def.meta.cacheable_seconds,
                        "tier": status.tier.map(Tier::as_str),
                        "provider": t.provider.name(),
                    }})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                ));
                tool
            })
            .collect()
    }

    /// Runs a call and shapes the MCP result. An unknown (or invisible) tool
    /// is a protocol error, as the MCP specification says; everything else,
    /// invalid input included, is a tool result the model can read.
    pub fn call(&self, name: &str, arguments: Value) -> Result<CallToolResult, ErrorData> {
        let tier = self.tier();
        let started = std::time::Instant::now();
        let ctx = CallContext { agent: self.agent.clone(), ..CallContext::default() };
        let result = self.host.call_as(self.agent.as_deref(), tier, name, &arguments, &ctx);
        let duration_ms = started.elapsed().as_secs_f64() * 1e3;
        if let Err(e @ CallError::UnknownTool(_)) = &result {
            return Err(ErrorData::invalid_params(e.to_string(), Some(json!({"code": e.code()}))));
        }
        Ok(to_result(result, tier, duration_ms))
    }
}

fn meta(v: Value) -> MetaObject {
    MetaObject(json!({ "toolhost": v }).as_object().cloned().unwrap_or_default())
}

fn to_result(result: Result<ToolOutput, CallError>, tier: Tier, duration_ms: f64) -> CallToolResult {
    match result {
        Ok(out) => {
            let structured = match &out.content[..] {
                [Content::Json(v)] if v.is_object() => Some(v.clone()),
                _ => None,
            };
            let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
            let content = out
                .content
                .iter()
                .map(|c| match c {
                    Content::Text(t) => ContentBlock::text(t.clone()),
                    Content::Json(v) => ContentBlock::text(v.to_string()),
                    Content::Image { mime_type, data } => ContentBlock::image(b64(data), mime_type.clone()),
                    Content::Audio { mime_type, data } => ContentBlock::audio(b64(data), mime_type.clone()),
                })
                .collect();
            let mut r = CallToolResult::success(content);
            r.structured_content = structured;
            r.meta = Some(meta(json!({
                "duration_ms": duration_ms,
                "tier": tier.as_str(),
                "fuel_used": out.stats.fuel_used,
            })));
            r
        }
        Err(e) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
            r.meta = Some(meta(json!({
                "code": e.code(),
                "kind": e.kind(),
                "duration_ms": duration_ms,
                "tier": tier.as_str(),
            })));
            r
        }
    }
}

impl ServerHandler for McpFront {
    fn get_info(&self) -> ServerConfig {
        let mut info =
            ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build());
        info.server_info.name = "toolhost".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        let profile = self.agent.as_deref().and_then(|a| self.host.budget().agent(a).ok());
        info.instructions = Some(match profile.and_then(|p| p.instructions.clone()) {
            Some(i) => i,
            None => match &self.agent {
                Some(a) => format!(
                    "Tools for {a}. Every tool answers within its latency tier ({}); failures come back as results with isError so you can correct the call.",
                    self.tier()
                ),
                None => "toolhost: sandboxed WebAssembly tools (dice, D&D 5e SRD rules, ...). Failures come back as results with isError so you can correct the call.".into(),
            },
        });
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.visible_tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let front = self.clone();
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        // Wasm calls are synchronous and CPU-bound: run them off the async workers.
        let result = tokio::task::spawn_blocking(move || front.call(&name, args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("call task failed: {e}"), None))?;
        result.map(Into::into)
    }
}
