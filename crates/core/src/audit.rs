//! The audit trail: one JSON line per call (refused and failed calls
//! included) and per plugin load, replacement, removal and refused load,
//! appended to a file and mirrored to `tracing`.
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
        }
    }
}

/// One plugin lifecycle event, as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct PluginRecord<'a> {
    /// When, RFC 3339 in UTC with milliseconds.
    pub time: String,
    /// `plugin_load`, `plugin_replace`, `plugin_remove`, `plugin_refused` or `plugin_regrant`.
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
    /// Why a load was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The audit sink.
#[derive(Debug)]
pub struct AuditLog {
    file: Option<Mutex<std::fs::File>>,
    path: Option<PathBuf>,
    include_arguments: bool,
}

impl AuditLog {
    /// Records to the log only.
    pub fn disabled() -> AuditLog {
        AuditLog { file: None, path: None, include_arguments: false }
    }

    /// Appends to `path` (created 0600, its missing directories 0700: the
    /// trail names agents and tools, and is nobody else's to read).
    pub fn open(path: &Path, include_arguments: bool) -> std::io::Result<AuditLog> {
        if let Some(dir) = path.parent() {
            crate::runtime::private::create_dirs(dir)?;
        }
        let file = crate::runtime::private::open_private_append(path)?;
        Ok(AuditLog { file: Some(Mutex::new(file)), path: Some(path.to_path_buf()), include_arguments })
    }

    /// The file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Whether raw arguments are recorded.
    pub fn include_arguments(&self) -> bool {
        self.include_arguments
    }

    /// Writes a call record. Never fails the call: a write error is logged.
    pub fn write(&self, r: &Record<'_>) {
        tracing::info!(
            target: "toolhost::audit",
            agent = %crate::tool::log_safe(r.agent.unwrap_or("-")),
            tool = %crate::tool::log_safe(r.tool),
            outcome = r.outcome,
            duration_ms = r.duration_ms,
            "call"
        );
        self.append(r);
    }

    /// Writes a plugin lifecycle record.
    pub fn write_plugin(&self, r: &PluginRecord<'_>) {
        tracing::info!(
            target: "toolhost::audit",
            plugin = %crate::tool::log_safe(r.plugin),
            sha256 = r.sha256.unwrap_or("-"),
            error = %crate::tool::log_safe(r.error.as_deref().unwrap_or("-")),
            "{}",
            r.event.as_str()
        );
        self.append(r);
    }

    fn append(&self, r: &impl Serialize) {
        let Some(file) = &self.file else { return };
        let line = match serde_json::to_vec(r) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode audit record");
                return;
            }
        };
        // JSON allows U+2028, U+2029 and U+0085 raw inside strings, but
        // line-splitting readers (Python's splitlines, some log shippers)
        // break records on them: write them escaped.
        let mut line = escape_line_separators(line);
        line.push(b'\n');
        // One write of a whole line to an O_APPEND file: records from
        // concurrent calls (and processes) never interleave. The lock is
        // held for that one write(2), which the kernel serialises per file
        // anyway; batching concurrent records into one write (group commit)
        // was measured slower on 2 cores (BENCHMARKS.md, contention).
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = f.write_all(&line) {
            tracing::error!(error = %e, path = ?self.path, "cannot write audit record");
        }
    }
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

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        let t = now_rfc3339();
        assert!(chrono::DateTime::parse_from_rfc3339(&t).is_ok(), "{t}");
        assert!(t.ends_with('Z') && t.len() == "2026-11-23T21:04:05.123Z".len(), "{t}");
    }
}
