//! Plugins from OCI registries, through the binary, against a real registry
//! (the CNCF distribution server, Debian's `docker-registry`, installed by
//! scripts/install-peers) that each test starts on a free loopback port
//! with its own storage and kills when it ends: push, show, pull, load by
//! tag and by digest, the lock file's digests, hot add and upgrade into a
//! running `serve`, hostile registries, the cache when the registry is
//! gone, basic auth from a credentials file, and interop with another OCI
//! client (the ORAS Python SDK).

use crate::common::{stderr, stdout};
use crate::live::{Proc, connect, eventually, names};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use toolhost_test_artifacts::{SWAP_V1_PATH, SWAP_V2_PATH};

/// A `docker-registry` on a free loopback port, killed on drop.
pub(crate) struct Registry {
    _proc: Proc,
    /// `127.0.0.1:PORT`.
    addr: String,
    /// Its storage root.
    storage: PathBuf,
}

impl Registry {
    /// Starts a registry storing under `dir/registry`, with basic auth when
    /// `htpasswd` is given (`user`, `password`).
    pub(crate) fn start(dir: &Path, htpasswd: Option<(&str, &str)>) -> Registry {
        let storage = dir.join("registry");
        std::fs::create_dir_all(&storage).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
            storage.display()
        );
        if let Some((user, password)) = htpasswd {
            let o = Command::new("htpasswd").args(["-Bbn", user, password]).output().expect("htpasswd (apache2-utils)");
            assert!(o.status.success(), "htpasswd: {}", stderr(&o));
            std::fs::write(dir.join("htpasswd"), &o.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: toolhost-test\n    path: {}\n",
                dir.join("htpasswd").display()
            ));
        }
        let cfg = dir.join("registry.yml");
        std::fs::write(&cfg, config).unwrap();
        let child = Command::new("docker-registry")
            .args(["serve", cfg.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry (run scripts/install-peers)");
        let proc = Proc(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry { _proc: proc, addr, storage }
    }

    pub(crate) fn reference(&self, repo_tag: &str) -> String {
        format!("oci://{}/{repo_tag}", self.addr)
    }

    /// The stored blob file of `digest`.
    fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.storage.join(format!("docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]))
    }
}

/// The `toolhost` binary in `dir`: its own state and cache (the registry
/// cache lives in the cache dir), no credentials from the machine.
pub(crate) fn th(dir: &Path) -> Command {
    let mut cmd = crate::common::toolhost();
    cmd.current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env("TOOLHOST_CACHE_DIR", dir.join("cache"))
        .env("DOCKER_CONFIG", dir.join("no-docker-config"))
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("TOOLHOST_REGISTRY_HOST")
        .env_remove("TOOLHOST_REGISTRY_USERNAME")
        .env_remove("TOOLHOST_REGISTRY_PASSWORD")
        .env_remove("TOOLHOST_REGISTRY_TOKEN")
        .env_remove("TOOLHOST_ALLOW_UNSIGNED");
    cmd
}

/// Runs `cmd` to the end, killing it after 90 s.
fn bounded(mut cmd: Command) -> Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let o = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut b).ok();
        b
    });
    let e = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut b).ok();
        b
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: o.join().unwrap(), stderr: e.join().unwrap() }
}

pub(crate) fn run(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = th(dir);
    cmd.args(args);
    bounded(cmd)
}

pub(crate) fn ok(o: &Output) -> String {
    assert!(o.status.success(), "failed:\n--- stdout ---\n{}\n--- stderr ---\n{}", stdout(o), stderr(o));
    stdout(o)
}

/// A key for `author` in `dir/keys`, trusted by `dir/toolhost.yaml` (with `extra` config after it).
pub(crate) fn trust(dir: &Path, author: &str, extra: &str) {
    ok(&run(dir, &["keygen", author, "--out", "keys"]));
    std::fs::write(dir.join("toolhost.yaml"), format!("trust:\n  key_files: [keys/{author}.pub]\n{extra}")).unwrap();
}

/// `src` signed by `dir/keys/<key>.key` as plugin `name` `version`, at `dir/<sub>/<name>.wasm`.
pub(crate) fn signed(dir: &Path, src: &str, key: &str, name: &str, version: &str, sub: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join(sub)).unwrap();
    let out = dir.join(sub).join(format!("{name}.wasm"));
    std::fs::copy(src, &out).unwrap();
    let key = format!("keys/{key}.key");
    ok(&run(dir, &["sign", out.to_str().unwrap(), "--key", &key, "--name", name, "--version", version]));
    out
}

/// The `digest` line of `toolhost push`.
fn pushed_digest(out: &str) -> String {
    out.lines().find_map(|l| l.trim().strip_prefix("digest ")).unwrap_or_else(|| panic!("{out}")).to_string()
}

fn version_of(o: &Output) -> u64 {
    let v: serde_json::Value = serde_json::from_str(ok(o).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)));
    v["version"].as_u64().unwrap_or_else(|| panic!("{v}"))
}

#[test]
fn push_show_pull_and_load_by_tag_and_by_digest() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let reg = Registry::start(dir, None);
    trust(dir, "alice", "");
    let v1 = signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.0", "v1");
    let r = reg.reference("tools/swap:1.0.0");

    // An unsigned file is not pushed unless asked.
    std::fs::create_dir_all(dir.join("raw")).unwrap();
    std::fs::copy(SWAP_V1_PATH, dir.join("raw/swap.wasm")).unwrap();
    let o = run(dir, &["push", "raw/swap.wasm", &reg.reference("tools/raw:1")]);
    assert!(!o.status.success() && stderr(&o).contains("is not signed"), "{}", stderr(&o));

    let started = Instant::now();
    let out = ok(&run(dir, &["push", v1.to_str().unwrap(), &r]));
    eprintln!("push: {} ms (process included)", started.elapsed().as_millis());
    assert!(out.contains("pushed swap 1.0.0 by alice"), "{out}");
    let digest = pushed_digest(&out);

    // show: from the annotations, then the verified signature and trust.
    let out = ok(&run(dir, &["show", &r]));
    for want in [
        "name:         swap",
        "version:      1.0.0",
        "author:       alice",
        &format!("digest:       {digest}"),
        "version  declared p50",
        "signed by:    alice (key ed25519:",
        "trusted here: yes",
    ] {
        assert!(out.contains(want), "show lacks {want:?}:\n{out}");
    }
    let json: serde_json::Value = serde_json::from_str(&ok(&run(dir, &["show", &r, "--json"]))).unwrap();
    assert_eq!(json["annotations"]["org.opencontainers.image.title"], "swap");
    assert_eq!(json["annotations"]["dev.toolhost.signature.key-id"], json["signature"]["key_id"]);
    assert_eq!(json["trusted"], true);

    // pull: byte-identical to what was pushed.
    let started = Instant::now();
    let out = ok(&run(dir, &["pull", &r, "-o", "pulled.wasm"]));
    eprintln!("pull: {} ms (process included)", started.elapsed().as_millis());
    assert!(out.contains("this host would load it: signed by alice"), "{out}");
    assert_eq!(std::fs::read(dir.join("pulled.wasm")).unwrap(), std::fs::read(&v1).unwrap());

    // Loaded by tag and by digest, wherever a plugin file goes.
    let by_digest = format!("oci://{}/tools/swap@{digest}", reg.addr);
    assert_eq!(version_of(&run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &r])), 1);
    assert_eq!(version_of(&run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &by_digest])), 1);
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!("trust:\n  key_files: [keys/alice.pub]\nplugins:\n  builtins: false\n  files: [\"{r}\"]\n"),
    )
    .unwrap();
    assert_eq!(version_of(&run(dir, &["call", "version", "{}"])), 1);

    // A digest the registry does not serve is refused, by name (the
    // registry answers 404: the refusal is toolhost's reading of it).
    let zeros = format!("sha256:{}", "0".repeat(64));
    let wrong = format!("oci://{}/tools/swap@{zeros}", reg.addr);
    let o = run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &wrong]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!("the registry no longer serves the pinned digest {zeros}; refusing it")),
        "{}",
        stderr(&o)
    );

    // `toolhost lock` pins the digest the tag resolves to; the tag moving
    // on does not move a locked host.
    let out = ok(&run(dir, &["lock"]));
    assert!(out.contains("pinned 1 plugin"), "{out}");
    let lock = std::fs::read_to_string(dir.join("toolhost.lock")).unwrap();
    assert!(lock.contains(&format!("source: {r}")) && lock.contains(&format!("digest: {digest}")), "{lock}");
    let v2 = signed(dir, SWAP_V2_PATH, "alice", "swap", "1.0.0", "v2");
    ok(&run(dir, &["push", v2.to_str().unwrap(), &r]));
    std::fs::remove_dir_all(dir.join("cache/oci")).unwrap();
    assert_eq!(version_of(&run(dir, &["call", "version", "{}"])), 1, "the lock holds the old digest");

    // The locked digest no longer served: refused (not the tag's new target).
    let hex = digest.strip_prefix("sha256:").unwrap();
    std::fs::remove_dir_all(
        reg.storage.join(format!("docker/registry/v2/repositories/tools/swap/_manifests/revisions/sha256/{hex}")),
    )
    .unwrap();
    std::fs::remove_dir_all(dir.join("cache/oci")).unwrap();
    let o = run(dir, &["call", "version", "{}"]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains("no longer serves the pinned digest"), "{}", stderr(&o));
    // Re-locking follows the tag to the new version.
    ok(&run(dir, &["lock"]));
    assert_eq!(version_of(&run(dir, &["call", "version", "{}"])), 2);
}

#[test]
fn hostile_registries_and_untrusted_keys_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let reg = Registry::start(dir, None);
    trust(dir, "alice", "limits:\n  max_component_mib: 1\n");
    ok(&run(dir, &["keygen", "mallory", "--out", "keys"]));

    // Signed by a key this host does not trust: pulled, shown, never loaded.
    let evil = signed(dir, SWAP_V1_PATH, "mallory", "swap", "6.6.6", "evil");
    let r = reg.reference("tools/swap:evil");
    ok(&run(dir, &["push", evil.to_str().unwrap(), &r]));
    let o = run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &r]);
    assert!(!o.status.success() && stderr(&o).contains("untrusted key"), "{}", stderr(&o));
    let o = run(dir, &["show", &r]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("trusted here: no"), "{}", stdout(&o));

    // The registry serves other bytes than the manifest's digest: refused.
    let good = signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.0", "good");
    let r = reg.reference("tools/swap:1.0.0");
    ok(&run(dir, &["push", good.to_str().unwrap(), &r]));
    let json: serde_json::Value = serde_json::from_str(&ok(&run(dir, &["show", &r, "--json"]))).unwrap();
    let layer = json["layer"]["digest"].as_str().unwrap().to_string();
    std::fs::remove_dir_all(dir.join("cache/oci")).unwrap();
    let blob = reg.blob(&layer);
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    // Refused for the layer digest check, naming both digests (not for a
    // broken signature further on, which the flipped byte would also cause).
    let layer_refusal = format!("the manifest says {layer}; refusing it");
    let o = run(dir, &["pull", &r, "-o", "x.wasm"]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("the layer's sha256 is sha256:") && stderr(&o).contains(&layer_refusal),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("x.wasm").exists());
    let o = run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &r]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains(&layer_refusal), "{}", stderr(&o));

    // The registry serves other bytes for a manifest digest than the ones
    // that hash to it (one byte more, still a valid manifest): refused by
    // the manifest digest check, for a pinned digest and for `show`.
    let pinned = signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.3", "pinned");
    let r = reg.reference("tools/pinned:1.0.3");
    let digest = pushed_digest(&ok(&run(dir, &["push", pinned.to_str().unwrap(), &r])));
    let by_digest = format!("oci://{}/tools/pinned@{digest}", reg.addr);
    assert_eq!(version_of(&run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &by_digest])), 1);
    std::fs::remove_dir_all(dir.join("cache/oci")).unwrap();
    let manifest = reg.blob(&digest);
    let mut bytes = std::fs::read(&manifest).unwrap();
    bytes.push(b'\n');
    std::fs::write(&manifest, &bytes).unwrap();
    let served = sha256_hex(&bytes);
    let o = run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &by_digest]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!(
            "the registry serves different content for the pinned digest {digest} (its sha256 is sha256:{served})"
        )),
        "{}",
        stderr(&o)
    );
    let o = run(dir, &["show", &by_digest]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!("the registry served a manifest whose digest is sha256:{served}")),
        "{}",
        stderr(&o)
    );

    // Manifests of the wrong shape, pushed with the OCI client directly.
    let push_raw = |tag: &str, config_type: &str, layers: Vec<(&str, Vec<u8>)>, annotations: &[(&str, &str)]| {
        use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
        let client = oci_client::Client::new(ClientConfig { protocol: ClientProtocol::Http, ..Default::default() });
        let reference: oci_client::Reference = format!("{}/tools/hostile:{tag}", reg.addr).parse().unwrap();
        let layers: Vec<ImageLayer> =
            layers.into_iter().map(|(t, data)| ImageLayer::new(data, t.to_string(), None)).collect();
        let config = Config::new(b"{}".to_vec(), config_type.to_string(), None);
        let ann: std::collections::BTreeMap<String, String> =
            annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut manifest = oci_client::manifest::OciImageManifest::build(&layers, &config, None);
        manifest.media_type = Some("application/vnd.oci.image.manifest.v1+json".into());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let auth = oci_client::secrets::RegistryAuth::Anonymous;
        rt.block_on(client.push(&reference, &layers, config, &auth, Some(manifest.clone()))).unwrap();
        if !annotations.is_empty() {
            // Annotations through serde_json: oci-client's own manifest
            // encoding (canonical JSON) writes control characters raw, which
            // the registry rejects as invalid JSON.
            manifest.annotations = Some(ann);
            let ct = http::HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json");
            rt.block_on(client.push_manifest_raw(&reference, serde_json::to_vec(&manifest).unwrap(), ct)).unwrap();
        }
        reg.reference(&format!("tools/hostile:{tag}"))
    };
    // (Not `good`: its layer is the tampered blob now.)
    let wasm = std::fs::read(signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.2", "other")).unwrap();
    let cfg = "application/vnd.wasm.config.v0+json";
    let cases = [
        (
            push_raw("two", cfg, vec![("application/wasm", wasm.clone()), ("application/wasm", b"x".to_vec())], &[]),
            "exactly one layer",
        ),
        (
            push_raw("cfg", "application/vnd.oci.image.config.v1+json", vec![("application/wasm", wasm.clone())], &[]),
            "not a Wasm artifact",
        ),
        (push_raw("type", cfg, vec![("application/x-tar", wasm.clone())], &[]), "the layer's media type"),
        (push_raw("huge", cfg, vec![("application/wasm", vec![0u8; 2 << 20])], &[]), "over the plugin size limit"),
    ];
    for (r, why) in &cases {
        let o = run(dir, &["pull", r, "-o", "hostile.wasm"]);
        assert!(!o.status.success(), "{r}: {}", stdout(&o));
        assert!(stderr(&o).contains(why), "{r}: expected {why:?}: {}", stderr(&o));
    }
    assert!(!dir.join("hostile.wasm").exists());

    // A manifest that declares a small layer: the read stops at the
    // declared size, however much the registry would send.
    {
        use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
        let client = oci_client::Client::new(ClientConfig { protocol: ClientProtocol::Http, ..Default::default() });
        let reference: oci_client::Reference = format!("{}/tools/hostile:liar", reg.addr).parse().unwrap();
        let layers = vec![ImageLayer::new(wasm.clone(), "application/wasm".to_string(), None)];
        let config = Config::new(b"{}".to_vec(), cfg.to_string(), None);
        let mut manifest = oci_client::manifest::OciImageManifest::build(&layers, &config, None);
        manifest.media_type = Some("application/vnd.oci.image.manifest.v1+json".into());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let auth = oci_client::secrets::RegistryAuth::Anonymous;
        rt.block_on(client.push(&reference, &layers, config, &auth, Some(manifest.clone()))).unwrap();
        manifest.layers[0].size = 100;
        let ct = http::HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json");
        rt.block_on(client.push_manifest_raw(&reference, serde_json::to_vec(&manifest).unwrap(), ct)).unwrap();
        let o = run(dir, &["pull", &reg.reference("tools/hostile:liar"), "-o", "hostile.wasm"]);
        assert!(!o.status.success(), "{}", stdout(&o));
        assert!(stderr(&o).contains("more than the 100 bytes the manifest declares"), "{}", stderr(&o));
        assert!(!dir.join("hostile.wasm").exists());
    }

    // Annotations with control characters are printed escaped, and
    // annotations that disagree with the signature are called out.
    let r = push_raw(
        "ansi",
        cfg,
        vec![("application/wasm", wasm.clone())],
        &[
            ("org.opencontainers.image.description", "fine\n\u{1b}[2Jtrusted here: yes"),
            ("org.opencontainers.image.authors", "bob"),
        ],
    );
    let o = run(dir, &["show", &r]);
    let out = stdout(&o);
    // A signed package is described by its signed manifest; the registry's
    // different words are only named, never printed as facts.
    assert!(!out.contains('\u{1b}') && !out.contains("fine"), "{out}\n{}", stderr(&o));
    assert!(out.contains("description:  tools: version"), "{out}");
    assert!(out.contains("org.opencontainers.image.description disagree"), "{out}");
    assert!(out.contains("disagree with the signed manifest"), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("trusted here")).count(), 1, "{out}");

    // A tag that tries to leave the repository is no reference at all.
    for bad in [format!("oci://{}/../../etc:passwd", reg.addr), format!("oci://{}/tools/swap:../../x", reg.addr)] {
        let o = run(dir, &["pull", &bad]);
        assert!(!o.status.success() && stderr(&o).contains("not a valid registry reference"), "{}", stderr(&o));
    }
}

#[test]
fn a_restart_needs_no_registry() {
    use std::os::unix::fs::PermissionsExt as _;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    trust(dir, "alice", "");
    let v1 = signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.0", "v1");
    let (r, by_digest) = {
        let reg = Registry::start(dir, None);
        let r = reg.reference("tools/swap:1.0.0");
        let digest = pushed_digest(&ok(&run(dir, &["push", v1.to_str().unwrap(), &r])));
        let started = Instant::now();
        assert_eq!(version_of(&run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &r])), 1);
        eprintln!("first start (pull + compile): {} ms", started.elapsed().as_millis());
        (r, format!("oci://{}/tools/swap@{digest}", reg.addr))
    }; // the registry is killed here
    let started = Instant::now();
    assert_eq!(version_of(&run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &r])), 1);
    eprintln!("restart by tag, registry gone (cache): {} ms", started.elapsed().as_millis());
    let started = Instant::now();
    assert_eq!(version_of(&run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &by_digest])), 1);
    eprintln!("restart by digest, registry gone (cache): {} ms", started.elapsed().as_millis());

    // The cache is private and content addressed.
    let root = dir.join("cache/oci");
    let mut files = 0;
    for sub in ["", "blobs", "blobs/sha256", "tags"] {
        let mode = std::fs::metadata(root.join(sub)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{sub}");
    }
    for e in std::fs::read_dir(root.join("blobs/sha256")).unwrap() {
        let e = e.unwrap();
        assert_eq!(e.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        let bytes = std::fs::read(e.path()).unwrap();
        let hex: String = sha256_hex(&bytes);
        assert_eq!(e.file_name().to_str().unwrap(), hex);
        files += 1;
    }
    assert_eq!(files, 2, "the manifest and the layer");

    // A cached blob changed on disk is not used: re-verified on every read.
    for e in std::fs::read_dir(root.join("blobs/sha256")).unwrap() {
        let p = e.unwrap().path();
        let mut b = std::fs::read(&p).unwrap();
        let last = b.len() - 1;
        b[last] ^= 1;
        std::fs::write(&p, b).unwrap();
    }
    let o = run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &by_digest]);
    assert!(!o.status.success(), "a tampered cache loaded: {}", stdout(&o));
    assert!(stderr(&o).contains("cannot be reached"), "{}", stderr(&o));
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(b))
}

#[test]
fn basic_auth_with_credentials_from_the_config_file() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (user, password) = ("bob", "s3cret-Pa55word");
    let reg = Registry::start(dir, Some((user, password)));
    trust(dir, "alice", "");
    let v1 = signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.0", "v1");
    let r = reg.reference("private/swap:1.0.0");

    // Anonymous: refused by the registry.
    let o = run(dir, &["push", v1.to_str().unwrap(), &r]);
    assert!(!o.status.success(), "{}", stdout(&o));

    // A wrong password: refused, and never printed.
    let docker = dir.join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = |p: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{p}"))
    };
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths": {{"{}": {{"auth": "{}"}}}}}}"#, reg.addr, auth("wrong-guess-42")),
    )
    .unwrap();
    let with_creds = |args: &[&str]| {
        let mut cmd = th(dir);
        cmd.env("DOCKER_CONFIG", &docker).args(args);
        bounded(cmd)
    };
    let o = with_creds(&["push", v1.to_str().unwrap(), &r]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(!stderr(&o).contains("wrong-guess-42") && !stderr(&o).contains(&auth("wrong-guess-42")), "{}", stderr(&o));

    // The right one, from $DOCKER_CONFIG/config.json.
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths": {{"https://{}": {{"auth": "{}"}}}}}}"#, reg.addr, auth(password)),
    )
    .unwrap();
    let mut outputs = String::new();
    for args in [
        vec!["push", v1.to_str().unwrap(), &r],
        vec!["show", &r],
        vec!["pull", &r, "-o", "pulled.wasm"],
        vec!["call", "version", "{}", "--no-builtins", "--plugin", &r],
        vec!["lock", "--plugin", &r],
    ] {
        let o = with_creds(&args);
        outputs.push_str(&ok(&o));
        outputs.push_str(&stderr(&o));
    }
    assert_eq!(std::fs::read(dir.join("pulled.wasm")).unwrap(), std::fs::read(&v1).unwrap());
    // From toolhost's own config (oci.auth_file) too.
    std::fs::rename(docker.join("config.json"), dir.join("registry-auth.json")).unwrap();
    std::fs::write(
        dir.join("toolhost.yaml"),
        "trust:\n  key_files: [keys/alice.pub]\noci:\n  auth_file: registry-auth.json\n",
    )
    .unwrap();
    std::fs::remove_dir_all(dir.join("cache/oci")).unwrap();
    let o = with_creds(&["pull", &r, "-o", "again.wasm"]);
    outputs.push_str(&ok(&o));
    outputs.push_str(&std::fs::read_to_string(dir.join("toolhost.lock")).unwrap());
    outputs.push_str(&std::fs::read_to_string(dir.join("state/audit.jsonl")).unwrap_or_default());
    assert!(!outputs.contains(password) && !outputs.contains(&auth(password)), "a credential leaked:\n{outputs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hot_add_and_upgrade_into_a_running_serve() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let reg = Registry::start(dir, None);
    let base = "server:\n  rate_limit: { per_minute: 0 }\nplugins:\n  builtins: false\n";
    trust(dir, "alice", base);
    let v1 = signed(dir, SWAP_V1_PATH, "alice", "tool", "1.0.0", "v1");
    // fileio imports wasi:filesystem: it asks for `files`, which swap_v1 did not.
    let v2 = signed(dir, crate::common::builtin_path("fileio"), "alice", "tool", "1.1.0", "v2");
    let (r1, r2) = (reg.reference("tools/tool:1.0.0"), reg.reference("tools/tool:1.1.0"));
    ok(&run(dir, &["push", v1.to_str().unwrap(), &r1]));
    ok(&run(dir, &["push", v2.to_str().unwrap(), &r2]));
    let serve_env = |dir: &Path| {
        let mut cmd = th(dir);
        cmd.args(["serve", "--http", "127.0.0.1:0"]);
        crate::live::spawn_serving(cmd)
    };
    {
        let (_host, url) = serve_env(dir);
        let (client, changes) = connect(&url).await;
        assert!(!names(&client).await.contains(&"version".to_string()));
        let before = changes.load(std::sync::atomic::Ordering::SeqCst);
        let out = ok(&run(dir, &["plugin", "add", &r1]));
        assert!(out.starts_with("added tool") && out.contains("from oci://"), "{out}");
        eventually("list_changed after the registry add", async || {
            changes.load(std::sync::atomic::Ordering::SeqCst) > before
        })
        .await;
        assert!(names(&client).await.contains(&"version".to_string()));
        // The upgrade asks for `files`: held until granted.
        let o = run(dir, &["plugin", "add", &r2]);
        assert!(!o.status.success(), "{}", stdout(&o));
        assert!(stderr(&o).contains("asks for files which the running version did not"), "{}", stderr(&o));
        assert!(names(&client).await.contains(&"version".to_string()), "the old version still serves");
        client.cancel().await.unwrap();
    }
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!("trust:\n  key_files: [keys/alice.pub]\n{base}  files: [\"{r1}\"]\n  grants:\n    tool:\n      files:\n        - dir: ./data\n          mode: read-only\n"),
    )
    .unwrap();
    let (_host, url) = serve_env(dir);
    let (client, _) = connect(&url).await;
    assert!(names(&client).await.contains(&"version".to_string()), "loaded from plugins.files");
    let out = ok(&run(dir, &["plugin", "add", &r2]));
    assert!(out.starts_with("replaced tool") && out.contains("read_file"), "{out}");
    eventually("the new version's tools", async || names(&client).await.contains(&"read_file".to_string())).await;
    client.cancel().await.unwrap();
}

#[test]
fn interop_with_another_oci_client() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let reg = Registry::start(dir, None);
    trust(dir, "alice", "");
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers/.venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers/oras_peer.py");
    assert!(py.exists(), "run scripts/install-peers");
    let oras = |args: &[&str]| {
        let mut cmd = Command::new(&py);
        cmd.arg(&script).args(args).current_dir(dir);
        bounded(cmd)
    };

    // toolhost pushes, ORAS pulls: the same bytes.
    let v1 = signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.0", "v1");
    ok(&run(dir, &["push", v1.to_str().unwrap(), &reg.reference("tools/swap:1.0.0")]));
    let out = dir.join("by-oras.wasm");
    ok(&oras(&["pull", &format!("{}/tools/swap:1.0.0", reg.addr), out.to_str().unwrap()]));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&v1).unwrap(), "byte-identical");

    // ORAS pushes a toolhost-signed component: toolhost loads it.
    let v2 = signed(dir, SWAP_V2_PATH, "alice", "swap", "2.0.0", "v2");
    ok(&oras(&["push", &format!("{}/others/swap:2.0.0", reg.addr), v2.to_str().unwrap()]));
    let r = reg.reference("others/swap:2.0.0");
    assert_eq!(version_of(&run(dir, &["call", "version", "{}", "--no-builtins", "--plugin", &r])), 2);
    let out = ok(&run(dir, &["show", &r]));
    assert!(out.contains("signed by:    alice") && out.contains("trusted here: yes"), "{out}");
}

/// A registry that answers every request with an endless chunked body: a
/// manifest (or token answer) read whole would fill the host's memory. The
/// host must stop reading at its limit; the server counts what it wrote.
#[test]
fn an_endless_manifest_is_cut_at_the_limit_not_read_whole() {
    use std::io::{Read as _, Write as _};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let written = std::sync::Arc::new(AtomicUsize::new(0));
    let w = written.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
            let mut req = [0u8; 4096];
            let _ = s.read(&mut req);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nTransfer-Encoding: chunked\r\n\r\n",
            );
            let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, " ".repeat(64 * 1024));
            // At most 256 MiB, then give up: the host should hang up long before.
            for _ in 0..4096 {
                if s.write_all(chunk.as_bytes()).is_err() {
                    break;
                }
                w.fetch_add(64 * 1024, Ordering::SeqCst);
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let o = run(dir.path(), &["show", &format!("oci://127.0.0.1:{port}/tools/flood:1")]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("manifest is over the 262144 byte limit"), "{err}");
    // The host stopped reading within a few chunks of the limit (socket
    // buffers hold a few MiB more at most), not 256 MiB later.
    let sent = written.load(Ordering::SeqCst);
    assert!(sent < 32 << 20, "the registry got to write {sent} bytes");
}
