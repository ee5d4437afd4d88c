//! The example marketplace plugin `examples/weather` end to end (issue
//! #29), through the binary a user runs: signed with what it asks for,
//! held until its secret is set, loaded by `toolhost secret set` on a
//! serving host with no restart, answering through a granted HTTPS origin
//! (the test's own CA and `plugins.http_resolve`), its key sent and never
//! written to the audit, and refused, in words naming the origin, wherever
//! its grant does not reach.

use crate::common::{run_strict, stderr, stdout, toolhost};
use crate::http::https_origin;
use crate::live::{Client, Watcher, spawn_serving_logged};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use toolhost_test_artifacts::WEATHER_PATH;

const KEY: &str = "sk-weather-test-0123456789";

/// The config: alice trusted, only `weather`, the origin's CA and pins,
/// `grants` for weather, its base_url.
fn config(dir: &Path, port: u16, ca: &Path, grants: &[String], base_url: &str) {
    let public: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("keys/alice.pub")).unwrap()).unwrap();
    let yaml = format!(
        "trust:\n  keys:\n    - name: alice\n      public_key: {pk}\nplugins:\n  builtins: false\n  files: [weather.wasm]\n  http_ca_files: [{ca:?}]\n  http_resolve:\n    \"api.example.test:{port}\": \"127.0.0.1:{port}\"\n    \"api.example.test:{other}\": \"127.0.0.1:{port}\"\n  grants:\n    weather:\n      http: {grants}\n  config:\n    weather:\n      base_url: {base_url:?}\n",
        pk = public["public_key"].as_str().unwrap(),
        other = port + 1,
        grants = serde_json::to_string(grants).unwrap(),
    );
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
}

/// `toolhost secret set weather api_key`, the value on stdin.
fn set_secret(dir: &Path, value: &str) -> std::process::Output {
    let mut child = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env_remove("TOOLHOST_ALLOW_UNSIGNED")
        .args(["secret", "set", "weather", "api_key"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{value}\n").as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

async fn weather_now(c: &Client) -> Result<rmcp::model::CallToolResult, rmcp::ServiceError> {
    let args = json!({"latitude": 52.52, "longitude": 13.41});
    c.call_tool(CallToolRequestParams::new("weather_now").with_arguments(args.as_object().unwrap().clone())).await
}

fn text_of(r: &rmcp::model::CallToolResult) -> String {
    serde_json::to_string(r).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weather_example_is_held_for_its_secret_then_answers_through_its_grant_only() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let o = https_origin(dir);
    let p = o.port;
    let api = format!("https://api.example.test:{p}");

    // The author signs it with what it asks for; the reviewer sees it.
    assert!(run_strict(dir, &["keygen", "alice", "--out", "keys"]).status.success());
    std::fs::copy(WEATHER_PATH, dir.join("weather.wasm")).unwrap();
    let signed = run_strict(
        dir,
        &[
            "sign",
            "weather.wasm",
            "--key",
            "keys/alice.key",
            "--version",
            "0.1.0",
            "--http-host",
            "https://api.open-meteo.com",
            "--http-host",
            &api,
            "--secret",
            "api_key",
        ],
    );
    assert!(signed.status.success(), "{}", stderr(&signed));
    config(dir, p, &o.ca, std::slice::from_ref(&api), &api);
    let verify = run_strict(dir, &["verify", "weather.wasm"]);
    assert!(
        stdout(&verify).contains(&format!("asks to reach over HTTP: https://api.open-meteo.com, {api}")),
        "{}",
        stdout(&verify)
    );
    assert!(stdout(&verify).contains("asks for the secret api_key"), "{}", stdout(&verify));
    let inspect = run_strict(dir, &["inspect", "weather.wasm", "--json"]);
    let report: Value = serde_json::from_str(&stdout(&inspect)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&inspect)));
    assert_eq!(
        report["manifest_asks"]["http_hosts"],
        json!([{"origin": "https://api.open-meteo.com", "granted": false}, {"origin": api, "granted": true}])
    );
    assert_eq!(report["manifest_asks"]["secrets"], json!(["api_key"]));

    // Serving, strict: held, with the command that loads it.
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let mut cmd = toolhost();
    cmd.current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env_remove("TOOLHOST_ALLOW_UNSIGNED")
        .env("TOOLHOST_LOG", "debug")
        .args(["serve", "--http", "127.0.0.1:0"]);
    let (_serving, url) = spawn_serving_logged(cmd, log);
    let list = run_strict(dir, &["plugin", "list"]);
    assert!(
        stdout(&list).contains("weather: held back: plugin \"weather\" is held: it needs the secret api_key, not set; set it with `toolhost secret set weather api_key`"),
        "{}{}",
        stdout(&list),
        stderr(&list)
    );
    let c = Watcher::default().serve(StreamableHttpClientTransport::from_uri(format!("{url}/mcp"))).await.unwrap();
    let err = weather_now(&c).await.map(|r| text_of(&r)).unwrap_err().to_string();
    assert!(err.contains("weather_now"), "not listed while held: {err}");

    // The key, set while the host serves: loaded, no restart.
    let set = set_secret(dir, KEY);
    assert!(set.status.success(), "{}", stderr(&set));
    assert!(stdout(&set).contains("weather: loaded"), "{}", stdout(&set));
    let listed = run_strict(dir, &["secret", "list"]);
    assert!(stdout(&listed).contains("weather") && stdout(&listed).contains("api_key"), "{}", stdout(&listed));
    assert!(!stdout(&listed).contains(KEY), "list never shows a value");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.join("state/secrets.json")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let r = weather_now(&c).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{}", text_of(&r));
    assert!(text_of(&r).contains("12.5"), "{}", text_of(&r));
    let requests = std::fs::read_to_string(dir.join("requests.log")).unwrap();
    assert!(requests.contains(&format!("auth=Bearer {KEY}")), "the key went to the granted origin: {requests}");
    assert!(requests.contains("/v1/forecast?latitude=52.52&longitude=13.41"), "{requests}");

    // The audit lists the origin contacted, with counts, and not the key.
    let audit = std::fs::read_to_string(dir.join("state/audit.jsonl")).unwrap();
    let call: Value = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|r| r["event"] == "call" && r["tool"] == "weather_now" && r["outcome"] == "ok")
        .unwrap_or_else(|| panic!("no ok weather_now record: {audit}"));
    assert_eq!(call["http"][0]["origin"], format!("https://api.example.test:{p}"), "{call}");
    assert_eq!(call["http"][0]["requests"], 1, "{call}");
    assert!(call["http"][0]["bytes_in"].as_u64().unwrap() > 0, "{call}");
    // Issue #52, item 12: the capability it used is named (it was `[]`).
    assert_eq!(call["capabilities_used"], json!(["http"]), "{call}");
    assert!(!audit.contains(KEY), "the key is not in the audit");
    assert!(!std::fs::read_to_string(dir.join("serve.log")).unwrap().contains(KEY), "nor in the host's log");

    // Pointed elsewhere (another port, plain http, a look-alike name): the
    // same refusal, naming the origin. Through `toolhost call`, which reads
    // the same secrets.
    for (base, origin) in [
        (format!("https://api.example.test:{}", p + 1), format!("https://api.example.test:{}", p + 1)),
        (format!("http://api.example.test:{p}"), format!("http://api.example.test:{p}")),
        (format!("https://api.example.test.evil.test:{p}"), format!("https://api.example.test.evil.test:{p}")),
    ] {
        config(dir, p, &o.ca, std::slice::from_ref(&api), &base);
        let out = run_strict(dir, &["call", "weather_now", r#"{"latitude": 1, "longitude": 2}"#]);
        assert!(!out.status.success(), "{base}: {}", stdout(&out));
        assert!(
            stderr(&out).contains(&format!("{origin} is not granted to plugin weather")),
            "{base}: {}",
            stderr(&out)
        );
    }
    // No grant at all: the plugin imports wasi:http, so it does not load,
    // and says which key grants it.
    config(dir, p, &o.ca, &[], &api);
    let out = run_strict(dir, &["call", "weather_now", r#"{"latitude": 1, "longitude": 2}"#]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("plugins.grants.weather.http"), "{}", stderr(&out));
}

/// `toolhost call TOOL ARGS` in `dir` (unsigned test plugins allowed), with
/// the host's log at debug level.
fn call(dir: &Path, tool: &str, args: Value) -> std::process::Output {
    toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env("TOOLHOST_LOG", "debug")
        .args(["call", tool, &args.to_string()])
        .output()
        .unwrap()
}

#[test]
fn a_secret_is_its_plugins_alone_and_never_written_where_the_host_writes() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    for name in ["hostile", "other"] {
        std::fs::copy(toolhost_test_artifacts::HOSTILE_PATH, dir.join(format!("{name}.wasm"))).unwrap();
    }
    let yaml = "plugins:\n  builtins: false\n  files: [hostile.wasm, other.wasm]\n  config:\n    hostile:\n      units: metric\n      level: 3\n";
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
    let mut child = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["secret", "set", "hostile", "api_key"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(KEY.as_bytes()).unwrap();
    let set = child.wait_with_output().unwrap();
    assert!(set.status.success(), "{}", stderr(&set));
    assert!(stdout(&set).contains("no running host found"), "{}", stdout(&set));

    let value = |tool: &str, key: &str| {
        let o = call(dir, tool, json!({"key": key}));
        assert!(o.status.success(), "{tool} {key}: {}", stderr(&o));
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()["value"].clone()
    };
    // Its own config (as text) and its own secret.
    assert_eq!(value("read_config", "units"), "metric");
    assert_eq!(value("read_config", "level"), "3");
    assert_eq!(value("read_config", "api_key"), KEY);
    // The other plugin (its tools exposed as other_<tool>) reads neither.
    assert_eq!(value("other_read_config", "api_key"), Value::Null);
    assert_eq!(value("other_read_config", "units"), Value::Null);

    // Its plugin puts the secret in a log line, progress, stdout, stderr
    // and its error: the caller and the host see its name, never the value.
    let o = call(dir, "leak_secret", json!({"key": "api_key"}));
    assert!(!o.status.success());
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(err.contains("refused with key [secret api_key] (try again)"), "{err}");
    assert!(err.contains("the secret is [secret api_key]!"), "the log line, redacted: {err}");
    assert!(!out.contains(KEY) && !err.contains(KEY), "{out}{err}");
    let audit = std::fs::read_to_string(dir.join("state/audit.jsonl")).unwrap();
    assert!(audit.contains("leak_secret"), "{audit}");
    assert!(!audit.contains(KEY), "{audit}");

    // One namespace: a config value named like a secret is refused, both ways.
    std::fs::write(dir.join("toolhost.yaml"), format!("{yaml}      api_key: plain\n")).unwrap();
    let o = call(dir, "read_config", json!({"key": "units"}));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("share one namespace"), "{}", stderr(&o));
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
    let o = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["secret", "set", "hostile", "units"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("plugins.config.hostile.units is set in the config file"), "{}", stderr(&o));

    // Removed: gone from the list, and from the plugin's next call.
    let o = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["secret", "rm", "hostile", "api_key"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(value("read_config", "api_key"), Value::Null);
}

/// What an MCP client heard besides results: progress and log messages.
#[derive(Clone, Default)]
struct Heard(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for Heard {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.lock().unwrap().push(serde_json::to_string(&params).unwrap());
    }

    #[allow(deprecated)] // MCP logging (SEP-2577): still what the host sends plugins' log lines as.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.lock().unwrap().push(serde_json::to_string(&params).unwrap());
    }
}

/// RFC 3986 percent-encoding: every byte but the unreserved ones as `%XX`.
fn percent_encoded(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether `text` holds `value` in one of the forms redaction covers: as
/// it is or in any case, percent-encoded (hex digits of either case).
fn shows(text: &str, value: &str) -> bool {
    let text = text.to_lowercase();
    [value.to_lowercase(), percent_encoded(value).to_lowercase()].iter().any(|form| text.contains(form.as_str()))
}

/// `toolhost secret ARGS` in `dir`, `value` on stdin: its stdout.
fn secret(dir: &Path, args: &[&str], value: Option<&str>) -> String {
    let mut child = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .arg("secret")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(value.unwrap_or_default().as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "secret {args:?}: {}", stderr(&o));
    stdout(&o)
}

/// Issue #47, finding 5: the plugin reads its secret, the operator rotates
/// it (then, in a second call, removes it) while the call runs, and the
/// plugin then puts the value it read, in every tested form, in a log
/// line, progress, stdout, stderr and its error. Neither the old value nor
/// the new one reaches the MCP client, the host's log, the audit (error
/// text included) or the page's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_or_removed_mid_call_is_redacted_wherever_the_host_writes() {
    const OLD: &str = "sk-LIVE+abc/XYZ=123456";
    const NEW: &str = "sk-NEXT+def/UVW=654321";
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::copy(toolhost_test_artifacts::HOSTILE_PATH, dir.join("hostile.wasm")).unwrap();
    // The error text in the audit too, and a deadline above the sleep.
    let yaml = "plugins:\n  builtins: false\n  files: [hostile.wasm]\naudit:\n  include_arguments: true\nbudget:\n  deep_ms: 10000\n  pin: { leak_secret: deep }\n";
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
    secret(dir, &["set", "hostile", "api_key"], Some(OLD));

    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let mut cmd = toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).env("TOOLHOST_LOG", "debug").args([
        "serve",
        "--http",
        "127.0.0.1:0",
    ]);
    let (_serving, url) = spawn_serving_logged(cmd, log);
    let heard = Heard::default();
    let c = heard.clone().serve(StreamableHttpClientTransport::from_uri(format!("{url}/mcp"))).await.unwrap();
    let reads = || heard.0.lock().unwrap().iter().filter(|m| m.contains(r#""message":"read""#)).count();

    let mut results = Vec::new();
    // Rotated, then removed, while the call sleeps on the value it read.
    let changes: [(&[&str], Option<&str>); 2] =
        [(&["set", "hostile", "api_key"], Some(NEW)), (&["rm", "hostile", "api_key"], None)];
    for (round, (args, value)) in changes.into_iter().enumerate() {
        let args_ = json!({"key": "api_key", "ms": 2000}).as_object().unwrap().clone();
        let peer = c.peer().clone();
        let call = tokio::spawn(async move {
            peer.call_tool(CallToolRequestParams::new("leak_secret").with_arguments(args_)).await.unwrap()
        });
        crate::live::eventually("the call read its secret", async || reads() > round).await;
        let (d, args, value) = (dir.to_path_buf(), args.to_vec(), value.map(str::to_string));
        let said = tokio::task::spawn_blocking(move || secret(&d, &args, value.as_deref())).await.unwrap();
        assert!(said.contains("the running host (pid"), "the host was told: {said}");
        assert!(!call.is_finished(), "the change landed while the call ran");
        let r = call.await.unwrap();
        assert_eq!(r.is_error, Some(true), "{r:?}");
        results.push(text_of(&r));
    }
    for r in &results {
        assert!(r.contains("refused with key [secret api_key] (try again)"), "redacted, not dropped: {r}");
    }
    let results = results.join("\n");
    let heard = heard.0.lock().unwrap().join("\n");
    assert!(heard.contains("half way with [secret api_key]"), "the progress it reported: {heard}");
    let audit = std::fs::read_to_string(dir.join("state/audit.jsonl")).unwrap();
    assert!(audit.contains("refused with key [secret api_key]"), "the error text, as the audit keeps it: {audit}");
    let page = reqwest::get(format!("{url}/ui/api/state")).await.unwrap().text().await.unwrap();
    assert!(page.contains("leak_secret"), "{page}");
    c.cancel().await.unwrap();
    let log = std::fs::read_to_string(dir.join("serve.log")).unwrap();
    assert!(log.contains("stderr has [secret api_key]"), "the guest's stderr, logged: {log}");
    for (what, text) in
        [("results", &results), ("notifications", &heard), ("audit", &audit), ("page", &page), ("log", &log)]
    {
        for value in [OLD, NEW] {
            assert!(!shows(text, value), "{what} shows {value}: {text}");
        }
    }
}

/// Issue #47, finding 7: 20 `toolhost secret set` at once, ten for each of
/// two plugins, all exit 0 and all 20 values are kept (each a
/// read-modify-write of one file: they take turns under its lock).
#[test]
fn twenty_concurrent_secret_sets_keep_all_twenty_values() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("toolhost.yaml"), "plugins:\n  builtins: false\n").unwrap();
    let set = |plugin: &str, i: usize| {
        let mut child = toolhost()
            .current_dir(dir)
            .env("TOOLHOST_STATE_DIR", dir.join("state"))
            .args(["secret", "set", plugin, &format!("key{i:02}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(format!("value-{plugin}-{i:02}").as_bytes()).unwrap();
        child
    };
    // Every process started before any is waited for.
    let children: Vec<_> = (0..20).map(|i| set(["weather", "wiki"][i % 2], i)).collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let list = run_strict(dir, &["secret", "list", "--json"]);
    assert!(list.status.success(), "{}", stderr(&list));
    let listed: Vec<Value> = serde_json::from_str(&stdout(&list)).unwrap();
    let names: Vec<String> =
        listed.iter().map(|s| format!("{}/{}", s["plugin"].as_str().unwrap(), s["name"].as_str().unwrap())).collect();
    let mut want: Vec<String> = (0..20).map(|i| format!("{}/key{i:02}", ["weather", "wiki"][i % 2])).collect();
    want.sort();
    assert_eq!(names, want, "every secret kept");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("state/secrets.json")).unwrap()).unwrap();
    for i in 0..20 {
        let plugin = ["weather", "wiki"][i % 2];
        assert_eq!(file["plugins"][plugin][format!("key{i:02}")]["value"], format!("value-{plugin}-{i:02}"));
    }
    // The file is still private and whole.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.join("state/secrets.json")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// In `dir`: the HTTPS origin, alice's key, weather signed by her asking
/// for that origin and the secret `api_key`, and the config granting it
/// the origin. Returns the origin (kept alive) and its URL.
fn signed_weather_table(dir: &Path) -> (crate::http::Origin, String) {
    let o = https_origin(dir);
    let api = format!("https://api.example.test:{}", o.port);
    assert!(run_strict(dir, &["keygen", "alice", "--out", "keys"]).status.success());
    std::fs::copy(WEATHER_PATH, dir.join("weather.wasm")).unwrap();
    let signed = run_strict(
        dir,
        &["sign", "weather.wasm", "--key", "keys/alice.key", "--http-host", &api, "--secret", "api_key"],
    );
    assert!(signed.status.success(), "{}", stderr(&signed));
    config(dir, o.port, &o.ca, std::slice::from_ref(&api), &api);
    (o, api)
}

/// Issue #52, item 5: `doctor` reads the secrets a start would read. On a
/// table whose plugin waits for a secret it says so; once the secret is set
/// (in the state directory) it passes, as `serve` would load the plugin.
#[test]
fn doctor_passes_a_table_once_its_plugins_secret_is_set() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (_origin, api) = signed_weather_table(dir);
    // Item 9: the command to run, with the secret's name, never a literal NAME.
    for args in [&["verify", "weather.wasm"][..], &["inspect", "weather.wasm"][..]] {
        let out = run_strict(dir, args);
        assert!(stdout(&out).contains("toolhost secret set weather api_key"), "{args:?}: {}", stdout(&out));
        assert!(!stdout(&out).contains("NAME"), "{args:?}: {}", stdout(&out));
    }
    let doctor = |dir: &Path| {
        let out = run_strict(dir, &["doctor", "--json"]);
        let report: Value =
            serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
        (out.status.success(), report)
    };
    let (ok, report) = doctor(dir);
    assert!(!ok, "held for its secret: {report}");
    assert!(report.to_string().contains("api_key"), "{report}");
    // Item 17: the reviewer's `grants` says what waits, and why.
    let grants = stdout(&run_strict(dir, &["grants"]));
    assert!(grants.contains("weather: held back: ") && grants.contains("api_key"), "{grants}");

    assert!(set_secret(dir, KEY).status.success());
    let (ok, report) = doctor(dir);
    assert!(ok, "the secret is set: {report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert!(!report.to_string().contains("not set"), "{report}");
    assert!(!report.to_string().contains(KEY), "never the value");
    // Item 17: per plugin, the secrets it asks for and whether each is set
    // (never a value), and the origins it asks to reach, granted or not.
    let grants = stdout(&run_strict(dir, &["grants"]));
    assert!(grants.contains("secrets:  api_key (set)"), "{grants}");
    assert!(grants.contains(&format!("reaches:  {api} (granted)")), "{grants}");
    assert!(!grants.contains(KEY) && !grants.contains("held back"), "{grants}");
}

/// Issue #52, item 1: a plugin added at run time and held for its secret
/// is remembered as added at run time: the secret loads it, `plugin list`
/// says where it came from, and a restart brings it back.
#[test]
fn a_plugin_added_at_run_time_and_held_for_its_secret_survives_a_restart() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (_origin, _) = signed_weather_table(dir);
    // Not in the config: only added at run time.
    let yaml = std::fs::read_to_string(dir.join("toolhost.yaml")).unwrap();
    std::fs::write(dir.join("toolhost.yaml"), yaml.replace("files: [weather.wasm]", "files: []")).unwrap();
    let serve = || {
        let mut cmd = toolhost();
        cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).env_remove("TOOLHOST_ALLOW_UNSIGNED").args([
            "serve",
            "--http",
            "127.0.0.1:0",
        ]);
        spawn_serving_logged(cmd, Stdio::null())
    };
    let source_of_weather = || {
        let list = run_strict(dir, &["plugin", "list", "--json"]);
        let list: Value = serde_json::from_str(&stdout(&list)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&list)));
        let weather = list["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "weather").cloned();
        (weather.map(|w| w["source"].clone()), list)
    };

    let (host, _) = serve();
    let added = run_strict(dir, &["plugin", "add", &dir.join("weather.wasm").display().to_string()]);
    let said = format!("{}{}", stdout(&added), stderr(&added));
    assert!(said.contains("api_key"), "held for its secret: {said}");
    assert!(set_secret(dir, KEY).status.success());
    let (source, list) = source_of_weather();
    assert_eq!(source, Some(json!("runtime")), "loaded by the secret, added at run time: {list}");

    drop(host);
    let (_host, _) = serve();
    let (source, list) = source_of_weather();
    assert_eq!(source, Some(json!("runtime")), "back after a restart: {list}");
}

/// Issue #52, item 3: `inspect` of a new version asking to reach an origin
/// the running version did not ask for, and the grant does not cover, said
/// "loads: yes" while `plugin add` held it. Now, with a host serving the
/// plugin, `inspect` judges it as `plugin add` does (exit 3, the same
/// reason); with no host running it is a first install, which loads.
#[test]
fn inspect_judges_an_upgrade_asking_a_new_origin_as_plugin_add_does() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (origin, api) = signed_weather_table(dir);
    assert!(set_secret(dir, KEY).status.success());
    // The new version asks for one more origin, which the grant does not cover.
    let more = format!("https://api.example.test:{}", origin.port + 1);
    std::fs::create_dir_all(dir.join("v2")).unwrap();
    std::fs::copy(WEATHER_PATH, dir.join("v2/weather.wasm")).unwrap();
    let signed = run_strict(
        dir,
        &[
            "sign",
            "v2/weather.wasm",
            "--key",
            "keys/alice.key",
            "--version",
            "2.0.0",
            "--http-host",
            &api,
            "--http-host",
            &more,
            "--secret",
            "api_key",
        ],
    );
    assert!(signed.status.success(), "{}", stderr(&signed));
    let inspect = || run_strict(dir, &["inspect", "--probes", "0", "v2/weather.wasm"]);
    let mut cmd = toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).env_remove("TOOLHOST_ALLOW_UNSIGNED").args([
        "serve",
        "--http",
        "127.0.0.1:0",
    ]);
    let (host, _) = spawn_serving_logged(cmd, Stdio::null());
    let judged = inspect();
    let said = stdout(&judged);
    assert_eq!(judged.status.code(), Some(3), "{said}{}", stderr(&judged));
    let line = said.lines().find(|l| l.starts_with("loads:")).unwrap_or_else(|| panic!("{said}"));
    assert!(line.contains("no") && line.contains("as an upgrade of the version host pid"), "{line}");
    assert!(line.contains(&more) && line.contains("the new one is held"), "{line}");
    let added = run_strict(dir, &["plugin", "add", &dir.join("v2/weather.wasm").display().to_string()]);
    assert!(!added.status.success());
    assert!(stderr(&added).contains(&format!("asks to reach {more} over HTTP")), "{}", stderr(&added));
    // No host serving it: a first install, which this config loads.
    drop(host);
    let first = inspect();
    assert_eq!(first.status.code(), Some(0), "{}{}", stdout(&first), stderr(&first));
    assert!(stdout(&first).contains("loads:    yes"), "{}", stdout(&first));
}

#[test]
fn review_shows_what_an_upgrade_changes_and_that_plugin_add_would_hold_it() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (origin, api) = signed_weather_table(dir);
    assert!(set_secret(dir, KEY).status.success());
    let more = format!("https://api.example.test:{}", origin.port + 1);
    std::fs::create_dir_all(dir.join("v2")).unwrap();
    std::fs::copy(WEATHER_PATH, dir.join("v2/weather.wasm")).unwrap();
    let signed = run_strict(
        dir,
        &[
            "sign",
            "v2/weather.wasm",
            "--key",
            "keys/alice.key",
            "--version",
            "2.0.0",
            "--http-host",
            &api,
            "--http-host",
            &more,
            "--secret",
            "api_key",
            "--secret",
            "region",
        ],
    );
    assert!(signed.status.success(), "{}", stderr(&signed));
    // No host serving and no --against: nothing to compare with, said so.
    let alone = run_strict(dir, &["review", "weather", "v2/weather.wasm"]);
    assert_eq!(alone.status.code(), Some(1));
    assert!(stderr(&alone).contains("pass --against"), "{}", stderr(&alone));
    let mut cmd = toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).env_remove("TOOLHOST_ALLOW_UNSIGNED").args([
        "serve",
        "--http",
        "127.0.0.1:0",
    ]);
    let (_host, _) = spawn_serving_logged(cmd, Stdio::null());
    let review = run_strict(dir, &["review", "weather", "v2/weather.wasm"]);
    let said = stdout(&review);
    assert_eq!(review.status.code(), Some(3), "{said}{}", stderr(&review));
    assert!(said.contains("serving on host pid"), "{said}");
    assert!(said.contains(&format!("+ asks    HTTP to {more}")), "{said}");
    assert!(said.contains("+ asks    secret region"), "{said}");
    assert!(!said.contains("- asks"), "{said}");
    assert!(said.contains("(unchanged)"), "the same key signed both: {said}");
    assert!(said.lines().any(|l| l.starts_with("held:") && l.contains(&more)), "{said}");
    // The JSON says the same, and the version serving is the one signed 1st.
    let json = run_strict(dir, &["review", "weather", "v2/weather.wasm", "--json"]);
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["new"]["version"], "2.0.0");
    assert_eq!(v["asks_added"], json!([format!("HTTP to {more}"), "secret region"]));
    assert_eq!(v["publisher_changed"], false);
    assert!(v["held"].as_str().unwrap().contains(&more), "{v}");
    // The same component against itself: nothing changes, and it loads.
    let same = run_strict(dir, &["review", "weather", "weather.wasm"]);
    assert_eq!(same.status.code(), Some(0), "{}{}", stdout(&same), stderr(&same));
    assert!(stdout(&same).contains("nothing a DM decides by changes"), "{}", stdout(&same));
    // A file of another plugin is not a version of this one.
    let other = run_strict(dir, &["review", "dice", "v2/weather.wasm"]);
    assert_eq!(other.status.code(), Some(1));
    assert!(stderr(&other).contains("is plugin \"weather\", not \"dice\""), "{}", stderr(&other));
}
