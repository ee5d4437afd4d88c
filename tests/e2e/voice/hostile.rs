//! The voice relay against hostile clients and upstreams: floods, huge
//! messages, idle sessions, another agent's handles, a stop mid-call.

use super::*;

/// `voice_raw_client.py` against the relay, as Sage: its summary.
fn raw(url: &str, args: &[&str]) -> Value {
    raw_as(url, SAGE_TOKEN, args)
}

/// `voice_raw_client.py` against the relay with `token`: its summary.
fn raw_as(url: &str, token: &str, args: &[&str]) -> Value {
    let o = Command::new(python())
        .arg(repo("tests/peers/voice_raw_client.py"))
        .args(["--url", url, "--token", token])
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(o.status.success(), "voice_raw_client {args:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The host answers `/healthz`, and a new session is relayed as before.
fn still_serving(url: &str, ws: &str) {
    let a = crate::limits::post(
        &format!("{url}/mcp/sage/turn"),
        &[("Authorization", &format!("Bearer {SAGE_TOKEN}"))],
        &json!({"utterance": "hi"}),
    );
    assert_eq!(a.status, 200, "{}{}", a.head, a.body);
    let ok = raw(ws, &["--mode", "hold", "--seconds", "1"]);
    assert_eq!(ok["opened"], 1, "{ok}");
    assert!(ok["received"].as_u64().unwrap() >= 1, "{ok}");
}

/// Polls `f` every 50 ms until it holds; fails after 30 s.
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The voice relay's own account on the host at `url`, serving with its
/// state in `state` (its `/metrics`, read with the admin token of its
/// endpoint record): the sessions open and what their queues hold.
fn relay_holds(url: &str, state: &Path, pid: u32) -> (u64, u64) {
    let record = toolhost::admin::client::EndpointRecord::dir(state).join(format!("{pid}.json"));
    let record: Value = serde_json::from_slice(&std::fs::read(record).unwrap()).unwrap();
    let auth = format!("Authorization: Bearer {}", record["token"].as_str().unwrap());
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-H", &auth, &format!("{url}/metrics")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let gauge = |name: &str| -> u64 {
        let line = text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' '));
        line.unwrap_or_else(|| panic!("no {name} in:\n{text}")).trim().parse().unwrap()
    };
    (gauge("toolhost_voice_sessions"), gauge("toolhost_voice_buffered_bytes"))
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The TCP sockets process `pid` holds to `port` on loopback.
fn sockets_to(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let remote = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .flat_map(|table| table.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            f.len() > 9 && f[2].ends_with(&remote) && inodes.contains(f[9])
        })
        .count()
}

/// The highest resident memory of `pid` (KiB) while `f` runs, sampled
/// every 10 ms, and what `f` returned.
fn peak_rss_during<T>(pid: u32, f: impl FnOnce() -> T) -> (u64, T) {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    let sampler = std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            peak = peak.max(rss_kib(pid));
            std::thread::sleep(Duration::from_millis(10));
        }
        peak
    });
    let out = f();
    done.store(true, std::sync::atomic::Ordering::Release);
    (sampler.join().unwrap(), out)
}

fn hostile_host(dir: &Path, hostile: &str, extra: &str) -> (Upstream, Proc, String, String) {
    let up = upstream(dir, "openai", json!({"calls": {}}), Some(hostile));
    let config =
        format!("{CONFIG}voice:\n  openai: {{url: \"ws://127.0.0.1:{}/v1\", models: [m, n]}}\n{extra}", up.port);
    let (host, url) = serve(dir, &config);
    let ws = url.replacen("http://", "ws://", 1) + "/voice/realtime?model=m";
    (up, host, url, ws)
}

#[test]
fn an_upstream_sending_a_100_mb_message_closes_that_session_with_a_reason_and_the_host_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_up, host, url, ws) = hostile_host(dir.path(), "huge", "");
    let got = raw(&ws, &["--mode", "read", "--seconds", "30"]);
    let closed = &got["closed"][0];
    assert_eq!(closed["code"], 1014, "{got}");
    assert!(closed["reason"].as_str().unwrap().contains("max_message_bytes"), "{got}");
    assert!(got["bytes"].as_u64().unwrap() < 8 << 20, "the huge message reached the client: {got}");
    assert!(rss_kib(host.0.id()) < 200 * 1024, "the host holds {} KiB", rss_kib(host.0.id()));
    still_serving(&url, &ws.replace("?model=m", "?model=n"));
}

#[test]
fn a_client_that_never_reads_a_flooding_upstream_is_closed_at_the_buffer_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (_up, host, url, ws) = hostile_host(dir.path(), "flood", "  max_buffered_bytes: 1048576\n");
    // Reading: the flood passes, the session lives.
    let read = raw(&ws, &["--mode", "read", "--seconds", "8"]);
    assert!(read["received"].as_u64().unwrap() > 1000, "{read}");
    // Sending audio and never reading: closed with 1008 at the bound, and
    // the host's memory stays bounded.
    let noread = raw(&ws, &["--mode", "noread", "--seconds", "5"]);
    // The session is closed, and what the client missed was dropped, not
    // held: it gets what its socket buffers held, never the whole flood,
    // then the close frame with the reason.
    let closed = &noread["closed"][0];
    assert_eq!(closed["code"], 1008, "{noread}");
    assert!(closed["reason"].as_str().unwrap().contains("not reading"), "{noread}");
    assert!(noread["received"].as_u64().unwrap() < 200_000, "{noread}");
    assert!(rss_kib(host.0.id()) < 200 * 1024, "the host holds {} KiB", rss_kib(host.0.id()));
    still_serving(&url, &ws);
}

#[test]
fn a_hundred_relayed_sessions_at_once_fit_in_bounded_memory_and_the_next_past_the_cap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_up, host, url, ws) =
        hostile_host(dir.path(), "stall", "  max_sessions: 100\n  max_sessions_per_agent: 100\n");
    let before = rss_kib(host.0.id());
    let (tx, rx) = mpsc::channel();
    let hold = ws.clone();
    std::thread::spawn(move || tx.send(raw(&hold, &["--sessions", "100", "--mode", "hold", "--seconds", "6"])));
    // While the hundred are open: the 101st is refused with 503.
    wait_until("100 relayed sessions", || {
        std::fs::read_to_string(dir.path().join("upstream-openai.jsonl"))
            .map(|l| l.lines().filter(|l| l.contains("\"connect\"")).count() >= 100)
            .unwrap_or(false)
    });
    let during = rss_kib(host.0.id());
    let extra = raw(&ws, &["--mode", "hold", "--seconds", "1"]);
    assert_eq!(extra["refused"], json!([503]), "{extra}");
    let held = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(held["opened"], 100, "{held}");
    assert!(
        during.saturating_sub(before) < 100 * 1024,
        "100 idle relayed sessions grew the host by {} KiB",
        during.saturating_sub(before)
    );
    let _ = url;
}

#[test]
fn a_voice_session_is_one_agents_by_its_token_and_may_name_its_agent_in_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let (_up, _host, url, _) = hostile_host(dir.path(), "stall", "");
    let base = url.replacen("http://", "ws://", 1);
    // Its own agent named in the path: served.
    let ok = raw(&format!("{base}/voice/sage/realtime?model=m"), &["--mode", "hold", "--seconds", "1"]);
    assert_eq!(ok["opened"], 1, "{ok}");
    // Another agent's path with this token: 403; an unknown token: 401.
    let other = raw(&format!("{base}/voice/bartok/realtime?model=m"), &["--mode", "hold", "--seconds", "1"]);
    assert_eq!(other["refused"], json!([403]), "{other}");
    let o = Command::new(python())
        .arg(repo("tests/peers/voice_raw_client.py"))
        .args(["--url", &format!("{base}/voice/realtime"), "--token", "not-a-token-of-this-host"])
        .args(["--mode", "hold", "--seconds", "1"])
        .output()
        .unwrap();
    let unknown: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(unknown["refused"], json!([401]), "{unknown}");
    // A path the relay does not serve, and a format with no upstream.
    let gemini = raw(
        &format!("{base}/voice/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"),
        &["--mode", "hold", "--seconds", "1"],
    );
    assert_eq!(gemini["refused"], json!([404]), "{gemini}");
}

#[test]
fn a_client_cannot_answer_a_call_the_relay_runs_in_a_text_or_a_binary_frame() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = json!({"calls": {"hello": {"name": "roll", "arguments": {"expression": "1d20"}}}});
    let up = upstream(dir.path(), "openai", scenario, None);
    let config = format!("{CONFIG}voice:\n  openai: {{url: \"ws://127.0.0.1:{}/v1\"}}\n", up.port);
    let (_host, url) = serve(dir.path(), &config);
    let ws = url.replacen("http://", "ws://", 1) + "/voice/realtime";
    let got = raw(&ws, &["--mode", "forge", "--seconds", "20"]);
    assert!(got["forged"].is_string(), "the client never saw the call start: {got}");
    let answer = got["answer"].as_str().unwrap();
    assert!(answer.contains("\"rolls\"") && !answer.contains("forged"), "{got}");
    let sent = outputs(&up.received());
    assert_eq!(sent.len(), 1, "only the host's output reaches the upstream: {sent:?}");
    assert!(sent[0].1["rolls"].is_array(), "{sent:?}");
    assert_eq!(up.errors(), Vec::<String>::new());
}

/// #48, third finding: empty frames counted 0 bytes against
/// `voice.max_buffered_bytes`, so an upstream that did not read let one
/// session queue 47 million of them (2.9 GB), and the writer of an ended
/// session was never stopped (its socket and what it held stayed). Now an
/// empty frame is not a message at all (closed with 1008 at once), every
/// message the relay passes on costs its bytes and 128 more (a flood of
/// `{}` is closed with 1008 at the bound), and the session's upstream
/// connection and what it queued go with it. (What the allocator keeps
/// for reuse once they are freed is its own: the relay's account, read
/// from `/metrics`, is what says nothing is held; a session that kept its
/// queue would also push the second flood's peak past the bound.)
#[test]
fn empty_and_tiny_frame_floods_to_an_upstream_that_does_not_read_stay_bounded_and_end_with_their_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let (up, host, url, ws) = hostile_host(dir.path(), "noread", "");
    let pid = host.0.id();
    let bound_kib = (toolhost::bridge::relay::DEFAULT_MAX_BUFFERED_BYTES >> 10) as u64;
    // A first flood, so that the baseline holds what the allocator keeps
    // once it has served one (freed memory it holds for reuse).
    let cold = rss_kib(pid);
    let (peak, warm) = peak_rss_during(pid, || raw(&ws, &["--mode", "flood-object", "--seconds", "6"]));
    assert_eq!(warm["closed"][0]["code"], 1008, "{warm}");
    assert!(peak.saturating_sub(cold) < 2 * bound_kib, "the first flood grew the host by {} KiB", peak - cold);
    wait_until("the first session's upstream connection closed", || sockets_to(pid, up.port) == 0);
    let baseline = rss_kib(pid);
    for (mode, why) in [("flood-empty", "one JSON object"), ("flood-object", "voice.max_buffered_bytes")] {
        let (peak, got) = peak_rss_during(pid, || raw(&ws, &["--mode", mode, "--seconds", "6"]));
        eprintln!("{mode}: {} frames sent, peak {peak} KiB over a baseline of {baseline} KiB", got["sent"]);
        let closed = &got["closed"][0];
        assert_eq!(closed["code"], 1008, "{mode}: {got}");
        assert!(closed["reason"].as_str().unwrap().contains(why), "{mode}: {got}");
        assert!(
            peak.saturating_sub(baseline) < 2 * bound_kib,
            "{mode}: {} frames grew the host by {} KiB (bound {bound_kib} KiB)",
            got["sent"],
            peak.saturating_sub(baseline)
        );
        // The session's upstream connection is closed, its writer gone,
        // and nothing it queued is held.
        wait_until("the flooded session's upstream connection closed", || sockets_to(pid, up.port) == 0);
        let holds = || relay_holds(&url, &dir.path().join("state"), pid);
        wait_until("the relay holds no session and no queued byte", || holds() == (0, 0));
    }
}

/// The drain test's config: Sage may call the hostile plugin's `sleep`.
fn sleepy_config(port: u16) -> String {
    format!(
        r#"
plugins:
  files: [{:?}]
budget:
  pin: {{sleep: deep, roll: fast}}
npcs:
  - name: Sage
    budget_tier: deep
    tools: [roll, sleep]
server:
  tokens:
    - {{token: {SAGE_TOKEN}, agent: Sage}}
  shutdown_grace_secs: 8
voice:
  openai: {{url: "ws://127.0.0.1:{port}/v1"}}
"#,
        toolhost_test_artifacts::HOSTILE_PATH
    )
}

/// #48, fourth finding: SIGTERM with a voice session and a call in flight
/// exited 0 after 0.2 s, the call cut and no close frame sent. Now the
/// relay's sessions count in the drain: the call finishes and its output
/// goes upstream, the client is closed with 1001, and the host exits 0
/// within the grace.
#[test]
fn sigterm_with_a_voice_session_and_a_call_in_flight_finishes_the_call_closes_with_1001_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    // A DEEP turn, where sleep is declared (and may take 700 ms).
    let utterance = "think carefully about the rules";
    let scenario = json!({"calls": {utterance: {"name": "sleep", "arguments": {"ms": 700}}}});
    let up = upstream(dir.path(), "openai", scenario, None);
    let (mut host, url) = serve(dir.path(), &sleepy_config(up.port));
    let ws = url.replacen("http://", "ws://", 1) + "/voice/realtime";
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(raw(&ws, &["--say", utterance, "--mode", "read", "--seconds", "30"])));
    let call_sent = || {
        up.entries().iter().any(|e| e["dir"] == "out" && e["event"]["type"] == "response.function_call_arguments.done")
    };
    wait_until("the upstream's call of sleep", call_sent);
    // The call reaches the host and starts its 700 ms.
    std::thread::sleep(Duration::from_millis(100));
    let signalled = std::time::Instant::now();
    assert!(Command::new("kill").args(["-TERM", &host.0.id().to_string()]).status().unwrap().success());
    let got = rx.recv_timeout(Duration::from_secs(30)).expect("the client's session ended");
    let status = loop {
        if let Some(status) = host.0.try_wait().unwrap() {
            break status;
        }
        assert!(signalled.elapsed() < Duration::from_secs(15), "the host is still running");
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = signalled.elapsed();
    assert_eq!(got["calls"], json!(["sleep"]), "{got}");
    let closed = &got["closed"][0];
    assert_eq!(closed["code"], 1001, "the client is told the host is going away: {got}");
    let sent = outputs(&up.received());
    assert_eq!(sent.len(), 1, "the call's output went upstream: {sent:?}");
    assert_eq!(status.code(), Some(0), "a clean stop");
    assert!(took < Duration::from_secs(8), "within the grace: {took:?}");
    assert!(sent[0].1.to_string().contains("slept 700 ms"), "the call finished: {sent:?}");
}

/// From an attacker's review of #48: each function call an upstream asked
/// for started a task at once, holding its event, however many waited for
/// the session's 8 at a time. Now a session holds at most 64 calls started
/// and unanswered; an upstream asking for 100 at once is closed with 1014.
#[test]
fn an_upstream_asking_for_a_hundred_calls_at_once_is_closed_at_the_queue_bound() {
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(dir.path(), "openai", json!({"calls": {}}), Some("calls"));
    let (_host, url) = serve(dir.path(), &sleepy_config(up.port));
    let ws = url.replacen("http://", "ws://", 1) + "/voice/realtime";
    let got = raw(&ws, &["--mode", "read", "--seconds", "30"]);
    let closed = &got["closed"][0];
    assert_eq!(closed["code"], 1014, "{got}");
    assert!(closed["reason"].as_str().unwrap().contains("64 function calls at once"), "{got}");
}

/// #48, fifth finding: one agent opened 200 voice sessions and every other
/// agent got 503. Now an agent holds at most its share
/// (`voice.max_sessions_per_agent`, by default a quarter of
/// `voice.max_sessions`).
#[test]
fn one_agents_two_hundred_voice_sessions_leave_another_agent_able_to_open_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_up, _host, _url, ws) = hostile_host(dir.path(), "stall", "");
    let (tx, rx) = mpsc::channel();
    let hold = ws.clone();
    std::thread::spawn(move || tx.send(raw(&hold, &["--sessions", "200", "--mode", "hold", "--seconds", "8"])));
    let connects = || {
        std::fs::read_to_string(dir.path().join("upstream-openai.jsonl"))
            .map(|l| l.lines().filter(|l| l.contains("\"connect\"")).count())
            .unwrap_or(0)
    };
    wait_until("Sage's share of sessions", || connects() >= 50);
    std::thread::sleep(Duration::from_secs(1));
    let other = raw_as(&ws, BARTOK_TOKEN, &["--mode", "hold", "--seconds", "1"]);
    assert_eq!(other["opened"], 1, "another agent's session: {other}");
    let held = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(held["opened"], 50, "{held}");
    let refused = held["refused"].as_array().unwrap();
    assert!(refused.len() == 150 && refused.iter().all(|s| s == 503), "{held}");
}

/// The Gemini Live path of the relay on `url`.
fn gemini_path(url: &str) -> String {
    url.replacen("http://", "ws://", 1)
        + "/voice/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
}

/// A scripted OpenAI and Gemini upstream, and the config relaying to both:
/// `openai_extra` inside the OpenAI entry's braces, `voice_extra` more
/// `voice:` keys (indented two spaces).
fn both_upstreams(dir: &Path, openai_extra: &str, voice_extra: &str) -> (Upstream, Upstream, String) {
    let openai = upstream(dir, "openai", json!({"calls": {}}), None);
    let gemini = upstream(dir, "gemini", json!({"calls": {}}), None);
    let config = format!(
        "{CONFIG}voice:\n  openai: {{url: \"ws://127.0.0.1:{}/v1\"{openai_extra}}}\n  gemini: {{url: \"ws://127.0.0.1:{}\"}}\n{voice_extra}",
        openai.port, gemini.port
    );
    (openai, gemini, config)
}

/// #48, fifth finding: an idle relay session was still open after 150 s, a
/// Gemini connection that never sent its setup after 120 s. Now both are
/// closed after their timeouts, and their upstream connections with them.
#[test]
fn an_idle_session_and_a_gemini_client_that_sends_no_setup_are_closed_after_their_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let (openai, gemini, config) = both_upstreams(dir.path(), "", "  session_idle_secs: 2\n  setup_timeout_secs: 1\n");
    let (host, url) = serve(dir.path(), &config);
    let started = std::time::Instant::now();
    let idle = raw(&(url.replacen("http://", "ws://", 1) + "/voice/realtime"), &["--mode", "read", "--seconds", "20"]);
    assert!(idle["received"].as_u64().unwrap() >= 2, "session.created and session.updated: {idle}");
    assert_eq!(idle["closed"][0]["code"], 1000, "{idle}");
    assert!(idle["closed"][0]["reason"].as_str().unwrap().contains("voice.session_idle_secs"), "{idle}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let started = std::time::Instant::now();
    let silent = raw(&gemini_path(&url), &["--mode", "read", "--seconds", "20"]);
    assert_eq!(silent["closed"][0]["code"], 1008, "{silent}");
    assert!(silent["closed"][0]["reason"].as_str().unwrap().contains("voice.setup_timeout_secs"), "{silent}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let pid = host.0.id();
    wait_until("no upstream connection left", || sockets_to(pid, openai.port) + sockets_to(pid, gemini.port) == 0);
}

/// #48, sixth finding: `?model=`, `setup.model` and generation settings
/// went upstream verbatim with the operator's key. Now the operator lists
/// the models (`voice.openai.models`, `voice.gemini.models`; the default
/// model only, by default) and caps output tokens and temperature: a
/// client asking for another model gets an error, and the upstream never
/// hears of it.
#[test]
fn a_model_the_operator_does_not_allow_is_refused_before_the_upstream_and_generation_settings_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let (openai, gemini, config) = both_upstreams(
        dir.path(),
        ", models: [gpt-realtime, gpt-realtime-mini]",
        "  max_output_tokens: 2000\n  max_temperature: 1.0\n",
    );
    let (_host, url) = serve(dir.path(), &config);
    let base = url.replacen("http://", "ws://", 1) + "/voice/realtime";

    // OpenAI: a model off the list, in the query: an error event and 1008,
    // nothing upstream.
    let refused =
        raw(&format!("{base}?model=gpt-4o-realtime-preview"), &["--mode", "read", "--seconds", "10", "--keep", "3"]);
    assert_eq!(refused["events"][0]["type"], "error", "{refused}");
    assert_eq!(refused["events"][0]["error"]["code"], "model_not_allowed", "{refused}");
    assert_eq!(refused["closed"][0]["code"], 1008, "{refused}");
    assert!(refused["closed"][0]["reason"].as_str().unwrap().contains("voice.openai.models"), "{refused}");
    // One on the list: only the model goes upstream; a session.update
    // naming another model is refused, its output tokens capped.
    let update = |session: Value| json!({"type": "session.update", "session": session}).to_string();
    let ok = raw(
        &format!("{base}?model=gpt-realtime-mini&temperature=2"),
        &[
            "--send",
            &update(json!({"type": "realtime", "model": "gpt-4o-realtime-preview"})),
            "--send",
            &update(json!({"type": "realtime", "max_output_tokens": 1_000_000})),
            "--mode",
            "read",
            "--seconds",
            "3",
            "--keep",
            "10",
        ],
    );
    assert_eq!(ok["opened"], 1, "{ok}");
    let errors: Vec<&Value> = ok["events"].as_array().unwrap().iter().filter(|e| e["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{ok}");
    assert_eq!(errors[0]["error"]["param"], "session.model", "{ok}");
    let connects: Vec<Value> = openai.entries().into_iter().filter_map(|e| e.get("connect").cloned()).collect();
    assert_eq!(connects.len(), 1, "{connects:?}");
    assert_eq!(connects[0]["query"], json!({"model": "gpt-realtime-mini"}), "{connects:?}");
    let updates: Vec<Value> =
        openai.received().into_iter().filter(|e| e["type"] == "session.update").map(|e| e["session"].clone()).collect();
    assert!(updates.iter().all(|s| s.get("model").is_none()), "{updates:?}");
    assert!(updates.iter().all(|s| s["max_output_tokens"] == 2000), "{updates:?}");
    assert!(!std::fs::read_to_string(&openai.log).unwrap().contains("gpt-4o-realtime-preview"));
    // A message the relay cannot parse is never passed on: the upstream's
    // laxer parser (Python's reads a lone surrogate escape) would see a
    // model the relay never checked. The session is closed with 1008.
    let lax = r#"{"type": "session.update", "session": {"model": "gpt-realtime-smuggled"}, "x": "\ud800"}"#;
    let smuggled = raw(&format!("{base}?model=gpt-realtime"), &["--send", lax, "--mode", "read", "--seconds", "10"]);
    assert_eq!(smuggled["closed"][0]["code"], 1008, "{smuggled}");
    assert!(smuggled["closed"][0]["reason"].as_str().unwrap().contains("one JSON object"), "{smuggled}");
    assert!(!std::fs::read_to_string(&openai.log).unwrap().contains("smuggled"));

    // Gemini: a model off the list is refused with 1008 and its reason; the
    // upstream never sees a setup. The default model, with settings over
    // the caps: capped.
    let setup = |s: Value| json!({"setup": s}).to_string();
    let refused = raw(
        &gemini_path(&url),
        &["--send", &setup(json!({"model": "models/gemini-ultra"})), "--mode", "read", "--seconds", "10"],
    );
    assert_eq!(refused["closed"][0]["code"], 1008, "{refused}");
    assert!(refused["closed"][0]["reason"].as_str().unwrap().contains("voice.gemini.models"), "{refused}");
    assert!(!std::fs::read_to_string(&gemini.log).unwrap().contains("gemini-ultra"));
    let capped = raw(
        &gemini_path(&url),
        &[
            "--send",
            &setup(json!({"generation_config": {"max_output_tokens": 1_000_000, "temperature": 2.0}})),
            "--mode",
            "read",
            "--seconds",
            "2",
            "--keep",
            "1",
        ],
    );
    assert!(capped["events"][0].get("setupComplete").is_some(), "{capped}");
    let setups: Vec<Value> = gemini.received().into_iter().filter_map(|e| e.get("setup").cloned()).collect();
    assert_eq!(setups.len(), 1, "{setups:?}");
    assert_eq!(setups[0]["model"], toolhost::bridge::relay::DEFAULT_GEMINI_MODEL, "{setups:?}");
    assert_eq!(setups[0]["generationConfig"], json!({"maxOutputTokens": 2000, "temperature": 1.0}), "{setups:?}");
    assert_eq!(openai.errors(), Vec::<String>::new());
    assert_eq!(gemini.errors(), Vec::<String>::new());
}

/// #48, eighth finding: another agent presenting a leaked Gemini
/// resumption handle resumed the first agent's conversation. Now a handle
/// resumes only for the agent whose session was given it.
#[test]
fn another_agents_resumption_handle_is_refused_and_never_reaches_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let gemini = upstream(dir.path(), "gemini", json!({"calls": {}}), None);
    let config = format!("{CONFIG}voice:\n  gemini: {{url: \"ws://127.0.0.1:{}\"}}\n", gemini.port);
    let (_host, url) = serve(dir.path(), &config);
    let ws = gemini_path(&url);
    let setup = |resumption: Value| json!({"setup": {"sessionResumption": resumption}}).to_string();
    let first = raw(&ws, &["--send", &setup(json!({})), "--mode", "read", "--seconds", "2", "--keep", "5"]);
    let handle = first["events"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e["sessionResumptionUpdate"]["newHandle"].as_str())
        .unwrap_or_else(|| panic!("Sage's session got a handle: {first}"))
        .to_string();
    // Bartok presents Sage's handle: refused, and the upstream never sees it
    // presented.
    let presented =
        || gemini.received().iter().filter(|e| e["setup"]["sessionResumption"]["handle"] == handle.as_str()).count();
    let stolen =
        raw_as(&ws, BARTOK_TOKEN, &["--send", &setup(json!({"handle": handle})), "--mode", "read", "--seconds", "10"]);
    assert_eq!(stolen["closed"][0]["code"], 1008, "{stolen}");
    assert!(stolen["closed"][0]["reason"].as_str().unwrap().contains("resumption handle"), "{stolen}");
    assert_eq!(presented(), 0);
    // The same handle under the other spelling, beside an empty one: the
    // handle checked must be the one forwarded, so both are refused.
    let both = json!({"setup": {"sessionResumption": {}, "session_resumption": {"handle": handle}}}).to_string();
    let stolen = raw_as(&ws, BARTOK_TOKEN, &["--send", &both, "--mode", "read", "--seconds", "10"]);
    assert_eq!(stolen["closed"][0]["code"], 1008, "{stolen}");
    assert!(stolen["closed"][0]["reason"].as_str().unwrap().contains("both"), "{stolen}");
    let spelt =
        gemini.received().iter().filter(|e| e["setup"]["session_resumption"]["handle"] == handle.as_str()).count();
    assert_eq!(presented() + spelt, 0);
    // Sage's own session resumes with it.
    let resumed =
        raw(&ws, &["--send", &setup(json!({"handle": handle})), "--mode", "read", "--seconds", "2", "--keep", "1"]);
    assert!(resumed["events"][0].get("setupComplete").is_some(), "{resumed}");
    assert_eq!(presented(), 1);
    assert_eq!(gemini.errors(), Vec::<String>::new());
}
