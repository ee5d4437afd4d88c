//! Calibration: probe each idempotent tool with a minimal valid input,
//! concurrently, and keep the results apart from real calls. Results are
//! stored per environment and reused at the next start.
//!
//! Unlike the Go original, a probe never sends `{}` blindly: it uses the
//! tool's declared probe arguments or a minimal input generated from its
//! schema and checked against it, and tools that are not idempotent are
//! never probed (a probe must not have side effects).

use crate::Pipeline;
use crate::registry::RegisteredTool;
use crate::tool::CallContext;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The largest calibration file read.
const MAX_STORE_BYTES: usize = 8 << 20;

/// What happened to one tool.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeOutcome {
    /// Probed: every sample's duration.
    Probed(Vec<Duration>),
    /// Not probed, and why.
    Skipped(String),
    /// A probe failed; no samples kept.
    Failed(String),
}

/// One tool's calibration result.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeResult {
    /// Tool name.
    pub tool: String,
    /// Provider name.
    pub provider: String,
    /// What happened.
    pub outcome: ProbeOutcome,
}

/// A minimal value satisfying `schema`, for probing. Best effort: the
/// caller checks the result against the schema.
pub fn minimal_value(schema: &Value) -> Value {
    if let Some(v) = schema.get("const") {
        return v.clone();
    }
    if let Some(v) = schema.get("default") {
        return v.clone();
    }
    if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    if let Some(first) = schema.get("examples").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(first) = schema.get(key).and_then(Value::as_array).and_then(|e| e.first()) {
            return minimal_value(first);
        }
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "null",
    };
    match ty {
        "object" => {
            let mut obj = Map::new();
            let props = schema.get("properties").and_then(Value::as_object);
            for name in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
            {
                let sub = props.and_then(|p| p.get(name)).cloned().unwrap_or(Value::Null);
                obj.insert(name.to_string(), minimal_value(&sub));
            }
            Value::Object(obj)
        }
        "string" => {
            let n = schema.get("minLength").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
            Value::String("a".repeat(n))
        }
        "integer" | "number" => {
            let min = schema.get("minimum").or_else(|| schema.get("exclusiveMinimum")).and_then(Value::as_f64);
            let v = min.map_or(0.0, |m| if schema.get("exclusiveMinimum").is_some() { m + 1.0 } else { m });
            if ty == "integer" { Value::from(v.ceil() as i64) } else { Value::from(v) }
        }
        "boolean" => Value::Bool(false),
        "array" => {
            let n = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
            let item = schema.get("items").map(minimal_value).unwrap_or(Value::Null);
            Value::Array(vec![item; n])
        }
        _ => Value::Null,
    }
}

/// The arguments to probe `tool` with: its declared probe arguments, or a
/// minimal input generated from its schema, checked against the schema.
pub(crate) fn probe_arguments(tool: &RegisteredTool) -> Result<Value, String> {
    let args = tool.def.probe_arguments.clone().unwrap_or_else(|| minimal_value(&tool.def.input_schema));
    tool.validator.check(&args).map_err(|e| format!("no valid probe input (declare probe-arguments): {e}"))?;
    Ok(args)
}

/// Whether `tool` may be probed, and why not otherwise. The host never
/// calls, of its own accord, a tool that could act on the world:
///
/// - a tool the operator names in `budget.calibrate_tools` is probed: the
///   operator vouches for it;
/// - an upstream server's tool only with `budget.calibrate_upstreams: true`,
///   and then only when it declares `readOnlyHint: true` and
///   `openWorldHint: false` (an `idempotentHint` alone says nothing about
///   side effects: deleting twice is idempotent);
/// - a wasm tool when it declares `idempotent`, unless its plugin holds
///   `http` or `network`: a probe would send requests outside the host
///   (spending the operator's API quota, with the operator's keys) at every
///   start.
pub(crate) fn probe_allowed(host: &Pipeline, tool: &RegisteredTool) -> Result<(), String> {
    let config = host.budget().config();
    if config.calibrate_tools.contains(&tool.def.name) {
        return Ok(());
    }
    if tool.provider.kind() == crate::tool::ProviderKind::Mcp {
        if !config.calibrate_upstreams {
            return Err(
                "an upstream server's tool: probed only with budget.calibrate_upstreams: true, or when named in budget.calibrate_tools"
                    .into(),
            );
        }
        let hints = tool.def.annotations.as_ref();
        let read_only = hints.and_then(|a| a.read_only_hint) == Some(true);
        let closed_world = hints.and_then(|a| a.open_world_hint) == Some(false);
        return if read_only && closed_world {
            Ok(())
        } else {
            Err("it does not declare readOnlyHint: true and openWorldHint: false; name it in budget.calibrate_tools to probe it".into())
        };
    }
    let held = tool.provider.held();
    let outside: Vec<&str> = [crate::tool::Capability::Http, crate::tool::Capability::Network]
        .into_iter()
        .filter(|c| held.contains(*c))
        .map(|c| c.as_str())
        .collect();
    if !outside.is_empty() {
        return Err(format!(
            "it holds {}: a probe would send requests outside the host; name it in budget.calibrate_tools to probe it",
            outside.join(" and ")
        ));
    }
    if tool.def.meta.idempotent { Ok(()) } else { Err("not idempotent: never probed".into()) }
}

/// Probes every idempotent tool `samples` times, tools in parallel, and
/// feeds the results to the budget as calibration data.
pub fn calibrate(host: &Pipeline, samples: usize) -> Vec<ProbeResult> {
    let catalog = host.registry().snapshot();
    let tools: Vec<Arc<RegisteredTool>> = catalog.tools().cloned().collect();
    let results: Vec<ProbeResult> = std::thread::scope(|s| {
        let handles: Vec<_> = tools
            .iter()
            .map(|t| {
                s.spawn(move || ProbeResult {
                    tool: t.def.name.clone(),
                    provider: t.provider.name().to_string(),
                    outcome: probe(host, t, samples),
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("probe thread")).collect()
    });
    feed(host, &tools, &results);
    results
}

/// Probes `tools` one after the other (background calibration: one core at
/// most, never competing with itself), feeds the results to the budget and
/// returns them. `stop` ends it early, between probes.
pub fn calibrate_tools(
    host: &Pipeline,
    tools: &[Arc<RegisteredTool>],
    samples: usize,
    stop: &dyn Fn() -> bool,
) -> Vec<ProbeResult> {
    let mut results = Vec::with_capacity(tools.len());
    for t in tools {
        if stop() {
            break;
        }
        results.push(ProbeResult {
            tool: t.def.name.clone(),
            provider: t.provider.name().to_string(),
            outcome: probe(host, t, samples),
        });
    }
    feed(host, tools, &results);
    results
}

/// Records probed durations as calibration data, for the tools that are
/// still the version that was probed.
fn feed(host: &Pipeline, probed: &[Arc<RegisteredTool>], results: &[ProbeResult]) {
    let catalog = host.registry().snapshot();
    for (r, t) in results.iter().zip(probed) {
        let ProbeOutcome::Probed(d) = &r.outcome else { continue };
        // A tool replaced while it was probed keeps no stale figures.
        if catalog
            .get(&r.tool)
            .is_some_and(|now| std::ptr::addr_eq(Arc::as_ptr(&now.provider), Arc::as_ptr(&t.provider)))
        {
            host.budget().record_probes(&t.def, d);
        }
    }
}

/// Probes one tool. Each probe may run to the operator's hard ceiling on
/// any deadline (`limits.timeout_ceiling_ms`), not the deadline its
/// declaration earns it, so a tool that takes longer than it says is
/// measured at what it really takes. A probe that hits that ceiling counts
/// as a sample of the ceiling (the tool is at least that slow); once a
/// sample is over the DEEP ceiling no more are taken: the tool is over
/// budget whatever the rest say. Probes do not spend any agent's rate or
/// turns, and each leaves a `probe` record in the audit trail.
fn probe(host: &Pipeline, tool: &RegisteredTool, samples: usize) -> ProbeOutcome {
    if let Err(why) = probe_allowed(host, tool) {
        return ProbeOutcome::Skipped(why);
    }
    // A tool the audit gate holds runs only with its start record: the
    // host's own probes never run it unrecorded.
    if host.audit().gate_on() && host.audit().gates(&tool.def.name, crate::pipeline::writes_nothing(tool)) {
        return ProbeOutcome::Skipped("the audit gate holds it (audit.fail_closed): never probed".into());
    }
    let args = match probe_arguments(tool) {
        Ok(a) => a,
        Err(e) => return ProbeOutcome::Skipped(e),
    };
    let ceiling = host.budget().deadlines().ceiling;
    let over_budget = host.budget().config().ceilings().deep;
    let mut durations = Vec::with_capacity(samples);
    for _ in 0..samples {
        let cost = Arc::new(crate::tool::CallCost::default());
        let ctx =
            CallContext { deadline: Some(ceiling), cost: Some(cost.clone()), probe: true, ..CallContext::default() };
        let start = Instant::now();
        let result = tool.provider.call(&tool.def.name, &args, &ctx);
        let took = start.elapsed();
        host.audit_probe(tool, &args, &result, cost.get(), took);
        match result {
            Ok(_) => durations.push(took),
            Err(crate::tool::CallError::Timeout { .. }) => {
                durations.push(took);
                break;
            }
            Err(e) => return ProbeOutcome::Failed(e.to_string()),
        }
        if took > over_budget {
            break;
        }
    }
    ProbeOutcome::Probed(durations)
}

/// Calibration results on disk, one file per environment.
#[derive(Debug, Clone)]
pub struct CalibrationStore {
    path: PathBuf,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct StoredFile {
    environment: String,
    tools: BTreeMap<String, StoredTool>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct StoredTool {
    provider: String,
    fingerprint: String,
    measured_at_unix: u64,
    samples_us: Vec<u64>,
}

impl CalibrationStore {
    /// The store for `environment` under `state_dir`.
    pub fn new(state_dir: &Path, environment: &str) -> CalibrationStore {
        let safe: String = environment
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        CalibrationStore { path: state_dir.join("calibration").join(format!("{safe}.json")) }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Saves `results` (only tools that were probed), merged over what the
    /// file already holds. Written atomically.
    pub fn save(&self, host: &Pipeline, environment: &str, results: &[ProbeResult]) -> std::io::Result<()> {
        let mut file = self.read().unwrap_or_default();
        file.environment = environment.to_string();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let catalog = host.registry().snapshot();
        for r in results {
            let (ProbeOutcome::Probed(samples), Some(t)) = (&r.outcome, catalog.get(&r.tool)) else { continue };
            file.tools.insert(
                r.tool.clone(),
                StoredTool {
                    provider: r.provider.clone(),
                    fingerprint: t.provider.fingerprint().unwrap_or_default().to_string(),
                    measured_at_unix: now,
                    samples_us: samples.iter().map(|d| d.as_micros() as u64).collect(),
                },
            );
        }
        let dir = self.path.parent().expect("store path has a parent");
        crate::runtime::private::create_dirs(dir)?;
        let bytes = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
        crate::runtime::private::write_private(&self.path, &bytes)?;
        Ok(())
    }

    fn read(&self) -> Option<StoredFile> {
        let bytes = match crate::runtime::private::read_state(&self.path, MAX_STORE_BYTES) {
            Ok(bytes) => bytes?,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "ignoring the calibration file");
                return None;
            }
        };
        match serde_json::from_slice(&bytes) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "ignoring unreadable calibration file");
                None
            }
        }
    }

    /// Feeds stored results to the host's budget, for tools whose provider
    /// is unchanged (same fingerprint). Returns how many tools it restored.
    pub fn load_into(&self, host: &Pipeline) -> usize {
        let Some(file) = self.read() else { return 0 };
        let catalog = host.registry().snapshot();
        let mut n = 0;
        for (name, stored) in &file.tools {
            let Some(t) = catalog.get(name) else { continue };
            if t.provider.name() != stored.provider
                || t.provider.fingerprint().unwrap_or_default() != stored.fingerprint
            {
                continue;
            }
            let samples: Vec<Duration> = stored.samples_us.iter().map(|&us| Duration::from_micros(us)).collect();
            if !samples.is_empty() {
                host.budget().record_probes(&t.def, &samples);
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn minimal_values_satisfy_common_schemas() {
        let schema = json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 3},
                "top_k": {"type": "integer", "minimum": 1},
                "mode": {"type": "string", "enum": ["quick", "full"]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "optional": {"type": "string"}
            },
            "required": ["query", "top_k", "mode", "tags"]
        });
        let v = minimal_value(&schema);
        assert_eq!(v, json!({"query": "aaa", "top_k": 1, "mode": "quick", "tags": ["a"]}));
        crate::validate::Validator::new(&schema).unwrap().check(&v).unwrap();
    }
}
