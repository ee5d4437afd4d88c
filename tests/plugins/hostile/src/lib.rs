//! A plugin that misbehaves on purpose, one tool per way a guest can attack
//! its host. The host's tests prove each is stopped with a typed error and
//! that the host keeps serving afterwards.

/// Built against the contract as it was first published (0.1.0, tools
/// only, kept in `tests/plugins/wit-0.1.0`): every hostile test is also a
/// test that such a component still loads and answers.
#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../wit-0.1.0", world: "plugin" });
}

/// `wasi:config/store`: what the operator set for this plugin.
#[allow(missing_docs)]
mod config {
    wit_bindgen::generate!({ path: "../../../wit", world: "wasi:config/imports@0.2.0-rc.1" });
}

/// A `wasi:config/store` value, as JSON (`null` when there is none).
fn config_value(key: &str) -> String {
    match config::wasi::config::store::get(key) {
        Ok(Some(v)) => format!("{:?}", v),
        Ok(None) => "null".into(),
        Err(e) => format!("{:?}", format!("{e:?}")),
    }
}

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};
use std::hint::black_box;
use std::io::Write as _;

struct Plugin;

fn tool(name: &str, description: &str, max_ms: u32) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: description.into(),
        input_schema: r#"{"type":"object"}"#.into(),
        estimated_duration_ms: 1,
        max_duration_ms: max_ms,
        idempotent: false,
        cacheable_seconds: 0,
        probe_arguments: None,
    }
}

/// Recursion the optimiser cannot turn into a loop: the result is combined
/// after the call returns. Everything stays in wasm locals, so it is the wasm
/// stack (not Rust's shadow stack in linear memory) that overflows.
fn recurse(n: u64, limit: u64) -> u64 {
    if n == limit { n } else { recurse(n + 1, limit).wrapping_mul(31).wrapping_add(n) }
}

/// `"key": "value"` in a flat JSON object (no escapes), by a tiny hand
/// parser that keeps this crate free of serde.
fn string_arg(arguments: &str, key: &str) -> Option<String> {
    let rest = arguments.split_once(&format!("\"{key}\""))?.1.trim_start().strip_prefix(':')?.trim_start();
    Some(rest.strip_prefix('"')?.split_once('"')?.0.to_string())
}

/// `"key": 123` in a flat JSON object.
fn number_arg(arguments: &str, key: &str) -> Option<u64> {
    let rest = arguments.split_once(&format!("\"{key}\""))?.1.trim_start().strip_prefix(':')?.trim_start();
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[cfg(target_arch = "wasm32")]
unsafe extern "C" {
    /// `table.grow` by `delta` null references on the module's function
    /// table (hand-assembled, see `build.rs`): the table's old size, or -1
    /// when the host refuses the growth.
    fn hostile_table_grow(delta: u32) -> i32;
}

/// Grows the guest's function table by `delta` elements: the table's old size,
/// or `None` when the host refuses the growth.
fn grow_table(delta: u32) -> Option<u32> {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: the function only appends null entries to the function
    // table; it touches no memory and no existing entry.
    let old = unsafe { hostile_table_grow(delta) };
    #[cfg(not(target_arch = "wasm32"))]
    let old = {
        let _ = delta;
        -1
    };
    u32::try_from(old).ok()
}

/// An I/O error as JSON members: `"kind": "...", "error": "..."`.
fn io_error(e: &std::io::Error) -> String {
    let text = e.to_string().replace(['"', '\\'], "'");
    format!(r#""kind": "{:?}", "error": "{text}""#, e.kind())
}

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![
            tool("spin", "Loops forever.", 100),
            tool("grow", "Allocates memory until something stops it.", 1000),
            tool("alloc", "Allocates and touches {\"mib\": N} MiB, then returns N.", 5000),
            tool("recurse", "Recurses without end.", 1000),
            tool(
                "grow_table",
                "Grows its function table by {\"elements\": N} (default 1,000,000) with table.grow, then returns the new size; aborts when the growth is refused, as a Rust guest does when memory is.",
                1000,
            ),
            tool("panic", "Panics.", 100),
            tool("big_output", "Returns 10 MB of text.", 1000),
            tool("sleep", "Sleeps {\"ms\": N} milliseconds (std::thread::sleep, a WASI timer).", 1000),
            tool("env", "Returns every environment variable it can see, NAME=value per line.", 100),
            tool("echo", "Returns its arguments: proves the plugin still works.", 100),
            tool("read_config", "Returns {\"value\": ...} of wasi:config/store key {\"key\"} (null when unset).", 100),
            tool(
                "leak_secret",
                "Reads key {\"key\"} from wasi:config/store, reports progress 0 (\"read\"), sleeps {\"ms\"} milliseconds (default 0), then puts its value (as it is, lowercased, uppercased, percent-encoded, and that lowercased) in a log line, stderr, stdout, progress and its error.",
                3000,
            ),
            tool("progress_flood", "Reports progress as fast as it can for 300 ms, then returns the count.", 1000),
            tool(
                "progress_twice",
                "Reports progress 1 of 2, sleeps {\"ms\"} milliseconds (default 0), reports 2 of 2 and returns.",
                1000,
            ),
            tool(
                "dir_bomb",
                "Creates files {\"dir\"}/{\"prefix\"}<i> ({\"size\"} bytes each, default 0) until an error.",
                5000,
            ),
            tool(
                "big_write",
                "Appends {\"chunk\"}-byte writes (default 65536) to {\"path\"} until an error, reopening the file for each.",
                5000,
            ),
            tool("plant_symlink", "Tries to link {\"link\"} to {\"target\"} (a symlink, then a hard link).", 1000),
            tool("read_path", "Reads {\"path\"} and returns its length.", 1000),
            tool(
                "probe_files",
                "Tries to list, stat and read /, ., .., /etc, /etc/passwd, /tmp, /proc/self/environ, {\"path\"} and {\"dir\"}: one line per attempt, with what it got.",
                1000,
            ),
            tool(
                "alias_output",
                "Returns one 1 MiB buffer {\"copies\"} times (default 120) through aliased pointers.",
                1000,
            ),
            tool("forge_log", "Writes log, stderr and stdout lines that try to forge host log lines.", 1000),
            tool("leak_in_error", "Reads {\"path\"} and fails with its contents in the error message.", 1000),
            tool(
                "hold_open",
                "Opens {\"path\"} again and again, keeping every handle, up to {\"count\"} (default 20000) or an error, then holds them {\"ms\"} (default 0).",
                5000,
            ),
        ]
    }

    fn call(name: String, arguments: String) -> Result<Vec<Content>, ToolError> {
        match name.as_str() {
            "spin" => {
                let mut i = 0u64;
                loop {
                    i = black_box(i.wrapping_add(1));
                }
            }
            "grow" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    black_box(&hoard);
                }
            }
            "alloc" => {
                let mib = number_arg(&arguments, "mib").unwrap_or(1) as usize;
                let block = vec![1u8; mib << 20];
                Ok(vec![Content::Text(
                    black_box(&block).iter().map(|&b| b as usize).sum::<usize>().div_euclid(1 << 20).to_string(),
                )])
            }
            "grow_table" => {
                let delta = number_arg(&arguments, "elements").unwrap_or(1_000_000) as u32;
                match grow_table(delta) {
                    Some(old) => Ok(vec![Content::Text((old + delta).to_string())]),
                    None => std::process::abort(),
                }
            }
            "recurse" => Ok(vec![Content::Text(recurse(0, u64::MAX - arguments.len() as u64).to_string())]),
            "panic" => panic!("the hostile plugin panicked on purpose"),
            "big_output" => Ok(vec![Content::Text("x".repeat(10 * 1024 * 1024))]),
            "sleep" => {
                // A tiny hand parser keeps this crate free of serde.
                let ms: u64 = arguments
                    .chars()
                    .filter(char::is_ascii_digit)
                    .collect::<String>()
                    .parse()
                    .map_err(|_| ToolError::InvalidInput("want {\"ms\": N}".into()))?;
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(vec![Content::Text(format!("slept {ms} ms"))])
            }
            "env" => Ok(vec![Content::Text(std::env::vars().map(|(k, v)| format!("{k}={v}\n")).collect())]),
            "echo" => Ok(vec![Content::Text(arguments)]),
            "progress_flood" => {
                let start = std::time::Instant::now();
                let mut n = 0u64;
                while start.elapsed() < std::time::Duration::from_millis(300) {
                    n += 1;
                    bindings::toolhost::plugin::host::progress(n as f64, None, Some("flooding"));
                }
                Ok(vec![Content::Text(n.to_string())])
            }
            "progress_twice" => {
                bindings::toolhost::plugin::host::progress(1.0, Some(2.0), Some("first"));
                std::thread::sleep(std::time::Duration::from_millis(number_arg(&arguments, "ms").unwrap_or(0)));
                bindings::toolhost::plugin::host::progress(2.0, Some(2.0), Some("second"));
                Ok(vec![Content::Text("twice".into())])
            }
            "hold_open" => {
                let path = string_arg(&arguments, "path").unwrap_or_else(|| "/held".into());
                let count = number_arg(&arguments, "count").unwrap_or(20_000);
                let mut held = Vec::new();
                let error = loop {
                    if held.len() as u64 >= count {
                        break None;
                    }
                    match std::fs::File::open(&path) {
                        Ok(f) => held.push(f),
                        Err(e) => break Some(e),
                    }
                };
                let opened = held.len();
                std::thread::sleep(std::time::Duration::from_millis(number_arg(&arguments, "ms").unwrap_or(0)));
                drop(held);
                Ok(vec![Content::Text(match error {
                    Some(e) => format!(r#"{{"opened": {opened}, {}}}"#, io_error(&e)),
                    None => format!(r#"{{"opened": {opened}}}"#),
                })])
            }
            "dir_bomb" => {
                let dir = string_arg(&arguments, "dir").unwrap_or_else(|| "/".into());
                let data = vec![b'x'; number_arg(&arguments, "size").unwrap_or(0) as usize];
                let prefix = string_arg(&arguments, "prefix").unwrap_or_else(|| "bomb-".into());
                let mut created = 0u64;
                let error = loop {
                    let path = format!("{}/{prefix}{created}", dir.trim_end_matches('/'));
                    match std::fs::write(&path, &data) {
                        Ok(()) => created += 1,
                        Err(e) => break e,
                    }
                };
                Ok(vec![Content::Text(format!(r#"{{"created": {created}, {}}}"#, io_error(&error)))])
            }
            "big_write" => {
                let path = string_arg(&arguments, "path").unwrap_or_else(|| "/big".into());
                let chunk = vec![b'y'; number_arg(&arguments, "chunk").unwrap_or(65536).max(1) as usize];
                // One `write` per open: a full quota then shows as the
                // open-time error, not as a failed stream write (which
                // wasi-libc reports as EIO whatever the cause).
                let mut written = 0u64;
                let error = loop {
                    let file = std::fs::OpenOptions::new().create(true).append(true).open(&path);
                    match file.and_then(|mut f| f.write(&chunk)) {
                        Ok(0) => break std::io::Error::other("wrote nothing"),
                        Ok(n) => written += n as u64,
                        Err(e) => break e,
                    }
                };
                Ok(vec![Content::Text(format!(r#"{{"written": {written}, {}}}"#, io_error(&error)))])
            }
            "plant_symlink" => {
                let target = string_arg(&arguments, "target").unwrap_or_else(|| "/etc/passwd".into());
                let link = string_arg(&arguments, "link").unwrap_or_else(|| "/evil".into());
                // `soft_link` is the spelling that builds on every target.
                #[allow(deprecated)]
                let symlink = std::fs::soft_link(&target, &link);
                let hard = std::fs::hard_link(&target, format!("{link}-hard"));
                let show = |r: std::io::Result<()>| match r {
                    Ok(()) => r#""ok": true"#.to_string(),
                    Err(e) => format!(r#""ok": false, {}"#, io_error(&e)),
                };
                Ok(vec![Content::Text(format!(
                    r#"{{"symlink": {{{}}}, "hard_link": {{{}}}}}"#,
                    show(symlink),
                    show(hard)
                ))])
            }
            "read_path" => {
                let path = string_arg(&arguments, "path").unwrap_or_default();
                Ok(vec![Content::Text(match std::fs::read(&path) {
                    Ok(bytes) => format!(r#"{{"ok": true, "len": {}}}"#, bytes.len()),
                    Err(e) => format!(r#"{{"ok": false, {}}}"#, io_error(&e)),
                })])
            }
            "probe_files" => {
                let mut paths: Vec<String> =
                    ["/", ".", "..", "/etc", "/etc/passwd", "/tmp", "/proc/self/environ"].map(String::from).into();
                paths.extend(string_arg(&arguments, "path"));
                paths.extend(string_arg(&arguments, "dir"));
                let mut out = String::new();
                let mut line = |op: &str, path: &str, got: std::io::Result<String>| {
                    out.push_str(&match got {
                        Ok(what) => format!("{op} {path}: ok {what}\n"),
                        Err(e) => format!("{op} {path}: refused {:?} {e}\n", e.kind()),
                    })
                };
                for path in &paths {
                    let listed = std::fs::read_dir(path).and_then(|entries| {
                        entries.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned())).collect()
                    });
                    line("list", path, listed.map(|names: Vec<String>| names.join(",")));
                    line("stat", path, std::fs::metadata(path).map(|m| format!("{} bytes", m.len())));
                    line("read", path, std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()));
                }
                Ok(vec![Content::Text(out)])
            }
            "alias_output" => {
                // The guest pays for one 1 MiB buffer; a host that copies
                // every result before checking its size pays for all of them.
                let copies = number_arg(&arguments, "copies").unwrap_or(120) as usize;
                let mut buf = std::mem::ManuallyDrop::new(vec![b'a'; 1 << 20]);
                let (ptr, len) = (buf.as_mut_ptr(), buf.len());
                // SAFETY: none. Every String aliases the same buffer on
                // purpose; the host must stop reading before it matters.
                Ok((0..copies).map(|_| Content::Text(unsafe { String::from_raw_parts(ptr, len, len) })).collect())
            }
            "forge_log" => {
                let forged = "\n2026-11-23T00:00:00.000000Z  INFO toolhost: FORGED host line\r\x1b[2K\u{202e}";
                bindings::toolhost::plugin::host::log(
                    bindings::toolhost::plugin::host::LogLevel::Warn,
                    &format!("log{forged}"),
                );
                eprintln!("stderr{forged}");
                println!("stdout{forged}");
                Ok(vec![Content::Text("logged".into())])
            }
            "read_config" => {
                let key = string_arg(&arguments, "key").unwrap_or_default();
                Ok(vec![Content::Text(format!(r#"{{"value": {}}}"#, config_value(&key)))])
            }
            "leak_secret" => {
                let key = string_arg(&arguments, "key").unwrap_or_default();
                let value = match config::wasi::config::store::get(&key) {
                    Ok(Some(v)) => v,
                    other => format!("{other:?}"),
                };
                // Read first, and said (a progress report without the
                // value): the host may rotate or remove the secret while
                // this sleeps.
                use bindings::toolhost::plugin::host;
                host::progress(0.0, Some(1.0), Some("read"));
                std::thread::sleep(std::time::Duration::from_millis(number_arg(&arguments, "ms").unwrap_or(0)));
                let encoded: String = value
                    .bytes()
                    .map(|b| match b {
                        b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                            char::from(b).to_string()
                        }
                        _ => format!("%{b:02X}"),
                    })
                    .collect();
                let forms = format!(
                    "({} {} {} {})",
                    value.to_lowercase(),
                    value.to_uppercase(),
                    encoded,
                    encoded.to_lowercase()
                );
                host::log(host::LogLevel::Warn, &format!("the secret is {value}! {forms}"));
                host::progress(0.5, Some(1.0), Some(&format!("half way with {value} {forms}")));
                eprintln!("stderr has {value} {forms}");
                println!("stdout has {value} {forms}");
                Err(ToolError::Failed(format!("refused with key {value} (try again) {forms}")))
            }
            "leak_in_error" => {
                let path = string_arg(&arguments, "path").unwrap_or_default();
                let secret = std::fs::read_to_string(&path).unwrap_or_else(|e| e.to_string());
                Err(ToolError::Failed(format!("could not use {}", secret.trim())))
            }
            other => Err(ToolError::NotFound(other.into())),
        }
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);
