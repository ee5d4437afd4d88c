//! A plugin that reaches out over TCP (std::net, so it imports
//! `wasi:sockets`). toolhost must refuse every connect unless the operator
//! grants network access, and then let it reach only the granted addresses,
//! whatever Host header it sends or redirect it follows.

use schemars::JsonSchema;
use serde::Deserialize;
use std::io::{Read, Write};
use toolhost_sdk::{Output, Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {
    /// IP:port to connect to.
    addr: String,
    /// A Host header other than the address.
    host_header: Option<String>,
    /// Follow one redirect.
    #[serde(default)]
    follow_redirect: bool,
}

fn get(addr: &str, host: &str) -> Result<String, ToolError> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| ToolError::forbidden(format!("connect {addr}: {e}")))?;
    let request = format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n");
    s.write_all(request.as_bytes()).map_err(|e| ToolError::failed(format!("write: {e}")))?;
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
            Err(e) => return Err(ToolError::failed(format!("read: {e}"))),
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

struct Fetch;

impl Tool for Fetch {
    type Args = Args;
    const NAME: &'static str = "fetch";
    const DESCRIPTION: &'static str = "GET / from addr (IP:port) over HTTP/1.0, optionally with another Host header, optionally following one redirect.";
    const MAX_MS: u32 = 1000;

    fn call(a: Args) -> Result<Output, ToolError> {
        let body = get(&a.addr, a.host_header.as_deref().unwrap_or(&a.addr))?;
        if a.follow_redirect
            && let Some(loc) = body.lines().find_map(|l| l.strip_prefix("Location: http://"))
        {
            let next = loc.trim().trim_end_matches('/');
            return get(next, next).map(Output::text);
        }
        Ok(Output::text(body))
    }
}

toolhost_sdk::plugin!(Fetch);
