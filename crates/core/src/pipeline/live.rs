//! Live budgets while a host serves: background calibration and saved
//! measurements.
//!
//! [`LiveBudget::start`] runs two threads beside the host, neither of them
//! on any call's path:
//!
//! - the **watcher** looks at the registry twice a second. A tool it has not
//!   seen (at start, when an external server connects or reconnects, when a
//!   plugin is added or replaced, by `toolhost plugin add` or the plugins
//!   directory) that may be probed (see [`crate::calibrate::probe_allowed`])
//!   goes to the calibrator; saved measurements of a tool that was not
//!   there at start (an external server connecting late) are restored when
//!   it appears; every [`SAVE_EVERY`], if any real call was recorded since
//!   the last save, the measurements are saved.
//! - the **calibrator** probes what it is given, one tool after the other,
//!   and stores the results like `toolhost calibrate` does.
//!
//! [`LiveBudget::shutdown`] saves once more (serve calls it on SIGINT and
//! SIGTERM).

use super::Pipeline;
use crate::budget::persist::{MeasurementStore, MeasurementsFile};
use crate::calibrate::{CalibrationStore, ProbeOutcome};
use crate::registry::RegisteredTool;
use crate::tool::{CallError, CallStats, ToolOutput};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often measurements are saved while calls are being made.
pub const SAVE_EVERY: Duration = Duration::from_secs(10);
/// How often the watcher looks at the registry.
const TICK: Duration = Duration::from_millis(500);

impl Pipeline {
    /// Writes a calibration probe's audit record (`"event": "probe"`): like
    /// a call's, with no agent, session or token.
    pub(crate) fn audit_probe(
        &self,
        tool: &RegisteredTool,
        arguments: &serde_json::Value,
        result: &Result<ToolOutput, CallError>,
        cost: Option<CallStats>,
        duration: Duration,
    ) {
        let raw = self.audit.include_arguments();
        let (error, error_text_sha256, error_text_bytes) = match result {
            Err(e) => {
                let (m, h, n) = crate::audit::redact_error(e, raw);
                (Some(m), h, n)
            }
            Ok(_) => (None, None, None),
        };
        let stats = match result {
            Ok(out) => out.stats,
            Err(_) => cost.unwrap_or_default(),
        };
        self.audit.write(&crate::audit::Record {
            time: crate::audit::now_rfc3339(),
            event: "probe",
            agent: None,
            session: None,
            token: None,
            tool: &tool.def.name,
            provider: Some(tool.provider.name()),
            provider_digest: tool.provider.fingerprint().map(str::to_string),
            arguments_sha256: crate::audit::hash_arguments(arguments),
            arguments: raw.then_some(arguments),
            outcome: match result {
                Ok(_) => "ok",
                Err(e) => e.kind(),
            },
            error,
            error_text_sha256,
            error_text_bytes,
            duration_ms: crate::audit::ms(duration),
            fuel_used: stats.fuel_used,
            peak_memory_bytes: stats.peak_memory_bytes,
            capabilities_held: tool.provider.held().names(),
            capabilities_used: stats.capabilities_used.names(),
            cached: false,
            http: Vec::new(),
            actor: "toolhost calibration".to_string(),
            trace_id: None,
            span_id: None,
            schema_sha256: Some(&tool.schema_sha256),
            model: None,
            prompt_hash: None,
        });
    }
}

/// Where background calibration stores its results.
#[derive(Debug, Clone)]
pub struct BackgroundCalibration {
    /// The calibration store (as `toolhost calibrate` writes).
    pub store: CalibrationStore,
    /// Its environment's name.
    pub environment: String,
}

/// The background side of a serving host's budget; see the module docs.
#[derive(Debug)]
pub struct LiveBudget {
    shared: Arc<Shared>,
    watcher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    host: Arc<Pipeline>,
    store: MeasurementStore,
    /// Saved windows of tools not in the registry yet.
    pending: Mutex<MeasurementsFile>,
    /// The measurement signature last saved.
    saved: Mutex<Option<u64>>,
    stop: AtomicBool,
}

impl Shared {
    fn save(&self) -> std::io::Result<bool> {
        let budget = self.host.budget();
        let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        let signature = budget.measurement_signature();
        if *saved == Some(signature) {
            return Ok(false);
        }
        let mut file = budget.export_measurements(&self.host.registry().snapshot());
        let max_age = Duration::from_secs(budget.config().window_max_age_secs);
        file.merge_missing(&self.pending.lock().unwrap_or_else(|p| p.into_inner()), max_age);
        self.store.save(&file)?;
        *saved = Some(signature);
        tracing::debug!(tools = file.tools.len(), path = %self.store.path().display(), "measurements saved");
        Ok(true)
    }

    /// Restores pending windows of tools that are now in the registry.
    fn restore_arrivals(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.tools.is_empty() {
            return;
        }
        let catalog = self.host.registry().snapshot();
        let arrived: Vec<String> = pending.tools.keys().filter(|n| catalog.get(n).is_some()).cloned().collect();
        if arrived.is_empty() {
            return;
        }
        let mut now = MeasurementsFile::empty(pending.saved_at_unix_ms);
        for n in &arrived {
            if let Some(w) = pending.tools.remove(n) {
                now.tools.insert(n.clone(), w);
            }
        }
        let r = self.host.budget().restore_measurements(&now, &catalog);
        for (tool, kept) in &r.tools {
            tracing::info!(tool = %tool, samples = kept, "restored saved measurements");
        }
    }
}

impl LiveBudget {
    /// Starts the watcher (and, with `calibration`, background calibration)
    /// for `host`, saving to `store`. `pending`: saved windows of tools not
    /// in the registry at start (from the `toolhost` crate's `Assembly`).
    pub fn start(
        host: Arc<Pipeline>,
        store: MeasurementStore,
        pending: MeasurementsFile,
        calibration: Option<BackgroundCalibration>,
    ) -> std::io::Result<LiveBudget> {
        let shared = Arc::new(Shared {
            host,
            store,
            pending: Mutex::new(pending),
            saved: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        // Nothing recorded yet: what is on disk is what there is.
        *shared.saved.lock().unwrap_or_else(|p| p.into_inner()) = Some(shared.host.budget().measurement_signature());
        let probe_tx = match calibration {
            Some(c) => {
                let (tx, rx) = std::sync::mpsc::channel::<Vec<Arc<RegisteredTool>>>();
                let s = shared.clone();
                std::thread::Builder::new().name("toolhost-calibrate".into()).spawn(move || calibrator(&s, &rx, &c))?;
                Some(tx)
            }
            None => None,
        };
        let s = shared.clone();
        let watcher =
            std::thread::Builder::new().name("toolhost-live".into()).spawn(move || watch(&s, probe_tx.as_ref()))?;
        Ok(LiveBudget { shared, watcher: Mutex::new(Some(watcher)) })
    }

    /// Saves the measurements now if anything changed since the last save;
    /// whether it wrote.
    pub fn save_now(&self) -> std::io::Result<bool> {
        self.shared.save()
    }

    /// Stops the background threads (a probe under way is not waited for)
    /// and saves the measurements one last time.
    pub fn shutdown(&self) -> std::io::Result<bool> {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(w) = self.watcher.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = w.join();
        }
        self.shared.save()
    }
}

impl Drop for LiveBudget {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
    }
}

/// A tool version's identity for "seen before": tool, provider, and the
/// provider instance (a replaced plugin or a reconnected server is a new one).
fn key(t: &RegisteredTool) -> (String, String, usize) {
    (t.def.name.clone(), t.provider.name().to_string(), Arc::as_ptr(&t.provider).cast::<()>() as usize)
}

fn watch(s: &Shared, probe: Option<&std::sync::mpsc::Sender<Vec<Arc<RegisteredTool>>>>) {
    let changes = s.host.registry().subscribe();
    let mut seen: HashSet<(String, String, usize)> = HashSet::new();
    let mut version = None;
    let mut last_save = Instant::now();
    while !s.stop.load(Ordering::Acquire) {
        let now_version = *changes.borrow();
        if version != Some(now_version) {
            version = Some(now_version);
            s.restore_arrivals();
            if let Some(tx) = probe {
                let catalog = s.host.registry().snapshot();
                let fresh: Vec<Arc<RegisteredTool>> = catalog
                    .tools()
                    .filter(|t| t.provider.is_available() && crate::calibrate::probe_allowed(&s.host, t).is_ok())
                    .filter(|t| seen.insert(key(t)))
                    .cloned()
                    .collect();
                if !fresh.is_empty() && tx.send(fresh).is_err() {
                    return;
                }
            }
        }
        // Refusals counted in seconds now past, as records, within a tick.
        s.host.audit().flush_refusals(false);
        if last_save.elapsed() >= SAVE_EVERY {
            last_save = Instant::now();
            if let Err(e) = s.save() {
                tracing::warn!(path = %s.store.path().display(), error = %e, "could not save measurements");
            }
        }
        std::thread::sleep(TICK);
    }
}

fn calibrator(s: &Shared, rx: &std::sync::mpsc::Receiver<Vec<Arc<RegisteredTool>>>, c: &BackgroundCalibration) {
    let samples = s.host.budget().config().calibration_samples.clamp(1, 100);
    while let Ok(mut tools) = rx.recv() {
        // Whatever else arrived meanwhile goes in the same batch.
        while let Ok(more) = rx.try_recv() {
            tools.extend(more);
        }
        let started = Instant::now();
        let stop = || s.stop.load(Ordering::Acquire);
        let results = crate::calibrate::calibrate_tools(&s.host, &tools, samples, &stop);
        let probed = results.iter().filter(|r| matches!(r.outcome, ProbeOutcome::Probed(_))).count();
        tracing::info!(tools = probed, took_ms = started.elapsed().as_millis() as u64, "background calibration");
        for (r, t) in results.iter().zip(&tools) {
            match &r.outcome {
                ProbeOutcome::Failed(why) => tracing::info!(tool = %r.tool, reason = %why, "probe failed"),
                ProbeOutcome::Probed(_) => {
                    let status = s.host.budget().status(&t.def);
                    let declared =
                        t.def.meta.estimated_duration_ms.map(|ms| {
                            s.host.budget().config().ceilings().tier_for(Duration::from_millis(u64::from(ms)))
                        });
                    let measured = status.probes.map(|p| p.p50);
                    if let (Some(declared), Some(p50)) = (declared, measured) {
                        let calibrated = s.host.budget().config().ceilings().tier_for(p50);
                        if calibrated != declared {
                            tracing::warn!(
                                tool = %r.tool,
                                declared_ms = t.def.meta.estimated_duration_ms,
                                probed_p50_ms = p50.as_millis() as u64,
                                tier = crate::budget::Tier::compatibility(calibrated),
                                "a tool is not as fast as it declares: tiered by its probes"
                            );
                        }
                    }
                }
                ProbeOutcome::Skipped(_) => {}
            }
        }
        if stop() {
            return;
        }
        if let Err(e) = c.store.save(&s.host, &c.environment, &results) {
            tracing::warn!(path = %c.store.path().display(), error = %e, "could not save calibration");
        }
    }
}
