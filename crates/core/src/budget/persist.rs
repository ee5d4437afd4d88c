//! Real-call measurements that outlive the process, and the live figures
//! the admin API reads (sample ages, DM overrides with their time left).
//!
//! A serving host saves each tool's window of real calls (durations,
//! outcomes and how old each sample is), every caller's together and each
//! caller's own (the tier a caller sees comes from its own calls only), to
//! `<state dir>/measurements.json`
//! (mode 0600, written atomically) and the next start restores them,
//! shifting every sample back by its age plus the time the host was down,
//! so the window's maximum age still ages them out. A sample is restored
//! only for the same tool of the same provider version (a wasm plugin's
//! digest): a replaced plugin starts afresh.
//!
//! The file is input like any other: one that does not parse, is too
//! large, holds impossible values (a duration beyond the operator's hard
//! ceiling, a save time in the future, an unknown outcome, a bad tool name)
//! is refused whole, with the reason, and nothing of it is used.

use super::metrics::{AgedSample, Outcome};
use super::{Budget, Tier};
use crate::registry::Catalog;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The file's name in the state directory.
pub const FILE_NAME: &str = "measurements.json";
/// The largest file read (a full window of 100 samples for 4096 tools
/// fits easily).
pub const MAX_FILE_BYTES: usize = 8 << 20;
/// The most tools a file may hold.
pub const MAX_TOOLS: usize = 4096;
/// The most samples one tool may hold in a file (in all, and per caller).
pub const MAX_SAMPLES: usize = 1000;
/// The most callers one tool may hold windows of in a file.
pub const MAX_CALLERS: usize = 1024;
/// The key of the operator's window among a tool's callers (agent names
/// are not empty).
pub const OPERATOR: &str = "";
/// The file format written and accepted.
pub const FORMAT_VERSION: u32 = 1;
/// How far in the future a save time may be (clock adjustments) before the
/// file is refused.
const FUTURE_SLACK: Duration = Duration::from_secs(300);
/// How much longer than the operator's deadline ceiling a sample may have
/// taken (the deadline is enforced to within a tick; a timeout is measured
/// a little after it).
const DURATION_SLACK: Duration = Duration::from_secs(5);
/// Upper bound on any stored duration whatever the ceiling.
const DURATION_CAP: Duration = Duration::from_secs(24 * 3600);

/// The saved measurements (`measurements.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasurementsFile {
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// When the ages were taken, ms since the Unix epoch.
    pub saved_at_unix_ms: u64,
    /// Each tool's real-call window.
    pub tools: BTreeMap<String, StoredWindow>,
}

/// One tool's real calls as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredWindow {
    /// The provider that served the tool.
    pub provider: String,
    /// The provider's version (a wasm plugin's sha256), when it has one.
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// The samples of every caller, oldest first.
    pub samples: Vec<StoredSample>,
    /// Each caller's own samples, oldest first, by agent name
    /// ([`OPERATOR`]: the operator's). Absent from files written before
    /// callers had windows of their own: their calls then count for no
    /// caller's tier.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub callers: BTreeMap<String, Vec<StoredSample>>,
}

/// One real call as saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredSample {
    /// How long before `saved_at_unix_ms` the call ended, ms.
    pub age_ms: u64,
    /// How long it took, µs.
    pub duration_us: u64,
    /// `ok`, `error` or `timeout`.
    pub outcome: StoredOutcome,
}

/// An [`Outcome`] as saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredOutcome {
    /// [`Outcome::Ok`].
    Ok,
    /// [`Outcome::Error`].
    Error,
    /// [`Outcome::Timeout`].
    Timeout,
}

impl From<Outcome> for StoredOutcome {
    fn from(o: Outcome) -> StoredOutcome {
        match o {
            Outcome::Ok => StoredOutcome::Ok,
            Outcome::Error => StoredOutcome::Error,
            Outcome::Timeout => StoredOutcome::Timeout,
        }
    }
}

impl From<StoredOutcome> for Outcome {
    fn from(o: StoredOutcome) -> Outcome {
        match o {
            StoredOutcome::Ok => Outcome::Ok,
            StoredOutcome::Error => Outcome::Error,
            StoredOutcome::Timeout => Outcome::Timeout,
        }
    }
}

/// Why saved measurements were not used.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The file exists but cannot be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file was read and refused; nothing of it is used.
    #[error("{path}: refused ({reason}); starting without stored measurements")]
    Refused {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis().min(u128::from(u64::MAX)) as u64)
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

fn us(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

impl MeasurementsFile {
    /// An empty file as of `saved_at_unix_ms`.
    pub fn empty(saved_at_unix_ms: u64) -> MeasurementsFile {
        MeasurementsFile { version: FORMAT_VERSION, saved_at_unix_ms, tools: BTreeMap::new() }
    }

    /// Checks every value against what a real host can have written; the
    /// first problem found, in words. `ceiling`: the operator's hard
    /// ceiling on any call's deadline.
    pub(crate) fn check(&self, ceiling: Duration, now_unix_ms: u64) -> Result<(), String> {
        if self.version != FORMAT_VERSION {
            return Err(format!("format version {} (this toolhost reads {FORMAT_VERSION})", self.version));
        }
        if self.saved_at_unix_ms > now_unix_ms.saturating_add(ms(FUTURE_SLACK)) {
            return Err(format!("saved {} s in the future", (self.saved_at_unix_ms - now_unix_ms) / 1000));
        }
        if self.tools.len() > MAX_TOOLS {
            return Err(format!("{} tools (at most {MAX_TOOLS})", self.tools.len()));
        }
        let longest = ceiling.saturating_add(DURATION_SLACK).min(DURATION_CAP);
        for (name, w) in &self.tools {
            if !crate::tool::valid_tool_name(name) {
                return Err(format!("{:?} is not a tool name", crate::tool::log_safe(name)));
            }
            if w.provider.is_empty() || w.provider.len() > 256 {
                return Err(format!("tool {name}: provider name of {} bytes", w.provider.len()));
            }
            if w.fingerprint.as_ref().is_some_and(|f| f.len() > 128) {
                return Err(format!("tool {name}: fingerprint too long"));
            }
            if w.samples.len() > MAX_SAMPLES {
                return Err(format!("tool {name}: {} samples (at most {MAX_SAMPLES})", w.samples.len()));
            }
            if w.callers.len() > MAX_CALLERS {
                return Err(format!("tool {name}: {} callers (at most {MAX_CALLERS})", w.callers.len()));
            }
            if let Some((caller, samples)) = w.callers.iter().find(|(c, v)| c.len() > 256 || v.len() > MAX_SAMPLES) {
                return Err(format!(
                    "tool {name}: a caller's name of {} bytes, or {} samples (at most {MAX_SAMPLES})",
                    caller.len(),
                    samples.len()
                ));
            }
            if let Some(s) = w.samples.iter().chain(w.callers.values().flatten()).find(|s| s.duration_us > us(longest))
            {
                return Err(format!(
                    "tool {name}: a call of {} ms, longer than any deadline ({} ms)",
                    s.duration_us / 1000,
                    ms(longest)
                ));
            }
        }
        Ok(())
    }

    /// Adds `older`'s tools that this file lacks, their ages moved on to
    /// this file's save time, dropping samples older than `max_age`.
    pub fn merge_missing(&mut self, older: &MeasurementsFile, max_age: Duration) {
        let shift = self.saved_at_unix_ms.saturating_sub(older.saved_at_unix_ms);
        for (name, w) in &older.tools {
            if self.tools.contains_key(name) {
                continue;
            }
            let moved = |samples: &[StoredSample]| -> Vec<StoredSample> {
                samples
                    .iter()
                    .map(|s| StoredSample { age_ms: s.age_ms.saturating_add(shift), ..*s })
                    .filter(|s| s.age_ms <= ms(max_age))
                    .collect()
            };
            let samples = moved(&w.samples);
            let callers: BTreeMap<String, Vec<StoredSample>> =
                w.callers.iter().map(|(c, v)| (c.clone(), moved(v))).filter(|(_, v)| !v.is_empty()).collect();
            if !samples.is_empty() {
                self.tools.insert(name.clone(), StoredWindow { samples, callers, ..w.clone() });
            }
        }
    }
}

/// Where a state directory keeps its measurements.
#[derive(Debug, Clone)]
pub struct MeasurementStore {
    path: PathBuf,
}

impl MeasurementStore {
    /// The store in `state_dir`.
    pub fn new(state_dir: &Path) -> MeasurementStore {
        MeasurementStore { path: state_dir.join(FILE_NAME) }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and checks the file (`None`: there is none). A file that is not
    /// a regular file of this user's, not private, too large, or fails
    /// `MeasurementsFile::check` is refused.
    pub fn load(&self, ceiling: Duration) -> Result<Option<MeasurementsFile>, PersistError> {
        use crate::runtime::private::{StateFileError, read_state};
        let refused = |reason: String| PersistError::Refused { path: self.path.clone(), reason };
        let bytes = match read_state(&self.path, MAX_FILE_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(StateFileError::Refused(why)) => return Err(refused(why)),
            Err(StateFileError::Io(source)) => return Err(PersistError::Io { path: self.path.clone(), source }),
        };
        let file: MeasurementsFile = serde_json::from_slice(&bytes).map_err(|e| refused(e.to_string()))?;
        file.check(ceiling, unix_ms_now()).map_err(refused)?;
        Ok(Some(file))
    }

    /// Writes `file` atomically, mode 0600.
    pub fn save(&self, file: &MeasurementsFile) -> std::io::Result<()> {
        let json = serde_json::to_vec(file).map_err(std::io::Error::other)?;
        crate::runtime::private::write_private(&self.path, &json)
    }
}

/// What [`Budget::restore_measurements`] did.
#[derive(Debug, Default)]
pub struct Restored {
    /// Tools whose windows were restored, with the samples kept.
    pub tools: Vec<(String, usize)>,
    /// Tools not (yet) in the catalogue, kept to restore when they appear
    /// (an external server that connects later), as of the restore.
    pub pending: MeasurementsFile,
    /// Tools whose provider or version changed: forgotten.
    pub changed: Vec<String>,
}

impl Default for MeasurementsFile {
    fn default() -> Self {
        MeasurementsFile::empty(0)
    }
}

impl Budget {
    /// Every real-call window of the tools in `catalog`, as of now.
    pub fn export_measurements(&self, catalog: &Catalog) -> MeasurementsFile {
        let now = self.clock.now();
        let mut file = MeasurementsFile::empty(unix_ms_now());
        let states = self.tools.read().unwrap_or_else(|p| p.into_inner());
        for t in catalog.tools() {
            let Some(state) = states.get(&t.def.name) else { continue };
            let stored = |w: &super::metrics::Window| -> Vec<StoredSample> {
                w.aged(now)
                    .into_iter()
                    .map(|s| StoredSample { age_ms: ms(s.age), duration_us: us(s.duration), outcome: s.outcome.into() })
                    .collect()
            };
            let (samples, callers) = {
                let stats = state.stats.lock().unwrap_or_else(|p| p.into_inner());
                let callers: BTreeMap<String, Vec<StoredSample>> = stats
                    .callers
                    .iter()
                    .map(|(c, w)| (c.unwrap_or(OPERATOR).to_string(), stored(w)))
                    .filter(|(_, v)| !v.is_empty())
                    .collect();
                (stored(&stats.real), callers)
            };
            if samples.is_empty() {
                continue;
            }
            file.tools.insert(
                t.def.name.clone(),
                StoredWindow {
                    provider: t.provider.name().to_string(),
                    fingerprint: t.provider.fingerprint().map(str::to_string),
                    samples,
                    callers,
                },
            );
        }
        file
    }

    /// Restores saved windows for the tools in `catalog` served by the same
    /// provider at the same version. Each sample is placed its age plus the
    /// time since the save in the past; those past the window's maximum age
    /// are dropped. Restored samples join any the tool already has, in age
    /// order.
    pub fn restore_measurements(&self, file: &MeasurementsFile, catalog: &Catalog) -> Restored {
        let now = self.clock.now();
        let now_unix = unix_ms_now();
        let down = Duration::from_millis(now_unix.saturating_sub(file.saved_at_unix_ms));
        let mut out = Restored { pending: MeasurementsFile::empty(now_unix), ..Restored::default() };
        for (name, stored) in &file.tools {
            let Some(t) = catalog.get(name) else {
                out.pending.tools.insert(name.clone(), stored.clone());
                continue;
            };
            if t.provider.name() != stored.provider || t.provider.fingerprint() != stored.fingerprint.as_deref() {
                out.changed.push(name.clone());
                continue;
            }
            let state = self.state(name);
            let cfg = self.config();
            let mut stats = state.stats.lock().unwrap_or_else(|p| p.into_inner());
            let aged = |s: &StoredSample| AgedSample {
                age: Duration::from_millis(s.age_ms).saturating_add(down),
                duration: Duration::from_micros(s.duration_us),
                outcome: s.outcome.into(),
            };
            // Restored samples join those already there, oldest first.
            let merge = |window: &mut super::metrics::Window, stored: &[StoredSample]| -> usize {
                let mut all: Vec<AgedSample> = window.aged(now);
                all.extend(stored.iter().map(aged));
                all.sort_by_key(|s| std::cmp::Reverse(s.age));
                window.clear();
                all.into_iter().filter(|s| window.record_aged(now, *s)).count()
            };
            let kept = merge(&mut stats.real, &stored.samples);
            for (caller, samples) in &stored.callers {
                let caller = Some(caller.as_str()).filter(|c| *c != OPERATOR);
                let window = stats.callers.get_or_insert_with(caller, || {
                    super::metrics::Window::new(cfg.window, Duration::from_secs(cfg.window_max_age_secs))
                });
                merge(window, samples);
                state
                    .views
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(caller, || Arc::new(super::CachedTier::new()));
            }
            drop(stats);
            state.invalidate();
            out.tools.push((name.clone(), kept.min(self.config().window)));
        }
        // The pending ones' ages are as of now.
        let saved = MeasurementsFile { saved_at_unix_ms: file.saved_at_unix_ms, ..out.pending.clone() };
        out.pending = MeasurementsFile::empty(now_unix);
        out.pending.merge_missing(&saved, Duration::from_secs(self.config().window_max_age_secs));
        out
    }

    /// Changes whenever a real sample is recorded or a tool is forgotten:
    /// whether there is anything new to save.
    pub fn measurement_signature(&self) -> u64 {
        let states = self.tools.read().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<&String> = states.keys().collect();
        names.sort_unstable();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for name in names {
            let stats = states[name].stats.lock().unwrap_or_else(|p| p.into_inner());
            (name, stats.real.len(), stats.real.newest().map(|at| self.nanos(at))).hash(&mut h);
            for (caller, w) in stats.callers.iter() {
                (caller, w.len()).hash(&mut h);
            }
        }
        h.finish()
    }

    /// The ages of a tool's newest and oldest real call in the window.
    pub fn real_ages(&self, tool: &str) -> Option<(Duration, Duration)> {
        let state = self.tools.read().unwrap_or_else(|p| p.into_inner()).get(tool).cloned()?;
        let stats = state.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.real.ages(self.clock.now())
    }

    /// The DM override in force for `agent` and how long it has left.
    pub fn override_state(&self, agent: &str) -> Option<(Tier, Duration)> {
        let now = self.clock.now();
        let o = self.overrides.lock().unwrap_or_else(|p| p.into_inner());
        o.get(agent).filter(|(_, until)| now < *until).map(|&(tier, until)| (tier, until - now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{BudgetConfig, ManualClock};
    use crate::registry::Registry;
    use crate::tool::{CallContext, CallError, Provider, ProviderKind, ToolDef, ToolMeta, ToolOutput};
    use std::sync::Arc;

    #[derive(Debug)]
    struct Fake {
        name: String,
        digest: Option<String>,
        tools: Vec<ToolDef>,
    }

    impl Provider for Fake {
        fn name(&self) -> &str {
            &self.name
        }
        fn kind(&self) -> ProviderKind {
            ProviderKind::Wasm
        }
        fn tools(&self) -> &[ToolDef] {
            &self.tools
        }
        fn call(&self, _: &str, _: &serde_json::Value, _: &CallContext) -> Result<ToolOutput, CallError> {
            Err(CallError::UnknownTool("fake".into()))
        }
        fn fingerprint(&self) -> Option<&str> {
            self.digest.as_deref()
        }
    }

    fn def(name: &str, p50: u32) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            meta: ToolMeta { estimated_duration_ms: Some(p50), ..ToolMeta::default() },
            ..ToolDef::default()
        }
    }

    fn catalog(digest: &str) -> Arc<Catalog> {
        let r = Registry::new();
        r.add(Arc::new(Fake {
            name: "plug".into(),
            digest: Some(digest.into()),
            tools: vec![def("quick", 10), def("other", 10)],
        }))
        .unwrap();
        r.snapshot()
    }

    fn budget(clock: &Arc<ManualClock>) -> Budget {
        Budget::with_clock(BudgetConfig { min_samples: 3, ..BudgetConfig::default() }, Vec::new(), clock.clone())
    }

    #[test]
    fn a_saved_window_restores_with_its_age_and_its_tier_for_its_caller() {
        let clock = Arc::new(ManualClock::default());
        let b = budget(&clock);
        let cat = catalog("aaaa");
        let quick = cat.get("quick").unwrap().def.clone();
        let alice = Some("alice");
        for _ in 0..4 {
            b.record(&quick, alice, Duration::from_millis(700), Outcome::Ok);
            clock.advance(Duration::from_secs(10));
        }
        assert_eq!(b.status_for(&quick, alice).tier, Some(Tier::Standard), "measured: the declared 10 ms was a lie");
        assert_eq!(b.status(&quick).tier, Some(Tier::Fast), "for alice only");
        let mut file = b.export_measurements(&cat);
        assert_eq!(file.tools.len(), 1, "only tools with real calls");
        assert_eq!(
            file.tools["quick"].samples.iter().map(|s| s.age_ms).collect::<Vec<_>>(),
            [40_000, 30_000, 20_000, 10_000]
        );
        assert_eq!(file.tools["quick"].callers.keys().collect::<Vec<_>>(), ["alice"]);
        // Round trip through JSON, then "the host was down 100 s".
        let json = serde_json::to_string(&file).unwrap();
        let back: MeasurementsFile = serde_json::from_str(&json).unwrap();
        assert_eq!(back, file);
        file.saved_at_unix_ms -= 100_000;
        let clock2 = Arc::new(ManualClock::default());
        let b2 = budget(&clock2);
        let r = b2.restore_measurements(&file, &cat);
        assert_eq!(r.tools, [("quick".to_string(), 4)]);
        let s = b2.status_for(&quick, alice);
        assert_eq!((s.tier, s.real.map(|r| r.count)), (Some(Tier::Standard), Some(4)));
        assert_eq!(b2.tool_tier(&quick, Some("bob")), Some(Tier::Fast), "alice's calls are still hers alone");
        let (newest, oldest) = b2.real_ages("quick").unwrap();
        assert!(
            (110..112).contains(&newest.as_secs()) && (140..142).contains(&oldest.as_secs()),
            "{newest:?} {oldest:?}"
        );
        // The window's maximum age (600 s) still applies: 475 s on, only
        // the two newest are left; 30 s later none.
        clock2.advance(Duration::from_secs(475));
        assert_eq!(b2.status_for(&quick, alice).real.map(|r| r.count), Some(2));
        clock2.advance(Duration::from_secs(30));
        let s = b2.status_for(&quick, alice);
        assert_eq!((s.real, s.tier), (None, Some(Tier::Fast)), "aged out: back to the declared tier");
        // A file from before callers had windows: the figures come back,
        // no caller's tier does.
        for w in file.tools.values_mut() {
            w.callers.clear();
        }
        let b3 = budget(&Arc::new(ManualClock::default()));
        b3.restore_measurements(&file, &cat);
        assert_eq!(b3.status(&quick).real.map(|r| r.count), Some(4));
        assert_eq!(b3.tool_tier(&quick, alice), Some(Tier::Fast));
    }

    #[test]
    fn a_new_version_or_another_provider_forgets_and_absent_tools_wait() {
        let clock = Arc::new(ManualClock::default());
        let b = budget(&clock);
        let cat = catalog("aaaa");
        b.record(&cat.get("quick").unwrap().def, None, Duration::from_millis(5), Outcome::Error);
        let mut file = b.export_measurements(&cat);
        file.tools.insert("later".into(), file.tools["quick"].clone());
        let b2 = budget(&clock);
        let r = b2.restore_measurements(&file, &catalog("bbbb"));
        assert!(r.tools.is_empty());
        assert_eq!(r.changed, ["quick"]);
        assert_eq!(r.pending.tools.keys().collect::<Vec<_>>(), ["later"]);
        assert!(b2.real_ages("quick").is_none());
    }

    #[test]
    fn hostile_files_are_refused_whole() {
        let now = unix_ms_now();
        let ok = |f: &MeasurementsFile| f.check(Duration::from_secs(30), now);
        let sample = StoredSample { age_ms: 1, duration_us: 1000, outcome: StoredOutcome::Ok };
        let window =
            StoredWindow { provider: "p".into(), fingerprint: None, samples: vec![sample], callers: BTreeMap::new() };
        let mut f = MeasurementsFile::empty(now);
        f.tools.insert("t".into(), window.clone());
        assert_eq!(ok(&f), Ok(()));
        let bad = |change: &dyn Fn(&mut MeasurementsFile), why: &str| {
            let mut g = f.clone();
            change(&mut g);
            let e = ok(&g).unwrap_err();
            assert!(e.contains(why), "{e}");
        };
        bad(&|g| g.version = 2, "format version");
        bad(&|g| g.saved_at_unix_ms = now + 3_600_000, "future");
        bad(&|g| g.tools.get_mut("t").unwrap().samples[0].duration_us = 3_600_000_000, "longer than any deadline");
        bad(&|g| g.tools.get_mut("t").unwrap().samples = vec![sample; MAX_SAMPLES + 1], "samples");
        bad(&|g| drop(g.tools.insert("../etc".into(), window.clone())), "not a tool name");
        bad(&|g| g.tools.get_mut("t").unwrap().provider.clear(), "provider");
        let caller = |g: &mut MeasurementsFile, name: String, samples: Vec<StoredSample>| {
            g.tools.get_mut("t").unwrap().callers.insert(name, samples);
        };
        bad(&|g| caller(g, "bob".into(), vec![sample; MAX_SAMPLES + 1]), "samples");
        bad(&|g| caller(g, "b".repeat(300), vec![sample]), "a caller's name of 300 bytes");
        bad(
            &|g| caller(g, "bob".into(), vec![StoredSample { duration_us: 3_600_000_000, ..sample }]),
            "longer than any",
        );
        bad(
            &|g| (0..=MAX_CALLERS).for_each(|i| caller(g, format!("a{i}"), vec![sample])),
            &format!("{} callers", MAX_CALLERS + 1),
        );
        // Shapes serde refuses: unknown fields and outcomes.
        assert!(
            serde_json::from_str::<MeasurementsFile>(r#"{"version":1,"saved_at_unix_ms":0,"tools":{},"x":1}"#).is_err()
        );
        let odd = r#"{"version":1,"saved_at_unix_ms":0,"tools":{"t":{"provider":"p","samples":[{"age_ms":1,"duration_us":1,"outcome":"great"}]}}}"#;
        assert!(serde_json::from_str::<MeasurementsFile>(odd).is_err());
    }

    #[test]
    fn the_store_refuses_corrupt_oversized_and_foreign_files() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let store = MeasurementStore::new(dir.path());
        let ceiling = Duration::from_secs(30);
        assert!(store.load(ceiling).unwrap().is_none(), "no file: nothing to restore");
        let f = MeasurementsFile::empty(unix_ms_now());
        store.save(&f).unwrap();
        let mode = std::fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(store.load(ceiling).unwrap(), Some(f));
        std::fs::write(store.path(), b"{\"version\": 1, \"saved_at").unwrap();
        assert!(matches!(store.load(ceiling), Err(PersistError::Refused { .. })));
        std::fs::write(store.path(), vec![b' '; MAX_FILE_BYTES + 1]).unwrap();
        let e = store.load(ceiling).unwrap_err().to_string();
        assert!(e.contains("refused"), "{e}");
        store.save(&MeasurementsFile::empty(unix_ms_now())).unwrap();
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = store.load(ceiling).unwrap_err().to_string();
        assert!(e.contains("mode 0600"), "{e}");
    }

    #[test]
    fn pending_windows_age_on_and_drop_out() {
        let mut newer = MeasurementsFile::empty(1_000_000);
        let mut older = MeasurementsFile::empty(1_000_000 - 50_000);
        let s = |age_ms| StoredSample { age_ms, duration_us: 1, outcome: StoredOutcome::Ok };
        older.tools.insert(
            "t".into(),
            StoredWindow {
                provider: "p".into(),
                fingerprint: None,
                samples: vec![s(560_000), s(1000)],
                callers: BTreeMap::from([("bob".to_string(), vec![s(560_000)])]),
            },
        );
        newer.merge_missing(&older, Duration::from_secs(600));
        assert_eq!(newer.tools["t"].samples, [s(51_000)], "the 610 s old one is gone");
        assert!(newer.tools["t"].callers.is_empty(), "bob's only sample is gone, and so is bob");
    }
}
