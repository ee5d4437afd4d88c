//! The admin API's server side: an axum `Router` a serving host mounts at
//! `/admin`. Every route needs the admin token; replies are the typed
//! structs of [`super::api`].

use super::api::{
    AddPluginRequest, AddServerReply, AgentStatusReport, AgentsReply, ClearOverrideRequest, CompilingEntry, ErrorReply,
    GrantsReply, InstalledReply, MAX_OVERRIDE_SECS, PluginsReply, ProviderEntry, RemovedReply, SetOverrideRequest,
    StatsReply, StatusReply,
};
use crate::Host;
use crate::config::McpServerConfig;
use crate::mcp_client::ExternalServers;
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
    /// Adds and removes plugins, and remembers what the operator changed.
    pub installer: Arc<crate::Installer>,
    /// External MCP servers, to add and remove at run time.
    pub servers: Option<Arc<ExternalServers>>,
    /// Where the DM's page ([`crate::ui`]) stages uploaded plugin files, in
    /// private directories; `None`: the page takes no uploads.
    pub uploads: Option<std::path::PathBuf>,
    /// Re-reads the config (`toolhost reload`); `None`: reload is refused.
    pub reloader: Option<Arc<crate::reload::Reloader>>,
    /// The pairing codes the HTTP front honours (`toolhost pair`).
    pub pairings: Arc<crate::mcp::http::Pairings>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

impl Admin {
    /// The external servers' status, each with where it came from (the
    /// config, or added at run time).
    pub fn server_status(&self) -> Vec<crate::mcp_client::ServerStatus> {
        let mut out = self.servers.as_ref().map(|s| s.status()).unwrap_or_default();
        self.installer.runtime_changes().name_sources(&mut out);
        out
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
        .route("/plugins/canary", post(canary_plugin))
        .route("/plugins/{name}", delete(remove_plugin))
        .route("/servers", post(add_server))
        .route("/servers/{name}", delete(remove_server))
        .route("/stats", get(stats))
        .route("/grants", get(grants))
        .route("/agents", get(agents))
        .route("/overrides", post(set_override))
        .route("/overrides/clear", post(clear_override))
        .route("/pairings", get(pairings).post(pair))
        .route("/pairings/{id}", delete(unpair))
        .route("/reload", post(reload))
        .route("/secrets/refresh", post(refresh_secrets))
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

/// The header an admin API caller names itself in, for the audit trail.
pub const ACTOR_HEADER: &str = "x-toolhost-actor";
/// The header the DM's page marks the actions it forwards with (`page`).
pub const VIA_HEADER: &str = "x-toolhost-via";

/// Who made an admin request (set by [`authorize`]).
type Who = axum::Extension<crate::audit::Actor>;

/// Lets through only requests that carry the admin token.
async fn authorize(State(state): State<AdminState>, mut request: Request, next: Next) -> Response {
    match crate::mcp::http::bearer(request.headers()) {
        Some(t) if toolhost_base::seal::same_secret(t.as_bytes(), state.admin.token.as_bytes()) => {
            // Who the caller says it is (`toolhost` sends `cli uid N`, the
            // page `page`): recorded with what it does, beside the
            // channel, which is what the token proves.
            let said = request.headers().get(ACTOR_HEADER).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
            // The page forwards its actions here with the admin token.
            let via = match request.headers().get(VIA_HEADER).map(|v| v.as_bytes()) {
                Some(b"page") => "page",
                _ => "admin_api",
            };
            let actor = crate::audit::Actor::new(said.unwrap_or("admin token"), via);
            request.extensions_mut().insert(actor);
            next.run(request).await
        }
        _ => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "forbidden",
            "the admin API needs the admin token (see <state dir>/admin/<pid>.json)",
        )
        .into_response(),
    }
}

async fn status(State(s): State<AdminState>) -> Reply<StatusReply> {
    let catalog = s.host.pipeline().registry().snapshot();
    let providers = catalog
        .providers()
        .map(|p| ProviderEntry {
            name: p.name().to_string(),
            kind: p.kind().as_str().to_string(),
            available: p.is_available(),
            fingerprint: p.fingerprint().map(str::to_string),
            tools: p.tools().iter().map(|t| t.name.clone()).collect(),
            code: p.describe().code.map(str::to_string),
        })
        .collect();
    let servers = s.admin.server_status();
    let compiling = s
        .host
        .pipeline()
        .runtime()
        .compiling_now()
        .into_iter()
        .map(|(plugin, so_far)| CompilingEntry { plugin, ms: u64::try_from(so_far.as_millis()).unwrap_or(u64::MAX) })
        .collect();
    let ready = s.host.pipeline().readiness().is_ready();
    Ok(Json(StatusReply { pid: std::process::id(), providers, servers, compiling, ready }))
}

async fn plugins(State(s): State<AdminState>) -> Reply<PluginsReply> {
    Ok(Json(PluginsReply::of(&s.admin.installer)))
}

async fn add_plugin(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    body: Result<Json<AddPluginRequest>, JsonRejection>,
) -> Reply<InstalledReply> {
    let Json(req) = body.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("expected {{\"path\": \"/abs/file.wasm\"}}: {e}"),
        )
    })?;
    let installer = s.admin.installer.clone();
    // Compiling can take seconds: off the async workers.
    match tokio::task::spawn_blocking(move || crate::audit::acting(who, || installer.add_plugin_at_run_time(&req.path)))
        .await
    {
        Ok(Ok(i)) => Ok(Json(InstalledReply { provenance_text: i.provenance.describe(), installed: i })),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", e.to_string())),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", e.to_string())),
    }
}

async fn canary_plugin(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    body: Result<Json<super::api::CanaryRequest>, JsonRejection>,
) -> Reply<toolhost_admission::canary::CanaryStatus> {
    let Json(req) = body.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("expected {{\"path\": \"/abs/file.wasm\", \"terms\": {{...}}}}: {e}"),
        )
    })?;
    let installer = s.admin.installer.clone();
    match tokio::task::spawn_blocking(move || {
        crate::audit::acting(who, || installer.canary_at_run_time(&req.path, req.terms, req.plugin.as_deref()))
    })
    .await
    {
        Ok(Ok(status)) => Ok(Json(status)),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", e.to_string())),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", e.to_string())),
    }
}

async fn remove_plugin(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    Path(name): Path<String>,
) -> Reply<RemovedReply> {
    let installer = s.admin.installer.clone();
    let n = name.clone();
    match tokio::task::spawn_blocking(move || crate::audit::acting(who, || installer.remove_plugin_at_run_time(&n)))
        .await
    {
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
    axum::Extension(who): Who,
    body: Result<Json<McpServerConfig>, JsonRejection>,
) -> Reply<AddServerReply> {
    let servers = servers(&s)?.clone();
    let Json(cfg) =
        body.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", format!("server config: {e}")))?;
    let name = cfg.name.clone();
    servers.add(cfg.clone()).map_err(|e| ApiError::new(StatusCode::CONFLICT, "invalid_input", e.to_string()))?;
    s.admin.installer.runtime_changes().server_added(&cfg);
    action(&s, who, "server_add", serde_json::json!({"server": name}));
    announce(&s, crate::cluster::Change::ServerAdded { server: Box::new(cfg.clone()) }).await?;
    let waiting = servers.clone();
    let _ = tokio::task::spawn_blocking(move || waiting.wait_ready(Duration::from_secs(20))).await;
    let status = s.admin.server_status().into_iter().find(|s| s.name == name);
    Ok(Json(AddServerReply { added: name, status }))
}

async fn remove_server(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    Path(name): Path<String>,
) -> Reply<RemovedReply> {
    servers(&s)?.remove(&name).map_err(|e| ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()))?;
    action(&s, who, "server_remove", serde_json::json!({"server": name}));
    s.admin.installer.runtime_changes().server_removed(&name);
    announce(&s, crate::cluster::Change::ServerRemoved { name: name.clone() }).await?;
    Ok(Json(RemovedReply { removed: name }))
}

async fn stats(State(s): State<AdminState>) -> Reply<StatsReply> {
    Ok(Json(StatsReply { pid: std::process::id(), tools: crate::report::stats(&s.host) }))
}

async fn grants(State(s): State<AdminState>) -> Reply<GrantsReply> {
    Ok(Json(GrantsReply {
        pid: std::process::id(),
        plugins: crate::report::grants(&s.host),
        withheld: s.host.admission().withheld_plugins(),
    }))
}

async fn agents(State(s): State<AdminState>) -> Reply<AgentsReply> {
    Ok(Json(AgentsReply { pid: std::process::id(), agents: crate::report::agents(&s.host) }))
}

/// `POST /reload`, or `POST /reload?force=true`: see
/// [`crate::reload::Reloader::reload_with`].
async fn reload(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    uri: axum::http::Uri,
) -> Reply<crate::reload::ReloadReport> {
    let Some(reloader) = s.admin.reloader.clone() else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "this host does not reload its config"));
    };
    let force = match uri.query() {
        None | Some("") => false,
        Some("force=true") => true,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                format!("expected no query or ?force=true, not ?{}", crate::tool::log_safe(other)),
            ));
        }
    };
    // Resolving grants and restarting servers block: off the async workers.
    match tokio::task::spawn_blocking(move || crate::audit::acting(who, || reloader.reload_with(force))).await {
        Ok(Ok(report)) => Ok(Json(report)),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", e.to_string())),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", e.to_string())),
    }
}

/// Reads the secrets file again (`toolhost secret set` and `rm` call it):
/// the next call of each plugin reads its secrets as they are now, and the
/// plugins waiting for a secret now set load.
async fn refresh_secrets(State(s): State<AdminState>) -> Reply<super::api::SecretsRefreshed> {
    let host = s.host.clone();
    match tokio::task::spawn_blocking(move || host.admission().refresh_secrets()).await {
        Ok(Ok(plugins)) => Ok(Json(super::api::SecretsRefreshed { plugins })),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", e.to_string())),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", e.to_string())),
    }
}

/// Tells the fleet of a change made here (off the async workers): `502`
/// when the control plane did not take it.
async fn announce(s: &AdminState, change: crate::cluster::Change) -> Result<(), ApiError> {
    if s.admin.installer.runtime_changes().cluster().is_none() {
        return Ok(());
    }
    let installer = s.admin.installer.clone();
    match tokio::task::spawn_blocking(move || installer.runtime_changes().announce(change)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::BAD_GATEWAY, "fleet_not_told", e.to_string())),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", e.to_string())),
    }
}

/// Tells the fleet of a change before it is made here: `502` when the
/// control plane did not take it, and then the change is made nowhere.
async fn announce_first(s: &AdminState, change: crate::cluster::Change) -> Result<(), ApiError> {
    if s.admin.installer.runtime_changes().cluster().is_none() {
        return Ok(());
    }
    let installer = s.admin.installer.clone();
    match tokio::task::spawn_blocking(move || installer.runtime_changes().announce(change)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "fleet_not_told",
            format!(
                "the change was not made, on this host or any other: the fleet's control plane did not take it ({}); make it again when it answers",
                e.0
            ),
        )),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", e.to_string())),
    }
}

/// `not_found` naming the agents there are.
fn unknown_agent(host: &crate::Host, name: &str) -> ApiError {
    let known: Vec<String> = host.pipeline().budget().agents().iter().map(|a| format!("{:?}", a.name)).collect();
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "unknown agent {:?}; the agents (npcs in the config) are: {}",
            crate::tool::log_safe(name),
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        ),
    )
}

fn agent_reply(host: &crate::Host, name: &str) -> Reply<AgentStatusReport> {
    crate::report::agent_status(host, name).map(Json).ok_or_else(|| unknown_agent(host, name))
}

async fn set_override(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    body: Result<Json<SetOverrideRequest>, JsonRejection>,
) -> Reply<AgentStatusReport> {
    let Json(req) = body.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("expected {{\"agent\": NAME, \"tier\": \"fast\"|\"standard\"|\"deep\", \"for_secs\": N}}: {e}"),
        )
    })?;
    if !(1..=MAX_OVERRIDE_SECS).contains(&req.for_secs) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("an override lasts 1 s to {} h, not {} s", MAX_OVERRIDE_SECS / 3600, req.for_secs),
        ));
    }
    s.host.pipeline().budget().agent(&req.agent).map_err(|_| unknown_agent(&s.host, &req.agent))?;
    // The fleet first: an override the control plane did not take is made
    // nowhere (never on this host only).
    let until_unix_ms = crate::changes::now_unix_ms().saturating_add(req.for_secs.saturating_mul(1000));
    announce_first(&s, crate::cluster::Change::OverrideSet { agent: req.agent.clone(), tier: req.tier, until_unix_ms })
        .await?;
    s.host
        .pipeline()
        .budget()
        .set_override(&req.agent, req.tier, Duration::from_secs(req.for_secs))
        .map_err(|_| unknown_agent(&s.host, &req.agent))?;
    // The agent's sessions look at what they show now, not at their next poll.
    s.host.pipeline().registry().touch();
    // Kept across a restart until it expires.
    s.admin.installer.runtime_changes().override_set(&req.agent, req.tier, Duration::from_secs(req.for_secs));
    tracing::info!(agent = %crate::tool::log_safe(&req.agent), tier = %req.tier, secs = req.for_secs, "DM override set");
    let detail = serde_json::json!({"agent": req.agent, "tier": req.tier.to_string(), "for_secs": req.for_secs});
    action(&s, who, "override_set", detail);
    agent_reply(&s.host, &req.agent)
}

async fn pairings(State(s): State<AdminState>) -> Reply<super::api::PairingsReply> {
    Ok(Json(super::api::PairingsReply { pairings: s.admin.pairings.list() }))
}

async fn pair(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    body: Result<Json<super::api::PairRequest>, JsonRejection>,
) -> Reply<super::api::PairingView> {
    let Json(req) = body.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("expected {{\"agent\": NAME, \"for_secs\": N}}: {e}"),
        )
    })?;
    let max = crate::mcp::http::PAIR_MAX_TTL.as_secs();
    if !(1..=max).contains(&req.for_secs) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("a pairing code waits 1 s to {} h, not {} s", max / 3600, req.for_secs),
        ));
    }
    s.host.pipeline().budget().agent(&req.agent).map_err(|_| unknown_agent(&s.host, &req.agent))?;
    let view = s
        .admin
        .pairings
        .mint(&req.agent, Duration::from_secs(req.for_secs))
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, "capacity_exceeded", e.to_string()))?;
    tracing::info!(agent = %crate::tool::log_safe(&req.agent), id = %view.id, secs = req.for_secs, "pairing code minted");
    let detail = serde_json::json!({"agent": req.agent, "id": view.id, "for_secs": req.for_secs});
    action(&s, who, "pairing_minted", detail);
    Ok(Json(view))
}

async fn unpair(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    Path(id): Path<String>,
) -> Reply<super::api::RemovedReply> {
    if !s.admin.pairings.revoke(&id) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no pairing {} (toolhost pair --list shows them)", crate::tool::log_safe(&id)),
        ));
    }
    action(&s, who, "pairing_revoked", serde_json::json!({"id": id}));
    Ok(Json(super::api::RemovedReply { removed: id }))
}

async fn clear_override(
    State(s): State<AdminState>,
    axum::Extension(who): Who,
    body: Result<Json<ClearOverrideRequest>, JsonRejection>,
) -> Reply<AgentStatusReport> {
    let Json(req) = body.map_err(|e| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", format!("expected {{\"agent\": NAME}}: {e}"))
    })?;
    s.host.pipeline().budget().agent(&req.agent).map_err(|_| unknown_agent(&s.host, &req.agent))?;
    announce_first(&s, crate::cluster::Change::OverrideCleared { agent: req.agent.clone() }).await?;
    s.host.pipeline().budget().clear_override(&req.agent);
    s.host.pipeline().registry().touch();
    s.admin.installer.runtime_changes().override_cleared(&req.agent);
    tracing::info!(agent = %crate::tool::log_safe(&req.agent), "DM override cleared");
    action(&s, who, "override_clear", serde_json::json!({"agent": req.agent}));
    agent_reply(&s.host, &req.agent)
}

/// Records an operator action that is not a plugin's lifecycle, naming who
/// asked.
fn action(s: &AdminState, who: crate::audit::Actor, event: &str, detail: serde_json::Value) {
    crate::audit::acting(who, || {
        s.host.pipeline().audit().write_action(&crate::audit::ActionRecord {
            time: crate::audit::now_rfc3339(),
            event,
            detail: Some(detail),
            trace_id: None,
        });
    });
}
