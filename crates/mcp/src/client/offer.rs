//! What an upstream server offers besides tools: resources, resource
//! templates, prompts and argument completions.
//!
//! Each kind is listed when the server connects, and again when it
//! announces a change (`notifications/resources/list_changed`,
//! `notifications/prompts/list_changed`), only if the server declares the
//! capability, and at most [`MAX_LISTED`] entries of each kind (the rest
//! are dropped, with a warning). An upstream is not trusted: a resource or
//! template URI that is empty, longer than [`MAX_URI_BYTES`] or holds
//! control or formatting characters is skipped, and so is a prompt whose
//! name `names.rs` refuses.
//!
//! Resources keep their URIs and prompts their names, unless an earlier
//! server (config order) offers the same: then the later server's prompt
//! is `<server>_<prompt>` (under its `prefix` when it has one, always) and
//! its resource `<server>+<uri>`. Names are worked out over every
//! configured server, up or down, so they do not change as servers come
//! and go.
//! The MCP front finds the servers a session may use with [`upstreams`],
//! routes each request to one of them, and sends it with [`Upstream`]'s
//! methods: under the server's `timeout_ms` (or the caller's default), the
//! answer held to the output cap like a tool's result.

use super::provider::{McpTools, cut};
use super::supervisor::Server;
use crate::registry::Catalog;
use crate::tool::{ProviderKind, ToolDef};
use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, ErrorData, GetPromptRequest,
    GetPromptRequestParams, GetPromptResult, JsonObject, ListPromptsRequest, ListResourceTemplatesRequest,
    ListResourcesRequest, PaginatedRequestParams, Prompt, ReadResourceRequest, ReadResourceRequestParams,
    ReadResourceResult, Resource, ResourceTemplate, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleClient};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Entries of one kind (resources, templates, prompts) kept per server.
pub(crate) const MAX_LISTED: usize = 1000;
/// Pages read per listing, at most (a server that pages forever stops here).
pub(super) const MAX_PAGES: usize = 100;
/// The longest resource URI or URI template accepted, in bytes.
pub(crate) const MAX_URI_BYTES: usize = 4096;
/// Completion values passed on per request, as MCP allows.
pub(crate) const MAX_COMPLETIONS: usize = 100;
/// How long one page of a listing may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// What one server offers besides tools, as last listed.
#[derive(Debug, Default, Clone)]
pub(crate) struct Offer {
    /// Its resources, URIs unchanged.
    pub(crate) resources: Vec<Resource>,
    /// Its resource templates, unchanged.
    pub(crate) templates: Vec<ResourceTemplate>,
    /// Its prompts, as the server listed them (under their own names).
    pub(crate) prompts: Vec<Prompt>,
    /// Whether it declares `completions`.
    pub(crate) completions: bool,
    /// Whether it declares `resources.subscribe`.
    pub(crate) subscribe: bool,
}

/// A server's offer and when it changed; shared by its supervisor, its
/// client handler and the MCP front.
#[derive(Debug, Default)]
pub(super) struct Offers {
    current: Mutex<Arc<Offer>>,
    /// Bumped whenever the resources or templates listed change.
    resources_generation: AtomicU64,
    /// Bumped whenever the prompts listed change.
    prompts_generation: AtomicU64,
    resources_stale: AtomicBool,
    prompts_stale: AtomicBool,
    /// The server announced a change: the supervisor lists it again.
    pub(super) changed: Notify,
}

impl Offers {
    /// The server said its resources changed.
    pub(super) fn resources_changed(&self) {
        self.resources_stale.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    /// The server said its prompts changed.
    pub(super) fn prompts_changed(&self) {
        self.prompts_stale.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    fn current(&self) -> Arc<Offer> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn store(&self, next: Offer) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if next.resources != current.resources || next.templates != current.templates {
            self.resources_generation.fetch_add(1, Ordering::AcqRel);
        }
        if next.prompts != current.prompts {
            self.prompts_generation.fetch_add(1, Ordering::AcqRel);
        }
        *current = Arc::new(next);
    }
}

/// Lists everything the server offers besides tools (after it connects).
pub(super) async fn list_all(server: &Server) {
    server.offers.resources_stale.store(false, Ordering::Release);
    server.offers.prompts_stale.store(false, Ordering::Release);
    refresh(server, true, true).await;
}

/// Asks the server again for every subscription sessions hold (after a
/// reconnect: the new session knows none).
#[allow(deprecated)] // resources/subscribe is what servers before MCP 2026-07-28 speak.
pub(super) async fn resubscribe(server: &Server) {
    let Some(peer) = server.peer.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return };
    if !server.offers.current().subscribe {
        return;
    }
    for uri in server.subscriptions.uris() {
        let request = ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
            rmcp::model::SubscribeRequestParams::new(uri.clone()),
        ));
        let options = PeerRequestOptions::with_timeout(LIST_TIMEOUT);
        let answer = async { peer.send_request_with_option(request, options).await?.await_response().await };
        if let Err(e) = answer.await {
            tracing::warn!(server = %server.cfg.name, uri = %crate::tool::log_safe(&uri), "subscribing again failed: {e}");
        }
    }
}

/// Lists again what the server announced as changed.
pub(super) async fn relist_changed(server: &Server) {
    let resources = server.offers.resources_stale.swap(false, Ordering::AcqRel);
    let prompts = server.offers.prompts_stale.swap(false, Ordering::AcqRel);
    if resources || prompts {
        refresh(server, resources, prompts).await;
    }
}

async fn refresh(server: &Server, resources: bool, prompts: bool) {
    let Some(peer) = server.peer.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return };
    let caps = peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
    let mut next = (*server.offers.current()).clone();
    next.completions = caps.completions.is_some();
    next.subscribe = caps.resources.as_ref().and_then(|r| r.subscribe) == Some(true);
    if resources {
        if caps.resources.is_some() {
            next.resources = list_resources(server, &peer).await;
            next.templates = list_templates(server, &peer).await;
        } else {
            next.resources.clear();
            next.templates.clear();
        }
    }
    if prompts {
        next.prompts = if caps.prompts.is_some() { list_prompts(server, &peer).await } else { Vec::new() };
    }
    tracing::debug!(
        server = %server.cfg.name,
        resources = next.resources.len(),
        templates = next.templates.len(),
        prompts = next.prompts.len(),
        "listed what the server offers besides tools"
    );
    server.offers.store(next);
}

/// One page of a listing: its items and the next cursor.
type Page<T> = (Vec<T>, Option<String>);

/// Every page of one listing, at most [`MAX_LISTED`] items and
/// [`MAX_PAGES`] pages; on an error, what was listed before it.
async fn pages<T>(
    server: &Server,
    peer: &Peer<RoleClient>,
    what: &str,
    request: impl Fn(PaginatedRequestParams) -> ClientRequest,
    page: impl Fn(ServerResult) -> Option<Page<T>>,
) -> Vec<T> {
    let name = &server.cfg.name;
    let mut items = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let req = request(PaginatedRequestParams::default().with_cursor(cursor.take()));
        let options = PeerRequestOptions::with_timeout(LIST_TIMEOUT);
        let answer = async { peer.send_request_with_option(req, options).await?.await_response().await };
        let (mut got, next) = match answer.await.map(&page) {
            Ok(Some(p)) => p,
            Ok(None) => {
                tracing::warn!(server = %name, "{what}: the server answered with another kind of result");
                return items;
            }
            Err(e) => {
                tracing::warn!(server = %name, "{what} failed: {}", crate::tool::log_safe(&e.to_string()));
                return items;
            }
        };
        if items.len() + got.len() > MAX_LISTED {
            got.truncate(MAX_LISTED - items.len());
            items.extend(got);
            tracing::warn!(server = %name, "{what}: more than {MAX_LISTED} entries; the rest are not offered");
            return items;
        }
        items.extend(got);
        match next {
            Some(c) => cursor = Some(c),
            None => return items,
        }
    }
    tracing::warn!(server = %name, "{what}: more than {MAX_PAGES} pages; the rest are not offered");
    items
}

/// Whether an upstream's URI (or URI template) may be offered; warns when not.
fn acceptable_uri(server: &str, what: &str, uri: &str) -> bool {
    let why = if uri.is_empty() {
        "is empty".to_string()
    } else if uri.len() > MAX_URI_BYTES {
        format!("is {} bytes (at most {MAX_URI_BYTES})", uri.len())
    } else if crate::tool::log_safe(uri) != uri {
        format!("has control or formatting characters: {}", crate::tool::log_safe(uri))
    } else {
        return true;
    };
    tracing::warn!(server, "skipping a {what} whose URI {why}");
    false
}

async fn list_resources(server: &Server, peer: &Peer<RoleClient>) -> Vec<Resource> {
    let listed = pages(
        server,
        peer,
        "resources/list",
        |p| ClientRequest::ListResourcesRequest(ListResourcesRequest::with_param(p)),
        |r| match r {
            ServerResult::ListResourcesResult(r) => Some((r.resources, r.next_cursor)),
            _ => None,
        },
    )
    .await;
    let mut seen = std::collections::HashSet::new();
    listed
        .into_iter()
        .filter(|r| acceptable_uri(&server.cfg.name, "resource", &r.uri) && seen.insert(r.uri.clone()))
        .collect()
}

async fn list_templates(server: &Server, peer: &Peer<RoleClient>) -> Vec<ResourceTemplate> {
    let listed = pages(
        server,
        peer,
        "resources/templates/list",
        |p| ClientRequest::ListResourceTemplatesRequest(ListResourceTemplatesRequest::with_param(p)),
        |r| match r {
            ServerResult::ListResourceTemplatesResult(r) => Some((r.resource_templates, r.next_cursor)),
            _ => None,
        },
    )
    .await;
    listed
        .into_iter()
        .filter(|t| {
            acceptable_uri(&server.cfg.name, "resource template", &t.uri_template)
                && (is_template(&t.uri_template) || {
                    tracing::warn!(server = %server.cfg.name, "skipping a resource template that is not a URI template starting with a scheme, of at most {MAX_TEMPLATE_BYTES} bytes and {MAX_TEMPLATE_EXPRESSIONS} expressions: {}", t.uri_template);
                    false
                })
        })
        .take(MAX_TEMPLATES)
        .collect()
}

async fn list_prompts(server: &Server, peer: &Peer<RoleClient>) -> Vec<Prompt> {
    let name = &server.cfg.name;
    let listed = pages(
        server,
        peer,
        "prompts/list",
        |p| ClientRequest::ListPromptsRequest(ListPromptsRequest::with_param(p)),
        |r| match r {
            ServerResult::ListPromptsResult(r) => Some((r.prompts, r.next_cursor)),
            _ => None,
        },
    )
    .await;
    let mut out: Vec<Prompt> = Vec::new();
    for p in listed {
        match super::names::check_prompt_name(&p.name) {
            Ok(()) if out.iter().any(|e| e.name == p.name) => {
                tracing::warn!(server = %name, "skipping prompt {}: it lists two of that name", p.name);
            }
            Ok(()) => out.push(p),
            Err(why) => tracing::warn!(server = %name, "skipping a prompt: {why}"),
        }
    }
    out
}

/// The `<server>+<uri>` form of a resource URI an earlier server has.
pub(crate) fn qualified_uri(server: &str, uri: &str) -> String {
    format!("{server}+{uri}")
}

/// An available external server a session may use, with its offer as it
/// was when the session looked.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    server: Arc<Server>,
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
pub(crate) fn upstreams(catalog: &Catalog, allowed: impl Fn(&[ToolDef]) -> bool) -> Vec<Upstream> {
    collect(catalog, allowed, true)
}

/// [`upstreams`] without working out names: for what only needs the
/// servers and their offers (each session's once-a-second look for
/// changes), so that costs no copy of every URI and prompt name.
pub(crate) fn upstreams_unnamed(catalog: &Catalog, allowed: impl Fn(&[ToolDef]) -> bool) -> Vec<Upstream> {
    collect(catalog, allowed, false)
}

fn collect(catalog: &Catalog, allowed: impl Fn(&[ToolDef]) -> bool, named: bool) -> Vec<Upstream> {
    let mut all: Vec<(&McpTools, Arc<Offer>)> = catalog
        .providers()
        .filter(|p| p.kind() == ProviderKind::Mcp)
        .filter_map(|p| {
            let any: &dyn std::any::Any = p.as_ref();
            let tools = any.downcast_ref::<McpTools>()?;
            Some((tools, tools.server.offers.current()))
        })
        .collect();
    all.sort_by_key(|(t, _)| t.server.order);
    let mut prompts_taken = std::collections::HashSet::new();
    let mut uris_taken: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (tools, offer) in &all {
        let server = &tools.server;
        let (mut prompt_names, mut shadowed) = (Vec::new(), std::collections::HashSet::new());
        if named {
            prompt_names = offer
                .prompts
                .iter()
                .map(|p| {
                    let own = match &server.cfg.prefix {
                        Some(_) => None,
                        None => Some(p.name.clone()).filter(|n| !prompts_taken.contains(n)),
                    };
                    let name = own.unwrap_or_else(|| {
                        super::names::renamed_prompt(&server.cfg.name, server.cfg.prefix.as_deref(), &p.name)
                    });
                    prompts_taken.insert(name.clone()).then_some(name)
                })
                .collect();
            let uris = offer.resources.iter().map(|r| r.uri.as_str());
            let mine: Vec<&str> = uris.chain(offer.templates.iter().map(|t| t.uri_template.as_str())).collect();
            shadowed = mine.iter().filter(|u| uris_taken.contains(*u)).map(|u| u.to_string()).collect();
            uris_taken.extend(mine);
        }
        if server.available.load(Ordering::Acquire) && allowed(&tools.tools) {
            out.push(Upstream {
                server: server.clone(),
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
    pub(crate) fn name(&self) -> &str {
        &self.server.cfg.name
    }

    /// What it offers.
    pub(crate) fn offer(&self) -> &Offer {
        &self.offer
    }

    /// Counters that change whenever its resources (first) or prompts
    /// (second) change.
    pub(crate) fn generations(&self) -> (u64, u64) {
        (
            self.server.offers.resources_generation.load(Ordering::Acquire),
            self.server.offers.prompts_generation.load(Ordering::Acquire),
        )
    }

    /// Whether it listed `uri` as a resource.
    pub(crate) fn lists(&self, uri: &str) -> bool {
        self.offer.resources.iter().any(|r| r.uri == uri)
    }

    /// Whether one of its templates is exactly `uri_template`.
    pub(crate) fn has_template(&self, uri_template: &str) -> bool {
        self.offer.templates.iter().any(|t| t.uri_template == uri_template)
    }

    /// Whether `uri` is an expansion of one of its templates.
    pub(crate) fn expands_to(&self, uri: &str) -> bool {
        self.offer.templates.iter().any(|t| template_matches(&t.uri_template, uri))
    }

    /// Its prompt offered as `exposed`: the server's own name for it.
    pub(crate) fn prompt(&self, exposed: &str) -> Option<&str> {
        self.prompts().find(|(e, _)| *e == exposed).map(|(_, p)| p.name.as_str())
    }

    /// Its prompts offered, each with the name it is offered under.
    pub(crate) fn prompts(&self) -> impl Iterator<Item = (&str, &Prompt)> {
        self.prompt_names.iter().zip(&self.offer.prompts).filter_map(|(n, p)| Some((n.as_deref()?, p)))
    }

    /// The URI (or template) `uri` of this server as offered: its own, or
    /// `<server>+<uri>` when an earlier server has it.
    pub(crate) fn offered_uri(&self, uri: &str) -> String {
        if self.shadowed.contains(uri) { qualified_uri(self.name(), uri) } else { uri.to_string() }
    }

    /// Whether an earlier server offers `uri` (or a template of that text).
    pub(crate) fn is_shadowed(&self, uri: &str) -> bool {
        self.shadowed.contains(uri)
    }

    /// Subscribes `session` to the server's resource `remote`, told under
    /// `uri` (what the session subscribed to); the server is asked for its
    /// first subscriber, when it declares `resources.subscribe`.
    #[allow(deprecated)] // resources/subscribe is what servers before MCP 2026-07-28 speak.
    pub(crate) async fn subscribe(
        &self,
        session: Arc<str>,
        remote: &str,
        uri: &str,
        notify: super::subscribe::Notify,
        timeout: Duration,
    ) -> Result<(), ErrorData> {
        let first = self
            .server
            .subscriptions
            .add(session.clone(), remote, uri, notify)
            .map_err(|e| ErrorData::invalid_request(e.to_string(), Some(json!({"code": "capacity_exceeded"}))))?;
        if first && self.offer.subscribe {
            let request = ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
                rmcp::model::SubscribeRequestParams::new(remote),
            ));
            if let Err(e) = self.send("resources/subscribe", request, timeout).await {
                self.server.subscriptions.remove(&session, remote, uri);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Ends `session`'s subscription to `remote` under `uri`; the server is
    /// told when nobody is left.
    #[allow(deprecated)] // As `subscribe`.
    pub(crate) async fn unsubscribe(&self, session: &str, remote: &str, uri: &str, timeout: Duration) {
        if self.server.subscriptions.remove(session, remote, uri) && self.offer.subscribe {
            let request = ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
                rmcp::model::UnsubscribeRequestParams::new(remote),
            ));
            if let Err(e) = self.send("resources/unsubscribe", request, timeout).await {
                tracing::debug!(server = %self.name(), "resources/unsubscribe failed: {}", e.message);
            }
        }
    }

    /// Sends `request` under the server's `timeout_ms` (else `timeout`).
    /// Its errors are passed on with their code and a message held to a
    /// line's worth; a timeout or a lost connection is an internal error
    /// that names the server.
    async fn send(&self, what: &str, request: ClientRequest, timeout: Duration) -> Result<ServerResult, ErrorData> {
        let name = &self.server.cfg.name;
        let peer = self.server.peer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(peer) = peer.filter(|_| self.server.available.load(Ordering::Acquire)) else {
            return Err(ErrorData::internal_error(
                format!("MCP server {name:?} is not connected; reconnecting"),
                Some(json!({"code": "unavailable"})),
            ));
        };
        let timeout = self.server.cfg.timeout_ms.map_or(timeout, Duration::from_millis);
        let options = PeerRequestOptions::with_timeout(timeout);
        let answer = async { peer.send_request_with_option(request, options).await?.await_response().await };
        match answer.await {
            Ok(r) => Ok(r),
            Err(ServiceError::McpError(e)) => Err(ErrorData::new(e.code, cut(&e.message), None)),
            Err(ServiceError::Timeout { .. }) => {
                self.server.recheck.notify_one();
                Err(ErrorData::internal_error(
                    format!("{what} at MCP server {name:?} timed out after {} ms", timeout.as_millis()),
                    Some(json!({"code": "timeout"})),
                ))
            }
            Err(e) => {
                self.server.recheck.notify_one();
                Err(ErrorData::internal_error(
                    format!("{what} at MCP server {name:?} failed: {}", cut(&e.to_string())),
                    Some(json!({"code": "unavailable"})),
                ))
            }
        }
    }

    /// `resources/read` of `uri`, the answer held to `cap` bytes of JSON.
    pub(crate) async fn read(&self, uri: &str, timeout: Duration, cap: usize) -> Result<ReadResourceResult, ErrorData> {
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(ReadResourceRequestParams::new(uri)));
        match self.send("resources/read", request, timeout).await? {
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
    pub(crate) async fn get_prompt(
        &self,
        remote: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
        cap: usize,
    ) -> Result<GetPromptResult, ErrorData> {
        let mut params = GetPromptRequestParams::new(remote);
        params.arguments = arguments;
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
        match self.send("prompts/get", request, timeout).await? {
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
    pub(crate) async fn complete(
        &self,
        params: CompleteRequestParams,
        timeout: Duration,
        cap: usize,
    ) -> Result<CompleteResult, ErrorData> {
        if !self.offer.completions {
            return Ok(CompleteResult::default());
        }
        let request = ClientRequest::CompleteRequest(CompleteRequest::new(params));
        match self.send("completion/complete", request, timeout).await? {
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
pub(crate) const MAX_TEMPLATE_BYTES: usize = 256;
/// The most expressions (`{...}`) a template offered may have.
const MAX_TEMPLATE_EXPRESSIONS: usize = 8;
/// The most templates offered per server.
pub(crate) const MAX_TEMPLATES: usize = 64;

/// Whether `template` is a URI template this host can match: its braces
/// pair up, it starts with a literal scheme (`name:` before any
/// expression: a catch-all such as `{+uri}` would claim every URI), and it
/// is short enough that matching it stays cheap (at most
/// [`MAX_TEMPLATE_BYTES`] bytes and [`MAX_TEMPLATE_EXPRESSIONS`]
/// expressions).
fn is_template(template: &str) -> bool {
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
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
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
