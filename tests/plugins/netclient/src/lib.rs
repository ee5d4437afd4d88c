//! A plugin that reaches out over TCP (std::net, so it imports
//! `wasi:sockets`). toolhost must refuse to load it unless the operator
//! grants network access, and then let it reach only the granted addresses,
//! whatever Host header it sends or redirect it follows.

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });
}

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};
use std::io::{Read, Write};

struct Plugin;

#[derive(serde::Deserialize)]
struct Args {
    addr: String,
    host_header: Option<String>,
    #[serde(default)]
    follow_redirect: bool,
}

fn get(addr: &str, host: &str) -> Result<String, ToolError> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| ToolError::Forbidden(format!("connect {addr}: {e}")))?;
    let request = format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n");
    s.write_all(request.as_bytes()).map_err(|e| ToolError::Failed(format!("write: {e}")))?;
    // Read until the server closes; a reset after the response still
    // leaves the bytes already received.
    let mut body = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
            Err(e) if !body.is_empty() => {
                let _ = e;
                break;
            }
            Err(e) => return Err(ToolError::Failed(format!("read: {e}"))),
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![ToolInfo {
            name: "fetch".into(),
            description: "GET / from addr (IP:port) over HTTP/1.0, optionally with another Host header, optionally following one redirect.".into(),
            input_schema: r#"{"type":"object","properties":{"addr":{"type":"string"},"host_header":{"type":"string"},"follow_redirect":{"type":"boolean"}},"required":["addr"]}"#.into(),
            estimated_duration_ms: 10,
            max_duration_ms: 1000,
            idempotent: false,
            cacheable_seconds: 0,
            probe_arguments: None,
        }]
    }

    fn call(_name: String, arguments: String) -> Result<Vec<Content>, ToolError> {
        let a: Args = serde_json::from_str(&arguments).map_err(|e| ToolError::InvalidInput(e.to_string()))?;
        let body = get(&a.addr, a.host_header.as_deref().unwrap_or(&a.addr))?;
        if a.follow_redirect
            && let Some(loc) = body.lines().find_map(|l| l.strip_prefix("Location: http://"))
        {
            let next = loc.trim().trim_end_matches('/');
            return get(next, next).map(|b| vec![Content::Text(b)]);
        }
        Ok(vec![Content::Text(body)])
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);
