//! What a provider offers besides tools (MCP resources, resource templates,
//! prompts and completions), and how a call asks the person and the model
//! through the client that made it (MCP elicitation and sampling).
//!
//! Both are described in MCP's own JSON shapes, so that this crate names
//! no protocol library: a wasm plugin's [`Offering`] is read by the MCP
//! front as it reads an external server's offer, and an [`Asker`] is what
//! the front gives a call to reach its client.

use crate::tool::{CallContext, CallError};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// What a provider offers besides tools, listed once when it was loaded.
/// Each entry is the MCP JSON object (`Resource`, `ResourceTemplate`,
/// `Prompt`), checked when it was read.
#[derive(Debug, Default, Clone)]
pub struct OfferListing {
    /// Its resources.
    pub resources: Vec<Value>,
    /// Its resource templates.
    pub templates: Vec<Value>,
    /// Its prompts.
    pub prompts: Vec<Value>,
}

impl OfferListing {
    /// Whether it offers nothing.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.templates.is_empty() && self.prompts.is_empty()
    }
}

/// A provider's resources, prompts and completions, served in a fresh
/// run each under the limits of a call.
pub trait Offering: Send + Sync + std::fmt::Debug {
    /// The provider's name (a plugin's).
    fn provider(&self) -> &str;
    /// What it offers.
    fn listing(&self) -> &OfferListing;
    /// The operator's prefix for its names (`plugins.prefix.<plugin>`):
    /// its prompts are offered under it, as its tools are.
    fn prefix(&self) -> Option<&str> {
        None
    }
    /// `resources/read` of `uri`: an MCP `ReadResourceResult`.
    fn read(&self, uri: &str, deadline: Duration, ctx: &CallContext) -> Result<Value, CallError>;
    /// `prompts/get` of its prompt `name`: an MCP `GetPromptResult`.
    fn get_prompt(
        &self,
        name: &str,
        arguments: &serde_json::Map<String, Value>,
        deadline: Duration,
        ctx: &CallContext,
    ) -> Result<Value, CallError>;
    /// `completion/complete` with MCP's `params` (`ref`, `argument`,
    /// `context`): an MCP `CompleteResult`.
    fn complete(&self, params: &Value, deadline: Duration, ctx: &CallContext) -> Result<Value, CallError>;
}

/// What a provider's [`crate::Provider::extension`] is when it offers
/// resources or prompts: its offering, and a place where the front keeps
/// what it made of it (built once per loaded version).
#[derive(Debug)]
pub struct OfferHandle {
    /// The offering.
    pub offering: Arc<dyn Offering>,
    /// The front's own form of it, made on first use.
    pub front: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

impl OfferHandle {
    /// A handle on `offering`.
    pub fn new(offering: Arc<dyn Offering>) -> OfferHandle {
        OfferHandle { offering, front: std::sync::OnceLock::new() }
    }
}

/// Why a call's question got no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AskError {
    /// The client cannot answer this kind of question (it declared no such
    /// capability), or there is no client.
    #[error("{0}")]
    Unsupported(String),
    /// No answer in time.
    #[error("{0}")]
    Timeout(String),
    /// The client answered with an error.
    #[error("{0}")]
    Failed(String),
    /// The answer will come with the client's next try of the same request
    /// (MCP 2026-07-28's `input_required`): the call ends now, unanswered,
    /// and is run again from the start with the answers.
    #[error("the call waits for its client's input")]
    Suspended,
}

/// Whether `url` is an `http:` or `https:` URL, its scheme in any case,
/// with no whitespace or control character anywhere (a line break would
/// start another URL in a file of them): the only kind a question may
/// ask a person to open.
pub fn is_web_url(url: &str) -> bool {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    matches!(scheme.as_deref(), Some("http" | "https"))
}

/// How a running call reaches the MCP client that made it.
pub trait Asker: Send + Sync {
    /// Sends the request `method` (`elicitation/create`,
    /// `sampling/createMessage`) with `params` to the client and waits, at
    /// most `wait`, for its result (the MCP result object). Blocks: called
    /// from the call's own thread.
    fn ask(&self, method: &str, params: Value, wait: Duration) -> Result<Value, AskError>;

    /// Whether answers come only with the client's next try of the call
    /// (MCP 2026-07-28): a question whose answer must be acted on within
    /// this try (a sign-in whose redirect comes back to it) cannot be asked.
    fn answers_later(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_question_may_point_only_at_a_web_url_whatever_the_case_of_its_scheme() {
        use super::is_web_url;
        for ok in ["https://wiki.example/login", "HTTPS://wiki.example", "Http://127.0.0.1:8/x"] {
            assert!(is_web_url(ok), "{ok}");
        }
        for bad in [
            "javascript:alert(1)",
            "file:///etc/passwd",
            "data:text/html,x",
            "wiki.example",
            "",
            "ftp://x",
            "https://ok.example/\nfile:///etc/passwd",
            "https://ok.example/\r\njavascript:alert(1)",
            "https://ok.example/\u{1b}[2J",
            " https://ok.example",
        ] {
            assert!(!is_web_url(bad), "{bad}");
        }
    }
}
