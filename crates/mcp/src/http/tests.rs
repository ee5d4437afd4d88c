use super::*;

#[test]
fn origins() {
    let allowed = vec!["https://dm.example.com".to_string(), "http://tools.lan:*".to_string()];
    assert!(origin_allowed("http://localhost:6274", &allowed));
    assert!(origin_allowed("http://127.0.0.1", &allowed));
    assert!(origin_allowed("https://dm.example.com", &allowed));
    assert!(origin_allowed("http://tools.lan:8080", &allowed));
    assert!(!origin_allowed("https://dm.example.com:444", &allowed));
    assert!(!origin_allowed("http://evil.example", &allowed));
    assert!(!origin_allowed("http://localhost.evil.example", &allowed));
    assert!(!origin_allowed("null", &allowed));
    // Parsed strictly: userinfo, paths, queries and other schemes refused.
    assert!(!origin_allowed("http://localhost:1@evil.example", &allowed));
    assert!(!origin_allowed("http://user@localhost", &allowed));
    assert!(!origin_allowed("http://localhost/x", &allowed));
    assert!(!origin_allowed("http://localhost?x", &allowed));
    assert!(!origin_allowed("file://localhost", &allowed));
    assert!(!origin_allowed("http://tools.lan.evil.example:8080", &allowed));
    assert!(origin_allowed("HTTP://LOCALHOST:6274", &allowed));
    assert!(origin_allowed("https://dm.example.com:443", &allowed), "the default port, written out");
    assert!(origin_allowed("http://[::1]:9", &allowed));
}

#[test]
fn hosts() {
    let mut h = HeaderMap::new();
    h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8722"));
    assert_eq!(host_of(&h).as_deref(), Some("127.0.0.1"));
    h.insert(header::HOST, HeaderValue::from_static("[::1]:8722"));
    assert_eq!(host_of(&h).as_deref(), Some("[::1]"));
    h.insert(header::HOST, HeaderValue::from_static("Evil.Example"));
    assert_eq!(host_of(&h).as_deref(), Some("evil.example"));
}
