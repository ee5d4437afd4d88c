//! Requests and replies of the admin API, shared by the router and the
//! client. Routes (all under `/admin`, bearer: the admin token):
//!
//! | method and path | request | reply |
//! |---|---|---|
//! | `GET /status` | | [`StatusReply`] |
//! | `GET /plugins` | | [`PluginsReply`] |
//! | `POST /plugins` | [`AddPluginRequest`] | [`InstalledReply`] |
//! | `DELETE /plugins/{name}` | | [`RemovedReply`] |
//! | `POST /servers` | a server config (`mcp.servers[]` shape) | [`AddServerReply`] |
//! | `DELETE /servers/{name}` | | [`RemovedReply`] |
//! | `GET /stats` | | [`StatsReply`] |
//! | `GET /grants` | | [`GrantsReply`] |
//! | `GET /agents` | | [`AgentsReply`] |
//! | `POST /overrides` | [`SetOverrideRequest`] | [`AgentStatusReport`] |
//! | `POST /overrides/clear` | [`ClearOverrideRequest`] | [`AgentStatusReport`] |
//! | `GET /pairings` | | [`PairingsReply`] |
//! | `POST /pairings` | [`PairRequest`] | [`PairingView`] |
//! | `DELETE /pairings/{id}` | | [`RemovedReply`] |
//!
//! Errors are [`ErrorReply`] with an HTTP status saying what kind.

use crate::budget::Tier;
use crate::mcp_client::ServerStatus;
use crate::package::Provenance;
pub use crate::report::AgentStatusReport;
use crate::report::{GrantsReport, StatsRow};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub use crate::mcp::http::PairingView;

/// `POST /pairings`: a one-time code for `agent`, good for `for_secs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairRequest {
    /// The agent (an `npcs[].name`) the code joins as.
    pub agent: String,
    /// How long the code waits for its client, in seconds (at most a day).
    pub for_secs: u64,
}

/// `GET /pairings`: the codes waiting and the tokens they gave.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairingsReply {
    /// Oldest first.
    pub pairings: Vec<PairingView>,
}

/// One registry provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderEntry {
    /// Provider name.
    pub name: String,
    /// `wasm` or `mcp`.
    pub kind: String,
    /// Whether its tools can be called now.
    pub available: bool,
    /// Its version's digest, when it has one.
    pub fingerprint: Option<String>,
    /// Its tools.
    pub tools: Vec<String>,
    /// A wasm plugin's code now: `fast` (optimized code compiling in the
    /// background) or `optimized`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// `GET /status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReply {
    /// The serving process.
    #[serde(default)]
    pub pid: u32,
    /// Every provider, sorted by name.
    pub providers: Vec<ProviderEntry>,
    /// Every external server, sorted by name.
    pub servers: Vec<ServerStatus>,
    /// Plugins being compiled now, by name, and for how long so far.
    #[serde(default)]
    pub compiling: Vec<CompilingEntry>,
    /// Whether everything configured has loaded (plugins compiled,
    /// external servers connected or failed).
    #[serde(default = "ready_by_default")]
    pub ready: bool,
}

fn ready_by_default() -> bool {
    true
}

/// A plugin being compiled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompilingEntry {
    /// The plugin.
    pub plugin: String,
    /// For how long so far, milliseconds.
    pub ms: u64,
}

/// One loaded wasm plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginEntry {
    /// Plugin name.
    pub name: String,
    /// Component digest.
    pub sha256: String,
    /// Its tools.
    pub tools: Vec<String>,
    /// Where it comes from, in words.
    pub provenance_text: Option<String>,
    /// Where it comes from.
    pub provenance: Option<Provenance>,
    /// `config` (the config, the command line, the built-ins, the plugins
    /// directory) or `runtime` (`toolhost plugin add`, restored at start).
    #[serde(default)]
    pub source: Option<String>,
    /// The limits its calls run under now.
    #[serde(default)]
    pub limits: Option<crate::report::LimitsInForce>,
    /// Its tools' declarations (what `toolhost review` compares a new
    /// version with).
    #[serde(default)]
    pub declarations: Vec<crate::report::ToolDeclaration>,
    /// Its canary: the one under way, else how the last one ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<toolhost_admission::canary::CanaryStatus>,
    /// Its code now: `fast` (optimized code compiling in the background)
    /// or `optimized`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// `GET /plugins`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginsReply {
    /// Every wasm plugin, sorted by name.
    pub plugins: Vec<PluginEntry>,
    /// Plugins held back, with why: a config reload unloaded them because
    /// their grants no longer cover what they import (the reload that
    /// grants it loads them again), or their manifest names a secret that
    /// is not set (`toolhost secret set` loads them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<crate::HeldPlugin>,
}

impl PluginsReply {
    /// The wasm plugins loaded in `host`, sorted by name.
    pub fn of(installer: &crate::Installer) -> PluginsReply {
        let host = installer.host();
        let catalog = host.pipeline().registry().snapshot();
        let plugins = catalog
            .providers()
            .filter(|p| p.kind() == crate::tool::ProviderKind::Wasm)
            .map(|p| {
                let origin = host.admission().provenance(p.name());
                PluginEntry {
                    name: p.name().to_string(),
                    sha256: p.fingerprint().unwrap_or_default().to_string(),
                    tools: p.tools().iter().map(|t| t.name.clone()).collect(),
                    provenance_text: origin.as_ref().map(|o| o.describe()),
                    source: Some(installer.runtime_changes().plugin_source(p.name()).as_str().to_string()),
                    provenance: origin,
                    limits: Some(crate::report::LimitsInForce::of(host, p.name())),
                    declarations: p.tools().iter().map(Into::into).collect(),
                    canary: host.admission().canary_status(p.name()),
                    code: p.describe().code.map(str::to_string),
                }
            })
            .collect();
        PluginsReply { plugins, withheld: host.admission().withheld_plugins() }
    }
}

/// `POST /plugins`: load or replace the plugin in this file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddPluginRequest {
    /// Absolute path of the component file, readable by the host, or an
    /// `oci://` reference the host pulls.
    pub path: PathBuf,
}

/// `POST /plugins/canary`: start a canary upgrade.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CanaryRequest {
    /// The new version: an absolute path readable by the host, or an
    /// `oci://` reference the host pulls.
    pub path: PathBuf,
    /// The terms.
    pub terms: toolhost_admission::canary::CanaryTerms,
    /// The plugin it must be a version of (refused when it is another).
    #[serde(default)]
    pub plugin: Option<String>,
}

/// What adding a plugin did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstalledReply {
    /// The install.
    #[serde(flatten)]
    pub installed: crate::Installed,
    /// Where it comes from, in words.
    pub provenance_text: String,
}

/// `POST /servers`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddServerReply {
    /// The server's name.
    pub added: String,
    /// Its state after the first connection attempt (or 20 s).
    pub status: Option<ServerStatus>,
}

/// `DELETE /plugins/{name}`, `DELETE /servers/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemovedReply {
    /// What was removed.
    pub removed: String,
}

/// `GET /stats`: every tool's figures in the running host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatsReply {
    /// The serving process.
    pub pid: u32,
    /// One row per tool.
    pub tools: Vec<StatsRow>,
}

/// `GET /grants`: the running host's plugins, reviewed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrantsReply {
    /// The serving process.
    pub pid: u32,
    /// One report per wasm plugin.
    pub plugins: Vec<GrantsReport>,
    /// Plugins held back (waiting for a secret or a grant), with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<crate::HeldPlugin>,
}

/// `GET /agents`: every agent as the running host sees it now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentsReply {
    /// The serving process.
    pub pid: u32,
    /// By name.
    pub agents: Vec<AgentStatusReport>,
}

/// `POST /overrides`: the DM sets an agent's tier for a while, whatever its
/// ceiling. Its MCP sessions are told their tool list changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetOverrideRequest {
    /// The agent (`npcs[].name`).
    pub agent: String,
    /// The tier it works at while the override lasts.
    pub tier: Tier,
    /// How long it lasts, in seconds (at least 1, at most [`MAX_OVERRIDE_SECS`]).
    pub for_secs: u64,
}

/// The longest override: a day.
pub const MAX_OVERRIDE_SECS: u64 = 24 * 3600;

/// `POST /overrides/clear`: ends an agent's override now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClearOverrideRequest {
    /// The agent.
    pub agent: String,
}

pub use crate::mcp::reply::{ErrorBody, ErrorData, ErrorReply};

/// What reading the secrets again changed (`POST /admin/secrets/refresh`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretsRefreshed {
    /// Plugins loaded because the secrets they wait for are set now.
    pub plugins: Vec<crate::PluginChange>,
}
