//! The marketplace (#50), through the binary, against a real registry (the
//! CNCF distribution server the `oci` tests run): three publishers
//! `publish` to one catalogue (two of them at once), `search` ranks what
//! they published, `install` adds an entry to a serving host, holds one
//! asking for what is not granted until a reload grants it, and refuses
//! entries that lie about their digest, their asks or their publisher. A
//! scripted registry serves hostile catalogues: an endless tag list, one
//! that never answers, one that goes round in circles, one of more
//! entries than the bound, and an entry declaring a 1 GiB body.

use crate::common::{builtin_path, stderr, stdout};
use crate::live::spawn_serving;
use crate::oci::{Registry, ok, run, th};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use toolhost::catalogue::{Catalogues, Listed};
use toolhost_test_artifacts::{SWAP_V1_PATH, WEBCLIENT_PATH};

/// `src` signed by `keys/<key>.key` as `name` `version` with `description`, at `dir/<key>/<name>.wasm`.
fn sign(dir: &Path, src: &str, key: &str, name: &str, version: &str, description: &str) -> PathBuf {
    sign_with(dir, src, key, name, version, description, &[])
}

/// [`sign`], with more of `sign`'s flags.
fn sign_with(dir: &Path, src: &str, key: &str, name: &str, version: &str, description: &str, more: &[&str]) -> PathBuf {
    let sub = dir.join(format!("{key}-{version}"));
    std::fs::create_dir_all(&sub).unwrap();
    let out = sub.join(format!("{name}.wasm"));
    std::fs::copy(src, &out).unwrap();
    let key = format!("keys/{key}.key");
    let args = ["sign", out.to_str().unwrap(), "--key", &key, "--name", name, "--version", version];
    ok(&run(dir, &[&args[..], &["--description", description], more].concat()));
    out
}

fn key_id(dir: &Path, key: &str) -> String {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("keys/{key}.pub"))).unwrap()).unwrap();
    toolhost::package::fingerprint(v["public_key"].as_str().unwrap())
}

/// The catalogue's entries, read as `search` reads them.
fn entries(dir: &Path) -> Vec<Listed> {
    let config = toolhost::config::Config::load(&dir.join("toolhost.yaml")).unwrap();
    let catalogues = config.marketplace.catalogues.clone();
    let builder = toolhost::HostBuilder::new(config);
    let store = builder.oci_store().unwrap();
    let (entries, warnings) =
        Catalogues::new(&store, Some(&dir.join("test-cache")), 0, 1000).read_all(&catalogues, true);
    assert!(warnings.is_empty(), "{warnings:?}");
    entries
}

/// Publishes `entry` as given (a lie, when the test makes one).
fn publish_as_is(dir: &Path, catalogue: &str, entry: &toolhost::catalogue::Entry) {
    let config = toolhost::config::Config::load(&dir.join("toolhost.yaml")).unwrap();
    let store = toolhost::HostBuilder::new(config).oci_store().unwrap();
    Catalogues::new(&store, None, 0, 1000).publish(catalogue, entry).unwrap();
}

/// Publishes `entry` past the library's own checks, as a hostile
/// publisher with push rights could (the same artifact, by the registry's
/// API).
fn publish_as_is_unchecked(catalogue: &str, entry: &toolhost::catalogue::Entry) {
    use sha2::Digest as _;
    let r = catalogue.strip_prefix("oci://").unwrap();
    let (registry, repo) = r.split_once('/').unwrap();
    let body = serde_json::to_vec(entry).unwrap();
    let sha = |b: &[u8]| format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)));
    let (body_digest, empty_digest) = (sha(&body), sha(b"{}"));
    let curl = |args: &[&str], input: &[u8]| -> String {
        use std::io::Write as _;
        let mut c = std::process::Command::new("curl")
            .args(["-sS", "--fail", "-D", "-", "-o", "/dev/null"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "curl {args:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for (bytes, digest) in [(body.as_slice(), &body_digest), (b"{}".as_slice(), &empty_digest)] {
        let head = curl(&["-X", "POST", &format!("http://{registry}/v2/{repo}/blobs/uploads/")], b"");
        let loc = head
            .lines()
            .find_map(|l| l.strip_prefix("Location: ").or_else(|| l.strip_prefix("location: ")))
            .unwrap()
            .trim()
            .to_string();
        let url = if loc.starts_with("http") { loc } else { format!("http://{registry}{loc}") };
        let sep = if url.contains('?') { '&' } else { '?' };
        curl(
            &[
                "-X",
                "PUT",
                "--data-binary",
                "@-",
                "-H",
                "Content-Type: application/octet-stream",
                &format!("{url}{sep}digest={digest}"),
            ],
            bytes,
        );
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": toolhost::catalogue::ENTRY_MEDIA_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty_digest, "size": 2},
        "layers": [{"mediaType": toolhost::catalogue::ENTRY_MEDIA_TYPE, "digest": body_digest, "size": body.len()}],
    });
    curl(
        &[
            "-X",
            "PUT",
            "--data-binary",
            "@-",
            "-H",
            "Content-Type: application/vnd.oci.image.manifest.v1+json",
            &format!("http://{registry}/v2/{repo}/manifests/future"),
        ],
        manifest.to_string().as_bytes(),
    );
}

fn find<'a>(entries: &'a [Listed], name: &str, version: &str) -> &'a Listed {
    entries
        .iter()
        .find(|l| l.entry.name == name && l.entry.version == version)
        .unwrap_or_else(|| panic!("{name} {version}"))
}

fn fails(o: &Output) -> String {
    assert!(!o.status.success(), "succeeded:\n{}", stdout(o));
    stderr(o)
}

#[test]
fn three_publishers_publish_search_finds_and_install_checks_every_claim() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let reg = Registry::start(dir, None);
    for k in ["alice", "bob", "carol", "mallory"] {
        ok(&run(dir, &["keygen", k, "--out", "keys"]));
    }
    let catalogue = reg.reference("market/catalogue");
    let config = |grants: &str| {
        format!(
            "trust:\n  key_files: [keys/alice.pub, keys/bob.pub, keys/carol.pub]\nplugins:\n  builtins: false\n{grants}marketplace:\n  catalogues: [\"{catalogue}\"]\n  refresh_secs: 0\n"
        )
    };
    std::fs::write(dir.join("toolhost.yaml"), config("")).unwrap();

    // Nothing published yet: an empty catalogue, said plainly.
    let o = run(dir, &["search", "dice"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("nothing in the marketplace matches \"dice\""), "{}", stdout(&o));

    let dice_v1 =
        sign(dir, builtin_path("diceroller"), "alice", "dice", "1.0.0", "Dice for the table, by the rules of 5e");
    let dice_v2 =
        sign(dir, builtin_path("diceroller"), "alice", "dice", "1.1.0", "Dice for the table, by the rules of 5e");
    let rules = sign(dir, builtin_path("ruleslookup"), "bob", "rules", "1.0.0", "The SRD, searchable");
    let web = sign_with(
        dir,
        WEBCLIENT_PATH,
        "carol",
        "web",
        "1.0.0",
        "Fetches a page",
        &["--http-host", "https://api.example.test"],
    );
    let swap = sign(dir, SWAP_V1_PATH, "mallory", "swap", "1.0.0", "Swaps things");
    let publish = |file: &Path, to: &str| {
        let mut cmd = th(dir);
        cmd.args(["publish", file.to_str().unwrap(), &reg.reference(to), "--catalogue", &catalogue]);
        cmd
    };
    let out = ok(&run(dir, &["publish", dice_v1.to_str().unwrap(), &reg.reference("market/dice:1.0.0")]));
    assert!(out.contains("published dice 1.0.0 by alice") && out.contains(&format!("listed in {catalogue}")), "{out}");
    ok(&publish(&dice_v2, "market/dice:1.1.0").output().unwrap());
    ok(&publish(&swap, "market/swap:1.0.0").output().unwrap());
    // Two authors at once: neither entry is lost.
    let (a, b) =
        (publish(&rules, "market/rules:1.0.0").spawn().unwrap(), publish(&web, "market/web:1.0.0").spawn().unwrap());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    ok(&a);
    ok(&b);
    let listed = entries(dir);
    let mut names: Vec<String> = listed.iter().map(|l| format!("{} {}", l.entry.name, l.entry.version)).collect();
    names.sort();
    assert_eq!(names, ["dice 1.0.0", "dice 1.1.0", "rules 1.0.0", "swap 1.0.0", "web 1.0.0"]);
    let web_entry = find(&listed, "web", "1.0.0").entry.clone();
    assert_eq!(web_entry.asks.capabilities, ["http"], "{web_entry:?}");
    assert_eq!(web_entry.asks.http_hosts, ["https://api.example.test"], "{web_entry:?}");
    assert_eq!(web_entry.publisher.key_id, key_id(dir, "carol"));
    let dice = find(&listed, "dice", "1.1.0").entry.clone();
    assert!(dice.tools.iter().any(|t| t.name == "roll" && t.tier == "FAST"), "{dice:?}");

    // A word only a tool's description holds finds its plugin, newest version only.
    let out = ok(&run(dir, &["search", "expression"]));
    assert!(out.contains("dice 1.1.0") && !out.contains("dice 1.0.0"), "{out}");
    assert!(!out.contains("rules 1.0.0"), "{out}");
    // Ranked: the plugin named "rules" above the one whose description says it.
    let hits: Vec<Value> = serde_json::from_str(&ok(&run(dir, &["search", "rules", "--json"]))).unwrap();
    let order: Vec<&str> = hits.iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(order, ["rules", "dice"], "{hits:?}");
    assert!(hits[0]["score"].as_f64() > hits[1]["score"].as_f64());
    assert_eq!(hits[0]["trusted"], true);
    let out = ok(&run(dir, &["search", "swaps"]));
    assert!(out.contains("swap 1.0.0") && out.contains("NOT trusted here"), "{out}");
    // A revoked key is not trusted here, whatever trust.key_files says.
    let revoked = format!("trust:\n  revoked: [\"{}\"]\n", key_id(dir, "bob"));
    std::fs::write(dir.join("toolhost.yaml"), config("").replace("trust:\n", &revoked)).unwrap();
    let hits: Vec<Value> = serde_json::from_str(&ok(&run(dir, &["search", "rules", "--json"]))).unwrap();
    assert_eq!((&hits[0]["name"], &hits[0]["trusted"]), (&Value::from("rules"), &Value::from(false)), "{hits:?}");
    std::fs::write(dir.join("toolhost.yaml"), config("")).unwrap();

    // install needs a serving host, and says so.
    let err = fails(&run(dir, &["install", "dice"]));
    assert!(err.contains("no running toolhost found") && err.contains("toolhost serve"), "{err}");
    let mut serve = th(dir);
    serve.args(["serve", "--http", "127.0.0.1:0"]);
    let (_host, _url) = spawn_serving(serve);
    let plugins = || -> Value { serde_json::from_str(&ok(&run(dir, &["plugin", "list", "--json"]))).unwrap() };

    let out = ok(&run(dir, &["install", "dice"]));
    assert!(out.contains("installed dice 1.1.0") && out.contains("asks for  nothing"), "{out}");
    assert!(out.contains("trusted here"), "{out}");
    assert!(plugins()["plugins"].to_string().contains("roll_table"));

    // Asking for a host not granted: held until a reload grants it.
    let out = run(dir, &["install", "web"]);
    assert!(stdout(&out).contains("asks for  http; HTTP to https://api.example.test"), "{}", stdout(&out));
    let err = fails(&out);
    assert!(
        err.contains("plugin \"web\" is held until granted: it asks for the http capability (wasi:http) and HTTP to https://api.example.test"),
        "{err}"
    );
    assert_eq!(plugins()["withheld"][0]["name"], "web");
    std::fs::write(
        dir.join("toolhost.yaml"),
        config("  grants:\n    web:\n      http: [\"https://api.example.test\"]\n"),
    )
    .unwrap();
    let out = ok(&run(dir, &["reload"]));
    assert!(out.contains("web"), "{out}");
    let p = plugins();
    assert!(p["plugins"].as_array().unwrap().iter().any(|p| p["name"] == "web"), "{p}");
    assert!(p["withheld"].as_array().is_none_or(|w| w.is_empty()), "{p}");

    // An untrusted publisher's entry: the trust policy refuses it.
    let err = fails(&run(dir, &["install", "swap"]));
    assert!(err.contains("untrusted"), "{err}");

    // Entries that lie, newer than the honest ones: each is skipped at
    // install, naming the lie, and the honest entry of that version is
    // installed; with no honest one left, the install is refused.
    let later = |e: &mut toolhost::catalogue::Entry| {
        e.published = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    };
    let mut lie = web_entry.clone();
    lie.asks = Default::default();
    later(&mut lie);
    publish_as_is(dir, &catalogue, &lie);
    let o = run(dir, &["install", "web"]);
    assert!(
        stderr(&o).contains("lies about its asks: the signed component also asks for capabilities http; HTTP to https://api.example.test, which the entry leaves out: skipped"),
        "{}",
        stderr(&o)
    );
    assert!(ok(&o).contains("asks for  http; HTTP to https://api.example.test"), "the honest entry: {}", stdout(&o));
    let mut lie = dice.clone();
    lie.digest = web_entry.digest.clone();
    later(&mut lie);
    publish_as_is(dir, &catalogue, &lie);
    let o = run(dir, &["install", "dice@1.1.0"]);
    assert!(
        stderr(&o).contains(&format!("lies about its digest: the entry says {}", web_entry.digest)),
        "{}",
        stderr(&o)
    );
    assert!(ok(&o).contains("dice 1.1.0"), "{}", stdout(&o));
    // An entry from the future would outrank every honest one: it is not a valid entry.
    let mut lie = dice.clone();
    lie.published = "9999-01-01T00:00:00Z".into();
    publish_as_is_unchecked(&catalogue, &lie);
    let o = run(dir, &["search", "dice", "--refresh"]);
    assert!(stderr(&o).contains("the publish time is in the future"), "{}", stderr(&o));
    // Only a lie under alice's key for swap: refused, naming it.
    let mut lie = find(&listed, "swap", "1.0.0").entry.clone();
    lie.publisher.key_id = key_id(dir, "alice");
    lie.publisher.author = "alice".into();
    later(&mut lie);
    publish_as_is(dir, &catalogue, &lie);
    let err = fails(&run(dir, &["install", "swap", "--publisher", &key_id(dir, "alice")]));
    assert!(err.contains(&format!("lies about its publisher: the entry says {}", key_id(dir, "alice"))), "{err}");
    // Nothing a lie named was loaded.
    let p = plugins();
    assert!(!p["plugins"].to_string().contains("\"swap\""), "{p}");
}

/// A registry scripted to serve hostile catalogues, one per repository.
fn hostile_registry() -> String {
    use std::io::{BufRead as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { continue };
            std::thread::spawn(move || {
                let _ = s.set_write_timeout(Some(std::time::Duration::from_secs(10)));
                let mut r = std::io::BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    let reply = |s: &mut std::net::TcpStream, status: &str, body: &[u8]| {
                        let head = format!(
                            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        );
                        s.write_all(head.as_bytes()).and_then(|()| s.write_all(body))
                    };
                    let last = path.split("last=").nth(1).map(str::to_string);
                    let result = if path.starts_with("/v2/flood/tags/list") {
                        // An endless tag list.
                        let _ = s.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                        );
                        let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, " ".repeat(64 * 1024));
                        for _ in 0..16384 {
                            if s.write_all(chunk.as_bytes()).is_err() {
                                break;
                            }
                        }
                        return;
                    } else if path.starts_with("/v2/silent/tags/list") {
                        std::thread::sleep(std::time::Duration::from_secs(30));
                        return;
                    } else if path.starts_with("/v2/circles/tags/list") {
                        // The same page, whatever `last` says.
                        let tags: Vec<String> = (0..1000).map(|i| format!("t{i:05}")).collect();
                        reply(
                            &mut s,
                            "200 OK",
                            serde_json::json!({"name": "circles", "tags": tags}).to_string().as_bytes(),
                        )
                    } else if path.starts_with("/v2/many/tags/list") {
                        // Pages without end: 100,000 entries and more.
                        let from =
                            last.and_then(|l| l.trim_start_matches('t').parse::<u64>().ok()).map_or(0, |n| n + 1);
                        let tags: Vec<String> = (from..from + 1000).map(|i| format!("t{i:09}")).collect();
                        reply(
                            &mut s,
                            "200 OK",
                            serde_json::json!({"name": "many", "tags": tags}).to_string().as_bytes(),
                        )
                    } else if path.starts_with("/v2/huge/tags/list") {
                        reply(&mut s, "200 OK", br#"{"name":"huge","tags":["big"]}"#)
                    } else if path.starts_with("/v2/huge/manifests/big") {
                        let m = serde_json::json!({
                            "schemaVersion": 2,
                            "mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "artifactType": toolhost::catalogue::ENTRY_MEDIA_TYPE,
                            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": format!("sha256:{}", "4".repeat(64)), "size": 2},
                            "layers": [{"mediaType": toolhost::catalogue::ENTRY_MEDIA_TYPE, "digest": format!("sha256:{}", "1".repeat(64)), "size": 1u64 << 30}],
                        });
                        reply(&mut s, "200 OK", m.to_string().as_bytes())
                    } else {
                        reply(&mut s, "404 Not Found", br#"{"errors":[{"code":"NAME_UNKNOWN"}]}"#)
                    };
                    if result.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn hostile_catalogues_end_in_a_clear_error_or_a_bounded_result() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let addr = hostile_registry();
    let cat = |repo: &str| format!("\"oci://{addr}/{repo}\"");
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "oci:\n  timeout_secs: 3\nmarketplace:\n  max_entries: 2500\n  catalogues: [{}, {}, {}, {}, {}]\n",
            cat("flood"),
            cat("silent"),
            cat("circles"),
            cat("many"),
            cat("huge")
        ),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let o = run(dir, &["search", "anything"]);
    let took = started.elapsed();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "nothing matches: {}", stdout(&o));
    assert!(
        err.contains(&format!("catalogue oci://{addr}/flood: "))
            && err.contains("tag list is over the 1048576 byte limit"),
        "{err}"
    );
    assert!(err.contains(&format!("catalogue oci://{addr}/silent: ")) && err.contains("no answer within 3 s"), "{err}");
    assert!(
        err.contains(&format!("catalogue oci://{addr}/circles: 1000 tags that are not a valid entry left out")),
        "{err}"
    );
    assert!(err.contains(&format!("catalogue oci://{addr}/many lists more than 2500 entries (marketplace.max_entries): the first 2500 were read")), "{err}");
    assert!(err.contains(&format!("catalogue oci://{addr}/huge: 1 tag that is not a valid entry left out (the first, big: the entry is 1073741824 bytes, over 65536)")), "{err}");
    eprintln!("five hostile catalogues read in {} ms", took.as_millis());
}

/// A leaked key, revoked in `trust.revoked`: the reload unloads what it
/// signed from the serving host (its tools gone, the session told), says
/// why, and loads it again when the revocation is taken back. A key's
/// window closing does the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_or_a_closed_window_unloads_its_plugins_from_a_serving_host_at_reload() {
    use crate::live::{connect, eventually, names};
    use std::sync::atomic::Ordering;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_path_buf();
    ok(&run(&dir, &["keygen", "alice", "--out", "keys"]));
    let dice = sign(&dir, builtin_path("diceroller"), "alice", "dice", "1.0.0", "Dice");
    let alice = key_id(&dir, "alice");
    let public: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("keys/alice.pub")).unwrap()).unwrap();
    let public = public["public_key"].as_str().unwrap().to_string();
    let config = |trust: &str| {
        format!(
            "trust:\n  keys:\n    - name: alice\n      public_key: {public}\n{trust}plugins:\n  builtins: false\n  files: [{:?}]\n",
            dice.display()
        )
    };
    std::fs::write(dir.join("toolhost.yaml"), config("")).unwrap();
    let mut serve = th(&dir);
    serve.args(["serve", "--http", "127.0.0.1:0"]);
    let (_host, url) = spawn_serving(serve);
    let (client, changed) = connect(&url).await;
    assert!(names(&client).await.contains(&"roll".to_string()));
    let reload = |expect: &str| {
        let out = ok(&run(&dir, &["reload"]));
        assert!(out.contains(expect), "{out}");
        out
    };

    // A revocation that is not a key id or a digest is refused, naming it.
    std::fs::write(dir.join("toolhost.yaml"), config("  revoked: [alice]\n")).unwrap();
    let err = fails(&run(&dir, &["reload"]));
    assert!(err.contains("trust.revoked[0]: \"alice\" is neither a key id"), "{err}");

    let before = changed.load(Ordering::SeqCst);
    std::fs::write(dir.join("toolhost.yaml"), config(&format!("  revoked: [\"{alice}\"]\n"))).unwrap();
    reload(&format!(
        "the trust policy now refuses it: plugin \"dice\" is revoked: trust.revoked lists {alice} (its signing key)"
    ));
    eventually("the session was told", async || changed.load(Ordering::SeqCst) > before).await;
    assert!(!names(&client).await.contains(&"roll".to_string()), "roll gone");
    let list: Value = serde_json::from_str(&ok(&run(&dir, &["plugin", "list", "--json"]))).unwrap();
    assert_eq!(list["withheld"][0]["name"], "dice", "{list}");
    // A new start refuses it too.
    let o = run(&dir, &["call", "roll", "{\"expression\": \"1d6\"}"]);
    assert!(stderr(&o).contains("is revoked"), "{}", stderr(&o));

    // Taken back: loaded again.
    std::fs::write(dir.join("toolhost.yaml"), config("")).unwrap();
    reload("dice");
    eventually("roll back", async || names(&client).await.contains(&"roll".to_string())).await;

    // The key's window closed before it signed: unloaded, with the dates.
    std::fs::write(
        dir.join("toolhost.yaml"),
        config("").replace("      public_key:", "      not_after: \"2021-06-30T00:00:00Z\"\n      public_key:"),
    )
    .unwrap();
    reload("outside the window trust gives that key (until 2021-06-30T00:00:00Z)");
    eventually("roll gone again", async || !names(&client).await.contains(&"roll".to_string())).await;
    client.cancel().await.unwrap();
}
