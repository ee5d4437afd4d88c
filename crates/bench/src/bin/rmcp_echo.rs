//! The native rmcp baseline of the MCP bench: an `echo` tool served by the
//! workspace's own rmcp version, the way its documentation serves one, with
//! nothing of toolhost in the path. Beside it a `roll` tool (`NdS+K` only)
//! whose answer has the shape of toolhost's `roll` (the result as JSON text
//! and as `structuredContent`), so that the clients bench can tell what the
//! client spends decoding a larger answer from what the server spends.
//!
//! `rmcp-echo` serves one client over stdin/stdout (rmcp's `stdio()`
//! transport); `rmcp-echo --http 127.0.0.1:0` serves streamable HTTP at
//! `/mcp` and prints `listening on http://ADDR` as its first stdout line.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::io::Write as _;
use std::sync::Arc;

/// One `echo` tool: `{"message": string}` answered with `Echo: <message>`,
/// as server-everything's `echo` does.
#[derive(Clone, Debug)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info.name = "rmcp-echo".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        });
        let schema = schema.as_object().cloned().unwrap_or_default();
        let roll = json!({
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        });
        let roll = roll.as_object().cloned().unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Echoes the message back", Arc::new(schema)),
            Tool::new("roll", "Rolls NdS+K", Arc::new(roll)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "roll" {
            return Ok(
                roll(request.arguments.as_ref().and_then(|a| a.get("expression")).and_then(Value::as_str)).into()
            );
        }
        if request.name != "echo" {
            return Err(ErrorData::invalid_params(format!("unknown tool {}", request.name), None));
        }
        let message = request.arguments.as_ref().and_then(|a| a.get("message")).and_then(Value::as_str);
        let Some(message) = message else {
            return Ok(CallToolResult::error(vec![ContentBlock::text("\"message\" must be a string")]).into());
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("Echo: {message}"))]).into())
    }
}

/// `NdS+K` rolled, answered as toolhost's `roll` answers: `{"expression",
/// "rolls", "total"}` as JSON text and as `structuredContent`.
fn roll(expression: Option<&str>) -> CallToolResult {
    let parsed = expression.and_then(|e| {
        let (dice, flat) = e.split_once('+').unwrap_or((e, "0"));
        let (n, sides) = dice.split_once('d')?;
        Some((n.parse::<u32>().ok()?, sides.parse::<u64>().ok()?, flat.parse::<i64>().ok()?))
    });
    let (Some(expression), Some((n, sides, flat))) = (expression, parsed) else {
        return CallToolResult::error(vec![ContentBlock::text("\"expression\" must be NdS+K")]);
    };
    if n > 100 || sides == 0 {
        return CallToolResult::error(vec![ContentBlock::text("at most 100 dice of at least one side")]);
    }
    // xorshift64, seeded from the clock: a bench needs no better dice.
    let mut x =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1;
    let rolls: Vec<u64> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % sides + 1
        })
        .collect();
    let total = rolls.iter().sum::<u64>() as i64 + flat;
    let value = json!({"expression": expression, "rolls": rolls, "total": total});
    let mut r = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    r.structured_content = Some(value);
    r
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match args.as_slice() {
        [] => rt.block_on(async {
            let service = Echo.serve(rmcp::transport::stdio()).await?;
            service.waiting().await?;
            Ok(())
        }),
        [flag, addr] if flag == "--http" => rt.block_on(async {
            let listener = tokio::net::TcpListener::bind(addr.as_str()).await?;
            let local = listener.local_addr()?;
            let service = StreamableHttpService::new(
                || Ok(Echo),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let app = axum::Router::new().nest_service("/mcp", service);
            let mut out = std::io::stdout().lock();
            writeln!(out, "listening on http://{local}")?;
            out.flush()?;
            drop(out);
            axum::serve(listener, app).await?;
            Ok(())
        }),
        _ => Err("usage: rmcp-echo [--http ADDR]".into()),
    }
}
