//! `wasi:clocks/monotonic-clock`, bounded by the call's deadline.
//!
//! A guest that sleeps (or polls a timer) blocks inside a host call, where
//! epoch interruption cannot reach it: wasmtime-wasi's own clock would let a
//! plugin sleep for a year. This implementation shadows it and never lets a
//! timer outlive the call's deadline: once the deadline has passed every timer
//! is ready at once, so the guest is back in wasm code, where the epoch
//! deadline traps it within a tick. Should the guest return before the
//! epoch ticker got there (a loaded machine can delay the ticker), a call
//! whose timer was cut and that ends past its deadline is a timeout all
//! the same (`WasmPlugin::run`): a plugin never answers "slept 5 s" after
//! 300 ms.

use std::sync::LazyLock;
use std::time::{Duration, Instant};
use wasmtime::component::{HasData, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

/// The guest's time base: nanoseconds since the host process started.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The clock as seen from one store.
pub(crate) struct BoundedClock<'a> {
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) deadline: Instant,
    /// Set when a timer the guest asked for was cut at the deadline.
    pub(crate) cut: &'a mut bool,
}

/// Marker for `add_to_linker`.
pub(crate) struct HasBoundedClock;

impl HasData for HasBoundedClock {
    type Data<'a> = BoundedClock<'a>;
}

/// A timer that fires at an instant.
struct Timer(tokio::time::Instant);

#[async_trait::async_trait]
impl Pollable for Timer {
    async fn ready(&mut self) {
        tokio::time::sleep_until(self.0).await;
    }
}

impl monotonic_clock::Host for BoundedClock<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        Ok(EPOCH.elapsed().as_nanos() as u64)
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        Ok(1)
    }

    fn subscribe_instant(&mut self, when: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let now = self.now()?;
        self.subscribe_duration(when.saturating_sub(now))
    }

    fn subscribe_duration(&mut self, nanos: u64) -> wasmtime::Result<Resource<DynPollable>> {
        // One tick past the deadline: by then the epoch deadline has fired.
        let latest = self.deadline + super::ticker::TICK;
        let asked = Instant::now().checked_add(Duration::from_nanos(nanos));
        if asked.is_none_or(|w| w > latest) {
            *self.cut = true;
        }
        let wake = asked.map_or(latest, |w| w.min(latest));
        let timer = self.table.push(Timer(tokio::time::Instant::from_std(wake)))?;
        subscribe(self.table, timer)
    }
}
