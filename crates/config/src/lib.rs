//! The configuration file, `toolhost.yaml`.
//!
//! It accepts the Glyphoxa seed's shape unchanged (`mcp.servers[]`, `npcs[]`)
//! plus toolhost's own sections (`plugins`, `limits`, `budget`). Every
//! section is optional. Unknown keys are errors, so a typo never silently
//! disables a setting; every error names the key and the line.
//!
//! `${VAR}` in `command`, `url`, `env` values and `auth` fields is replaced
//! by the environment variable's value (for secrets); a missing variable is
//! an error naming the key and the line.

#![deny(unsafe_code)]

mod oauth;
mod paths;
mod sections;
pub mod telemetry;

pub use oauth::claims_match;
pub use paths::{default_cache_dir, default_state_dir, user_dir};
pub use sections::*;
use toolhost_admission::{package, secrets};
use toolhost_core::{audit, budget, capabilities, rates, runtime, tool};

use crate::runtime::Limits;
use budget::{AgentProfile, BudgetConfig};
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The default config file name, looked up in the working directory.
pub const DEFAULT_FILE: &str = "toolhost.yaml";

/// The largest config file read (far above any real one).
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// Why the config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read, or another user could have written it.
    #[error("config file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The YAML is malformed or does not fit the schema.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the key and line.
        message: String,
    },
}

/// A config (or a part of one) that does not hold together, and why: the
/// key, and the line where the YAML parser knows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigProblem(pub String);

impl From<String> for ConfigProblem {
    fn from(message: String) -> ConfigProblem {
        ConfigProblem(message)
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// External MCP servers (seed shape).
    pub mcp: McpConfig,
    /// Agent profiles (seed shape: `npcs:`).
    pub npcs: Vec<AgentProfile>,
    /// Which plugins to load.
    pub plugins: PluginsConfig,
    /// Hard limits on every wasm call.
    pub limits: LimitsConfig,
    /// Latency budget settings.
    pub budget: BudgetConfig,
    /// The audit trail.
    pub audit: crate::audit::AuditConfig,
    /// The campaign memory store.
    pub memory: MemoryConfig,
    /// The voice relay (`/voice/...` on `toolhost serve --http`).
    pub voice: VoiceConfig,
    /// A fleet: hosts sharing their run-time changes through PostgreSQL.
    pub cluster: ClusterConfig,
    /// The MCP server front (`toolhost serve`).
    pub server: ServerConfig,
    /// OpenTelemetry traces (off by default).
    pub telemetry: crate::telemetry::TelemetryConfig,
    /// Which plugin packages are trusted (signatures, lock file).
    pub trust: crate::package::TrustConfig,
    /// OCI registries (`oci://` plugins): plain-HTTP hosts, credentials file.
    pub oci: OciConfig,
    /// Catalogues of plugins in OCI registries (`toolhost search`,
    /// `install`, `publish`).
    pub marketplace: MarketplaceConfig,
    /// Directory of the compile cache (default: see `toolhost --help`).
    /// It must be private to this user (0700, owned by it).
    pub cache_dir: Option<PathBuf>,
    /// Size bound of the compile cache in MiB (default 1024); the least
    /// recently used entries are evicted past it.
    pub cache_max_mb: Option<u64>,
    /// Directory for calibration results and other state.
    pub state_dir: Option<PathBuf>,
    /// Directory of the config file; relative paths resolve against it.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The config file itself (`None`: the defaults, no file).
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// The line (1-based) where `needle` first appears in `text`.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.find(needle).map(|i| text[..i].lines().count().max(1) + usize::from(text[..i].ends_with('\n')))
}

impl Config {
    /// Reads and checks a config file. A file another user could have
    /// written (it, or its directory) is refused: it names commands to run
    /// and grants to give.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = crate::runtime::private::read_obeyed(path, MAX_CONFIG_BYTES)
            .map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        let mut cfg =
            Config::parse(&text).map_err(|e| ConfigError::Invalid { path: path.to_path_buf(), message: e.0 })?;
        cfg.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        cfg.file = Some(path.to_path_buf());
        // Key files are the config's: relative to its directory.
        let base = cfg.base_dir.clone();
        for s in &mut cfg.mcp.servers {
            let Some(o) = s.auth.as_mut().and_then(|a| a.oauth.as_mut()) else { continue };
            let files = [o.private_key_file.as_mut(), o.cross_app.as_mut().and_then(|x| x.id_token_file.as_mut())];
            for f in files.into_iter().flatten() {
                if Path::new(f.as_str()).is_relative() {
                    *f = base.join(&*f).display().to_string();
                }
            }
        }
        Ok(cfg)
    }

    /// Parses and checks config text. Errors name the key and the line.
    pub fn parse(text: &str) -> Result<Config, ConfigProblem> {
        let mut cfg: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?
        };
        cfg.check(text)?;
        cfg.expand_env(text, |k| std::env::var(k).ok())?;
        Ok(cfg)
    }

    fn check(&self, text: &str) -> Result<(), String> {
        let at = |needle: &str| line_of(text, needle).map(|l| format!(" at line {l}")).unwrap_or_default();
        let mut seen = HashSet::new();
        for (i, n) in self.npcs.iter().enumerate() {
            if n.name.trim().is_empty() {
                return Err(format!("npcs[{i}].name: must not be empty{}", at("npcs")));
            }
            if !seen.insert(n.name.as_str()) {
                return Err(format!("npcs[{i}].name: duplicate agent name {:?}{}", n.name, at(&n.name)));
            }
            if let Some(r) = n.rate_limit
                && r.per_minute > 0
                && r.burst == 0
            {
                return Err(format!("npcs[{i}].rate_limit.burst: must be at least 1{}", at(&n.name)));
            }
        }
        // Two agents on one URL: the second would take the first's endpoint.
        let mut slugs: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
        for (i, n) in self.npcs.iter().enumerate() {
            let slug = agent_slug(&n.name);
            if let Some(other) = slugs.insert(slug.clone(), &n.name) {
                return Err(format!(
                    "npcs[{i}].name: {:?} would be served at /mcp/{slug}, like {other:?}; rename one{}",
                    n.name,
                    at(&n.name)
                ));
            }
        }
        for (key, r) in [
            ("server.rate_limit", self.server.rate_limit),
            ("server.operator_rate_limit", self.server.operator_rate_limit),
            ("server.connection_rate_limit", self.server.connection_rate_limit),
            ("server.auth_failure_limit", self.server.auth_failure_limit),
        ] {
            if r.per_minute > 0 && r.burst == 0 {
                return Err(format!(
                    "{key}.burst: must be at least 1 (or set per_minute: 0 for no limit){}",
                    at(key.rsplit('.').next().unwrap_or(key))
                ));
            }
        }
        for (i, n) in self.npcs.iter().enumerate() {
            if n.max_calls_per_turn == Some(0) {
                return Err(format!(
                    "npcs[{i}].max_calls_per_turn: must be at least 1 (leave it out for budget.max_calls_per_turn){}",
                    at("max_calls_per_turn")
                ));
            }
        }
        if let Some(url) = &self.memory.url {
            if self.memory.path.is_some() {
                return Err(format!(
                    "memory: set either path (a SQLite file) or url (PostgreSQL), not both{}",
                    at("memory")
                ));
            }
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(format!(
                    "memory.url: {:?} is not a PostgreSQL URL (postgres://user@host/db, or postgresql:///db?host=/socket/dir){}",
                    url.split_once('@').map_or(url.as_str(), |(_, h)| h),
                    at("url")
                ));
            }
        }
        if let Some(url) = &self.cluster.url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err(format!(
                "cluster.url: {:?} is not a PostgreSQL URL (postgres://user@host/db, or postgresql:///db?host=/socket/dir){}",
                url.split_once('@').map_or(url.as_str(), |(_, h)| h),
                at("url")
            ));
        }
        if self.cluster.url.is_some() && self.cluster.secret_key_file.is_none() {
            return Err(format!(
                "cluster.secret_key_file: a fleet needs a key file every host holds (e.g. `openssl rand -out cluster.key 32 && chmod 600 cluster.key`): it signs each change, so that only the hosts can change the hosts{}",
                at("cluster")
            ));
        }
        if let Some(id) = &self.cluster.host_id
            && (id.is_empty() || id.len() > 128 || id.chars().any(|c| c.is_control() || c.is_whitespace()))
        {
            return Err(format!("cluster.host_id: {id:?} must be 1 to 128 characters, no spaces{}", at("host_id")));
        }
        for (i, c) in self.marketplace.catalogues.iter().enumerate() {
            let rest = c.strip_prefix("oci://").unwrap_or("");
            let (_, path) = rest.split_once('/').unwrap_or((rest, ""));
            if path.is_empty() || path.contains(['@', ':']) {
                return Err(format!(
                    "marketplace.catalogues[{i}]: {c:?} is not a catalogue: write oci://HOST[:PORT]/REPOSITORY, with no tag or digest{}",
                    at(c)
                ));
            }
        }
        if self.marketplace.max_entries == 0 {
            return Err(format!("marketplace.max_entries: must be at least 1{}", at("max_entries")));
        }
        if self.marketplace.revocations_secs == 0 {
            return Err(format!("marketplace.revocations_secs: must be at least 1{}", at("revocations_secs")));
        }
        for (i, k) in self.marketplace.revocations_signed_by.iter().enumerate() {
            let bad_id = k.strip_prefix("ed25519:").is_some_and(|id| {
                id.len() != 16 || !id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            });
            if bad_id || k.trim().is_empty() || k.chars().any(char::is_control) {
                return Err(format!(
                    "marketplace.revocations_signed_by[{i}]: {k:?}: write a key id (ed25519: and 16 lowercase hex digits, as keygen prints it) or the name of a trust.keys entry{}",
                    at("revocations_signed_by")
                ));
            }
        }
        if let Some(n) = self.npcs.iter().find(|n| agent_slug(&n.name) == "pair") {
            return Err(format!(
                "npcs: {:?} would be served at /mcp/pair, where pairing codes are (toolhost pair): rename the agent{}",
                n.name,
                at(&n.name)
            ));
        }
        if let Some(o) = &self.server.oauth {
            let names: Vec<&str> = self.npcs.iter().map(|n| n.name.as_str()).collect();
            if let Some(problem) = o.problems(&names).into_iter().next() {
                return Err(format!("{problem}{}", at("oauth")));
            }
        }
        if self.server.loopback_operator == Some(false) && self.server.tokens.is_empty() && self.server.oauth.is_none()
        {
            return Err(format!(
                "server.loopback_operator: false leaves no way in: with no server.tokens and no server.oauth, the loopback operator is the only client{}",
                at("loopback_operator")
            ));
        }
        if let Some(problem) = self.telemetry.problems().into_iter().next() {
            return Err(format!("{problem}{}", at("telemetry")));
        }
        if self.audit.disabled && (self.audit.fail_closed || !self.audit.fail_closed_tools.is_empty()) {
            return Err(format!(
                "audit.fail_closed: the audit gate needs the audit file, and audit.disabled turns it off: set one or the other{}",
                at("fail_closed")
            ));
        }
        if self.budget.max_calls_per_turn == Some(0) {
            return Err(format!(
                "budget.max_calls_per_turn: must be at least 1 (leave it out for no cap){}",
                at("max_calls_per_turn")
            ));
        }
        for tool in self.budget.pin.keys() {
            if !crate::tool::valid_tool_name(tool) {
                return Err(format!("budget.pin: {tool:?} is not a tool name{}", at("pin")));
            }
        }
        let ceiling_ms = self
            .limits
            .timeout_ceiling_ms
            .unwrap_or(crate::runtime::Limits::default().timeout_ceiling.as_millis() as u64);
        let mut seen = HashSet::new();
        for (i, l) in self.budget.long_tools.iter().enumerate() {
            let key = format!("budget.long_tools[{i}]");
            if !seen.insert(l.tool.as_str()) {
                return Err(format!("{key}.tool: {:?} is listed twice{}", l.tool, at(&l.tool)));
            }
            if l.timeout_ms < self.budget.deep_ms {
                return Err(format!(
                    "{key}.timeout_ms: {} ms is within the DEEP ceiling ({} ms); a long tool is for calls longer than that{}",
                    l.timeout_ms,
                    self.budget.deep_ms,
                    at(&l.tool)
                ));
            }
            if l.timeout_ms > ceiling_ms {
                return Err(format!(
                    "{key}.timeout_ms: {} ms is above limits.timeout_ceiling_ms ({ceiling_ms} ms), the longest any call may take; raise that limit or lower this{}",
                    l.timeout_ms,
                    at(&l.tool)
                ));
            }
            if l.agents.is_empty() {
                return Err(format!(
                    "{key}.agents: name at least one agent (npcs[].name) that may use it{}",
                    at(&l.tool)
                ));
            }
            for a in &l.agents {
                if !self.npcs.iter().any(|n| &n.name == a) {
                    return Err(format!("{key}.agents: no agent {a:?} in npcs{}", at(a)));
                }
            }
        }
        for (plugin, prefix) in &self.plugins.prefix {
            if prefix.is_empty() || !crate::tool::valid_tool_name(prefix) {
                return Err(format!(
                    "plugins.prefix.{plugin}: {prefix:?} is not a name prefix: letters, digits, _ and - only{}",
                    at(plugin)
                ));
            }
        }
        for (plugin, values) in &self.plugins.config {
            for key in values.keys() {
                if let Err(e) = crate::secrets::check_name("config key", key) {
                    return Err(format!("plugins.config.{plugin}.{key}: {e}{}", at(key)));
                }
            }
        }
        for (name, addr) in &self.plugins.http_resolve {
            let key = format!("plugins.http_resolve.{name:?}");
            if name.rsplit_once(':').is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err()) {
                return Err(format!("{key}: expected host:port as the key{}", at(name)));
            }
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(format!("{key}: {addr:?} is not an IP:port address{}", at(name)));
            }
        }
        for ns in &self.plugins.http_nameservers {
            if ns.parse::<std::net::SocketAddr>().is_err() {
                return Err(format!(
                    "plugins.http_nameservers: {ns:?} is not an IP:port address (a name server's address and port, 127.0.0.1:53){}",
                    at(ns)
                ));
            }
        }
        for (plugin, l) in &self.plugins.limits {
            let key = format!("plugins.limits.{plugin}");
            if l.memory_mib == Some(0) {
                return Err(format!("{key}.memory_mib: must be at least 1{}", at(plugin)));
            }
            if l.plugin_concurrency == Some(0) {
                return Err(format!("{key}.plugin_concurrency: must be at least 1{}", at(plugin)));
            }
            if l.max_output_bytes == Some(0) {
                return Err(format!("{key}.max_output_bytes: must be at least 1{}", at(plugin)));
            }
            if l.fuel.is_some() && self.limits.fuel == Some(0) {
                return Err(format!(
                    "{key}.fuel: fuel metering is off (limits.fuel: 0); a plugin's fuel needs it on{}",
                    at(plugin)
                ));
            }
            if let Some(ms) = l.timeout_ceiling_ms
                && u128::from(ms) > self.limits().timeout_ceiling.as_millis()
            {
                return Err(format!(
                    "{key}.timeout_ceiling_ms: {ms} ms is above limits.timeout_ceiling_ms; a plugin's ceiling only lowers it (deadlines come from the budget, which holds to limits.timeout_ceiling_ms: raise that, and list a slow tool in budget.long_tools){}",
                    at(plugin)
                ));
            }
            if let Some(ms) = l.timeout_ceiling_ms
                && u128::from(ms) < self.limits().timeout_floor.as_millis()
            {
                return Err(format!(
                    "{key}.timeout_ceiling_ms: {ms} ms is below limits.timeout_floor_ms, the shortest deadline any call gets{}",
                    at(plugin)
                ));
            }
        }
        for o in &self.server.allowed_origins {
            let t = o.trim_end_matches('/');
            let rest = t.strip_prefix("http://").or_else(|| t.strip_prefix("https://"));
            if rest.is_none_or(|r| r.is_empty() || r.contains(['@', '/', '?', '#', ' '])) {
                return Err(format!(
                    "server.allowed_origins: {o:?} is not an origin: http(s)://host[:port], or :* for any port{}",
                    at(o)
                ));
            }
        }
        if self.server.max_sessions == 0 {
            return Err(format!("server.max_sessions: must be at least 1{}", at("max_sessions")));
        }
        if self.server.session_idle_secs < 10 {
            return Err(format!("server.session_idle_secs: must be at least 10{}", at("session_idle_secs")));
        }
        if self.server.first_list_wait_ms > 60_000 {
            return Err(format!(
                "server.first_list_wait_ms: at most 60000 (a client waits this long for its first list){}",
                at("first_list_wait_ms")
            ));
        }
        if self.server.stdio_input_poll_us > 10_000 {
            return Err(format!(
                "server.stdio_input_poll_us: at most 10000 (a stdio session spends up to this much CPU per message){}",
                at("stdio_input_poll_us")
            ));
        }
        let mut seen = HashSet::new();
        for (i, s) in self.mcp.servers.iter().enumerate() {
            let key = format!("mcp.servers[{i}]");
            if !seen.insert(s.name.as_str()) {
                return Err(format!("{key}.name: duplicate server name {:?}{}", s.name, at(&s.name)));
            }
            match s.transport {
                Transport::Stdio if s.command.as_deref().is_none_or(|c| c.trim().is_empty()) => {
                    return Err(format!("{key}.command: required for transport stdio{}", at(&s.name)));
                }
                Transport::StreamableHttp if s.url.is_none() => {
                    return Err(format!("{key}.url: required for transport streamable-http{}", at(&s.name)));
                }
                _ => {}
            }
            s.check_timeout(self.limits().deadlines()).map_err(|e| format!("{key}.{e}{}", at(&s.name)))?;
            if let Some(p) = &s.prefix
                && (p.is_empty() || !crate::tool::valid_tool_name(p))
            {
                return Err(format!(
                    "{key}.prefix: {p:?} is not a name prefix: letters, digits, _ and - only{}",
                    at(&s.name)
                ));
            }
            if s.max_tools == Some(0) {
                return Err(format!("{key}.max_tools: must be at least 1{}", at(&s.name)));
            }
        }
        Ok(())
    }

    /// Replaces `${VAR}` in server commands, urls, env values and auth
    /// fields, with `lookup` as the environment.
    pub fn expand_env(&mut self, text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<(), ConfigProblem> {
        for (i, s) in self.mcp.servers.iter_mut().enumerate() {
            let key = format!("mcp.servers[{i}]");
            let mut fields: Vec<(String, &mut String)> = Vec::new();
            if let Some(c) = s.command.as_mut() {
                fields.push((format!("{key}.command"), c));
            }
            if let Some(u) = s.url.as_mut() {
                fields.push((format!("{key}.url"), u));
            }
            for (k, v) in s.env.iter_mut() {
                fields.push((format!("{key}.env.{k}"), v));
            }
            if let Some(a) = s.auth.as_mut() {
                if let Some(t) = a.token.as_mut() {
                    fields.push((format!("{key}.auth.token"), t));
                }
                if let Some(o) = a.oauth.as_mut() {
                    fields.push((format!("{key}.auth.oauth.client_id"), &mut o.client_id));
                    fields.push((format!("{key}.auth.oauth.client_secret"), &mut o.client_secret));
                    if let Some(u) = o.token_url.as_mut() {
                        fields.push((format!("{key}.auth.oauth.token_url"), u));
                    }
                    if let Some(f) = o.private_key_file.as_mut() {
                        fields.push((format!("{key}.auth.oauth.private_key_file"), f));
                    }
                    if let Some(x) = o.cross_app.as_mut() {
                        fields.push((format!("{key}.auth.oauth.cross_app.idp_token_url"), &mut x.idp_token_url));
                        fields.push((format!("{key}.auth.oauth.cross_app.idp_client_id"), &mut x.idp_client_id));
                        fields
                            .push((format!("{key}.auth.oauth.cross_app.idp_client_secret"), &mut x.idp_client_secret));
                        fields.push((format!("{key}.auth.oauth.cross_app.id_token"), &mut x.id_token));
                        if let Some(f) = x.id_token_file.as_mut() {
                            fields.push((format!("{key}.auth.oauth.cross_app.id_token_file"), f));
                        }
                    }
                }
            }
            for (key, value) in fields {
                *value = expand(value, &lookup).map_err(|var| {
                    let line =
                        line_of(text, &format!("${{{var}}}")).map(|l| format!(" at line {l}")).unwrap_or_default();
                    format!("{key}: environment variable {var} is not set{line}")
                })?;
            }
        }
        if let Some(url) = self.cluster.url.as_mut() {
            *url = expand(url, &lookup).map_err(|var| {
                let line = line_of(text, &format!("${{{var}}}")).map(|l| format!(" at line {l}")).unwrap_or_default();
                format!("cluster.url: environment variable {var} is not set{line}")
            })?;
        }
        if let Some(url) = self.memory.url.as_mut() {
            *url = expand(url, &lookup).map_err(|var| {
                let line = line_of(text, &format!("${{{var}}}")).map(|l| format!(" at line {l}")).unwrap_or_default();
                format!("memory.url: environment variable {var} is not set{line}")
            })?;
        }
        for (i, t) in self.server.tokens.iter_mut().enumerate() {
            t.token = expand(&t.token, &lookup).map_err(|var| {
                let line = line_of(text, &format!("${{{var}}}")).map(|l| format!(" at line {l}")).unwrap_or_default();
                format!("server.tokens[{i}].token: environment variable {var} is not set{line}")
            })?;
        }
        Ok(())
    }

    /// The runtime limits this config asks for; the instance pool's memory
    /// slots fit the largest `memory_mib` in force, a plugin's included.
    pub fn limits(&self) -> Limits {
        let mut limits = self.limits.apply(Limits::default());
        limits.pool_memory_bytes =
            self.plugins.limits.values().filter_map(|l| l.memory_mib).map(|m| m << 20).max().unwrap_or(0);
        limits
    }

    /// Each plugin's own limits (`plugins.limits`), as the runtime takes them.
    pub fn plugin_limits(&self) -> std::collections::HashMap<String, crate::runtime::PluginLimits> {
        self.plugins.limits.iter().map(|(name, l)| (name.clone(), l.to_limits())).collect()
    }

    /// A path from the config, resolved against the config file's directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.base_dir.join(p) }
    }
}

/// Expands `${VAR}`; returns the name of the first missing variable on error.
fn expand(value: &str, lookup: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else { break };
        let var = &rest[start + 2..start + 2 + len];
        out.push_str(&rest[..start]);
        out.push_str(&lookup(var).ok_or_else(|| var.to_string())?);
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A URL path segment for an agent name: lowercase ASCII letters and
/// digits, everything else folded to single dashes ("Bartok the Barkeep" ->
/// "bartok-the-barkeep").
pub fn agent_slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests;
