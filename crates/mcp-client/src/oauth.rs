//! OAuth 2.1 client credentials for streamable-HTTP servers, as the MCP
//! authorization spec (2025-11-25) describes it for a client that is its
//! own resource owner:
//!
//! 1. The first request goes without a token (unless `token_url` is
//!    configured). A `401` names the protected-resource metadata in its
//!    `WWW-Authenticate` challenge (`resource_metadata`), or toolhost looks
//!    at the well-known paths (RFC 9728: path-inserted, then root).
//! 2. The metadata's `resource` must be the server toolhost talks to (same
//!    origin, a prefix of its path); its first `authorization_servers`
//!    entry is the issuer, whose metadata comes from RFC 8414 or OpenID
//!    Connect discovery, in the spec's order. A server with no
//!    protected-resource metadata (2025-03-26) is its own authorization
//!    server, with `/token` as the fallback endpoint.
//! 3. The token request is `grant_type=client_credentials` with
//!    `resource` (RFC 8707) and the scopes: the configured ones, else the
//!    challenge's `scope`, else the metadata's `scopes_supported`, else
//!    none. The client authenticates with `client_secret_basic` or
//!    `client_secret_post`, whichever the issuer's
//!    `token_endpoint_auth_methods_supported` allows (basic when it says
//!    nothing).
//! 4. A `403 insufficient_scope` asks again with the challenged scopes
//!    added (once per request); a `401` with a token already sent fetches a
//!    new one (once per request).
//!
//! Tokens and secrets never reach a log or an error message. The bearer
//! token goes only to the configured server's origin; the client secret
//! only to the token endpoint. Discovered URLs (metadata, token endpoint)
//! must be `https`, except between loopback hosts, and every response body
//! is capped.
//!
//! The authorization-code flow (a user signing in with a browser, where a
//! human is present) is `toolhost auth login` (`login.rs`); a server with a
//! stored login gets its stored token here, refreshed when it expires or is
//! refused.

use crate::config::OAuthConfig;
use reqwest::Url;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one metadata or token request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest metadata or token response read, in bytes.
const MAX_BODY_BYTES: usize = 256 * 1024;

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    /// `client_secret_basic`: HTTP Basic with the form-encoded id and secret.
    Basic,
    /// `client_secret_post`: the id and secret in the form body.
    Post,
    /// `private_key_jwt`: an assertion signed with the client's key.
    PrivateKeyJwt,
}

/// Where tokens come from: configured, or discovered from the server.
#[derive(Debug, Clone)]
struct Endpoint {
    token_url: Url,
    auth: ClientAuth,
    /// The `resource` parameter (RFC 8707): the protected resource's identifier.
    resource: String,
    /// The authorization server's issuer identifier, when discovered: a
    /// client assertion's audience.
    issuer: Option<String>,
    /// The issuer's metadata does not list `client_credentials` among its
    /// grant types (said in the error if the token request fails).
    grant_unlisted: bool,
}

#[derive(Debug, Default)]
struct State {
    endpoint: Option<Endpoint>,
    /// The scopes asked for (grows on `insufficient_scope`).
    scopes: Vec<String>,
    /// The current token and when to fetch the next one.
    token: Option<(String, Instant)>,
}

/// What a `401` or `403` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// `401`: no token, or one the server no longer takes.
    Unauthorized,
    /// `403` with `error="insufficient_scope"`.
    InsufficientScope,
}

/// OAuth 2.1 client credentials for one server: discovers the token
/// endpoint when it is not configured, fetches a bearer token and refreshes
/// it before it expires.
#[derive(Debug)]
pub(super) struct TokenSource {
    cfg: OAuthConfig,
    /// The MCP endpoint: the protected resource.
    server: Url,
    client: reqwest::Client,
    state: tokio::sync::Mutex<State>,
    /// Why getting a token failed last, for the connection's error.
    last_error: std::sync::Mutex<Option<String>>,
    /// A stored `toolhost auth login`: its tokens instead of client credentials.
    login: Option<Box<dyn StoredTokens>>,
    /// The client's key for `private_key_jwt` (`auth.oauth.private_key_file`).
    key: Option<token::ClientKey>,
}

/// Tokens a server gets instead of client credentials (a stored
/// `toolhost auth login`: `login.rs`), asked first and told of refusals.
pub(super) trait StoredTokens: Send + Sync + std::fmt::Debug {
    /// The access token, refreshed first when it is about to expire.
    fn current(&self) -> futures::future::BoxFuture<'_, Result<String, String>>;
    /// After the server refused `sent`: a token to try again with, or why
    /// there is none.
    /// `show`: where a sign-in URL can be shown (signing in again with
    /// more scope), when the refused request came from a call whose
    /// client can be asked.
    fn refused<'a>(
        &'a self,
        sent: Option<&'a str>,
        refusal: Refusal,
        challenge: &'a str,
        show: Option<ShowUrl>,
    ) -> futures::future::BoxFuture<'a, Result<String, String>>;
}

impl TokenSource {
    /// A token source for the server at `server_url`; with `token_url`
    /// configured, nothing is discovered.
    pub(super) fn new(cfg: OAuthConfig, server_url: &str, client: reqwest::Client) -> Result<TokenSource, String> {
        let server = Url::parse(server_url).map_err(|e| format!("`url` {server_url:?}: {e}"))?;
        let mut state = State { scopes: cfg.scopes.clone(), ..State::default() };
        if let Some(x) = &cfg.cross_app {
            if x.id_token.is_empty() == x.id_token_file.is_none() {
                return Err("auth.oauth.cross_app: give exactly one of id_token and id_token_file".into());
            }
            if cfg.client_id.is_empty() {
                return Err("auth.oauth.cross_app: needs auth.oauth.client_id (toolhost's client at the server's authorization server)".into());
            }
        }
        let key = match &cfg.private_key_file {
            Some(path) => Some(token::ClientKey::load(path, cfg.signing_alg.as_deref(), cfg.key_id.clone())?),
            None => None,
        };
        if let Some(token_url) = &cfg.token_url {
            let token_url = Url::parse(token_url).map_err(|e| format!("auth.oauth.token_url {token_url:?}: {e}"))?;
            if !matches!(token_url.scheme(), "http" | "https") {
                return Err(format!("auth.oauth.token_url {token_url}: must be http:// or https://"));
            }
            state.endpoint = Some(Endpoint {
                token_url,
                auth: if key.is_some() { ClientAuth::PrivateKeyJwt } else { ClientAuth::Basic },
                resource: canonical(&server),
                issuer: None,
                grant_unlisted: false,
            });
        }
        Ok(TokenSource {
            cfg,
            server,
            client,
            state: tokio::sync::Mutex::new(state),
            last_error: std::sync::Mutex::new(None),
            login: None,
            key,
        })
    }

    /// A token source for the server at `server_url` that sends the tokens
    /// of a stored login (and refreshes them).
    pub(super) fn logged_in(
        login: impl StoredTokens + 'static,
        server_url: &str,
        client: reqwest::Client,
    ) -> Result<TokenSource, String> {
        let cfg = OAuthConfig {
            client_id: String::new(),
            client_secret: String::new(),
            token_url: None,
            scopes: Vec::new(),
            client_metadata_url: None,
            ..OAuthConfig::default()
        };
        let mut tokens = TokenSource::new(cfg, server_url, client)?;
        tokens.login = Some(Box::new(login));
        Ok(tokens)
    }

    /// The error that ended the last attempt to get a token, once.
    pub(super) fn take_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn failed(&self, e: String) -> String {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
        e
    }

    /// Whether `uri` is on the server's origin, the only one its tokens go to.
    fn protects(&self, uri: &str) -> bool {
        Url::parse(uri).is_ok_and(|u| u.origin() == self.server.origin())
    }

    /// The token to send to `uri`: none before the token endpoint is known
    /// (the server's `401` starts discovery) or for another origin than the
    /// server's; otherwise a valid one, fetched anew when the cached one is
    /// within 10% of its lifetime (at most 30 s) of expiring.
    pub(super) async fn current(&self, uri: &str) -> Result<Option<String>, String> {
        if !self.protects(uri) {
            return Ok(None);
        }
        if let Some(login) = &self.login {
            return login.current().await.map(Some).map_err(|e| self.failed(e));
        }
        let mut state = self.state.lock().await;
        let Some(endpoint) = state.endpoint.clone() else { return Ok(None) };
        if let Some((token, refresh_at)) = &state.token
            && Instant::now() < *refresh_at
        {
            return Ok(Some(token.clone()));
        }
        let token = self.fetch(&endpoint, &state.scopes).await.map_err(|e| self.failed(e))?;
        state.token = Some(token.clone());
        Ok(Some(token.0))
    }

    /// After the server refused `sent` with `challenge` (its
    /// `WWW-Authenticate`, possibly empty): discovers the token endpoint if
    /// need be, adds challenged scopes on `insufficient_scope`, and returns
    /// a new token to retry with.
    pub(super) async fn after_refusal(
        &self,
        sent: Option<&str>,
        challenge: &str,
        refusal: Refusal,
        show: Option<ShowUrl>,
    ) -> Result<String, String> {
        if let Some(login) = &self.login {
            return login.refused(sent, refusal, challenge, show).await.map_err(|e| self.failed(e));
        }
        let mut state = self.state.lock().await;
        let challenge = Bearer::parse(challenge, &self.server);
        // Another request already replaced the refused token.
        if refusal == Refusal::Unauthorized
            && let Some((token, refresh_at)) = &state.token
            && Some(token.as_str()) != sent
            && Instant::now() < *refresh_at
        {
            return Ok(token.clone());
        }
        if state.endpoint.is_none() {
            let (endpoint, scopes) = self.discover(&challenge).await.map_err(|e| self.failed(e))?;
            state.endpoint = Some(endpoint);
            if state.scopes.is_empty() {
                state.scopes = scopes;
            }
        }
        if refusal == Refusal::InsufficientScope {
            let wanted = challenge.scopes();
            let before = state.scopes.len();
            for s in wanted {
                if !state.scopes.contains(&s) {
                    state.scopes.push(s);
                }
            }
            if state.scopes.len() == before && sent.is_some() {
                let e = format!(
                    "the server refused the token for insufficient scope ({}), and toolhost already asks for every scope it names ({})",
                    challenge.error_description.as_deref().unwrap_or("no description"),
                    state.scopes.join(" ")
                );
                return Err(self.failed(e));
            }
        }
        let endpoint = state.endpoint.clone().expect("set above");
        let token = self.fetch(&endpoint, &state.scopes).await.map_err(|e| self.failed(e))?;
        state.token = Some(token.clone());
        Ok(token.0)
    }

    /// The authorization server after the server answered `challenge`: the
    /// first its protected-resource metadata names (RFC 9728), or, before
    /// RFC 9728 (MCP 2025-03-26), the server's own origin; checked against
    /// the origins allowed.
    async fn issuer(&self, challenge: &Bearer) -> Result<Issuer, String> {
        let resource = self.protected_resource(challenge).await?;
        let legacy = resource.is_none();
        let (issuer, resource_id, scopes_supported) = match resource {
            Some(prm) => {
                let issuer = prm.authorization_servers.first().cloned().ok_or_else(|| {
                    format!("the protected-resource metadata at {} names no authorization server", prm.url)
                })?;
                let issuer = Url::parse(&issuer)
                    .map_err(|e| format!("the authorization server {issuer:?} named at {}: {e}", prm.url))?;
                (issuer, prm.resource, prm.scopes_supported)
            }
            None => {
                let mut origin = self.server.clone();
                origin.set_path("/");
                origin.set_query(None);
                origin.set_fragment(None);
                (origin, canonical(&self.server), Vec::new())
            }
        };
        self.allowed("authorization server", &issuer)?;
        Ok(Issuer { issuer, resource_id, scopes_supported, legacy })
    }

    /// Finds the token endpoint and the scopes to ask for (RFC 9728, then
    /// RFC 8414 or OpenID Connect discovery).
    async fn discover(&self, challenge: &Bearer) -> Result<(Endpoint, Vec<String>), String> {
        let Issuer { issuer, resource_id, scopes_supported, legacy } = self.issuer(challenge).await?;
        let metadata = self.authorization_server(&issuer, legacy).await?;
        let (token_url, methods, grants) = match metadata {
            Some(m) => (m.token_endpoint, m.auth_methods, m.grant_types),
            None if legacy => {
                // 2025-03-26 fallback: the default endpoint at the server's root.
                (issuer.join("/token").map_err(|e| e.to_string())?, Vec::new(), Vec::new())
            }
            None => {
                return Err(format!(
                    "no authorization server metadata for {} (tried {})",
                    issuer,
                    as_metadata_urls(&issuer).iter().map(Url::as_str).collect::<Vec<_>>().join(", ")
                ));
            }
        };
        self.allowed("token endpoint", &token_url)?;
        let auth = token::client_auth(self.key.is_some(), &methods, issuer.as_str())?;
        let scopes = match challenge.scopes() {
            s if !s.is_empty() => s,
            _ => scopes_supported,
        };
        let grant_unlisted = !grants.is_empty() && !grants.iter().any(|g| g == "client_credentials");
        tracing::debug!(server = %self.server, %issuer, %token_url, "discovered the OAuth token endpoint");
        let issuer = Some(issuer.to_string());
        Ok((Endpoint { token_url, auth, resource: resource_id, issuer, grant_unlisted }, scopes))
    }

    /// Discovery for the authorization-code flow, after the server answered
    /// `challenge` (its `WWW-Authenticate`, possibly empty): the same
    /// metadata as [`TokenSource::discover`], with the authorization and
    /// registration endpoints. A 2025-03-26 server without metadata gets
    /// `/authorize`, `/token` and `/register` at its root.
    pub(super) async fn discover_login(&self, challenge: &str) -> Result<LoginMetadata, String> {
        let challenge = Bearer::parse(challenge, &self.server);
        let Issuer { issuer, resource_id, scopes_supported, legacy } = self.issuer(&challenge).await?;
        let root = |p: &str| issuer.join(p).map_err(|e| e.to_string());
        let m = match self.authorization_server(&issuer, legacy).await? {
            Some(m) => m,
            None if legacy => AsMetadata {
                token_endpoint: root("/token")?,
                auth_methods: Vec::new(),
                grant_types: Vec::new(),
                authorization_endpoint: Some(root("/authorize")?),
                registration_endpoint: Some(root("/register")?),
                cimd: false,
                scopes_supported: Vec::new(),
                issuer: issuer.to_string(),
            },
            None => {
                return Err(format!(
                    "no authorization server metadata for {} (tried {})",
                    issuer,
                    as_metadata_urls(&issuer).iter().map(Url::as_str).collect::<Vec<_>>().join(", ")
                ));
            }
        };
        let authorization_endpoint = m
            .authorization_endpoint
            .ok_or_else(|| format!("the authorization server {issuer} names no authorization_endpoint"))?;
        self.allowed("authorization endpoint", &authorization_endpoint)?;
        self.allowed("token endpoint", &m.token_endpoint)?;
        if let Some(r) = &m.registration_endpoint {
            self.allowed("registration endpoint", r)?;
        }
        let mut scopes = if !self.cfg.scopes.is_empty() {
            self.cfg.scopes.clone()
        } else {
            match challenge.scopes() {
                s if !s.is_empty() => s,
                _ => scopes_supported,
            }
        };
        if m.scopes_supported.iter().any(|s| s == "offline_access") && !scopes.iter().any(|s| s == "offline_access") {
            scopes.push("offline_access".into());
        }
        Ok(LoginMetadata {
            issuer: m.issuer,
            authorization_endpoint,
            token_endpoint: m.token_endpoint,
            registration_endpoint: m.registration_endpoint,
            auth_methods: m.auth_methods,
            cimd: m.cimd,
            resource: resource_id,
            scopes,
        })
    }

    /// The protected-resource metadata: from the challenge's
    /// `resource_metadata`, else the well-known paths. `None` when the
    /// server publishes none.
    async fn protected_resource(&self, challenge: &Bearer) -> Result<Option<ResourceMetadata>, String> {
        let named = challenge.resource_metadata.clone();
        let candidates = match &named {
            Some(url) => vec![url.clone()],
            None => prm_urls(&self.server),
        };
        let mut tried = Vec::new();
        for url in candidates {
            self.allowed("protected-resource metadata", &url)?;
            let Some(doc) = self.get_json(&url).await? else {
                tried.push(url.to_string());
                continue;
            };
            let resource = doc["resource"]
                .as_str()
                .ok_or_else(|| format!("the protected-resource metadata at {url} has no `resource`"))?;
            if !resource_matches(resource, &self.server) {
                return Err(format!(
                    "the protected-resource metadata at {url} is for {resource:?}, not for {}: toolhost asks for no token for another resource",
                    self.server
                ));
            }
            return Ok(Some(ResourceMetadata {
                url,
                resource: resource.to_string(),
                authorization_servers: strings(&doc["authorization_servers"]),
                scopes_supported: strings(&doc["scopes_supported"]),
            }));
        }
        if named.is_some() {
            return Err(format!(
                "no protected-resource metadata at {}, which the server's challenge names",
                tried.join(", ")
            ));
        }
        Ok(None)
    }

    /// The issuer's metadata, from the first of the spec's well-known URLs
    /// that has it; its `issuer` must be the one asked for (RFC 8414 §3.3),
    /// or, for a server without protected-resource metadata (`legacy`,
    /// whose own origin serves the metadata), on the server's origin.
    async fn authorization_server(&self, issuer: &Url, legacy: bool) -> Result<Option<AsMetadata>, String> {
        for url in as_metadata_urls(issuer) {
            let Some(doc) = self.get_json(&url).await? else { continue };
            let said = doc["issuer"].as_str().unwrap_or_default();
            let same = said.trim_end_matches('/') == issuer.as_str().trim_end_matches('/')
                || legacy && Url::parse(said).is_ok_and(|u| u.origin() == self.server.origin());
            if !same {
                return Err(format!(
                    "the authorization server metadata at {url} is for issuer {said:?}, not {issuer}: refusing it"
                ));
            }
            let token_endpoint = doc["token_endpoint"]
                .as_str()
                .ok_or_else(|| format!("the authorization server metadata at {url} has no token_endpoint"))?;
            let token_endpoint =
                Url::parse(token_endpoint).map_err(|e| format!("token_endpoint {token_endpoint:?} at {url}: {e}"))?;
            let endpoint = |key: &str| doc[key].as_str().and_then(|u| Url::parse(u).ok());
            return Ok(Some(AsMetadata {
                token_endpoint,
                auth_methods: strings(&doc["token_endpoint_auth_methods_supported"]),
                grant_types: strings(&doc["grant_types_supported"]),
                authorization_endpoint: endpoint("authorization_endpoint"),
                registration_endpoint: endpoint("registration_endpoint"),
                cimd: doc["client_id_metadata_document_supported"].as_bool() == Some(true),
                scopes_supported: strings(&doc["scopes_supported"]),
                issuer: said.to_string(),
            }));
        }
        Ok(None)
    }

    /// A discovered URL toolhost will contact: `https`, or `http` between
    /// loopback hosts (a server on this machine, for development).
    fn allowed(&self, what: &str, url: &Url) -> Result<(), String> {
        match url.scheme() {
            "https" => Ok(()),
            "http" if is_loopback(url) && is_loopback(&self.server) => Ok(()),
            _ => Err(format!(
                "the {what} {url} is not https (plain http is accepted only when the server and it are both on loopback; a configured auth.oauth.token_url is used as it is)"
            )),
        }
    }

    /// GETs a JSON document; `None` when the server answers 4xx (not there).
    async fn get_json(&self, url: &Url) -> Result<Option<Value>, String> {
        let response = self
            .client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("fetching {url}: {e}"))?;
        let status = response.status();
        if status.is_client_error() {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(format!("fetching {url}: {status}"));
        }
        let body = read_body(response).await.map_err(|e| format!("reading {url}: {e}"))?;
        let doc: Value = serde_json::from_slice(&body).map_err(|e| format!("{url} is not JSON: {e}"))?;
        if !doc.is_object() {
            return Err(format!("{url} is not a JSON object"));
        }
        Ok(Some(doc))
    }
}

/// Reads a response body, at most [`MAX_BODY_BYTES`].
pub(super) async fn read_body(response: reqwest::Response) -> Result<Vec<u8>, String> {
    use toolhost_base::bounded::{BodyError, read_capped};
    read_capped(response.content_length(), MAX_BODY_BYTES, response.bytes_stream()).await.map_err(|e| match e {
        BodyError::TooLarge { .. } => format!("the answer is {e}"),
        BodyError::Read(e) => e.to_string(),
    })
}

/// An array of strings from a metadata document (other entries skipped).
fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect()).unwrap_or_default()
}

/// RFC 9728 protected-resource metadata, the fields toolhost uses.
#[derive(Debug)]
struct ResourceMetadata {
    url: Url,
    resource: String,
    authorization_servers: Vec<String>,
    scopes_supported: Vec<String>,
}

/// RFC 8414 authorization-server metadata, the fields toolhost uses.
#[derive(Debug)]
struct AsMetadata {
    token_endpoint: Url,
    auth_methods: Vec<String>,
    grant_types: Vec<String>,
    authorization_endpoint: Option<Url>,
    registration_endpoint: Option<Url>,
    /// `client_id_metadata_document_supported`.
    cimd: bool,
    scopes_supported: Vec<String>,
    issuer: String,
}

/// What `toolhost auth login` needs to know about a server's authorization.
#[derive(Debug, Clone)]
pub(super) struct LoginMetadata {
    pub(super) issuer: String,
    pub(super) authorization_endpoint: Url,
    pub(super) token_endpoint: Url,
    pub(super) registration_endpoint: Option<Url>,
    /// `token_endpoint_auth_methods_supported` (empty: unsaid).
    pub(super) auth_methods: Vec<String>,
    pub(super) cimd: bool,
    /// The `resource` parameter.
    pub(super) resource: String,
    /// The scopes to ask for, chosen as for client credentials (configured,
    /// challenged, `scopes_supported`), plus `offline_access` when the
    /// authorization server lists it (SEP-2207).
    pub(super) scopes: Vec<String>,
}

/// The `Bearer` challenge of a `WWW-Authenticate` header (RFC 6750, RFC 9728).
#[derive(Debug, Default, PartialEq)]
struct Bearer {
    resource_metadata: Option<Url>,
    scope: Option<String>,
    error_description: Option<String>,
}

impl Bearer {
    /// The `Bearer` challenge's parameters in `header` (other schemes
    /// ignored); `resource_metadata` resolved against `base`.
    fn parse(header: &str, base: &Url) -> Bearer {
        let mut out = Bearer::default();
        for (scheme, params) in toolhost_base::www_authenticate::challenges(header) {
            if !scheme.eq_ignore_ascii_case("bearer") {
                continue;
            }
            for (k, v) in params {
                match k.to_ascii_lowercase().as_str() {
                    "resource_metadata" => out.resource_metadata = base.join(&v).ok(),
                    "scope" => out.scope = Some(v),
                    "error_description" => out.error_description = Some(v),
                    _ => {}
                }
            }
        }
        out
    }

    /// The challenged scopes, in order, each once.
    fn scopes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.scope.as_deref().unwrap_or_default().split_whitespace() {
            if !out.iter().any(|o| o == s) {
                out.push(s.to_string());
            }
        }
        out
    }
}

/// The well-known protected-resource metadata URLs of `server`, in the
/// order RFC 9728 and the MCP spec give: path-inserted, then the root.
fn prm_urls(server: &Url) -> Vec<Url> {
    let mut out = Vec::new();
    let path = server.path().trim_end_matches('/');
    let at = |p: &str| {
        let mut u = server.clone();
        u.set_path(p);
        u.set_query(None);
        u.set_fragment(None);
        u
    };
    if !path.is_empty() {
        out.push(at(&format!("/.well-known/oauth-protected-resource{path}")));
    }
    out.push(at("/.well-known/oauth-protected-resource"));
    out
}

/// The metadata URLs of an issuer, in the MCP spec's order: with a path,
/// RFC 8414 path insertion, OpenID Connect path insertion, OpenID Connect
/// path appending; without one, RFC 8414 then OpenID Connect.
fn as_metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let at = |p: String| {
        let mut u = issuer.clone();
        u.set_path(&p);
        u.set_query(None);
        u.set_fragment(None);
        u
    };
    if path.is_empty() {
        vec![at("/.well-known/oauth-authorization-server".into()), at("/.well-known/openid-configuration".into())]
    } else {
        vec![
            at(format!("/.well-known/oauth-authorization-server{path}")),
            at(format!("/.well-known/openid-configuration{path}")),
            at(format!("{path}/.well-known/openid-configuration")),
        ]
    }
}

/// The canonical URI of an MCP server (RFC 8707, MCP spec): lower-case
/// scheme and host, no fragment, no trailing slash on an empty path.
fn canonical(server: &Url) -> String {
    let mut u = server.clone();
    u.set_fragment(None);
    let s = u.to_string();
    if u.path() == "/" && u.query().is_none() { s.trim_end_matches('/').to_string() } else { s }
}

/// Whether protected-resource metadata naming `resource` may speak for
/// `server`: the same origin, and `server`'s path within `resource`'s.
fn resource_matches(resource: &str, server: &Url) -> bool {
    let Ok(r) = Url::parse(resource) else { return false };
    if r.origin() != server.origin() {
        return false;
    }
    let rp = r.path().trim_end_matches('/');
    let sp = server.path().trim_end_matches('/');
    rp.is_empty() || sp == rp || sp.strip_prefix(rp).is_some_and(|rest| rest.starts_with('/'))
}

/// Whether a URL's host is this machine (the one loopback rule:
/// [`toolhost_base::net::is_loopback_host`]).
fn is_loopback(url: &Url) -> bool {
    url.host_str().is_some_and(toolhost_base::net::is_loopback_host)
}

/// The reqwest client that sends the server's OAuth token with every
/// request, and on a `401` or `403 insufficient_scope` gets a token (or a
/// better one) and retries once.
#[derive(Clone)]
pub(super) struct OAuthHttp {
    pub(super) inner: reqwest::Client,
    pub(super) tokens: Arc<TokenSource>,
    /// Who can be shown a sign-in URL for the request with this id: the
    /// client of the call that sent it (signing in again with more scope).
    pub(super) shown_by: Option<ShownBy>,
}

/// Shows a URL and returns once the person agreed to open it; blocks.
pub(super) type Show = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Where a sign-in URL can be shown to a person.
#[derive(Clone)]
pub(super) struct ShowUrl {
    /// Shows the URL and returns once the person agreed to open it (or
    /// why not); blocks.
    pub(super) show: Show,
    /// How long the sign-in may take (`limits.input_wait_ms`).
    pub(super) wait: Duration,
}
/// The [`ShowUrl`] of the call that sent a request, by the request's id.
pub(super) type ShownBy = Arc<dyn Fn(&rmcp::model::RequestId) -> Option<ShowUrl> + Send + Sync>;

mod oauth_client;
mod token;
pub(super) use token::{basic_auth, redacted};

/// Where a server's authorization server is, as discovery found it.
struct Issuer {
    issuer: Url,
    /// The resource indicator to send (RFC 8707).
    resource_id: String,
    /// The scopes its protected-resource metadata lists.
    scopes_supported: Vec<String>,
    /// No protected-resource metadata: a 2025-03-26 server.
    legacy: bool,
}

/// An authorization server endpoint's answer: its status and its JSON body
/// (read bounded), or why there is none; `what` names the endpoint.
pub(super) async fn json_answer(
    response: reqwest::Response,
    what: &str,
) -> Result<(reqwest::StatusCode, Value), String> {
    let status = response.status();
    let body = read_body(response).await.map_err(|e| format!("{what}: {e}"))?;
    let body = serde_json::from_slice(&body).map_err(|_| format!("{what} answered {status} with no JSON"))?;
    Ok((status, body))
}

/// What an endpoint that refused said (`error_description`, else `error`),
/// made safe to log; `None` when it did not refuse.
pub(super) fn refusal(status: reqwest::StatusCode, body: &Value) -> Option<String> {
    if status.is_success() {
        return None;
    }
    let said = body.get("error_description").or_else(|| body.get("error")).and_then(Value::as_str);
    Some(crate::tool::log_safe(said.unwrap_or("no reason given")).into_owned())
}

/// A successful token response's bearer access token and its lifetime in
/// seconds, when given (both flows: client credentials and login).
pub(super) fn bearer_token<'a>(
    body: &'a Value,
    url: &impl std::fmt::Display,
) -> Result<(&'a str, Option<u64>), String> {
    let token = body["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("token endpoint {url} sent no access_token"))?;
    if let Some(kind) = body["token_type"].as_str()
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(format!("token endpoint {url} sent a {kind:?} token; toolhost sends bearer tokens only"));
    }
    let seconds = match &body["expires_in"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    };
    Ok((token, seconds))
}

/// Follows at most 5 redirects, and only within the origin (scheme, host and
/// port) that was asked: the arguments of a call never reach a host the
/// operator did not configure.
pub(super) fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt.previous().first().is_some_and(|first| {
            first.scheme() == attempt.url().scheme()
                && first.host_str() == attempt.url().host_str()
                && first.port_or_known_default() == attempt.url().port_or_known_default()
        });
        if !same {
            let to = attempt.url().origin().ascii_serialization();
            attempt.error(format!("refused a redirect to another origin ({to})"))
        } else if attempt.previous().len() > 5 {
            attempt.error("more than 5 redirects")
        } else {
            attempt.follow()
        }
    })
}

#[cfg(test)]
mod tests;
