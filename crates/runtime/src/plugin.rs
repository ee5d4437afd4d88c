//! A loaded plugin and its calls: a fresh store and instance per call, a
//! typed error for every way a call can fail, the result converted once
//! from the WIT content blocks to the host's.

use crate::bindings;
use crate::capabilities::{CAPABILITIES, Grants};
use crate::limits::{Limiter, Limits};
use crate::state::State;
use crate::values::CallSecrets;
use crate::{CompileSource, LoadErrorKind, Runtime, TOOL_INTERFACE};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_types::{
    CallContext, CallError, CallStats, Capabilities, Content, Provider, ProviderInfo, ProviderKind, ResourceBody,
    ToolDef, ToolMeta, ToolOutput, Validator, log_safe, valid_tool_name,
};
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;
use wasmtime::{Store, Trap};

/// A compiled component, checked for nothing yet but its format.
pub struct Compiled {
    /// Plugin name.
    pub name: String,
    /// sha256 of the component bytes, hex.
    pub digest: String,
    /// Size of the component in bytes.
    pub size: usize,
    /// Whether it was compiled now or loaded from the cache.
    pub source: CompileSource,
    /// Which code it is: fast first, or optimized.
    pub kind: crate::CodeKind,
    /// The component's bytes, kept for its optimized compile when it is
    /// fast code to be optimized later.
    pub(crate) fast_bytes: Option<Arc<[u8]>>,
    /// Names of the interfaces it imports.
    pub imports: Vec<String>,
    /// Names of what it exports.
    pub exports: Vec<String>,
    pub(crate) component: Component,
}

impl Compiled {
    /// Checks that the component exports a compatible `tool` interface.
    pub(crate) fn check_world(&self) -> Result<(), LoadErrorKind> {
        let prefix = format!("{TOOL_INTERFACE}@");
        match self.exports.iter().find(|e| e.starts_with(&prefix)) {
            Some(e) if e.starts_with(&format!("{prefix}0.1.")) => {
                let engine = self.component.engine();
                match self.component.component_type().get_export(engine, e) {
                    Some(ext) if matches!(ext.ty, ComponentItem::ComponentInstance(_)) => Ok(()),
                    _ => Err(LoadErrorKind::WrongWorld { exports: self.exports.clone() }),
                }
            }
            Some(e) => Err(LoadErrorKind::IncompatibleVersion { found: e.clone() }),
            None => Err(LoadErrorKind::WrongWorld { exports: self.exports.clone() }),
        }
    }
}

pub(crate) fn tool_def(info: bindings::ToolInfo) -> Result<ToolDef, (String, String)> {
    let fail = |reason: String| (info.name.clone(), reason);
    if !valid_tool_name(&info.name) {
        return Err(fail(format!("names must match {}", toolhost_types::TOOL_NAME_PATTERN)));
    }
    let schema: serde_json::Value =
        serde_json::from_str(&info.input_schema).map_err(|e| fail(format!("input schema is not JSON: {e}")))?;
    if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err(fail("input schema must be a JSON Schema with \"type\": \"object\"".into()));
    }
    Validator::new(&schema).map_err(|e| fail(format!("input schema is not a valid JSON Schema: {e}")))?;
    if info.max_duration_ms < info.estimated_duration_ms {
        return Err(fail(format!(
            "max-duration-ms ({}) is below estimated-duration-ms ({})",
            info.max_duration_ms, info.estimated_duration_ms
        )));
    }
    if let Some(probe) = &info.probe_arguments {
        serde_json::from_str::<serde_json::Value>(probe)
            .map_err(|e| fail(format!("probe arguments are not JSON: {e}")))?;
    }
    Ok(ToolDef {
        name: info.name,
        description: info.description,
        input_schema: schema,
        meta: ToolMeta {
            estimated_duration_ms: Some(info.estimated_duration_ms),
            max_duration_ms: Some(info.max_duration_ms),
            idempotent: info.idempotent,
            cacheable_seconds: info.cacheable_seconds,
            ..ToolMeta::default()
        },
        probe_arguments: info.probe_arguments.map(|p| serde_json::from_str(&p).expect("checked above")),
        ..ToolDef::default()
    })
}

/// A loaded wasm plugin: compiled, linked, with its tools read. Calls run in a
/// fresh instance each.
pub struct WasmPlugin {
    pub(crate) runtime: Runtime,
    pub(crate) name: Arc<str>,
    pub(crate) digest: String,
    pub(crate) size: usize,
    pub(crate) imports: Vec<String>,
    /// The capabilities its imports touch.
    pub(crate) imported: Capabilities,
    /// Whether it imports `toolhost:plugin/client` (read once, at load:
    /// the stdio lane asks on every call).
    pub(crate) asks: bool,
    pub(crate) source: CompileSource,
    /// The code calls instantiate: fast first, switched to optimized code
    /// between calls (`tiered`).
    pub(crate) code: Arc<crate::tiered::Code>,
    pub(crate) tools: Vec<ToolDef>,
    /// Exposed name -> the plugin's own, for tools exposed under another
    /// name ([`WasmPlugin::expose_as`]); empty when none is.
    pub(crate) own_names: std::collections::HashMap<String, String>,
    pub(crate) grants: Grants,
    /// The capabilities its grants give.
    pub(crate) held: Capabilities,
    /// Its calls running now, against `Limits::plugin_concurrency`,
    /// shared fairly among its callers.
    pub(crate) busy: Arc<crate::FairSlots>,
    /// Its resources, prompts and completions, when it exports `offer`.
    pub(crate) offer: Option<Arc<toolhost_types::offer::OfferHandle>>,
}

impl std::fmt::Debug for WasmPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmPlugin")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .field("tools", &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A name [`WasmPlugin::expose_as`] would have exposed a tool under,
/// which breaks the tool-name rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{exposed:?} (for {own}) breaks the tool-name rule: at most 64 of a-z A-Z 0-9 _ -")]
pub struct BadToolName {
    /// The name asked for.
    pub exposed: String,
    /// The plugin's own name of the tool.
    pub own: String,
}

impl WasmPlugin {
    /// Exposes each tool under the name `rename` gives it (a prefix, or
    /// `<plugin>_<tool>` on a clash); calls by the new name reach the
    /// plugin under its own. Fails, changing nothing, with the first name
    /// that breaks the tool-name rule.
    pub fn expose_as(&mut self, rename: impl Fn(&str) -> String) -> Result<(), BadToolName> {
        let mut renamed = Vec::with_capacity(self.tools.len());
        for t in &self.tools {
            let own = self.own_names.get(&t.name).cloned().unwrap_or_else(|| t.name.clone());
            let exposed = rename(&own);
            if !toolhost_types::valid_tool_name(&exposed) {
                return Err(BadToolName { exposed, own });
            }
            renamed.push((exposed, own));
        }
        self.own_names.clear();
        for (t, (exposed, own)) in self.tools.iter_mut().zip(renamed) {
            if exposed != own {
                self.own_names.insert(exposed.clone(), own);
            }
            t.name = exposed;
        }
        Ok(())
    }

    /// The plugin's own name of the tool exposed as `exposed`.
    pub fn own_name<'a>(&'a self, exposed: &'a str) -> &'a str {
        self.own_names.get(exposed).map_or(exposed, String::as_str)
    }

    /// A fair share of the plugin's slots for a call of `ctx`'s caller,
    /// waiting for one at most `limits.queue_wait_ms` and never past
    /// `deadline` (the caller spends the wait from it).
    pub(crate) fn slot(
        &self,
        ctx: &CallContext,
        limits: &Limits,
        deadline: Duration,
    ) -> Result<crate::FairSlot, CallError> {
        self.busy.take_within(ctx.agent.as_deref(), limits.queue_wait.min(deadline)).map_err(|r| {
            let how = match r {
                crate::Refusal::QueueFull => "and as many calls wait already".to_string(),
                crate::Refusal::Waited(w) => format!("none came free within {} ms (limits.queue_wait_ms)", w.as_millis()),
            };
            CallError::CapacityExceeded(format!(
                "{} is busy: its {} slots (limits.plugin_concurrency) are in use or kept for callers holding fewer, {how}; try again shortly",
                self.name,
                self.busy.limit()
            ))
        })
    }

    /// Changes how many calls of this plugin may run at once (a config
    /// reload changed `limits.plugin_concurrency`).
    pub fn set_concurrency(&self, limit: u32) {
        self.busy.set_limit(limit);
    }

    /// Calls running now, and how many may run at once
    /// (`limits.plugin_concurrency`).
    pub fn calls_in_flight(&self) -> (u32, u32) {
        (self.busy.in_use(), self.busy.limit())
    }

    /// sha256 of the component, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Component size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The interfaces the component imports (what it asks for).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// What the operator granted this plugin.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// Whether the code was compiled at load or came from the cache.
    pub fn compile_source(&self) -> CompileSource {
        self.source
    }

    /// Which code its calls run on now: fast (its optimized code not
    /// ready yet) or optimized.
    pub fn code_kind(&self) -> crate::CodeKind {
        self.code.kind()
    }

    /// Which compiler made the code its calls run on now: `winch` or
    /// `cranelift` (the optimized code, or fast code Winch could not make).
    pub fn code_compiler(&self) -> &'static str {
        if self.runtime.is_winch(self.code.pre().instance_pre().engine()) { "winch" } else { "cranelift" }
    }

    /// The names its `execution` export says run long (none without one).
    pub(crate) fn long_running(&self) -> Result<Vec<String>, CallError> {
        if !self.code.pre().exports_execution() {
            return Ok(Vec::new());
        }
        let limits = self.runtime.limits_for(&self.name);
        let deadline = limits.deadlines().for_declared(Some(1000));
        let (result, _, _, _) = self.run("long-running", deadline, None, &limits, |plugin, store| {
            match plugin.toolhost_plugin_execution() {
                Some(e) => e.call_long_running(store),
                None => Ok(Vec::new()),
            }
        });
        result
    }

    pub(crate) fn list_tools(&self) -> Result<Vec<bindings::ToolInfo>, CallError> {
        let limits = self.runtime.limits_for(&self.name);
        let deadline = limits.deadlines().for_declared(Some(1000));
        let (result, _, _, _) = self.run("list-tools", deadline, None, &limits, |plugin, store| {
            plugin.toolhost_plugin_tool().call_list_tools(store)
        });
        result
    }

    /// Instantiates in a fresh store and runs `f` under `limits` (the
    /// caller's one snapshot for the whole call: a reload in between
    /// changes the next call), classifying failures; with the secrets what
    /// the call says is redacted with (those at its start and at its end),
    /// and the host's refusals of its requests (added to a trap's message).
    pub(crate) fn run<R>(
        &self,
        tool: &str,
        deadline: Duration,
        ctx: Option<&CallContext>,
        limits: &Limits,
        f: impl FnOnce(&bindings::Plugin, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> (Result<R, CallError>, CallStats, CallSecrets, Vec<String>) {
        let rt = &self.runtime.inner;
        let start = Instant::now();
        let _tick = rt.ticker.enter();
        // The code in force at the call's start, kept to its end (its
        // engine: fast code may be Winch's).
        let pre = self.code.pre();
        let mut store = match self.runtime.store(pre.instance_pre().engine(), self, tool, deadline, ctx, limits) {
            Ok(s) => s,
            Err(e) => {
                let secrets = CallSecrets::new(self.runtime.values_for(&self.name), None);
                return (Err(e), CallStats { duration: start.elapsed(), ..CallStats::default() }, secrets, Vec::new());
            }
        };
        let result = pre.instantiate(&mut store).and_then(|instance| f(&instance, &mut store));
        let fuel_used = limits.fuel.map_or(0, |fuel| fuel.saturating_sub(store.get_fuel().unwrap_or(0)));
        let data = store.data();
        // What the call contacted through an extension's capability (the
        // origins its HTTP requests went to): contacting any is using it.
        let contacts = data.ext.as_deref().and_then(|ext| {
            let e = rt.extensions.iter().find(|e| self.held.contains(e.capability()))?;
            Some((e.capability(), e.contacts(ext))).filter(|(_, contacts)| !contacts.is_empty())
        });
        if let Some((capability, _)) = &contacts {
            data.used.mark(*capability);
        }
        let refusals = data.ext.as_deref().map_or_else(Vec::new, |ext| {
            rt.extensions.iter().filter(|e| self.held.contains(e.capability())).flat_map(|e| e.refusals(ext)).collect()
        });
        let stats = CallStats {
            duration: start.elapsed(),
            fuel_used,
            peak_memory_bytes: data.limiter.peak_memory,
            capabilities_used: data.used.get(),
            cached: false,
        };
        let state = store.data_mut();
        state.flush_progress();
        if let Some(cost) = ctx.and_then(|c| c.cost.as_ref()) {
            cost.set_waited(state.waited);
        }
        // The secrets the call read, and any set while it ran: a value
        // rotated or removed mid-call is redacted all the same.
        let secrets = self.runtime.call_secrets(&self.name, &state.values);
        if let (Some(cost), Some((_, mut contacts))) = (ctx.and_then(|c| c.cost.as_ref()), contacts) {
            if secrets.has_secrets() {
                // A host name can be made of a secret (under a wildcard grant).
                for c in &mut contacts {
                    if let Cow::Owned(origin) = secrets.redact(&c.origin) {
                        c.origin = origin;
                    }
                }
            }
            cost.set_contacts(contacts);
        }
        let stderr = state.stderr.contents();
        let stdout = state.stdout.contents();
        // Escaped: a guest's output can never forge a host log line.
        // Secrets redacted (crate::values).
        if !stdout.is_empty() {
            let text = String::from_utf8_lossy(&stdout);
            let text = secrets.redact(&text);
            tracing::info!(plugin = &*self.name, tool, "guest stdout: {}", log_safe(text.trim_end()));
        }
        if !stderr.is_empty() {
            let text = String::from_utf8_lossy(&stderr);
            let text = secrets.redact(&text);
            tracing::info!(plugin = &*self.name, tool, "guest stderr: {}", log_safe(text.trim_end()));
        }
        // A timer cut at the deadline wakes the guest there; should it answer
        // before the epoch deadline traps it, the answer is late all the same.
        let late = state.timer_cut && Instant::now() >= state.deadline;
        let result = match result {
            // Ended to wait for its client's input: the caller answers
            // `input_required` and the client tries again with the answers.
            Err(_) if state.suspended => Err(CallError::Cancelled { tool: tool.to_string() }),
            // Its caller cancelled it (the epoch callback ended it).
            Err(_) if state.cancel.as_ref().is_some_and(toolhost_types::Cancel::is_cancelled) => {
                Err(CallError::Cancelled { tool: tool.to_string() })
            }
            Ok(_) if late => Err(CallError::Timeout { tool: tool.to_string(), limit_ms: deadline.as_millis() as u64 }),
            r => r.map_err(|e| {
                let extension = rt.extensions.iter().find(|x| self.held.contains(x.capability())).map(|x| &**x);
                classify(e, tool, deadline, limits, &state.limiter, &stderr, extension)
            }),
        };
        let result = match result {
            Err(e) if !refusals.is_empty() => Err(with_refusals(e, &refusals)),
            r => r,
        };
        let result = match result {
            Err(e) if secrets.has_secrets() => Err(redact_error(e, &secrets)),
            r => r,
        };
        // Torn down (its slots reset) now, or after the answer on a thread
        // that defers teardowns.
        crate::teardown::retire(store);
        (result, stats, secrets, refusals)
    }
}

impl WasmPlugin {
    /// Keeps one instance alive across calls. This gives up the per-call
    /// isolation every real call has (state leaks between calls), so it exists
    /// only to measure what fresh instances cost.
    #[doc(hidden)]
    pub fn reused_instance(&self) -> Result<ReusedInstance<'_>, CallError> {
        let limits = self.runtime.limits();
        let pre = self.code.pre();
        let mut store =
            self.runtime.store(pre.instance_pre().engine(), self, "reused", limits.timeout_ceiling, None, &limits)?;
        let instance = pre
            .instantiate(&mut store)
            .map_err(|e| CallError::Trap { tool: "reused".into(), message: format!("{e:#}") })?;
        Ok(ReusedInstance { plugin: self, store, instance })
    }
}

impl WasmPlugin {
    /// Times what a fresh instance costs before its call: building the
    /// store (WASI context, limiter, fuel, deadline) and instantiating the
    /// pre-linked component into pooled slots; then dropping both unused
    /// (which resets those slots). Nothing in the instance runs. Exists
    /// only for the runtime benchmark's breakdown.
    #[doc(hidden)]
    pub fn fresh_instance_phases(&self) -> Result<[Duration; 3], CallError> {
        let rt = &self.runtime.inner;
        let _tick = rt.ticker.enter();
        let t0 = Instant::now();
        let limits = rt.limits.load();
        let pre = self.code.pre();
        let mut store =
            self.runtime.store(pre.instance_pre().engine(), self, "phases", limits.timeout_ceiling, None, &limits)?;
        let t1 = Instant::now();
        // The instance's handles point into the store: dropping the store
        // tears the instance down.
        pre.instantiate(&mut store)
            .map_err(|e| CallError::Trap { tool: "phases".into(), message: format!("{e:#}") })?;
        let t2 = Instant::now();
        drop(store);
        Ok([t1 - t0, t2 - t1, t2.elapsed()])
    }
}

/// See [`WasmPlugin::reused_instance`].
#[doc(hidden)]
pub struct ReusedInstance<'a> {
    plugin: &'a WasmPlugin,
    store: Store<State>,
    instance: bindings::Plugin,
}

impl ReusedInstance<'_> {
    /// Calls `tool` in the kept instance, with fuel and deadline reset.
    pub fn call(&mut self, tool: &str, arguments: &str) -> Result<Vec<Content>, CallError> {
        let rt = &self.plugin.runtime.inner;
        let _tick = rt.ticker.enter();
        let limits = rt.limits.load();
        if let Some(fuel) = limits.fuel {
            self.store.set_fuel(fuel).expect("fuel is enabled");
        }
        self.store.set_epoch_deadline(limits.timeout_ceiling.as_millis() as u64);
        match self.instance.toolhost_plugin_tool().call_call(&mut self.store, tool, arguments) {
            Ok(Ok(content)) => convert(content, tool, limits.output_bytes),
            Ok(Err(e)) => Err(CallError::Failed { tool: tool.into(), message: format!("{e:?}") }),
            Err(e) => Err(CallError::Trap { tool: tool.into(), message: format!("{e:#}") }),
        }
    }
}

/// Turns a wasmtime error from a call into the typed error the caller sees.
/// wasmtime's error when a store's host-call copy budget runs out.
const HOSTCALL_FUEL_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";

fn classify(
    e: wasmtime::Error,
    tool: &str,
    deadline: Duration,
    limits: &Limits,
    limiter: &Limiter,
    stderr: &[u8],
    extension: Option<&dyn crate::Extension>,
) -> CallError {
    let tool = tool.to_string();
    // A denied memory growth makes a Rust guest abort; report the cause, not the abort.
    if limiter.memory_denied {
        return CallError::MemoryLimit { tool, limit_bytes: limits.memory_bytes };
    }
    // The same for a denied table growth (`table.grow` answered -1).
    if limiter.table_denied {
        return CallError::TableLimit { tool, limit_elements: limits.table_elements };
    }
    // The call's resource table is full: it made more host-side
    // resources than its limit (wasi:http fields in a loop...).
    if e.chain().any(|c| {
        matches!(
            c.downcast_ref::<wasmtime::component::ResourceTableError>(),
            Some(wasmtime::component::ResourceTableError::Full)
        )
    }) {
        let what = format!(
            "made more than {} host-side resources (HTTP fields, requests, bodies, streams, pollables, files) in one call (limits.host_resources_per_call)",
            limits.host_resources_per_call
        );
        return CallError::HostResources { tool, what };
    }
    if let Some(what) = extension.and_then(|x| x.limit_hit(&e, limits)) {
        return CallError::HostResources { tool, what };
    }
    // The copy budget set from the output cap (`Runtime::store`) ran out
    // while lifting the result or an import's arguments out of the guest:
    // the copy stopped there.
    if format!("{e:#}").contains(HOSTCALL_FUEL_EXHAUSTED) {
        return CallError::OutputTooLarge { tool, size: limits.output_bytes + 1, limit: limits.output_bytes };
    }
    // Every pooled instance slot is taken (by other plugins' calls: each
    // plugin's own share is bounded before it gets here): busy, not broken.
    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>().is_some() {
        return CallError::CapacityExceeded(format!("the host is busy: every instance slot is in use ({e})"));
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => CallError::Timeout { tool, limit_ms: deadline.as_millis() as u64 },
        Some(Trap::OutOfFuel) => CallError::OutOfFuel { tool, fuel: limits.fuel.unwrap_or(0) },
        Some(Trap::StackOverflow) => CallError::StackOverflow { tool },
        Some(Trap::UnreachableCodeReached) if panic_message(stderr).is_some() => {
            CallError::GuestPanic { tool, message: panic_message(stderr).unwrap_or_default() }
        }
        Some(trap) => CallError::Trap { tool, message: trap.to_string() },
        None => CallError::Trap { tool, message: format!("{e:#}") },
    }
}

/// `e` with the plugin's secrets redacted from the text that came from it.
pub(crate) fn redact_error(e: CallError, secrets: &CallSecrets) -> CallError {
    let r = |m: String| redacted(m, secrets);
    match e {
        CallError::GuestPanic { tool, message } => CallError::GuestPanic { tool, message: r(message) },
        CallError::Trap { tool, message } => CallError::Trap { tool, message: r(message) },
        CallError::Failed { tool, message } => CallError::Failed { tool, message: r(message) },
        other => other,
    }
}

/// A failed call's error with the host's refusals (see
/// [`crate::Extension::refusals`]) its message leaves out added to it.
fn with_refusals(e: CallError, refusals: &[String]) -> CallError {
    let add = |message: String| {
        let missing: Vec<&String> = refusals.iter().filter(|r| !message.contains(r.as_str())).collect();
        missing.iter().fold(message, |m, r| format!("{m} (the host refused a request: {r})"))
    };
    match e {
        CallError::Failed { tool, message } => CallError::Failed { tool, message: add(message) },
        CallError::GuestPanic { tool, message } => CallError::GuestPanic { tool, message: add(message) },
        CallError::Trap { tool, message } => CallError::Trap { tool, message: add(message) },
        other => other,
    }
}

/// `text` with `secrets` redacted (itself when there is nothing to redact).
pub(crate) fn redacted(text: String, secrets: &CallSecrets) -> String {
    match secrets.redact(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(r) => r,
    }
}

/// Extracts "panicked at FILE: MESSAGE" from a Rust guest's stderr.
fn panic_message(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let start = text.find("panicked at ")?;
    let rest = &text[start + "panicked at ".len()..];
    // Format: "panicked at src/lib.rs:12:5:\nMESSAGE\nnote: ..."
    let mut lines = rest.lines();
    let location = lines.next().unwrap_or("").trim_end_matches(':');
    let message: Vec<&str> = lines.take_while(|l| !l.starts_with("note:")).collect();
    Some(format!("{} (at {location})", message.join(" ").trim()))
}

fn convert(content: Vec<bindings::Content>, tool: &str, limit: usize) -> Result<Vec<Content>, CallError> {
    let size: usize = content
        .iter()
        .map(|c| match c {
            bindings::Content::Text(s) | bindings::Content::Json(s) => s.len(),
            bindings::Content::Image(m) | bindings::Content::Audio(m) => m.data.len() + m.mime_type.len(),
            bindings::Content::Resource(r) => {
                r.uri.len()
                    + r.mime_type.as_ref().map_or(0, String::len)
                    + match &r.body {
                        bindings::ResourceBody::Text(t) => t.len(),
                        bindings::ResourceBody::Blob(b) => b.len(),
                    }
            }
        })
        .sum();
    if size > limit {
        return Err(CallError::OutputTooLarge { tool: tool.to_string(), size, limit });
    }
    content
        .into_iter()
        .map(|c| {
            Ok(match c {
                bindings::Content::Text(s) => Content::Text(s),
                bindings::Content::Json(s) => Content::Json(serde_json::from_str(&s).map_err(|e| {
                    CallError::Failed { tool: tool.to_string(), message: format!("plugin returned invalid JSON: {e}") }
                })?),
                bindings::Content::Image(m) => Content::Image { mime_type: m.mime_type, data: m.data },
                bindings::Content::Audio(m) => Content::Audio { mime_type: m.mime_type, data: m.data },
                bindings::Content::Resource(r) => Content::Resource {
                    uri: r.uri,
                    mime_type: r.mime_type,
                    body: match r.body {
                        bindings::ResourceBody::Text(t) => ResourceBody::Text(t),
                        bindings::ResourceBody::Blob(b) => ResourceBody::Blob(b),
                    },
                },
            })
        })
        .collect()
}

impl Provider for WasmPlugin {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> ProviderKind {
        ProviderKind::Wasm
    }

    fn tools(&self) -> &[ToolDef] {
        &self.tools
    }

    fn fingerprint(&self) -> Option<&str> {
        Some(&self.digest)
    }

    fn held(&self) -> Capabilities {
        self.held
    }

    fn describe(&self) -> ProviderInfo {
        let inert = CAPABILITIES.inert_without_grant(self.imported).difference(self.held);
        ProviderInfo {
            kind: ProviderKind::Wasm,
            digest: Some(self.digest.clone()),
            size: Some(self.size),
            imports: self.imports.clone(),
            asks: self.imported.difference(inert),
            inert,
            held: self.held,
            grants: CAPABILITIES.report(&self.grants),
            allows: CAPABILITIES.allows(&self.grants),
            code: Some(self.code.kind().as_str()),
        }
    }

    fn may_ask(&self) -> bool {
        self.asks
    }

    fn extension(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.offer.as_deref().map(|o| o as &(dyn std::any::Any + Send + Sync))
    }

    fn call(&self, tool: &str, arguments: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        let def = self.tools.iter().find(|t| t.name == tool).ok_or_else(|| CallError::UnknownTool(tool.to_string()))?;
        // The caller's deadline (the budget's), or the declared bound; the
        // operator's floor and the plugin's ceiling always hold.
        let limits = self.runtime.limits_for(&self.name);
        let policy = limits.deadlines();
        let deadline = match ctx.deadline {
            Some(d) => policy.deadline(Some(d), Some(d)),
            None => policy.for_declared(def.meta.max_duration_ms),
        };
        let slot = self.slot(ctx, &limits, deadline)?;
        let deadline = deadline.saturating_sub(slot.waited());
        let args = arguments.to_string();
        let own = self.own_name(tool);
        let (result, stats, secrets, refusals) = self.run(tool, deadline, Some(ctx), &limits, |plugin, store| {
            plugin.toolhost_plugin_tool().call_call(store, own, &args)
        });
        if let Some(cost) = &ctx.cost {
            cost.set(stats);
        }
        let tool_s = || tool.to_string();
        // With the secrets of the call's start and end (`run`).
        let redacted = |message: String| redacted(message, &secrets);
        match result? {
            Ok(content) => {
                let content = convert(content, tool, limits.output_bytes)?;
                Ok(ToolOutput { content, structured: None, stats })
            }
            Err(bindings::ToolError::InvalidInput(m)) => {
                Err(CallError::InvalidInput { tool: tool_s(), message: redacted(m) })
            }
            Err(bindings::ToolError::NotFound(m)) => Err(CallError::NotFound { tool: tool_s(), message: redacted(m) }),
            Err(bindings::ToolError::Forbidden(m)) => {
                Err(CallError::Forbidden { tool: tool_s(), message: redacted(m) })
            }
            // A guest's words that leave out why the host refused its
            // requests (JavaScript's fetch() says only `NetworkError`) get
            // the host's reasons added (an origin may be made of a secret).
            Err(bindings::ToolError::Failed(m)) => {
                Err(redact_error(with_refusals(CallError::Failed { tool: tool_s(), message: m }, &refusals), &secrets))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_is_extracted_from_rust_stderr() {
        let stderr = b"\nthread '<unnamed>' panicked at src/lib.rs:63:24:\nthe hostile plugin panicked on purpose\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(panic_message(stderr).unwrap(), "the hostile plugin panicked on purpose (at src/lib.rs:63:24)");
        assert_eq!(panic_message(b"all fine"), None);
    }
}
