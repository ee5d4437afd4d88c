//! The OAuth front door (`server.oauth`), through the binary, against a
//! real OpenID provider: the certified `oidc-provider` npm package run by
//! the test with keys of its own (`tests/peers/oidc_provider.mjs`).
//!
//! - The official Python MCP SDK's OAuth client, pointed at `/mcp/lyra`
//!   with no token, finds the Protected Resource Metadata from the 401,
//!   registers, runs the authorization code flow with PKCE, and calls a
//!   tool as the agent its identity maps to; the audit names the identity.
//! - Tokens for another audience, expired, signed by a key the provider
//!   does not publish, without the required scope, or of an identity
//!   mapped to nothing are refused with the status and `WWW-Authenticate`
//!   the MCP authorization spec names; a same-user loopback client without
//!   a token is refused (`loopback_operator` is off once OAuth is on).
//! - Two identities behind one agent (`per: identity`) each have their own
//!   rate-limit share.
//! - The Inspector CLI connects with a token from the provider.
//! - The provider rotates its signing key: its new tokens are accepted
//!   without restarting toolhost.

use crate::limits::{Answer, open_session, post};
use crate::live::{Proc, spawn_serving};
use crate::peers::{free_port, node22, npm, peer, python, run};
use serde_json::{Value, json};
use std::io::BufRead as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The provider on `port` with the keys in `keys` (made when missing).
fn provider(dir: &Path, port: u16, keys: &Path) -> Proc {
    let mut cmd = Command::new(node22());
    cmd.current_dir(dir)
        .arg(peer("oidc_provider.mjs"))
        .args(["--port", &port.to_string(), "--keys"])
        .arg(keys)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("idp-{port}.log"))).unwrap());
    let mut child = cmd.spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("listening "), "oidc_provider.mjs: {first:?}");
    std::thread::spawn(move || for _ in out.lines() {});
    Proc(child)
}

/// The first key of the private JWKS at `keys`: its id and PEM.
fn signing_key(keys: &Path) -> (String, Vec<u8>) {
    let set: Value = serde_json::from_slice(&std::fs::read(keys).unwrap()).unwrap();
    let kid = set["keys"][0]["kid"].as_str().unwrap().to_string();
    let pem = std::fs::read(format!("{}.{kid}.pem", keys.display())).unwrap();
    (kid, pem)
}

/// An RSA key no JWKS publishes (PEM), made by Node.
fn stray_key(dir: &Path) -> Vec<u8> {
    let out = Command::new(node22())
        .current_dir(dir)
        .args([
            "-e",
            "const {generateKeyPairSync}=require('crypto');process.stdout.write(generateKeyPairSync('rsa',{modulusLength:2048}).privateKey.export({type:'pkcs8',format:'pem'}))",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A JWT signed with `pem` as key `kid`.
fn mint(kid: &str, pem: &[u8], claims: Value) -> String {
    let mut head = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    head.kid = Some(kid.to_string());
    head.typ = Some("at+jwt".into());
    jsonwebtoken::encode(&head, &claims, &jsonwebtoken::EncodingKey::from_rsa_pem(pem).unwrap()).unwrap()
}

/// `tools/call roll` on `url` in a session opened with `token`.
fn roll_with(url: &str, token: &str) -> Answer {
    let auth = format!("Bearer {token}");
    let headers = [("Authorization", auth.as_str())];
    let session = open_session(url, &headers);
    post(
        url,
        &[("Authorization", &auth), ("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-06-18")],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "roll", "arguments": {"expression": "1d6"}}}),
    )
}

/// A POST of `initialize` to `url` with `token` (or none).
fn knock(url: &str, token: Option<&str>) -> Answer {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    post(
        url,
        &headers,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}}),
    )
}

/// `py_oauth_client.py ARGS`: its one JSON line, or its stdout for `token`.
fn py_oauth(dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(python());
    cmd.current_dir(dir).arg(peer("py_oauth_client.py")).args(args);
    let run = run(&format!("py_oauth_client.py {args:?}"), cmd);
    assert!(run.status.success(), "{}", run.report());
    run.stdout.trim().to_string()
}

/// A GET of `url`: its status and body.
fn get(url: &str) -> Answer {
    let out = Command::new("curl").args(["-sS", "-i", "--max-time", "10", url]).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    Answer { status, head: head.to_string(), body: body.to_string() }
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[test]
fn the_python_sdk_signs_in_with_the_provider_and_bad_tokens_are_refused_as_the_spec_says() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("home")).unwrap();
    let (idp_port, port) = (free_port(), free_port());
    let issuer = format!("http://127.0.0.1:{idp_port}");
    let keys = d.join("keys.json");
    let mut idp = provider(d, idp_port, &keys);
    let base = format!("http://127.0.0.1:{port}");
    std::fs::write(
        d.join("toolhost.yaml"),
        format!(
            "npcs:\n  - {{ name: lyra, budget_tier: fast, tools: [roll] }}\n  - {{ name: brom, budget_tier: fast, tools: [roll] }}\nserver:\n  rate_limit: {{ per_minute: 1, burst: 3, per: identity }}\n  auth_failure_limit: {{ per_minute: 1, burst: 20 }}\n  oauth:\n    issuer: {issuer}\n    audience: {base}/mcp\n    required_scopes: [\"mcp:tools\"]\n    agents:\n      - {{ match: {{ sub: alice }}, agent: lyra }}\n      - {{ match: {{ client_id: player-one }}, agent: lyra }}\n      - {{ match: {{ client_id: player-two }}, agent: lyra }}\n      - {{ match: {{ client_id: lyra-tool }}, agent: lyra }}\n"
        ),
    )
    .unwrap();
    let mut cmd = crate::common::toolhost();
    cmd.current_dir(d).env("TOOLHOST_STATE_DIR", d.join("state")).args([
        "serve",
        "--http",
        &format!("127.0.0.1:{port}"),
    ]);
    let (_server, url) = spawn_serving(cmd);
    assert_eq!(url, base);
    let lyra = format!("{base}/mcp/lyra");

    // A same-user loopback client without a token: 401, and where to look.
    let a = knock(&lyra, None);
    assert_eq!(a.status, 401, "{}{}", a.head, a.body);
    let challenge = a.header("www-authenticate").unwrap_or_default().to_string();
    let prm_url = format!("{base}/.well-known/oauth-protected-resource/mcp/lyra");
    assert!(
        challenge.starts_with("Bearer ") && challenge.contains(&format!("resource_metadata=\"{prm_url}\"")),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"mcp:tools\""), "{challenge}");
    let prm: Value = serde_json::from_str(&get(&prm_url).body).unwrap();
    assert_eq!(prm["resource"], lyra.as_str(), "{prm}");
    assert_eq!(prm["authorization_servers"], json!([issuer]), "{prm}");
    assert_eq!(prm["scopes_supported"], json!(["mcp:tools"]), "{prm}");
    let root: Value = serde_json::from_str(&get(&format!("{base}/.well-known/oauth-protected-resource")).body).unwrap();
    assert_eq!(root["resource"], format!("{base}/mcp"), "{root}");
    assert_eq!(get(&format!("{base}/.well-known/oauth-protected-resource/mcp/nobody")).status, 404);

    // The official Python SDK: from the 401 to a call, through the provider.
    let out: Value =
        serde_json::from_str(&py_oauth(d, &["call", &lyra, "roll", r#"{"expression":"2d6"}"#, "--login", "alice"]))
            .unwrap();
    assert_eq!(out["result"]["isError"], false, "{out}");
    let rolled = out["result"]["structuredContent"]["total"].as_i64().unwrap_or(0);
    assert!((2..=12).contains(&rolled), "{out}");
    let audit = records(&d.join("state/audit.jsonl"));
    let call = audit.iter().rev().find(|r| r["event"] == "call" && r["tool"] == "roll").expect("the call's record");
    assert_eq!(call["agent"], "lyra", "{call}");
    let who = call["token"].as_str().unwrap_or_default();
    assert!(who.starts_with(&format!("oauth:alice@{issuer} client ")), "the identity, issuer and client: {call}");

    // Refused, each with the status and header the spec names.
    let (kid, pem) = signing_key(&keys);
    let good = |over: Value| {
        // A jti of its own: no two tokens alike (toolhost remembers those checked).
        let jti = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos().to_string();
        let mut c = json!({"iss": issuer, "sub": "alice", "aud": lyra, "scope": "mcp:tools", "client_id": "tablet",
            "iat": now(), "exp": now() + 300, "jti": jti});
        for (k, v) in over.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    assert_eq!(roll_with(&lyra, &mint(&kid, &pem, good(json!({})))).status, 200, "a well-made token works");
    let refused = |token: String, status: u16, error: &str, what: &str| {
        let a = knock(&lyra, Some(&token));
        assert_eq!(a.status, status, "{what}: {}{}", a.head, a.body);
        let h = a.header("www-authenticate").unwrap_or_default();
        assert!(h.contains(&format!("error=\"{error}\"")) && h.contains("resource_metadata="), "{what}: {h}");
        a
    };
    refused(mint(&kid, &pem, good(json!({"aud": "http://127.0.0.1:9/mcp"}))), 401, "invalid_token", "another audience");
    refused(mint(&kid, &pem, good(json!({"exp": now() - 3600, "iat": now() - 7200}))), 401, "invalid_token", "expired");
    refused(mint(&kid, &stray_key(d), good(json!({}))), 401, "invalid_token", "signed by the right kid, wrong key");
    refused(mint("not-published", &stray_key(d), good(json!({}))), 401, "invalid_token", "a key not in the JWKS");
    let a = refused(mint(&kid, &pem, good(json!({"scope": "mcp:other"}))), 403, "insufficient_scope", "scope");
    assert!(a.header("www-authenticate").unwrap().contains("scope=\"mcp:tools\""), "{}", a.head);
    let a = knock(&lyra, Some(&mint(&kid, &pem, good(json!({"sub": "mallory", "client_id": "elsewhere"})))));
    assert_eq!(a.status, 403, "an identity mapped to nothing: {}", a.body);
    assert!(a.body.contains("oauth:mallory@") && a.body.contains("server.oauth.agents"), "{}", a.body);
    let a = knock(&format!("{base}/mcp/brom"), Some(&mint(&kid, &pem, good(json!({})))));
    assert_eq!(a.status, 401, "a token for lyra's endpoint on brom's: {}", a.body);
    let a = knock(&format!("{base}/mcp/brom"), Some(&mint(&kid, &pem, good(json!({"aud": format!("{base}/mcp")})))));
    assert_eq!(a.status, 403, "lyra's identity on brom's endpoint: {}", a.body);

    // Two identities behind lyra, each with its own share (3 at once).
    let one = py_oauth(d, &["token", &issuer, "player-one", "one-secret", &lyra, "mcp:tools"]);
    let two = py_oauth(d, &["token", &issuer, "player-two", "two-secret", &lyra, "mcp:tools"]);
    for i in 0..3 {
        let a = roll_with(&lyra, &one);
        assert_eq!(a.json()["result"]["isError"], false, "player one's call {i}: {}", a.body);
    }
    let over = roll_with(&lyra, &one).json();
    assert_eq!(over["result"]["_meta"]["toolhost"]["code"], "capacity_exceeded", "player one is over: {over}");
    let a = roll_with(&lyra, &two).json();
    assert_eq!(a["result"]["isError"], false, "player two's share is untouched: {a}");

    // The Inspector CLI, with a token from the provider.
    let token = py_oauth(d, &["token", &issuer, "lyra-tool", "lyra-secret", &lyra, "mcp:tools"]);
    let mut inspector = Command::new(node22());
    inspector
        .current_dir(d)
        .env("HOME", d.join("home"))
        .arg(npm("inspector/clients/launcher/build/index.js"))
        .args(["--cli", &lyra, "--transport", "http", "--header", &format!("Authorization: Bearer {token}")])
        .args(["--method", "tools/list"]);
    let listed = run("inspector --cli tools/list with a token", inspector);
    assert!(listed.status.success() && listed.stdout.contains("\"roll\""), "{}", listed.report());

    // The provider rotates its key: its new tokens work, toolhost unrestarted.
    drop(idp);
    let rotated = d.join("keys-2.json");
    idp = provider(d, idp_port, &rotated);
    let (new_kid, _) = signing_key(&rotated);
    assert_ne!(new_kid, kid);
    let fresh = py_oauth(d, &["token", &issuer, "lyra-tool", "lyra-secret", &lyra, "mcp:tools"]);
    // toolhost fetches keys again for an unknown kid at most every 10 s.
    let deadline = Instant::now() + Duration::from_secs(25);
    let status = loop {
        let a = knock(&lyra, Some(&fresh));
        if a.status == 200 || Instant::now() > deadline {
            break a.status;
        }
        // Each refusal spends the allowance: a few, not twenty.
        std::thread::sleep(Duration::from_secs(2));
    };
    assert_eq!(status, 200, "the new key's token, without a restart");
    let a = knock(&lyra, Some(&mint(&kid, &pem, good(json!({})))));
    assert_eq!(a.status, 401, "the withdrawn key's token: {}", a.body);

    // Guessing: wrong tokens spend this address's allowance (20 at once),
    // OAuth on or not; then only tokens checked lately are taken from here.
    // (`auth_failure_limit` refills one a minute here: a slow machine does
    // not earn a check back mid-test.)
    let unseen = py_oauth(d, &["token", &issuer, "player-two", "two-secret", &lyra, "mcp:tools"]);
    let statuses: Vec<u16> = (0..30).map(|i| knock(&lyra, Some(&format!("guess-{i:020}"))).status).collect();
    assert!(statuses.contains(&401) && statuses.ends_with(&[429, 429]), "{statuses:?}");
    assert_eq!(knock(&lyra, Some(&fresh)).status, 200, "a token checked lately still works");
    assert_eq!(knock(&lyra, Some(&unseen)).status, 429, "a new one is not checked from here now");
    drop(idp);
}

/// `toolhost pair` mints a one-time code: a client opening
/// `/mcp/pair/<code>` (no token) gets a session as the agent and a token of
/// its own; the code's second use, an expired code and a revoked token are
/// refused; the audit names the pairing.
#[test]
fn a_pairing_code_lets_one_client_join_as_its_agent_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("toolhost.yaml"),
        "npcs:\n  - { name: Lyra, budget_tier: fast, tools: [roll] }\n  - { name: brom, budget_tier: fast, tools: [roll, search_rules] }\nserver:\n  tokens:\n    - { token: dm-token-0123456789abcdef }\n",
    )
    .unwrap();
    let (_server, base) = crate::live::serve(d);
    let pair = |args: &[&str]| -> Value {
        let o = crate::live::admin(d, &[&["pair"][..], args, &["--json"]].concat());
        assert!(o.status.success(), "pair {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let minted = pair(&["lyra", "--for", "10m"]);
    assert_eq!(minted["agent"], "Lyra", "the name as the DM typed it, resolved: {minted}");
    let code = minted["code"].as_str().unwrap().to_string();
    let url = format!("{base}/mcp/pair/{code}");
    let no_token = knock(&format!("{base}/mcp/lyra"), None);
    assert_eq!(no_token.status, 401, "the loopback operator is off with tokens: {}", no_token.body);

    // A link preview's GET, or a browser's, uses nothing.
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", &url]);
    assert_eq!(run("a GET of the pairing URL", cmd).stdout.trim(), "405");

    // First use: a session as Lyra, and a token of its own.
    // Typed in lower case: a code is read in any case.
    let first = knock(&url.to_lowercase(), None);
    assert_eq!(first.status, 200, "{}{}", first.head, first.body);
    let session = first.header("mcp-session-id").expect("a session").to_string();
    let token = first.header("x-toolhost-token").expect("a token of its own").to_string();
    let call = post(
        &url,
        &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-06-18")],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search_rules", "arguments": {"query": "grapple"}}}),
    );
    assert_eq!(
        call.json()["error"]["data"]["code"],
        "not_found",
        "Lyra's view: brom's tool is not hers: {}",
        call.body
    );
    let call = post(
        &url,
        &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-06-18")],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "roll", "arguments": {"expression": "1d4"}}}),
    );
    assert_eq!(call.json()["result"]["isError"], false, "{}", call.body);

    // Second use: refused, whoever tries.
    let again = knock(&url, None);
    assert_eq!(again.status, 403, "{}", again.body);
    assert!(again.body.contains("has been used"), "{}", again.body);
    // The token works on the agent's endpoint, and only there.
    assert_eq!(roll_with(&format!("{base}/mcp/lyra"), &token).json()["result"]["isError"], false);
    assert_eq!(knock(&format!("{base}/mcp/brom"), Some(&token)).status, 403);
    let audit = records(&d.join("state/audit.jsonl"));
    let id = minted["id"].as_str().unwrap();
    let pair_rolls = audit
        .iter()
        .filter(|r| r["event"] == "call" && r["tool"] == "roll" && r["token"] == format!("pair:{id}"))
        .count();
    assert_eq!(pair_rolls, 2, "both rolls name the pairing, as Lyra: {audit:#?}");
    assert!(audit.iter().any(|r| r["event"] == "pairing_minted" && r["detail"]["agent"] == "Lyra"), "{audit:#?}");

    // An expired code; an unknown one.
    let brief = pair(&["brom", "--for", "1s"]);
    std::thread::sleep(Duration::from_millis(1500));
    let late = knock(&format!("{base}/mcp/pair/{}", brief["code"].as_str().unwrap()), None);
    assert_eq!(late.status, 403, "{}", late.body);
    assert!(late.body.contains("expired"), "{}", late.body);
    assert_eq!(knock(&format!("{base}/mcp/pair/AAAAA-AAAAA"), None).status, 403);

    // Listed, then revoked: the token stops working.
    let listed = pair(&["--list"]);
    assert!(listed["pairings"].as_array().unwrap().iter().any(|p| p["id"] == id && p["state"] == "paired"), "{listed}");
    pair(&["--revoke", id]);
    assert_eq!(knock(&format!("{base}/mcp/lyra"), Some(&token)).status, 401, "revoked");
}
