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

use super::provider::cut;
use super::server::Server;
use futures::future::BoxFuture;
use rmcp::model::{
    ClientRequest, ErrorData, ListPromptsRequest, ListResourceTemplatesRequest, ListResourcesRequest,
    PaginatedRequestParams, Prompt, Resource, ResourceTemplate, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleClient};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolhost_mcp_wire::subscribe::Subscriptions;
use toolhost_mcp_wire::upstream::{
    MAX_TEMPLATE_BYTES, MAX_TEMPLATE_EXPRESSIONS, MAX_TEMPLATES, MAX_URI_BYTES, Offer, UpstreamServer, is_template,
};

/// Entries of one kind (resources, templates, prompts) kept per server.
pub(crate) const MAX_LISTED: usize = 1000;
/// Pages read per listing, at most (a server that pages forever stops here).
pub(super) const MAX_PAGES: usize = 100;
/// How long one page of a listing may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

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

impl UpstreamServer for Server {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn order(&self) -> u64 {
        self.order
    }

    fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    fn offer(&self) -> Arc<Offer> {
        self.offers.current()
    }

    fn generations(&self) -> (u64, u64) {
        (
            self.offers.resources_generation.load(Ordering::Acquire),
            self.offers.prompts_generation.load(Ordering::Acquire),
        )
    }

    fn prefix(&self) -> Option<&str> {
        self.cfg.prefix.as_deref()
    }

    fn renamed_prompt(&self, prompt: &str) -> String {
        super::names::renamed_prompt(&self.cfg.name, self.cfg.prefix.as_deref(), prompt)
    }

    fn subscriptions(&self) -> &Subscriptions {
        &self.subscriptions
    }

    /// Sends `request` under the server's `timeout_ms` (else `timeout`).
    /// Its errors are passed on with their code and a message held to a
    /// line's worth; a timeout or a lost connection is an internal error
    /// that names the server.
    fn send<'a>(
        &'a self,
        what: &'a str,
        request: ClientRequest,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ServerResult, ErrorData>> {
        Box::pin(async move {
            let name = &self.cfg.name;
            let peer = self.peer.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let Some(peer) = peer.filter(|_| self.available.load(Ordering::Acquire)) else {
                return Err(ErrorData::internal_error(
                    format!("MCP server {name:?} is not connected; reconnecting"),
                    Some(json!({"code": "unavailable"})),
                ));
            };
            let timeout = self.cfg.timeout_ms.map_or(timeout, Duration::from_millis);
            let options = PeerRequestOptions::with_timeout(timeout);
            let answer = async { peer.send_request_with_option(request, options).await?.await_response().await };
            match answer.await {
                Ok(r) => Ok(r),
                Err(ServiceError::McpError(e)) => Err(ErrorData::new(e.code, cut(&e.message), None)),
                Err(ServiceError::Timeout { .. }) => {
                    self.recheck.notify_one();
                    Err(ErrorData::internal_error(
                        format!("{what} at MCP server {name:?} timed out after {} ms", timeout.as_millis()),
                        Some(json!({"code": "timeout"})),
                    ))
                }
                Err(e) => {
                    self.recheck.notify_one();
                    Err(ErrorData::internal_error(
                        format!("{what} at MCP server {name:?} failed: {}", cut(&e.to_string())),
                        Some(json!({"code": "unavailable"})),
                    ))
                }
            }
        })
    }
}
