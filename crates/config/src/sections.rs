//! The config's sections below the top level: `mcp`, `server`, `memory`,
//! `cluster`, `voice`, `plugins`, `limits` and `oci`.

use crate::ConfigProblem;
use crate::runtime::Limits;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// `mcp:` section.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// The servers.
    pub servers: Vec<McpServerConfig>,
}

/// Transport of an external MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// A subprocess speaking over stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    StreamableHttp,
}

/// One external MCP server (the seed's `MCPServerConfig`).
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Unique name.
    pub name: String,
    /// `stdio` or `streamable-http`.
    pub transport: Transport,
    /// Executable and arguments, split on whitespace (stdio).
    #[serde(default)]
    pub command: Option<String>,
    /// Endpoint (streamable-http).
    #[serde(default)]
    pub url: Option<String>,
    /// Environment for the subprocess (stdio), besides `pass_env`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables passed through from the host's environment to the
    /// subprocess (stdio); it gets no others [default: PATH, HOME, LANG,
    /// LC_ALL, TZ, TMPDIR, USER].
    #[serde(default = "default_pass_env")]
    pub pass_env: Vec<String>,
    /// Authentication (streamable-http).
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    /// The deadline, in milliseconds, of this server's tools that declare
    /// no max duration [default: the ceiling of their tier]. Between
    /// `limits.timeout_floor_ms` and `limits.timeout_ceiling_ms`; also the
    /// deadline of its resource reads, prompts and completions [default:
    /// `limits.timeout_ceiling_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The tier of this server's tools that declare no p50, until they are
    /// measured [default: `budget.unmeasured_tier`, standard].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<crate::budget::Tier>,
    /// The most tools taken from this server [default: 1000,
    /// [`DEFAULT_MAX_TOOLS`]]. When it offers more, the first ones it lists
    /// are served and a warning names the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tools: Option<usize>,
    /// A prefix for its tools' names (`wiki_`: `wiki_search`); without
    /// one, a tool whose name another provider serves is exposed as
    /// `<server>_<tool>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// How many tools a server may offer unless its `max_tools` says otherwise.
pub const DEFAULT_MAX_TOOLS: usize = 1000;

/// The longest `timeout_ms` an external server may have, whatever the
/// limits say: one hour.
pub const MAX_SERVER_TIMEOUT_MS: u64 = 3_600_000;

impl McpServerConfig {
    /// The most tools taken from this server.
    pub fn max_tools(&self) -> usize {
        self.max_tools.unwrap_or(DEFAULT_MAX_TOOLS)
    }

    /// Checks `timeout_ms` against the operator's deadline policy: at
    /// least 1 ms and the floor, at most the ceiling and one hour. The
    /// error starts with the key (`timeout_ms: ...`).
    pub fn check_timeout(&self, deadlines: crate::tool::DeadlinePolicy) -> Result<(), ConfigProblem> {
        let Some(ms) = self.timeout_ms else { return Ok(()) };
        let floor = deadlines.floor.as_millis();
        let ceiling = deadlines.ceiling.as_millis();
        if ms == 0 {
            Err(ConfigProblem("timeout_ms: must be at least 1 (milliseconds)".into()))
        } else if ms > MAX_SERVER_TIMEOUT_MS {
            Err(ConfigProblem(format!(
                "timeout_ms: {ms} ms is more than an hour ({MAX_SERVER_TIMEOUT_MS} ms); no call should wait that long"
            )))
        } else if u128::from(ms) > ceiling {
            Err(ConfigProblem(format!(
                "timeout_ms: {ms} ms is above limits.timeout_ceiling_ms ({ceiling} ms), the longest any call may take; raise that limit or lower this"
            )))
        } else if u128::from(ms) < floor {
            Err(ConfigProblem(format!(
                "timeout_ms: {ms} ms is below limits.timeout_floor_ms ({floor} ms), the shortest deadline any call gets"
            )))
        } else {
            Ok(())
        }
    }
}

/// The variables a stdio server inherits unless its config says otherwise.
pub fn default_pass_env() -> Vec<String> {
    ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER"].map(String::from).to_vec()
}

/// `auth:` of a server.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Static bearer token (ignored when `oauth` is set).
    #[serde(default)]
    pub token: Option<String>,
    /// OAuth 2.1 client credentials.
    #[serde(default)]
    pub oauth: Option<OAuthConfig>,
}

/// OAuth 2.1 client-credentials settings (the MCP authorization spec,
/// 2025-11-25, for a client acting on its own behalf).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// Client id, registered with the server's authorization server
    /// (optional for `toolhost auth login`, which can register itself).
    #[serde(default)]
    pub client_id: String,
    /// Client secret; sent only to the token endpoint, as
    /// `client_secret_basic` or `client_secret_post` (whichever the
    /// authorization server's metadata allows; basic when it says nothing).
    /// Without one, the server is reached only through a stored
    /// `toolhost auth login`.
    #[serde(default)]
    pub client_secret: String,
    /// For `toolhost auth login`: the URL of a client ID metadata document
    /// the operator publishes, used as the client id when the authorization
    /// server supports them (`client_id_metadata_document_supported`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
    /// Token endpoint. Without it, it is discovered from the server's `401`:
    /// its protected-resource metadata (RFC 9728), then its authorization
    /// server's metadata (RFC 8414 or OpenID Connect discovery).
    #[serde(default)]
    pub token_url: Option<String>,
    /// Scopes to request. Without them, the `scope` of the server's
    /// `WWW-Authenticate` challenge, else its metadata's `scopes_supported`,
    /// else none.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// A PEM private key (PKCS#8 EC P-256 or P-384, RSA, or Ed25519) to
    /// authenticate with at the token endpoint instead of a secret:
    /// `private_key_jwt`, a signed assertion (RFC 7523). Relative to the
    /// config file's directory; the file must be the user's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_file: Option<String>,
    /// The assertion's signing algorithm (`ES256`, `ES384`, `RS256`,
    /// `PS256`, `EdDSA`, ...); default: the first the key can sign with,
    /// in that order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_alg: Option<String>,
    /// The key id (`kid`) the assertion's header names, when the
    /// authorization server holds several of the client's keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// Cross-app access (enterprise-managed authorization, SEP-990): the
    /// token comes from the user's sign-in at the organisation's identity
    /// provider instead of from client credentials alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_app: Option<CrossAppConfig>,
}

/// `mcp.servers[].auth.oauth.cross_app`: toolhost exchanges the user's ID
/// token at the identity provider for an identity assertion grant (RFC
/// 8693 token exchange, `id-jag`), then that grant for an access token at
/// the server's authorization server (RFC 7523 JWT bearer grant),
/// authenticating there with the entry's client credentials.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CrossAppConfig {
    /// The identity provider's token endpoint.
    pub idp_token_url: String,
    /// toolhost's client id at the identity provider.
    pub idp_client_id: String,
    /// Its secret there, if it has one (sent as HTTP Basic).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub idp_client_secret: String,
    /// The user's ID token from the identity provider (`${VAR}` expands).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id_token: String,
    /// Or a file holding it, read at each exchange (so a sign-in helper
    /// can renew it); relative to the config file's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_token_file: Option<String>,
}

/// `server:` section: how `toolhost serve --http` admits clients.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Bearer tokens and the agent each one acts as. With any token
    /// configured, every HTTP request needs one; binding beyond loopback
    /// requires them or `oauth`.
    pub tokens: Vec<TokenConfig>,
    /// The front as an OAuth 2.1 resource server ([`ServerOAuthConfig`]).
    pub oauth: Option<ServerOAuthConfig>,
    /// Whether a loopback connection of the server's own Unix user (or
    /// root) without a token is the operator [default: true when there are
    /// no `tokens` and no `oauth`, false otherwise].
    pub loopback_operator: Option<bool>,
    /// A certificate and key: the front also speaks TLS on its port, so a
    /// host exposed directly needs no proxy for HTTPS (read at start).
    pub tls: Option<TlsFiles>,
    /// Browser origins allowed besides loopback ones (`http://localhost:*`,
    /// `http://127.0.0.1:*`, `http://[::1]:*`): exact `scheme://host[:port]`
    /// or with `:*` for any port. Requests from other origins get 403.
    pub allowed_origins: Vec<String>,
    /// Host names accepted in the `Host` header besides loopback names and
    /// the bound address (DNS-rebinding protection). Others get 403.
    pub allowed_hosts: Vec<String>,
    /// Largest request body in bytes [default: 4 MiB, as the MCP SDKs].
    /// Larger ones get 413 once read to their end (and discarded), so the
    /// client keeps its session; one over 64 MiB gets 413 and the
    /// connection is closed.
    pub max_body_bytes: usize,
    /// Tool calls per agent (each `npcs[]` entry, whichever endpoint or
    /// token it uses), unless the agent sets its own `rate_limit`
    /// [default: 120 a minute, 20 at once]. Over it, a call is refused with
    /// `capacity_exceeded`. Protocol traffic never counts.
    pub rate_limit: RateLimitConfig,
    /// Tool calls made as the operator [default: no limit].
    pub operator_rate_limit: RateLimitConfig,
    /// Every HTTP request on one connection, whatever it is: a generous
    /// cap against floods [default: 1200 a minute, 200 at once]; 429 over it.
    pub connection_rate_limit: RateLimitConfig,
    /// Failed authentications, counted by source address (an IPv6 /64 as
    /// one) [default: 10 a minute, 20 at once]. Once an address has spent
    /// it, a token presented from there that has not authenticated before
    /// gets 429 without being checked, so tokens cannot be guessed online;
    /// clients already authenticated, and every other address, keep
    /// working.
    pub auth_failure_limit: RateLimitConfig,
    /// Live MCP sessions over HTTP, all endpoints together [default: 1000].
    /// At the cap, the least recently used session idle for a minute or
    /// more is closed to make room; without one, 503.
    pub max_sessions: usize,
    /// A session unused this long (seconds) is closed; its client gets 404
    /// and starts a new one [default: 1800].
    pub session_idle_secs: u64,
    /// Serve `/metrics` to clients beyond loopback too (with an operator
    /// token) [default: false: loopback clients only].
    pub metrics_beyond_loopback: bool,
    /// Connections open at once on the HTTP front [default: 1024]. Past it
    /// 32 more are admitted for the probes and the operator (`/healthz`,
    /// `/readyz`, `/metrics`, `/ui`, `/admin`; 503 for anything else), and
    /// others are closed at once.
    pub max_connections: usize,
    /// Connections open at once from one source address, an IPv6 /64 as
    /// one [default: 256]. Behind a load balancer every connection comes
    /// from its address: set this to `max_connections` there.
    pub max_connections_per_address: usize,
    /// A request's headers must arrive within this many seconds, counted
    /// from when the connection waits for them: a client trickling its
    /// headers, or a kept-alive connection left idle, is closed then
    /// [default: 10].
    pub header_timeout_secs: u64,
    /// A request's body must arrive whole within this many seconds, or
    /// 408 [default: 30].
    pub body_timeout_secs: u64,
    /// Bytes of request bodies held at once, all requests together
    /// [default: 64 MiB]; a request whose body does not fit waits up to a
    /// second, then gets 503 with `Retry-After`.
    pub max_bodies_bytes: usize,
    /// On SIGINT or SIGTERM, how long (seconds) the open sessions' calls
    /// are still served, new sessions refused, before every session is
    /// closed and the host exits [default: 10; stdio too].
    pub shutdown_grace_secs: u64,
    /// How long (milliseconds) a session's first `tools/list`,
    /// `resources/list` and `prompts/list` wait for everything configured
    /// to be ready (plugins compiled, upstream servers connected or
    /// failed), stdio and HTTP alike; what is ready later joins with
    /// `list_changed` [default: 5000].
    pub first_list_wait_ms: u64,
    /// How long (microseconds) a `serve --stdio` session keeps polling its
    /// input for the next message before its thread sleeps on it. A client
    /// that sends its next request within this window gets its answer
    /// sooner; one that pauses costs at most this much CPU per message
    /// [default: 1000; 0: never poll; at most 10000].
    pub stdio_input_poll_us: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tokens: Vec::new(),
            oauth: None,
            loopback_operator: None,
            tls: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: 4 << 20,
            rate_limit: RateLimitConfig::AGENT_DEFAULT,
            operator_rate_limit: RateLimitConfig::OFF,
            connection_rate_limit: RateLimitConfig { per_minute: 1200, burst: 200, ..Default::default() },
            auth_failure_limit: RateLimitConfig { per_minute: 10, burst: 20, ..Default::default() },
            max_sessions: 1000,
            session_idle_secs: 1800,
            metrics_beyond_loopback: false,
            max_connections: 1024,
            max_connections_per_address: 256,
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            max_bodies_bytes: 64 << 20,
            shutdown_grace_secs: 10,
            first_list_wait_ms: 5000,
            stdio_input_poll_us: 1000,
        }
    }
}

pub use crate::oauth::{AgentMapping, ClaimMatch, ServerOAuthConfig, TokenConfig};
pub use crate::rates::RateLimitConfig;

/// `memory:` section.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// The SQLite file (default: `<state dir>/memory.sqlite3`). A new store
    /// starts with the demo campaign.
    pub path: Option<PathBuf>,
    /// A PostgreSQL database instead of the SQLite file
    /// (`postgres://user:password@host/db`, or
    /// `postgresql:///db?host=/run/postgresql` for a Unix socket), shared
    /// by every host given it. `${VAR}` is replaced from the environment.
    /// `?sslmode=verify-full` (and `&sslrootcert=/path/ca.pem`) for TLS,
    /// as libpq names them; the server's certificate is always verified.
    /// A new store starts with the demo campaign. Setting both this and
    /// `path` is an error.
    pub url: Option<String>,
}

/// `cluster:` section: several hosts that behave as one. Run-time changes
/// (plugins added by OCI reference and removed, servers added and
/// removed, DM overrides, plugins' secrets) go to the control plane's
/// tables and are announced with PostgreSQL's `LISTEN/NOTIFY`; every host
/// applies them.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The control plane's database (`postgres://...`; it can be the one
    /// of `memory.url`, and reads `sslmode` and `sslrootcert` the same
    /// way). `${VAR}` is replaced from the environment.
    pub url: Option<String>,
    /// This host's name in the fleet and in its audit records (default:
    /// the machine's host name and the serving port, `name:port`).
    pub host_id: Option<String>,
    /// A key file every host of the fleet holds (at least 32 random bytes,
    /// 0600, e.g. `openssl rand -out cluster.key 32`). Each change in the
    /// control plane's log carries a tag made with it, and a host applies
    /// only changes whose tag it can check: whoever can write the
    /// database but does not hold the key cannot change the hosts. The
    /// fleet's secrets (`toolhost secret set`) are sealed with a key
    /// derived from it. Required with `url`.
    pub secret_key_file: Option<PathBuf>,
}

/// `voice:` section: the relay of speech-to-speech sessions (OpenAI
/// Realtime, Gemini Live) to the upstream voice APIs, with the agent's
/// tools declared and run by the host.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VoiceConfig {
    /// The OpenAI Realtime API (`/voice/realtime`).
    pub openai: Option<VoiceUpstream>,
    /// Gemini Live (`/voice/ws/google.ai.generativelanguage.<version>.GenerativeService.BidiGenerateContent`).
    pub gemini: Option<VoiceUpstream>,
    /// A certificate and key: `serve --http` then also speaks TLS on its
    /// port (the Gemini SDK connects with `wss://` only).
    pub tls: Option<TlsFiles>,
    /// The largest WebSocket message either side may send, in bytes
    /// (default 4 MiB: a few seconds of audio per message is far less).
    pub max_message_bytes: Option<usize>,
    /// The most bytes a session holds unsent for one side (default 8 MiB);
    /// each message counts its bytes and 128 more, so empty messages are
    /// not free. Past it the session is closed (1008).
    pub max_buffered_bytes: Option<usize>,
    /// The most bytes all sessions together hold unsent, counted the same
    /// way (default 128 MiB); an agent's sessions together hold at most
    /// its share (`max_sessions_per_agent` of `max_sessions`: a quarter by
    /// default). The session whose message would pass either is closed
    /// (1008).
    pub max_buffered_total_bytes: Option<usize>,
    /// The most relayed sessions at once (default 200).
    pub max_sessions: Option<usize>,
    /// The most relayed sessions one agent holds at once (default: a
    /// quarter of `max_sessions`); past it, 503.
    pub max_sessions_per_agent: Option<usize>,
    /// A session in which neither side sent a message for this long
    /// (seconds) is closed (default 120; WebSocket pings do not count).
    pub session_idle_secs: Option<u64>,
    /// How long a Gemini client has to send its `setup` once connected
    /// (seconds, default 10); then the session is closed.
    pub setup_timeout_secs: Option<u64>,
    /// The most output tokens a response may have: a client's larger
    /// setting (or none, or OpenAI's `"inf"`) is lowered to it (default
    /// 4096, OpenAI's own maximum).
    pub max_output_tokens: Option<u64>,
    /// The highest sampling temperature a client may set: a higher one is
    /// lowered to it (default: none, the API's own bounds).
    pub max_temperature: Option<f64>,
}

/// One upstream voice API.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VoiceUpstream {
    /// Its WebSocket base URL (`wss://api.openai.com/v1`,
    /// `wss://generativelanguage.googleapis.com`); the relay appends the
    /// path the SDK asked for.
    pub url: String,
    /// The environment variable holding the operator's API key (default
    /// `OPENAI_API_KEY`, `GEMINI_API_KEY`). Clients never see it.
    pub api_key_env: Option<String>,
    /// The model of a session whose client names none (default: the first
    /// of `models`, else `gpt-realtime`, `models/gemini-live-2.5-flash-preview`).
    #[serde(default)]
    pub model: Option<String>,
    /// The models clients may ask for (default: `model` only); a client
    /// asking for another gets an error, and the upstream never hears of
    /// it. Gemini names may leave out `models/`.
    #[serde(default)]
    pub models: Vec<String>,
}

/// A PEM certificate chain and its private key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The certificate chain (PEM).
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
}

/// `plugins:` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginsConfig {
    /// Load the built-in plugins (default true).
    pub builtins: bool,
    /// Extra component files to load.
    pub files: Vec<PathBuf>,
    /// A directory `toolhost serve` watches: a `.wasm` file dropped (or
    /// replaced) there is loaded (or swapped in) without a restart; a file
    /// removed unloads its plugin.
    pub dir: Option<PathBuf>,
    /// What each plugin may touch, by plugin name. Nothing by default.
    pub grants: crate::capabilities::GrantsByPlugin,
    /// Each plugin's own limits, by plugin name, in place of `limits:`
    /// for that plugin only, higher or lower.
    pub limits: BTreeMap<String, PluginLimitsConfig>,
    /// `host:port` -> `IP:port`: where plugins' HTTP requests to that
    /// origin connect instead of resolving the name (as curl's
    /// `--resolve`); the address counts as granted by name.
    pub http_resolve: BTreeMap<String, String>,
    /// PEM files of CAs plugins' HTTPS requests trust besides the
    /// platform's.
    pub http_ca_files: Vec<PathBuf>,
    /// `IP:port` of the name servers plugins' host names are resolved
    /// with; empty (the default) for the system's (`/etc/resolv.conf`,
    /// with `/etc/hosts`).
    pub http_nameservers: Vec<String>,
    /// Plugin -> a prefix for its tools' names (`wx_`: `wx_now`).
    pub prefix: BTreeMap<String, String>,
    /// Plugin -> its plain config values (`units: metric`), read through
    /// `wasi:config/store`; secrets (`toolhost secret set`) share the
    /// namespace, and a name in both is a config error.
    pub config: BTreeMap<String, BTreeMap<String, ConfigValue>>,
    /// Plugin -> whether its outgoing HTTP requests carry the call's trace
    /// context (`traceparent`, `tracestate`) when telemetry is on. Off by
    /// default: the header tells the origin that a call happened.
    pub trace_propagation: BTreeMap<String, bool>,
}

/// A plain config value: a string, number or boolean, which the plugin
/// reads as text.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ConfigValue {
    /// Text.
    Text(String),
    /// A boolean (`true`, `false`).
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number with a fraction.
    Float(f64),
}

impl std::fmt::Display for ConfigValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigValue::Text(s) => f.write_str(s),
            ConfigValue::Bool(b) => write!(f, "{b}"),
            ConfigValue::Int(i) => write!(f, "{i}"),
            ConfigValue::Float(x) => write!(f, "{x}"),
        }
    }
}

impl PluginsConfig {
    /// Every plugin's plain config values as the plugins read them.
    pub fn config_values(&self) -> crate::secrets::PluginConfigValues {
        self.config
            .iter()
            .map(|(p, m)| (p.clone(), m.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()))
            .collect()
    }
}

impl Default for PluginsConfig {
    fn default() -> Self {
        PluginsConfig {
            builtins: true,
            files: Vec::new(),
            dir: None,
            grants: Default::default(),
            limits: BTreeMap::new(),
            http_resolve: BTreeMap::new(),
            http_ca_files: Vec::new(),
            http_nameservers: Vec::new(),
            prefix: BTreeMap::new(),
            config: BTreeMap::new(),
            trace_propagation: BTreeMap::new(),
        }
    }
}

/// `plugins.limits.<plugin>`: the keys of `limits:` a plugin may have its
/// own value for.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginLimitsConfig {
    /// Linear memory per call, MiB.
    pub memory_mib: Option<usize>,
    /// Fuel per call; 0: no limit for this plugin (metering itself is
    /// switched on or off only by `limits.fuel`).
    pub fuel: Option<u64>,
    /// Ceiling over any deadline of its tools, ms: at most
    /// `limits.timeout_ceiling_ms` (deadlines come from the budget, which
    /// holds to that).
    pub timeout_ceiling_ms: Option<u64>,
    /// Largest result, bytes.
    pub max_output_bytes: Option<usize>,
    /// Calls of the plugin running at once, shared fairly among callers.
    pub plugin_concurrency: Option<u32>,
}

impl PluginLimitsConfig {
    /// As the runtime takes it.
    pub fn to_limits(&self) -> crate::runtime::PluginLimits {
        crate::runtime::PluginLimits {
            memory_bytes: self.memory_mib.map(|m| m << 20),
            fuel: self.fuel.map(|f| (f > 0).then_some(f)),
            timeout_ceiling: self.timeout_ceiling_ms.map(Duration::from_millis),
            output_bytes: self.max_output_bytes,
            plugin_concurrency: self.plugin_concurrency,
        }
    }
}

/// `limits:` section; every field optional, defaults as in [`Limits`].
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Fuel per call; 0 turns metering off.
    pub fuel: Option<u64>,
    /// Linear memory per call, MiB.
    pub memory_mib: Option<usize>,
    /// Floor under any deadline, ms.
    pub timeout_floor_ms: Option<u64>,
    /// Ceiling over any deadline, ms.
    pub timeout_ceiling_ms: Option<u64>,
    /// Largest result, bytes.
    pub max_output_bytes: Option<usize>,
    /// Largest component file, MiB.
    pub max_component_mib: Option<usize>,
    /// Instances alive at once.
    pub max_instances: Option<u32>,
    /// Wasm stack, KiB.
    pub max_wasm_stack_kib: Option<usize>,
    /// Calls of one plugin running at once (default 64), shared fairly
    /// among its callers.
    pub plugin_concurrency: Option<u32>,
    /// Longest a call waits for a slot of its plugin, ms (default 250;
    /// within its deadline; 0: refused at once).
    pub queue_wait_ms: Option<u64>,
    /// Files and directories one call may hold open at once (default 256).
    pub max_open_files: Option<usize>,
    /// Calls of one agent running at once, across all tools (default 32).
    pub agent_concurrency: Option<u32>,
    /// HTTP requests one call may send (default 16).
    pub http_requests_per_call: Option<u32>,
    /// Largest HTTP response body one call reads, bytes (default 8 MiB).
    pub http_response_bytes: Option<usize>,
    /// Largest HTTP request body one call sends, bytes (default 1 MiB).
    pub http_request_bytes: Option<usize>,
    /// Host-side resources (WASI handles: HTTP fields, requests, bodies,
    /// streams, pollables, open files) one call may hold at once (default
    /// 1024); past it the call ends with `memory_limit`.
    pub host_resources_per_call: Option<usize>,
    /// Longest a call waits for its client to answer a plugin's question
    /// (elicitation, sampling), ms (default 300000: a person's time); the
    /// wait does not count against the call's deadline.
    pub input_wait_ms: Option<u64>,
    /// Questions one call may ask its client (default 8).
    pub asks_per_call: Option<u32>,
    /// Tasks (a long tool run on its own, MCP tasks) one agent may have
    /// running at once (default 8); past it a new task is refused.
    pub tasks_per_agent: Option<u32>,
    /// Finished tasks whose results are kept per agent (default 32); past
    /// it the oldest finished one is dropped.
    pub task_results_per_agent: Option<u32>,
    /// Longest a task and its result are kept from its creation, ms
    /// (default 900000: 15 minutes; a client may ask for less).
    pub task_ttl_ms: Option<u64>,
    /// How a plugin not compiled before is compiled: `fast-first` (the
    /// default: fast code at once, optimized code in the background),
    /// `optimized` (before its first call) or `fast` (never optimized).
    pub compile: Option<crate::runtime::CompileMode>,
    /// What compiles the fast first code: `winch` (the default: Winch on
    /// x86_64, Cranelift without optimization elsewhere) or `cranelift`.
    pub fast_compiler: Option<crate::runtime::FastCompiler>,
}

impl LimitsConfig {
    /// Applies these settings over `base`.
    pub fn apply(&self, mut l: Limits) -> Limits {
        if let Some(f) = self.fuel {
            l.fuel = (f > 0).then_some(f);
        }
        if let Some(m) = self.memory_mib {
            l.memory_bytes = m << 20;
        }
        if let Some(ms) = self.timeout_floor_ms {
            l.timeout_floor = Duration::from_millis(ms);
        }
        if let Some(ms) = self.timeout_ceiling_ms {
            l.timeout_ceiling = Duration::from_millis(ms);
        }
        if let Some(b) = self.max_output_bytes {
            l.output_bytes = b;
        }
        if let Some(m) = self.max_component_mib {
            l.max_component_bytes = m << 20;
        }
        if let Some(n) = self.max_instances {
            l.max_instances = n;
        }
        if let Some(k) = self.max_wasm_stack_kib {
            l.max_wasm_stack = k << 10;
        }
        if let Some(n) = self.plugin_concurrency {
            l.plugin_concurrency = n.max(1);
        }
        if let Some(ms) = self.queue_wait_ms {
            l.queue_wait = Duration::from_millis(ms);
        }
        if let Some(n) = self.max_open_files {
            l.max_open_files = n.max(1);
        }
        if let Some(n) = self.agent_concurrency {
            l.agent_concurrency = n.max(1);
        }
        if let Some(n) = self.http_requests_per_call {
            l.http_requests_per_call = n;
        }
        if let Some(n) = self.http_response_bytes {
            l.http_response_bytes = n;
        }
        if let Some(n) = self.http_request_bytes {
            l.http_request_bytes = n;
        }
        if let Some(c) = self.compile {
            l.compile = c;
        }
        if let Some(c) = self.fast_compiler {
            l.fast_compiler = c;
        }
        if let Some(n) = self.host_resources_per_call {
            l.host_resources_per_call = n.max(64);
        }
        if let Some(ms) = self.input_wait_ms {
            l.input_wait = Duration::from_millis(ms);
        }
        if let Some(n) = self.asks_per_call {
            l.asks_per_call = n;
        }
        if let Some(n) = self.tasks_per_agent {
            l.tasks_per_agent = n.max(1);
        }
        if let Some(n) = self.task_results_per_agent {
            l.task_results_per_agent = n.max(1);
        }
        if let Some(ms) = self.task_ttl_ms {
            l.task_ttl = Duration::from_millis(ms.max(1000));
        }
        l
    }
}

/// `marketplace:` section: the catalogues `toolhost search` and `toolhost
/// install` read, and `toolhost publish` writes. A catalogue is a
/// repository in any OCI registry (`oci://HOST/NS/catalogue`), spoken to
/// with the `oci:` section's settings; each entry is one tag of it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MarketplaceConfig {
    /// The catalogues, as `oci://HOST[:PORT]/REPOSITORY` (no tag).
    pub catalogues: Vec<String>,
    /// How old a catalogue's local copy may be before `search` and
    /// `install` read the registry again, in seconds (default 600; 0: every
    /// time).
    pub refresh_secs: u64,
    /// The most entries read from one catalogue (default 20,000): a larger
    /// catalogue is read up to it, with a warning.
    pub max_entries: usize,
    /// Whose revocation lists a serving host acts on: key ids
    /// (`ed25519:...`) or names of `trust.keys` entries. A list in a
    /// catalogue signed by any other key is ignored (with a warning).
    /// Empty (the default): revocation lists are not read.
    pub revocations_signed_by: Vec<String>,
    /// How often a serving host reads the catalogues' revocation lists, in
    /// seconds (default 300; also at every `reload`).
    pub revocations_secs: u64,
}

impl Default for MarketplaceConfig {
    fn default() -> MarketplaceConfig {
        MarketplaceConfig {
            catalogues: Vec::new(),
            refresh_secs: 600,
            max_entries: 20_000,
            revocations_signed_by: Vec::new(),
            revocations_secs: 300,
        }
    }
}

/// `oci:` section of the config: how `oci://` plugins are pulled.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OciConfig {
    /// Registries (`host[:port]`) spoken to over plain HTTP. Loopback
    /// registries (`localhost`, `127.0.0.0/8`, `[::1]`) always are.
    pub insecure: Vec<String>,
    /// A credentials file in the container tools' `config.json` shape
    /// (`{"auths": {"host:port": {"auth": base64(user:password)}}}`), asked
    /// before `$REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG/config.json` and
    /// `~/.docker/config.json`.
    pub auth_file: Option<PathBuf>,
    /// Bound on one registry operation, in seconds (default 120).
    pub timeout_secs: Option<u64>,
}
