//! `serve --stdio`: malformed input, ordering, the call lane and direct
//! calls, stderr nobody reads, Unix sockets.

use super::*;

/// `toolhost serve --stdio` in `dir` (with `env`), spoken to line by line;
/// killed when dropped.
struct RawStdio {
    child: Child,
    stdin: std::process::ChildStdin,
    out: BufReader<std::process::ChildStdout>,
}

impl RawStdio {
    fn start(dir: &std::path::Path, env: &[(&str, &str)]) -> RawStdio {
        let mut child = stdio_host(dir)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        RawStdio { child, stdin, out }
    }

    /// Writes `line` and a newline.
    fn send(&mut self, line: &str) {
        self.stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn send_json(&mut self, v: &Value) {
        self.send(&v.to_string());
    }

    /// The next line, as JSON.
    fn next(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.out.read_line(&mut line).unwrap() > 0, "stdout closed");
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `toolhost serve --stdio` in `dir`, its state under `dir/state`.
fn stdio_host(dir: &std::path::Path) -> std::process::Command {
    let mut c = crate::common::toolhost();
    c.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(["serve", "--stdio"]);
    c
}

/// A config directory loading the hostile test plugin (unsigned), with no
/// rate limit.
fn hostile_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        "server:\n  rate_limit: { per_minute: 0 }\nplugins:\n  dir: ./plugins\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    std::fs::copy(toolhost_test_artifacts::HOSTILE_PATH, dir.path().join("plugins/hostile.wasm")).unwrap();
    dir
}

/// Runs a stdio session read from a file, `script` (one message per
/// line), into a file: the exit status and what was written.
fn stdio_from_file(dir: &std::path::Path, script: &str) -> (std::process::ExitStatus, String) {
    let input = dir.join("session.jsonl");
    std::fs::write(&input, script).unwrap();
    let output = dir.join("answers.jsonl");
    let status = stdio_host(dir)
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    (status, std::fs::read_to_string(&output).unwrap())
}

#[test]
fn stdio_answers_every_malformed_line_and_keeps_serving() {
    let dir = config_dir();
    let mut io = RawStdio::start(dir.path(), &[]);
    io.send("{not json");
    let m = io.next();
    assert_eq!((m["error"]["code"].as_i64(), m["id"].clone()), (Some(-32700), Value::Null), "{m}");
    io.send_json(&json!([initialize()]));
    assert_eq!(io.next()["error"]["code"], -32600, "a batch");
    io.send_json(&initialize());
    assert_eq!(io.next()["result"]["serverInfo"]["name"], "toolhost");
    io.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    io.send_json(
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "roll", "arguments": [1]}}),
    );
    let m = io.next();
    assert_eq!((m["error"]["code"].as_i64(), m["id"].as_i64()), (Some(-32602), Some(5)), "{m}");
    io.send(
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"roll","arguments":{"expression":"1d4"}}}"#,
    );
    let m = io.next();
    assert_eq!(m["id"], 6);
    assert!(m["result"]["content"].is_array(), "still serving: {m}");
}

/// A second `initialize` inside a live session is refused (as the
/// reference servers do) and the session goes on under what was agreed;
/// an unknown method's -32601 says which method and what is served.
#[test]
fn stdio_refuses_a_second_initialize_and_names_an_unknown_method() {
    let dir = config_dir();
    let mut io = RawStdio::start(dir.path(), &[]);
    io.send_json(&initialize());
    assert_eq!(io.next()["result"]["serverInfo"]["name"], "toolhost");
    io.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut again = initialize();
    again["id"] = json!(2);
    io.send_json(&again);
    let m = io.next();
    assert_eq!((m["id"].as_i64(), m["error"]["code"].as_i64()), (Some(2), Some(-32600)), "{m}");
    assert!(m["error"]["message"].as_str().unwrap().contains("already initialized"), "{m}");
    io.send_json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/frobnicate", "params": {}}));
    let m = io.next();
    assert_eq!((m["id"].as_i64(), m["error"]["code"].as_i64()), (Some(3), Some(-32601)), "{m}");
    let message = m["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"tools/frobnicate\"") && message.contains("serves"), "{m}");
    io.send(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"roll","arguments":{"expression":"1d4"}}}"#,
    );
    let m = io.next();
    assert_eq!(m["id"], 4);
    assert!(m["result"]["content"].is_array(), "still serving: {m}");
}

/// Over stdio a tool's log lines reach the client before its response,
/// one call at a time and with several in flight (the transport coalesces
/// queued lines into one write), and every request is answered once. On a
/// quiet machine the later sequential calls run in the session's call lane
/// (`mcp::lane`); the test below puts a call there whatever the machine.
#[test]
fn stdio_notifications_precede_their_response() {
    let dir = hostile_dir();
    let mut io = RawStdio::start(dir.path(), &[]);
    let call = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "forge_log"}});
    io.send_json(&initialize());
    assert_eq!(io.next()["result"]["serverInfo"]["name"], "toolhost");
    io.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for id in 0..40 {
        io.send_json(&call(id));
        let log = io.next();
        assert_eq!(log["method"], "notifications/message", "call {id}: the log line first: {log}");
        assert_eq!(log["params"]["logger"], "forge_log");
        let r = io.next();
        assert_eq!(r["id"], id, "{r}");
        assert_eq!(r["result"]["content"][0]["text"], "logged", "{r}");
    }
    // Sixteen in flight: each response has had its log line before it.
    for id in 1000..1016 {
        io.send_json(&call(id));
    }
    let (mut logs, mut answered) = (0, std::collections::BTreeSet::new());
    while answered.len() < 16 {
        let m = io.next();
        if m["method"] == "notifications/message" {
            logs += 1;
        } else {
            assert!(m["id"].as_u64().is_some_and(|id| answered.insert(id)), "{m}");
            assert!(logs >= answered.len(), "a response before its log line: {m}");
        }
    }
    assert_eq!(answered, (1000..1016).collect());
}

/// A scripted client (`printf … | toolhost serve --stdio`) writes its
/// whole session at once and closes its end: every call is still answered,
/// with its notifications before its response. These calls go through
/// rmcp's service (sent before the session is initialized, and of tools
/// not yet measured fast), whose loop no longer takes a handler's
/// notifications once the input has ended: the plugin's log line and
/// progress go straight to the output instead, or the call would hang on
/// them and its answer be lost.
#[test]
fn stdio_calls_that_report_are_answered_after_the_input_ends() {
    let dir = hostile_dir();
    let mut child =
        stdio_host(dir.path()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let script = [
        initialize(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "forge_log"}}),
        json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call",
               "params": {"name": "progress_twice", "_meta": {"progressToken": "p2"}}}),
    ]
    .map(|m| format!("{m}\n"))
    .concat();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let at = |pred: &dyn Fn(&Value) -> bool, what: &str| {
        lines.iter().position(pred).unwrap_or_else(|| panic!("no {what} in {lines:#?}"))
    };
    let answer1 = at(&|m| m["id"] == 11, "answer to call 11");
    let answer2 = at(&|m| m["id"] == 12, "answer to call 12");
    assert_eq!(lines[answer1]["result"]["content"][0]["text"], "logged", "{}", lines[answer1]);
    assert_eq!(lines[answer2]["result"]["isError"], false, "{}", lines[answer2]);
    let log = at(&|m| m["method"] == "notifications/message", "log line");
    assert_eq!(lines[log]["params"]["logger"], "forge_log");
    assert!(log < answer1, "the log line after its response: {lines:#?}");
    let progress: Vec<usize> = (0..lines.len()).filter(|&i| lines[i]["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 2, "{lines:#?}");
    assert!(progress.iter().all(|&i| i < answer2 && lines[i]["params"]["progressToken"] == "p2"), "{lines:#?}");
}

/// `toolhost serve --stdio < session.jsonl > answers.jsonl`: with stdin
/// and stdout regular files (tokio's blocking handles, not the IO reactor),
/// every answer is in the file when the host exits. Before, the session's
/// runtime was shut down while the last write was still pending, and the
/// answers were lost with exit code 0.
#[test]
fn stdio_from_a_file_to_a_file_answers_everything() {
    let dir = config_dir();
    let mut script = vec![initialize(), json!({"jsonrpc": "2.0", "method": "notifications/initialized"})];
    script.extend((10..30).map(|id| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "roll", "arguments": {"expression": "1d20"}}})
    }));
    script.push(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}));
    let (status, out) = stdio_from_file(dir.path(), &script.iter().map(|m| format!("{m}\n")).collect::<String>());
    assert!(status.success(), "{status}");
    let mut ids: Vec<i64> =
        out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    let expected: Vec<i64> = std::iter::once(1).chain(10..30).chain([99]).collect();
    assert_eq!(ids, expected, "{out}");
}

/// A session that never initializes (here: its `initialize` starts with a
/// UTF-8 byte order mark, then the input ends) still gets what was
/// answered: the parse error naming the mark, and the pong rmcp gives a
/// ping before `initialize`, and the exit status says it failed. rmcp
/// drops the transport without closing it when initialization fails, so
/// `serve` waits for the output itself (`Replies::finish`: the unit test
/// `mcp::stdio::tests::finish_writes_what_a_dropped_transport_queued`
/// shows the wait; here the writer is usually done already).
#[test]
fn stdio_answers_are_written_when_initialization_fails() {
    let dir = config_dir();
    let ping = json!({"jsonrpc": "2.0", "id": 5, "method": "ping"});
    let (status, out) = stdio_from_file(dir.path(), &format!("\u{feff}{}\n{ping}\n", initialize()));
    assert!(!status.success(), "the session never initialized: {status}");
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["error"]["code"], -32700, "{out}");
    assert!(lines[0]["error"]["message"].as_str().unwrap().contains("byte order mark"), "{out}");
    assert_eq!((lines[1]["id"].clone(), lines[1]["result"].clone()), (json!(5), json!({})), "{out}");
}

/// Whether `pid`'s thread named `thread` is blocked in a `write` to its
/// standard error (`/proc/<pid>/task/<tid>/syscall`: the call a thread is
/// blocked in, its number and first argument). A write to a pipe blocks
/// only when the pipe is full.
fn blocked_writing_stderr(pid: u32, thread: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    const WRITE: &str = "1";
    #[cfg(target_arch = "aarch64")]
    const WRITE: &str = "64";
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| {
        let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
        read("comm").trim() == thread && read("syscall").split_whitespace().take(2).eq([WRITE, "0x2"])
    })
}

/// An MCP client that pipes our stderr and never reads it: a thousand
/// cancelled calls each log a warning, far past the pipe's 64 KiB; with
/// the pipe full the host still answers the next call and exits when its
/// input ends. Before, the session's thread blocked in its first
/// `write` to the full pipe, for good. The waits below only bound a hang.
#[test]
fn stdio_keeps_serving_when_nobody_reads_its_stderr() {
    let dir = hostile_dir();
    /// Killed when the test ends, hung or not.
    struct Host(Child);
    impl Drop for Host {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut host = Host(
        stdio_host(dir.path()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(),
    );
    let child = &mut host.0;
    let unread_stderr = child.stderr.take().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let out = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str(&line).unwrap());
        }
    });
    let wait_for = |id: i64| loop {
        let m = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the host stopped answering");
        if m["id"] == id {
            return m;
        }
    };
    writeln!(stdin, "{}", initialize()).unwrap();
    wait_for(1);
    let mut burst = format!("{}\n", json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for id in 1000..2000 {
        burst += &format!(
            "{}\n{}\n",
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "progress_twice", "arguments": {"ms": 20}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}})
        );
    }
    stdin.write_all(burst.as_bytes()).unwrap();
    // The pipe fills: the host's log thread waits in its write.
    let started = std::time::Instant::now();
    while !blocked_writing_stderr(child.id(), "toolhost-log") {
        let queued = rustix::io::ioctl_fionread(&unread_stderr).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "the pipe never filled: {queued} bytes in it");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "roll", "arguments": {"expression": "1d4"}}})
    )
    .unwrap();
    let answer = wait_for(7);
    assert!(answer["result"]["content"].is_array(), "{answer}");
    drop(stdin);
    for _ in 0..600 {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the host did not exit within a minute of its input ending");
}

/// Gives `tool` a streak of fast calls, so the lane admits its next call
/// whatever the machine's load (a loaded machine can take over the 1 ms a
/// fast call may take, which ends the streak: right for serving, beside the
/// point of these tests).
fn keep_fast(lane: &toolhost::mcp::lane::CallLane, tool: &str) {
    for _ in 0..toolhost::mcp::lane::INLINE_AFTER {
        lane.record(tool, std::time::Duration::ZERO);
    }
}

/// A stdio session over an in-memory pipe, served by the library's
/// `StdioSession` as `serve --stdio` serves it, with one tool
/// given a streak of fast calls (so the lane admits it whatever the
/// machine's speed), and with or without direct calls.
struct LaneSession {
    main: tokio::runtime::Runtime,
    lane: std::sync::Arc<toolhost::mcp::lane::CallLane>,
    direct: std::sync::Arc<toolhost::mcp::server::DirectFront>,
    client: tokio::io::DuplexStream,
    session: toolhost::serve::StdioSession,
}

impl LaneSession {
    fn start(fast_tool: &str, direct: bool) -> LaneSession {
        let host = std::sync::Arc::new(crate::common::host_with(toolhost::runtime::Limits::default()));
        let main = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let front = toolhost::mcp::McpFront::new(host.pipeline().clone(), None).unwrap();
        let (client, server) = tokio::io::duplex(1 << 16);
        let session = toolhost::serve::StdioSession::start(
            front,
            main.handle().clone(),
            move || {
                let (r, w) = tokio::io::split(server);
                toolhost::mcp::stdio::over(r, w)
            },
            toolhost::serve::SessionOptions { direct_calls: direct, ..Default::default() },
        )
        .unwrap();
        keep_fast(session.lane(), fast_tool);
        LaneSession { main, lane: session.lane().clone(), direct: session.direct().clone(), client, session }
    }

    /// Runs `talk` against the session, initialized, within 60 s (a call
    /// that died in the lane is never answered: give up rather than hang),
    /// then waits for the session to end.
    fn talk<F: std::future::Future<Output = ()>>(self, talk: impl FnOnce(LineClient) -> F) {
        let LaneSession { main, client, session, .. } = self;
        let run = async move {
            let mut c = LineClient::new(client);
            c.send(initialize()).await;
            assert_eq!(c.next().await["result"]["serverInfo"]["name"], "toolhost");
            c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
            // Answered after the session has taken in `initialized`.
            c.send(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).await;
            assert_eq!(c.next().await["id"], 1);
            talk(c).await;
        };
        main.block_on(async { tokio::time::timeout(std::time::Duration::from_secs(60), run).await })
            .expect("every call answered and the output closed");
        main.block_on(session.ended()).expect("the session ended cleanly");
    }
}

/// The client end of a [`LaneSession`]: JSON-RPC lines.
struct LineClient {
    w: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
}

impl LineClient {
    fn new(stream: tokio::io::DuplexStream) -> LineClient {
        use tokio::io::AsyncBufReadExt as _;
        let (r, w) = tokio::io::split(stream);
        LineClient { w, lines: tokio::io::BufReader::new(r).lines() }
    }

    /// Writes `text` (lines) in one write.
    async fn write(&mut self, text: &str) {
        use tokio::io::AsyncWriteExt as _;
        self.w.write_all(text.as_bytes()).await.unwrap();
    }

    async fn send(&mut self, message: Value) {
        self.write(&line(message)).await;
    }

    /// The next message; `None` when the output has closed.
    async fn try_next(&mut self) -> Option<Value> {
        self.lines.next_line().await.unwrap().map(|l| serde_json::from_str(&l).unwrap())
    }

    async fn next(&mut self) -> Value {
        self.try_next().await.expect("a message")
    }

    /// Ends the input.
    async fn close(&mut self) {
        use tokio::io::AsyncWriteExt as _;
        self.w.shutdown().await.unwrap();
    }
}

/// `message` as one line.
fn line(message: Value) -> String {
    format!("{message}\n")
}

/// A `tools/call` of `name` with `params` merged in.
fn call_line(id: u64, name: &str, params: Value) -> String {
    let mut p = json!({"name": name});
    p.as_object_mut().unwrap().extend(params.as_object().cloned().unwrap_or_default());
    line(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": p}))
}

/// The stdio call lane, whatever the machine's speed: with `forge_log`'s
/// streak of fast calls given, its call runs in the lane (on the thread
/// driving the session, outside its runtime, where a guest writing to WASI
/// stdout, whose host functions block, is sound), its log line still
/// precedes its response, and the session goes on serving.
#[test]
fn a_call_in_the_stdio_lane_is_answered_after_its_log_line() {
    let s = LaneSession::start("forge_log", false);
    let lane = s.lane.clone();
    let streak = s.lane.clone();
    s.talk(|mut c| async move {
        for id in 2..4 {
            keep_fast(&streak, "forge_log");
            c.write(&call_line(id, "forge_log", json!({}))).await;
            let log = c.next().await;
            assert_eq!(log["method"], "notifications/message", "the log line first: {log}");
            let r = c.next().await;
            assert_eq!((r["id"].as_u64(), &r["result"]["content"][0]["text"]), (Some(id), &json!("logged")), "{r}");
        }
    });
    assert_eq!(lane.calls_run(), 2, "both calls ran in the lane");
}

/// `serve --stdio`'s direct calls (`mcp::server::DirectFront`): with
/// `forge_log` on a fast streak, calls go from the transport straight to
/// the lane, around rmcp's service. Each log line precedes its response; a
/// queued call the client cancels is not answered (it still runs, on the
/// pool) while the calls around it are; and a client that writes its calls
/// and closes its end at once still gets every answer.
#[test]
fn direct_calls_are_answered_in_order_cancelled_ones_not_and_none_lost_at_the_end() {
    let s = LaneSession::start("forge_log", true);
    let direct = s.direct.clone();
    let lane = s.lane.clone();
    s.talk(|mut c| async move {
        let fast = || keep_fast(&lane, "forge_log");
        let call = |id: u64| call_line(id, "forge_log", json!({}));
        let set_level = |id: u64, level: &str| {
            line(json!({"jsonrpc": "2.0", "id": id, "method": "logging/setLevel", "params": {"level": level}}))
        };
        // A level set in the same write as a call holds for it (forge_log
        // logs a warning), and the result has the shape rmcp gives a
        // 2025-06-18 client: no `resultType`.
        fast();
        c.write(&(set_level(10, "error") + &call(20))).await;
        let mut two = vec![c.next().await, c.next().await];
        two.sort_by_key(|m| m["id"].as_u64());
        assert_eq!((two[0]["id"].as_u64(), two[1]["id"].as_u64()), (Some(10), Some(20)), "no log line: {two:?}");
        let result = &two[1]["result"];
        assert_eq!(result["content"][0]["text"], "logged", "{result}");
        assert!(result.get("resultType").is_none(), "a 2025-06-18 result: {result}");
        assert_eq!(result["_meta"]["toolhost"]["cached"], false, "{result}");
        c.write(&set_level(11, "debug")).await;
        assert_eq!(c.next().await["id"], 11);
        // Protocol keys in `_meta` are rmcp's to check; a progress token
        // (rmcp's client sends one with every call) is not.
        let meta = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "1999-01-01"}});
        c.write(&call_line(21, "forge_log", meta)).await;
        let refused = c.next().await;
        assert_eq!(refused["id"], 21, "{refused}");
        assert!(refused["error"]["code"].is_i64(), "rmcp refuses an unsupported version: {refused}");
        fast();
        c.write(&call_line(22, "forge_log", json!({"_meta": {"progressToken": "p"}}))).await;
        let log = c.next().await;
        assert_eq!(log["method"], "notifications/message", "{log}");
        let r = c.next().await;
        assert_eq!((r["id"].as_u64(), &r["result"]["content"][0]["text"]), (Some(22), &json!("logged")), "{r}");
        // An id in flight used again: the second call is refused with a
        // clear error, not run; the first is answered after its log line.
        fast();
        c.write(&(call(30) + &call(30))).await;
        let (mut log, mut answer, mut refused) = (None, None, None);
        for i in 0..3 {
            let m = c.next().await;
            if m["method"] == "notifications/message" {
                log = Some(i);
            } else if m["error"].is_object() {
                refused = Some(m);
            } else {
                answer = Some((i, m));
            }
        }
        let refused = refused.expect("the reused id refused");
        assert_eq!((refused["id"].as_u64(), refused["error"]["code"].as_i64()), (Some(30), Some(-32600)), "{refused}");
        assert!(refused["error"]["message"].as_str().unwrap().contains("in use"), "{refused}");
        let (at, answer) = answer.expect("the first call 30 answered");
        assert_eq!((answer["id"].as_u64(), &answer["result"]["content"][0]["text"]), (Some(30), &json!("logged")));
        assert!(log.is_some_and(|l| l < at), "the log line before its response");
        // One write: the transport takes every call (and the cancellation
        // of 3) before the lane runs the first.
        let mut burst = call(2) + &call(3);
        burst += &line(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}));
        for id in 4..10 {
            burst += &call(id);
        }
        fast();
        c.write(&burst).await;
        // The input ends at once.
        c.close().await;
        let (mut logs, mut answered) = (0, Vec::new());
        while let Some(m) = c.try_next().await {
            if m["method"] == "notifications/message" {
                logs += 1;
                continue;
            }
            answered.push(m["id"].as_u64().unwrap_or_else(|| panic!("a response: {m}")));
            assert_eq!(m["result"]["content"][0]["text"], "logged", "{m}");
            assert!(logs >= answered.len(), "a response before its log line: {m}");
        }
        answered.sort_unstable();
        assert_eq!(answered, vec![2, 4, 5, 6, 7, 8, 9], "every call answered but the cancelled one");
        assert_eq!(logs, answered.len(), "no log line for the cancelled call");
    });
    assert_eq!(
        direct.calls_taken(),
        11,
        "calls 20, 22, the first 30 and the burst went around rmcp's service, 21 did not (the second 30 was refused)"
    );
}

/// Progress on direct calls: a call run in the lane has its reports held
/// and sent before its response; a call queued behind it that goes to the
/// pool at its turn (the first one took long, ending the tool's streak) has
/// its reports sent as they come, also before its response. Each
/// notification carries its own call's token.
#[test]
fn direct_calls_report_progress_in_the_lane_and_on_the_pool() {
    let s = LaneSession::start("progress_twice", true);
    let (lane, direct) = (s.lane.clone(), s.direct.clone());
    s.talk(|mut c| async move {
        let call = |id: u64, ms: u64, token: &str| {
            call_line(id, "progress_twice", json!({"arguments": {"ms": ms}, "_meta": {"progressToken": token}}))
        };
        // 40 takes 20 ms in the lane; 41, queued behind it, then leaves for the pool.
        c.write(&(call(40, 20, "a") + &call(41, 0, "b"))).await;
        let mut progress: std::collections::HashMap<String, Vec<f64>> = Default::default();
        let mut answered = Vec::new();
        while answered.len() < 2 {
            let m = c.next().await;
            if m["method"] == "notifications/progress" {
                let token = m["params"]["progressToken"].as_str().unwrap().to_string();
                progress.entry(token).or_default().push(m["params"]["progress"].as_f64().unwrap());
                continue;
            }
            let id = m["id"].as_u64().unwrap_or_else(|| panic!("a response: {m}"));
            assert_eq!(m["result"]["content"][0]["text"], "twice", "{m}");
            let token = if id == 40 { "a" } else { "b" };
            let seen = progress.get(token).cloned().unwrap_or_default();
            assert_eq!(seen.last(), Some(&2.0), "call {id}'s progress came before its response: {progress:?}");
            answered.push(id);
        }
        answered.sort_unstable();
        assert_eq!(answered, vec![40, 41]);
    });
    assert_eq!(direct.calls_taken(), 2, "both went around rmcp's service");
    assert_eq!(lane.calls_run(), 1, "the second left the lane for the pool at its turn");
}

/// A client that gives its server Unix socket pairs for stdin and stdout
/// (as Node's `child_process`, and so the TypeScript SDK, does) is served on
/// the reactor, as a client with pipes is (the debug log says which path
/// was taken), and gets every answer, sequential and pipelined; with stderr
/// on stdout's socket (`2>&1`) the host keeps the sockets blocking (a
/// non-blocking stderr could lose log lines) and answers all the same.
#[test]
fn stdio_over_unix_sockets_is_served_on_the_reactor() {
    use std::os::unix::net::UnixStream;
    for stderr_on_stdout in [false, true] {
        let dir = config_dir();
        let (ours_in, theirs_in) = UnixStream::pair().unwrap();
        let (ours_out, theirs_out) = UnixStream::pair().unwrap();
        let log = dir.path().join("stderr.log");
        let mut cmd = stdio_host(dir.path());
        cmd.env("TOOLHOST_LOG", "toolhost_mcp::stdio=debug")
            .stdin(std::os::fd::OwnedFd::from(theirs_in))
            .stdout(std::os::fd::OwnedFd::from(theirs_out.try_clone().unwrap()));
        if stderr_on_stdout {
            cmd.stderr(std::os::fd::OwnedFd::from(theirs_out));
        } else {
            drop(theirs_out);
            cmd.stderr(std::fs::File::create(&log).unwrap());
        }
        let mut child = cmd.spawn().unwrap();
        drop(cmd);
        let mut input = &ours_in;
        let mut answers = BufReader::new(&ours_out);
        // The answers read so far, by id (calls run on the pool when the
        // lane is full may answer out of order).
        let mut seen = std::collections::HashMap::<i64, Value>::new();
        let mut answer = |id: i64| -> Value {
            while !seen.contains_key(&id) {
                let mut line = String::new();
                assert!(answers.read_line(&mut line).unwrap() > 0, "the session ended before answering {id}");
                // With stderr on the same socket, log lines come in between.
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && let Some(n) = v["id"].as_i64()
                {
                    seen.insert(n, v);
                }
            }
            seen.remove(&id).unwrap()
        };
        writeln!(input, "{}", initialize()).unwrap();
        assert_eq!(answer(1)["result"]["serverInfo"]["name"], "toolhost");
        writeln!(input, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        let call = |id: i64| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "roll", "arguments": {"expression": "1d20"}}})
        };
        for id in 10..60 {
            writeln!(input, "{}", call(id)).unwrap();
            assert_eq!(answer(id)["result"]["isError"], false);
        }
        // Pipelined: requests in one write, every answer comes. Past the
        // lane's depth calls run on the pool, where more than the caller's
        // `limits.agent_concurrency` may be under way at once: the next is
        // refused (`capacity_exceeded`) rather than queued. A refusal needs
        // that many of the session's calls running, each then answered: of
        // n pipelined at most n less the limit are refused (none of a batch
        // within it), and for that limit only (the plugin's own slots, 56 of
        // its 64 for one caller, are never the first to run out).
        let limit = toolhost::runtime::Limits::default().agent_concurrency as i64; // the config sets none
        let mut first = 100;
        for n in [limit, 200] {
            let ids = first..first + n;
            first += n;
            let batch: String = ids.clone().map(|id| format!("{}\n", call(id))).collect();
            input.write_all(batch.as_bytes()).unwrap();
            let mut refused = 0;
            for id in ids {
                let r = answer(id);
                if r["result"]["isError"] == false {
                    continue;
                }
                let why = r["result"]["content"][0]["text"].as_str().unwrap_or_default();
                assert_eq!(r["result"]["_meta"]["toolhost"]["code"], "capacity_exceeded", "call {id}: {r}");
                assert!(
                    why.contains(&format!("already has {limit} calls running (limits.agent_concurrency)")),
                    "call {id}: {r}"
                );
                refused += 1;
            }
            eprintln!("{refused} of {n} pipelined calls refused");
            assert!(refused <= (n - limit).max(0), "{refused} of {n} refused, though {limit} may run at once");
        }
        ours_in.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(child.wait().unwrap().success());
        if !stderr_on_stdout {
            let log = std::fs::read_to_string(&log).unwrap();
            assert!(log.contains("both standard streams are Unix sockets"), "{log}");
        }
    }
}
