//! toolhost-mcp: the MCP server front, toolhost served to LLM clients.
//!
//! - `server`: toolhost served to LLM clients, per agent.
//! - `http`: the streamable HTTP front (hardening, tokens, admin API).
//! - `jsonrpc`: message checks in front of rmcp, on both transports.
//! - `stdio`: the stdio transport (checks in `receive`, coalesced writes).
//! - `lane`: the stdio call lane; `declare`: the turn endpoint's cues.
//!
//! External MCP servers are the client's (`toolhost-mcp-client`); what
//! both use (content blocks, an upstream's offers) is in
//! `toolhost-mcp-wire`. This crate does not depend on the client.

#![deny(unsafe_code)]

pub mod conns;
pub mod declare;
pub mod http;
pub mod jsonrpc;
pub mod lane;
pub mod peer;
pub mod reply;
pub mod server;
pub mod stdio;

pub use server::McpFront;

// The core's vocabulary, under the names the modules use.
use toolhost_config as config;
use toolhost_core::{Conversation, TurnCues, TurnTier};
use toolhost_core::{Pipeline, budget, rates, registry, tool, trace};
use toolhost_mcp_wire::content;

pub use toolhost_config::agent_slug;

#[cfg(test)]
mod tests {
    #[test]
    fn slugs() {
        assert_eq!(super::agent_slug("Bartok the Barkeep"), "bartok-the-barkeep");
        assert_eq!(super::agent_slug("  Greymantle, the Sage! "), "greymantle-the-sage");
    }
}
