use crate::args::HostArgs;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::Host;
use toolhost::admin::Admin;
use toolhost::admin::client::EndpointRecord;
use toolhost::mcp::McpFront;
use toolhost::mcp::http::endpoints;
use toolhost::mcp::stdio::{SessionOptions, StdioSession};
use toolhost::serve::{Drain, Stop, drain_for, http_app, serve_http, serve_http_tls};

/// Serve the tools to MCP clients (the main job).
///
/// Without a flag: streamable HTTP on 127.0.0.1:8722, endpoint /mcp for
/// the operator (every tool within budget) and /mcp/<agent> for each agent
/// in the config (its allow-list, at its tier). --stdio serves one client
/// over stdin/stdout instead; logs always go to stderr.
#[derive(Debug, clap::Args)]
pub struct Serve {
    /// Serve one client over stdin/stdout.
    #[arg(long, conflicts_with = "http")]
    stdio: bool,
    /// Address for streamable HTTP [default: 127.0.0.1:8722]. Beyond
    /// loopback, `server.tokens` must be configured.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// With --stdio: the agent the session acts as.
    #[arg(long, value_name = "NAME", requires = "stdio")]
    agent: Option<String>,
    #[command(flatten)]
    host: HostArgs,
}

/// 32 random bytes as hex.
fn random_token() -> Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness for the admin token: {e}"))?;
    Ok(hex::encode(b))
}

/// Serves the admin API alone on an ephemeral loopback port (for `serve --stdio`).
async fn start_admin(
    host: Arc<Host>,
    cfg: &toolhost::config::ServerConfig,
    admin: Admin,
    state: &Path,
) -> Result<std::path::PathBuf> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.context("binding the admin port")?;
    let local = listener.local_addr()?;
    let record = EndpointRecord::write(state, local, &admin.token, "stdio")
        .with_context(|| format!("writing the admin endpoint record in {}", state.display()))?;
    // Its MCP endpoints admit exactly whom the HTTP front would.
    let app = http_app(host, cfg, local, Some(admin), None, None)?;
    tokio::spawn(serve_http(listener, app, std::future::pending()));
    Ok(record)
}

impl Serve {
    pub fn run(self) -> Result<ExitCode> {
        // Over stdio the client is waiting for `initialize`: answer it at
        // once (its first lists wait for the upstreams, below). Over HTTP,
        // wait for them before listening, up to server.first_list_wait_ms.
        // Either way a slower server joins with `tools/list_changed`.
        let wait = if self.stdio { crate::args::ServerWait::No } else { crate::args::ServerWait::FirstList };
        let mut started = self.host.start_and_wait(wait)?;
        let deferred = std::mem::take(&mut started.assembly.deferred);
        let (a, servers, rt) = (&started.assembly, started.servers.clone(), &started.rt);
        // Spans from here on, when telemetry.otlp_endpoint is set.
        let telemetry = Arc::new(
            toolhost::telemetry::Telemetry::start(&a.config.telemetry, rt.handle().clone())
                .context("starting telemetry")?,
        );
        let host = a.host.clone();
        // `toolhost reload` and SIGHUP read the file again, with the same flags over it.
        // The file read at start is the one read again: were it moved
        // away, the reload fails rather than falling back to the defaults.
        let file = self.host.runtime.config.path();
        let mut args = self.host.clone();
        args.runtime.config.config = file;
        let reloader = Arc::new(toolhost::reload::Reloader::new(
            a.installer.clone(),
            Some(servers.clone()),
            started.built.clone(),
            move || args.builder().map_err(|e| format!("{e:#}")),
        ));
        rt.spawn(reload_on_hangup(reloader.clone()));
        // Signed revocation lists in the catalogues: read now, every
        // marketplace.revocations_secs and at every reload.
        let revocations = toolhost::revocations::RevocationWatch::new(a.installer.clone());
        reloader.watch_revocations(revocations.clone());
        // What the local copies revoke, in force before the host takes a
        // call (the registry is read next, on the watch's thread).
        for w in revocations.check(&started.built, false).1 {
            tracing::warn!(target: "toolhost::revocations", "{w}");
        }
        revocations.spawn(reloader.clone()).context("starting the revocation-list reader")?;
        // A fleet (cluster.url): this host's changes go to the control
        // plane, and the others' come from it.
        let addr = self.http.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8722)));
        let host_id = a.config.cluster.host_id.clone().unwrap_or_else(|| default_host_id(addr.port()));
        if a.config.cluster.url.is_some() || a.config.cluster.host_id.is_some() {
            host.pipeline().audit().set_host_id(&host_id);
        }
        let cluster = match &a.config.cluster.url {
            Some(_) if self.stdio => {
                anyhow::bail!("cluster.url: a fleet serves over HTTP (serve --http ADDR), not stdio")
            }
            Some(url) => {
                let key_file =
                    a.config.cluster.secret_key_file.as_ref().map(|p| a.config.resolve(p)).unwrap_or_default();
                let key = toolhost::cluster::Key::read(&key_file)
                    .map_err(|e| anyhow::anyhow!("cluster.secret_key_file: {e}"))?;
                let cluster = toolhost::cluster::Cluster::connect(url, &host_id, key)
                    .with_context(|| format!("joining the fleet as {host_id:?}"))?;
                a.installer.runtime_changes().join(cluster.clone());
                Some(cluster)
            }
            None => None,
        };
        let admin = Admin {
            token: random_token()?,
            installer: a.installer.clone(),
            servers: Some(servers.clone()),
            uploads: Some(a.state_dir.join("ui-uploads")),
            reloader: Some(reloader),
            pairings: Default::default(),
        };
        let state = a.state_dir.clone();
        let server_cfg = a.config.server.clone();
        let voice_cfg = a.config.voice.clone();
        let _watch = match &a.plugins_dir {
            Some(dir) => Some(
                toolhost::watch::watch_dir(a.installer.clone(), dir, false)
                    .with_context(|| format!("watching plugins.dir {}", dir.display()))?,
            ),
            None => None,
        };
        // Background calibration and saved measurements (off every call's path).
        let calibration = a.config.budget.background_calibration.then(|| toolhost::BackgroundCalibration {
            store: a.calibration.clone(),
            environment: a.environment.clone(),
        });
        let live = Arc::new(
            toolhost::LiveBudget::start(
                host.pipeline().clone(),
                a.measurements.clone(),
                a.pending_measurements.clone(),
                calibration,
            )
            .context("starting the background budget threads")?,
        );
        let on_exit = live.clone();
        let audited = host.clone();
        let save_at_exit = move || {
            // The refusals counted in the last second, as records.
            audited.pipeline().audit().flush_refusals(true);
            telemetry.shutdown();
            if let Err(e) = on_exit.shutdown() {
                eprintln!("warning: could not save the measurements: {e}");
            }
        };
        // `initialize` is answered at once; a session's first lists wait
        // for the plugins still loading and the upstreams still connecting
        // (connected or failed), up to `server.first_list_wait_ms`: a
        // client that lists once sees them.
        host.pipeline()
            .readiness()
            .set_first_list_wait(std::time::Duration::from_millis(server_cfg.first_list_wait_ms));
        deferred.spawn(a.installer.clone()).context("starting the plugin loader")?;
        if servers.status().iter().any(|s| s.state == "connecting") {
            let (waiting, hold) = (servers.clone(), host.pipeline().readiness().hold());
            rt.spawn(async move {
                waiting.first_attempts().await;
                drop(hold);
            });
        }
        // What `toolhost doctor` would say about the config, as warnings,
        // once every plugin has loaded and every upstream has connected or
        // failed (before, a tool still compiling would read as unknown).
        let (checked, config, status, http) = (host.clone(), a.config.clone(), servers.clone(), !self.stdio);
        rt.spawn(async move {
            let loaded = checked
                .pipeline()
                .readiness()
                .ready_by(std::time::Instant::now() + std::time::Duration::from_secs(3600));
            loaded.await;
            for f in toolhost::doctor::check_host(&config, &checked, &status.status(), http) {
                tracing::warn!("{f} (see `toolhost doctor`)");
            }
        });
        if self.stdio {
            // The session on a thread of its own, which also runs the calls
            // measured fast (`mcp::lane`); the rest on the main runtime.
            let front = McpFront::new(host.pipeline().clone(), self.agent)?;
            // Heard from before the client can see `initialize` answered:
            // a SIGTERM right after it stops the host cleanly, not by default.
            let stop = {
                let _in_runtime = rt.enter();
                shutdown_signal()
            };
            let session = StdioSession::start(
                front,
                rt.handle().clone(),
                toolhost::mcp::stdio::stdio,
                SessionOptions {
                    input_poll: std::time::Duration::from_micros(server_cfg.stdio_input_poll_us),
                    ..SessionOptions::default()
                },
            )?;
            let grace = std::time::Duration::from_secs(server_cfg.shutdown_grace_secs);
            let unanswered = session.unanswered();
            let ended = rt.block_on(async move {
                // The operator's admin API, on loopback, beside the stdio session.
                let record = start_admin(host.clone(), &server_cfg, admin, &state).await?;
                let mut session_end = std::pin::pin!(session.ended());
                let ended = tokio::select! {
                    r = &mut session_end => r.map_err(anyhow::Error::from),
                    () = stop => {
                        // Calls under way are answered while the client
                        // stays, up to the grace period; an idle client
                        // holds nothing. A second signal is heard from
                        // before the line that says so.
                        let second = shutdown_signal();
                        tracing::warn!(
                            "stopping: the session's {} requests under way are answered for up to {} s (server.shutdown_grace_secs); a second signal stops at once",
                            unanswered.count(),
                            grace.as_secs()
                        );
                        let answered = async {
                            while unanswered.count() > 0 {
                                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                            }
                        };
                        let done = async {
                            tokio::select! {
                                _ = &mut session_end => {}
                                () = answered => {}
                            }
                        };
                        if drain_for(grace, None, None, done, second).await == Stop::Now {
                            EndpointRecord::remove(&record);
                            std::process::exit(130);
                        }
                        // What was answered goes out before the process ends.
                        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), unanswered.flush()).await;
                        Ok(())
                    }
                };
                EndpointRecord::remove(&record);
                save_at_exit();
                ended.map(|()| ExitCode::SUCCESS)
            });
            return ended;
        }
        // Over HTTP nobody is waiting for `initialize` yet: the plugins
        // loading get up to server.first_list_wait_ms before the port
        // opens (as the upstreams did, in `start_and_wait`); one slower
        // joins with `list_changed`.
        // In a fleet, the changes the others made are applied first:
        // /readyz stays unready until they are.
        if let Some(cluster) = &cluster {
            let applier =
                toolhost::fleet::HostApplier { installer: a.installer.clone(), servers: Some(servers.clone()) };
            cluster.follow(Arc::new(applier), Some(host.pipeline().readiness().hold()));
        }
        let wait = std::time::Duration::from_millis(server_cfg.first_list_wait_ms);
        rt.block_on(host.pipeline().readiness().ready_by(std::time::Instant::now() + wait));
        toolhost::mcp::http::check_exposure(addr, &server_cfg)?;
        let relay = toolhost::bridge::relay::Relay::new(host.pipeline().clone(), &voice_cfg)?.map(Arc::new);
        let tls_key = if server_cfg.tls.is_some() { "server.tls" } else { "voice.tls" };
        let tls = match server_cfg.tls.as_ref().or(voice_cfg.tls.as_ref()) {
            Some(files) => Some(
                toolhost::mcp::peer::tls_config(&files.cert, &files.key)
                    .map_err(|e| anyhow::anyhow!("{tls_key}: {e}"))?,
            ),
            None => None,
        };
        if tls.is_none() && server_cfg.oauth.is_some() && !addr.ip().is_loopback() {
            tracing::warn!(
                "serving {addr} over plain HTTP with server.oauth: access tokens travel in the clear; set server.tls or put a TLS proxy in front"
            );
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        rt.block_on(async move {
            // Heard from before the port opens and the banner is printed.
            let stop = shutdown_signal();
            let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
            let local = listener.local_addr()?;
            let admin_token = admin.token.clone();
            let drain = Arc::new(Drain::default());
            if cluster.is_some() {
                // A fleet's balancer sees this host leave within a second
                // or so (deploy/haproxy.cfg): its sessions are served here
                // until their requests go to another host, which restores them.
                drain.hand_over_after(toolhost::cluster::HANDOVER);
            }
            let voice_banner = relay.as_ref().map(|_| ());
            let voice = relay.clone();
            let app = http_app(host.clone(), &server_cfg, local, Some(admin), Some(drain.clone()), relay)?;
            let record = EndpointRecord::write(&state, local, &admin_token, "http")
                .with_context(|| format!("writing the admin endpoint record in {}", state.display()))?;
            let record_at_signal = record.clone();
            // The banner. Whoever started us may close stdout after reading the
            // first line: a failed write must not stop the server.
            use std::io::Write as _;
            let mut banner =
                format!("toolhost {} serving MCP (streamable HTTP) on http://{local}\n", env!("CARGO_PKG_VERSION"));
            for (who, path) in endpoints(host.pipeline()) {
                banner.push_str(&format!("  {who}: http://{local}{path}\n"));
            }
            banner.push_str(&format!("  the DM's page: http://{local}/ui\n"));
            if voice_banner.is_some() {
                let ws = if scheme == "https" { "ws:// and wss://" } else { "ws://" };
                banner.push_str(&format!(
                    "  voice relay: {ws}{local}/voice (OpenAI Realtime: /voice/realtime; Gemini Live: /voice/ws/...)\n"
                ));
            }
            if scheme == "https" {
                banner.push_str(&format!("  TLS ({tls_key}): every endpoint also answers https:// on this port\n"));
            }
            banner.push_str(&format!(
                "  metrics: http://{local}/metrics ({})\n",
                if server_cfg.metrics_beyond_loopback { "with an operator token" } else { "loopback clients only" }
            ));
            if let Some(o) = &server_cfg.oauth {
                banner.push_str(&format!(
                    "  OAuth: access tokens from {} for {} (metadata: http://{local}/.well-known/oauth-protected-resource)\n",
                    o.issuer, o.audience
                ));
            }
            let auth = if server_cfg.loopback_is_operator() { "" } else { " --header 'Authorization: Bearer <token>'" };
            banner.push_str(&format!(
                "Point an MCP client at an endpoint, e.g.: npx @modelcontextprotocol/inspector --cli http://{local}/mcp --transport http{auth} --method tools/list\n"
            ));
            banner.push_str(&format!(
                "Operator commands (toolhost server add/remove, toolhost status) reach this host through {}.\nCtrl-C stops the server.\n",
                record.display()
            ));
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(banner.as_bytes()).and_then(|()| out.flush());
            drop(out);
            let limits = toolhost::mcp::conns::ConnLimits {
                max_connections: server_cfg.max_connections,
                max_per_address: server_cfg.max_connections_per_address,
                header_timeout: std::time::Duration::from_secs(server_cfg.header_timeout_secs.max(1)),
            };
            let mut server = tokio::spawn(serve_http_tls(listener, app, std::future::pending(), tls, limits));
            tokio::select! {
                r = &mut server => {
                    r.context("the HTTP server's task")?.context("HTTP server")?;
                }
                () = stop => {}
            }
            // New sessions get 503; the open ones are served until they
            // end or the grace period is over, then closed with the process.
            // A second signal is heard from before the line that says so.
            let second = shutdown_signal();
            drain.start();
            EndpointRecord::remove(&record_at_signal);
            let grace = std::time::Duration::from_secs(server_cfg.shutdown_grace_secs);
            tracing::warn!(
                "stopping: new sessions refused; {} requests in flight and {} voice sessions finished for up to {} s (server.shutdown_grace_secs), then the {} open sessions end; a second signal stops at once",
                drain.in_flight(),
                voice.as_ref().map_or(0, |v| v.open_sessions()),
                grace.as_secs(),
                drain.open_sessions()
            );
            // Saved at once, in case the wait is cut short.
            let saving = live.clone();
            let _ = tokio::task::spawn_blocking(move || saving.save_now()).await;
            let stop = drain_for(grace, Some(&drain), voice.as_deref(), std::future::pending(), second).await;
            if stop == Stop::Now {
                std::process::exit(130);
            }
            // Nothing starts from now on; a request that began between the
            // drain's last look and this is answered first (a moment).
            drain.close();
            if stop == Stop::Drained {
                let settled = async {
                    while drain.in_flight() > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                };
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), settled).await;
            }
            EndpointRecord::remove(&record);
            servers.shutdown();
            save_at_exit();
            // Ends every open stream: the sessions are closed.
            let _ = std::io::stdout().flush();
            std::process::exit(0)
        })
    }
}

/// SIGHUP: re-read the config, as `toolhost reload` does; the outcome goes
/// to the log.
async fn reload_on_hangup(reloader: Arc<toolhost::reload::Reloader>) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        tracing::warn!("SIGHUP cannot be caught here: use `toolhost reload` to reload the config");
        return;
    };
    while hup.recv().await.is_some() {
        let r = reloader.clone();
        let signal = toolhost::audit::Actor::new("SIGHUP", "signal");
        match tokio::task::spawn_blocking(move || toolhost::audit::acting(signal, || r.reload())).await {
            Ok(Ok(report)) => tracing::info!(target: "toolhost::reload", "SIGHUP: {report}"),
            Ok(Err(e)) => tracing::error!(target: "toolhost::reload", "SIGHUP: {e}"),
            Err(e) => tracing::error!(target: "toolhost::reload", "SIGHUP: the reload failed: {e}"),
        }
    }
}

/// Ctrl-C (SIGINT) or SIGTERM: the clean ways to stop a server.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    // Listening from now, not from the first poll: a signal sent after this
    // returns is heard even while the future waits to be polled.
    let (interrupt, terminate) = (signal(SignalKind::interrupt()).ok(), signal(SignalKind::terminate()).ok());
    async fn heard(signal: Option<Signal>) {
        match signal {
            Some(mut s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    async move {
        tokio::select! {
            () = heard(interrupt) => {}
            () = heard(terminate) => {}
        }
    }
}

/// A fleet host's id when `cluster.host_id` is not set: the machine's host
/// name and the serving port.
fn default_host_id(port: u16) -> String {
    format!("{}:{port}", toolhost::cluster::host_name())
}
