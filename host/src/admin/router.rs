//! The admin API's server side: an axum `Router` a serving host mounts at
//! `/admin`. Every route needs the admin token; replies are the typed
//! structs of [`super::api`].

use super::api::{
    AddPluginRequest, AddServerReply, ErrorReply, InstalledReply, PluginEntry, PluginsReply, ProviderEntry,
    RemovedReply, StatusReply,
};
use crate::Host;
use crate::config::McpServerConfig;
use crate::mcp::ExternalServers;
use crate::tool::ProviderKind;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use std::sync::Arc;
use std::time::Duration;

/// The operator's side of a serving host.
#[derive(Clone)]
pub struct Admin {
    /// The secret every admin request must carry as a bearer token.
    pub token: String,
    /// External MCP servers, to add and remove at run time.
    pub servers: Option<Arc<ExternalServers>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct AdminState {
    host: Arc<Host>,
    admin: Admin,
}

/// An error reply with its HTTP status.
struct ApiError(StatusCode, ErrorReply);

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError(status, ErrorReply::new(code, message))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.0, Json(self.1)).into_response();
        if self.0 == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"toolhost\""));
        }
        r
    }
}

type Reply<T> = Result<Json<T>, ApiError>;

/// The admin routes for `host`, to mount at `/admin`.
pub fn router(host: Arc<Host>, admin: Admin) -> Router {
    let state = AdminState { host, admin };
    Router::new()
        .route("/status", get(status))
        .route("/plugins", get(plugins).post(add_plugin))
        .route("/plugins/{name}", delete(remove_plugin))
        .route("/servers", post(add_server))
        .route("/servers/{name}", delete(remove_server))
        .fallback(|request: Request| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no admin route {} /admin{}", request.method(), request.uri().path()),
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(DefaultBodyLimit::max(1 << 20))
        .with_state(state)
}

/// Lets through only requests that carry the admin token.
async fn authorize(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    match crate::mcp::http::bearer(request.headers()) {
        Some(t) if crate::mcp::http::same_secret(t.as_bytes(), state.admin.token.as_bytes()) => next.run(request).await,
        _ => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "forbidden",
            "the admin API needs the admin token (see <state dir>/admin/<pid>.json)",
        )
        .into_response(),
    }
}

async fn status(State(s): State<AdminState>) -> Reply<StatusReply> {
    let catalog = s.host.registry().snapshot();
    let providers = catalog
        .providers()
        .map(|p| ProviderEntry {
            name: p.name().to_string(),
            kind: p.kind().as_str().to_string(),
            available: p.is_available(),
            fingerprint: p.fingerprint().map(str::to_string),
            tools: p.tools().iter().map(|t| t.name.clone()).collect(),
        })
        .collect();
    let servers = s.admin.servers.as_ref().map(|s| s.status()).unwrap_or_default();
    Ok(Json(StatusReply { pid: std::process::id(), providers, servers }))
}

async fn plugins(State(s): State<AdminState>) -> Reply<PluginsReply> {
    let catalog = s.host.registry().snapshot();
    let plugins = catalog
        .providers()
        .filter(|p| p.kind() == ProviderKind::Wasm)
        .map(|p| {
            let origin = s.host.provenance(p.name());
            PluginEntry {
                name: p.name().to_string(),
                sha256: p.fingerprint().unwrap_or_default().to_string(),
                tools: p.tools().iter().map(|t| t.name.clone()).collect(),
                provenance_text: origin.as_ref().map(|o| o.describe()),
                source: Some(s.host.runtime_changes().plugin_source(p.name()).as_str().to_string()),
                provenance: origin,
            }
        })
        .collect();
    Ok(Json(PluginsReply { plugins }))
}

async fn add_plugin(
    State(s): State<AdminState>,
    body: Result<Json<AddPluginRequest>, JsonRejection>,
) -> Reply<InstalledReply> {
    let Json(req) = body.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("expected {{\"path\": \"/abs/file.wasm\"}}: {e}"),
        )
    })?;
    let host = s.host.clone();
    // Compiling can take seconds: off the async workers.
    match tokio::task::spawn_blocking(move || host.add_plugin_at_run_time(&req.path)).await {
        Ok(Ok(i)) => Ok(Json(InstalledReply { provenance_text: i.provenance.describe(), installed: i })),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", e.to_string())),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", e.to_string())),
    }
}

async fn remove_plugin(State(s): State<AdminState>, Path(name): Path<String>) -> Reply<RemovedReply> {
    let host = s.host.clone();
    let n = name.clone();
    match tokio::task::spawn_blocking(move || host.remove_plugin_at_run_time(&n)).await {
        Ok(Ok(())) => Ok(Json(RemovedReply { removed: name })),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", e.to_string())),
    }
}

fn servers(s: &AdminState) -> Result<&Arc<ExternalServers>, ApiError> {
    s.admin
        .servers
        .as_ref()
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", "external servers are not enabled"))
}

async fn add_server(
    State(s): State<AdminState>,
    body: Result<Json<McpServerConfig>, JsonRejection>,
) -> Reply<AddServerReply> {
    let servers = servers(&s)?.clone();
    let Json(cfg) =
        body.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", format!("server config: {e}")))?;
    let name = cfg.name.clone();
    servers.add(cfg.clone()).map_err(|e| ApiError::new(StatusCode::CONFLICT, "invalid_input", e.to_string()))?;
    s.host.runtime_changes().server_added(&cfg);
    let waiting = servers.clone();
    let _ = tokio::task::spawn_blocking(move || waiting.wait_ready(Duration::from_secs(20))).await;
    let status = servers.status().into_iter().find(|s| s.name == name);
    Ok(Json(AddServerReply { added: name, status }))
}

async fn remove_server(State(s): State<AdminState>, Path(name): Path<String>) -> Reply<RemovedReply> {
    servers(&s)?.remove(&name).map_err(|e| ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()))?;
    s.host.runtime_changes().server_removed(&name);
    Ok(Json(RemovedReply { removed: name }))
}
