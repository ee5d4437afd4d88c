//! toolhost-mcp-client: external MCP servers behind the one registry.
//!
//! Each configured server gets a supervisor task on the async runtime. It
//! connects (a child process over stdio, or streamable HTTP with a static
//! bearer token, OAuth 2.1 client credentials or a login stored by
//! `toolhost auth login`, see `login.rs`), lists the server's tools
//! and registers them as one provider named after the server. While the
//! connection lives, calls go straight to it; when it drops, the server's
//! tools are marked unavailable (hidden from listings, calls answered with
//! `unavailable`) and the supervisor reconnects with exponential backoff.
//! The other providers are never affected.
//!
//! Tool names: a server's tool keeps its own name when it fits the one
//! tool-name rule and no other provider has it; otherwise it is registered
//! as `<server>_<tool>` (see `names.rs`; names with control characters or
//! over 128 bytes are skipped). Nothing is ever overwritten. Servers connect in
//! parallel but register their first tool list in the order they were added
//! (config order), so who gets a contested bare name does not depend on
//! which server happened to start faster.
//!
//! Calls are synchronous from the host's point of view ([`Provider::call`](crate::tool::Provider::call)):
//! they block the calling thread (never an async worker) on the runtime that
//! owns the connection. Each call has a deadline; when it passes, the
//! request is abandoned and `notifications/cancelled` is sent to the server.
//! A server's `timeout_ms` and `tier` fill in the deadline and tier of its
//! tools that declare none (`ToolMeta::deadline_ms`, `unmeasured_tier`).
//!
//! Besides tools, a server's resources, resource templates and prompts are
//! listed (`offer.rs`) and kept beside its provider; the MCP front finds
//! them through the registry (`upstreams`) and sends reads, prompt gets
//! and completions to the server that offered them. A prompt keeps its
//! name unless an earlier server (config order) has one of that name: then
//! it is `<server>_<prompt>` (or under the server's `prefix`, always). A
//! resource URI two servers offer is the earlier one's; the later one's is
//! listed and read as `<server>+<uri>`.

#![deny(unsafe_code)]

mod child;
pub mod login;
mod names;
mod oauth;
mod offer;
mod provider;
mod questions;
mod relay;
mod server;
mod supervisor;
mod tap;
mod traced;

use toolhost_config as config;
use toolhost_core::{Pipeline, runtime, tool, validate};
use toolhost_mcp_wire::{content, read_line_capped};

use crate::config::{McpServerConfig, Transport};
use crate::tool::ProviderKind;
use server::Server;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use supervisor::supervise;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ServerStatus {
    /// Server name.
    pub name: String,
    /// `stdio` or `streamable-http`.
    pub transport: String,
    /// `connecting`, `up` or `down`.
    pub state: String,
    /// The last connection error, if any.
    pub last_error: Option<String>,
    /// Successful connections so far (a value above 1 means it reconnected).
    pub connections: u32,
    /// Calls refused because it was down, or that it dropped by going
    /// away mid-call: they count here, never against its tools' health.
    #[serde(default)]
    pub unavailable_calls: u64,
    /// Tools registered (exposed names).
    pub tools: Vec<String>,
    /// `config`, or `runtime` for a server added by `toolhost server add`
    /// (restored at start until removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The external servers of one host: adds, removes and supervises them.
#[derive(Debug)]
pub struct ExternalServers {
    host: Arc<Pipeline>,
    rt: tokio::runtime::Handle,
    servers: Mutex<HashMap<String, Arc<Server>>>,
    /// The server added last: the next one registers after it.
    last: Mutex<Option<Arc<Server>>>,
    /// The state directory whose stored logins (`toolhost auth login`) the
    /// servers use.
    state_dir: std::sync::OnceLock<std::path::PathBuf>,
    /// Servers added so far: the next one's [`Server::order`].
    added: AtomicU64,
}

impl ExternalServers {
    /// A manager for `host`, running connections on `rt`.
    pub fn new(host: Arc<Pipeline>, rt: tokio::runtime::Handle) -> Arc<ExternalServers> {
        Arc::new(ExternalServers {
            host,
            rt,
            servers: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
            state_dir: std::sync::OnceLock::new(),
            added: AtomicU64::new(0),
        })
    }

    /// A manager for `host` supervising every server in `configs` (config
    /// order decides who gets a contested tool name). Returns at once; see
    /// [`ExternalServers::wait_ready`].
    pub fn start(
        host: Arc<Pipeline>,
        configs: &[McpServerConfig],
        rt: tokio::runtime::Handle,
    ) -> Result<Arc<ExternalServers>, ServerError> {
        let servers = ExternalServers::new(host, rt);
        for cfg in configs {
            servers.add(cfg.clone())?;
        }
        Ok(servers)
    }

    /// [`ExternalServers::start`], the servers using the logins stored in
    /// `state_dir` (`toolhost auth login`).
    pub fn start_in(
        host: Arc<Pipeline>,
        configs: &[McpServerConfig],
        rt: tokio::runtime::Handle,
        state_dir: &std::path::Path,
    ) -> Result<Arc<ExternalServers>, ServerError> {
        let servers = ExternalServers::new(host, rt);
        let _ = servers.state_dir.set(state_dir.to_path_buf());
        for cfg in configs {
            servers.add(cfg.clone())?;
        }
        Ok(servers)
    }

    /// Checks a server's settings as [`ExternalServers::add`] would, without
    /// starting it; `deadlines` are the floor and ceiling its `timeout_ms`
    /// must respect.
    pub fn validate(cfg: &McpServerConfig, deadlines: crate::tool::DeadlinePolicy) -> Result<(), ServerError> {
        check(cfg)?;
        cfg.check_timeout(deadlines).map_err(|e| ServerError::Config { name: cfg.name.clone(), reason: e.0 })
    }

    /// The settings of every server supervised now, sorted by name.
    pub fn configs(&self) -> Vec<McpServerConfig> {
        let mut out: Vec<McpServerConfig> =
            self.servers.lock().unwrap_or_else(|p| p.into_inner()).values().map(|s| s.cfg.clone()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Starts supervising a server. Returns at once; use
    /// [`ExternalServers::wait_ready`] to wait for its first connection.
    pub fn add(&self, cfg: McpServerConfig) -> Result<(), ServerError> {
        check(&cfg)?;
        cfg.check_timeout(self.host.budget().deadlines())
            .map_err(|e| ServerError::Config { name: cfg.name.clone(), reason: e.0 })?;
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        if servers.contains_key(&cfg.name) {
            return Err(ServerError::Duplicate(cfg.name));
        }
        if let Some(p) = self.host.registry().snapshot().provider(&cfg.name)
            && p.kind() != ProviderKind::Mcp
        {
            return Err(ServerError::NameTaken(cfg.name));
        }
        let server = Arc::new(Server {
            cfg,
            order: self.added.fetch_add(1, Ordering::Relaxed),
            rt: self.rt.clone(),
            peer: Mutex::new(None),
            available: AtomicBool::new(false),
            attempted: AtomicBool::new(false),
            attempted_notify: Notify::new(),
            connections: AtomicU32::new(0),
            unavailable_calls: AtomicU64::new(0),
            last_error: Mutex::new(None),
            stop: CancellationToken::new(),
            relist: Notify::new(),
            recheck: Notify::new(),
            relay: relay::Relay::default(),
            notices: relay::Gate::default(),
            questions: questions::Questions::default(),
            legacy: AtomicBool::new(false),
            ask_limits: (self.host.runtime().limits().input_wait, self.host.runtime().limits().asks_per_call),
            message_limit: message_limit(self.host.runtime().limits().output_bytes),
            exposed: Mutex::new(Vec::new()),
            offers: server::Offers::default(),
            subscriptions: toolhost_mcp_wire::subscribe::Subscriptions::default(),
            state_dir: self.state_dir.get().cloned(),
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
        let _ = block_on(&self.rt, async { tokio::time::timeout(timeout, self.first_attempts()).await });
    }

    /// Waits until every server has finished its first connection attempt
    /// (successful or not; each bounded by the connect timeout).
    pub async fn first_attempts(&self) {
        let servers: Vec<Arc<Server>> =
            self.servers.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        for s in servers {
            s.first_attempt().await;
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
pub(crate) fn block_on<F: Future>(rt: &tokio::runtime::Handle, f: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::task::block_in_place(|| rt.block_on(f)),
        Err(_) => rt.block_on(f),
    }
}

/// The largest single message taken from a stdio server, in bytes: four
/// times the output cap (JSON escapes can take six bytes for one) plus
/// 64 KiB for the envelope, and never less than rmcp's own 16 MiB, which a
/// 1,000-tool listing needs. A longer one is cut as it arrives; a cut
/// answer to a call is `output_too_large` at once.
pub(crate) fn message_limit(max_output_bytes: usize) -> usize {
    max_output_bytes.saturating_mul(4).saturating_add(64 * 1024).max(16 * 1024 * 1024)
}

fn check(cfg: &McpServerConfig) -> Result<(), ServerError> {
    let bad = |reason: &str| Err(ServerError::Config { name: cfg.name.clone(), reason: reason.to_string() });
    if cfg.name.is_empty() || !cfg.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return bad("the name must be letters, digits, '-' or '_'");
    }
    if cfg.max_tools == Some(0) {
        return bad("max_tools: must be at least 1");
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
