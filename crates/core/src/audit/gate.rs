//! The audit gate for writes (`audit.fail_closed`): a call's start record
//! on disk before the tool runs, or the call refused.

use super::{AuditConfig, AuditLog, Open};
use serde::Serialize;
use std::io::Write;

/// A gated call's start (`"event": "call_start"`): on disk before the tool runs.
#[derive(Debug, Clone, Serialize)]
pub struct StartRecord<'a> {
    /// When the call started.
    pub time: String,
    /// Always `call_start`.
    pub event: &'static str,
    /// The agent, or `None` for the operator.
    pub agent: Option<&'a str>,
    /// Who called (as a call record says it).
    pub actor: &'a str,
    /// The caller's session.
    pub session: Option<&'a str>,
    /// The token's id.
    pub token: Option<&'a str>,
    /// The tool.
    pub tool: &'a str,
    /// The provider that will run it.
    pub provider: &'a str,
    /// sha256 of the arguments.
    pub arguments_sha256: String,
    /// The trace, hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<&'a str>,
    /// The call's span, hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<&'a str>,
}

impl AuditLog {
    /// Gates calls as `audit.fail_closed` and `audit.fail_closed_tools`
    /// in `config` say.
    #[must_use]
    pub fn with_gate(mut self, config: &AuditConfig) -> AuditLog {
        self.gate.fail_closed = config.fail_closed;
        self.gate.fail_closed_tools.clone_from(&config.fail_closed_tools);
        self
    }

    /// Whether a call of `tool` waits for its start record to be on disk
    /// ([`AuditConfig::gates`]).
    pub fn gates(&self, tool: &str, read_only: bool) -> bool {
        self.gate.gates(tool, read_only)
    }

    /// Whether the gate is on for any tool.
    pub fn gate_on(&self) -> bool {
        self.gate.fail_closed || !self.gate.fail_closed_tools.is_empty()
    }

    /// Writes a gated call's start record and flushes it to disk; an error
    /// when it cannot be (the disk full, the file unwritable or gone and
    /// not made again): the call must not run.
    pub fn write_start(&self, r: &StartRecord<'_>) -> std::io::Result<()> {
        let written = self.record_start(r);
        match &written {
            Ok(()) => self.gate_failing.store(false, std::sync::atomic::Ordering::Relaxed),
            Err(e) => {
                if !self.gate_failing.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::error!(error = %e, path = ?self.path, "the audit gate is refusing writes: their records cannot be written");
                }
            }
        }
        written
    }

    fn record_start(&self, r: &StartRecord<'_>) -> std::io::Result<()> {
        let (Some(file), Some(path)) = (&self.file, &self.path) else {
            return Err(std::io::Error::other("the audit trail is off (audit.disabled)"));
        };
        let line = self.line(r).ok_or_else(|| std::io::Error::other("the record could not be encoded"))?;
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        // A file removed (or moved) under the host is made again: records
        // written to a name nobody reads are not written.
        use std::os::unix::fs::MetadataExt;
        let here = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
        let open = f.file.metadata().map(|m| (m.dev(), m.ino()))?;
        if here != Some(open) {
            tracing::warn!(path = %path.display(), "the audit file is gone: starting it again");
            let file = crate::runtime::private::open_private_append(path)?;
            let size = file.metadata()?.len();
            *f = Open { file, size };
            // The new file's name, on disk too.
            sync_dir(path)?;
        }
        if f.size > 0 && f.size + line.len() as u64 > self.max_bytes {
            self.rotate(&mut f);
            sync_dir(path)?;
        }
        let written = f.file.write_all(&line).and_then(|()| f.file.sync_data());
        if written.is_err() {
            // A record cut by a full disk is taken back whole: the next one
            // must not be glued onto it.
            let _ = f.file.set_len(f.size);
        }
        written.map(|()| f.size += line.len() as u64)
    }

    /// Whether the last gated call was refused for want of its record
    /// (for `doctor` and the page).
    pub fn gate_failing(&self) -> bool {
        self.gate_failing.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Flushes the directory holding `path`: a file made there is on disk.
fn sync_dir(path: &std::path::Path) -> std::io::Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{ActionRecord, Actor, PluginEventKind, PluginRecord, acting, now_rfc3339};

    fn start(tool: &str) -> StartRecord<'_> {
        StartRecord {
            time: now_rfc3339(),
            event: "call_start",
            agent: Some("lyra"),
            actor: "agent lyra",
            session: None,
            token: None,
            tool,
            provider: "fileio",
            arguments_sha256: String::new(),
            trace_id: None,
            span_id: None,
        }
    }

    fn records(path: &std::path::Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    #[test]
    fn a_start_record_is_on_disk_and_a_removed_file_is_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log =
            AuditLog::open(&path, false).unwrap().with_gate(&AuditConfig { fail_closed: true, ..Default::default() });
        assert!(log.gates("write_file", false) && !log.gates("roll", true));
        log.write_start(&start("write_file")).unwrap();
        assert_eq!(records(&path)[0]["event"], "call_start");
        std::fs::remove_file(&path).unwrap();
        log.write_start(&start("write_file")).unwrap();
        assert_eq!(records(&path).len(), 1, "the file was made again, with the record");
        // Its directory gone: refused, and said so.
        std::fs::remove_dir_all(dir.path()).unwrap();
        assert!(log.write_start(&start("write_file")).is_err());
        assert!(log.gate_failing());
    }

    #[test]
    fn lifecycle_and_action_records_name_the_actor_of_their_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, false).unwrap();
        let plugin = |log: &AuditLog| {
            log.write_plugin(&PluginRecord {
                time: now_rfc3339(),
                event: PluginEventKind::PluginLoad,
                plugin: "dice",
                path: None,
                sha256: None,
                previous_sha256: None,
                origin: None,
                capabilities_held: Vec::new(),
                error: None,
            })
        };
        plugin(&log);
        acting(Actor::new("host b\u{1b}[2J", "cluster"), || {
            plugin(&log);
            log.write_action(&ActionRecord { time: now_rfc3339(), event: "reload", detail: None, trace_id: None });
        });
        let r = records(&path);
        assert_eq!((r[0]["actor"].as_str(), r[0]["via"].as_str()), (Some("toolhost"), Some("config")));
        assert_eq!((r[1]["actor"].as_str(), r[1]["via"].as_str()), (Some("host b?[2J"), Some("cluster")));
        assert_eq!((r[2]["event"].as_str(), r[2]["via"].as_str()), (Some("reload"), Some("cluster")));
        assert_eq!(r[1]["plugin"], "dice", "the record's own fields stay: {}", r[1]);
    }
}
