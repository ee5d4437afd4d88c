//! The page's marketplace panel: search the catalogues of the config in
//! force, see an entry's details (asks, publisher, whether its key is
//! trusted here), install one (the entry held to the signed component, then
//! added as `toolhost plugin add` adds it: held until granted when it asks
//! for what is not granted).

use super::{UiCtx, error};
use crate::market::{Market, MarketError, tiers};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// The most results the panel shows.
const MAX_RESULTS: usize = 50;

#[derive(Debug, Deserialize)]
pub(super) struct SearchQuery {
    q: String,
}

/// One result, as the panel shows it.
#[derive(Debug, Serialize)]
struct Row {
    name: String,
    version: String,
    description: String,
    author: String,
    key_id: String,
    /// Whether this host trusts the publisher's key.
    trusted: bool,
    tiers: String,
    asks: String,
    tools: Vec<crate::catalogue::EntryTool>,
    reference: String,
    catalogue: String,
    digest: String,
    published: String,
}

#[derive(Debug, Serialize)]
struct Found {
    results: Vec<Row>,
    warnings: Vec<String>,
}

fn market(ctx: &UiCtx) -> Result<Market, Box<Response>> {
    let Some(reloader) = &ctx.admin.reloader else {
        return Err(Box::new(error(
            StatusCode::NOT_FOUND,
            "not_found",
            "this host has no config to read catalogues from",
        )));
    };
    Market::open(reloader.builder()).map_err(|e| {
        Box::new(match e {
            MarketError::NoCatalogues => error(StatusCode::NOT_FOUND, "not_found", &e.to_string()),
            e => error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", &e.to_string()),
        })
    })
}

/// `POST /ui/api/market/search` `{"q": WORDS}`: the ranked newest
/// version of each plugin.
pub(super) async fn search(State(ctx): State<UiCtx>, Json(q): Json<SearchQuery>) -> Response {
    if q.q.trim().is_empty() || q.q.len() > 200 {
        return error(StatusCode::BAD_REQUEST, "invalid_input", "search for 1 to 200 characters");
    }
    let found = tokio::task::spawn_blocking(move || -> Result<Found, Box<Response>> {
        let m = market(&ctx)?;
        let (hits, warnings) = m.search(&q.q, false, MAX_RESULTS);
        let results = hits
            .into_iter()
            .map(|h| {
                let (l, e) = (&h.listed, &h.listed.entry);
                Row {
                    name: e.name.clone(),
                    version: e.version.clone(),
                    description: e.description.clone(),
                    author: e.publisher.author.clone(),
                    key_id: e.publisher.key_id.clone(),
                    trusted: m.trusts(&e.publisher.key_id),
                    tiers: tiers(l),
                    asks: e.asks.in_words(),
                    tools: e.tools.clone(),
                    reference: e.reference.clone(),
                    catalogue: l.catalogue.clone(),
                    digest: e.digest.clone(),
                    published: e.published.clone(),
                }
            })
            .collect();
        Ok(Found { results, warnings })
    })
    .await;
    match found {
        Ok(Ok(f)) => Json(f).into_response(),
        Ok(Err(r)) => *r,
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", &e.to_string()),
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct InstallRequest {
    /// `NAME` or `NAME@VERSION`.
    plugin: String,
    /// The publisher's key id, when several publish it.
    #[serde(default)]
    publisher: Option<String>,
}

#[derive(Debug, Serialize)]
struct InstalledRow {
    name: String,
    version: String,
    digest: String,
    tools: Vec<String>,
    origin: String,
    /// Entries skipped because they lied.
    skipped: Vec<String>,
}

/// `POST /ui/api/market/install`: as `toolhost install`.
pub(super) async fn install(
    State(ctx): State<UiCtx>,
    token: Option<axum::Extension<crate::mcp::http::TokenId>>,
    Json(req): Json<InstallRequest>,
) -> Response {
    let who = super::page_actor(token.as_ref().map(|t| &t.0));
    if req.plugin.is_empty() || req.plugin.len() > 300 {
        return error(StatusCode::BAD_REQUEST, "invalid_input", "name a plugin (NAME or NAME@VERSION)");
    }
    let installer = ctx.admin.installer.clone();
    let done = tokio::task::spawn_blocking(move || -> Result<InstalledRow, Box<Response>> {
        let m = market(&ctx)?;
        let refuse = |e: MarketError| Box::new(error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", &e.to_string()));
        let (entries, _) = m.entries(false);
        let candidates = m.choose(entries, &req.plugin, req.publisher.as_deref()).map_err(refuse)?;
        let chosen = m.check(candidates, &req.plugin).map_err(refuse)?;
        let path = std::path::PathBuf::from(chosen.pinned.to_string());
        let i = crate::audit::acting(who, || installer.add_plugin_at_run_time(&path))
            .map_err(|e| Box::new(error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", &e.to_string())))?;
        tracing::info!(plugin = %crate::tool::log_safe(&i.name), "plugin installed from the marketplace on the DM's page");
        Ok(InstalledRow {
            name: i.name.clone(),
            version: chosen.listed.entry.version.clone(),
            digest: i.digest.clone(),
            tools: i.tools.clone(),
            origin: i.provenance.describe(),
            skipped: chosen.skipped,
        })
    })
    .await;
    match done {
        Ok(Ok(row)) => Json(row).into_response(),
        Ok(Err(r)) => *r,
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", &e.to_string()),
    }
}
