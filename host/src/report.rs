//! What the host reports about itself, as typed, serializable structs:
//! tools with their budget figures, plugins with their grants, agents. The
//! `toolhost` commands print them (as tables or `--json`); the admin API
//! serves them.

use crate::Host;
use crate::budget::{AgentProfile, Tier, ToolStatus};
use crate::registry::RegisteredTool;
use crate::tool::ToolDef;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e3)
}

/// A tool's budget figures at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// Tier after health demotion (`None`: over budget, never shown).
    pub tier: Option<Tier>,
    /// Tier before health demotion.
    pub base_tier: Option<Tier>,
    /// Whether health demotion applies (in this view: the shared view is
    /// never demoted; each caller's own view may be).
    pub demoted: bool,
    /// How many callers (agents, the operator) see the tool demoted by
    /// their own calls' errors and timeouts.
    #[serde(default)]
    pub demoted_for: usize,
    /// Where the tier comes from: `measured`, `calibrated`, `declared`, `default`.
    pub tier_source: String,
    /// The p50 the tier was taken from, in ms.
    pub p50_ms: Option<f64>,
    /// Marketplace badge, when measured.
    pub badge: Option<String>,
    /// The seed's compatibility tag.
    pub compatibility: String,
    /// The deadline a call gets now, in ms.
    pub timeout_ms: f64,
    /// Real calls in the window.
    pub calls: usize,
    /// Real calls' p50, ms.
    pub real_p50_ms: Option<f64>,
    /// Real calls' p99, ms.
    pub real_p99_ms: Option<f64>,
    /// Errors and timeouts among real calls, 0 to 1.
    pub error_rate: Option<f64>,
    /// Calibration probes.
    pub probes: usize,
    /// Probes' p50, ms.
    pub probe_p50_ms: Option<f64>,
    /// Probes' p99, ms.
    pub probe_p99_ms: Option<f64>,
}

impl From<&ToolStatus> for BudgetReport {
    fn from(s: &ToolStatus) -> BudgetReport {
        BudgetReport {
            tier: s.tier,
            base_tier: s.base_tier,
            demoted: s.demoted,
            demoted_for: s.demoted_for,
            tier_source: s.source.as_str().to_string(),
            p50_ms: ms(s.p50),
            badge: s.badge.map(|b| b.as_str().to_string()),
            compatibility: Tier::compatibility(s.tier).to_string(),
            timeout_ms: s.timeout.as_secs_f64() * 1e3,
            calls: s.real.map_or(0, |r| r.count),
            real_p50_ms: ms(s.real.map(|r| r.p50)),
            real_p99_ms: ms(s.real.map(|r| r.p99)),
            error_rate: s.real.map(|r| r.error_rate()),
            probes: s.probes.map_or(0, |p| p.count),
            probe_p50_ms: ms(s.probes.map(|p| p.p50)),
            probe_p99_ms: ms(s.probes.map(|p| p.p99)),
        }
    }
}

/// A tool's declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDeclaration {
    /// Name.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: serde_json::Value,
    /// Declared p50, ms.
    pub estimated_duration_ms: Option<u32>,
    /// Declared upper bound, ms.
    pub max_duration_ms: Option<u32>,
    /// Safe to retry.
    pub idempotent: bool,
    /// How long a result may be cached.
    pub cacheable_seconds: u32,
}

impl From<&ToolDef> for ToolDeclaration {
    fn from(t: &ToolDef) -> ToolDeclaration {
        ToolDeclaration {
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
            estimated_duration_ms: t.meta.estimated_duration_ms,
            max_duration_ms: t.meta.max_duration_ms,
            idempotent: t.meta.idempotent,
            cacheable_seconds: t.meta.cacheable_seconds,
        }
    }
}

/// A tool in the registry with its budget figures (`toolhost tools --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolReport {
    /// The declaration.
    #[serde(flatten)]
    pub declaration: ToolDeclaration,
    /// Its provider.
    pub provider: String,
    /// The provider's kind (`wasm`, `mcp`).
    pub kind: String,
    /// Budget figures.
    pub budget: BudgetReport,
}

impl ToolReport {
    /// The report of `tool` in `host`.
    pub fn of(host: &Host, tool: &RegisteredTool) -> ToolReport {
        ToolReport {
            declaration: (&tool.def).into(),
            provider: tool.provider.name().to_string(),
            kind: tool.provider.kind().as_str().to_string(),
            budget: (&host.pipeline().budget().status(&tool.def)).into(),
        }
    }
}

/// One row of `toolhost stats --json`: a tool's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsRow {
    /// Tool name.
    pub tool: String,
    /// Its provider.
    pub provider: String,
    /// Budget figures (`calls`, `p50_ms`: the p50 the tier comes from,
    /// `error_rate`, `tier` ...).
    #[serde(flatten)]
    pub budget: BudgetReport,
    /// The measured p99, ms: of real calls, else of probes.
    #[serde(default)]
    pub p99_ms: Option<f64>,
    /// How long ago the newest real call in the window was made, seconds
    /// (measurements outlive restarts: this says how fresh they are).
    #[serde(default)]
    pub newest_call_age_s: Option<f64>,
    /// How long ago the oldest real call in the window was made, seconds.
    #[serde(default)]
    pub oldest_call_age_s: Option<f64>,
}

/// Every tool's figures, by name.
pub fn stats(host: &Host) -> Vec<StatsRow> {
    host.pipeline()
        .registry()
        .snapshot()
        .tools()
        .map(|t| {
            let status = host.pipeline().budget().status(&t.def);
            let ages = host.pipeline().budget().real_ages(&t.def.name);
            StatsRow {
                tool: t.def.name.clone(),
                provider: t.provider.name().to_string(),
                p99_ms: ms(status.real.or(status.probes).map(|s| s.p99)),
                newest_call_age_s: ages.map(|a| a.0.as_secs_f64()),
                oldest_call_age_s: ages.map(|a| a.1.as_secs_f64()),
                budget: (&status).into(),
            }
        })
        .collect()
}

/// A DM override in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverrideReport {
    /// The tier it sets.
    pub tier: Tier,
    /// Seconds left.
    pub remaining_s: f64,
}

/// An agent as the running host sees it now (`toolhost agents --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStatusReport {
    /// Name.
    pub name: String,
    /// Its ceiling.
    pub budget_tier: Tier,
    /// Its allow-list.
    pub tools: Vec<String>,
    /// Instructions sent to its MCP clients.
    pub instructions: Option<String>,
    /// The DM override in force, if any.
    pub dm_override: Option<OverrideReport>,
    /// The tier its sessions work at now: the override, else its ceiling.
    pub tier: Tier,
    /// The tools it sees now: on its allow-list, loaded, available and
    /// within its tier.
    pub visible: Vec<String>,
}

/// An agent's status now; `None` when there is no such agent.
pub fn agent_status(host: &Host, name: &str) -> Option<AgentStatusReport> {
    let budget = host.pipeline().budget();
    let profile = budget.agent(name).ok()?;
    let tier = budget.effective_tier(Some(name), Tier::Deep).ok()?;
    let catalog = host.pipeline().registry().snapshot();
    let visible = budget
        .available_tools(&catalog, Some(name), tier)
        .unwrap_or_default()
        .iter()
        .map(|t| t.def.name.clone())
        .collect();
    Some(AgentStatusReport {
        name: profile.name.clone(),
        budget_tier: profile.budget_tier,
        tools: profile.tools.clone(),
        instructions: profile.instructions.clone(),
        dm_override: budget
            .override_state(name)
            .map(|(tier, left)| OverrideReport { tier, remaining_s: left.as_secs_f64() }),
        tier,
        visible,
    })
}

/// Every agent's status now, by name.
pub fn agents(host: &Host) -> Vec<AgentStatusReport> {
    host.pipeline().budget().agents().iter().filter_map(|a| agent_status(host, &a.name)).collect()
}

/// What a reviewer reads about one plugin (`toolhost grants --json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrantsReport {
    /// Plugin name.
    pub plugin: String,
    /// Component digest.
    pub sha256: String,
    /// Where it comes from, in words.
    pub origin: Option<String>,
    /// Where it comes from.
    pub provenance: Option<crate::package::Provenance>,
    /// Its tools.
    pub tools: Vec<String>,
    /// Capabilities it asks for: imported ones that need a grant to load,
    /// and imported ones it is granted. Not those in `inert`.
    pub asks_for: Vec<String>,
    /// Capabilities it imports that expose nothing without a grant, and
    /// that it is not granted (the Rust standard library imports `env` and
    /// `files` whether or not a plugin uses them).
    #[serde(default)]
    pub inert: Vec<String>,
    /// Each capability's grant in detail.
    pub granted: serde_json::Map<String, serde_json::Value>,
    /// Capabilities it asks for (not inert) but does not hold. Never one it
    /// holds.
    pub denied: Vec<String>,
    /// Capabilities it holds but its imports cannot use: grants to remove.
    #[serde(default)]
    pub over_granted: Vec<String>,
    /// In plain words, what is wrong between its imports and its grants
    /// (over-grants, denied capabilities); empty when nothing is.
    #[serde(default)]
    pub findings: Vec<String>,
    /// In plain words, what the grants allow.
    pub allows: Vec<String>,
    /// The interfaces it imports.
    pub imports: Vec<String>,
    /// The limits its calls run under now.
    #[serde(default)]
    pub limits: Option<LimitsInForce>,
    /// The secrets its signed manifest asks for, each set or not (never a
    /// value).
    #[serde(default)]
    pub secrets: Vec<SecretAsked>,
    /// The origins its signed manifest asks to reach, each covered by its
    /// `http` grant or not.
    #[serde(default)]
    pub asked_origins: Vec<OriginAsked>,
    /// Which code it runs on now: `fast` (optimized code compiling in the
    /// background) or `optimized`.
    #[serde(default)]
    pub code: Option<String>,
}

/// A secret a plugin's manifest asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretAsked {
    /// Its name.
    pub name: String,
    /// Whether it is set.
    pub set: bool,
}

/// An origin a plugin's manifest asks to reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginAsked {
    /// The origin, as the manifest writes it.
    pub origin: String,
    /// Whether the plugin's `http` grant covers it.
    pub granted: bool,
}

/// The limits a plugin's calls run under: the operator's, with the
/// plugin's own (`plugins.limits.<plugin>`) in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsInForce {
    /// Linear memory per call, MiB.
    pub memory_mib: usize,
    /// Fuel per call (`None`: not metered).
    pub fuel: Option<u64>,
    /// Longest deadline of its calls, ms.
    pub timeout_ceiling_ms: u64,
    /// Largest result, bytes.
    pub max_output_bytes: usize,
    /// Calls of it running at once.
    pub plugin_concurrency: u32,
    /// The keys set by `plugins.limits.<plugin>`.
    pub own: Vec<String>,
}

impl LimitsInForce {
    /// The limits `plugin` runs under in `host`.
    pub fn of(host: &Host, plugin: &str) -> LimitsInForce {
        let l = host.pipeline().runtime().limits_for(plugin);
        let own = host.pipeline().runtime().plugin_limits().into_iter().find(|(n, _)| n == plugin).map(|(_, p)| p);
        let mut keys = Vec::new();
        if let Some(p) = own {
            for (set, key) in [
                (p.memory_bytes.is_some(), "memory_mib"),
                (p.fuel.is_some(), "fuel"),
                (p.timeout_ceiling.is_some(), "timeout_ceiling_ms"),
                (p.output_bytes.is_some(), "max_output_bytes"),
                (p.plugin_concurrency.is_some(), "plugin_concurrency"),
            ] {
                if set {
                    keys.push(key.to_string());
                }
            }
        }
        LimitsInForce {
            memory_mib: l.memory_bytes >> 20,
            fuel: l.fuel.filter(|&f| f != u64::MAX),
            timeout_ceiling_ms: u64::try_from(l.timeout_ceiling.as_millis()).unwrap_or(u64::MAX),
            max_output_bytes: l.output_bytes,
            plugin_concurrency: l.plugin_concurrency,
            own: keys,
        }
    }

    /// One line: each limit, `(own)` after the plugin's own.
    pub fn describe(&self) -> String {
        let own = |key: &str| if self.own.iter().any(|k| k == key) { " (own)" } else { "" };
        format!(
            "memory {} MiB{}, fuel {}{}, deadline at most {} ms{}, output {} bytes{}, {} calls at once{}",
            self.memory_mib,
            own("memory_mib"),
            self.fuel.map_or_else(|| "unmetered".to_string(), |f| f.to_string()),
            own("fuel"),
            self.timeout_ceiling_ms,
            own("timeout_ceiling_ms"),
            self.max_output_bytes,
            own("max_output_bytes"),
            self.plugin_concurrency,
            own("plugin_concurrency"),
        )
    }
}

fn names(c: crate::tool::Capabilities) -> Vec<String> {
    c.names().into_iter().map(str::to_string).collect()
}

/// The grants report of every wasm plugin in `host`.
pub fn grants(host: &Host) -> Vec<GrantsReport> {
    let catalog = host.pipeline().registry().snapshot();
    catalog
        .providers()
        .filter(|p| p.kind() == crate::tool::ProviderKind::Wasm)
        .map(|p| {
            let info = p.describe();
            let review = crate::capabilities::CAPABILITIES.review(&info.imports, info.held);
            let mut allows = info.allows.clone();
            if allows.is_empty() {
                allows.push("nothing granted: pure computation, no files, no environment, no network".into());
            }
            let origin = host.admission().provenance(p.name());
            let mut findings = review.findings(p.name());
            findings.extend(http_findings(p, origin.as_ref()));
            let (secrets, asked_origins) = manifest_asks(host, p, origin.as_ref());
            GrantsReport {
                plugin: p.name().to_string(),
                sha256: info.digest.clone().unwrap_or_default(),
                origin: origin.as_ref().map(|o| o.describe()),
                provenance: origin,
                tools: p.tools().iter().map(|t| t.name.clone()).collect(),
                asks_for: names(review.asks),
                inert: names(review.inert),
                granted: info.grants.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
                denied: names(review.denied),
                over_granted: names(review.over_granted),
                findings,
                allows,
                imports: info.imports,
                limits: Some(LimitsInForce::of(host, p.name())),
                secrets,
                asked_origins,
                code: info.code.map(str::to_string),
            }
        })
        .collect()
}

/// What `p`'s signed manifest asks for, against what it has: each secret
/// set or not, each origin covered by its `http` grant or not.
fn manifest_asks(
    host: &Host,
    p: &Arc<dyn crate::tool::Provider>,
    origin: Option<&crate::package::Provenance>,
) -> (Vec<SecretAsked>, Vec<OriginAsked>) {
    let Some(crate::package::Provenance::Signed { manifest, .. }) = origin else { return Default::default() };
    let held = host.admission().values().secrets_snapshot();
    let secrets =
        manifest.secrets.iter().map(|s| SecretAsked { name: s.clone(), set: held.has(p.name(), s) }).collect();
    let any: Arc<dyn std::any::Any + Send + Sync> = p.clone();
    let uncovered = match any.downcast::<crate::runtime::WasmPlugin>() {
        Ok(plugin) => match plugin.grants().extensions.get(crate::tool::Capability::Http) {
            Some(g) => g.uncovered(&manifest.http_hosts),
            None => manifest.http_hosts.clone(),
        },
        Err(_) => manifest.http_hosts.clone(),
    };
    let origins = manifest
        .http_hosts
        .iter()
        .map(|h| OriginAsked { origin: h.clone(), granted: !uncovered.contains(h) })
        .collect();
    (secrets, origins)
}

/// What a reviewer should know of a plugin's HTTP grants: each wildcard,
/// and each origin its signed manifest asks for that no grant covers.
fn http_findings(p: &Arc<dyn crate::tool::Provider>, origin: Option<&crate::package::Provenance>) -> Vec<String> {
    use crate::tool::origin::HostPattern;
    let any: Arc<dyn std::any::Any + Send + Sync> = p.clone();
    let Ok(plugin) = any.downcast::<crate::runtime::WasmPlugin>() else { return Vec::new() };
    let name = p.name();
    let granted = plugin.grants().extensions.get_as::<crate::http::HttpGrants>(crate::tool::Capability::Http);
    let mut out: Vec<String> = granted
        .map(|g| g.origins())
        .unwrap_or_default()
        .iter()
        .filter_map(|g| match &g.host {
            HostPattern::Suffix(s) => Some(format!(
                "wildcard: {name} may reach every host under {} ({g}); where you can, grant the hosts it needs by name",
                &s[1..]
            )),
            _ => None,
        })
        .collect();
    if let Some(crate::package::Provenance::Signed { manifest, .. }) = origin {
        let uncovered = match granted {
            Some(g) => crate::runtime::ExtensionGrant::uncovered(g, &manifest.http_hosts),
            None => manifest.http_hosts.clone(),
        };
        for ask in uncovered {
            out.push(format!(
                "{name}'s manifest asks to reach {ask}, which its grants do not cover: its requests there fail until plugins.grants.{name}.http grants it"
            ));
        }
    }
    out
}

/// An agent as configured (`toolhost agents --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// Name.
    pub name: String,
    /// Its ceiling.
    pub budget_tier: Tier,
    /// Its allow-list.
    pub tools: Vec<String>,
    /// Instructions sent to its MCP clients.
    pub instructions: Option<String>,
}

impl From<&AgentProfile> for AgentReport {
    fn from(a: &AgentProfile) -> AgentReport {
        AgentReport {
            name: a.name.clone(),
            budget_tier: a.budget_tier,
            tools: a.tools.clone(),
            instructions: a.instructions.clone(),
        }
    }
}
