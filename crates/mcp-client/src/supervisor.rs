//! One server's supervisor: connect, register its tools, serve the
//! connection until it drops, reconnect with backoff.

use super::oauth::{OAuthHttp, TokenSource, same_origin_redirects};
use super::provider::McpTools;
use super::server::Server;
use super::{CONNECT_TIMEOUT, MAX_BACKOFF, MIN_BACKOFF};
use crate::Pipeline;
use crate::config::Transport;
use crate::tool::{ToolDef, ToolMeta};
use crate::validate::Validator;
use rmcp::service::ClientServiceExt;
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, Peer, RoleClient};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Receives the server's notifications: a changed tool list triggers a re-list.
#[derive(Clone)]
struct Handler {
    server: Arc<Server>,
}

impl ClientHandler for Handler {
    /// What toolhost declares, in `initialize` (2025-11-25) or in every
    /// request's metadata (2026-07-28): elicitation (form and URL) and
    /// sampling, which it relays to the client of the call that caused
    /// them ([`super::questions`]), and its own name and version.
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities: rmcp::model::ClientCapabilities =
            serde_json::from_value(serde_json::json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}}))
                .unwrap_or_default();
        rmcp::model::ClientConfig::new(
            capabilities,
            rmcp::model::Implementation::new("toolhost", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(LEGACY_PROTOCOL)
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        match self.relay("elicitation/create", &request, &context).await {
            // Nobody to ask: declined, as a client without a person would.
            Err(Relayed::Unasked(_, why)) => {
                tracing::debug!(server = %self.server.cfg.name, "elicitation declined: {why}");
                Ok(rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Decline))
            }
            other => other.map_err(Relayed::into_error),
        }
    }

    #[allow(deprecated)] // Sampling (SEP-2577) is still what servers send.
    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.relay("sampling/createMessage", &request, &context).await.map_err(Relayed::into_error)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.server.relist.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.server.offers.resources_changed();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.server.offers.prompts_changed();
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if !self.server.notices.admit(&self.server.cfg.name) {
            return;
        }
        self.server.subscriptions.updated(&params.uri);
    }

    // Progress reports never reach here: [`super::tap::Tapped`] relays them
    // as they are read, in order with the responses.

    #[allow(deprecated)] // MCP logging (SEP-2577) is still what servers send.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        use rmcp::model::LoggingLevel as L;
        if !self.server.notices.admit(&self.server.cfg.name) {
            return;
        }
        let text = match &params.data {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        tracing::debug!(server = %self.server.cfg.name, "log: {}", crate::tool::log_safe(&text));
        let level = match params.level {
            L::Debug => "debug",
            L::Info | L::Notice => "info",
            L::Warning => "warn",
            _ => "error",
        };
        self.server.relay.log(level, &text);
    }
}

/// Why a server's question got no answer to pass back.
enum Relayed {
    /// The call's client cannot be asked (the method, why).
    Unasked(&'static str, String),
    /// Any other failure, as the server reads it.
    Error(rmcp::ErrorData),
}

impl Relayed {
    fn into_error(self) -> rmcp::ErrorData {
        match self {
            Relayed::Unasked(method, why) => {
                rmcp::ErrorData::internal_error(format!("toolhost could not relay {method}: {why}"), None)
            }
            Relayed::Error(e) => e,
        }
    }
}

impl Handler {
    /// Relays the server's `method` request to the client of the call it
    /// belongs to ([`super::questions`]) and reads its answer back as `T`.
    async fn relay<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        request: &impl serde::Serialize,
        context: &rmcp::service::RequestContext<RoleClient>,
    ) -> Result<T, Relayed> {
        let params = serde_json::to_value(request)
            .map_err(|e| Relayed::Error(rmcp::ErrorData::invalid_params(e.to_string(), None)))?;
        let origin = context.extensions.get::<rmcp::service::InboundStreamOrigin>();
        match self.server.questions.relay(origin, method, params).await {
            Ok(answer) => serde_json::from_value(answer).map_err(|e| {
                Relayed::Error(rmcp::ErrorData::internal_error(
                    format!("the client's answer to {method} is not valid: {e}"),
                    None,
                ))
            }),
            Err(crate::tool::offer::AskError::Unsupported(why)) => Err(Relayed::Unasked(method, why)),
            Err(e) => Err(Relayed::Error(super::questions::to_mcp_error(method, &e))),
        }
    }
}

type Running = RunningService<RoleClient, Handler>;

impl Server {
    /// Waits (bounded) until this server's first connection attempt is over.
    pub(super) async fn first_attempt(&self) {
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

pub(super) async fn supervise(host: Arc<Pipeline>, server: Arc<Server>, mut previous: Option<Arc<Server>>) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let attempt = tokio::select! {
            r = tokio::time::timeout(CONNECT_TIMEOUT, connect(&server)) => r,
            () = server.stop.cancelled() => return,
        };
        match attempt {
            Ok(Ok(running)) => {
                let connected_at = std::time::Instant::now();
                server.connections.fetch_add(1, Ordering::Relaxed);
                *server.peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(running.peer().clone());
                if let Some(p) = previous.take() {
                    p.first_attempt().await;
                }
                if server.connections.load(Ordering::Relaxed) > 1 {
                    // A reconnect: whatever its tools did while the server
                    // was down or dying says nothing about them now. Their
                    // health starts from a clean window, before they are
                    // listed again.
                    let exposed = server.exposed.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    for tool in &exposed {
                        host.budget().forget(tool);
                    }
                    tracing::info!(server = %server.cfg.name, tools = exposed.len(), "reconnected: its tools' health starts afresh");
                }
                let ok = register(&host, &server).await;
                if ok {
                    // Its resources and prompts too, before anyone waiting
                    // on the first attempt wakes; bounded, and a failure
                    // only leaves them out.
                    if tokio::time::timeout(CONNECT_TIMEOUT, super::offer::list_all(&server)).await.is_err() {
                        tracing::warn!(server = %server.cfg.name, "listing its resources and prompts timed out");
                    }
                    // Sessions subscribed before a reconnect stay subscribed.
                    if tokio::time::timeout(CONNECT_TIMEOUT, super::offer::resubscribe(&server)).await.is_err() {
                        tracing::warn!(server = %server.cfg.name, "subscribing to its resources again timed out");
                    }
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
                // Only a connection that lasted resets the backoff: a server
                // that exits (or fails tools/list) right after connecting is
                // retried ever more slowly, not every 250 ms forever.
                if ok && connected_at.elapsed() >= STABLE_CONNECTION {
                    backoff = MIN_BACKOFF;
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
async fn run_connected(host: &Arc<Pipeline>, server: &Arc<Server>, running: Running) {
    server.available.store(true, Ordering::Release);
    *server.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
    host.registry().touch();
    tracing::info!(server = %server.cfg.name, "connected");
    let mut running = Some(running);
    let mut ping = tokio::time::interval(PING_INTERVAL);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        tokio::select! {
            // An HTTP server has no connection to watch: a restarted one
            // answers the old session with 400 or 404 and every call would
            // time out. A ping that fails ends this connection; the
            // supervisor hides the tools and re-initializes.
            _ = ping.tick() => {
                let Some(peer) = running.as_ref().map(|r| r.peer().clone()) else { break };
                let request = rmcp::model::ClientRequest::PingRequest(rmcp::model::PingRequest::default());
                let options = rmcp::service::PeerRequestOptions::with_timeout(PING_TIMEOUT);
                let answer = async { peer.send_request_with_option(request, options).await?.await_response().await };
                // 2026-07-28 has no `ping` and no session to lose: any
                // JSON-RPC answer (-32601 for `ping`) says the server is there.
                let modern = peer.peer_info().is_some_and(|i| !i.protocol_version.has_initialize());
                match answer.await {
                    Ok(_) => {}
                    Err(rmcp::ServiceError::McpError(_)) if modern => {}
                    Err(e) => {
                        server.set_error(format!("ping failed ({e}); reconnecting"));
                        break;
                    }
                }
            }
            () = server.recheck.notified() => {
                ping.reset_immediately();
            }
            () = server.stop.cancelled() => {
                if let Some(r) = running.take() {
                    let _ = r.cancel().await;
                }
                break;
            }
            () = server.relist.notified() => {
                register(host, server).await;
                // A server announcing changes in a loop gets re-listed at
                // most once a second.
                tokio::time::sleep(RELIST_PAUSE).await;
            }
            () = server.offers.changed.notified() => {
                if tokio::time::timeout(CONNECT_TIMEOUT, super::offer::relist_changed(server)).await.is_err() {
                    tracing::warn!(server = %server.cfg.name, "listing its resources and prompts again timed out");
                }
                host.registry().touch();
                tokio::time::sleep(RELIST_PAUSE).await;
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

/// `initialize` failed: the error, with what a refused redirect means
/// (reqwest's own words do not say).
fn explain_http_error(url: &str, e: &str) -> String {
    if e.contains("error following redirect") {
        format!(
            "initialize at {url}: the server redirected elsewhere; toolhost follows redirects only within the server's own origin (scheme, host and port), at most 5 ({e})"
        )
    } else if e.contains("Auth required") || e.contains("Insufficient scope") {
        format!(
            "initialize at {url}: the server refused the request (401/403): it wants authorization that `auth` does not give it (a bearer `token`, `oauth` client credentials, or a login: run `toolhost auth login <server>`)"
        )
    } else {
        format!("initialize at {url}: {e}")
    }
}

/// The protocol version toolhost offers in `initialize`, to a server that
/// does not answer `server/discover` (a 2025-11-25 one or older).
const LEGACY_PROTOCOL: rmcp::model::ProtocolVersion = rmcp::model::ProtocolVersion::V_2025_11_25;
/// The newest protocol version toolhost speaks as a client: it probes
/// with `server/discover` at this version first.
const OFFERED_PROTOCOL: rmcp::model::ProtocolVersion = rmcp::model::ProtocolVersion::V_2026_07_28;

/// How a connection starts: `server/discover` at [`OFFERED_PROTOCOL`],
/// falling back to `initialize` at [`LEGACY_PROTOCOL`] when the server
/// answers that it does not know it (or says nothing for 10 s), as the
/// Python SDK's `auto` mode does.
fn lifecycle(legacy: bool) -> rmcp::service::ClientLifecycleMode {
    match legacy {
        true => rmcp::service::ClientLifecycleMode::Initialize,
        false => rmcp::service::ClientLifecycleMode::Auto {
            preferred_versions: vec![OFFERED_PROTOCOL],
            legacy_version: Some(LEGACY_PROTOCOL),
        },
    }
}

/// Whether a failed connection was refused for want of authorization
/// (trying another lifecycle would not help).
fn is_auth_failure(e: &str) -> bool {
    e.starts_with("OAuth") || e.contains("(401/403)")
}

/// Connects and checks the version the server answered: one rmcp
/// implements up to [`OFFERED_PROTOCOL`] (a server may answer with an
/// older version it prefers); anything else (newer or unknown) is
/// refused, as the lifecycle says a client that does not speak the answer
/// should.
async fn connect(server: &Arc<Server>) -> Result<Running, String> {
    let legacy = server.legacy.load(Ordering::Relaxed);
    let (running, via_initialize) = match open(server, lifecycle(legacy)).await {
        Ok(running) => (running, legacy),
        // A server that answers `server/discover` with something that is
        // neither a discovery result nor an error (some answer every
        // unknown method with `{}`): `initialize` alone, from now on.
        Err(e) if !legacy && !is_auth_failure(&e) => {
            let running = open(server, lifecycle(true)).await?;
            tracing::info!(server = %server.cfg.name, "server/discover failed ({e}); initialize worked: the server is spoken to as 2025-11-25");
            server.legacy.store(true, Ordering::Relaxed);
            (running, true)
        }
        Err(e) => return Err(e),
    };
    let answered = running.peer().peer_info().map(|info| info.protocol_version.clone());
    // Through `initialize`, a version that has one (2026-07-28 has none);
    // through `server/discover`, rmcp picked one toolhost prefers.
    let known = |v: &rmcp::model::ProtocolVersion| match v.has_initialize() {
        true => rmcp::model::ProtocolVersion::known_up_to(&LEGACY_PROTOCOL).contains(v),
        false => !via_initialize && *v == OFFERED_PROTOCOL,
    };
    match answered {
        Some(v) if known(&v) => {
            tracing::debug!(server = %server.cfg.name, version = v.as_str(), "connected");
            Ok(running)
        }
        other => {
            let _ = running.cancel().await;
            let known = rmcp::model::ProtocolVersion::known_up_to(&LEGACY_PROTOCOL);
            let known: Vec<&str> = known.iter().map(|v| v.as_str()).collect();
            Err(format!(
                "initialize: the server answered protocol version {}; toolhost speaks {} (through initialize) and {} (through server/discover)",
                other.map_or_else(|| "(none)".to_string(), |v| format!("{:?}", v.as_str())),
                known.join(", "),
                OFFERED_PROTOCOL.as_str()
            ))
        }
    }
}

async fn open(server: &Arc<Server>, lifecycle: rmcp::service::ClientLifecycleMode) -> Result<Running, String> {
    use super::tap::Tapped;
    let cfg = &server.cfg;
    let handler = Handler { server: server.clone() };
    match cfg.transport {
        Transport::Stdio => {
            let line = cfg.command.as_deref().unwrap_or_default();
            let mut parts = line.split_whitespace();
            let program = parts.next().ok_or("empty command")?;
            let mut cmd = tokio::process::Command::new(program);
            // A clean environment: only the pass-through variables the
            // config lists (never the DM's tokens by accident) and `env`.
            cmd.args(parts).env_clear().kill_on_drop(true);
            for var in &cfg.pass_env {
                if let Some(v) = std::env::var_os(var) {
                    cmd.env(var, v);
                }
            }
            cmd.envs(&cfg.env);
            let (transport, stderr) = super::child::ChildTransport::spawn(cmd, server.message_limit)
                .map_err(|e| format!("starting `{line}`: {e}"))?;
            tokio::spawn(log_stderr(cfg.name.clone(), stderr));
            handler
                .serve_with_lifecycle(Tapped::new(transport, server.clone()), lifecycle)
                .await
                .map_err(|e| format!("initialize: {e}"))
        }
        Transport::StreamableHttp => {
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let url = cfg.url.clone().unwrap_or_default();
            // No transparent re-initialization on an expired session: a
            // restarted server may serve other tools, so the supervisor
            // reconnects and re-lists (the ping or the failed call notices).
            let mut config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).reinit_on_expired_session(false);
            let client = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .redirect(same_origin_redirects())
                .build()
                .map_err(|e| format!("HTTP client: {e}"))?;
            let auth = cfg.auth.as_ref();
            // A stored login (`toolhost auth login`) wins over the config's
            // credentials; `auth.oauth` without a secret needs one.
            let login = match &server.state_dir {
                Some(dir) => super::login::LoginTokens::load(dir, &cfg.name, &url, client.clone())?,
                None => None,
            };
            let oauth = auth.and_then(|a| a.oauth.clone());
            if login.is_none()
                && oauth.as_ref().is_some_and(|o| {
                    o.client_secret.is_empty() && o.private_key_file.is_none() && o.cross_app.is_none()
                })
            {
                return Err(format!(
                    "OAuth: no stored login, no client_secret and no private_key_file; run `toolhost auth login {}`",
                    cfg.name
                ));
            }
            let tokens = match (login, oauth) {
                (Some(login), _) => Some(TokenSource::logged_in(login, &url, client.clone())?),
                (None, Some(oauth)) => Some(TokenSource::new(oauth, &url, client.clone())?),
                (None, None) => None,
            };
            if let Some(tokens) = tokens {
                let tokens = Arc::new(tokens);
                // With a configured token endpoint, fail early with its own
                // words; otherwise the server's 401 starts discovery.
                tokens.current(&url).await?;
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                    crate::traced::Traced(OAuthHttp {
                        inner: client,
                        tokens: tokens.clone(),
                        shown_by: Some(shown_by(server)),
                    }),
                    config,
                );
                // A failure to get a token says why better than the transport.
                return handler.serve_with_lifecycle(Tapped::new(transport, server.clone()), lifecycle).await.map_err(
                    |e| {
                        tokens
                            .take_error()
                            .map_or_else(|| explain_http_error(&url, &e.to_string()), |t| format!("OAuth: {t}"))
                    },
                );
            }
            if let Some(token) = auth.and_then(|a| a.token.as_deref()) {
                let token = token.strip_prefix("Bearer ").unwrap_or(token).trim();
                config = config.auth_header(token.to_string());
            }
            let transport =
                rmcp::transport::StreamableHttpClientTransport::with_client(crate::traced::Traced(client), config);
            handler
                .serve_with_lifecycle(Tapped::new(transport, server.clone()), lifecycle)
                .await
                .map_err(|e| explain_http_error(&url, &e.to_string()))
        }
    }
}

/// How a sign-in URL reaches the person behind the call whose request the
/// server refused for want of scope: a URL elicitation through the call's
/// client ([`super::questions`]).
fn shown_by(server: &Arc<Server>) -> super::oauth::ShownBy {
    // Weak: the transport holding this must not keep its server alive.
    let server = Arc::downgrade(server);
    Arc::new(move |id| {
        let server = server.upgrade()?;
        let asking = server.questions.get(id)?;
        // A client that answers on its next try (2026-07-28) cannot be
        // asked: the redirect must come back to this try's listener.
        if asking.answers_later() {
            return None;
        }
        let name = server.cfg.name.clone();
        let show = move |url: &str| {
            let mut id = [0u8; 12];
            getrandom::fill(&mut id).map_err(|e| e.to_string())?;
            let params = serde_json::json!({
                "mode": "url",
                "message": format!("MCP server {name} wants more access: sign in again to grant it"),
                "url": url,
                "elicitationId": hex::encode(id),
            });
            match asking.ask("elicitation/create", params) {
                Ok(answer) if answer["action"] == "accept" => Ok(()),
                Ok(answer) => Err(format!("the person answered {}", answer["action"])),
                Err(e) => Err(e.to_string()),
            }
        };
        Some(super::oauth::ShowUrl { show: Arc::new(show), wait: server.ask_limits.0 })
    })
}

/// How long a connection must last for the reconnect backoff to reset.
const STABLE_CONNECTION: Duration = Duration::from_secs(10);
/// Least time between two re-listings of a server's tools.
const RELIST_PAUSE: Duration = Duration::from_secs(1);

/// How often a live connection is pinged.
const PING_INTERVAL: Duration = Duration::from_secs(5);
/// How long a ping may take before the connection counts as lost.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest stderr line logged, in bytes; the rest of a longer line is
/// dropped.
const STDERR_LINE_BYTES: usize = 4096;

/// Logs a child's stderr at debug, a line at a time: escaped (it can never
/// forge a host line), each line cut at [`STDERR_LINE_BYTES`] so a child
/// that never writes a newline cannot grow the host's memory. It may hold
/// secrets the child was given, hence debug, not info.
async fn log_stderr(server: String, stderr: impl tokio::io::AsyncRead + Unpin) {
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    while let Ok(Some(cut)) = crate::read_line_capped(&mut reader, &mut line, STDERR_LINE_BYTES).await {
        emit_stderr(&server, &line, cut);
    }
}

fn emit_stderr(server: &str, line: &[u8], cut: bool) {
    let text = String::from_utf8_lossy(line);
    let text = crate::tool::log_safe(text.trim_end_matches('\r'));
    tracing::debug!(server, "stderr: {text}{}", if cut { " [cut]" } else { "" });
}

/// The server's tools, page by page, at most its `max_tools` (and
/// [`super::offer::MAX_PAGES`] pages): past that, the first ones it listed,
/// with a warning that names the server.
async fn list_tools(server: &Server, peer: &Peer<RoleClient>) -> Result<Vec<rmcp::model::Tool>, rmcp::ServiceError> {
    let name = &server.cfg.name;
    let max = server.cfg.max_tools();
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..super::offer::MAX_PAGES {
        let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = peer.list_tools(Some(params)).await?;
        tools.extend(page.tools);
        if tools.len() > max {
            tracing::warn!(
                server = %name,
                "the server offers more than {max} tools (its max_tools); the first {max} are served"
            );
            tools.truncate(max);
            return Ok(tools);
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(tools),
        }
    }
    tracing::warn!(server = %name, "tools/list: more than {} pages; the rest are not served", super::offer::MAX_PAGES);
    Ok(tools)
}

/// Lists the server's tools and (re)registers them as one provider.
/// Returns false when nothing could be registered.
async fn register(host: &Arc<Pipeline>, server: &Arc<Server>) -> bool {
    let Some(peer) = server.peer.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return false };
    let tools = match tokio::time::timeout(CONNECT_TIMEOUT, list_tools(server, &peer)).await {
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
    // Names are compared as a model or a DM reads them: `Roll`, `roll` and
    // `ROLL` are one name, and so are `search-rules` and `search_rules`.
    let others: std::collections::HashSet<String> = catalog
        .tools()
        .filter(|e| e.provider.name() != name.as_str())
        .map(|e| super::names::name_key(&e.def.name))
        .collect();
    let namespaces: Vec<String> = catalog
        .providers()
        .map(|p| p.name().to_string())
        .filter(|p| p != name)
        .map(|p| super::names::namespace_key(&p))
        .collect();
    let mut mine = std::collections::HashSet::new();
    for t in tools {
        let schema = Value::Object((*t.input_schema).clone());
        if let Err(e) = Validator::new(&schema) {
            tracing::warn!(server = %name, tool = %crate::tool::log_safe(&t.name), "skipping a tool with an unusable input schema: {}", crate::tool::log_safe(&e.to_string()));
            continue;
        }
        let taken = |n: &str| {
            let key = super::names::name_key(n);
            others.contains(&key) || mine.contains(&key)
        };
        let exposed = match &server.cfg.prefix {
            Some(p) => super::names::with_prefix(p, &t.name, taken),
            None => super::names::exposed_name(name, &t.name, taken, &namespaces),
        };
        let exposed = match exposed {
            Ok(exposed) => exposed,
            Err(why) => {
                tracing::warn!(server = %name, "skipping a tool: {why}");
                continue;
            }
        };
        if exposed != t.name {
            tracing::warn!(server = %name, tool = %exposed, "{} registered as {exposed}", crate::tool::log_safe(&t.name));
        }
        let meta = t.meta.as_ref().map(|m| Value::Object(m.0.clone())).unwrap_or(Value::Null);
        let declared = |key: &str| {
            meta.get(key)
                .or_else(|| meta.get("toolhost").and_then(|m| m.get(key)))
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
        };
        let annotations = t.annotations.as_ref();
        let (estimated, max) = (declared("estimated_duration_ms"), declared("max_duration_ms"));
        defs.push(ToolDef {
            name: exposed.clone(),
            description: t.description.as_deref().unwrap_or_default().to_string(),
            input_schema: schema,
            meta: ToolMeta {
                estimated_duration_ms: estimated,
                max_duration_ms: max,
                idempotent: annotations.and_then(|a| a.idempotent_hint.or(a.read_only_hint)).unwrap_or(false),
                cacheable_seconds: declared("cacheable_seconds").unwrap_or(0),
                // The server's settings fill in only what the tool leaves
                // undeclared.
                deadline_ms: server
                    .cfg
                    .timeout_ms
                    .filter(|_| max.is_none())
                    .map(|ms| u32::try_from(ms).unwrap_or(u32::MAX)),
                unmeasured_tier: server.cfg.tier.filter(|_| estimated.is_none()),
                deep_until_measured: max.is_none() && server.cfg.timeout_ms.is_none(),
                // `_meta["toolhost/long_running"]` (or `long_running`,
                // top-level or under `toolhost`), as the latency fields.
                long_running: ["toolhost/long_running", "long_running"]
                    .iter()
                    .find_map(|k| meta.get(*k).or_else(|| meta.get("toolhost").and_then(|m| m.get(*k))))
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            },
            probe_arguments: None,
            // Passed on to toolhost's own clients as the server gave them.
            title: t.title.clone(),
            output_schema: t.output_schema.as_ref().map(|s| Value::Object((**s).clone())),
            annotations: annotations.map(|a| crate::tool::ToolAnnotations {
                title: a.title.clone(),
                read_only_hint: a.read_only_hint,
                destructive_hint: a.destructive_hint,
                idempotent_hint: a.idempotent_hint,
                open_world_hint: a.open_world_hint,
            }),
        });
        mine.insert(super::names::name_key(&exposed));
        remote.insert(exposed, t.name.to_string());
    }
    // A declared outputSchema is held to: results are checked against it.
    // One that is not a usable schema is not passed on.
    let mut output_validators = HashMap::new();
    for d in &mut defs {
        if let Some(schema) = &d.output_schema {
            match Validator::new(schema) {
                Ok(v) => {
                    output_validators.insert(d.name.clone(), v);
                }
                Err(e) => {
                    tracing::warn!(server = %name, tool = %d.name, "dropping an unusable outputSchema: {}", crate::tool::log_safe(&e.0));
                    d.output_schema = None;
                }
            }
        }
    }
    let exposed: Vec<String> = defs.iter().map(|d| d.name.clone()).collect();
    let max_output_bytes = host.runtime().limits().output_bytes;
    let provider = Arc::new(McpTools {
        server: server.clone(),
        tools: defs,
        remote,
        max_output_bytes,
        output_validators,
        upstream: toolhost_mcp_wire::upstream::UpstreamHandle(server.clone()),
    });
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
