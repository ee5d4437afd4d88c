//! The plugins' DNS: an asynchronous resolver (hickory), so that a lookup
//! whose server never answers holds no thread (the system resolver, through
//! tokio's blocking pool, held one each until it gave up: 64 hostile calls
//! filled the pool and stalled every other agent's calls). Lookups in
//! flight are bounded per call ([`LOOKUPS_PER_CALL`]) and per plugin
//! ([`LOOKUPS_PER_PLUGIN`]), and each is bounded by the call's remaining
//! deadline (the caller's timeout): a plugin's DNS can delay only that
//! plugin.

use crate::{WasiHttpError, refused};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::Semaphore;

/// Lookups one call may have in flight at once.
pub const LOOKUPS_PER_CALL: usize = 4;
/// Lookups all the calls of one plugin may have in flight at once.
pub const LOOKUPS_PER_PLUGIN: usize = 16;

/// The resolver every plugin shares, and each plugin's share of lookups.
pub(crate) struct Dns {
    /// `plugins.http_nameservers`: empty for the system's configuration
    /// (`/etc/resolv.conf`, `/etc/hosts`).
    nameservers: Vec<SocketAddr>,
    /// Made at the first lookup (most hosts never need one).
    resolver: OnceLock<Result<TokioResolver, String>>,
    /// Plugin -> its lookups in flight.
    per_plugin: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
}

impl Dns {
    pub(crate) fn new(nameservers: Vec<SocketAddr>) -> Dns {
        Dns { nameservers, resolver: OnceLock::new(), per_plugin: Mutex::default() }
    }

    fn resolver(&self) -> Result<&TokioResolver, WasiHttpError> {
        self.resolver
            .get_or_init(|| {
                let builder = if self.nameservers.is_empty() {
                    TokioResolver::builder_tokio()
                        .map_err(|e| format!("reading the system's DNS configuration: {e}"))?
                } else {
                    let servers = self
                        .nameservers
                        .iter()
                        .map(|at| {
                            let mut ns = NameServerConfig::udp_and_tcp(at.ip());
                            for c in &mut ns.connections {
                                c.port = at.port();
                            }
                            ns
                        })
                        .collect();
                    TokioResolver::builder_with_config(
                        ResolverConfig::from_name_servers(servers),
                        TokioRuntimeProvider::default(),
                    )
                };
                builder.build().map_err(|e| format!("no DNS resolver: {e}"))
            })
            .as_ref()
            .map_err(|e| refused(e.clone()))
    }

    /// The lookups of one call of `plugin` for `caller`.
    pub(crate) fn for_call(&self, plugin: Arc<str>, caller: Option<&str>) -> Lookups {
        let plugin_wide = self
            .per_plugin
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(plugin.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(LOOKUPS_PER_PLUGIN)))
            .clone();
        Lookups { plugin, caller: caller.map(Arc::from), call: Arc::new(Semaphore::new(LOOKUPS_PER_CALL)), plugin_wide }
    }
}

/// One call's lookups: its own share, and its plugin's; and who the call
/// is for (its connections take that caller's share of descriptors).
#[derive(Clone)]
pub(crate) struct Lookups {
    pub(crate) plugin: Arc<str>,
    pub(crate) caller: Option<Arc<str>>,
    call: Arc<Semaphore>,
    plugin_wide: Arc<Semaphore>,
}

impl Lookups {
    /// The addresses `host` resolves to. Waits for a free share first; the
    /// caller bounds the whole by the call's deadline, and dropping the
    /// future abandons the lookup (no thread waits on it).
    pub(crate) async fn resolve(&self, dns: &Dns, host: &str) -> Result<Vec<IpAddr>, WasiHttpError> {
        let closed = |_| refused("the lookups of this call were closed".into());
        let _call = self.call.acquire().await.map_err(closed)?;
        let _plugin = self.plugin_wide.acquire().await.map_err(closed)?;
        let answer = dns.resolver()?.lookup_ip(host).await.map_err(|e| {
            tracing::debug!(plugin = %self.plugin, host, "DNS lookup failed: {e}");
            WasiHttpError::DnsError { rcode: None, info_code: None }
        })?;
        Ok(answer.iter().collect())
    }
}
