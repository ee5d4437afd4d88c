//! One round of each kind of client: the SDKs' and the plain one's as
//! external processes, rmcp's and the plain one in this process.

use super::*;

/// One timed phase of a round: `lat.len()` calls with `inflight` in flight.
pub(super) struct Phase {
    pub(super) inflight: usize,
    pub(super) lat: Vec<Duration>,
    pub(super) wall: Duration,
}

/// Latencies in microseconds, as the client scripts print them.
pub(super) fn from_us(v: &Value) -> Duration {
    Duration::from_secs_f64(v.as_f64().unwrap_or_else(|| fail(format!("not a number of microseconds: {v}"))) / 1e6)
}

/// A session of an external client (a script): it spawns the server, warms
/// up and times `phases` ((in flight, calls) pairs).
pub(super) fn external_round(
    env: &Env,
    client: ClientKind,
    server: &Server,
    warmup: usize,
    phases: &[(usize, usize)],
) -> Vec<Phase> {
    let (program, script) = match client {
        ClientKind::Python => (&env.python, "py_sdk_client.py"),
        ClientKind::Ts => (&env.node, "ts_sdk_client.mjs"),
        ClientKind::Plain => (&env.python, "plain_client.py"),
        _ => fail(format!("{} is not an external client", client.slug())),
    };
    let (tool, arguments) = server.tool();
    let spec = json!({
        "server": env.spawn(server, client).to_json(),
        "tool": tool,
        "arguments": arguments,
        "meta": server.meta(),
        "warmup": warmup,
        "phases": phases.iter().map(|(k, n)| json!({"inflight": k, "calls": n})).collect::<Vec<_>>(),
        "sdk": env.ts_sdk,
    });
    let what = format!("{} client with {}", client.slug(), server.label);
    let mut child = Proc(
        Command::new(program)
            .arg(env.scripts.join(script))
            .arg(spec.to_string())
            .current_dir(env.dir.path())
            .env("CLIENTS_BENCH_TAG", &env.tag)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(env.log(&format!("client-{}-{}", client.slug(), server.slug)))
            .spawn()
            .unwrap_or_else(|e| fail(format!("starting the {what}: {e}"))),
    );
    let Some(mut stdout) = child.0.stdout.take() else { fail(format!("{what}: stdout not piped")) };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let r = stdout.read_to_string(&mut out);
        let _ = tx.send(r.map(|_| out));
    });
    let out = match rx.recv_timeout(round_timeout()) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => fail(format!("reading the {what}'s output: {e}")),
        Err(_) => fail(format!("the {what} took over {} s (CLIENTS_BENCH_TIMEOUT)", round_timeout().as_secs())),
    };
    let st = child.0.wait().unwrap_or_else(|e| fail(format!("waiting for the {what}: {e}")));
    if !st.success() {
        fail(format!("the {what} failed ({st}); its stderr is below"));
    }
    let Some(report) =
        out.lines().find_map(|l| serde_json::from_str::<Value>(l).ok().filter(|v| v["phases"].is_array()))
    else {
        fail(format!("the {what} printed no report: {out:?}"))
    };
    let phases: Vec<Phase> = report["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| Phase {
            inflight: p["inflight"].as_u64().unwrap_or(0) as usize,
            lat: p["lat_us"].as_array().into_iter().flatten().map(from_us).collect(),
            wall: from_us(&p["wall_us"]),
        })
        .collect();
    phases
}

/// `calls` calls with `inflight` in flight on one rmcp session: `inflight`
/// tasks, each making its share of the calls one after another.
pub(super) async fn rmcp_batch(
    peer: &Peer<RoleClient>,
    params: &CallToolRequestParams,
    inflight: usize,
    calls: usize,
) -> Phase {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..inflight {
        let share = calls / inflight + usize::from(i < calls % inflight);
        let (peer, params) = (peer.clone(), params.clone());
        set.spawn(async move {
            let mut v = Vec::with_capacity(share);
            for _ in 0..share {
                let t = Instant::now();
                let r = peer.call_tool(params.clone()).await;
                let d = t.elapsed();
                match r {
                    Ok(r) if r.is_error != Some(true) => v.push(d),
                    Ok(r) => return Err(format!("{}: the call failed: {:?}", params.name, r.content)),
                    Err(e) => return Err(format!("{}: {e}", params.name)),
                }
            }
            Ok(v)
        });
    }
    let mut lat = Vec::with_capacity(calls);
    while let Some(v) = set.join_next().await {
        match v {
            Ok(Ok(v)) => lat.extend(v),
            Ok(Err(e)) => fail(e),
            Err(e) => fail(format!("caller task: {e}")),
        }
    }
    Phase { inflight, lat, wall: start.elapsed() }
}

/// A session of rmcp's client, in this process, on `rt`.
pub(super) fn rmcp_round(
    rt: &tokio::runtime::Runtime,
    env: &Env,
    client: ClientKind,
    server: &Server,
    warmup: usize,
    phases: &[(usize, usize)],
) -> Vec<Phase> {
    let spawn = env.spawn(server, client);
    let params: CallToolRequestParams =
        serde_json::from_value(server.params()).unwrap_or_else(|e| fail(format!("tools/call params: {e}")));
    let most = phases.iter().map(|p| p.0).max().unwrap_or(1);
    let session = async {
        let mut cmd = tokio::process::Command::from(spawn.command());
        cmd.kill_on_drop(true);
        let (proc, _) = TokioChildProcess::builder(cmd)
            .stderr(spawn.stderr_file())
            .spawn()
            .unwrap_or_else(|e| fail(format!("starting {}: {e}", server.label)));
        let _pid = PidGuard(proc.id());
        let c: Client =
            ().serve(proc).await.unwrap_or_else(|e| fail(format!("initialize {} over stdio: {e}", server.label)));
        let peer = c.peer().clone();
        rmcp_batch(&peer, &params, 1, warmup).await;
        if most > 1 {
            rmcp_batch(&peer, &params, most, warmup).await;
        }
        let mut out = Vec::new();
        for &(inflight, calls) in phases {
            out.push(rmcp_batch(&peer, &params, inflight, calls).await);
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), c.cancel()).await;
        out
    };
    rt.block_on(async {
        tokio::time::timeout(round_timeout(), session).await.unwrap_or_else(|_| {
            fail(format!(
                "rmcp with {} took over {} s (CLIENTS_BENCH_TIMEOUT)",
                server.label,
                round_timeout().as_secs()
            ))
        })
    })
}

/// The plain blocking client in Rust: one request line written, lines read
/// until its answer.
pub(super) struct Plain {
    pub(super) stdin: std::process::ChildStdin,
    pub(super) stdout: BufReader<std::process::ChildStdout>,
    pub(super) line: String,
    pub(super) id: u64,
    /// The server's label, for messages.
    pub(super) what: &'static str,
}

impl Plain {
    pub(super) fn request(&mut self, method: &str, params: &Value) -> Value {
        self.id += 1;
        let mut req = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}))
            .unwrap_or_else(|e| fail(e.to_string()));
        req.push(b'\n');
        self.stdin
            .write_all(&req)
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| fail(format!("writing {method} to {}: {e}", self.what)));
        loop {
            self.line.clear();
            match self.stdout.read_line(&mut self.line) {
                Ok(0) => fail(format!("{} closed its output before answering {method} #{}", self.what, self.id)),
                Ok(_) => {}
                Err(e) => fail(format!("reading {}'s answer to {method}: {e}", self.what)),
            }
            let Ok(mut v) = serde_json::from_str::<Value>(&self.line) else { continue };
            if v["id"] == self.id && v.get("method").is_none() {
                if let Some(e) = v.get("error") {
                    fail(format!("{}: {method}: {e}", self.what));
                }
                return v["result"].take();
            }
        }
    }
}

pub(super) fn plain_rs_round(env: &Env, server: &Server, warmup: usize, phases: &[(usize, usize)]) -> Vec<Phase> {
    let spawn = env.spawn(server, ClientKind::PlainRs);
    let mut child = Proc(
        spawn
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(spawn.stderr_file())
            .spawn()
            .unwrap_or_else(|e| fail(format!("starting {}: {e}", server.label))),
    );
    let _watchdog = Watchdog::new(child.0.id(), round_timeout());
    let (Some(stdin), Some(stdout)) = (child.0.stdin.take(), child.0.stdout.take()) else {
        fail(format!("{}: stdio not piped", server.label))
    };
    let mut c = Plain { stdin, stdout: BufReader::new(stdout), line: String::new(), id: 0, what: server.label };
    let info = json!({
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "clients-bench-plain-rs", "version": "0"},
    });
    c.request("initialize", &info);
    c.stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .unwrap_or_else(|e| fail(format!("writing to {}: {e}", server.label)));
    let params = server.params();
    let mut call = || {
        let t = Instant::now();
        let r = c.request("tools/call", &params);
        let d = t.elapsed();
        if r["isError"] == true {
            fail(format!("{}: the call failed: {}", server.label, r["content"]));
        }
        d
    };
    for _ in 0..warmup {
        call();
    }
    phases
        .iter()
        .map(|&(inflight, calls)| {
            assert_eq!(inflight, 1, "the plain client makes sequential calls only");
            let start = Instant::now();
            let lat = (0..calls).map(|_| call()).collect();
            Phase { inflight, lat, wall: start.elapsed() }
        })
        .collect()
    // `child` drops here: the server is killed.
}
