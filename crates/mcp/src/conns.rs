//! The HTTP front's connections: how many, from where, for how long.
//!
//! Before, axum's `serve` accepted every connection and kept it until the
//! client closed it: 20,000 connections that never spoke took every
//! descriptor, and the probes, new sessions and calls on existing ones
//! waited two minutes. Now, as each connection is accepted
//! ([`Conns::admit`], in [`crate::peer::PeerListener`]):
//! - a source address holds at most `server.max_connections_per_address`
//!   (an IPv6 /64 as one), and the front at most `server.max_connections`;
//! - past the total, [`RESERVE`] more are admitted for the probes and the
//!   operator: such a connection is served `/healthz`, `/readyz`,
//!   `/metrics`, `/ui` and `/admin` (each checks who is asking, as ever)
//!   and 503 for anything else;
//! - any other connection is closed at once (its descriptor is never held).
//!
//! And as each is served ([`serve`], hyper with a timer): a request's head
//! must arrive within `server.header_timeout_secs`, counted from when the
//! connection is waiting for one, so a slowloris client and a kept-alive
//! connection left idle are both closed then. Bodies have their own
//! deadline and budget (`http.rs`).

use crate::peer::Peer;
use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Connections admitted past `server.max_connections`, for the probes and
/// the operator only.
pub const RESERVE: usize = 32;

/// The front's connection settings (`server.` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// `server.max_connections`.
    pub max_connections: usize,
    /// `server.max_connections_per_address`.
    pub max_per_address: usize,
    /// `server.header_timeout_secs`.
    pub header_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits { max_connections: 1024, max_per_address: 256, header_timeout: Duration::from_secs(10) }
    }
}

/// The connections open now.
#[derive(Debug)]
pub struct Conns {
    limits: ConnLimits,
    total: AtomicUsize,
    reserve: AtomicUsize,
    by_source: Mutex<HashMap<IpAddr, usize>>,
}

/// Where connections are counted: an IPv4 address, an IPv6 /64.
pub fn source_network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

/// An admitted connection's place, given back when it is dropped.
#[derive(Debug)]
pub struct Admitted {
    conns: Arc<Conns>,
    source: IpAddr,
    reserve: bool,
}

impl Admitted {
    /// Whether it is one of the [`RESERVE`] (probes and the operator only).
    pub fn is_reserve(&self) -> bool {
        self.reserve
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let counter = if self.reserve { &self.conns.reserve } else { &self.conns.total };
        counter.fetch_sub(1, Ordering::AcqRel);
        let mut by = self.conns.by_source.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = by.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.source);
            }
        }
    }
}

impl Conns {
    /// Counts under `limits`.
    pub fn new(limits: ConnLimits) -> Arc<Conns> {
        Arc::new(Conns {
            limits,
            total: AtomicUsize::new(0),
            reserve: AtomicUsize::new(0),
            by_source: Mutex::default(),
        })
    }

    /// The settings.
    pub fn limits(&self) -> ConnLimits {
        self.limits
    }

    /// Connections open now, reserve included.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::Acquire) + self.reserve.load(Ordering::Acquire)
    }

    /// A place for a connection from `peer`, or `None` (close it at once).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Admitted> {
        let source = source_network(peer);
        let mut by = self.by_source.lock().unwrap_or_else(|p| p.into_inner());
        let from_source = by.get(&source).copied().unwrap_or(0);
        if from_source >= self.limits.max_per_address.max(1) {
            return None;
        }
        let take = |counter: &AtomicUsize, max: usize| {
            counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).is_ok()
        };
        let reserve = if take(&self.total, self.limits.max_connections.max(1)) {
            false
        } else if take(&self.reserve, RESERVE) {
            true
        } else {
            return None;
        };
        *by.entry(source).or_default() += 1;
        Some(Admitted { conns: self.clone(), source, reserve })
    }
}

/// A connection's stream, holding its place while it lives.
#[derive(Debug)]
pub struct Counted<S> {
    inner: S,
    _place: Admitted,
}

impl<S> Counted<S> {
    /// `inner`, holding `place`.
    pub fn new(inner: S, place: Admitted) -> Counted<S> {
        Counted { inner, _place: place }
    }

    /// The stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Whether a reserve connection (one past `server.max_connections`) is
/// served `path`: the probes and the operator's own paths, each of which
/// checks who is asking.
pub fn reserve_serves(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics" | "/" | "/ui")
        || path.starts_with("/ui/")
        || path.starts_with("/admin/")
}

/// Serves `app` on `listener`'s connections until `shutdown` completes;
/// then asks each connection to finish (its requests in flight are
/// answered) and waits for them all. Each request carries its connection's
/// [`Peer`] (`ConnectInfo<Peer>`).
pub async fn serve<L>(
    mut listener: L,
    app: axum::Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener<Addr = Peer>,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt as _;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let mut stopped = stopped.clone();
        tasks.spawn(async move {
            let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let mut request = request.map(axum::body::Body::new);
                request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                app.clone().oneshot(request)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
            let conn = builder.serve_connection(TokioIo::new(io), service).with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection from {}: {e}", peer.addr);
                    }
                    return;
                }
                _ = stopped.wait_for(|s| *s) => {}
            }
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                tracing::debug!("connection from {} while stopping: {e}", peer.addr);
            }
        });
        // Finished connections are reaped as new ones come.
        while tasks.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = stop.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_holds_its_share_and_the_reserve_is_kept_past_the_total() {
        let conns = Conns::new(ConnLimits { max_connections: 4, max_per_address: 3, ..ConnLimits::default() });
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let from_a: Vec<_> = (0..5).filter_map(|_| conns.admit(a)).collect();
        assert_eq!(from_a.len(), 3, "a source's share");
        let b1 = conns.admit(b).unwrap();
        assert!(!b1.is_reserve());
        let b2 = conns.admit(b).unwrap();
        assert!(b2.is_reserve(), "past the total: the reserve");
        assert_eq!(conns.open(), 5);
        drop(from_a);
        assert_eq!(conns.open(), 2);
        let v6a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(source_network(v6a), source_network(v6b), "one /64");
        assert!(reserve_serves("/readyz") && reserve_serves("/ui/api/state") && !reserve_serves("/mcp"));
        drop((b1, b2));
        assert_eq!(conns.open(), 0);
    }
}
