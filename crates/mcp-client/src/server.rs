//! One external server's shared state: its config, its connection, what
//! it offers and who subscribes; held by its supervisor task, its registry
//! provider and the MCP front (through `UpstreamServer`).

use super::ServerStatus;
use crate::config::{McpServerConfig, Transport};
use rmcp::{Peer, RoleClient};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolhost_mcp_wire::upstream::Offer;

/// One supervised server: shared by its supervisor task and its provider.
#[derive(Debug)]
pub(super) struct Server {
    pub(super) cfg: McpServerConfig,
    /// When it was added, among the host's servers (config order, then
    /// servers added at run time): who keeps a contested prompt name or
    /// resource URI.
    pub(super) order: u64,
    pub(super) rt: tokio::runtime::Handle,
    pub(super) peer: Mutex<Option<Peer<RoleClient>>>,
    pub(super) available: AtomicBool,
    pub(super) attempted: AtomicBool,
    pub(super) attempted_notify: Notify,
    pub(super) connections: AtomicU32,
    /// Calls refused while it was down or dropped as it went away.
    pub(super) unavailable_calls: AtomicU64,
    pub(super) last_error: Mutex<Option<String>>,
    pub(super) stop: CancellationToken,
    pub(super) relist: Notify,
    /// A call failed as if the connection were lost: ping now.
    pub(super) recheck: Notify,
    /// Progress and log notifications, to the calls they belong to.
    pub(super) relay: super::relay::Relay,
    /// The largest message taken from it, in bytes: see
    /// [`super::message_limit`].
    pub(super) message_limit: usize,
    /// Holds its progress and log notifications to a rate.
    pub(super) notices: super::relay::Gate,
    /// It answered `server/discover` badly once and `initialize` well:
    /// later connections skip the probe.
    pub(super) legacy: AtomicBool,
    /// Its calls that can ask their clients, for its questions.
    pub(super) questions: super::questions::Questions,
    /// How long a call waits for one answer, and how many questions it
    /// may ask (`limits.input_wait_ms`, `limits.asks_per_call`).
    pub(super) ask_limits: (std::time::Duration, u32),
    pub(super) exposed: Mutex<Vec<String>>,
    /// Its resources, templates and prompts, as last listed.
    pub(super) offers: Offers,
    /// Sessions' subscriptions to its resources.
    pub(super) subscriptions: toolhost_mcp_wire::subscribe::Subscriptions,
    /// Where its stored login (`toolhost auth login`) would be.
    pub(super) state_dir: Option<std::path::PathBuf>,
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
            unavailable_calls: self.unavailable_calls.load(Ordering::Relaxed),
            tools: self.exposed.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            source: None,
        }
    }

    /// Records why the server is not up. The text often quotes the server
    /// (its error messages): it is escaped before it is logged or shown,
    /// and URLs in it lose their credentials.
    pub(super) fn set_error(&self, e: String) {
        let e = crate::tool::log_safe(&redact_urls(&e)).into_owned();
        tracing::warn!(server = %self.cfg.name, "{e}");
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    pub(super) fn mark_attempted(&self) {
        self.attempted.store(true, Ordering::Release);
        self.attempted_notify.notify_waiters();
    }
}

/// `text` with every `scheme://user:password@host/path?query` cut to
/// `scheme://host/path`: credentials in a configured URL never reach a log,
/// a status or a model.
pub(super) fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let start = rest[..i].rfind(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c))).map_or(0, |j| j + 1);
        let end =
            rest[i + 3..].find(|c: char| c.is_whitespace() || "()<>\"'".contains(c)).map_or(rest.len(), |j| i + 3 + j);
        out.push_str(&rest[..start]);
        let url = &rest[start..end];
        match reqwest::Url::parse(url) {
            Ok(mut u) => {
                let _ = u.set_username("");
                let _ = u.set_password(None);
                u.set_query(None);
                u.set_fragment(None);
                out.push_str(u.as_str());
            }
            Err(_) => out.push_str(url),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A server's offer and when it changed; shared by its supervisor, its
/// client handler and the MCP front.
#[derive(Debug, Default)]
pub(super) struct Offers {
    pub(super) current: Mutex<Arc<Offer>>,
    /// Bumped whenever the resources or templates listed change.
    pub(super) resources_generation: AtomicU64,
    /// Bumped whenever the prompts listed change.
    pub(super) prompts_generation: AtomicU64,
    pub(super) resources_stale: AtomicBool,
    pub(super) prompts_stale: AtomicBool,
    /// The server announced a change: the supervisor lists it again.
    pub(super) changed: Notify,
}

impl Offers {
    /// The server said its resources changed.
    pub(super) fn resources_changed(&self) {
        self.resources_stale.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    /// The server said its prompts changed.
    pub(super) fn prompts_changed(&self) {
        self.prompts_stale.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    pub(super) fn current(&self) -> Arc<Offer> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn store(&self, next: Offer) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if next.resources != current.resources || next.templates != current.templates {
            self.resources_generation.fetch_add(1, Ordering::AcqRel);
        }
        if next.prompts != current.prompts {
            self.prompts_generation.fetch_add(1, Ordering::AcqRel);
        }
        *current = Arc::new(next);
    }
}
