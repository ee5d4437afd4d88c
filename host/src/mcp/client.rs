//! External MCP servers behind the one registry.
//!
//! Each configured server gets a supervisor task on the async runtime. It
//! connects (a child process over stdio, or streamable HTTP with a static
//! bearer token or OAuth 2.1 client credentials), lists the server's tools
//! and registers them as one provider named after the server. While the
//! connection lives, calls go straight to it; when it drops, the server's
//! tools are marked unavailable (hidden from listings, calls answered with
//! `unavailable`) and the supervisor reconnects with exponential backoff.
//! The other providers are never affected.
//!
//! Tool names: a server's tool keeps its own name unless another provider
//! already has a tool of that name; then it is registered as
//! `<server>.<tool>`. Nothing is ever overwritten. Servers connect in
//! parallel but register their first tool list in the order they were added
//! (config order), so who gets a contested bare name does not depend on
//! which server happened to start faster.
//!
//! Calls are synchronous from the host's point of view ([`Provider::call`]):
//! they block the calling thread (never an async worker) on the runtime that
//! owns the connection. Each call has a deadline; when it passes, the
//! request is abandoned and `notifications/cancelled` is sent to the server.

use crate::Host;
use crate::config::{McpServerConfig, OAuthConfig, Transport};
use crate::tool::{CallContext, CallError, CallStats, Content, Provider, ResourceBody, ToolDef, ToolMeta, ToolOutput};
use crate::validate::Validator;
use base64::Engine as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ContentBlock, ErrorCode, ResourceContents, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Deadline of a call when the budget gave none.
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting (spawn or HTTP, then `initialize` and `tools/list`) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// First reconnect delay; doubles per failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// Longest reconnect delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why an external server could not be added or removed.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is incomplete or contradictory.
    #[error("MCP server {name:?}: {reason}")]
    Config {
        /// Server name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A server of that name is already configured.
    #[error("an MCP server named {0:?} is already configured")]
    Duplicate(String),
    /// No server of that name.
    #[error("no MCP server named {0:?}")]
    Unknown(String),
    /// A provider (a wasm plugin) already has that name.
    #[error("the name {0:?} is taken by a plugin")]
    NameTaken(String),
}

/// What a server's supervisor is doing, for listings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServerStatus {
    /// Server name.
    pub name: String,
    /// `stdio` or `streamable-http`.
    pub transport: &'static str,
    /// `connecting`, `up` or `down`.
    pub state: &'static str,
    /// The last connection error, if any.
    pub last_error: Option<String>,
    /// Successful connections so far (a value above 1 means it reconnected).
    pub connections: u32,
    /// Tools registered (exposed names).
    pub tools: Vec<String>,
}

/// The external servers of one host: adds, removes and supervises them.
#[derive(Debug)]
pub struct ExternalServers {
    host: Arc<Host>,
    rt: tokio::runtime::Handle,
    servers: Mutex<HashMap<String, Arc<Server>>>,
    /// The server added last: the next one registers after it.
    last: Mutex<Option<Arc<Server>>>,
}

impl ExternalServers {
    /// A manager for `host`, running connections on `rt`.
    pub fn new(host: Arc<Host>, rt: tokio::runtime::Handle) -> Arc<ExternalServers> {
        Arc::new(ExternalServers { host, rt, servers: Mutex::new(HashMap::new()), last: Mutex::new(None) })
    }

    /// Starts supervising a server. Returns at once; use
    /// [`ExternalServers::wait_ready`] to wait for its first connection.
    pub fn add(&self, cfg: McpServerConfig) -> Result<(), ServerError> {
        check(&cfg)?;
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        if servers.contains_key(&cfg.name) {
            return Err(ServerError::Duplicate(cfg.name));
        }
        if let Some(p) = self.host.registry().snapshot().provider(&cfg.name)
            && p.kind() != "mcp"
        {
            return Err(ServerError::NameTaken(cfg.name));
        }
        let server = Arc::new(Server {
            cfg,
            rt: self.rt.clone(),
            peer: Mutex::new(None),
            available: AtomicBool::new(false),
            attempted: AtomicBool::new(false),
            attempted_notify: Notify::new(),
            connections: AtomicU32::new(0),
            last_error: Mutex::new(None),
            stop: CancellationToken::new(),
            relist: Notify::new(),
            exposed: Mutex::new(Vec::new()),
        });
        servers.insert(server.cfg.name.clone(), server.clone());
        let previous = self.last.lock().unwrap_or_else(|p| p.into_inner()).replace(server.clone());
        let host = self.host.clone();
        self.rt.spawn(supervise(host, server, previous));
        Ok(())
    }

    /// Stops a server: its connection is closed (a child process is
    /// killed) and its tools leave the registry. Calls in flight fail with
    /// `unavailable`.
    pub fn remove(&self, name: &str) -> Result<(), ServerError> {
        let server = self
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name)
            .ok_or_else(|| ServerError::Unknown(name.to_string()))?;
        server.stop.cancel();
        server.available.store(false, Ordering::Release);
        let _ = self.host.registry().remove(name);
        Ok(())
    }

    /// Waits until every server has finished its first connection attempt
    /// (successful or not), or `timeout` passes.
    pub fn wait_ready(&self, timeout: Duration) {
        let servers: Vec<Arc<Server>> =
            self.servers.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let deadline = Instant::now() + timeout;
        for s in servers {
            let left = deadline.saturating_duration_since(Instant::now());
            let _ = block_on(&self.rt, async { tokio::time::timeout(left, s.first_attempt()).await });
        }
    }

    /// The status of every server, sorted by name.
    pub fn status(&self) -> Vec<ServerStatus> {
        let mut out: Vec<ServerStatus> =
            self.servers.lock().unwrap_or_else(|p| p.into_inner()).values().map(|s| s.status()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Stops every server.
    pub fn shutdown(&self) {
        let names: Vec<String> = self.servers.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        for n in names {
            let _ = self.remove(&n);
        }
    }
}

impl Drop for ExternalServers {
    fn drop(&mut self) {
        for s in self.servers.get_mut().unwrap_or_else(|p| p.into_inner()).values() {
            s.stop.cancel();
        }
    }
}

/// Runs `f` to completion on `rt` from synchronous code; from inside async
/// code it steps out of the worker first (`block_in_place`).
fn block_on<F: Future>(rt: &tokio::runtime::Handle, f: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::task::block_in_place(|| rt.block_on(f)),
        Err(_) => rt.block_on(f),
    }
}

fn check(cfg: &McpServerConfig) -> Result<(), ServerError> {
    let bad = |reason: &str| Err(ServerError::Config { name: cfg.name.clone(), reason: reason.to_string() });
    if cfg.name.is_empty() || !cfg.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return bad("the name must be letters, digits, '-' or '_'");
    }
    match cfg.transport {
        Transport::Stdio if cfg.command.as_deref().is_none_or(|c| c.trim().is_empty()) => {
            bad("transport stdio needs `command`")
        }
        Transport::StreamableHttp => match cfg.url.as_deref() {
            None => bad("transport streamable-http needs `url`"),
            Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                bad("`url` must start with http:// or https://")
            }
            Some(_) => Ok(()),
        },
        Transport::Stdio => Ok(()),
    }
}

/// One supervised server: shared by its supervisor task and its provider.
#[derive(Debug)]
struct Server {
    cfg: McpServerConfig,
    rt: tokio::runtime::Handle,
    peer: Mutex<Option<Peer<RoleClient>>>,
    available: AtomicBool,
    attempted: AtomicBool,
    attempted_notify: Notify,
    connections: AtomicU32,
    last_error: Mutex<Option<String>>,
    stop: CancellationToken,
    relist: Notify,
    exposed: Mutex<Vec<String>>,
}

impl Server {
    fn status(&self) -> ServerStatus {
        let up = self.available.load(Ordering::Acquire);
        ServerStatus {
            name: self.cfg.name.clone(),
            transport: match self.cfg.transport {
                Transport::Stdio => "stdio",
                Transport::StreamableHttp => "streamable-http",
            },
            state: if up {
                "up"
            } else if self.attempted.load(Ordering::Acquire) {
                "down"
            } else {
                "connecting"
            },
            last_error: self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            connections: self.connections.load(Ordering::Relaxed),
            tools: self.exposed.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    fn set_error(&self, e: String) {
        tracing::warn!(server = %self.cfg.name, "{e}");
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    fn mark_attempted(&self) {
        self.attempted.store(true, Ordering::Release);
        self.attempted_notify.notify_waiters();
    }
}

/// Receives the server's notifications: a changed tool list triggers a re-list.
#[derive(Clone)]
struct Handler {
    server: Arc<Server>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.server.relist.notify_one();
    }
}

type Running = RunningService<RoleClient, Handler>;

impl Server {
    /// Waits (bounded) until this server's first connection attempt is over.
    async fn first_attempt(&self) {
        let wait = async {
            loop {
                let notified = self.attempted_notify.notified();
                if self.attempted.load(Ordering::Acquire) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(CONNECT_TIMEOUT, wait).await;
    }
}

async fn supervise(host: Arc<Host>, server: Arc<Server>, mut previous: Option<Arc<Server>>) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let attempt = tokio::select! {
            r = tokio::time::timeout(CONNECT_TIMEOUT, connect(&server)) => r,
            () = server.stop.cancelled() => return,
        };
        match attempt {
            Ok(Ok(running)) => {
                backoff = MIN_BACKOFF;
                server.connections.fetch_add(1, Ordering::Relaxed);
                *server.peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(running.peer().clone());
                if let Some(p) = previous.take() {
                    p.first_attempt().await;
                }
                let ok = register(&host, &server).await;
                if ok {
                    // Available before anyone waiting on the first attempt wakes.
                    server.available.store(true, Ordering::Release);
                    *server.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    host.registry().touch();
                }
                server.mark_attempted();
                if ok {
                    run_connected(&host, &server, running).await;
                } else {
                    let _ = running.cancel().await;
                }
                *server.peer.lock().unwrap_or_else(|p| p.into_inner()) = None;
                if server.stop.is_cancelled() {
                    return;
                }
            }
            Ok(Err(e)) => {
                server.set_error(format!("connecting failed: {e}"));
                previous = None;
                server.mark_attempted();
            }
            Err(_) => {
                server.set_error(format!("connecting timed out after {} s", CONNECT_TIMEOUT.as_secs()));
                previous = None;
                server.mark_attempted();
            }
        }
        tracing::info!(server = %server.cfg.name, "reconnecting in {} ms", backoff.as_millis());
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = server.stop.cancelled() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Serves one live connection until it ends or the server is removed.
async fn run_connected(host: &Arc<Host>, server: &Arc<Server>, running: Running) {
    server.available.store(true, Ordering::Release);
    *server.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
    host.registry().touch();
    tracing::info!(server = %server.cfg.name, "connected");
    let mut running = Some(running);
    loop {
        tokio::select! {
            () = server.stop.cancelled() => {
                if let Some(r) = running.take() {
                    let _ = r.cancel().await;
                }
                break;
            }
            () = server.relist.notified() => {
                register(host, server).await;
            }
            // A closed transport (a child that exited, a dropped HTTP
            // session) shows on the service: poll it.
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                let gone = running.as_ref().is_none_or(|r| r.is_closed() || r.peer().is_transport_closed());
                if gone { break; }
            }
        }
    }
    server.available.store(false, Ordering::Release);
    host.registry().touch();
    if !server.stop.is_cancelled() {
        server.set_error("the connection closed".into());
    }
    if let Some(r) = running.take() {
        let _ = r.cancel().await;
    }
}

async fn connect(server: &Arc<Server>) -> Result<Running, String> {
    let cfg = &server.cfg;
    let handler = Handler { server: server.clone() };
    match cfg.transport {
        Transport::Stdio => {
            let line = cfg.command.as_deref().unwrap_or_default();
            let mut parts = line.split_whitespace();
            let program = parts.next().ok_or("empty command")?;
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(parts).envs(&cfg.env).kill_on_drop(true);
            let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("starting `{line}`: {e}"))?;
            if let Some(stderr) = stderr {
                let name = cfg.name.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncBufReadExt as _;
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(l)) = lines.next_line().await {
                        tracing::info!(server = %name, "stderr: {l}");
                    }
                });
            }
            handler.serve(transport).await.map_err(|e| format!("initialize: {e}"))
        }
        Transport::StreamableHttp => {
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let url = cfg.url.clone().unwrap_or_default();
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
            let client = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| format!("HTTP client: {e}"))?;
            let auth = cfg.auth.as_ref();
            if let Some(oauth) = auth.and_then(|a| a.oauth.clone()) {
                let tokens = Arc::new(TokenSource::new(oauth, client.clone()));
                // Fail early, with the token endpoint's own words.
                tokens.bearer().await?;
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                    OAuthHttp { inner: client, tokens },
                    config,
                );
                return handler.serve(transport).await.map_err(|e| format!("initialize at {url}: {e}"));
            }
            if let Some(token) = auth.and_then(|a| a.token.as_deref()) {
                let token = token.strip_prefix("Bearer ").unwrap_or(token).trim();
                config = config.auth_header(token.to_string());
            }
            let transport = rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
            handler.serve(transport).await.map_err(|e| format!("initialize at {url}: {e}"))
        }
    }
}

/// Lists the server's tools and (re)registers them as one provider.
/// Returns false when nothing could be registered.
async fn register(host: &Arc<Host>, server: &Arc<Server>) -> bool {
    let Some(peer) = server.peer.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return false };
    let tools = match tokio::time::timeout(CONNECT_TIMEOUT, peer.list_all_tools()).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            server.set_error(format!("tools/list failed: {e}"));
            return false;
        }
        Err(_) => {
            server.set_error("tools/list timed out".into());
            return false;
        }
    };
    let name = &server.cfg.name;
    let catalog = host.registry().snapshot();
    let mut defs = Vec::new();
    let mut remote = HashMap::new();
    for t in tools {
        let schema = Value::Object((*t.input_schema).clone());
        if let Err(e) = Validator::new(&schema) {
            tracing::warn!(server = %name, tool = %t.name, "skipping a tool with an unusable input schema: {e}");
            continue;
        }
        let own = catalog.get(&t.name).is_none_or(|existing| existing.provider.name() == name.as_str());
        let exposed = if own { t.name.to_string() } else { format!("{name}.{}", t.name) };
        if !own {
            tracing::warn!(server = %name, tool = %t.name, "name taken by another provider; registered as {exposed}");
        }
        if catalog.get(&exposed).is_some_and(|e| e.provider.name() != name.as_str()) {
            tracing::warn!(server = %name, tool = %t.name, "skipping: both {} and {exposed} are taken", t.name);
            continue;
        }
        let meta = t.meta.as_ref().map(|m| Value::Object(m.0.clone())).unwrap_or(Value::Null);
        let declared = |key: &str| {
            meta.get(key)
                .or_else(|| meta.get("toolhost").and_then(|m| m.get(key)))
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
        };
        let annotations = t.annotations.as_ref();
        defs.push(ToolDef {
            name: exposed.clone(),
            description: t.description.as_deref().unwrap_or_default().to_string(),
            input_schema: schema,
            meta: ToolMeta {
                estimated_duration_ms: declared("estimated_duration_ms"),
                max_duration_ms: declared("max_duration_ms"),
                idempotent: annotations.and_then(|a| a.idempotent_hint.or(a.read_only_hint)).unwrap_or(false),
                cacheable_seconds: declared("cacheable_seconds").unwrap_or(0),
            },
            probe_arguments: None,
        });
        remote.insert(exposed, t.name.to_string());
    }
    let exposed: Vec<String> = defs.iter().map(|d| d.name.clone()).collect();
    let provider = Arc::new(McpTools { server: server.clone(), tools: defs, remote });
    match host.registry().upsert(provider) {
        Ok(_) => {
            tracing::info!(server = %name, tools = exposed.len(), "registered");
            *server.exposed.lock().unwrap_or_else(|p| p.into_inner()) = exposed;
            true
        }
        Err(e) => {
            server.set_error(format!("registering its tools failed: {e}"));
            false
        }
    }
}

/// One connection's tools, as a registry provider.
#[derive(Debug)]
struct McpTools {
    server: Arc<Server>,
    tools: Vec<ToolDef>,
    /// Exposed name -> the server's own name.
    remote: HashMap<String, String>,
}

impl Provider for McpTools {
    fn name(&self) -> &str {
        &self.server.cfg.name
    }

    fn kind(&self) -> &'static str {
        "mcp"
    }

    fn tools(&self) -> &[ToolDef] {
        &self.tools
    }

    fn is_available(&self) -> bool {
        self.server.available.load(Ordering::Acquire)
    }

    fn call(&self, tool: &str, arguments: &Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        let started = Instant::now();
        let unavailable = |message: String| CallError::Unavailable { tool: tool.to_string(), message };
        let peer = self.server.peer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(peer) = peer.filter(|_| self.is_available()) else {
            let why = self.server.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(unavailable(format!(
                "MCP server {:?} is not connected ({}); reconnecting",
                self.server.cfg.name,
                why.unwrap_or_else(|| "connecting".into())
            )));
        };
        let remote = self.remote.get(tool).cloned().unwrap_or_else(|| tool.to_string());
        let timeout = ctx.deadline.unwrap_or(DEFAULT_CALL_TIMEOUT);
        let mut params = CallToolRequestParams::new(remote);
        if let Value::Object(o) = arguments {
            params = params.with_arguments(o.clone());
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(timeout);
        let fut = async move { peer.send_request_with_option(request, options).await?.await_response().await };
        let response = block_on(&self.server.rt, fut);
        let result = match response {
            Ok(ServerResult::CallToolResult(r)) => r,
            Ok(other) => {
                return Err(CallError::Failed {
                    tool: tool.to_string(),
                    message: format!("the server answered tools/call with an unexpected result: {other:?}"),
                });
            }
            Err(ServiceError::Timeout { .. }) => {
                return Err(CallError::Timeout {
                    tool: tool.to_string(),
                    limit_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                });
            }
            Err(ServiceError::McpError(e)) if e.code == ErrorCode::INVALID_PARAMS => {
                return Err(CallError::InvalidInput { tool: tool.to_string(), message: e.message.to_string() });
            }
            Err(ServiceError::McpError(e)) => {
                return Err(CallError::Failed {
                    tool: tool.to_string(),
                    message: format!("server error {}: {}", e.code.0, e.message),
                });
            }
            Err(
                e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_) | ServiceError::Cancelled { .. }),
            ) => {
                return Err(unavailable(format!(
                    "MCP server {:?} went away during the call ({e})",
                    self.server.cfg.name
                )));
            }
            Err(e) => return Err(CallError::Failed { tool: tool.to_string(), message: e.to_string() }),
        };
        let content = convert(&result.content, result.structured_content.as_ref());
        if result.is_error == Some(true) {
            let message = content
                .iter()
                .filter_map(|c| if let Content::Text(t) = c { Some(t.as_str()) } else { None })
                .collect::<Vec<_>>()
                .join("\n");
            return Err(CallError::Failed {
                tool: tool.to_string(),
                message: if message.is_empty() { "the tool reported an error".into() } else { message },
            });
        }
        Ok(ToolOutput { content, stats: CallStats { duration: started.elapsed(), ..CallStats::default() } })
    }
}

/// An MCP result as the host's content blocks. Structured content, when the
/// server sent it, becomes a JSON block in place of its text rendering.
fn convert(blocks: &[ContentBlock], structured: Option<&Value>) -> Vec<Content> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_default();
    let mut out: Vec<Content> = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text(t) => Content::Text(t.text.clone()),
            ContentBlock::Image(i) => Content::Image { mime_type: i.mime_type.clone(), data: b64(&i.data) },
            ContentBlock::Audio(a) => Content::Audio { mime_type: a.mime_type.clone(), data: b64(&a.data) },
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, mime_type, text, .. } => Content::Resource {
                    uri: uri.clone(),
                    mime_type: mime_type.clone(),
                    body: ResourceBody::Text(text.clone()),
                },
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => Content::Resource {
                    uri: uri.clone(),
                    mime_type: mime_type.clone(),
                    body: ResourceBody::Blob(b64(blob)),
                },
                other => Content::Text(format!("(unsupported resource contents: {other:?})")),
            },
            ContentBlock::ResourceLink(l) => Content::Text(format!("resource: {}", l.uri)),
            other => Content::Text(format!("(unsupported content block: {other:?})")),
        })
        .collect();
    if let Some(s) = structured
        && let [Content::Text(t)] = &out[..]
        && serde_json::from_str::<Value>(t).ok().as_ref() == Some(s)
    {
        out = vec![Content::Json(s.clone())];
    }
    out
}

/// OAuth 2.1 client credentials: fetches a bearer token and refreshes it
/// before it expires.
#[derive(Debug)]
struct TokenSource {
    cfg: OAuthConfig,
    client: reqwest::Client,
    current: tokio::sync::Mutex<Option<(String, Instant)>>,
}

impl TokenSource {
    fn new(cfg: OAuthConfig, client: reqwest::Client) -> TokenSource {
        TokenSource { cfg, client, current: tokio::sync::Mutex::new(None) }
    }

    /// A valid access token, fetched anew when the cached one is within
    /// 10% of its lifetime (at most 30 s) of expiring.
    async fn bearer(&self) -> Result<String, String> {
        let mut current = self.current.lock().await;
        if let Some((token, refresh_at)) = current.as_ref()
            && Instant::now() < *refresh_at
        {
            return Ok(token.clone());
        }
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if !self.cfg.scopes.is_empty() {
                form.append_pair("scope", &self.cfg.scopes.join(" "));
            }
            form.finish()
        };
        let response = self
            .client
            .post(&self.cfg.token_url)
            .basic_auth(&self.cfg.client_id, Some(&self.cfg.client_secret))
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(form)
            .timeout(Duration::from_secs(15))
            .send()
            .await
            .map_err(|e| format!("token endpoint {}: {e}", self.cfg.token_url))?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| format!("token endpoint answered {status}: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "token endpoint refused the client credentials ({status}): {}",
                body.get("error_description").or_else(|| body.get("error")).unwrap_or(&body)
            ));
        }
        let token = body["access_token"].as_str().ok_or("token endpoint sent no access_token")?.to_string();
        let lifetime = Duration::from_secs(body["expires_in"].as_u64().unwrap_or(3600));
        let margin = (lifetime / 10).min(Duration::from_secs(30));
        *current = Some((token.clone(), Instant::now() + lifetime - margin));
        tracing::debug!(token_url = %self.cfg.token_url, "fetched an OAuth access token for {} s", lifetime.as_secs());
        Ok(token)
    }
}

/// The reqwest client with a fresh OAuth token on every request.
#[derive(Clone)]
struct OAuthHttp {
    inner: reqwest::Client,
    tokens: Arc<TokenSource>,
}

impl OAuthHttp {
    async fn auth(&self, given: Option<String>) -> Option<String> {
        match self.tokens.bearer().await {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("{e}");
                given
            }
        }
    }
}

mod oauth_client {
    use super::OAuthHttp;
    use futures::stream::BoxStream;
    use http::{HeaderName, HeaderValue};
    use rmcp::model::ClientJsonRpcMessage;
    use rmcp::transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
    };
    use sse_stream::{Error as SseError, Sse};
    use std::collections::HashMap;
    use std::sync::Arc;

    impl StreamableHttpClient for OAuthHttp {
        type Error = reqwest::Error;

        async fn post_message(
            &self,
            uri: Arc<str>,
            message: ClientJsonRpcMessage,
            session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner.post_message(uri, message, session_id, auth, custom_headers).await
        }

        async fn post_message_with_response_limits(
            &self,
            uri: Arc<str>,
            message: ClientJsonRpcMessage,
            session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
            limits: StreamableHttpResponseLimits,
        ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner.post_message_with_response_limits(uri, message, session_id, auth, custom_headers, limits).await
        }

        async fn delete_session(
            &self,
            uri: Arc<str>,
            session_id: Arc<str>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> Result<(), StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner.delete_session(uri, session_id, auth, custom_headers).await
        }

        async fn get_stream(
            &self,
            uri: Arc<str>,
            session_id: Option<Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner.get_stream(uri, session_id, last_event_id, auth, custom_headers).await
        }

        async fn get_stream_with_max_sse_event_size(
            &self,
            uri: Arc<str>,
            session_id: Option<Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
            max_sse_event_size: usize,
        ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth,
                    custom_headers,
                    max_sse_event_size,
                )
                .await
        }
    }
}
