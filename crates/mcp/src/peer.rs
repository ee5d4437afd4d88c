//! Who is on the other end of an HTTP connection: its address and, on
//! loopback, the Unix user that owns the client's socket.
//!
//! Without `server.tokens`, the HTTP front serves only the Unix user it runs
//! as (and root): any local user can connect to a loopback port, so the port
//! alone proves nothing. The owner of a loopback client socket is asked of
//! the kernel once per connection, when it is accepted, while the socket is
//! known to exist: by its exact address pair over `sock_diag` netlink (a
//! hash lookup, whatever the number of sockets), or, where netlink is not
//! allowed, from the socket table (`/proc/net/tcp`, `/proc/net/tcp6`, read
//! whole: its cost grows with every socket on the machine). On systems
//! without either the owner is unknown, and a server without tokens admits
//! nobody (configure `server.tokens` there).

use crate::conns::{ConnLimits, Conns, Counted};
use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};

/// The client of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its address and port.
    pub addr: SocketAddr,
    /// The Unix user owning its socket, when it is on loopback and the
    /// kernel says. Never set for a socket one of this process's plugins
    /// opened (`toolhost_base::own`): a plugin is never the operator.
    pub uid: Option<u32>,
    /// Admitted past `server.max_connections`, in the reserve kept for
    /// the probes and the operator ([`crate::conns`]).
    pub reserve: bool,
}

/// A TCP listener that learns each loopback client's Unix user on accept.
#[derive(Debug)]
pub struct PeerListener {
    inner: TcpListener,
    /// Keeps plugins from connecting to it while it lives.
    _own: Option<toolhost_base::own::Registered>,
    conns: Arc<Conns>,
}

impl PeerListener {
    /// Wraps a bound listener, with the default connection limits.
    pub fn new(inner: TcpListener) -> PeerListener {
        PeerListener::with_limits(inner, ConnLimits::default())
    }

    /// Wraps a bound listener, admitting connections under `limits`, and
    /// records its address as one no plugin may connect to.
    pub fn with_limits(inner: TcpListener, limits: ConnLimits) -> PeerListener {
        let own = inner.local_addr().ok().map(toolhost_base::own::listening);
        PeerListener { inner, _own: own, conns: Conns::new(limits) }
    }

    /// The connections it has admitted and holds open.
    pub fn conns(&self) -> Arc<Conns> {
        self.conns.clone()
    }
}

impl axum::serve::Listener for PeerListener {
    type Io = Counted<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Counted<TcpStream>, Peer) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    // Over its source's share, or the front's cap and its
                    // reserve: closed at once, its descriptor never held.
                    let Some(place) = self.conns.admit(addr.ip()) else {
                        tracing::debug!(
                            "a connection from {addr} closed: over server.max_connections or its address's share"
                        );
                        continue;
                    };
                    // Responses are written whole, often as two writes (an
                    // SSE stream's priming event, then the message): with
                    // Nagle's algorithm the second waits for the client's
                    // delayed ACK, about 40 ms.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!("TCP_NODELAY on a connection from {addr}: {e}");
                    }
                    let uid = match stream.local_addr() {
                        Ok(_) if toolhost_base::own::is_plugin_socket(addr) => {
                            tracing::warn!("a connection from {addr}, a plugin's own socket: never the operator");
                            None
                        }
                        Ok(local) if canonical(addr.ip()).is_loopback() => socket_owner(addr, local),
                        _ => None,
                    };
                    let reserve = place.is_reserve();
                    return (Counted::new(stream, place), Peer { addr, uid, reserve });
                }
                // As axum's own listener: errors of one connection are
                // skipped; others (out of descriptors) wait a moment.
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    tracing::error!("accepting a connection: {e}");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Peer> {
        Ok(Peer { addr: self.inner.local_addr()?, uid: None, reserve: false })
    }
}

impl Connected<IncomingStream<'_, PeerListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, PeerListener>) -> Peer {
        *stream.remote_addr()
    }
}

/// The TLS settings of the front's port, from a PEM certificate chain and
/// its private key (HTTP/1.1 only, as the front serves).
pub fn tls_config(cert: &std::path::Path, key: &std::path::Path) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("reading the certificate {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("no certificate in {}", cert.display()));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("reading the private key {}: {e}", key.display()))?;
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("the certificate and key do not go together: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A [`PeerListener`] that also speaks TLS: a connection whose first byte
/// opens a TLS handshake is served over TLS, any other as plain HTTP, on
/// the same port. Handshakes run beside the accept loop, each bounded by
/// [`HANDSHAKE_TIMEOUT`], so a client that stalls holds up no other.
#[derive(Debug)]
pub struct TlsPeerListener {
    ready: tokio::sync::mpsc::Receiver<(TlsOrPlain, Peer)>,
    local: Peer,
}

/// A connection of a [`TlsPeerListener`].
pub type TlsOrPlain =
    tokio_util::either::Either<Box<tokio_rustls::server::TlsStream<Counted<TcpStream>>>, Counted<TcpStream>>;

/// How long a client has to send its first byte and finish a handshake.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl TlsPeerListener {
    /// Serves `inner`'s connections, TLS ones with `config`. Needs a tokio
    /// runtime.
    pub fn new(mut inner: PeerListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<TlsPeerListener> {
        use axum::serve::Listener as _;
        let local = inner.local_addr()?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = inner.accept().await;
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                if tx.is_closed() {
                    break;
                }
                tokio::spawn(async move {
                    let sorted = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
                        let mut first = [0u8; 1];
                        match stream.get_ref().peek(&mut first).await {
                            // A TLS record of type handshake.
                            Ok(1) if first[0] == 0x16 => match acceptor.accept(stream).await {
                                Ok(tls) => Some(tokio_util::either::Either::Left(Box::new(tls))),
                                Err(e) => {
                                    tracing::debug!("a TLS handshake from {} failed: {e}", peer.addr);
                                    None
                                }
                            },
                            Ok(_) => Some(tokio_util::either::Either::Right(stream)),
                            Err(_) => None,
                        }
                    })
                    .await;
                    if let Ok(Some(io)) = sorted {
                        let _ = tx.send((io, peer)).await;
                    }
                });
            }
        });
        Ok(TlsPeerListener { ready, local })
    }
}

impl axum::serve::Listener for TlsPeerListener {
    type Io = TlsOrPlain;
    type Addr = Peer;

    async fn accept(&mut self) -> (TlsOrPlain, Peer) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept loop never ends while this listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Peer> {
        Ok(self.local)
    }
}

impl Connected<IncomingStream<'_, TlsPeerListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsPeerListener>) -> Peer {
        *stream.remote_addr()
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

use toolhost_base::net::canonical_ip as canonical;

/// The owner of the socket at `client` connected to `server` (this end), on
/// this machine.
pub fn socket_owner(client: SocketAddr, server: SocketAddr) -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        // A v4 client of a socket bound to `[::]` shows as `::ffff:a.b.c.d`;
        // the kernel files its socket as IPv4.
        let client = SocketAddr::new(canonical(client.ip()), client.port());
        let server = SocketAddr::new(canonical(server.ip()), server.port());
        match diag::owner(client, server) {
            Ok(uid) => uid,
            Err(e) => {
                tracing::debug!("sock_diag lookup of {client}: {e}; reading the socket table");
                let table = if client.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
                let text = std::fs::read_to_string(table).ok()?;
                owner_in_table(&text, client, server)
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (client, server);
        None
    }
}

/// The exact-socket query of `sock_diag(7)`: one request naming the
/// client socket by its address pair, one answer.
#[cfg(target_os = "linux")]
mod diag {
    use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
    use netlink_packet_sock_diag::SockDiagMessage;
    use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
    use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
    use netlink_sys::{Socket, SocketAddr as NlAddr, protocols::NETLINK_SOCK_DIAG};
    use std::io::{Error, ErrorKind};
    use std::net::SocketAddr;

    /// `Ok(None)`: the kernel knows no such socket (it closed already).
    /// `Err`: netlink is not available here.
    pub(super) fn owner(client: SocketAddr, server: SocketAddr) -> std::io::Result<Option<u32>> {
        let socket = Socket::new(NETLINK_SOCK_DIAG)?;
        socket.connect(&NlAddr::new(0, 0))?;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST;
        header.sequence_number = 1;
        let mut request = NetlinkMessage::new(
            header,
            SockDiagMessage::InetRequest(InetRequest {
                family: if client.is_ipv4() { AF_INET } else { AF_INET6 },
                protocol: IPPROTO_TCP,
                extensions: ExtensionFlags::empty(),
                states: StateFlags::all(),
                socket_id: SocketId {
                    source_port: client.port(),
                    destination_port: server.port(),
                    source_address: client.ip(),
                    destination_address: server.ip(),
                    interface_id: 0,
                    // INET_DIAG_NOCOOKIE: any socket with this address pair.
                    cookie: [0xff; 8],
                },
            })
            .into(),
        );
        request.finalize();
        let mut buf = vec![0; request.buffer_len()];
        request.serialize(&mut buf);
        socket.send(&buf, 0)?;
        // The kernel answers an exact request before `send` returns; not
        // waiting keeps a kernel that does not from stalling the accept loop.
        let mut answer = Vec::with_capacity(8192);
        socket.recv(&mut answer, rustix::net::RecvFlags::DONTWAIT.bits() as i32)?;
        let message = NetlinkMessage::<SockDiagMessage>::deserialize(&answer)
            .map_err(|e| Error::new(ErrorKind::InvalidData, e.to_string()))?;
        match message.payload {
            // A socket in TIME_WAIT (or orphaned: its process closed it) is
            // reported with uid 0 and inode 0: that is no owner, never root.
            NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r))
                if r.header.socket_id.source_port == client.port()
                    && r.header.socket_id.destination_port == server.port() =>
            {
                Ok((r.header.inode != 0).then_some(r.header.uid))
            }
            // ENOENT: no such socket.
            NetlinkPayload::Error(e) if e.code.is_some_and(|c| c.get() == -2) => Ok(None),
            NetlinkPayload::Error(e) => Err(e.to_io()),
            other => Err(Error::new(ErrorKind::InvalidData, format!("unexpected sock_diag answer: {other:?}"))),
        }
    }
}

/// Finds the row whose local end is `client` and remote end is `server` in
/// a `/proc/net/tcp{,6}` table, and returns its uid.
fn owner_in_table(text: &str, client: SocketAddr, server: SocketAddr) -> Option<u32> {
    text.lines().skip(1).find_map(|line| {
        let mut cols = line.split_whitespace();
        let local = parse_endpoint(cols.nth(1)?)?;
        let remote = parse_endpoint(cols.next()?)?;
        let uid = cols.nth(4)?.parse().ok()?;
        // As over netlink: a row without an inode (TIME_WAIT, orphaned)
        // says uid 0 for no one.
        let inode: u64 = cols.nth(1)?.parse().ok()?;
        (local == client && remote == server && inode != 0).then_some(uid)
    })
}

/// `0100007F:1F90` (an IPv4 address as the kernel's native-order word) or
/// 32 hex digits (four such words) for IPv6, then the port in hex.
fn parse_endpoint(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok()?.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_endian = "little")]
    #[test]
    fn reads_the_kernel_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:2212 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:D431 0100007F:2212 01 00000000:00000000 00:00000000 00000000  1001        0 2 1 0000000000000000 20 4 30 10 -1\n   2: 0100007F:2212 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1\n";
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        let server: SocketAddr = "127.0.0.1:8722".parse().unwrap();
        assert_eq!(owner_in_table(table, client, server), Some(1001));
        assert_eq!(owner_in_table(table, server, client), Some(0), "the server's own end");
        assert_eq!(owner_in_table(table, "127.0.0.1:1".parse().unwrap(), server), None);
        let v6 = parse_endpoint("00000000000000000000000001000000:1F90").unwrap();
        assert_eq!(v6, "[::1]:8080".parse().unwrap());
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn knows_its_own_user() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let (_s, peer) = axum::serve::Listener::accept(&mut PeerListener::new(listener)).await;
        assert_eq!(peer.addr, client.local_addr().unwrap());
        assert_eq!(peer.uid, Some(rustix::process::geteuid().as_raw()));
    }

    /// The exact netlink query itself answers (the table is only a fallback),
    /// and a socket that is gone is unknown, not an error.
    #[cfg(target_os = "linux")]
    #[test]
    fn sock_diag_finds_the_client_socket_by_its_address_pair() {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let (_s, _) = listener.accept().unwrap();
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(diag::owner(client.local_addr().unwrap(), server).unwrap(), Some(me));
        let free = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap();
        assert_eq!(diag::owner(free, server).unwrap(), None);
    }

    /// A client that closed before its connection was looked at leaves a
    /// TIME_WAIT socket, which the kernel reports with uid 0: that must
    /// read as no owner, not as root.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_closed_clients_socket_has_no_owner_not_root() {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let at = client.local_addr().unwrap();
        let (accepted, _) = listener.accept().unwrap();
        drop(client);
        drop(accepted);
        // Wait for the client's end to reach TIME_WAIT (at once on loopback).
        for _ in 0..100 {
            let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
            if table.lines().any(|l| {
                let mut c = l.split_whitespace();
                c.nth(1).and_then(parse_endpoint) == Some(at) && c.nth(1) == Some("06")
            }) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(diag::owner(at, server).unwrap(), None);
        assert_eq!(owner_in_table(&std::fs::read_to_string("/proc/net/tcp").unwrap(), at, server), None);
    }
}
