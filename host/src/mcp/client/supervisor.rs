//! One server's supervisor: connect, register its tools, serve the
//! connection until it drops, reconnect with backoff.

use super::oauth::{OAuthHttp, TokenSource};
use super::provider::McpTools;
use super::{CONNECT_TIMEOUT, MAX_BACKOFF, MIN_BACKOFF, ServerStatus};
use crate::Host;
use crate::config::{McpServerConfig, Transport};
use crate::tool::{ToolDef, ToolMeta};
use crate::validate::Validator;
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// One supervised server: shared by its supervisor task and its provider.
#[derive(Debug)]
pub(super) struct Server {
    pub(super) cfg: McpServerConfig,
    pub(super) rt: tokio::runtime::Handle,
    pub(super) peer: Mutex<Option<Peer<RoleClient>>>,
    pub(super) available: AtomicBool,
    pub(super) attempted: AtomicBool,
    pub(super) attempted_notify: Notify,
    pub(super) connections: AtomicU32,
    pub(super) last_error: Mutex<Option<String>>,
    pub(super) stop: CancellationToken,
    pub(super) relist: Notify,
    pub(super) exposed: Mutex<Vec<String>>,
}

impl Server {
    pub(super) fn status(&self) -> ServerStatus {
        let up = self.available.load(Ordering::Acquire);
        ServerStatus {
            name: self.cfg.name.clone(),
            transport: match self.cfg.transport {
                Transport::Stdio => "stdio",
                Transport::StreamableHttp => "streamable-http",
            }
            .to_string(),
            state: if up {
                "up"
            } else if self.attempted.load(Ordering::Acquire) {
                "down"
            } else {
                "connecting"
            }
            .to_string(),
            last_error: self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            connections: self.connections.load(Ordering::Relaxed),
            tools: self.exposed.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    pub(super) fn set_error(&self, e: String) {
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

pub(super) async fn supervise(host: Arc<Host>, server: Arc<Server>, mut previous: Option<Arc<Server>>) {
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
