//! Serving: what the `toolhost serve` command runs, as library functions
//! the binary, the end-to-end tests and the benchmarks share: over HTTP
//! [`http_app`] and [`serve_http`], over stdio [`StdioSession`].

use crate::Host;
use crate::admin::Admin;
use crate::config::ServerConfig;
use crate::mcp::http::{Beside, HttpError, Metrics, Page};
pub use crate::mcp::stdio::{SessionError, SessionOptions, StdioSession};
use std::net::SocketAddr;
use std::sync::Arc;

/// The HTTP front's router for `local` (the address actually bound): the
/// MCP endpoints, `/metrics`, and with `admin` the admin API at `/admin`
/// and the DM's page at `/ui`, following `admin`'s reloader.
pub fn http_app(
    host: Arc<Host>,
    cfg: &ServerConfig,
    local: SocketAddr,
    admin: Option<Admin>,
) -> Result<axum::Router, HttpError> {
    let servers = admin.as_ref().and_then(|a| a.servers.clone());
    let scraped = host.clone();
    let metrics = Metrics {
        render: Box::new(move || crate::metrics::render(scraped.clone(), servers.clone())),
        content_type: crate::metrics::CONTENT_TYPE,
        admin_token: admin.as_ref().map(|a| a.token.clone()),
    };
    let beside = match admin {
        Some(admin) => Beside {
            reloads: admin.reloader.clone().map(|r| r as Arc<dyn crate::mcp::http::Reloads>),
            page: Some(Page { router: crate::ui::router(host.clone(), admin.clone()), is_api: crate::ui::is_api }),
            admin: Some(crate::admin::router(host.clone(), admin)),
            metrics: Some(metrics),
        },
        None => Beside { metrics: Some(metrics), ..Beside::default() },
    };
    crate::mcp::http::router(host, cfg, local, beside)
}

/// Serves `app` (see [`http_app`]) on `listener` until `shutdown` completes,
/// then drains the open connections. Each request carries its connection's
/// [`Peer`](crate::mcp::peer::Peer) (the address, and on loopback the local
/// user behind it), which the fronts' checks read.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use crate::mcp::peer::{Peer, PeerListener};
    axum::serve(PeerListener::new(listener), app.into_make_service_with_connect_info::<Peer>())
        .with_graceful_shutdown(shutdown)
        .await
}
