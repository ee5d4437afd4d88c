//! toolhost as the client of upstream servers in both protocol revisions:
//! it probes `server/discover` and falls back to `initialize`, and an
//! upstream's questions (elicitation) reach the MCP client whose call
//! caused them, whichever revision each side speaks. The upstream is the
//! official Python SDK (`py_server.py`) made to refuse `initialize`
//! (`--modern-only`, a 2026-07-28-only server) or `server/discover`
//! (`--legacy-only`, a 2025-11-25 one); the client is the Python SDK in
//! `auto` and `legacy` mode.
//!
//! Hostile: an upstream that asks without end is cut off at
//! `limits.asks_per_call`; a client that declares no elicitation gets the
//! upstream a decline, and the call an answer.

use crate::offers::text;
use crate::peers::{free_port, peers_dir, python, serve_http, spawn_listening, test_dir};
use serde_json::{Value, json};
use std::process::Command;

/// `py_server.py --http PORT` with `flag`, recording its requests in `dir/events`.
fn upstream(dir: &std::path::Path, flag: &str) -> (crate::live::Proc, String) {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.arg(peers_dir().join("py_server.py"))
        .args(["--http", &port.to_string(), flag])
        .env("PY_PEER_EVENTS", dir.join("events"));
    (spawn_listening(cmd, port), format!("http://127.0.0.1:{port}/mcp"))
}

fn config(url: &str) -> String {
    format!("mcp:\n  servers:\n    - name: up\n      transport: streamable-http\n      url: {url}\n")
}

/// `py_client.py --mode MODE ARGS --http URL`: its JSON.
fn py(mode: &str, args: &[&str], url: &str) -> Value {
    crate::offers::py(std::path::Path::new("."), mode, args, &["--http".to_string(), url.to_string()])
}

fn events(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("events")).unwrap_or_default().lines().map(String::from).collect()
}

#[test]
fn upstreams_of_either_revision_are_proxied_and_their_questions_reach_the_client_in_its_own() {
    let calls = json!([["echo", {"text": "hi"}], ["confirm", {"question": "Open the vault?"}]]).to_string();
    let accept = r#"{"action": "accept", "content": {"ok": true}}"#;
    for (flag, upstream_speaks) in [("--modern-only", "2026-07-28"), ("--legacy-only", "2025-11-25")] {
        let dir = test_dir("");
        let (_up, url) = upstream(dir.path(), flag);
        std::fs::write(dir.path().join("toolhost.yaml"), config(&url)).unwrap();
        let served = serve_http(dir.path(), &["--no-builtins"]);
        for mode in ["auto", "legacy"] {
            let ctx = format!("upstream {upstream_speaks}, client {mode}");
            let v = py(mode, &["--elicit", accept, "--calls", &calls], &served.mcp());
            assert_eq!(text(&v["results"][0]), "hi", "{ctx}: {v}");
            assert_eq!(text(&v["results"][1]), "confirmed", "{ctx}: {v}");
            assert_eq!(v["elicitations"][0]["message"], "Open the vault?", "{ctx}: {v}");
            assert_eq!(v["elicitations"][0]["requestedSchema"]["properties"]["ok"]["type"], "boolean", "{ctx}: {v}");
            // A client that cannot be asked: the upstream is told no, and
            // the call still has its answer.
            let v = py(mode, &["--calls", &calls], &served.mcp());
            assert_eq!(text(&v["results"][1]), "declined", "{ctx}: {v}");
        }
        // Past a liveness ping (every 5 s): 2026-07-28 has no `ping`, and
        // its -32601 still says the server is there.
        std::thread::sleep(std::time::Duration::from_secs(6));
        let v = py("auto", &["--calls", &json!([["echo", {"text": "later"}]]).to_string()], &served.mcp());
        assert_eq!(text(&v["results"][0]), "later", "{v}");
        let seen = events(dir.path());
        let calls: Vec<&String> = seen.iter().filter(|e| e.starts_with("rpc tools/call")).collect();
        assert!(!calls.is_empty(), "{seen:?}");
        match upstream_speaks {
            // Never an `initialize`; every request carries its version.
            "2026-07-28" => {
                assert!(!seen.iter().any(|e| e.contains("initialize")), "{seen:?}");
                // One connection all along: one probe.
                assert_eq!(seen.iter().filter(|e| e.starts_with("rpc server/discover")).count(), 1, "{seen:?}");
                assert!(calls.iter().all(|e| e.as_str() == "rpc tools/call 2026-07-28"), "{seen:?}");
            }
            // The probe, refused, then `initialize`.
            _ => {
                assert!(seen.iter().any(|e| e == "refused server/discover"), "{seen:?}");
                assert!(seen.iter().any(|e| e == "rpc initialize -"), "{seen:?}");
            }
        }
    }
}

#[test]
fn an_upstream_that_never_stops_asking_is_cut_off_at_asks_per_call() {
    let dir = test_dir("");
    let (_up, url) = upstream(dir.path(), "--legacy-only");
    let cfg = format!("{}limits:\n  asks_per_call: 3\n", config(&url));
    std::fs::write(dir.path().join("toolhost.yaml"), cfg).unwrap();
    let served = serve_http(dir.path(), &["--no-builtins"]);
    let accept = r#"{"action": "accept", "content": {"ok": true}}"#;
    let calls = json!([["nag", {}], ["echo", {"text": "still here"}]]).to_string();
    let v = py("legacy", &["--elicit", accept, "--calls", &calls], &served.mcp());
    let said = text(&v["results"][0]);
    assert!(said.starts_with("stopped after 3 questions"), "{v}");
    assert!(said.contains("limits.asks_per_call"), "{v}");
    assert_eq!(v["elicitations"].as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(text(&v["results"][1]), "still here", "{v}");
}
