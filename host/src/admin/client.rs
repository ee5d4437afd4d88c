//! The admin API's client side, for the `toolhost` commands that change or
//! inspect a running host, and the endpoint record they find it by.

use super::api::{
    AddPluginRequest, AddServerReply, AgentStatusReport, AgentsReply, ClearOverrideRequest, ErrorReply, GrantsReply,
    InstalledReply, PluginsReply, RemovedReply, SetOverrideRequest, StatsReply, StatusReply,
};
use crate::config::McpServerConfig;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest admin endpoint record read.
const MAX_RECORD_BYTES: usize = 64 * 1024;

/// Why the running host could not be reached or refused a request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No endpoint record: no host is serving with this state directory.
    #[error("no running toolhost found: no live endpoint record in {0} (start one with `toolhost serve`)")]
    NotRunning(PathBuf),
    /// `--pid` names no running host.
    #[error("no toolhost with pid {pid} serves with this state directory (records: {dir})")]
    NoSuchHost {
        /// The pid asked for.
        pid: u32,
        /// Where the records are.
        dir: PathBuf,
    },
    /// Several hosts serve with this state directory and none is the obvious one.
    #[error("several toolhost processes serve with this state directory: {0}; choose one with --pid")]
    Ambiguous(String),
    /// The endpoint record is unreadable.
    #[error("{path}: {reason}")]
    BadRecord {
        /// The record.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The host did not answer.
    #[error("reaching the running toolhost at {url} (is it still running?): {reason}")]
    Unreachable {
        /// Where it was looked for.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// The host answered with an error.
    #[error("{message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The host's message.
        message: String,
    },
    /// The host's reply did not parse.
    #[error("unexpected reply from the running toolhost: {0}")]
    BadReply(String),
}

/// `<state>/admin/<pid>.json`: where one serving host's admin API is and
/// its token, readable by the operator's user only. Each serving process
/// has its own, so a `serve --stdio` started by an MCP client never hides
/// the DM's HTTP host; a record whose process is gone is stale and ignored
/// (and removed).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointRecord {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The admin token.
    pub token: String,
    /// The serving process.
    pub pid: u32,
    /// How that process serves MCP: `http` or `stdio`.
    #[serde(default = "http_transport")]
    pub transport: String,
}

fn http_transport() -> String {
    "http".into()
}

impl EndpointRecord {
    /// The directory of records in `state`.
    pub fn dir(state: &Path) -> PathBuf {
        state.join("admin")
    }

    /// Writes the record for this process, serving its admin API on `addr`
    /// and MCP over `transport` (atomically, mode 0600, in a 0700
    /// directory). Remove it with [`EndpointRecord::remove`].
    pub fn write(state: &Path, addr: SocketAddr, token: &str, transport: &str) -> std::io::Result<PathBuf> {
        let dir = EndpointRecord::dir(state);
        crate::runtime::private::create_dirs(&dir)?;
        let pid = std::process::id();
        let path = dir.join(format!("{pid}.json"));
        let record = EndpointRecord {
            url: format!("http://{addr}"),
            token: token.to_string(),
            pid,
            transport: transport.into(),
        };
        let json = serde_json::to_string(&record).map_err(std::io::Error::other)?;
        crate::runtime::private::write_private(&path, json.as_bytes())?;
        Ok(path)
    }

    /// Removes the record at `path`.
    pub fn remove(path: &Path) {
        let _ = std::fs::remove_file(path);
    }

    /// The records of the hosts running with `state`, oldest process first.
    /// Records of processes that are gone are removed.
    pub fn live(state: &Path) -> Vec<EndpointRecord> {
        let Ok(entries) = std::fs::read_dir(EndpointRecord::dir(state)) else { return Vec::new() };
        let mut live = Vec::new();
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let record = match crate::runtime::private::read_state(&path, MAX_RECORD_BYTES) {
                Ok(Some(bytes)) => serde_json::from_slice::<EndpointRecord>(&bytes).ok(),
                Ok(None) => continue,
                // Not one this user wrote privately: neither obeyed nor removed.
                Err(e) => {
                    tracing::warn!(record = %path.display(), "ignoring an admin endpoint record: {e}");
                    continue;
                }
            };
            match record {
                Some(r) if process_alive(r.pid) => live.push(r),
                _ => {
                    tracing::debug!(record = %path.display(), "removing a stale admin endpoint record");
                    EndpointRecord::remove(&path);
                }
            }
        }
        live.sort_by_key(|r| r.pid);
        live
    }

    /// The record of the host to talk to: the one with `pid` when given;
    /// otherwise the only HTTP host, or the only host at all.
    pub fn find(state: &Path, pid: Option<u32>) -> Result<EndpointRecord, ClientError> {
        let live = EndpointRecord::live(state);
        if let Some(pid) = pid {
            return live
                .into_iter()
                .find(|r| r.pid == pid)
                .ok_or_else(|| ClientError::NoSuchHost { pid, dir: EndpointRecord::dir(state) });
        }
        let http: Vec<&EndpointRecord> = live.iter().filter(|r| r.transport == "http").collect();
        match (http.as_slice(), live.as_slice()) {
            ([one], _) => Ok((*one).clone()),
            ([], [one]) => Ok(one.clone()),
            ([], []) => Err(ClientError::NotRunning(EndpointRecord::dir(state))),
            _ => Err(ClientError::Ambiguous(
                live.iter()
                    .map(|r| format!("pid {} ({}, admin {})", r.pid, r.transport, r.url))
                    .collect::<Vec<_>>()
                    .join(", "),
            )),
        }
    }
}

/// Whether process `pid` exists (signal 0: nothing is sent).
fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        // It exists but belongs to someone else: not ours, but not gone.
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// A connection to a running host's admin API.
#[derive(Debug)]
pub struct AdminClient {
    record: EndpointRecord,
    client: reqwest::Client,
    rt: tokio::runtime::Runtime,
}

impl AdminClient {
    /// Finds the host serving with state directory `state`.
    /// With `pid`, the host of that process; otherwise see [`EndpointRecord::find`].
    pub fn discover(state: &Path, pid: Option<u32>) -> Result<AdminClient, ClientError> {
        let record = EndpointRecord::find(state, pid)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClientError::Unreachable { url: record.url.clone(), reason: e.to_string() })?;
        Ok(AdminClient { record, client: reqwest::Client::new(), rt })
    }

    /// Providers, tools and external servers.
    pub fn status(&self) -> Result<StatusReply, ClientError> {
        self.call(reqwest::Method::GET, "/status", None::<()>)
    }

    /// The loaded wasm plugins.
    pub fn plugins(&self) -> Result<PluginsReply, ClientError> {
        self.call(reqwest::Method::GET, "/plugins", None::<()>)
    }

    /// Loads or replaces the plugin in `path` (absolute).
    pub fn add_plugin(&self, path: &Path) -> Result<InstalledReply, ClientError> {
        self.call(reqwest::Method::POST, "/plugins", Some(AddPluginRequest { path: path.to_path_buf() }))
    }

    /// Starts a canary upgrade.
    pub fn canary(
        &self,
        plugin: &str,
        path: &Path,
        terms: toolhost_admission::canary::CanaryTerms,
    ) -> Result<toolhost_admission::canary::CanaryStatus, ClientError> {
        self.call(
            reqwest::Method::POST,
            "/plugins/canary",
            Some(super::api::CanaryRequest { path: path.to_path_buf(), terms, plugin: Some(plugin.to_string()) }),
        )
    }

    /// Unloads a plugin.
    pub fn remove_plugin(&self, name: &str) -> Result<RemovedReply, ClientError> {
        self.call(reqwest::Method::DELETE, &format!("/plugins/{name}"), None::<()>)
    }

    /// Connects another external server.
    pub fn add_server(&self, cfg: &McpServerConfig) -> Result<AddServerReply, ClientError> {
        self.call(reqwest::Method::POST, "/servers", Some(cfg))
    }

    /// Disconnects an external server.
    pub fn remove_server(&self, name: &str) -> Result<RemovedReply, ClientError> {
        self.call(reqwest::Method::DELETE, &format!("/servers/{name}"), None::<()>)
    }

    /// The process and admin address this client talks to.
    pub fn endpoint(&self) -> &EndpointRecord {
        &self.record
    }

    /// Every tool's figures.
    pub fn stats(&self) -> Result<StatsReply, ClientError> {
        self.call(reqwest::Method::GET, "/stats", None::<()>)
    }

    /// The plugins' grants review.
    pub fn grants(&self) -> Result<GrantsReply, ClientError> {
        self.call(reqwest::Method::GET, "/grants", None::<()>)
    }

    /// Every agent now: ceiling, override, visible tools.
    pub fn agents(&self) -> Result<AgentsReply, ClientError> {
        self.call(reqwest::Method::GET, "/agents", None::<()>)
    }

    /// Sets a DM override.
    pub fn set_override(&self, req: &SetOverrideRequest) -> Result<AgentStatusReport, ClientError> {
        self.call(reqwest::Method::POST, "/overrides", Some(req))
    }

    /// Tells the running host to read the secrets file again.
    pub fn refresh_secrets(&self) -> Result<super::api::SecretsRefreshed, ClientError> {
        self.call(reqwest::Method::POST, "/secrets/refresh", None::<()>)
    }

    /// Re-reads the running host's config (`toolhost reload`).
    pub fn reload(&self, force: bool) -> Result<crate::reload::ReloadReport, ClientError> {
        self.call(reqwest::Method::POST, if force { "/reload?force=true" } else { "/reload" }, None::<()>)
    }

    /// Mints a pairing code (`toolhost pair`).
    pub fn pair(&self, agent: &str, for_secs: u64) -> Result<super::api::PairingView, ClientError> {
        self.call(
            reqwest::Method::POST,
            "/pairings",
            Some(super::api::PairRequest { agent: agent.to_string(), for_secs }),
        )
    }

    /// The pairing codes waiting and the tokens they gave.
    pub fn pairings(&self) -> Result<super::api::PairingsReply, ClientError> {
        self.call(reqwest::Method::GET, "/pairings", None::<()>)
    }

    /// Revokes a pairing code or the token it gave.
    pub fn unpair(&self, id: &str) -> Result<RemovedReply, ClientError> {
        self.call(reqwest::Method::DELETE, &format!("/pairings/{id}"), None::<()>)
    }

    /// Ends a DM override.
    pub fn clear_override(&self, agent: &str) -> Result<AgentStatusReport, ClientError> {
        self.call(reqwest::Method::POST, "/overrides/clear", Some(ClearOverrideRequest { agent: agent.to_string() }))
    }

    fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        route: &str,
        body: Option<impl Serialize>,
    ) -> Result<T, ClientError> {
        let url = format!("{}/admin{route}", self.record.url);
        let unreachable = |e: reqwest::Error| ClientError::Unreachable { url: url.clone(), reason: e.to_string() };
        self.rt.block_on(async {
            let mut req =
                self.client.request(method, &url).bearer_auth(&self.record.token).timeout(Duration::from_secs(60));
            // Who runs this command, for the host's audit trail.
            let uid = rustix::process::getuid().as_raw();
            let user = std::env::var("USER").unwrap_or_default();
            let who = format!("cli uid {uid}{}", if user.is_empty() { String::new() } else { format!(" ({user})") });
            // Printable ASCII only: a header carries nothing else.
            let who: String = who.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
            req = req.header(super::router::ACTOR_HEADER, who);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let resp = req.send().await.map_err(unreachable)?;
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(unreachable)?;
            if !status.is_success() {
                let message = serde_json::from_slice::<ErrorReply>(&bytes)
                    .map(|e| e.error.message)
                    .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
                return Err(ClientError::Refused { status: status.as_u16(), message });
            }
            serde_json::from_slice(&bytes).map_err(|e| ClientError::BadReply(e.to_string()))
        })
    }
}
