//! The checks every request passes: DNS rebinding (`Host`), `Origin`,
//! tokens and the operator's endpoints.

use super::*;

pub(super) fn host_of(headers: &HeaderMap) -> Option<String> {
    let h = headers.get(header::HOST)?.to_str().ok()?.to_ascii_lowercase();
    // Strip the port: `name:port`, `[v6]:port`.
    Some(match h.rfind(':') {
        Some(i) if !h[i..].contains(']') && (h.starts_with('[') || h.matches(':').count() == 1) => h[..i].to_string(),
        _ => h,
    })
}

/// An `Origin` value parsed strictly: `http` or `https`, a host, an
/// optional port, and nothing else (no user or password, path, query or
/// fragment). `None` for anything else, `null` included.
pub(super) fn parse_origin(origin: &str) -> Option<url::Url> {
    let u = url::Url::parse(origin.trim()).ok()?;
    let plain = matches!(u.scheme(), "http" | "https")
        && u.host().is_some()
        && u.username().is_empty()
        && u.password().is_none()
        && u.path() == "/"
        && u.query().is_none()
        && u.fragment().is_none();
    plain.then_some(u)
}

/// True for origins ([`parse_origin`]) whose host is loopback, or that
/// match a configured entry (`:*` matches any port); default ports are
/// the same origin written either way.
pub(super) fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let Some(u) = parse_origin(origin) else { return false };
    let loopback = match u.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
        Some(url::Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
        None => false,
    };
    loopback || configured_origin(&u, allowed)
}

/// Whether the parsed origin `u` is one of the configured `allowed`.
pub(super) fn configured_origin(u: &url::Url, allowed: &[String]) -> bool {
    let serialized = u.origin().ascii_serialization();
    allowed.iter().any(|a| match a.strip_suffix(":*") {
        Some(prefix) => parse_origin(prefix).is_some_and(|p| p.scheme() == u.scheme() && p.host() == u.host()),
        None => parse_origin(a).is_some_and(|p| p.origin().ascii_serialization() == serialized),
    })
}

/// Whether a request may change state: anything but `GET`, `HEAD` and
/// `OPTIONS`.
pub(super) fn changes_state(method: &axum::http::Method) -> bool {
    !matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS)
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Checks every request, the admin API's included: DNS-rebinding (`Host`)
/// and cross-origin (`Origin`) protection, and the per-connection cap.
pub(super) async fn guard(State(front): State<Arc<Front>>, request: Request, next: axum::middleware::Next) -> Response {
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
    let origin = headers.get(header::ORIGIN).map(|o| o.to_str().unwrap_or(""));
    if let Some(o) = origin
        && !origin_allowed(o, &front.origins)
    {
        return error(StatusCode::FORBIDDEN, "forbidden", &format!("Origin {o:?} is not allowed"));
    }
    // A browser's word that the page making the request is on another
    // site: refused for anything that changes state, unless the page's
    // origin is one the operator configured.
    let cross_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("cross-site"));
    if cross_site
        && changes_state(request.method())
        && !origin.and_then(parse_origin).is_some_and(|u| configured_origin(&u, &front.origins))
    {
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a cross-site request (Sec-Fetch-Site: cross-site) from an origin not in server.allowed_origins",
        );
    }
    // A connection past `server.max_connections`, admitted from the
    // reserve: the probes and the operator's paths only.
    if let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<Peer>>()
        && peer.reserve
        && !crate::conns::reserve_serves(request.uri().path())
    {
        let mut r = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "capacity_exceeded",
            "the server holds as many connections as it may (server.max_connections); retry shortly",
        );
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(5));
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    if let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<Peer>>()
        && let Err(wait) = front.connections.take(&peer.addr)
    {
        return too_many("too many requests on this connection (server.connection_rate_limit)", wait);
    }
    next.run(request).await
}

/// Admits to `/ui` (the DM's page) the operator only: without tokens, the
/// server's own Unix user; with tokens, an operator token on the page's API
/// (its static files hold no data: a browser loads them before it has the
/// token, so they need none; any token presented is checked). Agent tokens
/// get 403.
pub(super) async fn operator_only(
    State(front): State<Arc<Front>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let endpoints = front.current();
    let credentials = !endpoints.tokens.is_empty() || endpoints.oauth.is_some();
    if credentials && !(front.page_api)(request.uri().path()) && bearer(request.headers()).is_none() {
        return next.run(request).await;
    }
    let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<Peer>>().cloned() else {
        return error(StatusCode::FORBIDDEN, "forbidden", "the caller of this connection is unknown");
    };
    match front.who(&endpoints, &peer, bearer(request.headers()), "/mcp").await {
        Ok(None | Some((Identity::Operator, _))) => next.run(request).await,
        Ok(Some(_)) => error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the DM's page is the operator's: an agent token does not open it",
        ),
        Err(r) => r,
    }
}

/// 503 with `Retry-After` and `shutting_down`: a new session while the
/// host stops.
pub(super) fn shutting_down() -> Response {
    let mut r = error(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "this host is stopping; try again shortly");
    r.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("5"));
    r
}

/// 429 with `Retry-After` and `capacity_exceeded`.
pub(super) fn too_many(what: &str, wait: Duration) -> Response {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut r = error(
        StatusCode::TOO_MANY_REQUESTS,
        "capacity_exceeded",
        &format!("capacity exceeded: {what}; retry after {secs} s"),
    );
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}

/// The tokens of `server.tokens`: at least 16 characters, none twice, each
/// agent's an agent `is_agent` knows.
pub(super) fn parse_tokens(cfg: &ServerConfig, is_agent: impl Fn(&str) -> bool) -> Result<Tokens, HttpError> {
    let mut tokens: Tokens = Vec::new();
    for (i, t) in cfg.tokens.iter().enumerate() {
        if t.token.len() < 16 {
            return Err(HttpError::Config(format!("server.tokens[{i}].token: use at least 16 characters")));
        }
        if tokens.iter().any(|(k, _, _)| k == t.token.as_bytes()) {
            return Err(HttpError::Config(format!("server.tokens[{i}].token: the same token is listed twice")));
        }
        let who = match &t.agent {
            None => Identity::Operator,
            Some(a) if is_agent(a) => Identity::Agent(a.clone()),
            Some(a) => {
                return Err(HttpError::Config(format!("server.tokens[{i}].agent: no agent named {a:?} in `npcs`")));
            }
        };
        tokens.push((t.token.as_bytes().to_vec(), who, TokenId(t.audit_id().into())));
    }
    Ok(tokens)
}

/// A JSON-RPC "invalid request" (-32600) error with `status`.
pub(super) fn invalid_request(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message}});
    (status, axum::Json(body)).into_response()
}

pub(super) fn is_json_or_sse(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| {
        let ct = ct.to_ascii_lowercase();
        ct.starts_with("application/json") || ct.starts_with("text/event-stream")
    })
}
