//! The first-list rule for plugins (issue #31): `serve --stdio` answers
//! `initialize` while a plugin compiles, a plugin compiling joins with
//! `list_changed`, and a call of its tool waits for that compile only.
//! The slow plugin is the 18 MB Python one (`plugins-py/npcnames`), in a
//! fresh state directory, so its compile cache is empty.

use crate::common::{python_plugin, stderr, stdout, toolhost};
use crate::live::Proc;
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// A `serve --stdio` session, driven a line at a time; every message the
/// host wrote is kept, in order.
struct Session {
    _proc: Proc,
    input: ChildStdin,
    output: Receiver<Value>,
    seen: Vec<Value>,
}

impl Session {
    fn start(dir: &Path, wasm: &Path, first_list_wait_ms: u64) -> Session {
        std::fs::write(dir.join("toolhost.yaml"), format!("server:\n  first_list_wait_ms: {first_list_wait_ms}\n"))
            .unwrap();
        let mut child = toolhost()
            .current_dir(dir)
            .env("TOOLHOST_STATE_DIR", dir.join("state"))
            .env("TOOLHOST_CACHE_DIR", dir.join("cache"))
            .args(["serve", "--stdio", "--plugin", wasm.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
            .spawn()
            .unwrap();
        let (input, out) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let (tx, output) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: not JSON-RPC: {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Session { _proc: Proc(child), input, output, seen: Vec::new() }
    }

    fn send(&mut self, msg: Value) {
        writeln!(self.input, "{msg}").unwrap();
        self.input.flush().unwrap();
    }

    /// The next message `want` accepts, within a generous bound.
    fn until(&mut self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if want(&v) {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("no {what} in 300 s; seen: {:?}", self.seen),
                Err(RecvTimeoutError::Disconnected) => panic!("the host ended before {what}; seen: {:?}", self.seen),
            }
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.until(&format!("the answer to {method} ({id})"), |v| v["id"] == id)
    }

    fn initialize(&mut self) {
        let init = self.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}),
        );
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Where the `list_changed` notification came among the messages seen.
    fn list_changed_at(&self) -> Option<usize> {
        self.seen.iter().position(|v| v["method"] == "notifications/tools/list_changed")
    }
}

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// `toolhost status --json` against the host serving from `dir` (its
/// admin API opens beside the session, a moment after `initialize` may
/// have been answered: asked again until it answers, for at most 30 s).
fn status(dir: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = crate::live::admin(dir, &["status", "--json"]);
        if o.status.success() {
            return serde_json::from_str(&stdout(&o)).unwrap();
        }
        assert!(Instant::now() < deadline, "status: {}", stderr(&o));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn providers(status: &Value) -> Vec<String> {
    status["providers"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn initialize_is_answered_while_a_plugin_compiles_and_it_joins_with_list_changed() {
    let wasm = python_plugin();
    // Two hosts, each with an empty compile cache, side by side.
    let (listing, calling) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut lister = Session::start(listing.path(), &wasm, 0);
    let mut caller = Session::start(calling.path(), &wasm, 60_000);

    // `initialize` is answered while the plugin is not loaded yet: the
    // admin API, asked after the answer, still has no such provider.
    lister.initialize();
    let first = status(listing.path());
    assert!(!providers(&first).contains(&"npcnames".to_string()), "loaded before initialize was answered: {first}");
    assert!(providers(&first).contains(&"diceroller".to_string()), "the built-ins are there at once: {first}");
    assert_eq!(first["ready"], false, "{first}");
    // The compile is shown while it runs.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let s = status(listing.path());
        if s["compiling"].as_array().unwrap().iter().any(|c| c["plugin"] == "npcnames") {
            break;
        }
        assert!(!providers(&s).contains(&"npcnames".to_string()), "loaded, never shown compiling: {s}");
        assert!(Instant::now() < deadline, "never shown compiling: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The first list (server.first_list_wait_ms: 0) has the built-ins and
    // not the plugin still compiling; `roll` answers meanwhile.
    let list = lister.request(2, "tools/list", json!({}));
    assert!(tool_names(&list).contains(&"roll".to_string()), "{list}");
    assert!(!tool_names(&list).contains(&"npc_name".to_string()), "{list}");
    let roll = lister.request(3, "tools/call", json!({"name": "roll", "arguments": {"expression": "1d6"}}));
    assert_eq!(roll["result"]["isError"], false, "{roll}");

    // The other host: a call of the compiling plugin's tool, made before
    // anything was listed, waits for that compile and answers; a `roll`
    // sent after it is answered first (it waits for nothing).
    caller.initialize();
    caller.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "npc_name", "arguments": {"culture": "dwarf", "seed": 7}}}));
    let roll = caller.request(3, "tools/call", json!({"name": "roll", "arguments": {"expression": "1d6"}}));
    assert_eq!(roll["result"]["isError"], false, "{roll}");
    assert!(!caller.seen.iter().any(|v| v["id"] == 2), "npc_name answered before roll: {:?}", caller.seen);
    let named = caller.until("the answer to npc_name", |v| v["id"] == 2);
    assert_eq!(named["result"]["isError"], false, "{named}");
    assert!(named.to_string().contains("dwarf"), "{named}");

    // The lister is told when the plugin joins, and lists it then.
    lister.until("tools/list_changed", |v| v["method"] == "notifications/tools/list_changed");
    assert!(lister.list_changed_at().is_some());
    let list = lister.request(4, "tools/list", json!({}));
    assert!(tool_names(&list).contains(&"npc_name".to_string()), "{list}");
    let done = status(listing.path());
    assert_eq!(done["ready"], true, "{done}");
    assert!(done["compiling"].as_array().unwrap().is_empty(), "{done}");

    // The log says when the compile started and how long it took (at the
    // default log level).
    let log = std::fs::read_to_string(listing.path().join("stderr.log")).unwrap();
    let started = log.find("compiling plugin npcnames").unwrap_or_else(|| panic!("no compile start logged:\n{log}"));
    let ended =
        log.find("compile of plugin npcnames done in").unwrap_or_else(|| panic!("no compile end logged:\n{log}"));
    assert!(started < ended, "{log}");
}

/// `status` (its table and its JSON) and the log say which code a plugin
/// runs on: fast first, then optimized once its background compile is done
/// (the switch logged); with `limits.compile: fast` it stays on fast code.
#[test]
fn status_and_the_log_say_which_code_a_plugin_runs_on() {
    for (compile, want) in [("fast", "fast"), ("fast-first", "optimized")] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("plugins")).unwrap();
        crate::live::place(toolhost_test_artifacts::HOSTILE_PATH, &d.join("plugins/hostile.wasm"));
        let config = format!("plugins:\n  dir: ./plugins\nlimits:\n  compile: {compile}\n");
        std::fs::write(d.join("toolhost.yaml"), config).unwrap();
        let mut cmd = toolhost();
        cmd.current_dir(d)
            .env("TOOLHOST_STATE_DIR", d.join("state"))
            .env("TOOLHOST_CACHE_DIR", d.join("cache"))
            .args(["serve", "--http", "127.0.0.1:0"]);
        let log = d.join("stderr.log");
        let (_host, _url) = crate::live::spawn_serving_logged(cmd, std::fs::File::create(&log).unwrap());
        let deadline = Instant::now() + Duration::from_secs(120);
        let code = loop {
            let s = status(d);
            let hostile = s["providers"].as_array().unwrap().iter().find(|p| p["name"] == "hostile").cloned();
            let code = hostile.as_ref().and_then(|h| h["code"].as_str().map(str::to_string));
            if code.as_deref() == Some(want) {
                break code;
            }
            assert!(Instant::now() < deadline, "{compile}: never on {want} code: {hostile:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let roll = s_of(d, "diceroller");
        assert_eq!(roll["code"], "optimized", "a built-in runs on the code the build compiled: {roll}");
        let table = stdout(&crate::live::admin(d, &["status"]));
        let line = table.lines().find(|l| l.starts_with("hostile")).unwrap_or_else(|| panic!("{table}"));
        assert_eq!(line.contains("wasm (quick-compiled, not optimized yet)"), want == "fast", "{compile}: {line}");
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(
            log.contains("compile of plugin hostile done in") && log.contains("ms (fast code: "),
            "{compile}: {log}"
        );
        assert_eq!(log.contains("plugin hostile runs on optimized code now"), want == "optimized", "{compile}: {log}");
        assert_eq!(code.as_deref(), Some(want));
    }
}

/// The provider `name` in `toolhost status --json` against the host in `dir`.
fn s_of(dir: &Path, name: &str) -> Value {
    let s = status(dir);
    s["providers"].as_array().unwrap().iter().find(|p| p["name"] == name).cloned().unwrap_or_else(|| panic!("{s}"))
}
