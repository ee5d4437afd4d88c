use super::*;

fn url(s: &str) -> Url {
    Url::parse(s).unwrap()
}

#[test]
fn a_bearer_challenge_yields_its_metadata_url_and_scope() {
    let base = url("https://mcp.example.com/mcp");
    let b = Bearer::parse(
        r#"Basic realm="x", Bearer realm="mcp", error="insufficient_scope", scope="files:read  files:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", error_description="need \"more\"""#,
        &base,
    );
    assert_eq!(
        b.resource_metadata.as_ref().map(Url::as_str),
        Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
    );
    assert_eq!(b.scopes(), ["files:read", "files:write"]);
    assert_eq!(b.error_description.as_deref(), Some(r#"need "more""#));
    // Unquoted values, a relative metadata URL, another scheme's params ignored.
    let b = Bearer::parse("Negotiate abc==, Bearer resource_metadata=/meta.json,scope=a", &base);
    assert_eq!(b.resource_metadata.as_ref().map(Url::as_str), Some("https://mcp.example.com/meta.json"));
    assert_eq!(b.scopes(), ["a"]);
    assert_eq!(Bearer::parse("Basic realm=\"scope\"", &base), Bearer::default());
    assert_eq!(Bearer::parse("", &base), Bearer::default());
}

#[test]
fn well_known_urls_follow_the_specs_order() {
    let prm: Vec<String> = prm_urls(&url("https://h.example/api/mcp/?x=1")).iter().map(Url::to_string).collect();
    assert_eq!(
        prm,
        [
            "https://h.example/.well-known/oauth-protected-resource/api/mcp",
            "https://h.example/.well-known/oauth-protected-resource"
        ]
    );
    let prm: Vec<String> = prm_urls(&url("https://h.example")).iter().map(Url::to_string).collect();
    assert_eq!(prm, ["https://h.example/.well-known/oauth-protected-resource"]);
    let meta: Vec<String> = as_metadata_urls(&url("https://auth.example/tenant1")).iter().map(Url::to_string).collect();
    assert_eq!(
        meta,
        [
            "https://auth.example/.well-known/oauth-authorization-server/tenant1",
            "https://auth.example/.well-known/openid-configuration/tenant1",
            "https://auth.example/tenant1/.well-known/openid-configuration"
        ]
    );
    let meta: Vec<String> = as_metadata_urls(&url("https://auth.example/")).iter().map(Url::to_string).collect();
    assert_eq!(
        meta,
        [
            "https://auth.example/.well-known/oauth-authorization-server",
            "https://auth.example/.well-known/openid-configuration"
        ]
    );
}

#[test]
fn metadata_speaks_only_for_its_own_resource() {
    let server = url("https://mcp.example.com/tools/mcp");
    assert!(resource_matches("https://mcp.example.com/tools/mcp", &server));
    assert!(resource_matches("https://mcp.example.com/tools/mcp/", &server));
    assert!(resource_matches("https://mcp.example.com/tools", &server));
    assert!(resource_matches("https://MCP.example.com", &server));
    assert!(!resource_matches("https://mcp.example.com/tool", &server));
    assert!(!resource_matches("https://mcp.example.com/tools/mcp/other", &server));
    assert!(!resource_matches("https://evil.example.com/tools/mcp", &server));
    assert!(!resource_matches("http://mcp.example.com/tools/mcp", &server));
    assert!(!resource_matches("https://mcp.example.com:8443/tools/mcp", &server));
    assert!(!resource_matches("not a url", &server));
}

#[test]
fn the_resource_parameter_is_the_canonical_server_uri() {
    assert_eq!(canonical(&url("HTTPS://MCP.Example.com/mcp#frag")), "https://mcp.example.com/mcp");
    assert_eq!(canonical(&url("https://mcp.example.com/")), "https://mcp.example.com");
    assert_eq!(canonical(&url("http://127.0.0.1:8080/mcp/")), "http://127.0.0.1:8080/mcp/");
}

#[test]
fn discovered_urls_must_be_https_except_between_loopback_hosts() {
    let cfg = OAuthConfig {
        client_id: "id".into(),
        client_secret: "secret".into(),
        token_url: None,
        scopes: Vec::new(),
        ..OAuthConfig::default()
    };
    let local = TokenSource::new(cfg.clone(), "http://127.0.0.1:9/mcp", reqwest::Client::new()).unwrap();
    assert!(local.allowed("x", &url("http://localhost:7/token")).is_ok());
    assert!(local.allowed("x", &url("https://auth.example/token")).is_ok());
    assert!(local.allowed("x", &url("http://auth.example/token")).is_err());
    let remote = TokenSource::new(cfg, "https://mcp.example.com/mcp", reqwest::Client::new()).unwrap();
    assert!(remote.allowed("x", &url("http://127.0.0.1:7/token")).is_err());
    assert!(remote.allowed("x", &url("https://auth.example/token")).is_ok());
    assert!(remote.allowed("x", &url("file:///etc/passwd")).is_err());
}

#[tokio::test]
async fn no_token_goes_to_another_origin() {
    let cfg = OAuthConfig {
        client_id: "id".into(),
        client_secret: "secret".into(),
        token_url: Some("http://127.0.0.1:9/token".into()),
        scopes: Vec::new(),
        ..OAuthConfig::default()
    };
    let tokens = TokenSource::new(cfg, "http://127.0.0.1:9/mcp", reqwest::Client::new()).unwrap();
    tokens.state.lock().await.token = Some(("t0k3n".into(), Instant::now() + Duration::from_secs(60)));
    assert_eq!(tokens.current("http://127.0.0.1:9/mcp").await.unwrap().as_deref(), Some("t0k3n"));
    assert_eq!(tokens.current("http://127.0.0.1:10/mcp").await.unwrap(), None);
    assert_eq!(tokens.current("http://localhost:9/mcp").await.unwrap(), None);
}

/// The token requests a test authorization server received: each one's
/// form body and `Authorization` header.
type Seen = Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

/// A protected resource and its authorization server on 127.0.0.1:
/// protected-resource metadata at the path-inserted well-known URL,
/// issuer `<base>/as` (client_secret_post only), a token endpoint that
/// records each request (its form and `Authorization` header).
async fn authorization_server() -> (String, Seen) {
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let (b1, b2, log) = (base.clone(), base.clone(), seen.clone());
    let router = axum::Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move {
                axum::Json(serde_json::json!({
                    "resource": format!("{b1}/mcp"),
                    "authorization_servers": [format!("{b1}/as")],
                    "scopes_supported": ["tools:read", "tools:call"],
                }))
            }),
        )
        .route(
            "/.well-known/oauth-authorization-server/as",
            get(move || async move {
                axum::Json(serde_json::json!({
                    "issuer": format!("{b2}/as"),
                    "token_endpoint": format!("{b2}/as/token"),
                    "token_endpoint_auth_methods_supported": ["client_secret_post"],
                    "grant_types_supported": ["client_credentials"],
                }))
            }),
        )
        .route(
            "/as/token",
            post(move |headers: axum::http::HeaderMap, body: String| async move {
                let auth = headers.get("authorization").map(|v| v.to_str().unwrap().to_string());
                let mut log = log.lock().unwrap();
                log.push((body, auth));
                axum::Json(serde_json::json!({
                    "access_token": format!("tok-{}", log.len()),
                    "token_type": "Bearer",
                    "expires_in": 60,
                }))
            }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (base, seen)
}

fn form(body: &str) -> std::collections::BTreeMap<String, String> {
    url::form_urlencoded::parse(body.as_bytes()).into_owned().collect()
}

fn client_credentials() -> OAuthConfig {
    OAuthConfig {
        client_id: "toolhost test".into(),
        client_secret: "s3cret&=".into(),
        token_url: None,
        scopes: Vec::new(),
        ..OAuthConfig::default()
    }
}

#[tokio::test]
async fn a_401_challenge_leads_to_a_token_for_the_challenged_scope_then_a_step_up() {
    let (base, seen) = authorization_server().await;
    let server = format!("{base}/mcp");
    let tokens = TokenSource::new(client_credentials(), &server, reqwest::Client::new()).unwrap();
    // Nothing is known before the server's 401: no token is sent.
    assert_eq!(tokens.current(&server).await.unwrap(), None);

    // No resource_metadata in the challenge: the well-known URL is found.
    let t =
        tokens.after_refusal(None, r#"Bearer error="invalid_token", scope="tools:call""#, Refusal::Unauthorized, None);
    assert_eq!(t.await.unwrap(), "tok-1");
    let (body, auth) = seen.lock().unwrap()[0].clone();
    let f = form(&body);
    assert_eq!(f["grant_type"], "client_credentials");
    assert_eq!(f["scope"], "tools:call", "the challenge's scope, not scopes_supported");
    assert_eq!(f["resource"], server, "RFC 8707 resource: the protected resource");
    assert_eq!((f["client_id"].as_str(), f["client_secret"].as_str()), ("toolhost test", "s3cret&="));
    assert_eq!(auth, None, "client_secret_post: no Basic header");
    assert_eq!(tokens.current(&server).await.unwrap().as_deref(), Some("tok-1"));

    // 403 insufficient_scope: the challenged scope is added.
    let step_up = r#"Bearer error="insufficient_scope", scope="tools:admin""#;
    let t = tokens.after_refusal(Some("tok-1"), step_up, Refusal::InsufficientScope, None).await.unwrap();
    assert_eq!(t, "tok-2");
    assert_eq!(form(&seen.lock().unwrap()[1].0)["scope"], "tools:call tools:admin");
    // Refused again for a scope already asked for: no loop, a clear error.
    let e = tokens.after_refusal(Some("tok-2"), step_up, Refusal::InsufficientScope, None).await.unwrap_err();
    assert!(e.contains("already asks for every scope"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(tokens.take_error().as_deref(), Some(e.as_str()));

    // A 401 for a token another request already replaced: that one, no fetch.
    assert_eq!(tokens.after_refusal(Some("tok-1"), "Bearer", Refusal::Unauthorized, None).await.unwrap(), "tok-2");
    // A 401 for the current token: a new one.
    assert_eq!(tokens.after_refusal(Some("tok-2"), "Bearer", Refusal::Unauthorized, None).await.unwrap(), "tok-3");
}

#[tokio::test]
async fn without_a_challenged_scope_every_supported_scope_is_asked_for() {
    let (base, seen) = authorization_server().await;
    let server = format!("{base}/mcp");
    let tokens = TokenSource::new(client_credentials(), &server, reqwest::Client::new()).unwrap();
    let challenge = format!(r#"Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp""#);
    tokens.after_refusal(None, &challenge, Refusal::Unauthorized, None).await.unwrap();
    assert_eq!(form(&seen.lock().unwrap()[0].0)["scope"], "tools:read tools:call");

    // Configured scopes win over both.
    let cfg = OAuthConfig { scopes: vec!["mine".into()], ..client_credentials() };
    let tokens = TokenSource::new(cfg, &server, reqwest::Client::new()).unwrap();
    tokens.after_refusal(None, r#"Bearer scope="theirs""#, Refusal::Unauthorized, None).await.unwrap();
    assert_eq!(form(&seen.lock().unwrap()[1].0)["scope"], "mine");
}

#[tokio::test]
async fn metadata_for_another_resource_gets_no_token_request() {
    let (base, seen) = authorization_server().await;
    // The metadata describes `<base>/mcp`; this server is `<base>/other`.
    let server = format!("{base}/other");
    let tokens = TokenSource::new(client_credentials(), &server, reqwest::Client::new()).unwrap();
    let challenge = format!(r#"Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp""#);
    let e = tokens.after_refusal(None, &challenge, Refusal::Unauthorized, None).await.unwrap_err();
    assert!(e.contains("asks for no token for another resource"), "{e}");
    assert!(seen.lock().unwrap().is_empty(), "no token request was made");
    // A challenge naming a plain-http metadata URL off loopback is not followed.
    let e = tokens
        .after_refusal(None, r#"Bearer resource_metadata="http://metadata.example/prm""#, Refusal::Unauthorized, None)
        .await
        .unwrap_err();
    assert!(e.contains("is not https"), "{e}");
}

#[test]
fn cross_app_access_needs_one_id_token_and_a_client_id() {
    use crate::config::CrossAppConfig;
    let x = CrossAppConfig {
        idp_token_url: "http://127.0.0.1:9/token".into(),
        idp_client_id: "idp".into(),
        ..CrossAppConfig::default()
    };
    let with = |x: CrossAppConfig, id: &str| OAuthConfig {
        client_id: id.into(),
        cross_app: Some(x),
        ..OAuthConfig::default()
    };
    let e = TokenSource::new(with(x.clone(), "c"), "http://127.0.0.1:9/mcp", reqwest::Client::new()).unwrap_err();
    assert!(e.contains("exactly one of id_token and id_token_file"), "{e}");
    let both = CrossAppConfig { id_token: "t".into(), id_token_file: Some("f".into()), ..x.clone() };
    let e = TokenSource::new(with(both, "c"), "http://127.0.0.1:9/mcp", reqwest::Client::new()).unwrap_err();
    assert!(e.contains("exactly one of"), "{e}");
    let one = CrossAppConfig { id_token: "t".into(), ..x };
    let e = TokenSource::new(with(one.clone(), ""), "http://127.0.0.1:9/mcp", reqwest::Client::new()).unwrap_err();
    assert!(e.contains("needs auth.oauth.client_id"), "{e}");
    assert!(TokenSource::new(with(one, "c"), "http://127.0.0.1:9/mcp", reqwest::Client::new()).is_ok());
}
