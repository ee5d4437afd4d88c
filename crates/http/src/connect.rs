//! The connector: resolve once, check each address, connect to the one
//! checked, TLS, one HTTP/1.1 exchange, all within the call's deadline.

use crate::body::{Bounds, Capped};
use crate::dns::Lookups;
use crate::pool::Key;
use crate::{Shared, Target, WasiHttpError, boxed, refused};
use hyper::client::conn::http1::SendRequest;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use toolhost_types::origin::{HttpGrant, HttpScheme};
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
    lookups: &Lookups,
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

    let key = Key {
        plugin: lookups.plugin.clone(),
        scheme: target.scheme.as_str(),
        host: target.host.clone(),
        port: target.port,
    };
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
                    open(shared, lookups, grants, &target, options.as_ref(), within).await?
                }
            }
        }
        None => open(shared, lookups, grants, &target, options.as_ref(), within).await?,
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
    lookups: &Lookups,
    grants: &[HttpGrant],
    target: &Target,
    options: Option<&RequestOptions>,
    within: impl Fn(Option<Duration>) -> Duration,
) -> Result<Opened, WasiHttpError> {
    let connect_timeout = options.and_then(|o| o.connect_timeout);
    let addr = tokio::time::timeout(within(connect_timeout), address(shared, lookups, grants, target))
        .await
        .map_err(|_| WasiHttpError::DnsTimeout)??;
    // toolhost's own listeners (the front, the admin API, the relay, the
    // page) are never a plugin's to reach, whatever its grants say.
    if toolhost_base::own::is_own_listener(addr) {
        tracing::warn!(plugin = %lookups.plugin, %addr, "http request refused: toolhost's own listener");
        return Err(refused(format!(
            "{addr} is one of toolhost's own listeners, which no plugin may reach, whatever its grants say"
        )));
    }
    // A descriptor of the process's, from the caller's share.
    let lease =
        toolhost_base::descriptors::budget().take(lookups.caller.as_ref()).map_err(|e| refused(e.to_string()))?;
    // Bound (to the wildcard address, an ephemeral port) and recorded as a
    // plugin's socket before it connects: the front that accepts it knows
    // it for one, never for the operator (`toolhost_base::own`).
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
        .map_err(connect_error)?;
    let any: SocketAddr =
        if addr.is_ipv4() { (Ipv4Addr::UNSPECIFIED, 0).into() } else { (Ipv6Addr::UNSPECIFIED, 0).into() };
    socket.bind(any).map_err(connect_error)?;
    let own = toolhost_base::own::plugin_socket(socket.local_addr().map_err(connect_error)?.port());
    let tcp = tokio::time::timeout(within(connect_timeout), socket.connect(addr))
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
            let _held = (own, lease);
            let _ = tokio::time::timeout(crate::pool::LIFETIME, conn).await;
        })
    });
    Ok((sender, Instant::now(), task.abort_handle()))
}

/// The address to connect to: the operator's pin (for a plugin whose grant
/// names the host), or the first address the name resolves to that the
/// policy allows. Resolved once: the connection goes to the address checked
/// here.
async fn address(
    shared: &Shared,
    lookups: &Lookups,
    grants: &[HttpGrant],
    target: &Target,
) -> Result<SocketAddr, WasiHttpError> {
    if let Some(pinned) = shared.pins.get(&(target.host.clone(), target.port)) {
        // A pin is the operator's word for the plugins that name the host,
        // not for every wildcard that happens to cover it.
        if grants.iter().any(|g| g.names_host(&target.host, target.port)) {
            return Ok(*pinned);
        }
        tracing::debug!(host = %target.host, "http request refused: a pin for a host this plugin's grants do not name");
        return Err(refused(format!(
            "{}:{} is pinned by plugins.http_resolve, which applies only to the plugins whose grants name that host; plugin {}'s grants reach it only through a wildcard (grant {}://{}:{} to use the pin)",
            target.host,
            target.port,
            lookups.plugin,
            target.scheme.as_str(),
            target.host,
            target.port
        )));
    }
    let literal = target.host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
    let addrs: Vec<SocketAddr> = match literal {
        Some(ip) => vec![SocketAddr::new(ip, target.port)],
        None => lookups
            .resolve(&shared.dns, &target.host)
            .await?
            .into_iter()
            .map(|ip| SocketAddr::new(ip, target.port))
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
            Some(_) if grants.iter().any(|g| g.names_socket(target.scheme, ip, addr.port())) => {
                return Ok(SocketAddr::new(ip, addr.port()));
            }
            Some(kind) => refusal = refusal.or(Some((ip, kind))),
        }
    }
    let (ip, kind) = refusal.expect("every address was refused");
    tracing::debug!(host = %target.host, %ip, kind, "http request refused by the address policy");
    Err(refused(format!(
        "{} resolves to {ip}, a {kind} address, which a grant by name does not reach (grant {}://{}:{} to allow that address and port)",
        target.host,
        target.scheme.as_str(),
        match ip {
            IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        },
        target.port
    )))
}

use toolhost_base::net::canonical_ip as canonical;

/// What kind of address the policy keeps from a grant by name, if any: every
/// address the IANA IPv4 and IPv6 special-purpose address registries list as
/// not globally reachable (loopback, private, shared, link-local,
/// documentation, benchmarking, reserved, discard-only, protocol
/// assignments, deprecated site-local), plus multicast and broadcast. An
/// IPv4 address inside an IPv6 one (mapped, compatible, NAT64's
/// `64:ff9b::/96`, 6to4's `2002::/16`) is judged as that IPv4 address, so
/// no wrapping reaches an internal address.
pub(crate) fn restricted(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => restricted_v4(v4),
        IpAddr::V6(v6) => restricted_v6(v6),
    }
}

fn restricted_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let o = v4.octets();
    let [a, b, c, _] = o;
    let kind = if a == 127 {
        "loopback"
    } else if a == 0 {
        "unspecified (this network)"
    } else if a == 10 || (a == 172 && (16..32).contains(&b)) || (a == 192 && b == 168) {
        "private"
    } else if a == 169 && b == 254 {
        "link-local"
    } else if a == 100 && (64..128).contains(&b) {
        "shared (CGNAT)"
    } else if a == 192 && b == 0 && c == 0 {
        "IETF protocol assignment"
    } else if (a == 192 && b == 0 && c == 2) || (a == 198 && b == 51 && c == 100) || (a == 203 && b == 0 && c == 113) {
        "documentation"
    } else if a == 192 && b == 88 && c == 99 {
        "reserved (6to4 relay anycast)"
    } else if a == 198 && (b == 18 || b == 19) {
        "benchmarking"
    } else if v4 == Ipv4Addr::BROADCAST {
        "broadcast"
    } else if (224..240).contains(&a) {
        "multicast"
    } else if a >= 240 {
        "reserved"
    } else {
        return None;
    };
    Some(kind)
}

fn restricted_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let s = v6.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if v6.is_loopback() {
        return Some("loopback");
    }
    if v6.is_unspecified() {
        return Some("unspecified");
    }
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (the deprecated compatible form).
    if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) {
        return restricted_v4(embedded(s[6], s[7])).or(if s[5] == 0 {
            Some("IPv4-compatible (deprecated)")
        } else {
            None
        });
    }
    // NAT64, well-known prefix: judged by the IPv4 address it reaches.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return restricted_v4(embedded(s[6], s[7]));
    }
    // 6to4: likewise, by the IPv4 address in bits 16 to 48.
    if s[0] == 0x2002 {
        return restricted_v4(embedded(s[1], s[2]));
    }
    let kind = if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        "NAT64 (local use)"
    } else if s[..4] == [0x100, 0, 0, 0] {
        "discard-only"
    } else if s[0] == 0x2001 && s[1] == 0xdb8 || s[0] & 0xfff0 == 0x3ff0 {
        "documentation"
    } else if s[0] == 0x2001 && s[1] < 0x200 {
        "IETF protocol assignment (Teredo, benchmarking, ORCHID)"
    } else if s[0] == 0x5f00 {
        "segment routing (SRv6)"
    } else if s[0] & 0xfe00 == 0xfc00 {
        "private (ULA)"
    } else if s[0] & 0xffc0 == 0xfe80 {
        "link-local"
    } else if s[0] & 0xffc0 == 0xfec0 {
        "site-local (deprecated)"
    } else if v6.is_multicast() {
        "multicast"
    } else {
        return None;
    };
    Some(kind)
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
            ("0.0.0.0", Some("unspecified (this network)")),
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

    /// The IANA special-purpose registries' ranges that are not globally
    /// reachable, and every IPv6 form that carries an IPv4 address.
    #[test]
    fn the_address_policy_follows_the_special_purpose_registries() {
        for ip in [
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "198.19.255.254",
            "240.0.0.1",
            "255.255.255.255",
            "192.88.99.1",
            "::127.0.0.1",
            "::10.0.0.1",
            "::8.8.8.8",
            "::ffff:10.0.0.1",
            "64:ff9b::10.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b:1::1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "fec0::1",
            "2001:db8::1",
            "3fff::1",
            "100::1",
            "2001::1",
            "2001:2::1",
            "5f00::1",
            "ff02::1",
        ] {
            assert!(restricted(ip.parse().unwrap()).is_some(), "{ip} must be refused");
        }
        // Wrapped public IPv4 addresses stay reachable.
        for ip in ["64:ff9b::8.8.8.8", "2002:0808:0808::1", "8.8.8.8", "198.20.0.1", "2a00:1450::1"] {
            assert_eq!(restricted(ip.parse().unwrap()), None, "{ip}");
        }
    }
}
