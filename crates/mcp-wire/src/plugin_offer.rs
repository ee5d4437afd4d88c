//! A wasm plugin's resources, prompts and completions served as an
//! external server's are: a [`PluginServer`] is the [`UpstreamServer`] of
//! a plugin's [`Offering`], so the front's listing, naming (the one clash
//! rule: an earlier offer keeps a name, a later prompt is
//! `<plugin>_<prompt>`, a later resource `<plugin>+<uri>`), allow-lists
//! (an agent uses the offers of plugins with a tool on its list), output
//! cap and per-agent request budget apply to both alike.
//!
//! Plugins come after every external server, in name order. Each loaded
//! version is a server of its own (its generation counter is new), so a
//! session sees its offer change when a plugin is replaced.

use crate::subscribe::Subscriptions;
use crate::upstream::{Offer, UpstreamHandle, UpstreamServer};
use futures::future::BoxFuture;
use rmcp::model::{ClientRequest, ErrorCode, ErrorData, ServerResult};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use toolhost_core::tool::offer::{OfferHandle, Offering};
use toolhost_core::tool::{CallContext, CallError};

/// Where plugins sort among the servers: after every external one.
const PLUGIN_ORDER: u64 = 1 << 62;

/// Counts plugin offers made, for their generations.
static MADE: AtomicU64 = AtomicU64::new(1);

/// A plugin's offer as an [`UpstreamServer`].
#[derive(Debug)]
pub struct PluginServer {
    offering: Arc<dyn Offering>,
    offer: Arc<Offer>,
    generation: u64,
    subscriptions: Subscriptions,
}

/// The front's server for the plugin offer `handle` (made once per loaded
/// version and kept in the handle).
pub fn server(handle: &OfferHandle) -> &UpstreamHandle {
    handle
        .front
        .get_or_init(|| {
            let server: Arc<dyn UpstreamServer> = Arc::new(PluginServer::new(handle.offering.clone()));
            Arc::new(UpstreamHandle(server))
        })
        .downcast_ref::<UpstreamHandle>()
        .expect("only the front fills it, with an UpstreamHandle")
}

impl PluginServer {
    fn new(offering: Arc<dyn Offering>) -> PluginServer {
        let listing = offering.listing();
        // Checked when the plugin was loaded: entries that do not parse are
        // left out rather than failing the whole offer.
        fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
            serde_json::from_value(v.clone()).ok()
        }
        let offer = Offer {
            resources: listing.resources.iter().filter_map(parse).collect(),
            templates: listing
                .templates
                .iter()
                .filter_map(parse)
                .filter(|t: &rmcp::model::ResourceTemplate| crate::upstream::is_template(&t.uri_template))
                .take(crate::upstream::MAX_TEMPLATES)
                .collect(),
            prompts: listing.prompts.iter().filter_map(parse).collect(),
            completions: !listing.prompts.is_empty() || !listing.templates.is_empty(),
            subscribe: false,
        };
        PluginServer {
            offering,
            offer: Arc::new(offer),
            generation: MADE.fetch_add(1, Ordering::Relaxed),
            subscriptions: Subscriptions::default(),
        }
    }
}

/// A plugin's error as MCP's: not found is `-32002` for a resource and
/// invalid params otherwise, bad input invalid params, the rest internal
/// errors carrying the host's code.
fn error(e: CallError, resource: bool) -> ErrorData {
    let code = json!({"code": e.code()});
    match e {
        CallError::NotFound { message, .. } if resource => {
            ErrorData::new(ErrorCode::RESOURCE_NOT_FOUND, crate::upstream::cut(&message), Some(code))
        }
        CallError::NotFound { message, .. } | CallError::InvalidInput { message, .. } => {
            ErrorData::invalid_params(crate::upstream::cut(&message), Some(code))
        }
        e => ErrorData::internal_error(crate::upstream::cut(&e.to_string()), Some(code)),
    }
}

fn answer<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, ErrorData> {
    serde_json::from_value(v)
        .map_err(|e| ErrorData::internal_error(format!("a plugin's {what} answer did not fit MCP: {e}"), None))
}

impl UpstreamServer for PluginServer {
    fn name(&self) -> &str {
        self.offering.provider()
    }

    fn order(&self) -> u64 {
        PLUGIN_ORDER
    }

    fn is_available(&self) -> bool {
        true
    }

    fn offer(&self) -> Arc<Offer> {
        self.offer.clone()
    }

    fn generations(&self) -> (u64, u64) {
        (self.generation, self.generation)
    }

    fn prefix(&self) -> Option<&str> {
        self.offering.prefix()
    }

    fn renamed_prompt(&self, prompt: &str) -> String {
        match self.offering.prefix() {
            Some(p) => format!("{p}{prompt}"),
            None => format!("{}_{prompt}", self.name()),
        }
    }

    fn subscriptions(&self) -> &Subscriptions {
        &self.subscriptions
    }

    fn send<'a>(
        &'a self,
        what: &'a str,
        request: ClientRequest,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ServerResult, ErrorData>> {
        let offering = self.offering.clone();
        Box::pin(async move {
            let ctx = CallContext::default();
            let run = tokio::task::spawn_blocking(move || match request {
                ClientRequest::ReadResourceRequest(r) => offering
                    .read(&r.params.uri, timeout, &ctx)
                    .map_err(|e| error(e, true))
                    .and_then(|v| answer(v, "resources/read").map(ServerResult::ReadResourceResult)),
                ClientRequest::GetPromptRequest(r) => offering
                    .get_prompt(&r.params.name, &r.params.arguments.unwrap_or_default(), timeout, &ctx)
                    .map_err(|e| error(e, false))
                    .and_then(|v| answer(v, "prompts/get").map(ServerResult::GetPromptResult)),
                ClientRequest::CompleteRequest(r) => {
                    let params = serde_json::to_value(&r.params).unwrap_or_default();
                    offering
                        .complete(&params, timeout, &ctx)
                        .map_err(|e| error(e, false))
                        .and_then(|v| answer(v, "completion/complete").map(ServerResult::CompleteResult))
                }
                _ => Err(ErrorData::invalid_request(
                    "a plugin serves resources/read, prompts/get and completion/complete",
                    None,
                )),
            });
            run.await.map_err(|e| ErrorData::internal_error(format!("{what} failed: {e}"), None))?
        })
    }
}
