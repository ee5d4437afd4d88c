//! Revocation lists published to a catalogue (#50, item 4), through the
//! binary against the real registry: a list signed by the key the operator
//! names in `marketplace.revocations_signed_by` unloads what it revokes
//! from a serving host within one interval, without a restart (audited,
//! `list_changed`, held back with the list named); a list signed by anyone
//! else is ignored; in a fleet, every host drops it.

use crate::common::{stderr, stdout};
use crate::live::{connect, eventually, names, spawn_serving};
use crate::oci::{Registry, ok, run, signed, th};
use serde_json::Value;
use std::path::Path;
use std::sync::atomic::Ordering;
use toolhost_test_artifacts::SWAP_V1_PATH;

fn key_id(dir: &Path, key: &str) -> String {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("keys/{key}.pub"))).unwrap()).unwrap();
    toolhost::package::fingerprint(v["public_key"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_list_signed_by_the_named_key_unloads_what_it_revokes_within_an_interval_and_others_are_ignored() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let reg = Registry::start(dir, None);
    for k in ["alice", "security", "mallory"] {
        ok(&run(dir, &["keygen", k, "--out", "keys"]));
    }
    let swap = signed(dir, SWAP_V1_PATH, "alice", "swap", "1.0.0", "v1");
    let (alice, security) = (key_id(dir, "alice"), key_id(dir, "security"));
    let catalogue = reg.reference("market/catalogue");
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "trust:\n  key_files: [keys/alice.pub]\nplugins:\n  builtins: false\n  files: [{:?}]\nmarketplace:\n  catalogues: [\"{catalogue}\"]\n  revocations_signed_by: [\"{security}\"]\n  revocations_secs: 1\naudit:\n  path: audit.jsonl\n",
            swap.display()
        ),
    )
    .unwrap();
    let mut serve = th(dir);
    serve.args(["serve", "--http", "127.0.0.1:0"]);
    let (host, url) = spawn_serving(serve);
    let (client, changed) = connect(&url).await;
    assert!(names(&client).await.contains(&"version".to_string()));

    // Malformed entries are refused before anything is pushed.
    let o = run(dir, &["revoke", "alice", "--key", "keys/security.key"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("revoked[0]: \"alice\" is neither a key id"), "{}", stderr(&o));

    // Mallory's list is ignored: her key is not the one named (a list's
    // tag names its signer, so it is not even fetched). Three intervals
    // pass and the plugin still serves.
    let o = ok(&run(dir, &["revoke", &alice, "--key", "keys/mallory.key", "--reason", "trust me"]));
    assert!(o.contains(&format!("listed in {catalogue}")), "{o}");
    ok(&run(dir, &["reload"]));
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(names(&client).await.contains(&"version".to_string()), "a list by another key changes nothing");

    // The security team's list: gone within an interval, no reload.
    let before = changed.load(Ordering::SeqCst);
    let o = ok(&run(dir, &["revoke", &alice, "--key", "keys/security.key", "--reason", "key leaked"]));
    assert!(o.contains(&format!("revoked {alice} (signed by {security}")), "{o}");
    eventually("the session was told its list changed", async || changed.load(Ordering::SeqCst) > before).await;
    assert!(!names(&client).await.contains(&"version".to_string()), "the revoked plugin's tools gone");
    let list: Value = serde_json::from_str(&ok(&run(dir, &["plugin", "list", "--json"]))).unwrap();
    let why = list["withheld"][0]["reason"].as_str().unwrap_or_default().to_string();
    assert_eq!(list["withheld"][0]["name"], "swap", "{list}");
    assert!(why.contains(&format!("signed by {security}")) && why.contains("key leaked"), "{why}");
    assert!(why.contains(&format!("lists {alice} (its signing key)")), "{why}");
    // Audited, with the list named.
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    let removed = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["event"] == "plugin_remove" && r["plugin"] == "swap")
        .unwrap_or_else(|| panic!("no plugin_remove record of swap:\n{audit}"));
    assert!(removed.to_string().contains("revocation list"), "{removed}");
    // A reload keeps it revoked (the config's trust.revoked is empty).
    let out = ok(&run(dir, &["reload"]));
    assert!(!names(&client).await.contains(&"version".to_string()), "{out}");
    client.cancel().await.unwrap();

    // The registry goes away, and the host restarts: the copy it read keeps
    // the plugin revoked from the first list a client sees.
    drop(host);
    drop(reg);
    let mut serve = th(dir);
    serve.args(["serve", "--http", "127.0.0.1:0"]);
    let (_host, url) = spawn_serving(serve);
    let (client, _) = connect(&url).await;
    assert!(!names(&client).await.contains(&"version".to_string()), "revoked from the start, registry or not");
    client.cancel().await.unwrap();
}

/// Two hosts of a fleet, a plugin added through one: a revocation list
/// reaches both.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_fleet_every_host_drops_a_revoked_plugin() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (_db, url) = crate::pg::database();
    let reg = Registry::start(root, None);
    for k in ["alice", "security"] {
        ok(&run(root, &["keygen", k, "--out", "keys"]));
    }
    let tool = signed(root, SWAP_V1_PATH, "alice", "version", "1.0.0", "v1");
    let reference = reg.reference("tools/version:1.0.0");
    ok(&run(root, &["push", tool.to_str().unwrap(), &reference]));
    let (alice, security) = (key_id(root, "alice"), key_id(root, "security"));
    let catalogue = reg.reference("market/catalogue");
    let key = root.join("cluster.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut hosts = Vec::new();
    for id in ["a", "b"] {
        let dir = root.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("toolhost.yaml"),
            format!(
                "trust:\n  key_files: [{}]\ncluster:\n  url: {url}\n  host_id: {id}\n  secret_key_file: {}\nplugins:\n  builtins: false\nmarketplace:\n  catalogues: [\"{catalogue}\"]\n  revocations_signed_by: [\"{security}\"]\n  revocations_secs: 1\n",
                root.join("keys/alice.pub").display(),
                key.display()
            ),
        )
        .unwrap();
        let mut serve = th(&dir);
        serve.args(["serve", "--http", "127.0.0.1:0"]);
        let (proc, url) = spawn_serving(serve);
        hosts.push((dir, proc, url));
    }
    let o = run(&hosts[0].0, &["plugin", "add", &reference]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let mut clients = Vec::new();
    for (_, _, url) in &hosts {
        let (c, changed) = connect(url).await;
        eventually("the plugin on every host", async || names(&c).await.contains(&"version".to_string())).await;
        clients.push((c, changed));
    }
    ok(&run(root, &["revoke", &alice, "--key", "keys/security.key", "--catalogue", &catalogue]));
    for (c, _) in &clients {
        eventually("gone on every host", async || !names(c).await.contains(&"version".to_string())).await;
    }
    for (c, changed) in clients {
        assert!(changed.load(Ordering::SeqCst) > 0);
        c.cancel().await.unwrap();
    }
}
