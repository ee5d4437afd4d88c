//! The streamable HTTP front: one endpoint for the operator (`/mcp`), one
//! per agent (`/mcp/<slug>`), and what the operator's layer serves beside
//! them ([`Beside`]: the admin API at `/admin/...`, the DM's page at
//! `/ui`, `/metrics`), behind the checks every request passes, in this
//! order (1 to 3 for the admin API too; it has its own token):
//!
//! 1. `Host` must name this server (loopback names, the bound address, or a
//!    configured host): DNS-rebinding protection. Otherwise 421.
//! 2. `Origin`, when present, must be a loopback origin or a configured
//!    one, parsed strictly (`http(s)://host[:port]`, nothing more).
//!    Otherwise 403. So is a request that changes state (not `GET`, `HEAD`
//!    or `OPTIONS`) which a browser marks `Sec-Fetch-Site: cross-site`,
//!    unless its origin is a configured one.
//! 3. Each connection may make `server.connection_rate_limit` requests
//!    (generous; against floods): 429 with `Retry-After` beyond.
//! 4. Who is calling. Without `server.tokens`, only the Unix user the
//!    server runs as (or root) is served, checked from the kernel's socket
//!    table ([`super::peer`]): 403 for other local users. With tokens,
//!    `Authorization: Bearer <token>` must name one (401 otherwise); an
//!    agent token on `/mcp` is served that agent's view; `/mcp/<slug>`
//!    accepts only its own agent's token or an operator token (403
//!    otherwise). Failed authentications spend `server.auth_failure_limit`,
//!    counted for the whole server; once it is spent, a token that has not
//!    authenticated before gets 429 unchecked.
//! 5. A request opening a session is admitted while fewer than
//!    `server.max_sessions` are live (the least recently used session idle
//!    for a minute, or half the idle timeout, is closed to make room; 503
//!    otherwise). Sessions idle for
//!    `server.session_idle_secs` are closed.
//! 6. Bodies over the cap (`server.max_body_bytes`) get 413, once read to
//!    their end and discarded (up to [`DRAIN_MAX`]), so that the client
//!    hears the answer and keeps its connection and session; past that, the
//!    413 closes the connection. Malformed JSON-RPC is answered as the
//!    specification says.
//!
//! Tool calls spend their agent's `rate_limit` in [`crate::Pipeline`], whatever
//! the transport; protocol traffic spends nothing there.

use super::peer::Peer;
use crate::Pipeline;
use crate::config::ServerConfig;
use crate::rates::Buckets;
use crate::{McpFront, agent_slug};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::{SessionManager as _, SessionStore};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use sessions::{Sessions, sweep_sessions};
use shared::EndpointSessions;
pub use shared::SessionShare;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use toolhost_base::seal::same_secret;
use tower::ServiceExt as _;

/// What the operator's layer serves on the front's listener beside MCP,
/// and the config reloads the front follows. This module knows none of
/// them: the `toolhost` crate builds them.
#[derive(Default)]
pub struct Beside {
    /// The admin API, nested at `/admin` (it checks its own token; checks 1
    /// to 3 apply). `None`: `/admin/...` answers 404.
    pub admin: Option<axum::Router>,
    /// The DM's page, nested at `/ui` for the operator only.
    pub page: Option<Page>,
    /// `/metrics`, for the operator (or the holder of its admin token).
    /// `None`: not served.
    pub metrics: Option<Metrics>,
    /// Where reloaded configs come from (`None`: never reloaded).
    pub reloads: Option<Arc<dyn Reloads>>,
    /// Told when the host stops taking sessions; counts the open ones.
    pub drain: Option<Arc<Drain>>,
    /// The voice relay at `/voice/...`, given each authenticated session
    /// request. `None`: `/voice/...` answers 404.
    pub voice: Option<VoiceHandler>,
    /// Where a fleet's hosts share their tasks (`None`: each host its own).
    pub tasks: Option<Arc<dyn crate::server::TaskShare>>,
    /// Where a fleet's hosts share their sessions (`None`: a session is
    /// its host's, and another answers 404).
    pub sessions: Option<Arc<dyn SessionShare>>,
    /// The pairing codes the operator mints (`None`: this front's own).
    pub pairings: Option<Arc<Pairings>>,
}

/// A voice session's request, authenticated as the front authenticates
/// `/mcp/<agent>` (the token may come in `Authorization: Bearer` or, as the
/// Gemini SDK sends its key, `x-goog-api-key`).
pub struct VoiceRequest {
    /// The agent the session is for: the token's, or the one the path named.
    pub agent: String,
    /// The path after `/voice` and the agent's slug when it named one
    /// (`/realtime`, `/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent`).
    pub path: String,
    /// The request itself (a WebSocket upgrade, with its query).
    pub request: Request,
}

/// Serves a voice session's request (the `toolhost` crate's relay).
pub type VoiceHandler = Arc<dyn Fn(VoiceRequest) -> futures::future::BoxFuture<'static, Response> + Send + Sync>;

/// Whether `tail` (after `/voice/<slug>`) is a path the relay serves, so
/// that the first segment names an agent.
fn voice_path(tail: &str) -> bool {
    tail == "/realtime" || tail.starts_with("/ws/")
}

/// `/voice/...`: who is calling and for which agent, then the relay.
async fn voice(front: Arc<Front>, relay: Option<VoiceHandler>, peer: Peer, request: Request) -> Response {
    let Some(relay) = relay else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no voice relay here: configure voice.openai.url or voice.gemini.url",
        );
    };
    let endpoints = front.current();
    let headers = request.headers();
    let token = bearer(headers).or_else(|| headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()));
    // An OAuth token may be for the agent's own endpoint's resource.
    let named_slug = request.uri().path().strip_prefix("/voice/").and_then(|r| r.split_once('/')).map(|(s, _)| s);
    let resource =
        named_slug.filter(|s| endpoints.slugs.contains_key(*s)).map_or("/mcp".into(), |s| format!("/mcp/{s}"));
    let identity = match front.who(&endpoints, &peer, token, &resource).await {
        Ok(who) => who.map(|(who, _)| who),
        Err(r) => return r,
    };
    let rest = request.uri().path().strip_prefix("/voice").unwrap_or_default().to_string();
    let named = rest
        .strip_prefix('/')
        .and_then(|r| r.split_once('/'))
        .filter(|(_, tail)| voice_path(&format!("/{tail}")))
        .and_then(|(slug, tail)| endpoints.slugs.get(slug).map(|a| (a.clone(), format!("/{tail}"))));
    let (agent, path) = match (identity, named) {
        (Some(Identity::Agent(a)), None) => (a, rest),
        (Some(Identity::Agent(a)), Some((n, tail))) if a == n => (a, tail),
        (Some(Identity::Agent(_)), Some(_)) => {
            return error(StatusCode::FORBIDDEN, "forbidden", "this token is not allowed on this endpoint");
        }
        (Some(Identity::Operator) | None, Some((n, tail))) => (n, tail),
        (Some(Identity::Operator) | None, None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                "a voice session is one agent's: use an agent's token, or name the agent in the path (/voice/<agent>/...)",
            );
        }
    };
    if front.drain.is_draining() {
        return shutting_down();
    }
    relay(VoiceRequest { agent, path, request }).await
}

/// The DM's page, as the front serves it.
pub struct Page {
    /// Its routes.
    pub router: axum::Router,
    /// Which of its paths carry data: those need a token when tokens are
    /// set; the static files do not.
    pub is_api: fn(&str) -> bool,
}

/// What `/metrics` serves.
pub struct Metrics {
    /// Writes the body.
    pub render: Box<dyn Fn() -> String + Send + Sync>,
    /// Its content type.
    pub content_type: &'static str,
    /// A token accepted besides the operator's (the admin token).
    pub admin_token: Option<String>,
}

/// A check a reload must pass before anything changes: a config that would
/// leave the front unable to serve is refused whole.
pub type FrontCheck = Box<dyn Fn(&crate::config::Config) -> Result<(), String> + Send + Sync>;

/// Config reloads, as the front follows them: when the generation moves,
/// it makes its endpoints and tokens anew from the config in force.
pub trait Reloads: Send + Sync {
    /// Counts the reloads that put something in force.
    fn generation(&self) -> u64;
    /// Sees the generation move.
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64>;
    /// The config in force.
    fn config(&self) -> crate::config::Config;
    /// Adds a check every later reload must pass.
    fn add_check(&self, check: FrontCheck);
}

/// Why the HTTP front cannot start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The `server:` config is unusable.
    #[error("{0}")]
    Config(String),
}

type Service = StreamableHttpService<McpFront, LocalSessionManager>;

/// The audit id of the token a request presented (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenId(pub std::sync::Arc<str>);

/// Who a request acts as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Identity {
    Operator,
    Agent(String),
}

/// Each endpoint's rmcp service, its sessions, and the front its sessions
/// are made from (its turns' room, its tasks).
type Services = HashMap<Identity, (Service, Arc<LocalSessionManager>, McpFront)>;
type Tokens = Vec<(Vec<u8>, Identity, TokenId)>;
type MakeService =
    Box<dyn Fn(Option<String>) -> Result<(Service, Arc<LocalSessionManager>, McpFront), HttpError> + Send + Sync>;

/// The endpoints and tokens of one config generation: swapped whole when a
/// config reload adds or removes agents or changes `server.tokens`.
struct Endpoints {
    /// The reload generation they were made for.
    generation: u64,
    services: Services,
    slugs: HashMap<String, String>,
    /// Each token's secret, who it acts as, and its audit id.
    tokens: Tokens,
    /// Tokens (by index in `tokens`) that have authenticated: they pass
    /// while failed authentications are throttled. Swapped with `tokens`,
    /// so that an index never names another list's token.
    authenticated: Arc<Mutex<HashSet<usize>>>,
    /// `server.loopback_operator`, or its default.
    loopback_operator: bool,
    /// `server.oauth`, with the issuer's keys it has fetched.
    oauth: Option<Arc<ResourceServer>>,
}

struct Front {
    host: Arc<Pipeline>,
    endpoints: arc_swap::ArcSwap<Endpoints>,
    /// Makes an endpoint's service (a new agent's, after a reload).
    make_service: MakeService,
    /// Where a reloaded config comes from (`None`: never reloaded).
    reloader: Option<Arc<dyn Reloads>>,
    /// Which of the DM's page's paths carry data.
    page_api: fn(&str) -> bool,
    /// One resync at a time.
    resyncing: Mutex<()>,
    /// Failed authentications by source network ([`source_network`]).
    auth_failures: Buckets<IpAddr>,
    /// The Unix user served without tokens (besides root).
    own_uid: u32,
    hosts: Vec<String>,
    origins: Vec<String>,
    max_body: usize,
    /// Bytes of request bodies held at once (`server.max_bodies_bytes`).
    bodies: Arc<tokio::sync::Semaphore>,
    bodies_max: usize,
    /// `server.body_timeout_secs`.
    body_timeout: Duration,
    connections: Buckets<SocketAddr>,
    sessions: Sessions,
    drain: Arc<Drain>,
    pairings: Arc<Pairings>,
}

/// Refuses to serve beyond loopback without tokens: checked before binding
/// (by the CLI) and again by [`router`].
pub fn check_exposure(addr: SocketAddr, cfg: &ServerConfig) -> Result<(), HttpError> {
    if !addr.ip().is_loopback() && cfg.tokens.is_empty() && cfg.oauth.is_none() {
        return Err(HttpError::Config(format!(
            "refusing to serve on {addr}: beyond loopback every client must authenticate; add `server.tokens` or `server.oauth` to the config"
        )));
    }
    Ok(())
}

/// Builds the router for `local` (the address actually bound).
pub fn router(
    host: Arc<Pipeline>,
    cfg: &ServerConfig,
    local: SocketAddr,
    beside: Beside,
) -> Result<axum::Router, HttpError> {
    check_exposure(local, cfg)?;
    let tokens = parse_tokens(cfg, |a| host.budget().agent(a).is_ok())?;
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]", "::1"].iter().map(|s| s.to_string()).collect();
    hosts.push(local.ip().to_string());
    if let IpAddr::V6(v6) = local.ip() {
        hosts.push(format!("[{v6}]"));
    }
    hosts.extend(cfg.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));

    let idle = Duration::from_secs(cfg.session_idle_secs.max(1));
    let max_body = cfg.max_body_bytes;
    let session_share = beside.sessions.clone();
    let rmcp_config = move |endpoint: &str| {
        let mut c = StreamableHttpServerConfig::default();
        // Our own checks run first and are stricter; let rmcp's pass what they pass.
        c.allowed_hosts = Vec::new();
        c.max_request_body_bytes = max_body.max(1);
        c.session_store = session_share.clone().map(|share| {
            Arc::new(EndpointSessions { share, endpoint: endpoint.to_string(), idle }) as Arc<dyn SessionStore>
        });
        c
    };
    let service_host = host.clone();
    let task_share = beside.tasks.clone();
    let make_service: MakeService = Box::new(move |agent: Option<String>| {
        let front = McpFront::new(service_host.clone(), agent).map_err(|e| HttpError::Config(e.to_string()))?;
        let front = match &task_share {
            Some(share) => front.with_task_share(share.clone()),
            None => front,
        };
        let mut manager = LocalSessionManager::default();
        // rmcp's worker quits after this long idle too; the sweeper below
        // removes the session from the manager's map.
        manager.session_config.keep_alive = Some(idle);
        let manager = Arc::new(manager);
        let endpoint = front.clone();
        let config = rmcp_config(front.agent().unwrap_or_default());
        Ok((StreamableHttpService::new(move || Ok(front.session()), manager.clone(), config), manager, endpoint))
    });
    let mut services = HashMap::new();
    let mut slugs = HashMap::new();
    services.insert(Identity::Operator, make_service(None)?);
    for a in host.budget().agents() {
        services.insert(Identity::Agent(a.name.clone()), make_service(Some(a.name.clone()))?);
        slugs.insert(agent_slug(&a.name), a.name.clone());
    }
    let Beside {
        admin,
        page,
        metrics: scrape,
        reloads: reloader,
        drain,
        voice: relay,
        tasks: _,
        sessions: share,
        pairings,
    } = beside;
    if let Some(r) = &reloader {
        // A reload that would leave this front unable to serve is refused whole.
        r.add_check(Box::new(move |cfg: &crate::config::Config| {
            check_exposure(local, &cfg.server).map_err(|e| e.to_string())?;
            parse_tokens(&cfg.server, |a| cfg.npcs.iter().any(|n| n.name == a)).map_err(|e| e.to_string())?;
            Ok(())
        }));
    }
    let front = Arc::new(Front {
        host,
        endpoints: arc_swap::ArcSwap::from_pointee(Endpoints {
            generation: reloader.as_ref().map_or(0, |r| r.generation()),
            services,
            slugs,
            tokens,
            authenticated: Arc::default(),
            loopback_operator: cfg.loopback_is_operator(),
            oauth: cfg.oauth.clone().map(|o| Arc::new(ResourceServer::new(o))),
        }),
        make_service,
        reloader,
        page_api: page.as_ref().map_or(|_| false, |p| p.is_api),
        resyncing: Mutex::new(()),
        auth_failures: Buckets::new(cfg.auth_failure_limit),
        own_uid: rustix::process::geteuid().as_raw(),
        hosts,
        origins: cfg.allowed_origins.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect(),
        max_body: cfg.max_body_bytes,
        bodies: Arc::new(tokio::sync::Semaphore::new(
            cfg.max_bodies_bytes.clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
        )),
        bodies_max: cfg.max_bodies_bytes.max(1),
        body_timeout: Duration::from_secs(cfg.body_timeout_secs.max(1)),
        connections: Buckets::new(cfg.connection_rate_limit),
        sessions: Sessions {
            max: cfg.max_sessions.max(1),
            idle,
            evictable_after: (idle / 2).min(Duration::from_secs(60)),
            live: Mutex::new(HashMap::new()),
            shared_at: Mutex::new(HashMap::new()),
            share,
            fresh: Mutex::default(),
            ids: Arc::default(),
        },
        drain: drain.unwrap_or_default(),
        pairings: pairings.unwrap_or_default(),
    });
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(sweep_sessions(Arc::downgrade(&front)));
    }
    let beyond_loopback = cfg.metrics_beyond_loopback;
    let mut app = match admin {
        Some(admin) => axum::Router::new().nest("/admin", admin),
        None => axum::Router::new().route(
            "/admin/{*rest}",
            axum::routing::any(|| async { error(StatusCode::NOT_FOUND, "not_found", "the admin API is not enabled") }),
        ),
    };
    if let Some(page) = page {
        app = app
            // The DM's page: the operator only (see `operator_only`).
            .nest("/ui", page.router.layer(axum::middleware::from_fn_with_state(front.clone(), operator_only)))
            // A browser pointed at the server, or at `/ui/`, finds the page.
            .route("/", axum::routing::get(|| async { axum::response::Redirect::to("/ui") }))
            .route("/ui/", axum::routing::get(|| async { axum::response::Redirect::to("/ui") }));
    }
    if let Some(scrape) = scrape {
        let (metrics_front, scrape) = (front.clone(), Arc::new(scrape));
        app = app.route(
            "/metrics",
            axum::routing::get(move |ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap| {
                let (front, scrape) = (metrics_front.clone(), scrape.clone());
                async move { metrics(&front, &peer, &headers, &scrape, beyond_loopback).await }
            }),
        );
    }
    // Protected Resource Metadata (RFC 9728), for every client.
    let prm = front.clone();
    let prm_path = front.clone();
    app = app
        .route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(move || {
                let front = prm.clone();
                async move { door::protected_resource(&front.current(), "") }
            }),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*rest}",
            axum::routing::get(move |axum::extract::Path(rest): axum::extract::Path<String>| {
                let front = prm_path.clone();
                async move { door::protected_resource(&front.current(), &format!("/{rest}")) }
            }),
        );
    // Probes for a load balancer or a supervisor: no token, and nothing
    // said beyond the status (`toolhost status` has the details).
    let ready = front.clone();
    // `/readyz`: able to serve something (loaded, not stopping), also while
    // the memory store is unreachable: tools that need no database go on.
    // `/readyz?strict=1` also asks for every dependency.
    app = app.route("/healthz", axum::routing::get(|| async { "ok\n" })).route(
        "/readyz",
        axum::routing::get(move |uri: axum::http::Uri| {
            let front = ready.clone();
            async move {
                let strict = uri.query().is_some_and(|q| q.split('&').any(|p| p == "strict=1" || p == "strict=true"));
                let readiness = front.host.readiness();
                if readiness.is_ready() && (!strict || readiness.dependencies_reachable()) && !front.drain.is_draining()
                {
                    (StatusCode::OK, "ready\n")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                }
            }
        }),
    );
    let voice_front = front.clone();
    app = app.route(
        "/voice/{*rest}",
        axum::routing::any(move |ConnectInfo(peer): ConnectInfo<Peer>, request: Request| {
            let (front, relay) = (voice_front.clone(), relay.clone());
            async move { voice(front, relay, peer, request).await }
        }),
    );
    let mcp = front.clone();
    Ok(app
        .fallback(move |ConnectInfo(peer): ConnectInfo<Peer>, request: Request| {
            let front = mcp.clone();
            async move { handle(front, peer, request).await }
        })
        .layer(axum::middleware::from_fn_with_state(front, guard)))
}

/// The endpoints `router` serves, as (who, path) pairs, for start-up banners.
pub fn endpoints(host: &Pipeline) -> Vec<(String, String)> {
    let mut out = vec![("(operator)".to_string(), "/mcp".to_string())];
    for a in host.budget().agents() {
        out.push((a.name.clone(), format!("/mcp/{}", agent_slug(&a.name))));
    }
    out
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(super::reply::ErrorReply::new(code, message))).into_response()
}

impl Front {
    /// The endpoints and tokens in force, made anew first when a config
    /// reload changed the agents or the tokens.
    fn current(&self) -> Arc<Endpoints> {
        let now = self.endpoints.load_full();
        match &self.reloader {
            Some(r) if r.generation() != now.generation => self.resync(r.as_ref()),
            _ => now,
        }
    }

    /// Endpoints for the reloaded config: a new agent gets its endpoint,
    /// a removed one's endpoint answers 404 and its sessions are closed;
    /// the others keep their service and sessions.
    fn resync(&self, reloader: &dyn Reloads) -> Arc<Endpoints> {
        let _one = self.resyncing.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.endpoints.load_full();
        let generation = reloader.generation();
        if now.generation == generation {
            return now;
        }
        let cfg = reloader.config();
        let agents = self.host.budget().agents();
        // Checked before the reload went in; should it fail anyway, the
        // tokens in force stay.
        let tokens = match parse_tokens(&cfg.server, |a| agents.iter().any(|p| p.name == a)) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("server.tokens not reloaded: {e}");
                now.tokens.clone()
            }
        };
        let mut services = Services::new();
        let mut slugs = HashMap::new();
        for who in std::iter::once(Identity::Operator).chain(agents.iter().map(|a| Identity::Agent(a.name.clone()))) {
            let made = match now.services.get(&who) {
                Some(s) => Ok(s.clone()),
                None => (self.make_service)(match &who {
                    Identity::Agent(a) => Some(a.clone()),
                    Identity::Operator => None,
                }),
            };
            match made {
                Ok(s) => {
                    if let Identity::Agent(a) = &who {
                        slugs.insert(agent_slug(a), a.clone());
                    }
                    services.insert(who, s);
                }
                Err(e) => tracing::error!("no endpoint for {who:?}: {e}"),
            }
        }
        // Sessions of agents that are gone are closed.
        let gone: Vec<(String, Arc<LocalSessionManager>)> = {
            let mut live = self.sessions.lock();
            let ids: Vec<(String, Identity)> = live
                .iter()
                .filter(|(_, (who, _))| !services.contains_key(who))
                .map(|(id, (who, _))| (id.clone(), who.clone()))
                .collect();
            ids.into_iter()
                .filter_map(|(id, who)| {
                    live.remove(&id);
                    now.services.get(&who).map(|(_, m, _)| (id, m.clone()))
                })
                .collect()
        };
        if !gone.is_empty()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                for (id, manager) in gone {
                    tracing::info!(session = %id, "closing a session of an agent the reloaded config removed");
                    let _ = manager.close_session(&id.into()).await;
                }
            });
        }
        let authenticated = if tokens == now.tokens { now.authenticated.clone() } else { Arc::default() };
        // The issuer's keys are kept while `server.oauth` stays as it was.
        let oauth = match (&now.oauth, &cfg.server.oauth) {
            (Some(rs), Some(c)) if rs.cfg == *c => Some(rs.clone()),
            (_, c) => c.clone().map(|c| Arc::new(ResourceServer::new(c))),
        };
        let loopback_operator = cfg.server.loopback_is_operator();
        let next = Arc::new(Endpoints { generation, services, slugs, tokens, authenticated, loopback_operator, oauth });
        self.endpoints.store(next.clone());
        next
    }
}

/// The MCP endpoints: who is calling, sessions, body cap, then rmcp.
async fn handle(front: Arc<Front>, peer: Peer, request: Request) -> Response {
    // What the drain waits for: a request doing work (not a session's
    // standing event stream).
    let busy = (request.method() != axum::http::Method::GET).then(|| Busy::new(&front.drain));
    if front.drain.closed.load(std::sync::atomic::Ordering::Acquire) {
        return shutting_down();
    }
    let response = answer(front, peer, request).await;
    match busy {
        Some(b) => b.hold(response),
        None => response,
    }
}

async fn answer(front: Arc<Front>, peer: Peer, request: Request) -> Response {
    let headers = request.headers();
    let path = request.uri().path().to_string();
    // One snapshot for the whole request: its tokens and its endpoints
    // come from the same reload.
    let endpoints = front.current();
    let resource = path.strip_suffix("/turn").filter(|p| p.starts_with("/mcp/")).unwrap_or(&path);
    // `/mcp/pair/<code>`: the code stands for a token, once.
    let code = path.strip_prefix("/mcp/pair/").map(|c| c.trim_end_matches('/').to_ascii_uppercase());
    let post = request.method() == axum::http::Method::POST;
    let (identity, token_id, claim, path) = match &code {
        Some(code) => {
            match front.paired(&peer, code, headers.get("mcp-session-id").and_then(|v| v.to_str().ok()), post) {
                Ok((who, id, path, claim)) => (Some(who), Some(id), claim, path),
                Err(r) => return r,
            }
        }
        None => match front.who(&endpoints, &peer, bearer(headers), resource).await {
            Ok(Some((who, id))) => (Some(who), Some(id), None, path.clone()),
            Ok(None) => (None, None, None, path.clone()),
            Err(r) => return r,
        },
    };
    // `POST /mcp/<slug>/turn`: a turn started from outside a session.
    let turn_slug = path.trim_end_matches('/').strip_prefix("/mcp/").and_then(|p| p.strip_suffix("/turn"));
    let target = match turn_slug.unwrap_or(path.trim_end_matches('/')) {
        "/mcp" => identity.clone().unwrap_or(Identity::Operator),
        slug if turn_slug.is_some() => match endpoints.slugs.get(slug) {
            Some(agent) => Identity::Agent(agent.clone()),
            None => return error(StatusCode::NOT_FOUND, "not_found", &format!("no endpoint {path}")),
        },
        p => match p.strip_prefix("/mcp/").and_then(|slug| endpoints.slugs.get(slug)) {
            Some(agent) => Identity::Agent(agent.clone()),
            None => return error(StatusCode::NOT_FOUND, "not_found", &format!("no endpoint {path}")),
        },
    };
    if let Some(who) = &identity
        && *who != Identity::Operator
        && *who != target
    {
        return error(StatusCode::FORBIDDEN, "forbidden", "this token is not allowed on this endpoint");
    }
    if let Some(slug) = turn_slug {
        return turn::post(&front, &endpoints, slug, request).await;
    }
    let Some((service, manager, endpoint)) = endpoints.services.get(&target) else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such agent");
    };
    let session = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let is_delete = request.method() == axum::http::Method::DELETE;
    let is_get = request.method() == axum::http::Method::GET;
    // rmcp answers a DELETE of a session it never had as a success; the
    // reference SDKs answer 404, as for any other request naming it.
    if is_delete
        && let Some(id) = &session
        && !manager.has_session(&id.as_str().into()).await.unwrap_or(false)
        && !front.sessions.shared(&target, id).await
    {
        return invalid_request(StatusCode::NOT_FOUND, "Not Found: Session not found");
    }
    // A 2026-07-28 request carries all it needs and opens no session.
    let stateless = request
        .headers()
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() >= "2026-07-28");
    let opens_session = session.is_none() && request.method() == axum::http::Method::POST && !stateless;
    if opens_session && front.drain.is_draining() {
        return shutting_down();
    }
    let mut restoring = false;
    match &session {
        Some(id) => match front.sessions.continuing(id, &target, manager, &endpoints.services).await {
            Ok(r) => restoring = r,
            Err(r) => return r,
        },
        None if opens_session => {
            if let Err(r) = front.sessions.admit(&target, &endpoints.services).await {
                return r;
            }
        }
        None => {}
    }
    let request = match limit_body(&front, request, front.max_body).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    // A 2025-11-25 session's task request: answered here (rmcp knows only
    // 2026-07-28's tasks).
    let mut request = match answer_legacy(request, session.as_deref(), manager, endpoint, token_id.as_ref()).await {
        Ok(answered) => return answered,
        Err(request) => request,
    };
    // rmcp hands the request's parts to the handler, which puts the token's
    // id in the audit trail.
    if let Some(id) = token_id {
        request.extensions_mut().insert(id);
    }
    front.sessions.first_stream(&mut request, session.as_deref(), restoring);
    let claimed = match front.sessions.claim(session.as_deref(), &request) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let declares = request.extensions().get::<BodyBytes>().is_some_and(|b| declares_tasks(&b.0, session.is_some()));
    let response = match service.clone().oneshot(request).await {
        // A terminated session: 200, as the reference SDKs answer (rmcp's
        // 202 reads as a failure to the Python client).
        Ok(r) if is_delete && r.status() == StatusCode::ACCEPTED => {
            let (mut parts, _) = r.into_parts();
            parts.status = StatusCode::OK;
            Response::from_parts(parts, Body::empty())
        }
        Ok(r) if r.status().is_client_error() && !is_json_or_sse(r.headers()) => {
            // rmcp's refusals (no or unknown session, bad protocol version,
            // Accept, Content-Type) are plain text: give them the JSON-RPC
            // error body the reference SDKs send, with the same status.
            let status = r.status();
            let text = axum::body::to_bytes(Body::new(r.into_body()), 4096).await.unwrap_or_default();
            invalid_request(status, String::from_utf8_lossy(&text).trim())
        }
        Ok(r) if declares && r.status().is_success() => declare_tasks(r.map(Body::new)).await,
        Ok(r) => r.map(Body::new),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", &e.to_string()),
    };
    let mut response = response;
    // A pairing code's first use: used only when it succeeded.
    if let Some(claim) = claim {
        let opened = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        let handed = claim.settle(response.status().is_success(), opened.as_deref());
        if let Some(t) = handed.and_then(|t| HeaderValue::from_str(&t).ok()) {
            response.headers_mut().insert(pair::TOKEN_HEADER, t);
        }
    }
    if opens_session && let Some(id) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        front.sessions.opened(id, target);
    } else if let Some(id) = &session
        && response.status().is_success()
        && !is_delete
    {
        let restored = restoring && manager.has_session(&id.as_str().into()).await.unwrap_or(false);
        front.sessions.used(id, &target, restored, manager, is_get);
    } else if is_delete
        && response.status().is_success()
        && let Some(id) = &session
    {
        front.sessions.closed(id);
    } else if response.status() == StatusCode::NOT_FOUND
        && let Some(id) = &session
        && !manager.has_session(&id.as_str().into()).await.unwrap_or(true)
    {
        front.sessions.closed(id);
    }
    front.drain.open.store(front.sessions.lock().len(), std::sync::atomic::Ordering::Release);
    if let Some(c) = claimed { hold(response, c) } else { response }
}

/// `/metrics`, for the operator only: from loopback (unless
/// `server.metrics_beyond_loopback`), then the admin token or whatever the
/// operator's `/mcp` endpoint accepts (an operator token; without tokens,
/// the server's own Unix user). Agents' tokens get 403.
async fn metrics(front: &Front, peer: &Peer, headers: &HeaderMap, scrape: &Metrics, beyond_loopback: bool) -> Response {
    if !peer.addr.ip().is_loopback() && !beyond_loopback {
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "/metrics is served to loopback clients only (set server.metrics_beyond_loopback to scrape from elsewhere)",
        );
    }
    let token = bearer(headers);
    let admin =
        matches!((&scrape.admin_token, token), (Some(admin), Some(t)) if same_secret(t.as_bytes(), admin.as_bytes()));
    if !admin {
        match front.who(&front.current(), peer, token, "/mcp").await {
            Ok(None) | Ok(Some((Identity::Operator, _))) => {}
            Ok(Some(_)) => return error(StatusCode::FORBIDDEN, "forbidden", "/metrics is for the operator"),
            Err(r) => return r,
        }
    }
    ([(header::CONTENT_TYPE, HeaderValue::from_static(scrape.content_type))], (scrape.render)()).into_response()
}

mod body;
mod checks;
mod door;
mod drain;
mod pair;
mod sessions;
mod shared;
mod tasks;
#[cfg(test)]
mod tests;
mod turn;

pub use body::DRAIN_MAX;
use body::*;
pub use checks::bearer;
use checks::*;
use door::ResourceServer;
pub use drain::Drain;
use drain::*;
pub use pair::{MAX_TTL as PAIR_MAX_TTL, PairError, PairingView, Pairings};
use tasks::*;
