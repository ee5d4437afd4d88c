//! The connector: resolve once, check each address, connect to the one
//! checked, TLS, one HTTP/1.1 exchange, all within the call's deadline.

use crate::body::{Bounds, Capped};
use crate::pool::Key;
use crate::{Shared, Target, WasiHttpError, boxed, refused};
use hyper::client::conn::http1::SendRequest;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use toolhost_runtime::capabilities::http::{HttpGrant, HttpScheme};
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{RequestOptions, WasiBody};

/// How long a kept connection whose response was just read may take to
/// become ready before a new one is opened instead.
const SETTLE: Duration = Duration::from_millis(100);

type Io = Box<dyn Future<Output = Result<(), WasiHttpError>> + Send>;
type Driver = std::pin::Pin<Box<dyn Future<Output = Result<(), hyper::Error>> + Send>>;

/// Sends `request` to `target` for `plugin`, every step bounded by
/// `deadline` (and by the guest's own, shorter, timeouts), on a connection
/// the plugin keeps to that origin ([`crate::pool`]) or a new one; the body
/// bytes that pass are counted in `bounds`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn send(
    shared: &Shared,
    plugin: Arc<str>,
    grants: &[HttpGrant],
    target: Target,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    deadline: Instant,
    bounds: Bounds,
) -> Result<(http::Response<WasiBody>, Io), WasiHttpError> {
    let left = || deadline.saturating_duration_since(Instant::now());
    let within = |guest: Option<Duration>| guest.map_or_else(left, |g| g.min(left()));
    let first_byte = options.as_ref().and_then(|o| o.first_byte_timeout);

    let mut request = request;
    // The request line carries the path only (no proxy here); the Host
    // header (set by wasi:http) names the origin.
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    *request.uri_mut() =
        http::Uri::builder().path_and_query(path).build().map_err(|_| WasiHttpError::HttpRequestUriInvalid)?;
    let request = request.map(|b| boxed(Capped::request(b, bounds.request_bytes, deadline, bounds.bytes_out.clone())));

    let key = Key { plugin, scheme: target.scheme.as_str(), host: target.host.clone(), port: target.port };
    let (mut sender, opened, driver) = match shared.pool.take(&key) {
        Some(kept) if !kept.settling => (kept.sender, kept.opened, kept.driver),
        Some(mut kept) => {
            // Its last response was just read; hyper makes it ready within
            // a turn or two of its driver. Worth a moment, not a handshake.
            let wait = SETTLE.min(left());
            match tokio::time::timeout(wait, kept.sender.ready()).await {
                Ok(Ok(())) => (kept.sender, kept.opened, kept.driver),
                _ => {
                    kept.driver.abort();
                    open(shared, grants, &target, options.as_ref(), within).await?
                }
            }
        }
        None => open(shared, grants, &target, options.as_ref(), within).await?,
    };
    let response = tokio::time::timeout(within(first_byte), sender.send_request(request))
        .await
        .map_err(|_| WasiHttpError::ConnectionReadTimeout)??;
    // Busy until the response is read to its end; then ready for the
    // plugin's next request to this origin.
    let read = Arc::new(AtomicBool::new(false));
    shared.pool.put(key, sender, opened, driver.clone(), read.clone());
    let response = response
        .map(|b| boxed(Capped::response(b, bounds.response_bytes, deadline, bounds.bytes_in.clone(), driver, read)));
    // The connection is driven by a task of its own (it outlives the call
    // when kept), so wasi:http has nothing more to drive.
    Ok((response, Box::new(async { Ok(()) })))
}

type Opened = (SendRequest<WasiBody>, Instant, tokio::task::AbortHandle);

/// A new connection to `target`: resolved once, checked, connected to the
/// address checked, TLS, the HTTP/1.1 handshake; its driver spawned.
async fn open(
    shared: &Shared,
    grants: &[HttpGrant],
    target: &Target,
    options: Option<&RequestOptions>,
    within: impl Fn(Option<Duration>) -> Duration,
) -> Result<Opened, WasiHttpError> {
    let connect_timeout = options.and_then(|o| o.connect_timeout);
    let addr = tokio::time::timeout(within(connect_timeout), address(shared, grants, target))
        .await
        .map_err(|_| WasiHttpError::DnsTimeout)??;
    let tcp = tokio::time::timeout(within(connect_timeout), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| WasiHttpError::ConnectionTimeout)?
        .map_err(connect_error)?;
    let _ = tcp.set_nodelay(true);

    let handshake = async {
        match target.scheme {
            HttpScheme::Https => {
                let name = rustls_pki_types::ServerName::try_from(target.host.clone())
                    .map_err(|_| refused(format!("{:?} is not a name TLS can verify", target.host)))?;
                let config = shared.tls().map_err(refused)?;
                let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.map_err(tls_error)?;
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
                Ok::<_, WasiHttpError>((sender, Box::pin(async move { conn.await.map(drop) }) as Driver))
            }
            HttpScheme::Http => {
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
                Ok((sender, Box::pin(async move { conn.await.map(drop) }) as Driver))
            }
        }
    };
    let (sender, conn) = tokio::time::timeout(within(connect_timeout), handshake)
        .await
        .map_err(|_| WasiHttpError::ConnectionTimeout)??;
    // Driven until the connection ends (its last sender dropped, the
    // server closing it, or its response abandoned: `Capped` aborts it),
    // and never past its lifetime.
    let task = wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| {
        tokio::spawn(async move {
            let _ = tokio::time::timeout(crate::pool::LIFETIME, conn).await;
        })
    });
    Ok((sender, Instant::now(), task.abort_handle()))
}

/// The address to connect to: the operator's pin, or the first address
/// the name resolves to that the policy allows. Resolved once: the
/// connection goes to the address checked here.
async fn address(shared: &Shared, grants: &[HttpGrant], target: &Target) -> Result<SocketAddr, WasiHttpError> {
    if let Some(pinned) = shared.pins.get(&(target.host.clone(), target.port)) {
        return Ok(*pinned);
    }
    let literal = target.host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
    let addrs: Vec<SocketAddr> = match literal {
        Some(ip) => vec![SocketAddr::new(ip, target.port)],
        None => tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .map_err(|_| WasiHttpError::DnsError { rcode: None, info_code: None })?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(WasiHttpError::DestinationNotFound);
    }
    let mut refusal = None;
    for addr in addrs {
        let ip = canonical(addr.ip());
        match restricted(ip) {
            None => return Ok(SocketAddr::new(ip, addr.port())),
            Some(_) if grants.iter().any(|g| g.names_address(ip)) => return Ok(SocketAddr::new(ip, addr.port())),
            Some(kind) => refusal = refusal.or(Some((ip, kind))),
        }
    }
    let (ip, kind) = refusal.expect("every address was refused");
    tracing::debug!(host = %target.host, %ip, kind, "http request refused by the address policy");
    Err(refused(format!(
        "{} resolves to {ip}, a {kind} address, which a grant by name does not reach (grant {}://{}:{} to allow that address)",
        target.host,
        target.scheme.as_str(),
        match ip {
            IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        },
        target.port
    )))
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// What kind of address the policy keeps from a grant by name, if any:
/// loopback, private (RFC 1918, ULA), link-local (cloud metadata
/// included), CGNAT, multicast, unspecified, broadcast.
pub(crate) fn restricted(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_private() {
                Some("private")
            } else if v4.is_link_local() {
                Some("link-local")
            } else if a == 100 && (64..128).contains(&b) {
                Some("shared (CGNAT)")
            } else if v4.is_multicast() {
                Some("multicast")
            } else if v4.is_unspecified() || v4 == Ipv4Addr::BROADCAST || a == 0 {
                Some("unspecified")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() || v6 == Ipv6Addr::UNSPECIFIED {
                Some("unspecified")
            } else if first & 0xfe00 == 0xfc00 {
                Some("private (ULA)")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if v6.is_multicast() {
                Some("multicast")
            } else {
                None
            }
        }
    }
}

fn connect_error(e: std::io::Error) -> WasiHttpError {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => WasiHttpError::ConnectionRefused,
        _ => WasiHttpError::Connect(e),
    }
}

fn tls_error(e: std::io::Error) -> WasiHttpError {
    let certificate = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented));
    if certificate { WasiHttpError::TlsCertificateError } else { WasiHttpError::Tls(e) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_policy_keeps_internal_addresses_from_names() {
        for (ip, kind) in [
            ("127.0.0.1", Some("loopback")),
            ("10.1.2.3", Some("private")),
            ("192.168.0.1", Some("private")),
            ("172.16.5.5", Some("private")),
            ("169.254.169.254", Some("link-local")),
            ("100.64.0.1", Some("shared (CGNAT)")),
            ("224.0.0.1", Some("multicast")),
            ("0.0.0.0", Some("unspecified")),
            ("::1", Some("loopback")),
            ("fd00::1", Some("private (ULA)")),
            ("fe80::1", Some("link-local")),
            ("93.184.216.34", None),
            ("2606:2800:220:1::1", None),
        ] {
            assert_eq!(restricted(ip.parse().unwrap()), kind, "{ip}");
        }
        assert_eq!(restricted(canonical("::ffff:127.0.0.1".parse().unwrap())), Some("loopback"));
    }
}
