//! Publisher identities through Sigstore (#50, item 3), through the binary,
//! against the tests' private instance (tests/peers/sigstore_instance.py:
//! its own OIDC provider, Fulcio with its own CA and CT log key, Rekor with
//! its own log key), with sigstore-python 4.5.1 as the independent verifier
//! of the bundles toolhost makes.

use crate::common::stderr;
use crate::oci::{Registry, ok, run};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use toolhost_test_artifacts::SWAP_V1_PATH;

const ALICE: &str = "alice@example.org";
const ISSUER: &str = "https://accounts.example.org";

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers")
}

fn sigstore_python() -> PathBuf {
    let p = peers().join(".venv-sigstore/bin/python");
    assert!(p.exists(), "{} is missing: run scripts/install-peers", p.display());
    p
}

/// The private instance: serves until dropped.
struct Instance {
    child: Child,
    url: String,
    trusted_root: PathBuf,
    trust_config: PathBuf,
}

impl Instance {
    fn start(dir: &Path) -> Instance {
        let mut child = Command::new(sigstore_python())
            .arg(peers().join("sigstore_instance.py"))
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start sigstore_instance.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let info: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        Instance {
            child,
            url: info["url"].as_str().unwrap().to_string(),
            trusted_root: info["trusted_root"].as_str().unwrap().into(),
            trust_config: info["trust_config"].as_str().unwrap().into(),
        }
    }

    /// An identity token from the instance's OIDC provider.
    fn token(&self, email: &str, issuer: &str) -> String {
        let addr = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let q = format!("email={}&iss={}", email.replace('@', "%40"), issuer.replace(':', "%3A").replace('/', "%2F"));
        write!(s, "GET /token?{q} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer.split("\r\n\r\n").nth(1).unwrap().trim().to_string()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dir/toolhost.yaml`: the plugin file, the instance's trusted root, and
/// `trust` (YAML lines under `trust:`).
fn config(dir: &Path, inst: &Instance, trust: &str) {
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "plugins:\n  builtins: false\n  files: [signed/swap.wasm]\ntrust:\n  sigstore:\n    trusted_root: {}\n{trust}",
            inst.trusted_root.display()
        ),
    )
    .unwrap();
}

/// The swap_v1 plugin copied to `dir/signed/swap.wasm`, signed with `how`.
fn sign(dir: &Path, how: &[&str]) -> Output {
    std::fs::create_dir_all(dir.join("signed")).unwrap();
    let file = dir.join("signed/swap.wasm");
    std::fs::copy(SWAP_V1_PATH, &file).unwrap();
    let mut args = vec!["sign", file.to_str().unwrap(), "--name", "swap", "--version", "1.0.0"];
    args.extend_from_slice(how);
    // Whatever the machine running the tests sets (a CI job's own token).
    let mut cmd = crate::oci::th(dir);
    cmd.env_remove("SIGSTORE_ID_TOKEN")
        .env_remove("ACTIONS_ID_TOKEN_REQUEST_URL")
        .env_remove("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
        .args(&args);
    cmd.output().unwrap()
}

fn both(o: &Output) -> String {
    format!("{}{}", crate::common::stdout(o), stderr(o))
}

/// sigstore-python's `verify identity`, offline, on the bundle and manifest
/// `toolhost verify --bundle-out` wrote.
fn sigstore_python_verifies(dir: &Path, inst: &Instance, identity: &str, issuer: &str) -> Output {
    Command::new(peers().join(".venv-sigstore/bin/sigstore"))
        .current_dir(dir)
        .arg("--trust-config")
        .arg(&inst.trust_config)
        .args(["verify", "identity", "--offline", "--bundle", "swap.sigstore.json"])
        .args(["--cert-identity", identity, "--cert-oidc-issuer", issuer, "swap.manifest.json"])
        .output()
        .unwrap()
}

#[test]
fn a_keyless_publisher_is_trusted_by_identity_and_issuer_and_sigstore_python_agrees() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let inst = Instance::start(dir);
    config(dir, &inst, "");
    let token = inst.token(ALICE, ISSUER);
    let url = inst.url.as_str();
    let signed = ok(&sign(dir, &["--sigstore", "--identity-token", &token, "--fulcio-url", url, "--rekor-url", url]));
    assert!(signed.contains(&format!("by {ALICE}")) && signed.contains("through Sigstore: logged in"), "{signed}");

    // Trusted for alice at her issuer: it loads and answers.
    config(dir, &inst, &format!("  publishers:\n    - identity: {ALICE}\n      issuer: {ISSUER}\n"));
    let v = ok(&run(dir, &["verify", "signed/swap.wasm", "--bundle-out", "swap.sigstore.json"]));
    assert!(v.contains(&format!("{ALICE} (issuer {ISSUER}) through Sigstore, logged at")), "{v}");
    assert!(v.contains("this host would load it"), "{v}");
    let call = ok(&run(dir, &["call", "version", "{}"]));
    assert!(call.contains(r#""version":1"#), "{call}");

    // sigstore-python verifies the same bundle over the same manifest, for
    // alice, and refuses it for bob: its check can fail.
    let py = sigstore_python_verifies(dir, &inst, ALICE, ISSUER);
    assert!(py.status.success(), "sigstore-python:\n{}", both(&py));
    let py = sigstore_python_verifies(dir, &inst, "bob@example.org", ISSUER);
    assert!(!py.status.success(), "sigstore-python accepted another identity:\n{}", both(&py));

    // Another identity, or alice at another issuer: refused, naming both.
    for (identity, issuer) in [("bob@example.org", ISSUER), (ALICE, "https://other.example.org")] {
        config(dir, &inst, &format!("  publishers:\n    - identity: {identity}\n      issuer: {issuer}\n"));
        let o = run(dir, &["verify", "signed/swap.wasm"]);
        assert!(!o.status.success(), "{}", both(&o));
        let out = both(&o);
        assert!(
            out.contains(&format!("is signed through Sigstore by {ALICE:?} (issuer {ISSUER:?})"))
                && out.contains(&format!(
                    "a publisher this host does not trust (trust.publishers names {identity:?} (issuer {issuer:?}))"
                )),
            "{out}"
        );
        let o = run(dir, &["call", "version", "{}"]);
        assert!(!o.status.success(), "{}", both(&o));
    }

    // Revoked by identity: refused whatever trusts it.
    config(
        dir,
        &inst,
        &format!("  publishers:\n    - identity: {ALICE}\n      issuer: {ISSUER}\n  revoked: [{ALICE}]\n"),
    );
    let o = run(dir, &["verify", "signed/swap.wasm"]);
    assert!(
        !o.status.success() && both(&o).contains("is revoked: trust.revoked lists alice@example.org (its publisher)"),
        "{}",
        both(&o)
    );

    // A window the log's time falls outside: refused, with the dates.
    config(
        dir,
        &inst,
        &format!(
            "  publishers:\n    - identity: {ALICE}\n      issuer: {ISSUER}\n      not_after: 2020-01-01T00:00:00Z\n"
        ),
    );
    let o = run(dir, &["verify", "signed/swap.wasm"]);
    assert!(
        !o.status.success() && both(&o).contains("(the transparency log's time), outside the window"),
        "{}",
        both(&o)
    );

    // The component changed after signing: refused, whoever signed it.
    config(dir, &inst, &format!("  publishers:\n    - identity: {ALICE}\n      issuer: {ISSUER}\n"));
    let file = dir.join("signed/swap.wasm");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let o = run(dir, &["verify", "signed/swap.wasm"]);
    assert!(!o.status.success() && both(&o).contains("changed after it was signed"), "{}", both(&o));
}

#[test]
fn a_certificate_that_expired_before_its_log_entry_is_refused_here_and_by_sigstore_python() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let inst = Instance::start(dir);
    // The author's config names no trusted root: signing says it did not
    // check. (Under `/expired`, the instance's Fulcio issues certificates
    // that ended ten minutes before the request.)
    std::fs::write(dir.join("toolhost.yaml"), "plugins:\n  builtins: false\n").unwrap();
    let token = inst.token(ALICE, ISSUER);
    let fulcio = format!("{}/expired", inst.url);
    let o = sign(dir, &["--sigstore", "--identity-token", &token, "--fulcio-url", &fulcio, "--rekor-url", &inst.url]);
    assert!(o.status.success() && stderr(&o).contains("not checked here: no trusted root"), "{}", both(&o));

    config(dir, &inst, &format!("  publishers:\n    - identity: {ALICE}\n      issuer: {ISSUER}\n"));
    let o = run(dir, &["verify", "signed/swap.wasm", "--bundle-out", "swap.sigstore.json"]);
    let out = both(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("but its log entry was made at") && out.contains("it had expired"), "{out}");
    let o = run(dir, &["call", "version", "{}"]);
    assert!(!o.status.success(), "{}", both(&o));
    let py = sigstore_python_verifies(dir, &inst, ALICE, ISSUER);
    assert!(!py.status.success(), "sigstore-python accepted an expired certificate:\n{}", both(&py));

    // With the trusted root in the author's config, `sign` refuses to write it.
    let o = sign(dir, &["--sigstore", "--identity-token", &token, "--fulcio-url", &fulcio, "--rekor-url", &inst.url]);
    assert!(!o.status.success() && stderr(&o).contains("does not verify, so hosts would refuse it"), "{}", both(&o));
}

#[test]
fn a_keyed_publisher_is_trusted_by_its_key_file_and_revocable_by_key_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let inst = Instance::start(dir);
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    for name in ["ci", "other"] {
        let key = dir.join(format!("keys/{name}.pem"));
        let public = dir.join(format!("keys/{name}.pub.pem"));
        let o = Command::new("openssl")
            .args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", both(&o));
        let o = Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&key)
            .arg("-out")
            .arg(&public)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", both(&o));
    }
    config(dir, &inst, "  publishers:\n    - key_file: keys/ci.pub.pem\n");
    let signed = ok(&sign(dir, &["--sigstore-key", "keys/ci.pem", "--rekor-url", &inst.url]));
    assert!(signed.contains("by ci") && signed.contains("through Sigstore"), "{signed}");
    let v = ok(&run(dir, &["verify", "signed/swap.wasm", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&v).unwrap();
    assert_eq!(v["admitted"], true, "{v}");
    let key_id = v["signature"]["sigstore"]["key_id"].as_str().unwrap().to_string();
    assert!(key_id.starts_with("ecdsa:") && key_id.len() == 22, "{v}");
    assert!(v["decision"].as_str().unwrap().contains("for publisher \"ci\""), "{v}");
    assert!(ok(&run(dir, &["call", "version", "{}"])).contains(r#""version":1"#));

    // Another key: refused.
    config(dir, &inst, "  publishers:\n    - key_file: keys/other.pub.pem\n");
    let o = run(dir, &["verify", "signed/swap.wasm"]);
    assert!(!o.status.success() && both(&o).contains(&format!("by Sigstore key {key_id}")), "{}", both(&o));
    // Revoked by key id.
    config(dir, &inst, &format!("  publishers:\n    - key_file: keys/ci.pub.pem\n  revoked: [\"{key_id}\"]\n"));
    let o = run(dir, &["verify", "signed/swap.wasm"]);
    assert!(!o.status.success() && both(&o).contains("(its signing key)"), "{}", both(&o));
    // A publisher entry that names neither: the config says which entry.
    config(dir, &inst, "  publishers:\n    - issuer: https://accounts.example.org\n");
    let o = run(dir, &["verify", "signed/swap.wasm"]);
    assert!(
        !o.status.success() && both(&o).contains("trust.publishers[0]: name both identity and issuer"),
        "{}",
        both(&o)
    );
}

/// GET `path` from a registry on loopback: the body, or `None` on 404.
fn registry_get(addr: &str, path: &str, accept: &str) -> Option<Vec<u8>> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&answer[..split]).to_string();
    if head.starts_with("HTTP/1.0 404") || head.starts_with("HTTP/1.1 404") {
        return None;
    }
    assert!(head.contains(" 200 "), "{path}: {head}");
    Some(answer[split + 4..].to_vec())
}

#[test]
fn a_pushed_sigstore_plugin_has_its_bundle_beside_it_and_installs_from_the_marketplace_by_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let inst = Instance::start(dir);
    let reg = Registry::start(dir, None);
    config(dir, &inst, &format!("  publishers:\n    - identity: {ALICE}\n      issuer: {ISSUER}\n"));
    let token = inst.token(ALICE, ISSUER);
    let url = inst.url.as_str();
    ok(&sign(dir, &["--sigstore", "--identity-token", &token, "--fulcio-url", url, "--rekor-url", url]));
    let reference = reg.reference("alice/swap:1.0.0");
    let pushed = ok(&run(dir, &["push", "signed/swap.wasm", &reference]));
    let digest = pushed.lines().find_map(|l| l.trim().strip_prefix("digest ")).unwrap().to_string();
    let tag = digest.replace(':', "-");
    assert!(
        pushed.contains(&format!("sigstore bundle beside it: a referrer of its manifest, listed at tag {tag}")),
        "{pushed}"
    );

    // The referrers tag schema: an index at sha256-<hex> naming a manifest
    // of the bundle's type whose subject is the plugin's manifest.
    let addr = reference.trim_start_matches("oci://").split('/').next().unwrap().to_string();
    let index =
        registry_get(&addr, &format!("/v2/alice/swap/manifests/{tag}"), "application/vnd.oci.image.index.v1+json")
            .expect("the referrers index");
    let index: serde_json::Value = serde_json::from_slice(&index).unwrap();
    let bundle_type = "application/vnd.dev.sigstore.bundle.v0.3+json";
    let listed = &index["manifests"][0];
    assert_eq!(listed["artifactType"], bundle_type, "{index}");
    let referrer = registry_get(
        &addr,
        &format!("/v2/alice/swap/manifests/{}", listed["digest"].as_str().unwrap()),
        "application/vnd.oci.image.manifest.v1+json",
    )
    .unwrap();
    let referrer: serde_json::Value = serde_json::from_slice(&referrer).unwrap();
    assert_eq!(referrer["subject"]["digest"], digest.as_str(), "{referrer}");
    let layer = referrer["layers"][0]["digest"].as_str().unwrap();
    let bundle = registry_get(&addr, &format!("/v2/alice/swap/blobs/{layer}"), "*/*").unwrap();
    std::fs::write(dir.join("swap.sigstore.json"), &bundle).unwrap();

    // The bundle from the registry, over the manifest of the pulled file:
    // sigstore-python verifies it.
    std::fs::create_dir_all(dir.join("pulled")).unwrap();
    ok(&run(dir, &["pull", &reference, "-o", "pulled/swap.wasm"]));
    ok(&run(dir, &["verify", "pulled/swap.wasm", "--bundle-out", "local.sigstore.json"]));
    std::fs::rename(dir.join("local.manifest.json"), dir.join("swap.manifest.json")).unwrap();
    let py = sigstore_python_verifies(dir, &inst, ALICE, ISSUER);
    assert!(py.status.success(), "sigstore-python:\n{}", both(&py));
    // Through the marketplace: published to a catalogue, found as trusted
    // here (by identity), installed into a serving host.
    let catalogue = reg.reference("toolhost/catalogue");
    let market = format!(
        "plugins:\n  builtins: false\nmarketplace:\n  catalogues: [\"{catalogue}\"]\ntrust:\n  sigstore:\n    trusted_root: {}\n  publishers:\n    - identity: {ALICE}\n      issuer: {ISSUER}\n",
        inst.trusted_root.display()
    );
    std::fs::write(dir.join("toolhost.yaml"), &market).unwrap();
    ok(&run(dir, &["publish", "signed/swap.wasm", &reg.reference("alice/swap:1.0.1"), "--catalogue", &catalogue]));
    let hits: serde_json::Value = serde_json::from_str(&ok(&run(dir, &["search", "version", "--json"]))).unwrap();
    assert_eq!(hits[0]["name"], "swap", "{hits}");
    assert_eq!(hits[0]["publisher"]["key_id"], format!("{ALICE} (issuer {ISSUER})"), "{hits}");
    assert_eq!(hits[0]["trusted"], true, "{hits}");
    let mut serve = crate::oci::th(dir);
    serve.args(["serve", "--http", "127.0.0.1:0"]);
    let (_host, _url) = crate::live::spawn_serving(serve);
    let out = ok(&run(dir, &["install", "swap"]));
    assert!(out.contains("installed swap 1.0.0"), "{out}");
    let list = ok(&run(dir, &["plugin", "list", "--json"]));
    assert!(list.contains("slow_version") && list.contains("through Sigstore"), "{list}");

    // Pushing again lists the bundle once.
    ok(&run(dir, &["push", "signed/swap.wasm", &reference]));
    let index =
        registry_get(&addr, &format!("/v2/alice/swap/manifests/{tag}"), "application/vnd.oci.image.index.v1+json")
            .unwrap();
    let index: serde_json::Value = serde_json::from_slice(&index).unwrap();
    assert_eq!(index["manifests"].as_array().unwrap().len(), 1, "{index}");
}

#[test]
fn in_a_github_actions_job_sign_takes_the_jobs_own_token_and_hosts_trust_the_workflow() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let inst = Instance::start(dir);
    let workflow = "https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main";
    let actions = "https://token.actions.githubusercontent.com";
    config(dir, &inst, &format!("  publishers:\n    - identity: {workflow}\n      issuer: {actions}\n"));
    let url = inst.url.as_str();
    // No --identity-token: the runner's endpoint, as GitHub Actions sets it.
    let sign_in_ci = |runner_token: &str| {
        std::fs::create_dir_all(dir.join("signed")).unwrap();
        std::fs::copy(SWAP_V1_PATH, dir.join("signed/swap.wasm")).unwrap();
        crate::oci::th(dir)
            .env("ACTIONS_ID_TOKEN_REQUEST_URL", format!("{url}/actions-token"))
            .env("ACTIONS_ID_TOKEN_REQUEST_TOKEN", runner_token)
            .env_remove("SIGSTORE_ID_TOKEN")
            .args(["sign", "signed/swap.wasm", "--name", "swap", "--sigstore", "--fulcio-url", url, "--rekor-url", url])
            .output()
            .unwrap()
    };
    let o = sign_in_ci("runner-secret");
    assert!(o.status.success(), "{}", both(&o));
    assert!(crate::common::stdout(&o).contains(&format!("by {workflow}")), "{}", both(&o));
    let v = ok(&run(dir, &["verify", "signed/swap.wasm"]));
    assert!(v.contains(&format!("{workflow} (issuer {actions}) through Sigstore")), "{v}");
    // The runner's endpoint refusing: the error says where the token came from.
    let o = sign_in_ci("wrong");
    assert!(!o.status.success() && stderr(&o).contains("from GitHub Actions: 401"), "{}", both(&o));
    // Outside CI, without a token: what to do.
    let o = sign(dir, &["--sigstore", "--fulcio-url", url, "--rekor-url", url]);
    assert!(!o.status.success() && stderr(&o).contains("--sigstore needs an OIDC identity token"), "{}", both(&o));
}
