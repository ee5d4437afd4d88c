//! `toolhost auth login`: the OAuth 2.1 authorization-code flow with PKCE
//! (S256) for a streamable-HTTP server, where a human is present.
//!
//! 1. Discovery as for client credentials (`oauth.rs`): the server's `401`
//!    names its protected-resource metadata, whose authorization server's
//!    metadata gives the authorization, token and registration endpoints.
//! 2. The client id: the configured `auth.oauth.client_id` (with its secret,
//!    if any); else a client ID metadata document URL
//!    (`auth.oauth.client_metadata_url`) when the authorization server
//!    supports them; else dynamic client registration (RFC 7591).
//! 3. A redirect listener on `127.0.0.1` (an ephemeral port) and a random
//!    `state`; the authorization URL (`code_challenge`, S256, `resource`,
//!    `scope`, `redirect_uri`, `state`) is shown to the user.
//! 4. The redirect's `code` (its `state` must match; an `error` ends the
//!    login) is exchanged with the `code_verifier` and `resource` at the
//!    token endpoint, the client authenticating as the authorization
//!    server's `token_endpoint_auth_methods_supported` allows (none, basic
//!    or post).
//! 5. The tokens are stored in `<state dir>/oauth/<server>.json` (0600, in
//!    a 0700 directory); the server's supervisor sends the access token and
//!    refreshes it with the refresh token when it expires or is refused.
//!
//! Tokens and secrets never reach a log, an error or `auth status`. The
//! access token goes only to the server's origin (`oauth.rs`); the refresh
//! token, code and client secret only to the token endpoint.

use super::oauth::{LoginMetadata, Refusal, TokenSource};
use crate::config::{McpServerConfig, OAuthConfig, Transport};
use base64::Engine as _;
use reqwest::Url;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The redirect listener's path.
const REDIRECT_PATH: &str = "/callback";
/// How long one request (probe, registration, token) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// A token this close to its expiry is refreshed first.
const EXPIRY_MARGIN: u64 = 30;
/// The largest stored login read.
const MAX_LOGIN_BYTES: usize = 256 * 1024;

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn random(n: usize) -> Result<String, String> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| format!("no randomness: {e}"))?;
    Ok(b64url(&b))
}

/// Why a sign-in (`toolhost auth login`), or reading or removing a stored
/// one, failed: what went wrong, in words for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LoginError(pub String);

impl From<String> for LoginError {
    fn from(message: String) -> LoginError {
        LoginError(message)
    }
}

/// A PKCE code verifier (RFC 7636 §4.1): 32 random bytes, base64url, 43
/// characters of `[A-Za-z0-9-_]`.
pub(crate) fn pkce_verifier() -> Result<String, String> {
    random(32)
}

/// The S256 code challenge of `verifier`: base64url(SHA-256(verifier)).
pub fn pkce_challenge(verifier: &str) -> String {
    b64url(&Sha256::digest(verifier.as_bytes()))
}

/// The `code` of the redirect's query, if its `state` is `expected` and it
/// carries no `error`.
pub(crate) fn check_redirect(query: &str, expected: &str) -> Result<String, String> {
    let params: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    if let Some(e) = params.get("error") {
        let said = params.get("error_description").map(|d| format!(": {d}")).unwrap_or_default();
        return Err(format!(
            "the authorization server refused the sign-in ({}{})",
            crate::tool::log_safe(e),
            crate::tool::log_safe(&said)
        ));
    }
    match params.get("state") {
        Some(s) if s == expected => {}
        Some(_) => return Err("the redirect's state does not match this login's: refused (a forged redirect?)".into()),
        None => return Err("the redirect carries no state: refused".into()),
    }
    params
        .get("code")
        .filter(|c| !c.is_empty())
        .cloned()
        .ok_or_else(|| "the redirect carries no authorization code".to_string())
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// One server's stored login.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct StoredLogin {
    /// The server's configured URL when it signed in.
    pub server_url: String,
    /// The `resource` parameter.
    pub resource: String,
    /// The authorization server.
    pub issuer: String,
    /// Where tokens are refreshed.
    pub token_endpoint: String,
    /// The client id (registered, configured or a metadata document URL).
    pub client_id: String,
    /// The client secret, when the client has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// `none`, `client_secret_basic` or `client_secret_post`.
    pub auth_method: String,
    /// The access token.
    pub access_token: String,
    /// The refresh token, if one was issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires (Unix seconds), if said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The scopes asked for.
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for StoredLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredLogin")
            .field("server_url", &self.server_url)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// What `toolhost auth status` shows of a stored login: never a secret.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoginStatus {
    /// The server's name.
    pub server: String,
    /// The URL it signed in to.
    pub server_url: String,
    /// The authorization server.
    pub issuer: String,
    /// When the access token expires (Unix seconds), if said.
    pub expires_at: Option<u64>,
    /// Whether a refresh token is stored.
    pub refreshable: bool,
    /// The scopes asked for.
    pub scopes: Vec<String>,
}

/// Where the logins of a state directory are kept.
pub fn store_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("oauth")
}

fn record_path(state_dir: &Path, server: &str) -> Result<PathBuf, String> {
    if server.is_empty() || !server.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(format!("{server:?} is not a server name"));
    }
    Ok(store_dir(state_dir).join(format!("{server}.json")))
}

/// The stored login of `server`, if any.
pub fn load(state_dir: &Path, server: &str) -> Result<Option<StoredLogin>, LoginError> {
    Ok(load_text(state_dir, server)?)
}

fn load_text(state_dir: &Path, server: &str) -> Result<Option<StoredLogin>, String> {
    let path = record_path(state_dir, server)?;
    match crate::runtime::private::read_state(&path, MAX_LOGIN_BYTES) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: not a stored login ({e}); run `toolhost auth login {server}`", path.display())),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn save(state_dir: &Path, server: &str, login: &StoredLogin) -> Result<(), String> {
    let path = record_path(state_dir, server)?;
    crate::runtime::private::create_dirs(&store_dir(state_dir)).map_err(|e| format!("{}: {e}", path.display()))?;
    let json = serde_json::to_vec_pretty(login).map_err(|e| e.to_string())?;
    crate::runtime::private::write_private(&path, &json).map_err(|e| format!("{}: {e}", path.display()))
}

/// Deletes `server`'s stored login; whether there was one.
pub fn remove(state_dir: &Path, server: &str) -> Result<bool, LoginError> {
    Ok(remove_text(state_dir, server)?)
}

fn remove_text(state_dir: &Path, server: &str) -> Result<bool, String> {
    let path = record_path(state_dir, server)?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Every stored login, by server name.
pub fn status(state_dir: &Path) -> Vec<LoginStatus> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(store_dir(state_dir)) else { return out };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(server) = name.strip_suffix(".json") else { continue };
        if let Ok(Some(l)) = load(state_dir, server) {
            out.push(LoginStatus {
                server: server.to_string(),
                server_url: l.server_url,
                issuer: l.issuer,
                expires_at: l.expires_at,
                refreshable: l.refresh_token.is_some(),
                scopes: l.scopes,
            });
        }
    }
    out.sort_by(|a, b| a.server.cmp(&b.server));
    out
}

/// What a token endpoint answered.
struct Tokens {
    access: String,
    refresh: Option<String>,
    expires_in: Option<u64>,
}

/// A token request (authorization code or refresh) with the client's
/// authentication.
async fn token_request(
    client: &reqwest::Client,
    url: &str,
    auth_method: &str,
    client_id: &str,
    client_secret: Option<&str>,
    mut pairs: Vec<(&str, String)>,
) -> Result<Tokens, String> {
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(REQUEST_TIMEOUT);
    match (auth_method, client_secret) {
        ("client_secret_basic", Some(secret)) => {
            request = request.header(reqwest::header::AUTHORIZATION, super::oauth::basic_auth(client_id, secret));
        }
        ("client_secret_post", Some(secret)) => {
            pairs.push(("client_id", client_id.to_string()));
            pairs.push(("client_secret", secret.to_string()));
        }
        _ => pairs.push(("client_id", client_id.to_string())),
    }
    // What was sent that a server could echo back in its refusal: every
    // value but the grant type, the redirect URI and the resource.
    let secrets: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| !matches!(*k, "grant_type" | "redirect_uri" | "resource" | "client_id"))
        .map(|(_, v)| v.clone())
        .collect();
    let form = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
    let response = request.body(form).send().await.map_err(|e| format!("token endpoint {url}: {e}"))?;
    let (status, body) = super::oauth::json_answer(response, &format!("token endpoint {url}")).await?;
    if let Some(said) = super::oauth::refusal(status, &body) {
        let mut secrets = secrets;
        secrets.extend(client_secret.map(String::from));
        let said = super::oauth::redacted(said, &secrets);
        return Err(format!("token endpoint {url} refused ({status}): {said}"));
    }
    let (access, expires_in) = super::oauth::bearer_token(&body, &url)?;
    Ok(Tokens {
        access: access.to_string(),
        refresh: body["refresh_token"].as_str().filter(|t| !t.is_empty()).map(String::from),
        expires_in,
    })
}

/// How the client authenticates at the token endpoint, from the
/// authorization server's `token_endpoint_auth_methods_supported`.
fn choose_auth(methods: &[String], has_secret: bool) -> Result<&'static str, String> {
    let offers = |m: &str| methods.iter().any(|x| x == m);
    if !has_secret {
        return if methods.is_empty() || offers("none") {
            Ok("none")
        } else {
            Err(format!(
                "the authorization server takes only {} at its token endpoint, and this client has no secret (set auth.oauth.client_secret)",
                methods.join(", ")
            ))
        };
    }
    if methods.is_empty() || offers("client_secret_basic") {
        Ok("client_secret_basic")
    } else if offers("client_secret_post") {
        Ok("client_secret_post")
    } else if offers("none") {
        Ok("none")
    } else {
        Err(format!(
            "the authorization server takes only {} at its token endpoint; toolhost authenticates with none, client_secret_basic or client_secret_post",
            methods.join(", ")
        ))
    }
}

/// How a login goes: the browser side is the caller's.
pub struct LoginOptions {
    /// How long to wait for the redirect.
    pub timeout: Duration,
    /// Shows the authorization URL to the user (prints it, opens a browser).
    pub show_url: Box<dyn FnOnce(&str) + Send>,
}

/// Signs in to `server` with the authorization-code flow and stores its
/// tokens under `state_dir`.
pub async fn login(
    server: &McpServerConfig,
    state_dir: &Path,
    options: LoginOptions,
) -> Result<StoredLogin, LoginError> {
    Ok(login_text(server, state_dir, options).await?)
}

async fn login_text(server: &McpServerConfig, state_dir: &Path, options: LoginOptions) -> Result<StoredLogin, String> {
    let name = &server.name;
    if server.transport != Transport::StreamableHttp {
        return Err(format!("{name} is not a streamable-http server: there is nothing to sign in to"));
    }
    let server_url = server.url.clone().ok_or_else(|| format!("{name} has no `url`"))?;
    record_path(state_dir, name)?;
    let oauth = server.auth.as_ref().and_then(|a| a.oauth.clone()).unwrap_or(OAuthConfig {
        client_id: String::new(),
        client_secret: String::new(),
        token_url: None,
        scopes: Vec::new(),
        ..OAuthConfig::default()
    });
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .redirect(super::oauth::same_origin_redirects())
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;

    // The server's challenge starts discovery.
    let probe = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "toolhost", "version": env!("CARGO_PKG_VERSION")}},
    });
    let answer = client
        .post(&server_url)
        .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
        .json(&probe)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("{server_url}: {e}"))?;
    let challenge = answer
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(", ");
    drop(answer);
    let discovery = TokenSource::new(oauth.clone(), &server_url, client.clone())?;
    let meta: LoginMetadata = discovery.discover_login(&challenge).await?;

    let authorization = Authorization::start().await?;
    let redirect_uri = authorization.redirect_uri.clone();

    // The client id.
    let (client_id, client_secret, auth_method) = if !oauth.client_id.is_empty() {
        let secret = Some(oauth.client_secret.clone()).filter(|s| !s.is_empty());
        let method = choose_auth(&meta.auth_methods, secret.is_some())?;
        (oauth.client_id.clone(), secret, method.to_string())
    } else if let Some(doc) = oauth.client_metadata_url.clone().filter(|_| meta.cimd) {
        (doc, None, "none".to_string())
    } else if let Some(registration) = &meta.registration_endpoint {
        register(&client, registration, &redirect_uri, &meta.auth_methods).await?
    } else {
        return Err(format!(
            "the authorization server {} offers no dynamic client registration: configure auth.oauth.client_id (registered with it, redirect URI http://127.0.0.1/callback on any port){}",
            meta.issuer,
            if meta.cimd { " or auth.oauth.client_metadata_url" } else { "" }
        ));
    };

    let authorize = authorization.url(&meta.authorization_endpoint, &client_id, &meta.resource, &meta.scopes);
    (options.show_url)(authorize.as_str());
    let code = tokio::time::timeout(options.timeout, authorization.redirect()).await.map_err(|_| {
        format!("no sign-in came back within {} s (the redirect to {redirect_uri})", options.timeout.as_secs())
    })??;
    let pairs = authorization.token_pairs(code, &meta.resource);
    let tokens =
        token_request(&client, meta.token_endpoint.as_str(), &auth_method, &client_id, client_secret.as_deref(), pairs)
            .await?;
    let stored = StoredLogin {
        server_url,
        resource: meta.resource,
        issuer: meta.issuer,
        token_endpoint: meta.token_endpoint.to_string(),
        client_id,
        client_secret,
        auth_method,
        access_token: tokens.access,
        refresh_token: tokens.refresh,
        expires_at: tokens.expires_in.map(|s| now() + s),
        scopes: meta.scopes,
    };
    save(state_dir, name, &stored)?;
    tracing::info!(server = %name, issuer = %stored.issuer, "signed in");
    Ok(stored)
}

/// One authorization request's own parts: the loopback listener its
/// redirect comes back to, the PKCE verifier and the `state`.
struct Authorization {
    listener: tokio::net::TcpListener,
    redirect_uri: String,
    verifier: String,
    state: String,
}

impl Authorization {
    /// Listens on 127.0.0.1 (an ephemeral port) and draws the secrets.
    async fn start() -> Result<Authorization, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("the redirect listener on 127.0.0.1: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let redirect_uri = format!("http://127.0.0.1:{port}{REDIRECT_PATH}");
        Ok(Authorization { listener, redirect_uri, verifier: pkce_verifier()?, state: random(24)? })
    }

    /// The URL the person opens: PKCE S256, `state`, `resource`, the scopes.
    fn url(&self, endpoint: &reqwest::Url, client_id: &str, resource: &str, scopes: &[String]) -> reqwest::Url {
        let mut url = endpoint.clone();
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", client_id)
                .append_pair("redirect_uri", &self.redirect_uri)
                .append_pair("code_challenge", &pkce_challenge(&self.verifier))
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", &self.state)
                .append_pair("resource", resource);
            if !scopes.is_empty() {
                q.append_pair("scope", &scopes.join(" "));
            }
        }
        url
    }

    /// The code the redirect brings (unbounded: the caller times it).
    async fn redirect(&self) -> Result<String, String> {
        wait_for_redirect(&self.listener, &self.state).await
    }

    /// The token request's form for `code`.
    fn token_pairs(&self, code: String, resource: &str) -> Vec<(&'static str, String)> {
        vec![
            ("grant_type", "authorization_code".to_string()),
            ("code", code),
            ("redirect_uri", self.redirect_uri.clone()),
            ("code_verifier", self.verifier.clone()),
            ("resource", resource.to_string()),
        ]
    }
}

/// Dynamic client registration (RFC 7591): a native client with the
/// loopback redirect URI. Returns the id, the secret and the auth method.
async fn register(
    client: &reqwest::Client,
    endpoint: &Url,
    redirect_uri: &str,
    methods: &[String],
) -> Result<(String, Option<String>, String), String> {
    let offers = |m: &str| methods.iter().any(|x| x == m);
    let wanted = if offers("none") {
        "none"
    } else if methods.is_empty() || offers("client_secret_basic") {
        "client_secret_basic"
    } else if offers("client_secret_post") {
        "client_secret_post"
    } else {
        return Err(format!(
            "the authorization server takes only {} at its token endpoint; toolhost authenticates with none, client_secret_basic or client_secret_post",
            methods.join(", ")
        ));
    };
    let body = serde_json::json!({
        "client_name": "toolhost",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": wanted,
    });
    let response = client
        .post(endpoint.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .json(&body)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("registration endpoint {endpoint}: {e}"))?;
    let (status, body) = super::oauth::json_answer(response, &format!("registration endpoint {endpoint}")).await?;
    if let Some(said) = super::oauth::refusal(status, &body) {
        return Err(format!("registration endpoint {endpoint} refused ({status}): {said}"));
    }
    let id = body["client_id"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("registration endpoint {endpoint} sent no client_id"))?;
    let secret = body["client_secret"].as_str().filter(|s| !s.is_empty()).map(String::from);
    let method = match body["token_endpoint_auth_method"].as_str() {
        Some(m @ ("none" | "client_secret_basic" | "client_secret_post")) => m.to_string(),
        Some(other) => {
            return Err(format!(
                "registration endpoint {endpoint} registered toolhost for {other:?}; toolhost authenticates with none, client_secret_basic or client_secret_post"
            ));
        }
        None if wanted != "none" && secret.is_none() => {
            return Err(format!("registration endpoint {endpoint} issued no client_secret for {wanted}"));
        }
        None => wanted.to_string(),
    };
    Ok((id.to_string(), secret, method))
}

/// Answers requests on the redirect listener until one to
/// [`REDIRECT_PATH`] comes: its authorization code, or why it is refused
/// (an `error`, a `state` that is not this login's: the login ends).
async fn wait_for_redirect(listener: &tokio::net::TcpListener, state: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        let (mut stream, _) = listener.accept().await.map_err(|e| format!("the redirect listener: {e}"))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 2048];
        let head = loop {
            // Short: connections are served one at a time, and an idle one
            // (another local user's) must not hold the sign-in up.
            let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut chunk)).await;
            match read {
                Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => break None,
            }
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                break Some(String::from_utf8_lossy(&buf).into_owned());
            }
            if buf.len() > 16 * 1024 {
                break None;
            }
        };
        let Some(head) = head else { continue };
        let target = head.lines().next().and_then(|l| l.split_whitespace().nth(1)).unwrap_or_default();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if path != REDIRECT_PATH {
            let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            continue;
        }
        // Anyone on this machine can reach the port: a redirect that does
        // not carry this sign-in's state is answered and ignored, so it
        // cannot end the sign-in.
        let ours = url::form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "state" && v == state);
        if !ours {
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 24\r\nconnection: close\r\n\r\nnot this sign-in's state")
                .await;
            continue;
        }
        let result = check_redirect(query, state);
        let text = match &result {
            Ok(_) => "Signed in: toolhost has the authorization code. You can close this window.".to_string(),
            Err(e) => format!("Sign-in failed: {e}"),
        };
        let page = format!(
            "HTTP/1.1 {}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            if result.is_ok() { "200 OK" } else { "400 Bad Request" },
            text.len()
        );
        let _ = stream.write_all(page.as_bytes()).await;
        let _ = stream.shutdown().await;
        return result;
    }
}

/// The stored login of one server, as its supervisor uses it.
pub(super) struct LoginTokens {
    server: String,
    state_dir: PathBuf,
    client: reqwest::Client,
    record: tokio::sync::Mutex<StoredLogin>,
}

impl std::fmt::Debug for LoginTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginTokens").field("server", &self.server).finish_non_exhaustive()
    }
}

impl LoginTokens {
    /// The stored login of `server` (configured at `url`), if any.
    pub(super) fn load(
        state_dir: &Path,
        server: &str,
        url: &str,
        client: reqwest::Client,
    ) -> Result<Option<LoginTokens>, String> {
        let Some(record) = load_text(state_dir, server)? else { return Ok(None) };
        if record.server_url != url {
            return Err(format!(
                "the stored login of {server} is for {}, not {url}: run `toolhost auth login {server}`",
                record.server_url
            ));
        }
        Ok(Some(LoginTokens {
            server: server.to_string(),
            state_dir: state_dir.to_path_buf(),
            client,
            record: tokio::sync::Mutex::new(record),
        }))
    }

    fn relogin(&self, why: &str) -> String {
        format!("{why}; run `toolhost auth login {}`", self.server)
    }

    /// The access token, refreshed first when it is about to expire.
    async fn current_token(&self) -> Result<String, String> {
        let mut record = self.record.lock().await;
        if record.expires_at.is_none_or(|at| now() + EXPIRY_MARGIN < at) {
            return Ok(record.access_token.clone());
        }
        self.refresh(&mut record).await?;
        Ok(record.access_token.clone())
    }

    /// After the server refused `sent`: a refreshed token on a `401`. On a
    /// `403 insufficient_scope`, a new sign-in with the scopes added when
    /// `show` can show its URL to the person behind the call; otherwise an
    /// error asking for a new login.
    async fn after_refusal(
        &self,
        sent: Option<&str>,
        refusal: Refusal,
        challenge: &str,
        show: Option<super::oauth::ShowUrl>,
    ) -> Result<String, String> {
        if refusal == Refusal::InsufficientScope {
            let wanted: Vec<String> = challenge
                .split("scope=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .map(|s| s.split_whitespace().map(String::from).collect())
                .unwrap_or_default();
            let Some(show) = show else {
                let wanted = crate::tool::log_safe(&wanted.join(" ")).into_owned();
                return Err(self.relogin(&format!(
                    "the server wants more scope ({wanted}) than the stored login of {} has (set auth.oauth.scopes)",
                    self.server
                )));
            };
            return self.step_up(challenge, wanted, show).await;
        }
        let mut record = self.record.lock().await;
        if Some(record.access_token.as_str()) != sent {
            return Ok(record.access_token.clone());
        }
        self.refresh(&mut record).await?;
        Ok(record.access_token.clone())
    }

    /// Signs in again with the stored client, asking for its scopes and
    /// `wanted`: the authorization URL goes to the person behind the call
    /// (`show`), the code comes back to a loopback listener, and the new
    /// tokens are stored. The login's lock is not held meanwhile: other
    /// calls go on with the old token.
    async fn step_up(
        &self,
        challenge: &str,
        wanted: Vec<String>,
        show: super::oauth::ShowUrl,
    ) -> Result<String, String> {
        let record = self.record.lock().await.clone();
        let mut scopes = record.scopes.clone();
        scopes.extend(wanted.into_iter().filter(|w| !record.scopes.contains(w)));
        let discovery = TokenSource::new(OAuthConfig::default(), &record.server_url, self.client.clone())?;
        let meta = discovery.discover_login(challenge).await?;
        let authorization = Authorization::start().await?;
        let authorize = authorization.url(&meta.authorization_endpoint, &record.client_id, &record.resource, &scopes);
        tracing::info!(server = %self.server, scopes = %scopes.join(" "), "the server wants more scope: asking the caller to sign in again");
        let url = authorize.to_string();
        let ask = show.show.clone();
        let mut shown = Some(tokio::task::spawn_blocking(move || ask(&url)));
        let redirect = tokio::time::timeout(show.wait, authorization.redirect());
        tokio::pin!(redirect);
        let code = loop {
            tokio::select! {
                r = &mut redirect => break r.map_err(|_| format!("no sign-in came back within {} s", show.wait.as_secs())),
                r = async { shown.as_mut().expect("polled while set").await }, if shown.is_some() => {
                    shown = None;
                    match r {
                        Ok(Ok(())) => {}
                        Ok(Err(why)) => return Err(self.relogin(&format!("signing in again with more scope: {why}"))),
                        Err(e) => return Err(e.to_string()),
                    }
                }
            }
        };
        let pairs = authorization.token_pairs(code??, &record.resource);
        let endpoint = meta.token_endpoint.to_string();
        let tokens = token_request(
            &self.client,
            &endpoint,
            &record.auth_method,
            &record.client_id,
            record.client_secret.as_deref(),
            pairs,
        )
        .await?;
        let mut stored = self.record.lock().await;
        stored.access_token = tokens.access;
        if tokens.refresh.is_some() {
            stored.refresh_token = tokens.refresh;
        }
        stored.expires_at = tokens.expires_in.map(|s| now() + s);
        stored.scopes = scopes;
        stored.token_endpoint = endpoint;
        if let Err(e) = save(&self.state_dir, &self.server, &stored) {
            tracing::warn!(server = %self.server, "keeping the new login failed: {e}");
        }
        tracing::info!(server = %self.server, "signed in again with more scope");
        Ok(stored.access_token.clone())
    }

    async fn refresh(&self, record: &mut StoredLogin) -> Result<(), String> {
        let Some(refresh) = record.refresh_token.clone() else {
            return Err(self.relogin(&format!(
                "the stored login of {} has expired or was refused, and it has no refresh token",
                self.server
            )));
        };
        let pairs = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh),
            ("resource", record.resource.clone()),
        ];
        let tokens = token_request(
            &self.client,
            &record.token_endpoint,
            &record.auth_method,
            &record.client_id,
            record.client_secret.as_deref(),
            pairs,
        )
        .await
        .map_err(|e| self.relogin(&format!("refreshing the stored login of {} failed ({e})", self.server)))?;
        record.access_token = tokens.access;
        if tokens.refresh.is_some() {
            record.refresh_token = tokens.refresh;
        }
        record.expires_at = tokens.expires_in.map(|s| now() + s);
        if let Err(e) = save(&self.state_dir, &self.server, record) {
            tracing::warn!(server = %self.server, "keeping the refreshed login failed: {e}");
        }
        tracing::debug!(server = %self.server, "refreshed the stored login's access token");
        Ok(())
    }
}

impl super::oauth::StoredTokens for LoginTokens {
    fn current(&self) -> futures::future::BoxFuture<'_, Result<String, String>> {
        Box::pin(self.current_token())
    }

    fn refused<'a>(
        &'a self,
        sent: Option<&'a str>,
        refusal: Refusal,
        challenge: &'a str,
        show: Option<super::oauth::ShowUrl>,
    ) -> futures::future::BoxFuture<'a, Result<String, String>> {
        Box::pin(self.after_refusal(sent, refusal, challenge, show))
    }
}

#[cfg(test)]
mod tests;
