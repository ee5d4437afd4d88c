//! The MCP edge. Only this module knows the wire format.
//!
//! - `server`: toolhost served to LLM clients, per agent.
//! - `http`: the streamable HTTP front (hardening, tokens, admin API).
//! - `client`: external MCP servers whose tools join the registry.
//! - `content`: content blocks between the host's and MCP's.
//! - `jsonrpc`: message checks in front of rmcp, on both transports.

pub mod client;
pub mod content;
pub mod http;
pub mod jsonrpc;
pub mod server;

pub use client::{ExternalServers, ServerStatus};
pub use server::McpFront;

/// A URL path segment for an agent name: lowercase ASCII letters and
/// digits, everything else folded to single dashes ("Bartok the Barkeep" ->
/// "bartok-the-barkeep").
pub fn agent_slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn slugs() {
        assert_eq!(super::agent_slug("Bartok the Barkeep"), "bartok-the-barkeep");
        assert_eq!(super::agent_slug("  Greymantle, the Sage! "), "greymantle-the-sage");
    }
}
