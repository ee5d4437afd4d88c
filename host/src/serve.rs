//! Serving: what the `toolhost serve` command runs, as library functions
//! the binary, the end-to-end tests and the benchmarks share: over HTTP
//! [`http_app`] and [`serve_http`], over stdio [`StdioSession`].

use crate::Host;
use crate::admin::Admin;
use crate::config::ServerConfig;
pub use crate::mcp::http::Drain;
use crate::mcp::http::{Beside, HttpError, Metrics, Page};
pub use crate::mcp::stdio::{SessionError, SessionOptions, StdioSession};
use std::net::SocketAddr;
use std::sync::Arc;

/// The HTTP front's router for `local` (the address actually bound): the
/// MCP endpoints, `/metrics`, with `admin` the admin API at `/admin` and
/// the DM's page at `/ui`, following `admin`'s reloader, and with `voice`
/// the voice relay at `/voice/...`.
pub fn http_app(
    host: Arc<Host>,
    cfg: &ServerConfig,
    local: SocketAddr,
    admin: Option<Admin>,
    drain: Option<Arc<Drain>>,
    voice: Option<Arc<crate::bridge::relay::Relay>>,
) -> Result<axum::Router, HttpError> {
    let servers = admin.as_ref().and_then(|a| a.servers.clone());
    let (scraped, relay) = (host.clone(), voice.clone());
    let metrics = Metrics {
        render: Box::new(move || crate::metrics::render(scraped.clone(), servers.clone(), relay.clone())),
        content_type: crate::metrics::CONTENT_TYPE,
        admin_token: admin.as_ref().map(|a| a.token.clone()),
    };
    let voice = voice.map(|relay| {
        Arc::new(move |r: crate::mcp::http::VoiceRequest| {
            let relay = relay.clone();
            Box::pin(relay.serve(r.agent, r.path, r.request)) as futures::future::BoxFuture<'static, _>
        }) as crate::mcp::http::VoiceHandler
    });
    // In a fleet, its hosts share their tasks through the control plane.
    let tasks = admin
        .as_ref()
        .and_then(|a| a.installer.runtime_changes().cluster())
        .map(|c| Arc::new(crate::cluster::FleetTasks::new(c.clone())) as Arc<dyn crate::mcp::server::TaskShare>);
    // ... and their sessions: a session goes on on any host.
    let sessions = admin
        .as_ref()
        .and_then(|a| a.installer.runtime_changes().cluster())
        .map(|c| Arc::new(crate::cluster::FleetSessions::new(c.clone())) as Arc<dyn crate::mcp::http::SessionShare>);
    let beside = match admin {
        Some(admin) => Beside {
            reloads: admin.reloader.clone().map(|r| r as Arc<dyn crate::mcp::http::Reloads>),
            pairings: Some(admin.pairings.clone()),
            page: Some(Page { router: crate::ui::router(host.clone(), admin.clone()), is_api: crate::ui::is_api }),
            admin: Some(crate::admin::router(host.clone(), admin)),
            metrics: Some(metrics),
            drain,
            voice,
            tasks,
            sessions,
        },
        None => Beside { metrics: Some(metrics), drain, voice, ..Beside::default() },
    };
    crate::mcp::http::router(host.pipeline().clone(), cfg, local, beside)
}

/// What `serve` does on SIGINT or SIGTERM, for `grace`: stops taking new
/// sessions (`drain`, when serving HTTP; with `voice`, the voice relay's
/// sessions end once their calls in flight are answered, closed with 1001)
/// and waits, while the open ones are served, until nothing is left to
/// answer (`done`: a stdio session ended; over HTTP, no MCP request in
/// flight and no voice session open: idle MCP sessions do not hold the
/// host; in a fleet, also no request begun for the hand-over time,
/// [`Drain::hand_over_after`]) or `grace` has passed. A second signal cuts the wait short:
/// [`Stop::Now`].
pub async fn drain_for(
    grace: std::time::Duration,
    drain: Option<&Drain>,
    voice: Option<&crate::bridge::relay::Relay>,
    done: impl std::future::Future<Output = ()>,
    second_signal: impl std::future::Future<Output = ()>,
) -> Stop {
    if let Some(d) = drain {
        d.start();
    }
    if let Some(v) = voice {
        v.drain();
    }
    let emptied = async {
        match drain {
            Some(d) => {
                while !d.handed_over() || voice.is_some_and(|v| v.open_sessions() > 0) {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
            None => done.await,
        }
    };
    tokio::select! {
        () = emptied => Stop::Drained,
        () = tokio::time::sleep(grace) => Stop::GraceOver,
        () = second_signal => Stop::Now,
    }
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every session ended within the grace period.
    Drained,
    /// The grace period passed with sessions open: they are closed.
    GraceOver,
    /// A second signal: stop at once.
    Now,
}

/// Serves `app` (see [`http_app`]) on `listener` until `shutdown` completes,
/// then drains the open connections, with the default connection limits.
/// Each request carries its connection's [`Peer`](crate::mcp::peer::Peer)
/// (the address, and on loopback the local user behind it), which the
/// fronts' checks read.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_http_tls(listener, app, shutdown, None, crate::mcp::conns::ConnLimits::default()).await
}

/// [`serve_http`] under `limits` (`server.max_connections` and friends:
/// see [`crate::mcp::conns`]), and with `tls` TLS too on the same port: a
/// connection opening with a TLS handshake is served over TLS (see
/// [`crate::mcp::peer::TlsPeerListener`]).
pub async fn serve_http_tls(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: crate::mcp::conns::ConnLimits,
) -> std::io::Result<()> {
    use crate::mcp::peer::{PeerListener, TlsPeerListener};
    let listener = PeerListener::with_limits(listener, limits);
    match tls {
        None => crate::mcp::conns::serve(listener, app, limits.header_timeout, shutdown).await,
        Some(config) => {
            crate::mcp::conns::serve(TlsPeerListener::new(listener, config)?, app, limits.header_timeout, shutdown)
                .await
        }
    }
}
