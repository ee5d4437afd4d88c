//! The audit trail: one JSON line per call, refused and failed calls
//! included, appended to a file and mirrored to `tracing`.
//!
//! A record says who called what, with which plugin version, how it ended
//! and what it cost. Arguments are recorded as a sha256 hash unless the
//! operator turns raw arguments on (they may hold player data).

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `audit:` in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// The JSON-lines file [default: `<state dir>/audit.jsonl`].
    pub path: Option<PathBuf>,
    /// Record raw arguments, not just their hash.
    pub include_arguments: bool,
    /// Turn the file off (records still go to the log).
    pub disabled: bool,
}

/// One call, as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Record<'a> {
    /// Unix time in milliseconds.
    pub time_ms: u64,
    /// The agent, or `None` for the operator.
    pub agent: Option<&'a str>,
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
    /// The error message, on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time in milliseconds.
    pub duration_ms: f64,
    /// Fuel consumed (wasm).
    pub fuel_used: u64,
    /// Peak linear memory in bytes (wasm).
    pub peak_memory_bytes: usize,
    /// The capabilities the plugin held during the call (its grants).
    pub capabilities_held: Vec<&'static str>,
    /// The capabilities the call used: asked for its directories, read its
    /// environment, queried the memory store, opened a granted connection.
    pub capabilities_used: Vec<&'static str>,
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

    /// Writes a record. Never fails the call: a write error is logged.
    pub fn write(&self, r: &Record<'_>) {
        tracing::info!(
            target: "toolhost::audit",
            agent = r.agent.unwrap_or("-"),
            tool = r.tool,
            outcome = r.outcome,
            duration_ms = r.duration_ms,
            "call"
        );
        let Some(file) = &self.file else { return };
        let mut line = match serde_json::to_vec(r) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode audit record");
                return;
            }
        };
        line.push(b'\n');
        // One write of a whole line to an O_APPEND file: records from
        // concurrent calls (and processes) never interleave.
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = f.write_all(&line) {
            tracing::error!(error = %e, path = ?self.path, "cannot write audit record");
        }
    }
}

/// sha256 of the arguments' JSON text, hex.
pub fn hash_arguments(v: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(v.to_string().as_bytes()))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds as a float, for records.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
