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

#[test]
fn references_follow_the_distribution_grammar() {
    for good in [
        "oci://localhost/a",
        "oci://registry.example.org:443/ns/sub/name_x.y__z--w:V1.0_rc-1",
        "oci://[::1]:5000/demo:1",
        "oci://10.0.0.1/a/b",
    ] {
        let r = OciRef::parse(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        let tagged = good.rsplit('/').next().is_some_and(|last| last.contains(':'));
        assert_eq!(r.to_string(), if tagged { good.to_string() } else { format!("{good}:latest") });
    }
    let r = OciRef::parse("oci://docker.io/busybox:1").unwrap();
    assert_eq!((r.registry(), r.repository()), ("docker.io", "library/busybox"));
    for (bad, why) in [
        ("oci://host/Demo:1", "lowercase"),
        ("oci://host/a..b:1", "not a valid name"),
        ("oci://host/-a:1", "not a valid name"),
        ("oci://host/a_:1", "not a valid name"),
        ("oci://host/a___b:1", "not a valid name"),
        ("oci://host//a:1", "not a valid name"),
        ("oci://host/a:.x", "the tag is not valid"),
        ("oci://ho_st/a:1", "the registry is not"),
        ("oci://host:port/a:1", "the registry is not"),
        ("oci://[nope]:1/a:1", "the registry is not"),
    ] {
        let e = OciRef::parse(bad).map(|r| r.to_string()).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
    let long = format!("oci://host/{}:1", "a".repeat(260));
    assert!(OciRef::parse(&long).unwrap_err().to_string().contains("over 255"));
}
