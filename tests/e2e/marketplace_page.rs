//! The DM's page's marketplace panel (#50), in Debian's headless Chromium
//! (`tests/peers/ui_market_driver.js`) against a serving host and a real
//! registry: search finds a plugin by a word of its description, its
//! details say what it asks for and whether its publisher is trusted here,
//! and installing one that asks for an origin not granted leaves it held
//! until granted, shown on the page.

use crate::common::stderr;
use crate::live::{Proc, spawn_serving};
use crate::oci::{Registry, ok, run, signed, th};
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use toolhost_test_artifacts::WEBCLIENT_PATH;

fn drive(url: &str, query: &str, plugin: &str) -> Value {
    let peers = crate::peers::peers_dir();
    assert!(
        peers.join("node_modules/playwright-core").exists() && Path::new("/usr/bin/chromium").exists(),
        "playwright-core or /usr/bin/chromium missing: run scripts/install-peers (as root)"
    );
    let child = std::process::Command::new(crate::peers::node22())
        .current_dir(&peers)
        .arg(peers.join("ui_market_driver.js"))
        .args([url, query, plugin])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(600);
    while proc.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the browser driver did not finish in 600 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (mut out, mut err) = (String::new(), String::new());
    use std::io::Read as _;
    proc.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    proc.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(proc.0.wait().unwrap().success(), "ui_market_driver.js failed: {err}\n{out}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_searches_shows_an_entry_and_installs_it_held_until_granted() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let reg = Registry::start(dir, None);
    ok(&run(dir, &["keygen", "carol", "--out", "keys"]));
    let catalogue = reg.reference("market/catalogue");
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "trust:\n  key_files: [keys/carol.pub]\nplugins:\n  builtins: false\nmarketplace:\n  catalogues: [\"{catalogue}\"]\n  refresh_secs: 0\n"
        ),
    )
    .unwrap();
    let web = signed(dir, WEBCLIENT_PATH, "carol", "web", "1.0.0", "web");
    ok(&run(
        dir,
        &[
            "sign",
            web.to_str().unwrap(),
            "--key",
            "keys/carol.key",
            "--name",
            "web",
            "--version",
            "1.0.0",
            "--description",
            "Fetches a page from the wiki",
            "--http-host",
            "https://api.example.test",
        ],
    ));
    let o =
        run(dir, &["publish", web.to_str().unwrap(), &reg.reference("market/web:1.0.0"), "--catalogue", &catalogue]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut serve = th(dir);
    serve.args(["serve", "--http", "127.0.0.1:0"]);
    let (_host, url) = spawn_serving(serve);

    let page = drive(&url, "wiki", "web");
    // The one console line is the browser noting the refused install (422).
    let errors: Vec<&Value> =
        page["console_errors"].as_array().unwrap().iter().filter(|e| !e.as_str().unwrap().contains("422")).collect();
    assert!(errors.is_empty(), "{page}");
    assert_eq!(page["panel_shown"], true, "{page}");
    assert_eq!(page["rows"], serde_json::json!(["web"]), "a word of its description finds it: {page}");
    let row = page["row_text"][0].as_str().unwrap();
    assert!(row.contains("web 1.0.0") && row.contains("trusted here"), "{row}");
    let detail = page["detail"].as_str().unwrap();
    assert!(detail.contains("HTTP to https://api.example.test"), "the asks: {detail}");
    assert!(detail.contains("its key is trusted here"), "{detail}");
    let result = page["result"].as_str().unwrap();
    assert!(result.starts_with("Not installed") && result.contains("held until granted"), "{result}");
    let held = page["withheld"].as_array().unwrap();
    assert!(held.iter().any(|h| h.as_str().unwrap().contains("web held")), "{page}");

    // The API refuses a search without the page's header (a cross-site form).
    let r = reqwest::Client::new()
        .post(format!("{url}/ui/api/market/search"))
        .header("content-type", "application/json")
        .body(r#"{"q":"wiki"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}
