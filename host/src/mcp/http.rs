//! The streamable HTTP front: one endpoint for the operator (`/mcp`), one
//! per agent (`/mcp/<slug>`), and the operator's admin API (`/admin/...`,
//! see [`crate::admin`]), behind the checks every request passes, in this
//! order (1 and 2 for the admin API too; it has its own token):
//!
//! 1. `Host` must name this server (loopback names, the bound address, or a
//!    configured host): DNS-rebinding protection. Otherwise 403.
//! 2. `Origin`, when present, must be a loopback origin or a configured
//!    one. Otherwise 403.
//! 3. With tokens configured, `Authorization: Bearer <token>` must name one
//!    (401 otherwise). The token decides who the caller is: an agent token
//!    on `/mcp` is served that agent's view; `/mcp/<slug>` accepts only its
//!    own agent's token or an operator token (403 otherwise).
//! 4. A token bucket per client (its token, or its address) limits the
//!    request rate: 429 with `Retry-After` and a JSON-RPC error whose
//!    `data.code` is `capacity_exceeded`.
//! 5. Bodies over the cap get 413 before they are read in full.

use crate::Host;
use crate::config::ServerConfig;
use crate::mcp::{McpFront, agent_slug};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tower::ServiceExt as _;

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

struct Front {
    host: Arc<Host>,
    services: HashMap<Identity, Service>,
    slugs: HashMap<String, String>,
    /// Each token's secret, who it acts as, and its audit id.
    tokens: Vec<(Vec<u8>, Identity, TokenId)>,
    hosts: Vec<String>,
    origins: Vec<String>,
    max_body: usize,
    limiter: RateLimiter,
}

/// Refuses to serve beyond loopback without tokens: checked before binding
/// (by the CLI) and again by [`router`].
pub fn check_exposure(addr: SocketAddr, cfg: &ServerConfig) -> Result<(), HttpError> {
    if !addr.ip().is_loopback() && cfg.tokens.is_empty() {
        return Err(HttpError::Config(format!(
            "refusing to serve on {addr}: beyond loopback every client must authenticate; add `server.tokens` to the config"
        )));
    }
    Ok(())
}

/// Builds the router for `local` (the address actually bound).
pub fn router(
    host: Arc<Host>,
    cfg: &ServerConfig,
    local: SocketAddr,
    admin: Option<crate::admin::Admin>,
) -> Result<axum::Router, HttpError> {
    check_exposure(local, cfg)?;
    let mut tokens = Vec::new();
    for (i, t) in cfg.tokens.iter().enumerate() {
        if t.token.len() < 16 {
            return Err(HttpError::Config(format!("server.tokens[{i}].token: use at least 16 characters")));
        }
        if tokens.iter().any(|(k, _, _)| k == t.token.as_bytes()) {
            return Err(HttpError::Config(format!("server.tokens[{i}].token: the same token is listed twice")));
        }
        let who = match &t.agent {
            None => Identity::Operator,
            Some(a) => {
                host.budget().agent(a).map_err(|_| {
                    HttpError::Config(format!("server.tokens[{i}].agent: no agent named {a:?} in `npcs`"))
                })?;
                Identity::Agent(a.clone())
            }
        };
        tokens.push((t.token.as_bytes().to_vec(), who, TokenId(t.audit_id().into())));
    }
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]", "::1"].iter().map(|s| s.to_string()).collect();
    hosts.push(local.ip().to_string());
    if let IpAddr::V6(v6) = local.ip() {
        hosts.push(format!("[{v6}]"));
    }
    hosts.extend(cfg.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));

    let rmcp_config = || {
        let mut c = StreamableHttpServerConfig::default();
        // Our own checks run first and are stricter; let rmcp's pass what they pass.
        c.allowed_hosts = Vec::new();
        c.max_request_body_bytes = cfg.max_body_bytes.max(1);
        c
    };
    let service_for = |agent: Option<String>| -> Result<Service, HttpError> {
        let front = McpFront::new(host.clone(), agent).map_err(|e| HttpError::Config(e.to_string()))?;
        Ok(StreamableHttpService::new(
            move || Ok(front.session()),
            LocalSessionManager::default().into(),
            rmcp_config(),
        ))
    };
    let mut services = HashMap::new();
    let mut slugs = HashMap::new();
    services.insert(Identity::Operator, service_for(None)?);
    for a in host.budget().agents() {
        services.insert(Identity::Agent(a.name.clone()), service_for(Some(a.name.clone()))?);
        slugs.insert(agent_slug(&a.name), a.name.clone());
    }
    let front = Arc::new(Front {
        host,
        services,
        slugs,
        tokens,
        hosts,
        origins: cfg.allowed_origins.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect(),
        max_body: cfg.max_body_bytes,
        limiter: RateLimiter::new(cfg.rate_limit.per_minute, cfg.rate_limit.burst),
    });
    let app = match admin {
        Some(admin) => axum::Router::new().nest("/admin", crate::admin::router(front.host.clone(), admin)),
        None => axum::Router::new().route(
            "/admin/{*rest}",
            axum::routing::any(|| async { error(StatusCode::NOT_FOUND, "not_found", "the admin API is not enabled") }),
        ),
    };
    let mcp = front.clone();
    Ok(app
        .fallback(move |ConnectInfo(peer): ConnectInfo<SocketAddr>, request: Request| {
            let front = mcp.clone();
            async move { handle(front, peer, request).await }
        })
        .layer(axum::middleware::from_fn_with_state(front, guard)))
}

/// The endpoints `router` serves, as (who, path) pairs, for start-up banners.
pub fn endpoints(host: &Host) -> Vec<(String, String)> {
    let mut out = vec![("(operator)".to_string(), "/mcp".to_string())];
    for a in host.budget().agents() {
        out.push((a.name.clone(), format!("/mcp/{}", agent_slug(&a.name))));
    }
    out
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(crate::admin::api::ErrorReply::new(code, message))).into_response()
}

fn host_of(headers: &HeaderMap) -> Option<String> {
    let h = headers.get(header::HOST)?.to_str().ok()?.to_ascii_lowercase();
    // Strip the port: `name:port`, `[v6]:port`.
    Some(match h.rfind(':') {
        Some(i) if !h[i..].contains(']') && (h.starts_with('[') || h.matches(':').count() == 1) => h[..i].to_string(),
        _ => h,
    })
}

/// True for `scheme://host[:port]` origins whose host is loopback, or that
/// match a configured entry (`:*` matches any port).
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim_end_matches('/').to_ascii_lowercase();
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    if scheme != "http" && scheme != "https" {
        return false;
    }
    let hostpart = match rest.rfind(':') {
        Some(i) if !rest[i..].contains(']') => &rest[..i],
        _ => rest,
    };
    if matches!(hostpart, "localhost" | "127.0.0.1" | "[::1]") {
        return true;
    }
    allowed.iter().any(|a| match a.strip_suffix(":*") {
        Some(prefix) => origin == prefix || origin.starts_with(&format!("{prefix}:")),
        None => &origin == a,
    })
}

/// Compares secrets in time independent of where they differ.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Checks every request, the admin API's included: DNS-rebinding (`Host`)
/// and cross-origin (`Origin`) protection.
async fn guard(State(front): State<Arc<Front>>, request: Request, next: axum::middleware::Next) -> Response {
    let headers = request.headers();
    match host_of(headers) {
        Some(h) if front.hosts.contains(&h) => {}
        // 421, as the reference SDK answers: this server is not the one
        // that name points at (a DNS-rebinding attempt, or a misroute).
        Some(h) => {
            return error(StatusCode::MISDIRECTED_REQUEST, "forbidden", &format!("Host {h:?} is not served here"));
        }
        None => return error(StatusCode::BAD_REQUEST, "invalid_input", "a Host header is required"),
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let o = origin.to_str().unwrap_or("");
        if !origin_allowed(o, &front.origins) {
            return error(StatusCode::FORBIDDEN, "forbidden", &format!("Origin {o:?} is not allowed"));
        }
    }
    next.run(request).await
}

/// The MCP endpoints: who is calling, rate limit, body cap, then rmcp.
async fn handle(front: Arc<Front>, peer: SocketAddr, request: Request) -> Response {
    let headers = request.headers();
    let path = request.uri().path().to_string();
    let token = bearer(headers).map(str::to_string);
    let identity = if front.tokens.is_empty() {
        None
    } else {
        let Some(t) = token.as_deref() else {
            return unauthorized("this server needs `Authorization: Bearer <token>`");
        };
        match front.tokens.iter().find(|(k, _, _)| same_secret(k, t.as_bytes())) {
            Some((_, who, id)) => Some((who.clone(), id.clone())),
            None => return unauthorized("unknown token"),
        }
    };
    let (identity, token_id) = match identity {
        Some((who, id)) => (Some(who), Some(id)),
        None => (None, None),
    };
    let target = match path.trim_end_matches('/') {
        "/mcp" => identity.clone().unwrap_or(Identity::Operator),
        p => match p.strip_prefix("/mcp/").and_then(|slug| front.slugs.get(slug)) {
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
    let key = token.unwrap_or_else(|| peer.ip().to_string());
    if let Err(wait) = front.limiter.check(&key) {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        let mut r = error(
            StatusCode::TOO_MANY_REQUESTS,
            "capacity_exceeded",
            &format!("capacity exceeded: too many requests; retry after {secs} s"),
        );
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return r;
    }
    let mut request = match limit_body(request, front.max_body).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let is_delete = request.method() == axum::http::Method::DELETE;
    // rmcp hands the request's parts to the handler, which puts the token's
    // id in the audit trail.
    if let Some(id) = token_id {
        request.extensions_mut().insert(id);
    }
    let Some(service) = front.services.get(&target) else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such agent");
    };
    match service.clone().oneshot(request).await {
        // A terminated session: 200, as the reference SDKs answer (rmcp's
        // 202 reads as a failure to the Python client).
        Ok(r) if is_delete && r.status() == StatusCode::ACCEPTED => {
            let (mut parts, _) = r.into_parts();
            parts.status = StatusCode::OK;
            Response::from_parts(parts, Body::empty())
        }
        Ok(r) => r.map(Body::new),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", &e.to_string()),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut r = error(StatusCode::UNAUTHORIZED, "forbidden", message);
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"toolhost\""));
    r
}

/// Reads the body up to `max` bytes; 413 beyond.
async fn limit_body(request: Request, max: usize) -> Result<Request, Response> {
    let too_large =
        || error(StatusCode::PAYLOAD_TOO_LARGE, "invalid_input", &format!("request body over the {max} byte limit"));
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, max).await.map_err(|_| too_large())?;
    if parts.method == axum::http::Method::POST
        && let Some(refusal) = refuse_malformed(&bytes)
    {
        return Err(refusal);
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The answer to a POST body that is not a well-formed JSON-RPC message,
/// before rmcp reads it: 400 for invalid JSON (-32700) or an invalid
/// request (-32600), 200 with -32602 for invalid `tools/call` params, as the
/// specification and the reference SDKs answer.
fn refuse_malformed(body: &[u8]) -> Option<Response> {
    let r = match super::jsonrpc::check_message(body) {
        Ok(super::jsonrpc::Verdict::Pass) => return None,
        // A notification gets no answer, only the 202 that says it arrived.
        Ok(super::jsonrpc::Verdict::Drop) => return Some(StatusCode::ACCEPTED.into_response()),
        Err(r) => r,
    };
    let status = if r.code == super::jsonrpc::INVALID_PARAMS { StatusCode::OK } else { StatusCode::BAD_REQUEST };
    Some((status, axum::Json(r.response)).into_response())
}

/// Token buckets by client key.
struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    fn new(per_minute: u32, burst: u32) -> RateLimiter {
        RateLimiter {
            per_second: f64::from(per_minute) / 60.0,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `key`, or says how long until one is free.
    fn check(&self, key: &str) -> Result<(), Duration> {
        if self.per_second <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() > 10_000 {
            // Forget clients whose buckets have refilled.
            let full = Duration::from_secs_f64(self.burst / self.per_second);
            buckets.retain(|_, (_, at)| now.duration_since(*at) < full);
        }
        let (tokens, at) = buckets.entry(key.to_string()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.per_second))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let allowed = vec!["https://dm.example.com".to_string(), "http://tools.lan:*".to_string()];
        assert!(origin_allowed("http://localhost:6274", &allowed));
        assert!(origin_allowed("http://127.0.0.1", &allowed));
        assert!(origin_allowed("https://dm.example.com", &allowed));
        assert!(origin_allowed("http://tools.lan:8080", &allowed));
        assert!(!origin_allowed("https://dm.example.com:444", &allowed));
        assert!(!origin_allowed("http://evil.example", &allowed));
        assert!(!origin_allowed("http://localhost.evil.example", &allowed));
        assert!(!origin_allowed("null", &allowed));
    }

    #[test]
    fn hosts() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8722"));
        assert_eq!(host_of(&h).as_deref(), Some("127.0.0.1"));
        h.insert(header::HOST, HeaderValue::from_static("[::1]:8722"));
        assert_eq!(host_of(&h).as_deref(), Some("[::1]"));
        h.insert(header::HOST, HeaderValue::from_static("Evil.Example"));
        assert_eq!(host_of(&h).as_deref(), Some("evil.example"));
    }

    #[test]
    fn rate_limit_allows_a_burst_then_refills() {
        let l = RateLimiter::new(60, 10);
        for _ in 0..10 {
            assert!(l.check("a").is_ok());
        }
        let wait = l.check("a").unwrap_err();
        assert!(wait <= Duration::from_secs(1) && wait > Duration::from_millis(900), "{wait:?}");
        assert!(l.check("b").is_ok(), "buckets are per client");
        assert!(RateLimiter::new(0, 0).check("x").is_ok(), "0 turns the limit off");
    }

    #[test]
    fn secrets_compare() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }
}
