//! What an external MCP server offers besides tools, as the MCP front sees
//! it: the [`Offer`] (resources, templates, prompts), the [`Upstream`] a
//! session may use, and the requests it sends (`resources/read`,
//! `prompts/get`, `completion/complete`, subscriptions).
//!
//! The MCP client implements [`UpstreamServer`] for each server it
//! connects to and puts an [`UpstreamHandle`] on its registry provider
//! ([`crate::tool::Provider::extension`]); the front finds the servers a
//! session may use in the registry's catalogue with [`upstreams`]. Neither
//! crate depends on the other.
//!
//! Resources keep their URIs and prompts their names, unless an earlier
//! server (config order) offers the same: then the later server's prompt
//! is `<server>_<prompt>` (under its `prefix` when it has one, always) and
//! its resource `<server>+<uri>`.

use crate::registry::Catalog;
use crate::subscribe::Subscriptions;
use crate::tool::{ProviderKind, ToolDef};
use futures::future::BoxFuture;
use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, ErrorData, GetPromptRequest,
    GetPromptRequestParams, GetPromptResult, JsonObject, Prompt, ReadResourceRequest, ReadResourceRequestParams,
    ReadResourceResult, Resource, ResourceTemplate, ServerResult,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The longest resource URI or URI template accepted, in bytes.
pub const MAX_URI_BYTES: usize = 4096;
/// Completion values passed on per request, as MCP allows.
pub const MAX_COMPLETIONS: usize = 100;
/// The longest error message kept from a server, in bytes.
pub const MAX_ERROR_TEXT: usize = 4096;

/// `text` cut to [`MAX_ERROR_TEXT`], saying so.
pub fn cut(text: &str) -> String {
    crate::tool::cut_with_note(text, MAX_ERROR_TEXT).into_owned()
}

/// One external MCP server as the front uses it beyond its tools.
pub trait UpstreamServer: Send + Sync + std::fmt::Debug {
    /// Its configured name.
    fn name(&self) -> &str;
    /// Its place among the host's servers (config order, then the order
    /// added at run time): the earlier keeps a name both offer.
    fn order(&self) -> u64;
    /// Whether it is connected now.
    fn is_available(&self) -> bool;
    /// What it offers, as last listed.
    fn offer(&self) -> Arc<Offer>;
    /// Counters that change whenever its resources (first) or prompts
    /// (second) change.
    fn generations(&self) -> (u64, u64);
    /// Its configured `prefix`, when it has one.
    fn prefix(&self) -> Option<&str>;
    /// The name its prompt `prompt` is offered under when it cannot keep
    /// its own.
    fn renamed_prompt(&self, prompt: &str) -> String;
    /// Sessions' subscriptions to its resources.
    fn subscriptions(&self) -> &Subscriptions;
    /// Sends `request` under the server's `timeout_ms` (else `timeout`).
    /// Its errors are passed on with their code and a message held to a
    /// line's worth; a timeout or a lost connection is an internal error
    /// that names the server.
    fn send<'a>(
        &'a self,
        what: &'a str,
        request: ClientRequest,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ServerResult, ErrorData>>;
}

/// What an MCP client's registry provider carries for the front
/// ([`crate::tool::Provider::extension`]).
#[derive(Debug, Clone)]
pub struct UpstreamHandle(pub Arc<dyn UpstreamServer>);

/// What one server offers besides tools, as last listed.
#[derive(Debug, Default, Clone)]
pub struct Offer {
    /// Its resources, URIs unchanged.
    pub resources: Vec<Resource>,
    /// Its resource templates, unchanged.
    pub templates: Vec<ResourceTemplate>,
    /// Its prompts, as the server listed them (under their own names).
    pub prompts: Vec<Prompt>,
    /// Whether it declares `completions`.
    pub completions: bool,
    /// Whether it declares `resources.subscribe`.
    pub subscribe: bool,
}

/// The `<server>+<uri>` form of a resource URI an earlier server has.
pub fn qualified_uri(server: &str, uri: &str) -> String {
    format!("{server}+{uri}")
}

/// An available external server a session may use, with its offer as it
/// was when the session looked.
#[derive(Debug, Clone)]
pub struct Upstream {
    server: Arc<dyn UpstreamServer>,
    offer: Arc<Offer>,
    /// The name each of its prompts is offered under (`None`: not
    /// offered, its every name taken), in `offer.prompts` order.
    prompt_names: Arc<Vec<Option<String>>>,
    /// Its resource URIs and templates an earlier server offers too:
    /// listed and read as `<server>+<uri>`.
    shadowed: Arc<std::collections::HashSet<String>>,
}

/// The connected external servers in `catalog` (in the order they were
/// added: config order) whose tools pass `allowed`, each with the names
/// its prompts and resources are offered under (worked out over every
/// server in `catalog`, connected or not, so a name does not change as
/// others come and go).
pub fn upstreams(catalog: &Catalog, allowed: impl Fn(&[ToolDef]) -> bool) -> Vec<Upstream> {
    collect(catalog, allowed, true)
}

/// [`upstreams`] without working out names: for what only needs the
/// servers and their offers (each session's once-a-second look for
/// changes), so that costs no copy of every URI and prompt name.
pub fn upstreams_unnamed(catalog: &Catalog, allowed: impl Fn(&[ToolDef]) -> bool) -> Vec<Upstream> {
    collect(catalog, allowed, false)
}

/// A server found in the catalogue: its tools, itself and its offer.
type Found<'a> = (&'a [ToolDef], &'a Arc<dyn UpstreamServer>, Arc<Offer>);

fn collect(catalog: &Catalog, allowed: impl Fn(&[ToolDef]) -> bool, named: bool) -> Vec<Upstream> {
    let mut all: Vec<Found<'_>> = catalog
        .providers()
        .filter_map(|p| {
            let extension = p.extension()?;
            let handle = match extension.downcast_ref::<UpstreamHandle>() {
                Some(h) if p.kind() == ProviderKind::Mcp => h,
                Some(_) => return None,
                // A wasm plugin's resources and prompts.
                None => crate::plugin_offer::server(extension.downcast_ref::<crate::tool::offer::OfferHandle>()?),
            };
            Some((p.tools(), &handle.0, handle.0.offer()))
        })
        .collect();
    all.sort_by(|(_, a, _), (_, b, _)| (a.order(), a.name()).cmp(&(b.order(), b.name())));
    let mut prompts_taken = std::collections::HashSet::new();
    let mut uris_taken: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (tools, server, offer) in &all {
        let (mut prompt_names, mut shadowed) = (Vec::new(), std::collections::HashSet::new());
        if named {
            prompt_names = offer
                .prompts
                .iter()
                .map(|p| {
                    let own = match server.prefix() {
                        Some(_) => None,
                        None => Some(p.name.clone()).filter(|n| !prompts_taken.contains(n)),
                    };
                    let name = own.unwrap_or_else(|| server.renamed_prompt(&p.name));
                    prompts_taken.insert(name.clone()).then_some(name)
                })
                .collect();
            let uris = offer.resources.iter().map(|r| r.uri.as_str());
            let mine: Vec<&str> = uris.chain(offer.templates.iter().map(|t| t.uri_template.as_str())).collect();
            shadowed = mine.iter().filter(|u| uris_taken.contains(*u)).map(|u| u.to_string()).collect();
            uris_taken.extend(mine);
        }
        if server.is_available() && allowed(tools) {
            out.push(Upstream {
                server: Arc::clone(server),
                offer: offer.clone(),
                prompt_names: Arc::new(prompt_names),
                shadowed: Arc::new(shadowed),
            });
        }
    }
    out
}

impl Upstream {
    /// The server's name.
    pub fn name(&self) -> &str {
        self.server.name()
    }

    /// What it offers.
    pub fn offer(&self) -> &Offer {
        &self.offer
    }

    /// Counters that change whenever its resources (first) or prompts
    /// (second) change.
    pub fn generations(&self) -> (u64, u64) {
        self.server.generations()
    }

    /// Whether it listed `uri` as a resource.
    pub fn lists(&self, uri: &str) -> bool {
        self.offer.resources.iter().any(|r| r.uri == uri)
    }

    /// Whether one of its templates is exactly `uri_template`.
    pub fn has_template(&self, uri_template: &str) -> bool {
        self.offer.templates.iter().any(|t| t.uri_template == uri_template)
    }

    /// Whether `uri` is an expansion of one of its templates.
    pub fn expands_to(&self, uri: &str) -> bool {
        self.offer.templates.iter().any(|t| template_matches(&t.uri_template, uri))
    }

    /// Its prompt offered as `exposed`: the server's own name for it.
    pub fn prompt(&self, exposed: &str) -> Option<&str> {
        self.prompts().find(|(e, _)| *e == exposed).map(|(_, p)| p.name.as_str())
    }

    /// Its prompts offered, each with the name it is offered under.
    pub fn prompts(&self) -> impl Iterator<Item = (&str, &Prompt)> {
        self.prompt_names.iter().zip(&self.offer.prompts).filter_map(|(n, p)| Some((n.as_deref()?, p)))
    }

    /// The URI (or template) `uri` of this server as offered: its own, or
    /// `<server>+<uri>` when an earlier server has it.
    pub fn offered_uri(&self, uri: &str) -> String {
        if self.shadowed.contains(uri) { qualified_uri(self.name(), uri) } else { uri.to_string() }
    }

    /// Whether an earlier server offers `uri` (or a template of that text).
    pub fn is_shadowed(&self, uri: &str) -> bool {
        self.shadowed.contains(uri)
    }

    /// Subscribes `session` to the server's resource `remote`, told under
    /// `uri` (what the session subscribed to); the server is asked for its
    /// first subscriber, when it declares `resources.subscribe`.
    #[allow(deprecated)] // resources/subscribe is what servers before MCP 2026-07-28 speak.
    pub async fn subscribe(
        &self,
        session: Arc<str>,
        remote: &str,
        uri: &str,
        notify: crate::subscribe::Notify,
        timeout: Duration,
    ) -> Result<(), ErrorData> {
        let first = self
            .server
            .subscriptions()
            .add(session.clone(), remote, uri, notify)
            .map_err(|e| ErrorData::invalid_request(e.to_string(), Some(json!({"code": "capacity_exceeded"}))))?;
        if first && self.offer.subscribe {
            let request = ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
                rmcp::model::SubscribeRequestParams::new(remote),
            ));
            if let Err(e) = self.server.send("resources/subscribe", request, timeout).await {
                self.server.subscriptions().remove(&session, remote, uri);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Ends `session`'s subscription to `remote` under `uri`; the server is
    /// told when nobody is left.
    #[allow(deprecated)] // As `subscribe`.
    pub async fn unsubscribe(&self, session: &str, remote: &str, uri: &str, timeout: Duration) {
        if self.server.subscriptions().remove(session, remote, uri) && self.offer.subscribe {
            let request = ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
                rmcp::model::UnsubscribeRequestParams::new(remote),
            ));
            if let Err(e) = self.server.send("resources/unsubscribe", request, timeout).await {
                tracing::debug!(server = %self.name(), "resources/unsubscribe failed: {}", e.message);
            }
        }
    }

    /// `resources/read` of `uri`, the answer held to `cap` bytes of JSON.
    pub async fn read(&self, uri: &str, timeout: Duration, cap: usize) -> Result<ReadResourceResult, ErrorData> {
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(ReadResourceRequestParams::new(uri)));
        match self.server.send("resources/read", request, timeout).await? {
            ServerResult::ReadResourceResult(r) => {
                within_cap("resources/read", uri, &r.contents, cap)?;
                // A result of this host's: complete, and cached as the
                // front decides (the server's hints were for its client).
                let mut out = ReadResourceResult::new(r.contents);
                out.meta = r.meta;
                Ok(out)
            }
            _ => Err(unexpected(self.name(), "resources/read")),
        }
    }

    /// `prompts/get` of the server's prompt `remote`, the answer held to
    /// `cap` bytes of JSON.
    pub async fn get_prompt(
        &self,
        remote: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
        cap: usize,
    ) -> Result<GetPromptResult, ErrorData> {
        let mut params = GetPromptRequestParams::new(remote);
        params.arguments = arguments;
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
        match self.server.send("prompts/get", request, timeout).await? {
            ServerResult::GetPromptResult(r) => {
                within_cap("prompts/get", remote, &r.messages, cap)?;
                let mut out = GetPromptResult::new(r.messages);
                out.description = r.description;
                out.meta = r.meta;
                Ok(out)
            }
            _ => Err(unexpected(self.name(), "prompts/get")),
        }
    }

    /// `completion/complete` with `params` (already naming the server's own
    /// prompt), at most [`MAX_COMPLETIONS`] values and `cap` bytes passed on.
    /// A server that declares no completions completes nothing.
    pub async fn complete(
        &self,
        params: CompleteRequestParams,
        timeout: Duration,
        cap: usize,
    ) -> Result<CompleteResult, ErrorData> {
        if !self.offer.completions {
            return Ok(CompleteResult::default());
        }
        let request = ClientRequest::CompleteRequest(CompleteRequest::new(params));
        match self.server.send("completion/complete", request, timeout).await? {
            ServerResult::CompleteResult(r) => {
                let mut out = CompleteResult::new(r.completion);
                out.meta = r.meta;
                if out.completion.values.len() > MAX_COMPLETIONS {
                    out.completion.values.truncate(MAX_COMPLETIONS);
                    out.completion.has_more = Some(true);
                }
                within_cap("completion/complete", "values", &out.completion.values, cap)?;
                Ok(out)
            }
            _ => Err(unexpected(self.name(), "completion/complete")),
        }
    }
}

fn unexpected(server: &str, what: &str) -> ErrorData {
    ErrorData::internal_error(format!("MCP server {server:?} answered {what} with another kind of result"), None)
}

/// Refuses an answer over the output cap, as a tool's would be.
fn within_cap(what: &str, subject: &str, answer: &impl serde::Serialize, cap: usize) -> Result<(), ErrorData> {
    let size = serde_json::to_vec(answer).map_or(usize::MAX, |v| v.len());
    if size > cap {
        return Err(ErrorData::internal_error(
            format!(
                "{what} {}: the answer is at least {size} bytes, over the {cap} byte output limit (limits.max_output_bytes)",
                crate::tool::log_safe(&cut(subject))
            ),
            Some(json!({"code": "output_too_large"})),
        ));
    }
    Ok(())
}

/// One step of a URI template read as a pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Token {
    /// This character.
    Char(char),
    /// One character an expression may expand to.
    One {
        /// Any character (a reserved expansion: `{+x}`, `{#x}`, `{/x}`,
        /// `{?x}`, `{&x}`); else any but `/`, `?` and `#`.
        reserved: bool,
    },
    /// Any number of them.
    Many {
        /// As for [`Token::One`].
        reserved: bool,
    },
}

/// `template` as tokens; `None` when its braces do not pair up.
fn template_tokens(template: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        match c {
            '{' => {
                let end = rest.find('}')?;
                let expr = &rest[1..end];
                if expr.is_empty() || expr.contains('{') {
                    return None;
                }
                let op = expr.chars().next().unwrap_or_default();
                let reserved = matches!(op, '+' | '#' | '/' | '?' | '&');
                // A simple value or `{+x}` stands for at least one
                // character; the other operators may expand to nothing.
                if !matches!(op, '#' | '.' | '/' | ';' | '?' | '&') {
                    tokens.push(Token::One { reserved });
                }
                tokens.push(Token::Many { reserved });
                rest = &rest[end + 1..];
            }
            '}' => return None,
            c => {
                tokens.push(Token::Char(c));
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    Some(tokens)
}

/// The longest URI template offered, in bytes.
pub const MAX_TEMPLATE_BYTES: usize = 256;
/// The most expressions (`{...}`) a template offered may have.
pub const MAX_TEMPLATE_EXPRESSIONS: usize = 8;
/// The most templates offered per server.
pub const MAX_TEMPLATES: usize = 64;

/// Whether `template` is a URI template this host can match: its braces
/// pair up, it starts with a literal scheme (`name:` before any
/// expression: a catch-all such as `{+uri}` would claim every URI), and it
/// is short enough that matching it stays cheap (at most
/// [`MAX_TEMPLATE_BYTES`] bytes and [`MAX_TEMPLATE_EXPRESSIONS`]
/// expressions).
pub fn is_template(template: &str) -> bool {
    let scheme = template.split_once(':').map(|(s, _)| s).unwrap_or("");
    let literal_scheme = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'));
    literal_scheme
        && template.len() <= MAX_TEMPLATE_BYTES
        && template.matches('{').count() <= MAX_TEMPLATE_EXPRESSIONS
        && template_tokens(template).is_some()
}

/// Whether `uri` is an expansion of `template` (RFC 6570, read loosely: a
/// simple expression stands for one or more characters other than `/`,
/// `?` and `#`; a reserved one (`{+x}`, `{/x}`, `{?x}` ...) for any). Runs
/// as a set of states over the URI, so it takes at most the product of
/// the two lengths, whatever the template.
pub fn template_matches(template: &str, uri: &str) -> bool {
    let Some(tokens) = template_tokens(template) else { return false };
    if uri.len() > MAX_URI_BYTES {
        return false;
    }
    let allowed = |reserved: bool, c: char| reserved || !matches!(c, '/' | '?' | '#');
    // A `Many` may match nothing: whoever reaches it reaches the next token too.
    let close = |states: &mut Vec<bool>| {
        for i in 0..tokens.len() {
            if states[i] && matches!(tokens[i], Token::Many { .. }) {
                states[i + 1] = true;
            }
        }
    };
    let mut states = vec![false; tokens.len() + 1];
    states[0] = true;
    close(&mut states);
    for c in uri.chars() {
        let mut next = vec![false; tokens.len() + 1];
        for (i, t) in tokens.iter().enumerate().filter(|&(i, _)| states[i]) {
            match *t {
                Token::Char(x) if x == c => next[i + 1] = true,
                Token::One { reserved } if allowed(reserved, c) => next[i + 1] = true,
                Token::Many { reserved } if allowed(reserved, c) => next[i] = true,
                _ => {}
            }
        }
        close(&mut next);
        if !next.contains(&true) {
            return false;
        }
        states = next;
    }
    states[tokens.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_templates_match_their_expansions_only() {
        let t = "demo://resource/dynamic/text/{resourceId}";
        assert!(template_matches(t, "demo://resource/dynamic/text/7"));
        assert!(!template_matches(t, "demo://resource/dynamic/text/"), "a simple value is never empty");
        assert!(!template_matches(t, "demo://resource/dynamic/text/7/more"), "a simple value holds no /");
        assert!(!template_matches(t, "demo://resource/dynamic/blob/7"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(template_matches("db://{table}/rows{?limit,offset}", "db://users/rows?limit=5"));
        assert!(template_matches("db://{table}/rows{?limit,offset}", "db://users/rows"));
        assert!(template_matches("x://{a}-{b}", "x://1-2-3"), "backtracks over a literal that repeats");
        assert!(!template_matches("x://{a", "x://1"), "an unclosed brace is no template");
        assert!(!is_template("x://a}b") && is_template("x://{a}/{+b}"));
        assert!(!is_template("{+uri}") && !is_template("{s}://x"), "a template starts with its scheme");
        assert!(!is_template(&format!("x://{}", "{a}".repeat(9))), "at most 8 expressions");
        assert!(!is_template(&format!("x://{}", "a".repeat(300))), "at most 256 bytes");
        let slow = format!("{}!", "{a}-".repeat(500));
        assert!(!template_matches(&slow, &"1-".repeat(2000)), "no exponential search");
    }
}
