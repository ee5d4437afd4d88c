//! What one store holds while one call runs: its WASI context (exactly the
//! plugin's grants), the resource limiter, bounded stdout/stderr, the
//! deadline, the caller's event sink, and which capabilities the call used.

use crate::bindings;
use crate::bindings::LogLevel;
use crate::capabilities::MemoryBackend;
use crate::capabilities::files_guard::CallFiles;
use crate::limits::Limiter;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;
use toolhost_types::{Capabilities, Capability, PluginEvent};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The capabilities one call used, shared with the callbacks that notice
/// use from outside the store (the socket address check); and what it does
/// with its granted directories (the filesystem guard's per-call state,
/// set when the instance is configured).
#[derive(Debug, Default)]
pub struct Used {
    capabilities: AtomicU8,
    pub(crate) files: CallFiles,
}

impl Used {
    /// Notes that the call used `c`.
    pub fn mark(&self, c: Capability) {
        self.capabilities.fetch_or(Capabilities::EMPTY.with(c).bits(), Ordering::Relaxed);
    }

    /// What the call used so far.
    pub fn get(&self) -> Capabilities {
        Capabilities::from_bits(self.capabilities.load(Ordering::Relaxed))
    }
}

/// Per-store state.
pub struct State {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) stdout: MemoryOutputPipe,
    pub(crate) stderr: MemoryOutputPipe,
    pub(crate) plugin: Arc<str>,
    pub(crate) tool: Arc<str>,
    pub(crate) logs_left: usize,
    pub(crate) events: Option<Arc<dyn Fn(PluginEvent) + Send + Sync>>,
    /// When the call must end; bounds guest timers (see `clock.rs`).
    pub(crate) deadline: Instant,
    /// The call's cancellation, when its caller can cancel it: checked
    /// at the epoch callback, so a cancelled call stops within
    /// `CANCEL_CHECK` of running guest code.
    pub(crate) cancel: Option<toolhost_types::Cancel>,
    /// The guest asked a timer to wait past `deadline` (it was cut there).
    pub(crate) timer_cut: bool,
    /// The memory store, when granted.
    pub(crate) memory: Option<Arc<dyn MemoryBackend>>,
    /// The memory store for writes, when granted.
    pub(crate) memory_write: Option<Arc<dyn MemoryBackend>>,
    /// What the plugin holds.
    pub(crate) held: Capabilities,
    /// What this call used.
    pub(crate) used: Arc<Used>,
    /// Progress reports the call may still send.
    pub(crate) progress_left: usize,
    /// When the last progress report went out.
    pub(crate) progress_sent: Option<Instant>,
    /// A report held back by the rate limit (the latest wins); sent when the
    /// next one is due, or when the call ends.
    pub(crate) progress_pending: Option<PluginEvent>,
    /// The call's state for an [`crate::Extension`], when the plugin holds
    /// its capability.
    pub(crate) ext: Option<Box<dyn std::any::Any + Send>>,
    /// What the plugin reads through `wasi:config/store`, and the secrets
    /// redacted from what it says.
    pub(crate) values: Arc<crate::values::PluginValues>,
    /// How the call asks its MCP client (`ask.rs`), when it can.
    pub(crate) asker: Option<Arc<dyn toolhost_types::offer::Asker>>,
    /// Questions the call may still ask, and asked so far.
    pub(crate) asks_left: u32,
    pub(crate) asks_made: u32,
    /// Longest one question waits for its answer.
    pub(crate) input_wait: std::time::Duration,
    /// How long the call waited for answers (not counted against its deadline).
    pub(crate) waited: std::time::Duration,
    /// The call ended to wait for its client's input (`input_required`).
    pub(crate) suspended: bool,
}

/// Progress reports one call may send at most.
pub(crate) const PROGRESS_REPORTS: usize = 100;
/// Least time between two progress reports of one call.
pub(crate) const PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(25);

impl State {
    /// The store's resource table and the call's extension state, for an
    /// [`crate::Extension`]'s host functions (which may put a state of
    /// their own there when there is none).
    pub fn extension(&mut self) -> (&mut ResourceTable, &mut Option<Box<dyn std::any::Any + Send>>) {
        (&mut self.table, &mut self.ext)
    }

    /// Sends the report the rate limit held back, if any (at the call's end).
    pub(crate) fn flush_progress(&mut self) {
        if let (Some(sink), Some(event)) = (&self.events, self.progress_pending.take())
            && self.progress_left > 0
        {
            self.progress_left -= 1;
            sink(event);
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl bindings::toolhost::plugin::host::Host for State {
    fn log(&mut self, level: LogLevel, message: String) {
        if self.logs_left == 0 {
            return;
        }
        self.logs_left -= 1;
        // Redacted before it is cut, so no part of a secret survives the cut.
        let message: String = self.values.redact(&message).chars().take(4096).collect();
        let (plugin, tool) = (&*self.plugin, &*self.tool);
        // The host log gets the line escaped (it can never forge a host
        // line); the MCP client gets it as it was, inside JSON.
        let line = toolhost_types::log_safe(&message);
        let level = match level {
            LogLevel::Trace => {
                tracing::trace!(plugin, tool, "{line}");
                "trace"
            }
            LogLevel::Debug => {
                tracing::debug!(plugin, tool, "{line}");
                "debug"
            }
            LogLevel::Info => {
                tracing::info!(plugin, tool, "{line}");
                "info"
            }
            LogLevel::Warn => {
                tracing::warn!(plugin, tool, "{line}");
                "warn"
            }
            LogLevel::Error => {
                tracing::error!(plugin, tool, "{line}");
                "error"
            }
        };
        if let Some(sink) = &self.events {
            sink(PluginEvent::Log { level, message });
        }
    }

    /// Coalesced: at most one report per `PROGRESS_INTERVAL` and
    /// `PROGRESS_REPORTS` per call reach the caller; in between, the latest
    /// report replaces the held one, so nothing queues for a slow client and
    /// the final value is never lost.
    fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<String>) {
        if self.events.is_none() || self.progress_left == 0 {
            return;
        }
        let message = message.map(|m| self.values.redact(&m).chars().take(1024).collect());
        let event = PluginEvent::Progress { progress, total, message };
        let now = Instant::now();
        if self.progress_sent.is_some_and(|t| now.duration_since(t) < PROGRESS_INTERVAL) {
            self.progress_pending = Some(event);
            return;
        }
        self.progress_pending = None;
        self.progress_sent = Some(now);
        self.progress_left -= 1;
        if let Some(sink) = &self.events {
            sink(event);
        }
    }
}

impl bindings::toolhost::plugin::types::Host for State {}
