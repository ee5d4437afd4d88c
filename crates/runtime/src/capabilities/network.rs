//! `network`: outgoing TCP to exactly the `IP:port` addresses the operator
//! lists. The check sees the socket address actually connected to, so no
//! header, URL or redirect can widen it; names are never resolved, nothing
//! listens, no UDP. A component importing `wasi:sockets` without the grant
//! loads with its sockets inert: no TCP, no UDP, no name lookups, every
//! socket refused (CPython built by componentize-py imports them all,
//! whether or not the plugin ever opens one).

use super::{About, CapabilityFactor, GrantError, Grants, InstanceSetup};
use crate::state::State;
use std::net::SocketAddr;
use std::sync::Arc;
use toolhost_types::Capability;
use wasmtime::component::Linker;

/// Parses the granted addresses.
pub(super) fn resolve(plugin: &str, entries: &[String]) -> Result<Vec<SocketAddr>, GrantError> {
    entries
        .iter()
        .map(|n| n.parse().map_err(|_| GrantError::Network { plugin: plugin.into(), entry: n.clone() }))
        .collect()
}

/// The `network` capability.
pub struct Network;

static ABOUT: About = About {
    capability: Capability::Network,
    interfaces: &[
        "wasi:sockets/network",
        "wasi:sockets/instance-network",
        "wasi:sockets/tcp",
        "wasi:sockets/tcp-create-socket",
        "wasi:sockets/udp",
        "wasi:sockets/udp-create-socket",
        "wasi:sockets/ip-name-lookup",
    ],
    inert_without_grant: true,
    by_extension: false,
};

impl CapabilityFactor for Network {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    fn held(&self, grants: &Grants) -> bool {
        !grants.network.is_empty()
    }

    fn configure(&self, grants: &Grants, setup: &mut InstanceSetup) -> Result<(), String> {
        if grants.network.is_empty() {
            // Inert: wasmtime-wasi refuses each socket (`access-denied`).
            setup.wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
            return Ok(());
        }
        let allowed: Arc<[SocketAddr]> = grants.network.clone().into();
        let used = setup.used.clone();
        setup.wasi.allow_tcp(true).socket_addr_check(move |addr, usage| {
            use wasmtime_wasi::sockets::SocketAddrUse;
            let ok = match usage {
                SocketAddrUse::TcpConnect => {
                    // toolhost's own listeners are never a plugin's to
                    // reach, whatever its grants say.
                    let ok = allowed.contains(&addr) && !toolhost_base::own::is_own_listener(addr);
                    if ok {
                        used.mark(Capability::Network);
                    }
                    ok
                }
                // The implicit bind a connect performs (wildcard address,
                // any port); explicit binds and listening stay refused.
                SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                _ => false,
            };
            Box::pin(async move { ok })
        });
        Ok(())
    }

    fn link(&self, _linker: &mut Linker<State>) -> wasmtime::Result<()> {
        // wasmtime-wasi's sockets, linked with the rest of WASI; the store's
        // address check is the grant.
        Ok(())
    }

    fn report(&self, grants: &Grants) -> serde_json::Value {
        grants.network.iter().map(|a| a.to_string()).collect()
    }

    fn allows(&self, grants: &Grants) -> Vec<String> {
        grants.network.iter().map(|a| format!("may open TCP connections to {a} (and to no other address)")).collect()
    }
}
