//! Whether everything configured is ready to be listed: the one
//! first-list rule.
//!
//! A client that lists tools once (an inspector, a one-shot script, a
//! voice engine at session start) must see every configured tool, not
//! whatever happened to be connected when it asked. So `initialize` is
//! answered at once, and a session's first `tools/list`, `resources/list`
//! and `prompts/list` wait until the host is ready (plugins compiled,
//! upstream servers connected or failed), for at most the wait set with
//! [`Readiness::pending`] (`server.first_list_wait_ms`), counted from the
//! session's first list. Whatever is
//! ready later joins with `list_changed`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A latch: ready unless [`Readiness::pending`] was called and
/// [`Readiness::set_ready`] not yet.
#[derive(Debug)]
pub struct Readiness {
    ready: AtomicBool,
    notify: Notify,
    wait: Mutex<Duration>,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness { ready: AtomicBool::new(true), notify: Notify::new(), wait: Mutex::new(Duration::ZERO) }
    }
}

impl Readiness {
    /// Not ready until [`Readiness::set_ready`]; a first list waits up to
    /// `wait` for it.
    pub fn pending(&self, wait: Duration) {
        *self.wait.lock().unwrap_or_else(|p| p.into_inner()) = wait;
        self.ready.store(false, Ordering::Release);
    }

    /// Everything configured is ready (or has failed): first lists go on.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether everything configured is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// How long a session's first list waits at most (set by
    /// [`Readiness::pending`]).
    pub fn first_list_wait(&self) -> Duration {
        *self.wait.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until ready, or until `deadline`; returns whether it is ready.
    pub async fn ready_by(&self, deadline: Instant) -> bool {
        let ready = async {
            loop {
                let notified = self.notify.notified();
                if self.is_ready() {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout_at(deadline.into(), ready).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_first_list_waits_for_ready_and_no_longer_than_the_wait() {
        let r = std::sync::Arc::new(Readiness::default());
        let by = |d| Instant::now() + d;
        assert!(r.ready_by(Instant::now()).await, "ready unless told otherwise");
        r.pending(Duration::from_millis(50));
        assert_eq!(r.first_list_wait(), Duration::from_millis(50));
        assert!(!r.ready_by(by(r.first_list_wait())).await, "gives up at the deadline");
        r.pending(Duration::from_secs(30));
        let setter = r.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            setter.set_ready();
        });
        assert!(r.ready_by(by(Duration::from_secs(30))).await, "woken when ready, well before the deadline");
    }
}
