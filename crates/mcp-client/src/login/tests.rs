use super::*;
use crate::oauth::StoredTokens as _;
use std::sync::Arc;

#[test]
fn the_pkce_verifier_is_43_unreserved_characters_and_fresh() {
    let v = pkce_verifier().unwrap();
    assert_eq!(v.len(), 43);
    assert!(v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{v}");
    assert_ne!(v, pkce_verifier().unwrap());
}

#[test]
fn the_s256_challenge_matches_rfc_7636_appendix_b() {
    assert_eq!(
        pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    );
}

#[test]
fn the_redirect_must_carry_this_logins_state() {
    assert_eq!(check_redirect("code=abc&state=s1", "s1").unwrap(), "abc");
    assert!(check_redirect("code=abc&state=s2", "s1").unwrap_err().contains("does not match"));
    assert!(check_redirect("code=abc", "s1").unwrap_err().contains("no state"));
    assert!(check_redirect("state=s1", "s1").unwrap_err().contains("no authorization code"));
    let e = check_redirect("error=access_denied&error_description=no+thanks&state=s1", "s1").unwrap_err();
    assert!(e.contains("access_denied: no thanks"), "{e}");
}

/// Sends `GET target` to the listener, returns the status line.
async fn browse(port: u16, target: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(format!("GET {target} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn the_redirect_listener_takes_only_this_logins_state() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let wait = tokio::spawn(async move { wait_for_redirect(&listener, "st4te").await });
    assert_eq!(browse(port, "/favicon.ico").await, "HTTP/1.1 404 Not Found");
    // Another local user's redirect, with a state not this sign-in's,
    // is refused and does not end the sign-in.
    for forged in ["code=evil&state=other", "error=access_denied", "code=evil"] {
        assert_eq!(browse(port, &format!("{REDIRECT_PATH}?{forged}")).await, "HTTP/1.1 400 Bad Request");
    }
    assert!(!wait.is_finished(), "still waiting for the real redirect");
    assert_eq!(browse(port, &format!("{REDIRECT_PATH}?code=c0de&state=st4te")).await, "HTTP/1.1 200 OK");
    assert_eq!(wait.await.unwrap().unwrap(), "c0de");

    // An error the authorization server sends back with our state ends it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let wait = tokio::spawn(async move { wait_for_redirect(&listener, "st4te").await });
    let status = browse(port, &format!("{REDIRECT_PATH}?error=access_denied&state=st4te")).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    assert!(wait.await.unwrap().unwrap_err().contains("access_denied"));
}

#[test]
fn the_token_endpoint_auth_follows_the_metadata() {
    let m = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(choose_auth(&m(&["none"]), false).unwrap(), "none");
    assert_eq!(choose_auth(&m(&[]), true).unwrap(), "client_secret_basic");
    assert_eq!(choose_auth(&m(&["client_secret_post"]), true).unwrap(), "client_secret_post");
    assert!(choose_auth(&m(&["client_secret_basic"]), false).is_err());
    assert!(choose_auth(&m(&["private_key_jwt"]), true).is_err());
}

fn stored(token_endpoint: &str) -> StoredLogin {
    StoredLogin {
        server_url: "http://127.0.0.1:1/mcp".into(),
        resource: "http://127.0.0.1:1/mcp".into(),
        issuer: "http://127.0.0.1:1".into(),
        token_endpoint: token_endpoint.into(),
        client_id: "c".into(),
        client_secret: None,
        auth_method: "none".into(),
        access_token: "old".into(),
        refresh_token: Some("r3fresh".into()),
        expires_at: Some(1),
        scopes: Vec::new(),
    }
}

#[tokio::test]
async fn an_expired_or_refused_login_is_refreshed_else_the_user_is_told_to_sign_in() {
    use axum::routing::post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token_url = format!("http://{}/token", listener.local_addr().unwrap());
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let router = axum::Router::new().route(
        "/token",
        post(move |body: String| async move {
            let mut log = log.lock().unwrap();
            log.push(body);
            axum::Json(serde_json::json!({
                "access_token": format!("new-{}", log.len()),
                "token_type": "Bearer",
                "expires_in": 3600,
            }))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    save(dir.path(), "srv", &stored(&token_url)).unwrap();
    let url = "http://127.0.0.1:1/mcp";
    let tokens = LoginTokens::load(dir.path(), "srv", url, reqwest::Client::new()).unwrap().unwrap();
    // Expired: refreshed before use, and kept.
    assert_eq!(tokens.current().await.unwrap(), "new-1");
    let form: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(seen.lock().unwrap()[0].as_bytes()).into_owned().collect();
    assert_eq!(form["grant_type"], "refresh_token");
    assert_eq!(form["refresh_token"], "r3fresh");
    assert_eq!(form["resource"], url);
    assert_eq!(form["client_id"], "c");
    assert_eq!(load(dir.path(), "srv").unwrap().unwrap().access_token, "new-1");
    assert_eq!(tokens.current().await.unwrap(), "new-1", "valid: no refresh");
    // A 401 for a replaced token: the current one; for the current one: a refresh.
    assert_eq!(tokens.refused(Some("old"), Refusal::Unauthorized, "", None).await.unwrap(), "new-1");
    assert_eq!(tokens.refused(Some("new-1"), Refusal::Unauthorized, "", None).await.unwrap(), "new-2");
    // More scope, and no person behind the request to show a URL to: sign in again.
    let e = tokens
        .refused(Some("new-2"), Refusal::InsufficientScope, r#"Bearer error="insufficient_scope", scope="admin""#, None)
        .await
        .unwrap_err();
    assert!(e.contains("(admin)") && e.ends_with("run `toolhost auth login srv`"), "{e}");
    // No refresh token: sign in again.
    save(dir.path(), "srv", &StoredLogin { refresh_token: None, ..stored(&token_url) }).unwrap();
    let tokens = LoginTokens::load(dir.path(), "srv", url, reqwest::Client::new()).unwrap().unwrap();
    let e = tokens.current().await.unwrap_err();
    assert!(e.ends_with("run `toolhost auth login srv`"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 2);
    // A login stored for another URL is not used.
    let e = LoginTokens::load(dir.path(), "srv", "http://127.0.0.1:2/mcp", reqwest::Client::new()).unwrap_err();
    assert!(e.contains("run `toolhost auth login srv`"), "{e}");
}

#[test]
fn stored_logins_are_private_and_listed_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let login = StoredLogin {
        server_url: "http://127.0.0.1:1/mcp".into(),
        resource: "http://127.0.0.1:1/mcp".into(),
        issuer: "http://127.0.0.1:1".into(),
        token_endpoint: "http://127.0.0.1:1/token".into(),
        client_id: "c".into(),
        client_secret: Some("s3cret".into()),
        auth_method: "client_secret_basic".into(),
        access_token: "acc3ss".into(),
        refresh_token: Some("r3fresh".into()),
        expires_at: Some(10),
        scopes: vec!["a".into()],
    };
    save(dir.path(), "srv", &login).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let path = record_path(dir.path(), "srv").unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(load(dir.path(), "srv").unwrap().unwrap().access_token, "acc3ss");
    let listed = serde_json::to_string(&status(dir.path())).unwrap();
    assert!(listed.contains("\"srv\"") && !listed.contains("s3cret") && !listed.contains("acc3ss"), "{listed}");
    assert!(!format!("{login:?}").contains("acc3ss"));
    assert!(record_path(dir.path(), "../x").is_err());
    assert!(remove(dir.path(), "srv").unwrap());
    assert!(!remove(dir.path(), "srv").unwrap());
}
