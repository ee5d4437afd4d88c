//! This process's own sockets: the addresses its servers listen on, and the
//! client sockets its plugins' outgoing connections use.
//!
//! Two rules rest on them:
//! - **No plugin reaches toolhost's own listeners** (the HTTP front, the
//!   admin API, the voice relay, the page), whatever its grants say: the
//!   connectors ask [`is_own_listener`] of every address before (and, where
//!   they can, after) connecting.
//! - **A plugin is never the operator**: a connection accepted by a front
//!   whose client socket is one of this process's plugin sockets
//!   ([`is_plugin_socket`]) is not this Unix user's, even though the kernel
//!   says the same uid owns it.
//!
//! Both registries are process-wide (they describe the process, not one
//! host value) and hold entries only while a guard lives.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Mutex, MutexGuard, OnceLock};

#[derive(Default)]
struct Registry {
    /// Listening address -> how many live guards name it.
    listeners: HashMap<SocketAddr, usize>,
    /// Local port of a plugin's client socket -> live guards. A port, not
    /// an address: the socket is bound to the wildcard address (and so
    /// holds that port on every address) before it connects, so that it is
    /// known before any front can accept it.
    plugin_sockets: HashMap<u16, usize>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(crate::net::canonical_ip(addr.ip()), addr.port())
}

/// Keeps an address in a registry while it lives.
#[derive(Debug)]
#[must_use = "the address is registered only while the guard lives"]
pub enum Registered {
    /// A listener's address.
    Listener(SocketAddr),
    /// A plugin socket's local port.
    PluginSocket(u16),
}

fn release<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut r = registry();
        match self {
            Registered::Listener(addr) => release(&mut r.listeners, addr),
            Registered::PluginSocket(port) => release(&mut r.plugin_sockets, port),
        }
    }
}

/// Records `addr` (as `local_addr()` of a bound listener says) as one of
/// this process's listeners while the guard lives.
pub fn listening(addr: SocketAddr) -> Registered {
    let addr = canonical(addr);
    *registry().listeners.entry(addr).or_default() += 1;
    Registered::Listener(addr)
}

/// Records the local port of a plugin's client socket, bound to the
/// wildcard address and not yet connected, while the guard lives.
pub fn plugin_socket(local_port: u16) -> Registered {
    *registry().plugin_sockets.entry(local_port).or_default() += 1;
    Registered::PluginSocket(local_port)
}

/// Whether the client at `peer` (as a front's `accept` reports it, on an
/// address of this machine) is a socket one of this process's plugins
/// opened.
pub fn is_plugin_socket(peer: SocketAddr) -> bool {
    registry().plugin_sockets.contains_key(&peer.port())
}

/// Whether a connection to `target` would reach one of this process's
/// listeners: same port, and the listener's address, or any address of this
/// machine for a listener on the wildcard address. An address is this
/// machine's when it is loopback, unspecified (which Linux connects to
/// loopback), or one a socket can be bound to here.
pub fn is_own_listener(target: SocketAddr) -> bool {
    let target = canonical(target);
    let listeners: Vec<SocketAddr> = {
        let r = registry();
        r.listeners.keys().filter(|l| l.port() == target.port()).copied().collect()
    };
    if listeners.is_empty() {
        return false;
    }
    let ip = target.ip();
    if listeners.iter().any(|l| l.ip() == ip) {
        return true;
    }
    listeners.iter().any(|l| l.ip().is_unspecified()) && is_this_machine(ip)
}

/// Whether `ip` is an address of this machine.
pub fn is_this_machine(ip: IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_known_while_its_guard_lives_on_each_address_of_the_machine() {
        let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), port);
        assert!(!is_own_listener(at("127.0.0.1")));
        let guard = listening(l.local_addr().unwrap());
        for ip in ["127.0.0.1", "127.0.0.2", "0.0.0.0", "::ffff:127.0.0.1", "::1"] {
            assert!(is_own_listener(at(ip)), "{ip}");
        }
        assert!(!is_own_listener(at("192.0.2.1")), "not this machine");
        assert!(!is_own_listener(SocketAddr::new("127.0.0.1".parse().unwrap(), port.wrapping_add(1))));
        drop(guard);
        assert!(!is_own_listener(at("127.0.0.1")));

        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _g = listening(l.local_addr().unwrap());
        let port = l.local_addr().unwrap().port();
        assert!(is_own_listener(SocketAddr::new("127.0.0.1".parse().unwrap(), port)));
        assert!(!is_own_listener(SocketAddr::new("127.0.0.2".parse().unwrap(), port)), "another address");
    }

    #[test]
    fn a_plugin_socket_is_known_while_its_guard_lives() {
        let a: SocketAddr = "127.0.0.1:40001".parse().unwrap();
        let g1 = plugin_socket(40001);
        let g2 = plugin_socket(40001);
        assert!(is_plugin_socket("[::ffff:127.0.0.1]:40001".parse().unwrap()));
        drop(g1);
        assert!(is_plugin_socket(a), "counted");
        drop(g2);
        assert!(!is_plugin_socket(a));
    }
}
