//! Whether everything configured is ready to be listed: the one
//! first-list rule.
//!
//! A client that lists tools once (an inspector, a one-shot script, a
//! voice engine at session start) must see every configured tool, not
//! whatever happened to be connected when it asked. So `initialize` is
//! answered at once, and a session's first `tools/list`, `resources/list`
//! and `prompts/list` wait until the host is ready (plugins compiled,
//! upstream servers connected or failed), for at most the wait set with
//! [`Readiness::set_first_list_wait`] (`server.first_list_wait_ms`),
//! counted from the session's first list. Whatever is ready later joins
//! with `list_changed`. A call of a tool not registered yet waits the same
//! way, but only until that tool is registered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Ready while nothing holds it: each thing still getting ready (the
/// plugins loading in the background, the upstreams' first connections)
/// takes a [`ReadyHold`] and drops it when it is ready or has failed.
#[derive(Default)]
pub struct Readiness {
    holds: AtomicUsize,
    notify: Notify,
    wait: Mutex<Duration>,
    /// What the host depends on while serving (the memory store), asked by
    /// the readiness probe: not ready while one is unreachable.
    dependencies: Mutex<Vec<Dependency>>,
}

/// A check of something the host depends on: whether it is reachable now.
type Dependency = Arc<dyn Fn() -> bool + Send + Sync>;

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("holds", &self.holds)
            .field("wait", &self.wait)
            .field("dependencies", &self.dependencies.lock().map(|d| d.len()).unwrap_or_default())
            .finish_non_exhaustive()
    }
}

/// Holds a [`Readiness`] not ready until dropped.
#[derive(Debug)]
#[must_use = "the host is ready again as soon as the hold is dropped"]
pub struct ReadyHold(Arc<Readiness>);

impl Drop for ReadyHold {
    fn drop(&mut self) {
        if self.0.holds.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.notify.notify_waiters();
        }
    }
}

impl Readiness {
    /// Sets how long a session's first list waits at most for the host
    /// to be ready (`server.first_list_wait_ms`; zero by default).
    pub fn set_first_list_wait(&self, wait: Duration) {
        *self.wait.lock().unwrap_or_else(|p| p.into_inner()) = wait;
    }

    /// Not ready until the returned hold (and every other) is dropped.
    pub fn hold(self: &Arc<Self>) -> ReadyHold {
        self.holds.fetch_add(1, Ordering::AcqRel);
        ReadyHold(self.clone())
    }

    /// Whether everything configured is ready (nothing holds it).
    pub fn is_ready(&self) -> bool {
        self.holds.load(Ordering::Acquire) == 0
    }

    /// Adds something the host depends on while serving (the memory
    /// store): [`Readiness::dependencies_reachable`] asks it.
    pub fn depend_on(&self, reachable: impl Fn() -> bool + Send + Sync + 'static) {
        self.dependencies.lock().unwrap_or_else(|p| p.into_inner()).push(Arc::new(reachable));
    }

    /// Whether everything the host depends on is reachable now (the
    /// readiness probe's question beside [`Readiness::is_ready`]).
    pub fn dependencies_reachable(&self) -> bool {
        let checks: Vec<Dependency> = self.dependencies.lock().unwrap_or_else(|p| p.into_inner()).clone();
        checks.iter().all(|reachable| reachable())
    }

    /// How long a session's first list waits at most.
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
        let r = Arc::new(Readiness::default());
        let by = |d| Instant::now() + d;
        assert!(r.ready_by(Instant::now()).await, "ready unless told otherwise");
        r.set_first_list_wait(Duration::from_millis(50));
        assert_eq!(r.first_list_wait(), Duration::from_millis(50));
        let (plugins, upstreams) = (r.hold(), r.hold());
        assert!(!r.ready_by(by(r.first_list_wait())).await, "gives up at the deadline");
        drop(plugins);
        assert!(!r.is_ready(), "not ready while anything holds it");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(upstreams);
        });
        assert!(
            r.ready_by(by(Duration::from_secs(30))).await,
            "woken when the last hold goes, well before the deadline"
        );
    }
}
