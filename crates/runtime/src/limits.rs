//! Hard limits on loading and running plugins, and the per-store resource
//! limiter that enforces memory and table limits with a typed outcome.

use std::time::Duration;
use wasmtime::ResourceLimiter;

/// Operator-set limits. Every call of every plugin runs under them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Fuel (roughly: wasm instructions) per call. `None` disables metering.
    pub fuel: Option<u64>,
    /// Largest linear memory one instance may grow to, in bytes.
    pub memory_bytes: usize,
    /// Most elements a table may hold.
    pub table_elements: usize,
    /// Largest wasm stack, in bytes (an engine-wide setting).
    pub max_wasm_stack: usize,
    /// Largest result a call may return, in bytes (all content blocks together).
    pub output_bytes: usize,
    /// Shortest deadline a call gets, whatever the tool declares: absorbs
    /// scheduler noise for tools that declare a very small max duration.
    pub timeout_floor: Duration,
    /// Longest deadline any call gets, whatever the tool declares.
    pub timeout_ceiling: Duration,
    /// Largest component file the host will load, in bytes.
    pub max_component_bytes: usize,
    /// Bytes of guest stdout/stderr kept per call (for the log).
    pub guest_output_bytes: usize,
    /// Most `host.log` lines a plugin may emit per call.
    pub log_lines: usize,
    /// Most instances alive at once across all plugins (pooling allocator slots).
    pub max_instances: u32,
    /// Most calls of one plugin running at once, shared fairly among its
    /// callers ([`crate::FairSlots`]: an eighth kept for callers holding
    /// few); a call past it waits up to `queue_wait`, then fails with
    /// `capacity_exceeded`.
    pub plugin_concurrency: u32,
    /// Longest a call waits for one of its plugin's slots (within its
    /// deadline).
    pub queue_wait: Duration,
    /// Most files and directories one call holds open at once; past it an
    /// open fails with the WASI filesystem error `quota`.
    pub max_open_files: usize,
    /// Most calls one agent (or the operator endpoint) has running at once,
    /// across all tools; past it the agent's calls fail fast with
    /// `capacity_exceeded`, so a flooding client only slows itself.
    pub agent_concurrency: u32,
    /// Most HTTP requests one call may send (`wasi:http`); past it a
    /// request fails at once.
    pub http_requests_per_call: u32,
    /// Largest HTTP response body a call may read, in bytes; cut there
    /// while reading.
    pub http_response_bytes: usize,
    /// Largest HTTP request body a call may send, in bytes.
    pub http_request_bytes: usize,
    /// Most host-side resources (entries of the call's WASI resource table:
    /// HTTP fields, requests, bodies, streams, pollables, open files) a
    /// call may hold at once; past it the call ends with `memory_limit`
    /// ([`toolhost_types::CallError::HostResources`]). With
    /// [`Limits::http_field_bytes`] and the request-body budget this bounds
    /// what a call makes the host allocate: see that method.
    pub host_resources_per_call: usize,
    /// Longest one call waits for its client to answer a question (an
    /// elicitation or a sampling request); the wait does not count
    /// against the call's deadline.
    pub input_wait: Duration,
    /// Most questions one call may ask its client.
    pub asks_per_call: u32,
    /// Most tasks (MCP tasks: a long tool called to run on its own) one
    /// agent may have running at once; past it a new task is refused.
    pub tasks_per_agent: u32,
    /// Most finished tasks whose results are kept per agent; past it the
    /// oldest finished task is dropped.
    pub task_results_per_agent: u32,
    /// Longest a task and its result are kept, from its creation (a client
    /// may ask for less).
    pub task_ttl: Duration,
    /// Size of the instance pool's memory slots, when per-plugin limits
    /// ([`PluginLimits`]) allow more than `memory_bytes` (0: `memory_bytes`).
    /// An engine setting: read at start only.
    pub pool_memory_bytes: usize,
    /// How a component not compiled before is compiled: fast code first
    /// and optimized code in the background (the default), optimized
    /// before its first call, or fast only ([`crate::CompileMode`]).
    pub compile: crate::CompileMode,
    /// What compiles the fast first code: Winch on x86_64 (else Cranelift
    /// without optimization), or always Cranelift ([`crate::FastCompiler`]).
    pub fast_compiler: crate::FastCompiler,
}

/// One plugin's own limits (`plugins.limits.<plugin>`), each replacing
/// the operator's [`Limits`] field of the same name for that plugin only,
/// higher or lower.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginLimits {
    /// [`Limits::memory_bytes`].
    pub memory_bytes: Option<usize>,
    /// [`Limits::fuel`]; `Some(None)` turns metering off for the plugin
    /// (no limit) where it is on.
    pub fuel: Option<Option<u64>>,
    /// [`Limits::timeout_ceiling`].
    pub timeout_ceiling: Option<Duration>,
    /// [`Limits::output_bytes`].
    pub output_bytes: Option<usize>,
    /// [`Limits::plugin_concurrency`].
    pub plugin_concurrency: Option<u32>,
}

impl PluginLimits {
    /// `base` with these limits in place of its own.
    pub fn apply(&self, base: &Limits) -> Limits {
        let mut l = base.clone();
        if let Some(m) = self.memory_bytes {
            l.memory_bytes = m;
        }
        // Metering is an engine setting: with it off, there is no fuel to set.
        if let Some(f) = self.fuel
            && base.fuel.is_some()
        {
            l.fuel = Some(f.unwrap_or(u64::MAX));
        }
        if let Some(t) = self.timeout_ceiling {
            l.timeout_ceiling = t;
        }
        if let Some(b) = self.output_bytes {
            l.output_bytes = b;
        }
        if let Some(n) = self.plugin_concurrency {
            l.plugin_concurrency = n.max(1);
        }
        l
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: Some(5_000_000_000),
            memory_bytes: 64 << 20,
            table_elements: 20_000,
            max_wasm_stack: 512 << 10,
            output_bytes: 1 << 20,
            timeout_floor: Duration::from_millis(100),
            timeout_ceiling: Duration::from_secs(30),
            max_component_bytes: 64 << 20,
            guest_output_bytes: 64 << 10,
            log_lines: 100,
            max_instances: 256,
            plugin_concurrency: 64,
            queue_wait: Duration::from_millis(250),
            max_open_files: 256,
            agent_concurrency: 32,
            http_requests_per_call: 16,
            http_response_bytes: 8 << 20,
            http_request_bytes: 1 << 20,
            input_wait: Duration::from_secs(300),
            asks_per_call: 8,
            tasks_per_agent: 8,
            task_results_per_agent: 32,
            task_ttl: Duration::from_secs(900),
            host_resources_per_call: 1024,
            pool_memory_bytes: 0,
            compile: crate::CompileMode::FastFirst,
            fast_compiler: crate::FastCompiler::Winch,
        }
    }
}

impl Limits {
    /// The most one HTTP fields resource (a set of headers or trailers) of
    /// a call may hold, in bytes as `wasi:http` counts them (names and
    /// values, with their in-memory headers): a quarter of the call's
    /// memory shared among its [`Limits::host_resources_per_call`], between
    /// 4 KiB and 128 KiB (wasmtime's default). With the default limits (64
    /// MiB, 1024 resources) that is 16 KiB a set, and a call's fields
    /// together stay under a quarter of its memory; its outgoing bodies
    /// buffer at most [`Limits::http_request_bytes`] more, plus 8 KiB a body.
    pub fn http_field_bytes(&self) -> usize {
        (self.memory_bytes / 4 / self.host_resources_per_call.max(1)).clamp(4 << 10, 128 << 10)
    }

    /// The size of the instance pool's memory slots.
    pub fn slot_memory_bytes(&self) -> usize {
        self.memory_bytes.max(self.pool_memory_bytes)
    }

    /// The floor and ceiling on every call's deadline.
    pub fn deadlines(&self) -> toolhost_types::DeadlinePolicy {
        toolhost_types::DeadlinePolicy { floor: self.timeout_floor, ceiling: self.timeout_ceiling }
    }
}

/// Enforces [`Limits`] on one store and remembers what happened, so a failed
/// growth becomes a typed "memory limit" error rather than an anonymous trap.
#[derive(Debug)]
pub(crate) struct Limiter {
    memory_limit: usize,
    table_limit: usize,
    /// Set when the guest asked for more memory than allowed.
    pub(crate) memory_denied: bool,
    /// Set when the guest asked for a table larger than allowed.
    pub(crate) table_denied: bool,
    /// Largest memory size granted, in bytes.
    pub(crate) peak_memory: usize,
}

impl Limiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Limiter {
            memory_limit: limits.memory_bytes,
            table_limit: limits.table_elements,
            memory_denied: false,
            table_denied: false,
            peak_memory: 0,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_limit || maximum.is_some_and(|m| desired > m) {
            self.memory_denied = true;
            return Ok(false);
        }
        self.peak_memory = self.peak_memory.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.table_limit || maximum.is_some_and(|m| desired > m) {
            self.table_denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        // A Rust component has a handful of core instances; this bounds
        // pathological components that nest thousands.
        1000
    }

    fn memories(&self) -> usize {
        16
    }

    fn tables(&self) -> usize {
        64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_denies_growth_past_the_limit_and_remembers_it() {
        let mut lim = Limiter::new(&Limits { memory_bytes: 1 << 20, ..Limits::default() });
        assert!(lim.memory_growing(0, 1 << 19, None).unwrap());
        assert!(!lim.memory_denied);
        assert!(!lim.memory_growing(1 << 19, 2 << 20, None).unwrap());
        assert!(lim.memory_denied);
        assert_eq!(lim.peak_memory, 1 << 19);
    }

    #[test]
    fn limiter_denies_table_growth_past_the_limit_and_remembers_it() {
        let mut lim = Limiter::new(&Limits { table_elements: 1000, ..Limits::default() });
        assert!(lim.table_growing(0, 1000, None).unwrap());
        assert!(!lim.table_denied);
        assert!(!lim.table_growing(1000, 1001, None).unwrap());
        assert!(lim.table_denied);
    }
}
