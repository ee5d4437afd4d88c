use super::*;

#[test]
fn references_parse_strictly() {
    let r = OciRef::parse("oci://127.0.0.1:5000/tools/demo:1.0.0").unwrap();
    assert_eq!((r.registry(), r.repository(), r.tag()), ("127.0.0.1:5000", "tools/demo", Some("1.0.0")));
    assert_eq!(r.short_name(), "demo");
    assert_eq!(r.to_string(), "oci://127.0.0.1:5000/tools/demo:1.0.0");
    let d = format!("sha256:{}", "ab".repeat(32));
    let r = OciRef::parse(&format!("oci://localhost:5000/demo@{d}")).unwrap();
    assert_eq!(r.digest(), Some(d.as_str()));
    for bad in [
        "127.0.0.1:5000/demo:1",
        "oci://demo:1",
        "oci://host/../etc:1",
        "oci://host/a/..:x",
        "oci://host/demo:../../x",
        "oci://host/demo:a/b",
        "oci://host/demo@sha256:xyz",
        "oci://host/demo@sha512:00",
        "oci://host/de mo:1",
        "oci://host/demo:1\n",
    ] {
        assert!(OciRef::parse(bad).is_err(), "{bad:?} accepted");
    }
    let e = OciRef::parse("oci://alice:s3cret@host/demo:1").unwrap_err().to_string();
    assert!(!e.contains("s3cret") && !e.contains("alice"), "{e}");
}

#[test]
fn loopback_is_recognised() {
    for l in ["127.0.0.1:5000", "localhost:80", "localhost", "[::1]:5000", "127.1.2.3"] {
        assert!(is_loopback(l), "{l}");
    }
    for n in ["example.com:5000", "10.0.0.1:5000", "[::2]:1", "localhost.evil.com"] {
        assert!(!is_loopback(n), "{n}");
    }
}

#[test]
fn credentials_come_from_the_auth_file_for_that_registry_only() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("config.json");
    let auth = base64::engine::general_purpose::STANDARD.encode("bob:hunter2");
    std::fs::write(&f, format!(r#"{{"auths": {{"https://127.0.0.1:5000": {{"auth": "{auth}"}}}}}}"#)).unwrap();
    let c = Credentials { files: vec![f.clone()], env: None };
    let (a, from) = c.for_registry("127.0.0.1:5000").unwrap();
    assert!(matches!(a, RegistryAuth::Basic(u, p) if u == "bob" && p == "hunter2"));
    assert_eq!(from, f.display().to_string());
    assert!(matches!(c.for_registry("127.0.0.1:5001").unwrap().0, RegistryAuth::Anonymous));
    std::fs::write(&f, r#"{"auths": {"127.0.0.1:5000": {"auth": "hunter2-not-base64!"}}}"#).unwrap();
    let e = c.for_registry("127.0.0.1:5000").unwrap_err().to_string();
    assert!(!e.contains("hunter2"), "{e}");
    assert!(format!("{c:?}").len() < 200);
}
