//! A plugin that reaches out over TCP (std::net, so it imports
//! `wasi:sockets`). toolhost must refuse to load it unless the operator
//! grants network access.

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });
}

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};
use std::io::{Read, Write};

struct Plugin;

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![ToolInfo {
            name: "fetch".into(),
            description: "GET / from {\"addr\": \"host:port\"} over plain HTTP.".into(),
            input_schema: r#"{"type":"object","properties":{"addr":{"type":"string"}},"required":["addr"]}"#.into(),
            estimated_duration_ms: 10,
            max_duration_ms: 1000,
            idempotent: false,
            cacheable_seconds: 0,
            probe_arguments: None,
        }]
    }

    fn call(_name: String, arguments: String) -> Result<Vec<Content>, ToolError> {
        let addr = arguments.split('"').nth(3).unwrap_or("127.0.0.1:1").to_string();
        let mut s =
            std::net::TcpStream::connect(&addr).map_err(|e| ToolError::Failed(format!("connect {addr}: {e}")))?;
        write!(s, "GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| ToolError::Failed(e.to_string()))?;
        let mut body = String::new();
        s.read_to_string(&mut body).map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(vec![Content::Text(body)])
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);
