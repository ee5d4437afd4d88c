//! Who is calling (check 4 of [`super`]): the loopback operator, static
//! `server.tokens`, and OAuth 2.1 access tokens (`server.oauth`), as the
//! MCP authorization specification asks of a resource server:
//!
//! - Protected Resource Metadata (RFC 9728) at
//!   `/.well-known/oauth-protected-resource`, and per endpoint
//!   (`.../mcp/<agent>`), naming the authorization server and scopes;
//! - a request without a token, or with one that fails, gets 401 and
//!   `WWW-Authenticate: Bearer resource_metadata="..."`; a token without
//!   the required scopes 403 `error="insufficient_scope"`;
//! - a JWT is checked against the issuer's keys (JWKS: discovered, cached,
//!   fetched again for an unknown `kid` at most every [`REFETCH_AFTER`]),
//!   its `iss`, `aud` (this server's resource, RFC 8707), `exp`/`nbf` and
//!   scopes; then `server.oauth.agents`/`operator` map its claims to who it
//!   acts as. An identity that maps to nothing is refused.

use super::{Endpoints, Front, Identity, TokenId, error, too_many};
use crate::config::ServerOAuthConfig;
use crate::peer::Peer;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, jwk::JwkSet};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_base::seal::same_secret;

/// An unknown `kid` fetches the keys again, at most this often: a flood of
/// tokens naming made-up keys costs the issuer one request per period.
pub(super) const REFETCH_AFTER: Duration = Duration::from_secs(10);
/// Keys older than this are fetched again on next use (a key the issuer
/// withdrew stops working within it).
const KEYS_MAX_AGE: Duration = Duration::from_secs(600);
/// A metadata or JWKS document larger than this is refused.
const MAX_DOCUMENT: usize = 256 << 10;
/// Keys kept from one JWKS.
const MAX_KEYS: usize = 64;
/// A token checked once is taken again without its signature checked for
/// at most this long (and never past its `exp`).
const VERIFIED_FOR: Duration = Duration::from_secs(60);
/// Tokens remembered as checked.
const MAX_VERIFIED: usize = 4096;

/// The front as an OAuth resource server: its config and the issuer's keys.
pub(super) struct ResourceServer {
    pub(super) cfg: ServerOAuthConfig,
    http: reqwest::Client,
    keys: arc_swap::ArcSwap<Keys>,
    /// One fetch at a time; the others use the keys they have.
    fetching: tokio::sync::Mutex<()>,
    /// Tokens checked ([`Verified`]), one entry per token whatever path
    /// it is presented on.
    verified: std::sync::Mutex<Verified>,
}

/// Tokens checked: who each acts as, the resources it names (`aud`), and
/// until when it is taken without a check.
type Verified = HashMap<String, (Identity, TokenId, Vec<String>, Instant)>;

#[derive(Default)]
struct Keys {
    keys: Vec<(Option<String>, DecodingKey, Algorithm)>,
    /// When they were last fetched, or a fetch last failed.
    fetched: Option<Instant>,
    /// The `jwks_uri` in use (configured, or from the issuer's metadata).
    jwks_uri: Option<String>,
}

/// Why a bearer token is refused.
pub(super) enum Refusal {
    /// 401 `invalid_token`.
    Invalid(String),
    /// 403 `insufficient_scope`, naming the scopes needed.
    Scope(String),
    /// 403: the identity maps to no agent.
    Unmapped(String),
}

impl ResourceServer {
    pub(super) fn new(cfg: ServerOAuthConfig) -> ResourceServer {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let keys = Keys { jwks_uri: cfg.jwks_uri.clone(), ..Keys::default() };
        ResourceServer {
            cfg,
            http,
            keys: arc_swap::ArcSwap::from_pointee(keys),
            fetching: Default::default(),
            verified: Default::default(),
        }
    }

    /// The resource an endpoint's path stands for: `audience` for `/mcp`,
    /// `audience` + `/lyra` for `/mcp/lyra`.
    pub(super) fn resource_of(&self, path: &str) -> String {
        let tail = path.trim_end_matches('/').strip_prefix("/mcp").unwrap_or("");
        format!("{}{tail}", self.cfg.resource())
    }

    /// Where the metadata of `path`'s resource is (RFC 9728 §3.1: the
    /// well-known name goes between the host and the resource's path).
    pub(super) fn metadata_url(&self, path: &str) -> String {
        let resource = self.resource_of(path);
        match url::Url::parse(&resource) {
            Ok(u) => format!(
                "{}/.well-known/oauth-protected-resource{}",
                u.origin().ascii_serialization(),
                u.path().trim_end_matches('/')
            ),
            Err(_) => resource,
        }
    }

    /// The Protected Resource Metadata of `path`'s resource.
    pub(super) fn metadata(&self, path: &str) -> Value {
        json!({
            "resource": self.resource_of(path),
            "authorization_servers": [self.cfg.issuer],
            "scopes_supported": self.cfg.required_scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "toolhost",
        })
    }

    /// `WWW-Authenticate` for a refusal on `path`.
    fn challenge(&self, path: &str, error: Option<(&str, &str)>) -> String {
        let mut v = format!("Bearer resource_metadata=\"{}\"", self.metadata_url(path));
        if !self.cfg.required_scopes.is_empty() {
            v.push_str(&format!(", scope=\"{}\"", self.cfg.required_scopes.join(" ")));
        }
        if let Some((code, why)) = error {
            let why: String = why.chars().filter(|c| *c != '"' && *c != '\\' && !c.is_control()).collect();
            v.push_str(&format!(", error=\"{code}\", error_description=\"{why}\""));
        }
        v
    }

    /// The response for `refusal` on `path`.
    pub(super) fn refuse(&self, path: &str, refusal: Refusal) -> Response {
        let (status, code, challenge, message) = match refusal {
            Refusal::Invalid(why) => {
                (StatusCode::UNAUTHORIZED, "forbidden", self.challenge(path, Some(("invalid_token", &why))), why)
            }
            Refusal::Scope(needed) => (
                StatusCode::FORBIDDEN,
                "forbidden",
                self.challenge(path, Some(("insufficient_scope", &format!("this endpoint needs scope {needed}")))),
                format!("insufficient_scope: this endpoint needs scope {needed}"),
            ),
            Refusal::Unmapped(who) => (
                StatusCode::FORBIDDEN,
                "forbidden",
                String::new(),
                format!("{who} is not mapped to an agent here (server.oauth.agents): ask the operator"),
            ),
        };
        let mut r = error(status, code, &message);
        if let Ok(v) = HeaderValue::from_str(&challenge)
            && !challenge.is_empty()
        {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    /// 401 for a request without a token.
    pub(super) fn ask(&self, path: &str) -> Response {
        let mut r = error(StatusCode::UNAUTHORIZED, "forbidden", "this server needs `Authorization: Bearer <token>`");
        if let Ok(v) = HeaderValue::from_str(&self.challenge(path, None)) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    /// Checks `token` for the endpoint at `path`: who it acts as, and the
    /// identity the audit trail and per-identity rate limits know it by.
    pub(super) async fn check(&self, token: &str, path: &str) -> Result<(Identity, TokenId), Refusal> {
        if let Some(hit) = self.remembered(token, path) {
            return hit;
        }
        let (who, id, exp, auds) = self.verify(token, path).await?;
        // Remembered until it expires, and at most VERIFIED_FOR: a key the
        // issuer withdraws stops working within that.
        let left = Duration::from_secs(exp.saturating_sub(unix_now()));
        let mut verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if verified.len() >= MAX_VERIFIED {
            let now = Instant::now();
            verified.retain(|_, (_, _, _, until)| *until > now);
            if verified.len() >= MAX_VERIFIED {
                verified.clear();
            }
        }
        verified.insert(token.to_string(), (who.clone(), id.clone(), auds, Instant::now() + left.min(VERIFIED_FOR)));
        Ok((who, id))
    }

    /// What a token checked before answers on `path` (its audience must
    /// name the endpoint's resource or the base one); `None`: not checked
    /// lately.
    pub(super) fn remembered(&self, token: &str, path: &str) -> Option<Result<(Identity, TokenId), Refusal>> {
        let verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        let (who, id, auds, until) = verified.get(token)?;
        if *until <= Instant::now() {
            return None;
        }
        let resource = self.resource_of(path);
        Some(
            if auds
                .iter()
                .any(|a| a.trim_end_matches('/') == resource || a.trim_end_matches('/') == self.cfg.resource())
            {
                Ok((who.clone(), id.clone()))
            } else {
                Err(Refusal::Invalid(format!("the token is for another resource: it must name {resource} (RFC 8707)")))
            },
        )
    }

    /// [`Self::check`] without the memory of tokens checked; also the
    /// token's `exp` and audiences.
    async fn verify(&self, token: &str, path: &str) -> Result<(Identity, TokenId, u64, Vec<String>), Refusal> {
        let head = jsonwebtoken::decode_header(token)
            .map_err(|_| Refusal::Invalid("the token is neither a server.tokens entry nor a JWT".into()))?;
        if matches!(head.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return Err(Refusal::Invalid(format!(
                "{:?} tokens are not accepted: the issuer signs with its keys",
                head.alg
            )));
        }
        if self.keys.load().fetched.is_some_and(|t| t.elapsed() > KEYS_MAX_AGE) {
            // One request fetches; the others go on with the keys there are.
            self.fetch_keys(false, false).await;
        }
        let (key, alg) = match self.key_for(head.kid.as_deref(), head.alg) {
            Some(k) => k,
            None => {
                self.fetch_keys(false, true).await;
                self.key_for(head.kid.as_deref(), head.alg).ok_or_else(|| {
                    Refusal::Invalid(format!(
                        "the token is signed by a key the issuer does not publish ({})",
                        head.kid.as_deref().unwrap_or("no kid")
                    ))
                })?
            }
        };
        let mut v = Validation::new(alg);
        v.leeway = self.cfg.clock_skew_secs;
        v.validate_nbf = true;
        v.set_issuer(&[&self.cfg.issuer]);
        v.set_audience(&[self.cfg.resource().to_string(), self.resource_of(path)]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = jsonwebtoken::decode::<Value>(token, &key, &v)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                Refusal::Invalid(match e.kind() {
                    K::ExpiredSignature => "the token has expired".into(),
                    K::ImmatureSignature => "the token is not valid yet (nbf)".into(),
                    K::InvalidAudience => {
                        format!("the token is for another resource: it must name {} (RFC 8707)", self.resource_of(path))
                    }
                    K::InvalidIssuer => format!("the token is not from {}", self.cfg.issuer),
                    K::InvalidSignature => "the token's signature does not verify".into(),
                    other => format!("the token is invalid: {other:?}"),
                })
            })?
            .claims;
        let held = scopes(&claims);
        let missing: Vec<&str> =
            self.cfg.required_scopes.iter().map(String::as_str).filter(|s| !held.contains(s)).collect();
        if !missing.is_empty() {
            return Err(Refusal::Scope(self.cfg.required_scopes.join(" ")));
        }
        let label = identity_label(&claims);
        let who = if self.cfg.operator.as_ref().is_some_and(|o| crate::config::claims_match(&o.matches, &claims)) {
            Identity::Operator
        } else {
            match self.cfg.agents.iter().find(|m| crate::config::claims_match(&m.matches, &claims)) {
                Some(m) => Identity::Agent(m.agent.clone()),
                None => return Err(Refusal::Unmapped(label)),
            }
        };
        let exp = claims["exp"].as_u64().unwrap_or(0);
        let auds = match &claims["aud"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            _ => Vec::new(),
        };
        Ok((who, TokenId(label.into()), exp, auds))
    }

    /// The key named `kid` (or the only key for `alg`'s family when the
    /// token names none) and the algorithm it verifies.
    fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Option<(DecodingKey, Algorithm)> {
        let keys = self.keys.load();
        let mut fits = keys.keys.iter().filter(|(k, _, a)| *a == alg && (kid.is_none() || k.as_deref() == kid));
        let first = fits.next()?;
        (kid.is_some() || fits.next().is_none()).then(|| (first.1.clone(), first.2))
    }

    /// Fetches the issuer's keys again, unless they were fetched (or a
    /// fetch failed) less than [`REFETCH_AFTER`] ago; a failure keeps the
    /// keys there were.
    /// `wait`: when another request is fetching, wait for its keys (else
    /// go on with the keys there are).
    async fn fetch_keys(&self, force: bool, wait: bool) {
        let Ok(_one) = self.fetching.try_lock() else {
            if wait {
                let _ = self.fetching.lock().await;
            }
            return;
        };
        let now = self.keys.load_full();
        if !force && now.fetched.is_some_and(|t| t.elapsed() < REFETCH_AFTER) {
            return;
        }
        let jwks_uri = match &now.jwks_uri {
            Some(u) => Ok(u.clone()),
            None => self.discover().await,
        };
        let fetched = match &jwks_uri {
            Ok(u) => self.get(u).await.and_then(|body| parse_jwks(&body)),
            Err(e) => Err(e.clone()),
        };
        let next = match fetched {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "fetched the OAuth issuer's signing keys");
                Keys { keys, fetched: Some(Instant::now()), jwks_uri: jwks_uri.ok() }
            }
            Err(e) => {
                tracing::warn!(issuer = %self.cfg.issuer, "the OAuth issuer's signing keys could not be fetched: {e}");
                // A location discovery found is looked for again next time
                // (the issuer may have moved it); a configured one is kept.
                Keys { keys: now.keys.clone(), fetched: Some(Instant::now()), jwks_uri: self.cfg.jwks_uri.clone() }
            }
        };
        self.keys.store(Arc::new(next));
    }

    /// The issuer's `jwks_uri`, from its OpenID or OAuth metadata (whose
    /// `issuer` must be the configured one).
    async fn discover(&self) -> Result<String, String> {
        let issuer = self.cfg.issuer.trim_end_matches('/');
        let u = url::Url::parse(issuer).map_err(|e| e.to_string())?;
        let rfc8414 = format!(
            "{}/.well-known/oauth-authorization-server{}",
            u.origin().ascii_serialization(),
            u.path().trim_end_matches('/')
        );
        let mut last = String::new();
        for at in [format!("{issuer}/.well-known/openid-configuration"), rfc8414] {
            match self.get(&at).await.and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|e| e.to_string())) {
                Ok(m) if m["issuer"].as_str().map(|i| i.trim_end_matches('/')) != Some(issuer) => {
                    last = format!("{at} names issuer {}, not {issuer}", m["issuer"]);
                }
                Ok(m) => match m["jwks_uri"].as_str() {
                    Some(j) => return Ok(j.to_string()),
                    None => last = format!("{at} has no jwks_uri"),
                },
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// GET `url`: 200 and at most [`MAX_DOCUMENT`] bytes.
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut r = self.http.get(url).send().await.map_err(|e| format!("{url}: {e}"))?;
        if !r.status().is_success() {
            return Err(format!("{url}: HTTP {}", r.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = r.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            if body.len() + chunk.len() > MAX_DOCUMENT {
                return Err(format!("{url}: larger than {MAX_DOCUMENT} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The signing keys of a JWKS: public keys of asymmetric algorithms, each
/// with the algorithm it names (or its family's usual one).
fn parse_jwks(body: &[u8]) -> Result<Vec<(Option<String>, DecodingKey, Algorithm)>, String> {
    let set: JwkSet = serde_json::from_slice(body).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut out = Vec::new();
    for jwk in set.keys.iter().take(MAX_KEYS) {
        if jwk.common.public_key_use.as_ref().is_some_and(|u| *u != jsonwebtoken::jwk::PublicKeyUse::Signature) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(jwk) else { continue };
        let algs: Vec<Algorithm> = match jwk.common.key_algorithm.map(|a| a.to_string().parse::<Algorithm>()) {
            Some(Ok(a)) => vec![a],
            Some(Err(_)) => continue,
            None => match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => {
                    vec![Algorithm::RS256, Algorithm::RS384, Algorithm::RS512, Algorithm::PS256]
                }
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => vec![Algorithm::ES256, Algorithm::ES384],
                jsonwebtoken::jwk::AlgorithmParameters::OctetKeyPair(_) => vec![Algorithm::EdDSA],
                _ => continue,
            },
        };
        for alg in algs {
            if !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
                out.push((jwk.common.key_id.clone(), key.clone(), alg));
            }
        }
    }
    Ok(out)
}

/// The scopes a token holds: `scope` (space-separated) or `scp`.
fn scopes(claims: &Value) -> Vec<&str> {
    match (&claims["scope"], &claims["scp"]) {
        (Value::String(s), _) | (_, Value::String(s)) => s.split_whitespace().collect(),
        (Value::Array(a), _) | (_, Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// How the audit trail names a token's identity: `oauth:SUB@ISSUER`, and
/// the client when the token names one; at most 300 characters, printable.
fn identity_label(claims: &Value) -> String {
    let part = |k: &str| -> String {
        claims[k].as_str().unwrap_or("-").chars().filter(|c| !c.is_control()).take(120).collect()
    };
    let client = claims.get("client_id").or_else(|| claims.get("azp")).and_then(Value::as_str);
    let mut label = format!("oauth:{}@{}", part("sub"), part("iss"));
    if let Some(c) = client {
        label.push_str(" client ");
        label.extend(c.chars().filter(|c| !c.is_control()).take(60));
    }
    label
}

impl Front {
    /// Who the request's token says the caller is; `Ok(None)` for the
    /// loopback operator (the server's own Unix user or root, without a
    /// token, where `server.loopback_operator` allows). `path` is the
    /// endpoint asked for (the resource an OAuth token must name).
    pub(super) async fn who(
        &self,
        endpoints: &Endpoints,
        peer: &Peer,
        token: Option<&str>,
        path: &str,
    ) -> Result<Option<(Identity, TokenId)>, Response> {
        let own = peer.uid.is_some_and(|uid| uid == self.own_uid || uid == 0);
        // A token a pairing code handed out ([`super::pair`]).
        if let Some((agent, id)) = token.and_then(|t| self.pairings.token(t)) {
            return Ok(Some((Identity::Agent(agent), TokenId(format!("pair:{id}").into()))));
        }
        if endpoints.tokens.is_empty() && endpoints.oauth.is_none() {
            // No credentials configured: the loopback operator, or nobody.
            return match peer.uid {
                _ if own && endpoints.loopback_operator => Ok(None),
                Some(uid) if own => Err(error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    &format!("uid {uid} is this server's user, but server.loopback_operator is false"),
                )),
                Some(uid) => Err(error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    &format!(
                        "this server has no `server.tokens`, so it serves only its own Unix user (uid {}); your connection belongs to uid {uid}. Ask the operator for a token.",
                        self.own_uid
                    ),
                )),
                None => Err(error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "this server has no `server.tokens`, so it serves only its own Unix user, and the owner of this connection is unknown; configure `server.tokens`",
                )),
            };
        }
        let Some(t) = token else {
            if own && endpoints.loopback_operator {
                return Ok(None);
            }
            return Err(match &endpoints.oauth {
                Some(rs) => rs.ask(path),
                None => unauthorized("this server needs `Authorization: Bearer <token>`"),
            });
        };
        let tokens = &endpoints.tokens;
        // Every token is compared, whichever matches.
        let found = tokens
            .iter()
            .enumerate()
            .fold(None, |found, (i, (k, _, _))| if same_secret(k, t.as_bytes()) { Some(i) } else { found });
        let source = crate::conns::source_network(peer.addr.ip());
        if found.is_none()
            && let Some(rs) = &endpoints.oauth
        {
            // Not a static token: an access token. A failed one spends the
            // source's allowance as a wrong static token does; once it is
            // spent, only tokens checked lately are taken (no signature is
            // checked for a throttled source).
            if let Some(wait) = self.auth_failures.wait(&source)
                && !matches!(rs.remembered(t, path), Some(Ok(_)))
            {
                return Err(too_many("too many failed authentications", wait));
            }
            return match rs.check(t, path).await {
                Ok(who) => Ok(Some(who)),
                Err(r @ Refusal::Invalid(_)) => match self.auth_failures.take(&source) {
                    Ok(()) => Err(rs.refuse(path, r)),
                    Err(wait) => Err(too_many("too many failed authentications", wait)),
                },
                // A valid token: too few scopes, or nobody's.
                Err(r) => Err(rs.refuse(path, r)),
            };
        }
        let mut authenticated = endpoints.authenticated.lock().unwrap_or_else(|p| p.into_inner());
        // Counted by where the guesses come from: an attacker spends its
        // own allowance, never another address's (one address's guesses
        // locked out every client after a restart).
        match (found, self.auth_failures.wait(&source)) {
            (Some(i), None) => {
                authenticated.insert(i);
                let (_, who, id) = &tokens[i];
                Ok(Some((who.clone(), id.clone())))
            }
            // While failed attempts are throttled, only tokens that have
            // authenticated before (or the server's own user's: it can read
            // the config) are checked: a right guess is answered exactly
            // like a wrong one.
            (Some(i), Some(_)) if authenticated.contains(&i) || own => {
                authenticated.insert(i);
                let (_, who, id) = &tokens[i];
                Ok(Some((who.clone(), id.clone())))
            }
            (Some(_), Some(wait)) => Err(too_many("too many failed authentications", wait)),
            (None, _) => match self.auth_failures.take(&source) {
                Ok(()) => Err(unauthorized("unknown token")),
                Err(wait) => Err(too_many("too many failed authentications", wait)),
            },
        }
    }
}

/// 401 for a front with static tokens only.
pub(super) fn unauthorized(message: &str) -> Response {
    let mut r = error(StatusCode::UNAUTHORIZED, "forbidden", message);
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"toolhost\""));
    r
}

/// `GET /.well-known/oauth-protected-resource[/PATH]`: the metadata of the
/// resource at PATH (`/mcp`, `/mcp/<agent>`), or 404 without `server.oauth`.
pub(super) fn protected_resource(endpoints: &Endpoints, tail: &str) -> Response {
    let Some(rs) = &endpoints.oauth else {
        return error(StatusCode::NOT_FOUND, "not_found", "this server is not an OAuth resource server (server.oauth)");
    };
    // The tail is the resource's path; its endpoint part is what follows
    // the audience's path (`/mcp` behind no proxy).
    let audience_path = url::Url::parse(rs.cfg.resource()).map(|u| u.path().trim_end_matches('/').to_string());
    let local = match audience_path {
        Ok(p) if !p.is_empty() && tail.starts_with(&p) => format!("/mcp{}", &tail[p.len()..]),
        _ => tail.to_string(),
    };
    let local = if local.is_empty() { "/mcp".to_string() } else { local };
    match local.trim_end_matches('/').strip_prefix("/mcp") {
        Some("") => {}
        Some(slug) if endpoints.slugs.contains_key(slug.trim_start_matches('/')) => {}
        _ => return error(StatusCode::NOT_FOUND, "not_found", &format!("no protected resource at {tail}")),
    }
    let mut r = axum::Json(rs.metadata(&local)).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(audience: &str) -> ResourceServer {
        ResourceServer::new(ServerOAuthConfig {
            issuer: "https://id.example.org/realms/table".into(),
            audience: audience.into(),
            jwks_uri: None,
            required_scopes: vec!["mcp:tools".into()],
            clock_skew_secs: 60,
            agents: Vec::new(),
            operator: None,
        })
    }

    #[test]
    fn each_endpoint_is_its_own_resource_with_its_metadata_beside_the_host() {
        let rs = server("https://toolhost.example.org/mcp/");
        assert_eq!(rs.resource_of("/mcp"), "https://toolhost.example.org/mcp");
        assert_eq!(rs.resource_of("/mcp/lyra/"), "https://toolhost.example.org/mcp/lyra");
        assert_eq!(
            rs.metadata_url("/mcp/lyra"),
            "https://toolhost.example.org/.well-known/oauth-protected-resource/mcp/lyra"
        );
        let proxied = server("https://games.example.org/table/mcp");
        assert_eq!(
            proxied.metadata_url("/mcp"),
            "https://games.example.org/.well-known/oauth-protected-resource/table/mcp"
        );
        let m = rs.metadata("/mcp/lyra");
        assert_eq!(m["resource"], "https://toolhost.example.org/mcp/lyra");
        assert_eq!(m["authorization_servers"][0], "https://id.example.org/realms/table");
        assert_eq!(m["scopes_supported"], json!(["mcp:tools"]));
    }

    #[test]
    fn a_challenge_names_the_metadata_and_scope_and_never_echoes_a_quote() {
        let rs = server("https://toolhost.example.org/mcp");
        let c = rs.challenge("/mcp/lyra", Some(("invalid_token", "bad \"kid\"\r\n here")));
        assert_eq!(
            c,
            "Bearer resource_metadata=\"https://toolhost.example.org/.well-known/oauth-protected-resource/mcp/lyra\", scope=\"mcp:tools\", error=\"invalid_token\", error_description=\"bad kid here\""
        );
    }

    #[test]
    fn scopes_come_from_scope_or_scp_and_identities_are_bounded_and_printable() {
        assert_eq!(scopes(&json!({"scope": "a  b"})), ["a", "b"]);
        assert_eq!(scopes(&json!({"scp": ["a", 1, "c"]})), ["a", "c"]);
        assert!(scopes(&json!({})).is_empty());
        let label = identity_label(&json!({"sub": "alice\n", "iss": "https://id", "azp": "tablet"}));
        assert_eq!(label, "oauth:alice@https://id client tablet");
        let long = identity_label(&json!({"sub": "x".repeat(10_000), "iss": "i"}));
        assert!(long.len() < 300, "{}", long.len());
    }

    #[test]
    fn a_jwks_keeps_signing_keys_and_drops_encryption_and_symmetric_ones() {
        let n = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";
        let set = json!({"keys": [
            {"kty": "RSA", "kid": "sig", "alg": "RS256", "use": "sig", "n": n, "e": "AQAB"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": n, "e": "AQAB"},
            {"kty": "oct", "kid": "hmac", "alg": "HS256", "k": "c2VjcmV0"},
            {"kty": "RSA", "kid": "any", "n": n, "e": "AQAB"},
        ]});
        let keys = parse_jwks(set.to_string().as_bytes()).unwrap();
        let named: Vec<(&str, Algorithm)> = keys.iter().map(|(k, _, a)| (k.as_deref().unwrap(), *a)).collect();
        assert!(named.contains(&("sig", Algorithm::RS256)));
        assert!(named.contains(&("any", Algorithm::RS256)), "no alg: the family's");
        assert!(!named.iter().any(|(k, _)| *k == "enc" || *k == "hmac"), "{named:?}");
        assert!(parse_jwks(b"<html>").is_err());
    }
}
