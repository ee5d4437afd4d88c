//! Outgoing HTTP for plugins (issue #29), through the binary: the
//! `webclient` test plugin against a local origin (`tests/peers/http_origin.py`)
//! serving HTTPS with a certificate from the test's own CA, pinned by
//! `plugins.http_resolve` and trusted through `plugins.http_ca_files`.
//! Each refusal is asserted by its words, so a DNS failure cannot pass
//! for one.

use crate::common::{stderr, stdout, toolhost};
use crate::live::Proc;
use crate::peers::{free_port, peers_dir, python, spawn_listening};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use toolhost_test_artifacts::WEBCLIENT_PATH;

/// A CA and a certificate for api.example.test and other.example.test,
/// made with openssl in `dir`; returns (ca, cert, key).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    certificates_for(dir, "DNS:api.example.test,DNS:other.example.test")
}

/// A CA and a certificate for `names` (a subjectAltName value), made with
/// openssl in `dir`; returns (ca, cert, key).
pub(crate) fn certificates_for(dir: &Path, names: &str) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let o = Command::new("openssl").current_dir(dir).args(args).output().unwrap();
        assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=toolhost test CA"],
        &["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=api.example.test"]].concat());
    std::fs::write(
        dir.join("leaf.ext"),
        format!(
            "subjectAltName={names}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
    (dir.join("ca.pem"), dir.join("leaf.pem"), dir.join("leaf.key"))
}

/// The origin, over HTTPS, its requests logged to `dir/requests.log`.
pub(crate) struct Origin {
    _server: Proc,
    pub(crate) port: u16,
    pub(crate) ca: PathBuf,
}

/// [`Origin`] serving HTTPS from `dir` (its requests in `dir/requests.log`).
pub(crate) fn https_origin(dir: &Path) -> Origin {
    let (ca, cert, key) = certificates(dir);
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.current_dir(dir).arg(peers_dir().join("http_origin.py")).arg(port.to_string()).arg(&cert).arg(&key);
    Origin { _server: spawn_listening(cmd, port), port, ca }
}

fn http_origin(dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.current_dir(dir).arg(peers_dir().join("http_origin.py")).arg(port.to_string());
    (spawn_listening(cmd, port), port)
}

/// A config loading only `webclient`, granted `grants`, with the origin's
/// CA trusted and api.example.test and other.example.test pinned to it.
fn config(dir: &Path, origin: Option<&Origin>, grants: &[String], extra: &str) {
    let mut yaml = format!("plugins:\n  builtins: false\n  files: [{WEBCLIENT_PATH:?}]\n");
    if let Some(o) = origin {
        yaml += &format!(
            "  http_ca_files: [{:?}]\n  http_resolve:\n    \"api.example.test:{p}\": \"127.0.0.1:{p}\"\n    \"other.example.test:{p}\": \"127.0.0.1:{p}\"\n",
            o.ca,
            p = o.port
        );
    }
    if !grants.is_empty() {
        yaml += &format!("  grants:\n    webclient:\n      http: {}\n", serde_json::to_string(grants).unwrap());
    }
    yaml += extra;
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
}

/// `toolhost call get ARGS` in `dir`.
fn get(dir: &Path, args: Value) -> std::process::Output {
    toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["call", "get", &args.to_string()])
        .output()
        .unwrap()
}

fn answer(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

fn requests(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("requests.log")).unwrap_or_default()
}

#[test]
fn a_granted_origin_is_reached_over_tls_and_nothing_else_is() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let o = https_origin(dir);
    let p = o.port;
    let api = format!("https://api.example.test:{p}");
    config(dir, Some(&o), std::slice::from_ref(&api), "");
    let a = answer(&get(dir, serde_json::json!({"url": format!("{api}/v1/forecast"), "bearer": "k-123"})));
    assert_eq!(a["status"], 200, "{a}");
    let body: Value = serde_json::from_str(a["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["current"]["temperature_2m"], 12.5);
    assert_eq!(body["authorization"], "Bearer k-123");
    assert!(requests(dir).contains(&format!("host=api.example.test:{p}")), "{}", requests(dir));

    // Another port, plain http for an https grant, a name that only
    // starts like the granted one: each the same refusal, naming the origin.
    for (url, origin) in [
        (format!("https://api.example.test:{}/v1/forecast", p + 1), format!("https://api.example.test:{}", p + 1)),
        (format!("http://api.example.test:{p}/v1/forecast"), format!("http://api.example.test:{p}")),
        (format!("https://api.example.test.evil.test:{p}/"), format!("https://api.example.test.evil.test:{p}")),
    ] {
        let out = get(dir, serde_json::json!({"url": url}));
        assert!(!out.status.success(), "{url}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("{origin} is not granted to plugin webclient")), "{url}: {err}");
    }
    let before = requests(dir).lines().count();
    // Redirects are followed by the guest, each hop checked: to the cloud
    // metadata address, to another host of the same server.
    for to in ["http://169.254.169.254/latest/meta-data/", &format!("https://other.example.test:{p}/")] {
        let url = format!("{api}/redirect?to={to}");
        let out = get(dir, serde_json::json!({"url": url, "follow": 1}));
        assert!(!out.status.success(), "{to}: {}", stdout(&out));
        assert!(stderr(&out).contains("is not granted to plugin webclient"), "{to}: {}", stderr(&out));
    }
    assert_eq!(requests(dir).lines().count(), before + 2, "only the redirects themselves reached the origin");
}

#[test]
fn a_plugin_importing_wasi_http_without_a_grant_does_not_load() {
    let t = tempfile::tempdir().unwrap();
    config(t.path(), None, &[], "");
    let out = get(t.path(), serde_json::json!({"url": "https://example.org/"}));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("imports wasi:http/types") && err.contains("needs the \"http\" capability"), "{err}");
}

#[test]
fn a_name_that_resolves_to_loopback_is_refused_by_the_address_policy() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (_origin, port) = http_origin(dir);
    config(dir, None, &[format!("http://localhost:{port}")], "");
    let out = get(dir, serde_json::json!({"url": format!("http://localhost:{port}/")}));
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("a loopback address, which a grant by name does not reach"), "{err}");
    assert!(requests(dir).is_empty(), "nothing reached the origin: {}", requests(dir));
    // Granted by its literal address, it is reached.
    config(dir, None, &[format!("http://127.0.0.1:{port}")], "");
    let a = answer(&get(dir, serde_json::json!({"url": format!("http://127.0.0.1:{port}/")})));
    assert_eq!(a["body"], "hello from the origin");
}

#[test]
fn trickles_floods_and_huge_answers_are_cut() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let o = https_origin(dir);
    let api = format!("https://api.example.test:{}", o.port);
    // DEEP: room for sixteen TLS handshakes (no pool yet) within the deadline.
    config(dir, Some(&o), std::slice::from_ref(&api), "budget:\n  pin: { get: deep }\n");
    // One byte a second: cut at the call's deadline, not waited for.
    let out = get(dir, serde_json::json!({"url": format!("{api}/trickle")}));
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out).to_lowercase();
    assert!(err.contains("timeout") || err.contains("timed out"), "{err}");
    // 1 GiB: cut at limits.http_response_bytes (8 MiB) as it is read.
    let out = get(dir, serde_json::json!({"url": format!("{api}/huge")}));
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stderr(&out).contains("response body size exceeds limit: 8388608 bytes"), "{}", stderr(&out));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let wrote = loop {
        if let Some(n) =
            requests(dir).lines().find_map(|l| l.strip_prefix("huge: wrote ").map(|n| n.parse::<u64>().unwrap()))
        {
            break n;
        }
        assert!(std::time::Instant::now() < deadline, "the origin never stopped writing: {}", requests(dir));
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(wrote < 256 << 20, "the host read on: the origin wrote {wrote} bytes");
    // 1,000 requests in one call: refused past limits.http_requests_per_call.
    let before = requests(dir).lines().filter(|l| l.contains("/v1/forecast")).count();
    let out = get(dir, serde_json::json!({"url": format!("{api}/v1/forecast"), "times": 1000}));
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stderr(&out).contains("more than 16 HTTP requests in one call"), "{}", stderr(&out));
    let sent = requests(dir).lines().filter(|l| l.contains("/v1/forecast")).count() - before;
    assert_eq!(sent, 16);
}

/// The client port of each logged request to `path`, in order.
fn peers(dir: &Path, path: &str) -> Vec<String> {
    requests(dir)
        .lines()
        .filter(|l| l.contains(path))
        .filter_map(|l| l.rsplit_once(" peer=").map(|(_, p)| p.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_calls_reuse_its_connection_and_never_another_plugins() {
    use rmcp::model::CallToolRequestParams;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let o = https_origin(dir);
    let api = format!("https://api.example.test:{}", o.port);
    std::fs::copy(WEBCLIENT_PATH, dir.join("webclient2.wasm")).unwrap();
    let grants = serde_json::to_string(&[&api]).unwrap();
    config(
        dir,
        Some(&o),
        std::slice::from_ref(&api),
        &format!("    webclient2:\n      http: {grants}\n  prefix: {{ webclient2: w2_ }}\n"),
    );
    // Loads both plugins: the one the config names, and the copy.
    let yaml = std::fs::read_to_string(dir.join("toolhost.yaml")).unwrap();
    let yaml = yaml.replacen(
        &format!("files: [{WEBCLIENT_PATH:?}]"),
        &format!("files: [{WEBCLIENT_PATH:?}, webclient2.wasm]"),
        1,
    );
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
    let mut cmd = crate::common::toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(["serve", "--http", "127.0.0.1:0"]);
    let (_serving, url) = crate::live::spawn_serving(cmd);
    let (c, _) = crate::live::connect(&url).await;
    let get = async |tool: &str, path: &str| {
        let args = serde_json::json!({"url": format!("{api}{path}")});
        let r = c
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().unwrap().clone()))
            .await
            .unwrap();
        assert_ne!(r.is_error, Some(true), "{r:?}");
    };
    // Three calls of one plugin (each a fresh instance): one connection.
    for _ in 0..3 {
        get("get", "/v1/forecast?a").await;
    }
    let first = peers(dir, "/v1/forecast?a");
    assert_eq!(first.len(), 3, "{}", requests(dir));
    assert!(first.iter().all(|p| *p == first[0]), "one kept connection: {first:?}");
    // The other plugin, same origin: a connection of its own.
    get("w2_get", "/v1/forecast?b").await;
    let second = peers(dir, "/v1/forecast?b");
    assert_eq!(second.len(), 1);
    assert_ne!(second[0], first[0], "never another plugin's connection");
    // A response the plugin did not read to its end (cut at the cap) is
    // never reused: the next call opens a new connection.
    let args = serde_json::json!({"url": format!("{api}/huge")});
    let r =
        c.call_tool(CallToolRequestParams::new("get").with_arguments(args.as_object().unwrap().clone())).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    get("get", "/v1/forecast?c").await;
    let after = peers(dir, "/v1/forecast?c");
    let huge =
        requests(dir).lines().find(|l| l.contains("GET /huge")).unwrap().rsplit_once(" peer=").unwrap().1.to_string();
    assert_eq!(huge, first[0], "the huge answer came on the kept connection");
    assert_ne!(after[0], huge, "which was closed, not reused: {}", requests(dir));
}

/// Issue #47: a host name made of the plugin's secret (under a wildcard
/// grant, lowercased by the host) is redacted from the origins the audit
/// records and the page shows, and from the host's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_a_requested_host_name_is_redacted_from_the_audit_and_the_page() {
    use rmcp::model::CallToolRequestParams;
    use std::io::Write as _;
    const SECRET: &str = "Sk7LiveQ9x";
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    config(dir, None, &["https://*.example.invalid".to_string()], "");
    let mut set = crate::common::toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["secret", "set", "webclient", "api_key"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    set.stdin.take().unwrap().write_all(SECRET.as_bytes()).unwrap();
    let set = set.wait_with_output().unwrap();
    assert!(set.status.success(), "{}", stderr(&set));
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let mut cmd = crate::common::toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(["serve", "--http", "127.0.0.1:0"]);
    let (_serving, url) = crate::live::spawn_serving_logged(cmd, log);
    let (c, _) = crate::live::connect(&url).await;
    // The plugin could make this name of the secret it reads; the test
    // hands it the same name.
    let args = serde_json::json!({"url": format!("https://{SECRET}.example.invalid/")});
    let r =
        c.call_tool(CallToolRequestParams::new("get").with_arguments(args.as_object().unwrap().clone())).await.unwrap();
    let answer = serde_json::to_string(&r).unwrap();
    let audit = std::fs::read_to_string(dir.join("state/audit.jsonl")).unwrap();
    let call = audit.lines().find(|l| l.contains(r#""tool":"get""#)).unwrap_or_else(|| panic!("{audit}"));
    assert!(call.contains("https://[secret api_key].example.invalid:443"), "the origin, redacted: {call}");
    let page = reqwest::get(format!("{url}/ui/api/state")).await.unwrap().text().await.unwrap();
    assert!(page.contains("[secret api_key].example.invalid"), "{page}");
    c.cancel().await.unwrap();
    let log = std::fs::read_to_string(dir.join("serve.log")).unwrap();
    let secret = SECRET.to_lowercase();
    for (what, text) in [("answer", &answer), ("audit", &audit), ("page", &page), ("log", &log)] {
        assert!(!text.to_lowercase().contains(&secret), "{what} shows the secret: {text}");
    }
}
