//! Kept-alive connections, per plugin: a fresh instance per call must not
//! mean a fresh TCP and TLS handshake per call.
//!
//! A connection is kept for the plugin that opened it, for the origin it
//! was opened to (scheme, host, port: the TLS name it verified, the address
//! the policy checked), and is never handed to another plugin or origin.
//! At most [`PER_ORIGIN`] are kept per plugin and origin and [`PER_PLUGIN`]
//! per plugin; one idle for [`IDLE`] is closed (by a sweep every few
//! seconds), and none lives longer than [`LIFETIME`]. A connection is
//! handed out only when it is ready for a request: one whose last response
//! was not read to its end is closed, not reused.

use hyper::client::conn::http1::SendRequest;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;
use wasmtime_wasi_http::WasiBody;

/// Connections kept per plugin and origin.
pub const PER_ORIGIN: usize = 4;
/// Connections kept per plugin, all origins.
pub const PER_PLUGIN: usize = 16;
/// A connection idle this long is closed.
pub const IDLE: Duration = Duration::from_secs(30);
/// No connection lives longer than this, busy or not.
pub const LIFETIME: Duration = Duration::from_secs(300);
/// How often idle connections are looked for.
const SWEEP: Duration = Duration::from_secs(5);

/// Whose connection, to where.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) plugin: Arc<str>,
    pub(crate) scheme: &'static str,
    pub(crate) host: String,
    pub(crate) port: u16,
}

struct Kept {
    sender: SendRequest<WasiBody>,
    /// Its driver task, aborted to close it.
    driver: AbortHandle,
    /// When it was put back.
    since: Instant,
    /// When it was opened.
    opened: Instant,
    /// Its last response was read to its end: hyper makes it ready for
    /// the next request a moment later.
    read: Arc<AtomicBool>,
}

/// A kept connection handed out, with when it was opened, its driver, and
/// whether it still has to settle (its last response was read, but hyper
/// has not yet made it ready: [`SendRequest::ready`] is worth a short
/// wait rather than a new handshake).
pub(crate) struct Taken {
    pub(crate) sender: SendRequest<WasiBody>,
    pub(crate) opened: Instant,
    pub(crate) driver: AbortHandle,
    pub(crate) settling: bool,
}

/// The kept connections of every plugin.
#[derive(Default)]
pub(crate) struct Pool {
    kept: Mutex<HashMap<Key, Vec<Kept>>>,
    sweeping: std::sync::OnceLock<()>,
}

impl Pool {
    /// A kept connection of `key` ready for a request, else one whose last
    /// response was read to its end and is about to be ready, if there is
    /// one. A connection still busy with another call is never handed out.
    pub(crate) fn take(&self, key: &Key) -> Option<Taken> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let list = kept.get_mut(key)?;
        list.retain(|k| {
            let keep = usable(k, Instant::now());
            if !keep {
                k.driver.abort();
            }
            keep
        });
        let (index, settling) = match list.iter().position(|k| k.sender.is_ready()) {
            Some(ready) => (ready, false),
            None => (list.iter().position(|k| k.read.load(Ordering::Acquire))?, true),
        };
        let k = list.swap_remove(index);
        Some(Taken { sender: k.sender, opened: k.opened, driver: k.driver, settling })
    }

    /// Keeps `sender` (busy until its response is read, which sets `read`)
    /// for `key`'s next requests, or closes it when the plugin keeps enough
    /// already.
    pub(crate) fn put(
        self: &Arc<Self>,
        key: Key,
        sender: SendRequest<WasiBody>,
        opened: Instant,
        driver: AbortHandle,
        read: Arc<AtomicBool>,
    ) {
        self.start_sweeping();
        let now = Instant::now();
        if sender.is_closed() || now.duration_since(opened) >= LIFETIME {
            driver.abort();
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let plugin: usize = kept.iter().filter(|(k, _)| k.plugin == key.plugin).map(|(_, v)| v.len()).sum();
        let list = kept.entry(key).or_default();
        list.retain(|k| usable(k, now));
        if list.len() >= PER_ORIGIN || plugin >= PER_PLUGIN {
            // Not kept: closed once its response is read.
            return;
        }
        list.push(Kept { sender, driver, since: now, opened, read });
    }

    /// Closes what has been idle too long, lived too long or was closed.
    fn sweep(&self) {
        let now = Instant::now();
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|_, list| {
            list.retain(|k| {
                let keep = usable(k, now);
                if !keep {
                    k.driver.abort();
                }
                keep
            });
            !list.is_empty()
        });
    }

    /// Starts the sweep, once; it stops when the pool is dropped.
    fn start_sweeping(self: &Arc<Self>) {
        self.sweeping.get_or_init(|| {
            let pool: Weak<Pool> = Arc::downgrade(self);
            // Detached: it ends when the pool is gone.
            wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| {
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(SWEEP).await;
                        match pool.upgrade() {
                            Some(p) => p.sweep(),
                            None => break,
                        }
                    }
                })
            });
        });
    }
}

fn usable(k: &Kept, now: Instant) -> bool {
    !k.sender.is_closed() && now.duration_since(k.since) < IDLE && now.duration_since(k.opened) < LIFETIME
}
