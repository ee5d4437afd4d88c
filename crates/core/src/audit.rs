//! The audit trail: one JSON line per call (refused and failed calls
//! included) and per plugin load, replacement, removal and refused load,
//! appended to a file and mirrored to `tracing`.
//!
//! The trail is bounded: a name that breaks the tool-name rule is cut to
//! a prefix and its hash before it is logged or recorded; calls refused
//! before they ran (rate limit, capacity, unknown tool) are recorded as
//! one `"event": "refused"` record per agent, reason and second, with
//! their count; the file is rotated past `audit.max_mb`, keeping
//! `audit.keep` old files (`audit.jsonl.1` the newest).
//!
//! A call record says who called what (agent, session, token id), with
//! which plugin version, how it ended and what it cost. Arguments, and any
//! error text a tool wrote, are recorded as a sha256 hash (and a length)
//! unless the operator turns raw arguments on: they may hold player data or
//! what a plugin read from a granted secret.

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

mod actor;
mod gate;
use actor::Acted;
pub use actor::{ActionRecord, Actor, acting, current_actor};
pub use gate::StartRecord;

/// `audit:` in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// The JSON-lines file (default: `<state dir>/audit.jsonl`).
    pub path: Option<PathBuf>,
    /// Record raw arguments, not just their hash.
    pub include_arguments: bool,
    /// Turn the file off (records still go to the log).
    pub disabled: bool,
    /// Rotate the file when it would grow past this many MiB (default 100).
    pub max_mb: Option<u64>,
    /// Rotated files kept (default 5): `audit.jsonl.1` (newest) to `.N`.
    pub keep: Option<u32>,
    /// The audit gate for writes: a call to a tool that may write runs
    /// only once its start record is on disk (written and flushed); when
    /// it cannot be, the call is refused with `audit_unavailable` and
    /// nothing runs. A tool may write unless it declares `readOnlyHint:
    /// true` or is a wasm plugin holding no capability to write through
    /// (no files, network, HTTP or memory-write grant).
    pub fail_closed: bool,
    /// Tools gated as `fail_closed` gates writes, read-only or not (and
    /// whether or not `fail_closed` is on).
    pub fail_closed_tools: Vec<String>,
}

impl AuditConfig {
    /// Whether a call of `tool` (`read_only`: it declares `readOnlyHint:
    /// true`) waits for its start record to be on disk.
    pub fn gates(&self, tool: &str, read_only: bool) -> bool {
        (self.fail_closed && !read_only) || self.fail_closed_tools.iter().any(|t| t == tool)
    }
}

/// Default `audit.max_mb`.
pub const DEFAULT_MAX_MB: u64 = 100;
/// Default `audit.keep`.
pub const DEFAULT_KEEP: u32 = 5;
/// Call outcomes of calls refused before they ran: recorded together.
pub const REFUSALS: [&str; 3] = ["refused", "capacity_exceeded", "unknown_tool"];

/// Refused calls of one agent for one reason within one second
/// (`"event": "refused"`).
#[derive(Debug, Clone, Serialize)]
pub struct RefusedRecord {
    /// Always `refused`.
    pub event: &'static str,
    /// The agent, or `None` for the operator.
    pub agent: Option<String>,
    /// `refused` (a rate limit), `capacity_exceeded` or `unknown_tool`.
    pub reason: &'static str,
    /// How many calls.
    pub count: u64,
    /// When the first ended, RFC 3339.
    pub first: String,
    /// When the last ended, RFC 3339.
    pub last: String,
}

/// `name` as the trail writes it: as it is when it follows the tool-name
/// rule, else its first 32 characters (made printable) and the first 16
/// hex digits of its sha256.
pub fn loggable_name(name: &str) -> std::borrow::Cow<'_, str> {
    if crate::tool::valid_tool_name(name) {
        return std::borrow::Cow::Borrowed(name);
    }
    let prefix: String = name.chars().take(32).map(|c| if c.is_ascii_graphic() { c } else { '?' }).collect();
    let hash = hex::encode(&Sha256::digest(name.as_bytes())[..8]);
    std::borrow::Cow::Owned(format!("{prefix}…[{} bytes, sha256 {hash}]", name.len()))
}

/// One call, as recorded (`"event": "call"`).
#[derive(Debug, Clone, Serialize)]
pub struct Record<'a> {
    /// When the call ended, RFC 3339 in UTC with milliseconds.
    pub time: String,
    /// Always `call`.
    pub event: &'static str,
    /// The agent, or `None` for the operator.
    pub agent: Option<&'a str>,
    /// The caller's session (an MCP session id), when it came through one.
    pub session: Option<&'a str>,
    /// The id of the token the caller presented (never the secret).
    pub token: Option<&'a str>,
    /// The tool name asked for.
    pub tool: &'a str,
    /// The provider that ran it, when it was resolved.
    pub provider: Option<&'a str>,
    /// The provider's version (a wasm plugin's sha256).
    pub provider_digest: Option<String>,
    /// sha256 of the canonical JSON arguments.
    pub arguments_sha256: String,
    /// The raw arguments, when the operator allows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<&'a serde_json::Value>,
    /// `ok`, or the error kind (`unknown_tool`, `refused`, `invalid_input`, `timeout` ...).
    pub outcome: &'a str,
    /// The error message, on failure. Text the tool wrote is replaced by
    /// `[withheld: N bytes]` unless raw arguments are on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// sha256 of the withheld error text, hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_text_sha256: Option<String>,
    /// Length of the withheld error text in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_text_bytes: Option<usize>,
    /// Wall time in milliseconds.
    pub duration_ms: f64,
    /// Fuel consumed (wasm), whatever the outcome; 0 for a call that never
    /// ran. For a call stopped at its deadline it is a lower bound: wasmtime
    /// writes back the fuel a running loop burns only at calls and returns.
    pub fuel_used: u64,
    /// Peak linear memory in bytes (wasm), whatever the outcome.
    pub peak_memory_bytes: usize,
    /// The capabilities the plugin held during the call (its grants).
    pub capabilities_held: Vec<&'static str>,
    /// The capabilities the call used: asked for its directories, read its
    /// environment, queried the memory store, opened a granted connection.
    pub capabilities_used: Vec<&'static str>,
    /// Answered from the result cache: the tool did not run (`fuel_used`
    /// and the rest are those of the call that filled the cache).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// The origins the call sent HTTP requests to (`wasi:http`), each with
    /// its request count and body bytes out and in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<crate::tool::HostContact>,
    /// Who called: `agent NAME` or `operator` (the token id is `token`).
    pub actor: String,
    /// The trace the call belongs to (this host's span, or the caller's
    /// when spans are off), hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The call's span, hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// sha256 of the called tool's definition as clients saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_sha256: Option<&'a str>,
    /// The model the client said the call came from (`_meta["toolhost/model"]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'a str>,
    /// The prompt hash the client gave (`_meta["toolhost/prompt_hash"]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_hash: Option<&'a str>,
}

/// What happened to a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PluginEventKind {
    /// Loaded where there was none of that name.
    PluginLoad,
    /// A new version replaced a running one.
    PluginReplace,
    /// Removed.
    PluginRemove,
    /// A load or replacement that was refused; whatever ran before still runs.
    PluginRefused,
    /// The same code under new grants (a config reload).
    PluginRegrant,
    /// A canary started: a share of calls goes to a new version.
    PluginCanary,
    /// A canary's new version took every call (it replaced the old one).
    PluginPromote,
    /// A canary ended with the old version taking every call again.
    PluginRollback,
}

impl PluginEventKind {
    /// As written in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginEventKind::PluginLoad => "plugin_load",
            PluginEventKind::PluginReplace => "plugin_replace",
            PluginEventKind::PluginRemove => "plugin_remove",
            PluginEventKind::PluginRefused => "plugin_refused",
            PluginEventKind::PluginRegrant => "plugin_regrant",
            PluginEventKind::PluginCanary => "plugin_canary",
            PluginEventKind::PluginPromote => "plugin_promote",
            PluginEventKind::PluginRollback => "plugin_rollback",
        }
    }
}

/// One plugin lifecycle event, as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct PluginRecord<'a> {
    /// When, RFC 3339 in UTC with milliseconds.
    pub time: String,
    /// `plugin_load`, `plugin_replace`, `plugin_remove`, `plugin_refused`,
    /// `plugin_regrant`, `plugin_canary`, `plugin_promote` or `plugin_rollback`.
    pub event: PluginEventKind,
    /// The plugin's name (for a refused file, the name it would have had).
    pub plugin: &'a str,
    /// The file it came from, when it came from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<&'a std::path::Path>,
    /// The component's sha256 (the new one on a replacement).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<&'a str>,
    /// The replaced or removed version's sha256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_sha256: Option<&'a str>,
    /// Where it comes from, in words (built in, signed by whom, unsigned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The capabilities its grants give.
    pub capabilities_held: Vec<&'static str>,
    /// Why: a refused load's error, a removal's reason, a canary's terms
    /// or decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The audit sink.
#[derive(Debug)]
pub struct AuditLog {
    file: Option<Mutex<Open>>,
    path: Option<PathBuf>,
    include_arguments: bool,
    max_bytes: u64,
    keep: u32,
    /// Refusals of the current second, per agent and reason.
    refused: Mutex<Refusals>,
    /// `{"host":"<id>",`: what each record starts with in a fleet.
    host: std::sync::OnceLock<Vec<u8>>,
    /// The last gated start record could not be written.
    gate_failing: std::sync::atomic::AtomicBool,
    /// `audit.fail_closed` and `audit.fail_closed_tools`.
    gate: AuditConfig,
}

#[derive(Debug)]
struct Open {
    file: std::fs::File,
    /// Its size, as this process knows it.
    size: u64,
}

#[derive(Debug, Default)]
struct Refusals {
    /// The Unix second they fell in.
    second: u64,
    pending: std::collections::BTreeMap<(Option<String>, &'static str), (u64, String, String)>,
}

impl AuditLog {
    /// Records to the log only.
    pub fn disabled() -> AuditLog {
        AuditLog {
            file: None,
            path: None,
            include_arguments: false,
            max_bytes: DEFAULT_MAX_MB << 20,
            keep: DEFAULT_KEEP,
            refused: Mutex::default(),
            host: std::sync::OnceLock::new(),
            gate_failing: std::sync::atomic::AtomicBool::new(false),
            gate: AuditConfig::default(),
        }
    }

    /// Appends to `path` (created 0600, its missing directories 0700: the
    /// trail names agents and tools, and is nobody else's to read),
    /// rotated past [`DEFAULT_MAX_MB`] (see [`AuditLog::with_rotation`]).
    pub fn open(path: &Path, include_arguments: bool) -> std::io::Result<AuditLog> {
        if let Some(dir) = path.parent() {
            crate::runtime::private::create_dirs(dir)?;
        }
        let file = crate::runtime::private::open_private_append(path)?;
        let size = file.metadata()?.len();
        Ok(AuditLog {
            file: Some(Mutex::new(Open { file, size })),
            path: Some(path.to_path_buf()),
            include_arguments,
            max_bytes: DEFAULT_MAX_MB << 20,
            keep: DEFAULT_KEEP,
            refused: Mutex::default(),
            host: std::sync::OnceLock::new(),
            gate_failing: std::sync::atomic::AtomicBool::new(false),
            gate: AuditConfig::default(),
        })
    }

    /// Names this host in every record from now on, as `"host"` (a fleet's
    /// `cluster.host_id`). The first id given stays.
    pub fn set_host_id(&self, id: &str) {
        let mut prefix = b"{\"host\":".to_vec();
        prefix.extend(serde_json::to_vec(id).unwrap_or_else(|_| b"\"\"".to_vec()));
        prefix.push(b',');
        let _ = self.host.set(prefix);
    }

    /// Rotates the file when a record would take it past `max_mb` MiB,
    /// keeping `keep` rotated files (0: none, the file starts afresh).
    #[must_use]
    pub fn with_rotation(mut self, max_mb: u64, keep: u32) -> AuditLog {
        self.max_bytes = max_mb.max(1) << 20;
        self.keep = keep;
        self
    }

    /// The file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Whether raw arguments are recorded.
    pub fn include_arguments(&self) -> bool {
        self.include_arguments
    }

    /// Writes a call record. Never fails the call: a write error is
    /// logged. A call refused before it ran is counted into its agent's
    /// `refused` record of the second instead.
    pub fn write(&self, r: &Record<'_>) {
        self.flush_refusals(false);
        if r.event == "call"
            && let Some(reason) = REFUSALS.iter().find(|k| **k == r.outcome)
        {
            let mut q = self.refused.lock().unwrap_or_else(|p| p.into_inner());
            let entry = q
                .pending
                .entry((r.agent.map(str::to_string), reason))
                .or_insert_with(|| (0, r.time.clone(), String::new()));
            entry.0 += 1;
            entry.2.clone_from(&r.time);
            if q.second == 0 {
                q.second = unix_second();
            }
            return;
        }
        let tool = loggable_name(r.tool);
        tracing::info!(
            target: "toolhost::audit",
            agent = ?crate::tool::log_safe(r.agent.unwrap_or("-")),
            tool = ?crate::tool::log_safe(&tool),
            outcome = r.outcome,
            duration_ms = r.duration_ms,
            "call"
        );
        // The record is copied only in the rare case its name was cut.
        match &tool {
            std::borrow::Cow::Borrowed(_) => self.append(r),
            std::borrow::Cow::Owned(cut) => self.append(&Record { tool: cut, ..r.clone() }),
        }
    }

    /// Writes the pending `refused` records: those of past seconds, or
    /// (`all`) every one (at shutdown, or before the trail is read).
    pub fn flush_refusals(&self, all: bool) {
        let pending = {
            let mut q = self.refused.lock().unwrap_or_else(|p| p.into_inner());
            if q.pending.is_empty() || (!all && q.second == unix_second()) {
                return;
            }
            q.second = 0;
            std::mem::take(&mut q.pending)
        };
        for ((agent, reason), (count, first, last)) in pending {
            tracing::info!(
                target: "toolhost::audit",
                agent = ?crate::tool::log_safe(agent.as_deref().unwrap_or("-")),
                reason,
                count,
                "refused"
            );
            self.append(&RefusedRecord { event: "refused", agent, reason, count, first, last });
        }
    }

    /// Writes a plugin lifecycle record.
    pub fn write_plugin(&self, r: &PluginRecord<'_>) {
        self.flush_refusals(false);
        tracing::info!(
            target: "toolhost::audit",
            plugin = ?crate::tool::log_safe(r.plugin),
            sha256 = r.sha256.unwrap_or("-"),
            error = ?crate::tool::log_safe(r.error.as_deref().unwrap_or("-")),
            "{}",
            r.event.as_str()
        );
        let actor = current_actor();
        crate::trace::event(r.event.as_str(), || {
            vec![
                crate::trace::attr("toolhost.plugin", r.plugin.to_string()),
                crate::trace::attr("toolhost.actor", actor.who.clone()),
                crate::trace::attr("toolhost.via", actor.via),
            ]
        });
        self.append(&Acted { record: r, actor: &actor });
    }

    /// Writes an operator action's record, naming this thread's actor
    /// ([`acting`]).
    pub fn write_action(&self, r: &ActionRecord<'_>) {
        self.flush_refusals(false);
        let actor = current_actor();
        tracing::info!(target: "toolhost::audit", actor = %actor.who, via = actor.via, "{}", r.event);
        self.append(&Acted { record: r, actor: &actor });
    }

    /// `r` as one line of the file.
    fn line(&self, r: &impl Serialize) -> Option<Vec<u8>> {
        let line = match serde_json::to_vec(r) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode audit record");
                return None;
            }
        };
        let line = match self.host.get() {
            Some(prefix) if line.first() == Some(&b'{') => {
                let mut with = Vec::with_capacity(prefix.len() + line.len());
                with.extend_from_slice(prefix);
                with.extend_from_slice(&line[1..]);
                with
            }
            _ => line,
        };
        let mut line = escape_line_separators(line);
        line.push(b'\n');
        Some(line)
    }

    fn append(&self, r: &impl Serialize) {
        if self.file.is_none() {
            return;
        }
        // JSON allows U+2028, U+2029 and U+0085 raw inside strings, but
        // line-splitting readers (Python's splitlines, some log shippers)
        // break records on them: [`AuditLog::line`] writes them escaped.
        let Some(line) = self.line(r) else { return };
        let Some(file) = &self.file else { return };
        // One write of a whole line to an O_APPEND file: records from
        // concurrent calls (and processes) never interleave. The lock is
        // held for that one write(2), which the kernel serialises per file
        // anyway; batching concurrent records into one write (group commit)
        // was measured slower on 2 cores (BENCHMARKS.md, contention).
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        if f.size > 0 && f.size + line.len() as u64 > self.max_bytes {
            self.rotate(&mut f);
        }
        match f.file.write_all(&line) {
            Ok(()) => f.size += line.len() as u64,
            Err(e) => {
                // A record cut by a full disk is taken back whole.
                let _ = f.file.set_len(f.size);
                tracing::error!(error = %e, path = ?self.path, "cannot write audit record");
            }
        }
    }

    /// Moves the file to `.1` (`.1` to `.2` and so on, dropping the oldest
    /// past `keep`) and starts a new one. On failure the file grows on.
    fn rotate(&self, f: &mut Open) {
        let Some(path) = &self.path else { return };
        let numbered = |n: u32| {
            let mut p = path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        let moved = if self.keep == 0 {
            std::fs::remove_file(path)
        } else {
            let _ = std::fs::remove_file(numbered(self.keep));
            for n in (1..self.keep).rev() {
                let _ = std::fs::rename(numbered(n), numbered(n + 1));
            }
            std::fs::rename(path, numbered(1))
        };
        let reopened = moved.and_then(|()| crate::runtime::private::open_private_append(path));
        match reopened {
            Ok(file) => *f = Open { file, size: 0 },
            Err(e) => tracing::error!(error = %e, path = %path.display(), "cannot rotate the audit file"),
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.flush_refusals(true);
    }
}

fn unix_second() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `json` with U+2028, U+2029 and U+0085 written as `\\u` escapes (they
/// only occur inside strings, where the escape means the same).
fn escape_line_separators(json: Vec<u8>) -> Vec<u8> {
    let Ok(text) = String::from_utf8(json) else { return Vec::new() };
    if !text.contains(['\u{2028}', '\u{2029}', '\u{85}']) {
        return text.into_bytes();
    }
    text.replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029").replace('\u{85}', "\\u0085").into_bytes()
}

/// sha256 of the arguments' JSON text, hex.
pub fn hash_arguments(v: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(v.to_string().as_bytes()))
}

/// Now, RFC 3339 in UTC with milliseconds (`2026-11-23T21:04:05.123Z`).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The error as the audit trail keeps it: the message, with the text the
/// tool wrote withheld (returned apart as its sha256 and length) unless
/// `raw` is on.
pub fn redact_error(e: &crate::tool::CallError, raw: bool) -> (String, Option<String>, Option<usize>) {
    let message = e.to_string();
    match e.provider_text() {
        Some(text) if !raw && !text.is_empty() => (
            // Every such message ends with the tool's text.
            format!("{}[withheld: {} bytes]", message.strip_suffix(text).unwrap_or("error text "), text.len()),
            Some(hex::encode(Sha256::digest(text.as_bytes()))),
            Some(text.len()),
        ),
        _ => (message, None, None),
    }
}

/// Milliseconds as a float, for records.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::CallError;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn tool_written_error_text_is_withheld_unless_raw_is_on() {
        let e = CallError::Failed { tool: "leak".into(), message: "could not use hunter2".into() };
        let (msg, sha, len) = redact_error(&e, false);
        assert_eq!(msg, "leak failed: [withheld: 21 bytes]");
        assert_eq!(sha.unwrap(), hex::encode(Sha256::digest(b"could not use hunter2")));
        assert_eq!(len, Some(21));
        assert_eq!(redact_error(&e, true), ("leak failed: could not use hunter2".into(), None, None));
        let host_words = CallError::Timeout { tool: "leak".into(), limit_ms: 500 };
        assert_eq!(redact_error(&host_words, false), ("leak timed out after 500 ms".into(), None, None));
    }

    #[test]
    fn records_never_contain_unicode_line_separators() {
        let line = serde_json::to_vec(&serde_json::json!({"tool": "a\u{2028}b\u{85}c\u{2029}"})).unwrap();
        let out = String::from_utf8(escape_line_separators(line)).unwrap();
        assert_eq!(out.lines().count(), 1);
        assert!(!out.contains(['\u{2028}', '\u{2029}', '\u{85}']), "{out}");
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["tool"], "a\u{2028}b\u{85}c\u{2029}");
    }

    #[test]
    fn concurrent_records_are_all_written_whole_before_their_calls_return() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, false).unwrap();
        let (threads, each) = (8, 500);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (log, path) = (&log, &path);
                s.spawn(move || {
                    for i in 0..each {
                        let tool = format!("t{t}-{i}");
                        log.append(&serde_json::json!({"tool": tool}));
                        // Written (in the file) before `append` returned.
                        if i % 100 == 0 {
                            let text = std::fs::read_to_string(path).unwrap();
                            assert!(text.contains(&format!("\"t{t}-{i}\"")), "record {tool} not in the file yet");
                        }
                    }
                });
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("whole JSON lines only");
            assert!(seen.insert(v["tool"].as_str().unwrap().to_string()), "written twice: {line}");
        }
        assert_eq!(seen.len(), threads * each);
    }

    fn record<'a>(agent: Option<&'a str>, tool: &'a str, outcome: &'a str) -> Record<'a> {
        Record {
            time: now_rfc3339(),
            event: "call",
            agent,
            session: None,
            token: None,
            tool,
            provider: None,
            provider_digest: None,
            arguments_sha256: String::new(),
            arguments: None,
            outcome,
            error: None,
            error_text_sha256: None,
            error_text_bytes: None,
            duration_ms: 0.0,
            fuel_used: 0,
            peak_memory_bytes: 0,
            capabilities_held: Vec::new(),
            capabilities_used: Vec::new(),
            cached: false,
            http: Vec::new(),
            actor: "operator".into(),
            trace_id: None,
            span_id: None,
            schema_sha256: None,
            model: None,
            prompt_hash: None,
        }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    #[test]
    fn a_name_breaking_the_rule_is_cut_to_a_prefix_and_its_hash() {
        assert_eq!(loggable_name("roll"), "roll");
        let huge = format!("x{}\nagent=forged outcome=ok", "y".repeat(900_000));
        let cut = loggable_name(&huge);
        assert!(cut.len() < 120 && cut.starts_with("xyyy") && !cut.contains('\n'), "{cut}");
        assert!(cut.contains(&format!(
            "{} bytes, sha256 {}",
            huge.len(),
            &hex::encode(Sha256::digest(huge.as_bytes()))[..16]
        )));
        // A call of a valid name that is not a refusal is written with it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, false).unwrap();
        log.write(&record(Some("alice"), &huge, "invalid_input"));
        let written = std::fs::metadata(&path).unwrap().len();
        assert!(written < 2000, "{written} bytes for one record");
        assert_eq!(lines(&path)[0]["tool"], cut.as_ref());
    }

    #[test]
    fn refusals_are_one_record_per_agent_reason_and_second() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, false).unwrap();
        let name = "n".repeat(900_000);
        for _ in 0..40 {
            log.write(&record(Some("mallory"), &name, "unknown_tool"));
        }
        log.write(&record(Some("mallory"), "roll", "capacity_exceeded"));
        log.write(&record(None, "roll", "refused"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "counted, not written yet");
        log.flush_refusals(true);
        let mut got: Vec<(String, String, u64)> = lines(&path)
            .iter()
            .map(|r| {
                assert_eq!(r["event"], "refused");
                assert!(r["first"].as_str().unwrap() <= r["last"].as_str().unwrap());
                (
                    r["agent"].as_str().unwrap_or("-").to_string(),
                    r["reason"].as_str().unwrap().to_string(),
                    r["count"].as_u64().unwrap(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("-".into(), "refused".into(), 1),
                ("mallory".into(), "capacity_exceeded".into(), 1),
                ("mallory".into(), "unknown_tool".into(), 40)
            ]
        );
        assert!(std::fs::metadata(&path).unwrap().len() < 1000);
    }

    #[test]
    fn the_file_rotates_past_max_mb_keeping_keep_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, false).unwrap().with_rotation(1, 2);
        let pad = "p".repeat(1000);
        for i in 0..4000 {
            log.append(&serde_json::json!({"i": i, "pad": pad}));
        }
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let (one, two) = (dir.path().join("audit.jsonl.1"), dir.path().join("audit.jsonl.2"));
        assert!(size(&path) <= 1 << 20 && size(&one) <= 1 << 20 && size(&two) <= 1 << 20);
        assert!(!dir.path().join("audit.jsonl.3").exists(), "only `keep` rotated files");
        // Newest last: the live file ends with the last record, `.1` holds
        // the ones just before it.
        assert_eq!(lines(&path).last().unwrap()["i"], 3999);
        assert_eq!(lines(&one).last().unwrap()["i"].as_u64().unwrap() + 1, lines(&path)[0]["i"].as_u64().unwrap());
        for p in [&path, &one, &two] {
            assert_eq!(std::fs::metadata(p).unwrap().permissions().mode() & 0o777, 0o600, "{}", p.display());
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        let t = now_rfc3339();
        assert!(chrono::DateTime::parse_from_rfc3339(&t).is_ok(), "{t}");
        assert!(t.ends_with('Z') && t.len() == "2026-11-23T21:04:05.123Z".len(), "{t}");
    }
}
