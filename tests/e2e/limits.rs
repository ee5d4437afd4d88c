//! The HTTP front's limits protect without getting in the way, through
//! `toolhost serve --http` and real clients (rmcp, curl, another Unix user):
//!
//! - `tool_calls_are_rate_limited_per_agent_and_protocol_traffic_is_free`
//! - `one_connection_flooding_is_capped_and_others_are_not`
//! - `failed_authentication_is_throttled_without_answering_guesses`
//! - `sessions_are_capped_the_idle_ones_make_room_and_expire`
//! - `an_agent_cannot_crowd_out_the_operators_sessions`
//! - `another_unix_user_gets_nothing_from_a_default_server`

use crate::live::{Proc, serve};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The second Unix user `scripts/install-peers` creates.
const OTHER_USER: &str = "toolhost-peer";

fn start(dir: &Path, config: &str) -> (Proc, String) {
    std::fs::write(dir.join("toolhost.yaml"), config).unwrap();
    serve(dir)
}

/// One HTTP answer: status, headers (lowercase names), body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The JSON-RPC message in the body (plain JSON or one SSE event).
    pub(crate) fn json(&self) -> Value {
        let text = self.body.lines().find_map(|l| l.strip_prefix("data: ").filter(|d| d.starts_with('{')));
        serde_json::from_str(text.unwrap_or(&self.body)).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// curl, optionally as another Unix user; `args` after the common ones.
fn curl_as(user: Option<&str>, args: &[&str]) -> String {
    let mut cmd = match user {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", u, "--regid", u, "--clear-groups", "--", "curl"]);
            c
        }
        None => Command::new("curl"),
    };
    cmd.args(["-sS", "--max-time", "10"]).args(args).current_dir("/");
    let out = cmd.output().expect("curl (and setpriv) must be installed");
    assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A POST of `body` with `headers`, as `user` (default: this one).
fn post_as(user: Option<&str>, url: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    post_from(user, None, url, headers, body)
}

/// [`post_as`] from the loopback address `source` (default: 127.0.0.1).
fn post_from(user: Option<&str>, source: Option<&str>, url: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    let body = body.to_string();
    let mut args = vec![
        "--interface".to_string(),
        source.unwrap_or("127.0.0.1").to_string(),
        "-i".to_string(),
        "-X".into(),
        "POST".into(),
        "-H".into(),
        "Content-Type: application/json".into(),
        "-H".into(),
        "Accept: application/json, text/event-stream".into(),
    ];
    for (k, v) in headers {
        args.push("-H".into());
        args.push(format!("{k}: {v}"));
    }
    args.extend(["--data-binary".to_string(), body, url.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = curl_as(user, &args);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    Answer { status, head: head.to_string(), body: body.to_string() }
}

pub(crate) fn post(url: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    post_as(None, url, headers, body)
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "0"}}})
}

fn ping() -> Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})
}

/// A new session's id.
pub(crate) fn open_session(url: &str, headers: &[(&str, &str)]) -> String {
    let a = post(url, headers, &initialize());
    assert_eq!(a.status, 200, "{}{}", a.head, a.body);
    a.header("mcp-session-id").expect("a session id").to_string()
}

async fn client(url: &str) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_string())).await.expect("initialize")
}

async fn roll(c: &rmcp::service::RunningService<rmcp::RoleClient, ()>) -> rmcp::model::CallToolResult {
    let args = json!({"expression": "1d20"}).as_object().unwrap().clone();
    c.call_tool(CallToolRequestParams::new("roll").with_arguments(args)).await.expect("tools/call answered")
}

const AGENTS: &str = "npcs:
  - name: bartok
    budget_tier: fast
    tools: [roll]
    rate_limit: { per_minute: 6, burst: 3 }
  - name: mira
    budget_tier: fast
    tools: [roll]
";

#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_are_rate_limited_per_agent_and_protocol_traffic_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path(), AGENTS);

    let bartok = client(&format!("{url}/mcp/bartok")).await;
    // Protocol traffic spends nothing: 30 listings, then the full burst.
    for _ in 0..30 {
        bartok.list_all_tools().await.expect("tools/list is never rate limited");
    }
    for i in 0..3 {
        let r = roll(&bartok).await;
        assert_eq!(r.is_error, Some(false), "call {i} within bartok's burst of 3: {r:?}");
    }
    let r = roll(&bartok).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let meta = &r.meta.as_ref().unwrap().0["toolhost"];
    assert_eq!(meta["code"], "capacity_exceeded", "{r:?}");
    let text = r.content[0].as_text().unwrap().text.clone();
    assert!(text.contains("agent \"bartok\" is over its tool-call rate (6 a minute, 3 at once); retry in"), "{text}");

    // Another agent has its own budget (the default: 20 at once), and the
    // operator none unless configured.
    let mira = client(&format!("{url}/mcp/mira")).await;
    for i in 0..20 {
        assert_eq!(roll(&mira).await.is_error, Some(false), "mira's call {i}");
    }
    let operator = client(&format!("{url}/mcp")).await;
    for i in 0..60 {
        assert_eq!(roll(&operator).await.is_error, Some(false), "operator call {i}");
    }

    // The bucket refills: one call every 10 s at 6 a minute.
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    assert_eq!(roll(&bartok).await.is_error, Some(false), "refilled");
    // Closing the session (DELETE) spends nothing either.
    bartok.cancel().await.unwrap();
}

#[test]
fn one_connection_flooding_is_capped_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path(), "server:\n  connection_rate_limit: { per_minute: 6, burst: 5 }\n");
    // curl reuses one connection for every URL it is given.
    let missing = format!("{url}/mcp/no-such-agent");
    let mut args = vec!["-w", "%{http_code} %{num_connects}\n"];
    for _ in 0..7 {
        args.extend(["-o", "/dev/null", missing.as_str()]);
    }
    let out = curl_as(None, &args);
    let codes: Vec<&str> = out.lines().collect();
    assert_eq!(codes.len(), 7, "{out}");
    assert_eq!(codes[0], "404 1", "{out}");
    for c in &codes[1..5] {
        assert_eq!(*c, "404 0", "the same connection, within its burst: {out}");
    }
    for c in &codes[5..] {
        assert_eq!(*c, "429 0", "over the connection's cap: {out}");
    }
    // Another connection has its own allowance, and MCP still works on it.
    let a = post(&format!("{url}/mcp"), &[], &initialize());
    assert_eq!(a.status, 200, "{}", a.body);
}

const TOKENS: &str = "server:
  auth_failure_limit: { per_minute: 1, burst: 3 }
  tokens:
    - token: dungeon-master-token-0001
    - token: second-operator-token-0002
";

#[test]
fn failed_authentication_is_throttled_without_answering_guesses() {
    let other = other_user();
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path(), TOKENS);
    let mcp = format!("{url}/mcp");
    let bearer = |t: &str| format!("Bearer {t}");
    let dm = bearer("dungeon-master-token-0001");
    assert_eq!(post_as(Some(other), &mcp, &[("Authorization", &dm)], &initialize()).status, 200);

    // The guesser is another local user.
    for i in 0..3 {
        let a = post_as(Some(other), &mcp, &[("Authorization", &bearer(&format!("guess-{i:020}")))], &initialize());
        assert_eq!(a.status, 401, "guess {i} within the allowance: {}", a.body);
    }
    let a = post_as(Some(other), &mcp, &[("Authorization", &bearer("guess-99999999999999999"))], &initialize());
    assert_eq!(a.status, 429, "{}", a.body);
    let wrong_wait: u64 = a.header("retry-after").expect("Retry-After").parse().unwrap();
    assert_eq!(a.json()["error"]["data"]["code"], "capacity_exceeded", "{}", a.body);

    // While throttled, a correct token that never authenticated is not
    // checked either: a guess that happens to be right is answered exactly
    // like a wrong one, Retry-After included. A refused guess spends
    // nothing, so the wait only counts down: the right token's lies
    // between a wrong guess's just before and one just after, however
    // long the requests take.
    let a = post_as(Some(other), &mcp, &[("Authorization", &bearer("second-operator-token-0002"))], &initialize());
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.json()["error"]["data"]["code"], "capacity_exceeded", "{}", a.body);
    let right_wait: u64 = a.header("retry-after").expect("Retry-After").parse().unwrap();
    let a = post_as(Some(other), &mcp, &[("Authorization", &bearer("guess-00000000000000000"))], &initialize());
    assert_eq!(a.status, 429, "{}", a.body);
    let wrong_after: u64 = a.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!(
        wrong_after <= right_wait && right_wait <= wrong_wait,
        "the same wait as a wrong guess: {wrong_wait} s, then {right_wait} s for the right token, then {wrong_after} s"
    );
    // The DM, already authenticated, keeps working, from anywhere.
    assert_eq!(post_as(Some(other), &mcp, &[("Authorization", &dm)], &initialize()).status, 200);
    // The server's own Unix user is never the guesser: its fresh token passes.
    let a = post(&mcp, &[("Authorization", &bearer("second-operator-token-0002"))], &initialize());
    assert_eq!(a.status, 200, "{}", a.body);
    // Requests without a token are not guesses; they get 401.
    assert_eq!(post_as(Some(other), &mcp, &[], &initialize()).status, 401);
}

/// Issue #48, finding 7: failed logins were counted for the whole server,
/// so after a restart an attacker's guesses at one address kept every
/// client that had not authenticated yet at 429, at any address. Now they
/// spend the attacker's address's allowance only: a client at another
/// address, with a token unused since the start, is served; at the
/// attacker's address a right guess is still answered like a wrong one.
#[test]
fn an_attackers_failed_logins_leave_clients_at_other_addresses_working() {
    let other = other_user();
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path(), TOKENS);
    let mcp = format!("{url}/mcp");
    let from = |source: &str, token: &str| {
        let auth = format!("Bearer {token}");
        post_from(Some(other), Some(source), &mcp, &[("Authorization", &auth)], &initialize())
    };
    for i in 0..10 {
        let a = from("127.0.0.2", &format!("guess-{i:020}"));
        let want = if i < 3 { 401 } else { 429 };
        assert_eq!(a.status, want, "guess {i} from the attacker's address: {}", a.body);
    }
    let a = from("127.0.0.2", "second-operator-token-0002");
    assert_eq!(a.status, 429, "a right guess at the throttled address tells nothing: {}", a.body);
    for token in ["second-operator-token-0002", "dungeon-master-token-0001"] {
        let a = from("127.0.0.3", token);
        assert_eq!(a.status, 200, "a legitimate client elsewhere, first login since the start: {}", a.body);
    }
    let a = from("127.0.0.3", "guess-from-the-other-address-0");
    assert_eq!(a.status, 401, "that address's own allowance is untouched: {}", a.body);
}

#[test]
fn sessions_are_capped_the_idle_ones_make_room_and_expire() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path(), "server:\n  max_sessions: 2\n  session_idle_secs: 10\n");
    let mcp = format!("{url}/mcp");
    let first = open_session(&mcp, &[]);
    let second = open_session(&mcp, &[]);
    let a = post(&mcp, &[], &initialize());
    assert_eq!(a.status, 503, "both sessions are in use: {}", a.body);
    assert_eq!(a.json()["error"]["data"]["code"], "capacity_exceeded", "{}", a.body);
    assert_eq!(a.header("retry-after"), Some("5"), "{}", a.head);

    // The second stays in use; the first goes idle past half the timeout.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(post(&mcp, &[("Mcp-Session-Id", &second)], &ping()).status, 200);
    std::thread::sleep(Duration::from_millis(2500));
    let third = open_session(&mcp, &[]);
    assert_eq!(post(&mcp, &[("Mcp-Session-Id", &first)], &ping()).status, 404, "the idle one made room");
    assert_eq!(post(&mcp, &[("Mcp-Session-Id", &second)], &ping()).status, 200);

    // Unused for session_idle_secs: closed; its client gets 404 and starts anew.
    std::thread::sleep(Duration::from_secs(14));
    assert_eq!(post(&mcp, &[("Mcp-Session-Id", &third)], &ping()).status, 404, "expired");
    open_session(&mcp, &[]);
}

#[test]
fn an_agent_cannot_crowd_out_the_operators_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{AGENTS}server:\n  max_sessions: 4\n  session_idle_secs: 10\n");
    let (_server, url) = start(dir.path(), &config);
    let (mcp, bartok) = (format!("{url}/mcp"), format!("{url}/mcp/bartok"));
    let dm = open_session(&mcp, &[]);
    // An agent holds at most a quarter of the sessions: here one.
    let first = open_session(&bartok, &[]);
    let a = post(&bartok, &[], &initialize());
    assert_eq!(a.status, 503, "bartok's share is one session, in use: {}", a.body);
    // Once idle, its own session makes room, never the DM's.
    std::thread::sleep(Duration::from_millis(5500));
    open_session(&bartok, &[]);
    assert_eq!(post(&bartok, &[("Mcp-Session-Id", &first)], &ping()).status, 404, "its own idle one went");
    assert_eq!(post(&mcp, &[("Mcp-Session-Id", &dm)], &ping()).status, 200, "the DM's stays");
    // Other agents and the operator still get sessions.
    open_session(&format!("{url}/mcp/mira"), &[]);
    open_session(&mcp, &[]);
}

/// The other user exists (scripts/install-peers creates it, as root).
fn other_user() -> &'static str {
    let ok = Command::new("id").arg(OTHER_USER).output().is_ok_and(|o| o.status.success());
    assert!(ok, "no Unix user {OTHER_USER}: run scripts/install-peers as root");
    OTHER_USER
}

#[test]
fn another_unix_user_gets_nothing_from_a_default_server() {
    let other = other_user();
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path(), AGENTS);
    for path in ["/mcp", "/mcp/bartok"] {
        let endpoint = format!("{url}{path}");
        let a = post_as(Some(other), &endpoint, &[], &initialize());
        assert_eq!(a.status, 403, "{path}: {}", a.body);
        assert!(a.body.contains("serves only its own Unix user"), "{}", a.body);
        // The call the issue saw succeed: a tool call with a forged session.
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "roll", "arguments": {"expression": "1d4"}}});
        assert_eq!(post_as(Some(other), &endpoint, &[("Mcp-Session-Id", "x")], &call).status, 403);
        // The server's own user is served.
        assert_eq!(post(&endpoint, &[], &initialize()).status, 200, "{path}");
    }

    // With tokens, the token decides, whoever holds it.
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path(), "server:\n  tokens:\n    - token: shared-with-a-player-0001\n");
    let mcp = format!("{url}/mcp");
    assert_eq!(post_as(Some(other), &mcp, &[], &initialize()).status, 401);
    let a = post_as(Some(other), &mcp, &[("Authorization", "Bearer shared-with-a-player-0001")], &initialize());
    assert_eq!(a.status, 200, "{}", a.body);
}
