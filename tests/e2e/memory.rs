//! The memorytool plugin over both memory stores (SQLite, and PostgreSQL in
//! a throwaway cluster): the demo campaign, persistence across restarts,
//! moving a campaign between stores, the memory grants.

use crate::common::builtin_path;
use crate::common::{call, json_of, stderr, stdout, toolhost};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, LazyLock};
use toolhost::Host;
use toolhost::memory::MemoryStore;
use toolhost::runtime::{Limits, LoadErrorKind, Runtime};

/// The memory tools' tests, each run against both stores: the SQLite file
/// (the default) and a PostgreSQL database in a throwaway cluster
/// (`crate::pg`).
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(&crate::common::HOST) })*
        }
        mod postgres {
            $(#[test] fn $name() { super::$name(&super::PG_HOST) })*
        }
    };
}

on_both_stores!(
    search_sessions_finds_transcript_lines,
    query_entities_filters_by_name_and_type,
    get_summary_returns_attributes_relationships_and_connected_entities,
    search_facts_ranks_facts_and_falls_back_to_transcripts,
    concurrent_queries_are_safe,
    remember_then_search_finds_the_fact,
);

/// The built-ins over a PostgreSQL store holding the demo campaign.
static PG_HOST: LazyLock<Host> = LazyLock::new(|| {
    let host = Host::new(Runtime::new(Limits::default(), Some(crate::common::CACHE.path())).unwrap());
    let (_, url) = crate::pg::database();
    host.admission().grants().set_memory(Arc::new(MemoryStore::connect(&url).unwrap()));
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    host
});

fn q(host: &Host, tool: &str, args: Value) -> Value {
    json_of(call(host, tool, args).unwrap())
}

fn search_sessions_finds_transcript_lines(host: &Host) {
    let v = q(host, "search_sessions", json!({"query": "Ember Crown"}));
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    assert!(results.iter().all(|r| r["text"].as_str().unwrap().contains("rown")), "{results:?}");
    let only3 = q(host, "search_sessions", json!({"query": "crown", "session_id": "session-3"}));
    assert!(only3["results"].as_array().unwrap().iter().all(|r| r["session_id"] == "session-3"));
}

fn query_entities_filters_by_name_and_type(host: &Host) {
    let npcs = q(host, "query_entities", json!({"type": "npc"}));
    let names: Vec<&str> = npcs["entities"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"Bartok the Barkeep") && names.contains(&"Sister Cinder"), "{names:?}");
    let v = q(host, "query_entities", json!({"name": "bartok"}));
    assert_eq!(v["entities"][0]["id"], "npc-bartok");
    assert_eq!(v["entities"][0]["attributes"]["race"], "halfling");
    // LIKE wildcards in the input are literal.
    assert!(q(host, "query_entities", json!({"name": "%"}))["entities"].as_array().unwrap().is_empty());
}

fn get_summary_returns_attributes_relationships_and_connected_entities(host: &Host) {
    let v = q(host, "get_summary", json!({"entity_id": "npc-sister-cinder"}));
    assert_eq!(v["entity"]["attributes"]["former_name"], "Elspeth Marrow");
    let kinds: Vec<&str> = v["relationships"].as_array().unwrap().iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"leads") && kinds.contains(&"holds"), "{kinds:?}");
    let connected: Vec<&str> = v["connected"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert!(connected.contains(&"fac-ashen-circle") && connected.contains(&"item-ember-crown"), "{connected:?}");
    match call(host, "get_summary", json!({"entity_id": "bartok"})) {
        Err(toolhost::tool::CallError::NotFound { message, .. }) => {
            assert!(message.contains("npc-bartok"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

fn search_facts_ranks_facts_and_falls_back_to_transcripts(host: &Host) {
    let v = q(host, "search_facts", json!({"query": "who leads the Ashen Circle", "top_k": 3}));
    assert_eq!(v["source"], "facts");
    let facts = v["facts"].as_array().unwrap();
    assert!(facts.len() <= 3);
    assert!(facts.iter().any(|f| f["id"] == "fact-13"), "{facts:?}");
    let v = q(host, "search_facts", json!({"query": "storm"}));
    assert_eq!(v["source"], "transcripts", "no fact mentions the storm");
    assert_eq!(v["facts"][0]["session_id"], "session-1");
}

fn concurrent_queries_are_safe(host: &Host) {
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(move || {
                for _ in 0..10 {
                    assert_eq!(q(host, "search_facts", json!({"query": "dragon"}))["source"], "facts");
                }
            });
        }
    });
}

fn remember_then_search_finds_the_fact(host: &Host) {
    let words = format!("The ferryman owes {} silver moons.", std::process::id());
    let v = q(host, "remember", json!({"text": words, "session_id": "session-2"}));
    let id = v["id"].as_str().unwrap().to_string();
    let found = q(host, "search_facts", json!({"query": "ferryman silver moons", "top_k": 3}));
    assert_eq!(found["source"], "facts", "{found}");
    assert_eq!(found["facts"][0]["id"], id.as_str(), "the most relevant first: {found}");
    assert_eq!(found["facts"][0]["session_id"], "session-2", "{found}");
}

#[test]
fn a_plugin_importing_memory_without_the_grant_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("snoop.wasm");
    std::fs::copy(builtin_path("memorytool"), &copy).unwrap();
    let host = Host::new(Runtime::new(Limits::default(), None).unwrap());
    let e = host.admission().add_plugin_file(&copy).unwrap_err();
    match e {
        toolhost::AddPluginError::Load(ref l) => {
            assert!(
                matches!(&l.kind, LoadErrorKind::NotGranted { interface, grant: "memory" } if interface.starts_with("toolhost:plugin/memory")),
                "{e}"
            );
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("needs the \"memory\" capability"), "{e}");
}

/// A plugin is not granted `memory` for its name: a file named like the
/// built-in `memorytool`, on a host whose built-ins are not loaded, is
/// refused like any other plugin importing it; the built-in's declared
/// default is the built-in's alone.
#[test]
fn a_plugin_named_like_the_builtin_memorytool_gets_no_memory_by_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("memorytool.wasm");
    std::fs::copy(builtin_path("memorytool"), &copy).unwrap();
    let host = Host::new(Runtime::new(Limits::default(), None).unwrap());
    let e = host.admission().add_plugin_file(&copy).unwrap_err();
    assert!(e.to_string().contains("needs the \"memory\" capability"), "{e}");
    // With the built-ins loaded, the built-in holds its declared grant.
    let with_builtins = Host::new(Runtime::new(Limits::default(), None).unwrap());
    toolhost::builtin::add_builtins(with_builtins.admission()).unwrap();
    assert!(with_builtins.admission().grants().grant_config("memorytool").memory);
    assert!(!host.admission().grants().grant_config("memorytool").memory);
}

#[test]
fn imported_data_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let campaign = dir.path().join("mine.json");
    std::fs::write(
        &campaign,
        json!({
            "sessions": [{"id": "s-x", "title": "Test", "transcript": [["DM", "The zeppelin lands in Quillhaven."]]}],
            "entities": [{"id": "npc-zed", "name": "Zed the Tinker", "kind": "npc", "attributes": {"trade": "clockwork"}}],
            "facts": [{"id": "f-x", "text": "Zed repairs zeppelins for free.", "session_id": "s-x"}]
        })
        .to_string(),
    )
    .unwrap();
    let state = dir.path().join("state");
    let run = |args: &[&str]| toolhost().env("TOOLHOST_STATE_DIR", &state).args(args).output().unwrap();
    let o = run(&["memory", "import", campaign.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("imported 1 sessions, 1 entities"), "{}", stdout(&o));
    // A new process: the data is on disk.
    let o = run(&["call", "query_entities", r#"{"name":"zed"}"#]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["entities"][0]["attributes"]["trade"], "clockwork");
    let o = run(&["call", "search_facts", r#"{"query":"zeppelins"}"#]);
    assert!(stdout(&o).contains("f-x"), "{}", stdout(&o));
    // The demo campaign is still there too.
    let o = run(&["call", "get_summary", r#"{"entity_id":"npc-bartok"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(Path::new(&state).join("memory.sqlite3").exists());
}

#[test]
fn a_malformed_campaign_file_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"entities": [{"id": "x"}]}"#).unwrap();
    let o = toolhost()
        .env("TOOLHOST_STATE_DIR", dir.path())
        .args(["memory", "import", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a valid campaign file") && stderr(&o).contains("name"), "{}", stderr(&o));
}

#[test]
fn an_exported_campaign_moves_to_another_store_in_two_commands() {
    let dir = tempfile::tempdir().unwrap();
    let campaign = dir.path().join("mine.json");
    std::fs::write(
        &campaign,
        json!({"facts": [{"id": "f-move", "text": "The lighthouse keeper owes Lyra a favour.", "session_id": null}]})
            .to_string(),
    )
    .unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let run = |state: &Path, args: &[&str]| toolhost().env("TOOLHOST_STATE_DIR", state).args(args).output().unwrap();
    // No store yet: said so, and none is made.
    let o = run(&a, &["memory", "export"]);
    assert!(!o.status.success() && stderr(&o).contains("no memory store"), "{}", stderr(&o));
    assert!(!a.join("memory.sqlite3").exists());
    assert!(run(&a, &["memory", "import", campaign.to_str().unwrap()]).status.success());
    let moved = dir.path().join("moved.json");
    let o = run(&a, &["memory", "export", "--output", moved.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 facts") || stderr(&o).contains("facts to"), "{}", stderr(&o));
    let o = run(&b, &["memory", "import", moved.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&b, &["call", "search_facts", r#"{"query":"lighthouse"}"#]);
    assert!(stdout(&o).contains("f-move"), "{}", stdout(&o));
    // Both stores now export the same campaign (stdout).
    let (ea, eb) = (run(&a, &["memory", "export"]), run(&b, &["memory", "export"]));
    assert!(ea.status.success() && eb.status.success());
    let (va, vb): (Value, Value) =
        (serde_json::from_slice(&ea.stdout).unwrap(), serde_json::from_slice(&eb.stdout).unwrap());
    assert_eq!(va, vb);
    assert!(va["sessions"].as_array().is_some_and(|s| !s.is_empty()), "the demo campaign's sessions too");
}

#[test]
fn remember_records_a_fact_that_search_finds_after_a_restart_and_only_with_the_write_grant() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let run = |args: &[&str]| {
        toolhost().current_dir(dir.path()).env("TOOLHOST_STATE_DIR", &state).args(args).output().unwrap()
    };
    let o =
        run(&["call", "remember", r#"{"text":"Mirela hid the silver key under the bell.","session_id":"session-3"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("fact-"), "{v}");
    // Another process (a restart): the fact is found.
    let o = run(&["call", "search_facts", r#"{"query":"silver key"}"#]);
    let found: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(found["facts"][0]["id"], id.as_str(), "{found}");
    assert_eq!(found["facts"][0]["session_id"], "session-3", "{found}");
    // Not idempotent: the same words again are another fact.
    let o = run(&["call", "remember", r#"{"text":"Mirela hid the silver key under the bell."}"#]);
    let again: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_ne!(again["id"], id.as_str());

    // Granted `memory` only: the plugin loads and reads, and each write is
    // refused with the grant it needs.
    std::fs::write(dir.path().join("toolhost.yaml"), "plugins:\n  grants:\n    memorytool: {memory: true}\n").unwrap();
    let o = run(&["call", "search_facts", r#"{"query":"silver key"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["call", "remember", r#"{"text":"A write without the grant."}"#]);
    assert!(!o.status.success());
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert!(said.contains("memory_write"), "{said}");
    let o = run(&["call", "search_facts", r#"{"query":"without the grant"}"#]);
    assert!(!stdout(&o).contains("A write without the grant"), "{}", stdout(&o));
}

#[test]
fn a_campaign_moves_from_sqlite_to_postgres_in_two_commands_and_its_writes_outlive_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let (_, url) = crate::pg::database();
    let (sqlite, pg) = (dir.path().join("sqlite"), dir.path().join("pg"));
    std::fs::create_dir_all(&pg).unwrap();
    std::fs::write(pg.join("toolhost.yaml"), format!("memory:\n  url: {url}\n")).unwrap();
    let run = |at: &Path, args: &[&str]| {
        toolhost().current_dir(at).env("TOOLHOST_STATE_DIR", at.join("state")).args(args).output().unwrap()
    };
    std::fs::create_dir_all(&sqlite).unwrap();
    let o = run(&sqlite, &["call", "remember", r#"{"text":"The lighthouse keeper owes Lyra a favour."}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    let moved = dir.path().join("moved.json");
    let o = run(&sqlite, &["memory", "export", "-o", moved.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&pg, &["memory", "import", moved.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The same campaign, record for record, in either store.
    let (es, ep) = (run(&sqlite, &["memory", "export"]), run(&pg, &["memory", "export"]));
    assert!(ep.status.success(), "{}", stderr(&ep));
    let (vs, vp): (Value, Value) =
        (serde_json::from_slice(&es.stdout).unwrap(), serde_json::from_slice(&ep.stdout).unwrap());
    assert_eq!(vs, vp);
    let o = run(&pg, &["call", "search_facts", r#"{"query":"lighthouse keeper"}"#]);
    assert!(stdout(&o).contains("owes Lyra a favour"), "{}{}", stdout(&o), stderr(&o));
    // A write acknowledged by one process is there for the next.
    let o = run(
        &pg,
        &["call", "remember", r#"{"text":"The harbourmaster counts the drowned bells.","session_id":"session-1"}"#],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let id = serde_json::from_str::<Value>(&stdout(&o)).unwrap()["id"].as_str().unwrap().to_string();
    let o = run(&pg, &["call", "search_facts", r#"{"query":"drowned bells"}"#]);
    let found: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(found["facts"][0]["id"], id.as_str(), "{found}");
    // Nothing went to a SQLite file.
    assert!(!pg.join("state").join("memory.sqlite3").exists());
}

#[test]
fn a_memory_store_set_twice_or_unreachable_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let run = |cfg: &str, args: &[&str]| {
        std::fs::write(dir.path().join("toolhost.yaml"), cfg).unwrap();
        toolhost()
            .current_dir(dir.path())
            .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = run("memory:\n  path: ./m.sqlite3\n  url: postgres://localhost/x\n", &["tools"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("set either path (a SQLite file) or url (PostgreSQL), not both"), "{}", stderr(&o));
    let o = run("memory:\n  url: mysql://root:hunter2@db/x\n", &["tools"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is not a PostgreSQL URL") && !stderr(&o).contains("hunter2"), "{}", stderr(&o));
    let o = run("memory:\n  url: postgres://toolhost:${NO_SUCH_PG_PASSWORD}@localhost/x\n", &["tools"]);
    assert!(stderr(&o).contains("memory.url: environment variable NO_SUCH_PG_PASSWORD is not set"), "{}", stderr(&o));
    // A socket nobody listens on: the host does not start, says where it
    // tried, and does not print the password.
    let nowhere = dir.path().join("no-server");
    std::fs::create_dir_all(&nowhere).unwrap();
    let cfg = format!("memory:\n  url: postgresql://toolhost:hunter2@/x?host={}\n", nowhere.display());
    let o = run(&cfg, &["call", "search_facts", r#"{"query":"dragon"}"#]);
    assert!(!o.status.success());
    let said = stderr(&o);
    assert!(said.contains("opening the memory store postgresql://toolhost:***@/x"), "{said}");
    assert!(!said.contains("hunter2"), "{said}");
}

/// `sslmode` in `memory.url` and `cluster.url`, as libpq names it: with
/// `verify-full` and the CA in `sslrootcert` the connection is TLS and the
/// server's certificate checks; a certificate that does not check (no
/// `sslrootcert`: the system's roots do not know this CA) is refused, and
/// so is a plain connection to a server that takes TLS only.
#[test]
fn postgres_over_tls_verifies_the_server_and_a_server_it_cannot_verify_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = crate::pg::database();
    let pg = crate::pg::cluster();
    let run = |url: &str, args: &[&str]| {
        std::fs::write(dir.path().join("cluster.key"), [7u8; 32]).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.path().join("cluster.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(
            dir.path().join("toolhost.yaml"),
            format!("memory:\n  url: {url}\ncluster:\n  url: {url}\n  secret_key_file: cluster.key\n"),
        )
        .unwrap();
        toolhost()
            .current_dir(dir.path())
            .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
            .args(args)
            .output()
            .unwrap()
    };
    let verified = pg.tls_url(&db, &format!("sslmode=verify-full&sslrootcert={}", pg.ca.display()));
    let o = run(&verified, &["memory", "export"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let exported: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!exported["entities"].as_array().unwrap().is_empty(), "the demo campaign, over TLS: {exported}");
    // The control plane takes the same URL.
    let o = run(&verified, &["cluster", "status", "--json"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(serde_json::from_slice::<Value>(&o.stdout).unwrap()["hosts"], serde_json::json!([]));
    // No host has joined it: a secret is not written (the first host's key
    // is to be the fleet's).
    let o = run(&verified, &["secret", "set", "weather", "api_key"]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains("no host has joined this control plane yet"), "{}", stderr(&o));

    // Not a CA it was told of: refused, the reason named, no password shown.
    let o = run(&pg.tls_url(&db, "sslmode=require"), &["memory", "export"]);
    let said = stderr(&o);
    assert!(!o.status.success());
    assert!(said.contains("invalid peer certificate") && said.contains("sslrootcert=/path/to/ca.pem"), "{said}");
    assert!(!said.contains(&pg.password), "{said}");
    // The right CA, the wrong name: the host name is verified too.
    let wrong_name = format!(
        "postgresql://toolhost:{}@wrong.test:{}/{db}?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}",
        pg.password,
        pg.port,
        pg.ca.display()
    );
    let o = run(&wrong_name, &["memory", "export"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not name the host in the URL"), "{}", stderr(&o));
    // No TLS: this server refuses it.
    let o = run(&pg.tls_url(&db, ""), &["memory", "export"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no encryption"), "{}", stderr(&o));
    let o = run(&pg.tls_url(&db, "sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem"), &["memory", "export"]);
    assert!(!o.status.success() && stderr(&o).contains("sslrootcert=/nonexistent/ca.pem"), "{}", stderr(&o));
}
