//! The admin API's client side, for the `toolhost` commands that change or
//! inspect a running host, and the endpoint record they find it by.

use super::api::{
    AddPluginRequest, AddServerReply, ErrorReply, InstalledReply, PluginsReply, RemovedReply, StatusReply,
};
use crate::config::McpServerConfig;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the running host could not be reached or refused a request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No endpoint record: no host is serving with this state directory.
    #[error("no running toolhost found: {0} is missing (start one with `toolhost serve`)")]
    NotRunning(PathBuf),
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

/// `<state>/admin.json`: where a serving host's admin API is and its token,
/// readable by the operator's user only.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointRecord {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The admin token.
    pub token: String,
    /// The serving process.
    pub pid: u32,
}

impl EndpointRecord {
    /// The record's path in `state`.
    pub fn path(state: &Path) -> PathBuf {
        state.join("admin.json")
    }

    /// Writes the record for a host serving its admin API on `addr`
    /// (atomically, mode 0600). Remove it with [`EndpointRecord::remove`].
    pub fn write(state: &Path, addr: SocketAddr, token: &str) -> std::io::Result<PathBuf> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        crate::runtime::private::create_dirs(state)?;
        let path = EndpointRecord::path(state);
        let tmp = state.join(format!(".admin.json.{}", std::process::id()));
        let record =
            EndpointRecord { url: format!("http://{addr}"), token: token.to_string(), pid: std::process::id() };
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(serde_json::to_string(&record).map_err(std::io::Error::other)?.as_bytes())?;
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    }

    /// Removes the record at `path`.
    pub fn remove(path: &Path) {
        let _ = std::fs::remove_file(path);
    }

    /// Reads the record in `state`.
    pub fn read(state: &Path) -> Result<EndpointRecord, ClientError> {
        let path = EndpointRecord::path(state);
        let text = std::fs::read_to_string(&path).map_err(|_| ClientError::NotRunning(path.clone()))?;
        serde_json::from_str(&text).map_err(|e| ClientError::BadRecord { path, reason: e.to_string() })
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
    pub fn discover(state: &Path) -> Result<AdminClient, ClientError> {
        let record = EndpointRecord::read(state)?;
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
