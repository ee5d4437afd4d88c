//! Reading the audit trail back: the records of `audit.jsonl` and its
//! rotated files (`audit.jsonl.N` oldest first, then the file being
//! written), filtered by agent, plugin, tool, outcome and time, as
//! `toolhost audit` prints them.
//!
//! A line that is not a JSON object (cut by a crash mid-write, or not the
//! trail's) is skipped and counted, never fatal.

use chrono::{DateTime, Utc};
use serde_json::Value;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Which records to keep. Every field set must match.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The agent that called (`(operator)` for the operator's calls).
    pub agent: Option<String>,
    /// The plugin: a call's provider, a lifecycle record's plugin.
    pub plugin: Option<String>,
    /// The tool asked for.
    pub tool: Option<String>,
    /// A call's outcome (`ok`, `timeout`, ...), a refused record's reason,
    /// or a lifecycle event (`plugin_load`, ...); `error` is every call
    /// that did not end `ok`.
    pub outcome: Option<String>,
    /// Records at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Records before this time.
    pub until: Option<DateTime<Utc>>,
    /// Keep calibration probes (left out unless asked for).
    pub probes: bool,
    /// Records of this trace (hex trace id, any case).
    pub trace: Option<String>,
    /// Records of this actor: a record's `actor` (`agent lyra`,
    /// `cli uid 1000 (dm)`, `host h2` ...) or the channel it acted
    /// through (`via`: `admin_api`, `page`, `cli`, `cluster`, `signal`).
    pub actor: Option<String>,
}

/// What the agent field of a record by the operator reads as.
pub const OPERATOR: &str = "(operator)";

impl Filter {
    /// Whether `record` passes.
    pub fn matches(&self, record: &Value) -> bool {
        let text = |k: &str| record.get(k).and_then(Value::as_str);
        let event = text("event").unwrap_or_default();
        if event == "probe" && !self.probes {
            return false;
        }
        if let Some(a) = &self.agent {
            let agent = text("agent").unwrap_or(OPERATOR);
            if !matches!(event, "call" | "call_start" | "refused" | "probe") || agent != a {
                return false;
            }
        }
        if let Some(p) = &self.plugin
            && text("plugin").or(text("provider")) != Some(p.as_str())
        {
            return false;
        }
        if let Some(t) = &self.tool
            && text("tool") != Some(t.as_str())
        {
            return false;
        }
        if let Some(o) = &self.outcome {
            let outcome = text("outcome").or(text("reason")).unwrap_or(event);
            let failed = outcome != "ok" && matches!(event, "call" | "refused" | "probe");
            if !(outcome == o || event == o || (o == "error" && failed)) {
                return false;
            }
        }
        if let Some(t) = &self.trace
            && !text("trace_id").is_some_and(|id| id.eq_ignore_ascii_case(t))
        {
            return false;
        }
        if let Some(a) = &self.actor
            && text("actor") != Some(a.as_str())
            && text("via") != Some(a.as_str())
        {
            return false;
        }
        if self.since.is_some() || self.until.is_some() {
            let Some(at) = time_of(record) else { return false };
            if self.since.is_some_and(|s| at < s) || self.until.is_some_and(|u| at >= u) {
                return false;
            }
        }
        true
    }
}

/// When `record` happened: a call's or lifecycle record's `time`, a
/// refused record's `last`.
pub fn time_of(record: &Value) -> Option<DateTime<Utc>> {
    let t = record.get("time").or_else(|| record.get("last"))?.as_str()?;
    DateTime::parse_from_rfc3339(t).ok().map(|t| t.with_timezone(&Utc))
}

/// A point in time as `--since` and `--until` take it: a duration back from
/// `now` (`90s`, `30m`, `2h`, `7d`) or an RFC 3339 time
/// (`2026-11-29T20:00:00Z`).
pub fn parse_when(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let t = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(t) {
        return Ok(at.with_timezone(&Utc));
    }
    let unit = t.chars().last().ok_or_else(|| "an empty time".to_string())?;
    let n: i64 = t[..t.len() - unit.len_utf8()].parse().map_err(|_| {
        format!(
            "{t:?} is neither a duration back from now (90s, 30m, 2h, 7d) nor an RFC 3339 time (2026-11-29T20:00:00Z)"
        )
    })?;
    let back = match unit {
        's' => chrono::Duration::try_seconds(n),
        'm' => chrono::Duration::try_minutes(n),
        'h' => chrono::Duration::try_hours(n),
        'd' => chrono::Duration::try_days(n),
        _ => None,
    }
    .ok_or_else(|| format!("{t:?}: a duration ends in s, m, h or d (90s, 30m, 2h, 7d)"))?;
    now.checked_sub_signed(back).ok_or_else(|| format!("{t:?} is too far back"))
}

/// The trail at `path` and its rotated files that exist, oldest first
/// (`path.keep` ... `path.1`, then `path`), as [`crate::audit::AuditLog`]
/// rotates them.
pub fn files(path: &Path, keep: u32) -> Vec<PathBuf> {
    let numbered = |n: u32| {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    };
    (1..=keep).rev().map(numbered).chain(std::iter::once(path.to_path_buf())).filter(|p| p.is_file()).collect()
}

/// What [`read`] went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Read {
    /// Lines that were not records.
    pub skipped: usize,
    /// The bytes of whole lines read from the last file (where
    /// [`follow`] goes on from).
    pub end: u64,
}

/// Reads `files` in order and hands `each` every record `filter` keeps. A
/// last line without its newline is left alone (it may be being written).
pub fn read(files: &[PathBuf], filter: &Filter, mut each: impl FnMut(Value)) -> std::io::Result<Read> {
    let mut read = Read::default();
    for f in files {
        let file = match std::fs::File::open(f) {
            Ok(file) => file,
            // Rotated away between listing and opening.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let (skipped, end) = read_lines(BufReader::new(file), filter, &mut each)?;
        read = Read { skipped: read.skipped + skipped, end };
    }
    Ok(read)
}

/// The longest line read as a record: the writer's records are far
/// shorter (names cut, arguments hashed unless `audit.include_arguments`,
/// and then bounded by the request size); a longer line (a damaged or
/// foreign file) is skipped, never held whole in memory.
pub const MAX_RECORD_BYTES: usize = 16 << 20;

/// Reads up to and including the next newline, keeping at most
/// `MAX_RECORD_BYTES` of the line in `line` (appended). Returns the bytes
/// consumed, whether the newline was reached, and whether the line was cut.
fn read_bounded(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<(usize, bool, bool)> {
    let (mut consumed, mut cut) = (0, false);
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((consumed, false, cut));
        }
        let (n, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_RECORD_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&buf[..n.min(room)]);
        cut |= n > room;
        reader.consume(n);
        consumed += n;
        if done {
            return Ok((consumed, true, cut));
        }
    }
}

fn read_lines(
    mut reader: impl BufRead,
    filter: &Filter,
    each: &mut impl FnMut(Value),
) -> std::io::Result<(usize, u64)> {
    let (mut skipped, mut end) = (0, 0);
    let mut line = Vec::new();
    loop {
        line.clear();
        let (n, whole, cut) = read_bounded(&mut reader, &mut line)?;
        if !whole {
            return Ok((skipped, end));
        }
        end += n as u64;
        if cut {
            skipped += 1;
            continue;
        }
        match serde_json::from_slice::<Value>(&line) {
            Ok(v) if v.is_object() => {
                if filter.matches(&v) {
                    each(v);
                }
            }
            _ if line.iter().all(u8::is_ascii_whitespace) => {}
            _ => skipped += 1,
        }
    }
}

/// Follows the trail at `path` from byte `from` as it is written
/// (`--follow`): every `poll`, the whole lines added are read; when the
/// file is rotated (replaced, or shorter than what was read), the new one
/// is read from its start. Returns only when `each` says stop (false) or
/// reading fails.
pub fn follow(
    path: &Path,
    from: u64,
    filter: &Filter,
    poll: std::time::Duration,
    mut each: impl FnMut(Value) -> bool,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let open = |at: u64| -> std::io::Result<(BufReader<std::fs::File>, u64)> {
        let mut file = std::fs::File::open(path)?;
        let inode = file.metadata()?.ino();
        file.seek(SeekFrom::Start(at))?;
        Ok((BufReader::new(file), inode))
    };
    let (mut reader, mut inode) = open(from)?;
    let mut at = from;
    let (mut partial, mut partial_cut) = (Vec::new(), false);
    loop {
        // Every whole line there is now (the file kept open: what is
        // written to it before a rotation is read too).
        loop {
            let (n, whole, cut) = read_bounded(&mut reader, &mut partial)?;
            at += n as u64;
            partial_cut |= cut;
            if !whole {
                break;
            }
            let line = std::mem::take(&mut partial);
            if std::mem::take(&mut partial_cut) {
                continue;
            }
            if let Ok(v) = serde_json::from_slice::<Value>(&line)
                && v.is_object()
                && filter.matches(&v)
                && !each(v)
            {
                return Ok(());
            }
        }
        match std::fs::metadata(path) {
            // Rotated: what the old file held is read; on to the new one.
            Ok(meta) if meta.ino() != inode => {
                if let Ok((r, i)) = open(0) {
                    (reader, inode, at) = (r, i, 0);
                    (partial, partial_cut) = (Vec::new(), false);
                    continue;
                }
            }
            // Cut short in place: from its start.
            Ok(meta) if meta.len() < at => {
                (reader, inode) = open(0)?;
                at = 0;
                (partial, partial_cut) = (Vec::new(), false);
                continue;
            }
            _ => {}
        }
        std::thread::sleep(poll);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(time: &str, agent: Option<&str>, tool: &str, outcome: &str) -> Value {
        json!({"time": time, "event": "call", "agent": agent, "tool": tool, "provider": "diceroller", "outcome": outcome})
    }

    #[test]
    fn each_filter_keeps_what_it_names_and_probes_are_left_out_unless_asked() {
        let records = [
            call("2026-11-29T10:00:00.000Z", Some("bartok"), "roll", "ok"),
            call("2026-11-29T11:00:00.000Z", None, "roll", "timeout"),
            json!({"time": "2026-11-29T11:30:00.000Z", "event": "probe", "tool": "roll", "provider": "diceroller", "outcome": "ok"}),
            json!({"time": "2026-11-29T12:00:00.000Z", "event": "plugin_load", "plugin": "fileio"}),
            json!({"event": "refused", "agent": "bartok", "reason": "capacity_exceeded", "count": 3,
                   "first": "2026-11-29T12:30:00.000Z", "last": "2026-11-29T12:30:00.500Z"}),
        ];
        let kept = |f: Filter| -> Vec<usize> { (0..records.len()).filter(|i| f.matches(&records[*i])).collect() };
        assert_eq!(kept(Filter::default()), [0, 1, 3, 4]);
        assert_eq!(kept(Filter { probes: true, ..Filter::default() }), [0, 1, 2, 3, 4]);
        assert_eq!(kept(Filter { agent: Some("bartok".into()), ..Filter::default() }), [0, 4]);
        assert_eq!(kept(Filter { agent: Some(OPERATOR.into()), ..Filter::default() }), [1]);
        assert_eq!(kept(Filter { plugin: Some("fileio".into()), ..Filter::default() }), [3]);
        assert_eq!(kept(Filter { plugin: Some("diceroller".into()), ..Filter::default() }), [0, 1]);
        assert_eq!(kept(Filter { tool: Some("roll".into()), ..Filter::default() }), [0, 1]);
        assert_eq!(kept(Filter { outcome: Some("timeout".into()), ..Filter::default() }), [1]);
        assert_eq!(kept(Filter { outcome: Some("error".into()), ..Filter::default() }), [1, 4]);
        assert_eq!(kept(Filter { outcome: Some("plugin_load".into()), ..Filter::default() }), [3]);
        assert_eq!(kept(Filter { outcome: Some("capacity_exceeded".into()), ..Filter::default() }), [4]);
        let at = |t: &str| Some(DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc));
        let window =
            Filter { since: at("2026-11-29T11:00:00Z"), until: at("2026-11-29T12:30:00Z"), ..Filter::default() };
        assert_eq!(kept(window), [1, 3]);
    }

    #[test]
    fn when_is_a_duration_back_or_a_time_and_anything_else_says_what_it_takes() {
        let now = DateTime::parse_from_rfc3339("2026-11-29T20:00:00Z").unwrap().with_timezone(&Utc);
        assert_eq!(parse_when("2h", now).unwrap().to_rfc3339(), "2026-11-29T18:00:00+00:00");
        assert_eq!(parse_when("90s", now).unwrap().to_rfc3339(), "2026-11-29T19:58:30+00:00");
        assert_eq!(parse_when("7d", now).unwrap().to_rfc3339(), "2026-11-22T20:00:00+00:00");
        assert_eq!(parse_when("2026-11-29T21:00:00+01:00", now).unwrap().to_rfc3339(), "2026-11-29T20:00:00+00:00");
        for bad in ["", "2", "2w", "two hours", "h", "-", "99999999999999999d"] {
            assert!(parse_when(bad, now).is_err(), "{bad:?}");
        }
        assert!(parse_when("2w", now).unwrap_err().contains("s, m, h or d"));
    }

    #[test]
    fn rotated_files_are_read_oldest_first_and_cut_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let line = |n: u32| format!("{}\n", call(&format!("2026-11-29T1{n}:00:00Z"), None, &format!("t{n}"), "ok"));
        std::fs::write(dir.path().join("audit.jsonl.2"), line(1)).unwrap();
        std::fs::write(dir.path().join("audit.jsonl.1"), line(2) + "{\"cut\": \n").unwrap();
        // The current file ends with a line being written.
        std::fs::write(&path, line(3) + "\n" + "{\"time\": \"2026").unwrap();
        let found = files(&path, 5);
        assert_eq!(found.len(), 3);
        let mut tools = Vec::new();
        let read = read(&found, &Filter::default(), |v| tools.push(v["tool"].as_str().unwrap().to_string())).unwrap();
        assert_eq!(tools, ["t1", "t2", "t3"]);
        assert_eq!(read, Read { skipped: 1, end: line(3).len() as u64 + 1 });
        // A line past MAX_RECORD_BYTES (a damaged file) is skipped, not held.
        let mut long = format!("{{\"tool\": \"{}\"}}\n", "x".repeat(MAX_RECORD_BYTES));
        long.push_str(&line(4));
        std::fs::write(&path, long).unwrap();
        let mut tools = Vec::new();
        let read = super::read(std::slice::from_ref(&path), &Filter::default(), |v| {
            tools.push(v["tool"].as_str().unwrap().to_string())
        })
        .unwrap();
        assert_eq!((tools, read.skipped), (vec!["t4".to_string()], 1));
    }

    #[test]
    fn follow_reads_lines_as_they_are_written_a_half_line_once_whole_and_across_a_rotation() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let line = |n: u32| format!("{}\n", call(&format!("2026-11-29T1{n}:00:00Z"), None, &format!("t{n}"), "ok"));
        std::fs::write(&path, line(1)).unwrap();
        let from = line(1).len() as u64;
        let writing = path.clone();
        let writer = std::thread::spawn(move || {
            let pause = || std::thread::sleep(std::time::Duration::from_millis(60));
            let append = |text: &str| {
                let mut f = std::fs::OpenOptions::new().append(true).open(&writing).unwrap();
                f.write_all(text.as_bytes()).unwrap();
            };
            pause();
            append(&line(2));
            let three = line(3);
            let (head, tail) = three.split_at(20);
            append(head);
            pause();
            append(tail);
            pause();
            let mut rotated = writing.as_os_str().to_owned();
            rotated.push(".1");
            std::fs::rename(&writing, rotated).unwrap();
            std::fs::write(&writing, line(4)).unwrap();
        });
        let mut got = Vec::new();
        follow(&path, from, &Filter::default(), std::time::Duration::from_millis(10), |v| {
            got.push(v["tool"].as_str().unwrap().to_string());
            got.len() < 3
        })
        .unwrap();
        writer.join().unwrap();
        assert_eq!(got, ["t2", "t3", "t4"]);
    }
}
