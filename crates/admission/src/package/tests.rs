use super::*;

/// The smallest valid component header plus a custom section, enough
/// for the package layer (which never compiles anything).
fn component() -> Vec<u8> {
    let mut b = b"\0asm\x0d\x00\x01\x00".to_vec();
    b.extend_from_slice(&[0, 5, 4, b'n', b'o', b't', b'e']);
    b
}

fn policy(k: &KeyPair) -> TrustPolicy {
    TrustPolicy { keys: vec![k.public()], ..TrustPolicy::default() }
}

#[test]
fn a_new_policy_still_admits_only_what_it_would_load() {
    let (alice, mallory) = (KeyPair::generate("alice").unwrap(), KeyPair::generate("mallory").unwrap());
    let (pkg, _) = alice.sign(&component(), "demo", "1.0.0", "d", vec![]).unwrap();
    let (_, prov) = policy(&alice).admit("demo", &pkg).unwrap();
    let digest = sha256_hex(&component());
    policy(&alice).still_admits("demo", &digest, &prov).unwrap();
    let err = policy(&mallory).still_admits("demo", &digest, &prov).unwrap_err();
    assert!(matches!(err, PackageError::Untrusted { .. }), "{err}");
    let open = TrustPolicy { allow_unsigned: true, ..policy(&mallory) };
    open.still_admits("demo", &digest, &prov).unwrap();
    let unsigned = Provenance::Unsigned { reason: "unsigned".into() };
    assert!(matches!(policy(&alice).still_admits("x", &digest, &unsigned), Err(PackageError::Unsigned { .. })));
    policy(&mallory).still_admits("x", &digest, &Provenance::Builtin).unwrap();
}

#[test]
fn signed_by_a_trusted_key_is_admitted_and_the_section_stripped() {
    let k = KeyPair::generate("alice").unwrap();
    let (pkg, manifest) = k.sign(&component(), "demo", "1.0.0", "d", vec!["files".into()]).unwrap();
    let (bytes, prov) = policy(&k).admit("demo", &pkg).unwrap();
    assert_eq!(bytes, &component()[..]);
    assert_eq!(
        prov,
        Provenance::Signed {
            manifest: Box::new(manifest.clone()),
            key_name: "alice".into(),
            public_key: k.public().public_key,
            sigstore: None,
        }
    );
    // Re-signing replaces the section rather than stacking another.
    let (again, _) = k.sign(&pkg, "demo", "1.0.1", "d", vec![]).unwrap();
    assert_eq!(parse(&again).unwrap().component, &component()[..]);
}

#[test]
fn a_changed_byte_breaks_the_signature() {
    let k = KeyPair::generate("alice").unwrap();
    let (mut pkg, _) = k.sign(&component(), "demo", "1.0.0", "", vec![]).unwrap();
    pkg[12] ^= 1; // inside the component, before the package section
    let e = policy(&k).admit("demo", &pkg).unwrap_err();
    assert!(matches!(e, PackageError::BadSignature { .. }), "{e}");
    let mut lenient = policy(&k);
    lenient.allow_unsigned = true;
    assert!(lenient.admit("demo", &pkg).is_err(), "a broken signature is never excused");
}

#[test]
fn unsigned_and_untrusted_are_refused_unless_allowed() {
    let k = KeyPair::generate("alice").unwrap();
    let mallory = KeyPair::generate("mallory").unwrap();
    let e = policy(&k).admit("demo", &component()).unwrap_err();
    assert!(matches!(e, PackageError::Unsigned { .. }), "{e}");
    let (pkg, _) = mallory.sign(&component(), "demo", "1.0.0", "", vec![]).unwrap();
    let e = policy(&k).admit("demo", &pkg).unwrap_err();
    assert!(matches!(e, PackageError::Untrusted { .. }), "{e}");
    let mut lenient = policy(&k);
    lenient.allow_unsigned = true;
    let (_, prov) = lenient.admit("demo", &pkg).unwrap();
    assert!(matches!(prov, Provenance::Unsigned { .. }));
}

#[test]
fn the_lock_file_pins_digests() {
    let k = KeyPair::generate("alice").unwrap();
    let (pkg, manifest) = k.sign(&component(), "demo", "1.0.0", "", vec![]).unwrap();
    let mut p = policy(&k);
    let mut lock = LockFile::default();
    lock.plugins.insert(
        "demo".into(),
        LockEntry { sha256: manifest.sha256.clone(), version: None, source: None, digest: None },
    );
    p.lock = Some(lock.clone());
    assert!(p.admit("demo", &pkg).is_ok());
    lock.plugins
        .insert("demo".into(), LockEntry { sha256: "00".repeat(32), version: None, source: None, digest: None });
    p.lock = Some(lock);
    assert!(matches!(p.admit("demo", &pkg).unwrap_err(), PackageError::LockMismatch { .. }));
}

#[test]
fn a_key_is_shown_as_one_fingerprint() {
    let k = KeyPair::generate("alice").unwrap();
    let public = k.public();
    let raw = B64.decode(&public.public_key).unwrap();
    let want = format!("ed25519:{}", &sha256_hex(&raw)[..16]);
    assert_eq!(fingerprint(&public.public_key), want);
    assert_eq!(public.fingerprint(), format!("{want} (alice)"));
    assert_eq!(fingerprint("not base64!"), "ed25519:?");
    // Errors and reports show the fingerprint, never the base64 key.
    let mallory = KeyPair::generate("mallory").unwrap();
    let (pkg, _) = mallory.sign(&component(), "demo", "1.0.0", "", vec![]).unwrap();
    let e = policy(&k).admit("demo", &pkg).unwrap_err().to_string();
    assert!(e.contains(&fingerprint(&mallory.public().public_key)), "{e}");
    assert!(!e.contains(&mallory.public().public_key), "{e}");
    let (pkg, _) = k.sign(&component(), "demo", "1.0.0", "", vec![]).unwrap();
    let (_, prov) = policy(&k).admit("demo", &pkg).unwrap();
    assert!(prov.describe().contains(&format!("trusted key {want} (alice)")), "{}", prov.describe());
}

#[test]
fn keys_round_trip_through_files() {
    let dir = tempfile::tempdir().unwrap();
    let k = KeyPair::generate("alice").unwrap();
    k.save(&dir.path().join("alice")).unwrap();
    let back = KeyPair::load(&dir.path().join("alice.key")).unwrap();
    assert_eq!(back.public(), k.public());
    assert!(k.save(&dir.path().join("alice")).is_err(), "never overwrites a key");
}

#[test]
fn a_revoked_key_or_component_is_refused_whatever_else_trusts_it() {
    let alice = KeyPair::generate("alice").unwrap();
    let (pkg, _) = alice.sign(&component(), "demo", "1.0.0", "d", vec![]).unwrap();
    let (_, prov) = policy(&alice).admit("demo", &pkg).unwrap();
    let digest = sha256_hex(&component());
    let key_id = fingerprint(&alice.public().public_key);
    for (entry, what) in [
        (key_id.clone(), "its signing key"),
        (digest.clone(), "its component"),
        (format!("sha256:{digest}"), "its component"),
    ] {
        // Even a policy admitting everything refuses it.
        let p = TrustPolicy { revoked: vec![entry.clone()], allow_unsigned: true, ..policy(&alice) };
        let err = p.admit("demo", &pkg).unwrap_err();
        assert_eq!(
            err,
            PackageError::Revoked { plugin: "demo".into(), by: "trust.revoked".into(), entry: entry.clone(), what }
        );
        assert!(err.to_string().contains(&format!("trust.revoked lists {entry} ({what})")), "{err}");
        assert_eq!(p.still_admits("demo", &digest, &prov).unwrap_err(), err, "a loaded one is refused too");
    }
    // An unsigned component, revoked by digest.
    let open = TrustPolicy { revoked: vec![digest.clone()], ..TrustPolicy::permissive() };
    assert!(matches!(open.admit("demo", &component()), Err(PackageError::Revoked { .. })));
    // Another key's revocation changes nothing for alice.
    let other = fingerprint(&KeyPair::generate("bob").unwrap().public().public_key);
    TrustPolicy { revoked: vec![other], ..policy(&alice) }.admit("demo", &pkg).unwrap();
    assert!(check_revoked_entry(&key_id).is_ok() && check_revoked_entry(&digest).is_ok());
    assert!(check_revoked_entry("alice").unwrap_err().to_string().contains("neither a key id"));
    assert!(check_revoked_entry(&key_id.to_uppercase()).is_err());
}

#[test]
fn a_plugin_signed_outside_its_keys_window_is_refused_with_the_dates() {
    let alice = KeyPair::generate("alice").unwrap();
    let (pkg, manifest) = alice.sign(&component(), "demo", "1.0.0", "d", vec![]).unwrap();
    let signed_at = manifest.signed_at.clone().expect("sign records when");
    let windowed = |not_before: Option<&str>, not_after: Option<&str>| TrustPolicy {
        keys: vec![PublicKey {
            not_before: not_before.map(str::to_string),
            not_after: not_after.map(str::to_string),
            ..alice.public()
        }],
        ..policy(&alice)
    };
    windowed(Some("2020-01-01T00:00:00Z"), Some("2999-01-01T00:00:00Z")).admit("demo", &pkg).unwrap();
    let expired = windowed(None, Some("2021-06-30T00:00:00Z"));
    let err = expired.admit("demo", &pkg).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "plugin \"demo\" was signed by key \"alice\" at {signed_at}, outside the window trust gives that key (until 2021-06-30T00:00:00Z); refusing it"
        )
    );
    let err = windowed(Some("2999-01-01T00:00:00Z"), None).admit("demo", &pkg).unwrap_err();
    assert!(err.to_string().contains("(from 2999-01-01T00:00:00Z)"), "{err}");
    // Loaded, then the window closes: a reload's policy refuses it.
    let (_, prov) = policy(&alice).admit("demo", &pkg).unwrap();
    assert!(matches!(
        expired.still_admits("demo", &sha256_hex(&component()), &prov),
        Err(PackageError::OutsideKeyWindow { .. })
    ));
    // A manifest with no signing time (signed before toolhost recorded
    // one) is outside any window.
    let old = Provenance::Signed {
        manifest: Box::new(Manifest { signed_at: None, ..manifest }),
        key_name: "alice".into(),
        public_key: alice.public().public_key,
        sigstore: None,
    };
    let err = expired.still_admits("demo", &sha256_hex(&component()), &old).unwrap_err();
    assert!(err.to_string().contains("with no signing time"), "{err}");
    assert!(check_key_window(&PublicKey { not_after: Some("tomorrow".into()), ..alice.public() }).is_err());
    assert!(
        check_key_window(&PublicKey {
            not_before: Some("2027-01-01T00:00:00Z".into()),
            not_after: Some("2026-01-01T00:00:00Z".into()),
            ..alice.public()
        })
        .unwrap_err()
        .to_string()
        .contains("after")
    );
}

#[test]
fn a_reload_keeps_a_sigstore_plugin_only_while_its_publisher_is_trusted_and_not_revoked() {
    let alice = crate::sigstore::Signer::Identity {
        identity: "alice@example.org".into(),
        issuer: "https://accounts.example.org".into(),
    };
    let publisher =
        |signer: crate::sigstore::Signer| Publisher { name: "alice".into(), signer, not_before: None, not_after: None };
    let (manifest, _) = Manifest::prepare(&component(), "demo", "1.0.0", "alice", "", vec![], Asks::default()).unwrap();
    let loaded = Provenance::Signed {
        manifest: Box::new(manifest),
        key_name: "alice".into(),
        public_key: String::new(),
        sigstore: Some(SigstoreSigned {
            identity: Some("alice@example.org".into()),
            issuer: Some("https://accounts.example.org".into()),
            key_id: None,
            key_sha256: None,
            logged_at: "2026-11-30T00:00:00Z".into(),
            log_index: 7,
        }),
    };
    let digest = sha256_hex(&component());
    let trusting = TrustPolicy { publishers: vec![publisher(alice.clone())], ..TrustPolicy::default() };
    trusting.still_admits("demo", &digest, &loaded).unwrap();
    // Another issuer for the same identity is another publisher.
    let other = crate::sigstore::Signer::Identity {
        identity: "alice@example.org".into(),
        issuer: "https://other.example.org".into(),
    };
    let moved = TrustPolicy { publishers: vec![publisher(other)], ..TrustPolicy::default() };
    assert!(matches!(moved.still_admits("demo", &digest, &loaded), Err(PackageError::UntrustedPublisher { .. })));
    // Revoked by identity, whatever trusts it.
    let revoked = TrustPolicy { revoked: vec!["alice@example.org".into()], ..trusting.clone() };
    let err = revoked.still_admits("demo", &digest, &loaded).unwrap_err();
    assert!(err.to_string().contains("(its publisher)"), "{err}");
    // A window the log's time falls outside.
    let closed = TrustPolicy {
        publishers: vec![Publisher { not_after: Some("2026-01-01T00:00:00Z".into()), ..publisher(alice) }],
        ..TrustPolicy::default()
    };
    assert!(matches!(closed.still_admits("demo", &digest, &loaded), Err(PackageError::OutsideKeyWindow { .. })));
}

#[test]
fn keyed_publishers_match_by_the_whole_key_digest_not_the_short_id() {
    use crate::sigstore::Signer;
    let key = |sha256: &str| Signer::Key { key_id: "ecdsa:0123456789abcdef".into(), sha256: sha256.into() };
    let trusted = Publisher { name: "ci".into(), signer: key(&"a".repeat(64)), not_before: None, not_after: None };
    let policy = TrustPolicy { publishers: vec![trusted], ..TrustPolicy::default() };
    let (manifest, _) = Manifest::prepare(&component(), "demo", "1.0.0", "ci", "", vec![], Asks::default()).unwrap();
    let signed = |sha256: &str| SigstoreSigned {
        identity: None,
        issuer: None,
        key_id: Some("ecdsa:0123456789abcdef".into()),
        key_sha256: Some(sha256.into()),
        logged_at: "2026-11-30T00:00:00Z".into(),
        log_index: 1,
    };
    policy.trusted_publisher("demo", &signed(&"a".repeat(64)), &manifest).unwrap();
    // The same short id, another key: not trusted.
    assert!(matches!(
        policy.trusted_publisher("demo", &signed(&"b".repeat(64)), &manifest),
        Err(PackageError::UntrustedPublisher { .. })
    ));
}

#[test]
fn control_characters_in_a_manifest_are_refused_at_signing_and_at_load() {
    let k = KeyPair::generate("alice\u{1b}[8m").unwrap();
    let err = k.sign(&component(), "demo", "1.0.0", "", vec![]).unwrap_err();
    assert!(err.to_string().contains("control character"), "{err}");
    // A package made by hand with one: refused when read.
    let (mut manifest, _) =
        Manifest::prepare(&component(), "demo", "1.0.0", "alice", "", vec![], Asks::default()).unwrap();
    manifest.version = "1.0.0\nthis host would load it".into();
    let text = serde_json::to_string(&manifest).unwrap();
    let env = Envelope {
        signature: B64.encode(SigningKey::from_bytes(&[7; 32]).sign(text.as_bytes()).to_bytes()),
        public_key: B64.encode(SigningKey::from_bytes(&[7; 32]).verifying_key().to_bytes()),
        manifest: text,
        sigstore: None,
    };
    let pkg = section::with_envelope(&component(), &env).unwrap();
    let err = parse(&pkg).unwrap().verify("demo").unwrap_err();
    assert!(err.to_string().contains("control characters"), "{err}");
}

#[test]
fn a_package_section_over_its_limit_is_refused_unread() {
    let mut pkg = component();
    let mut section = Vec::new();
    section.push(SECTION.len() as u8);
    section.extend_from_slice(SECTION.as_bytes());
    section.extend(std::iter::repeat_n(b' ', MAX_SECTION_BYTES + 1));
    pkg.push(0);
    section::leb128(section.len(), &mut pkg);
    pkg.extend_from_slice(&section);
    let err = parse(&pkg).err().unwrap();
    assert!(err.to_string().contains("over the 1048576"), "{err}");
}

#[test]
fn a_sigstore_identity_is_revoked_whatever_its_case_and_publishers_refuse_stray_spaces() {
    let signed = SigstoreSigned {
        identity: Some("alice@example.org".into()),
        issuer: Some("https://accounts.example.org".into()),
        key_id: None,
        key_sha256: None,
        logged_at: "2026-11-30T00:00:00Z".into(),
        log_index: 1,
    };
    let policy = TrustPolicy { revoked: vec!["Alice@Example.org".into()], ..TrustPolicy::default() };
    let err = policy.check_revoked("demo", Some(&window::Signer::Sigstore(&signed)), &"0".repeat(64)).unwrap_err();
    assert!(err.to_string().contains("(its publisher)"), "{err}");
    let entry = PublisherConfig {
        identity: Some("alice@example.org ".into()),
        issuer: Some("https://accounts.example.org".into()),
        ..PublisherConfig::default()
    };
    let err = entry.resolve(|_| Err("no files".into())).unwrap_err();
    assert!(err.contains("spaces around it"), "{err}");
}
