//! Stopping the front: new sessions refused, requests in flight counted.

use super::*;

/// A front's shutdown: once [`Drain::start`]ed, a request that would open a
/// new MCP session is answered 503 with `Retry-After`, while the open
/// sessions are served on; [`Drain::open_sessions`] says how many remain,
/// and [`Drain::in_flight`] how many of their requests are being answered.
#[derive(Debug, Default)]
pub struct Drain {
    pub(super) draining: std::sync::atomic::AtomicBool,
    pub(super) closed: std::sync::atomic::AtomicBool,
    pub(super) open: std::sync::atomic::AtomicUsize,
    busy: std::sync::atomic::AtomicUsize,
    /// When the last request began, in milliseconds from `epoch`.
    last_request_ms: std::sync::atomic::AtomicU64,
    /// How long the drain waits with no request coming before it is over
    /// (in a fleet: until the balancer has sent the sessions elsewhere).
    handover_ms: std::sync::atomic::AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
}

/// One request being answered, counted in [`Drain::in_flight`] until its
/// response has been sent to its end (a call's event stream included) or
/// dropped.
pub(super) struct Busy(Arc<Drain>);

impl Busy {
    pub(super) fn new(drain: &Arc<Drain>) -> Busy {
        drain.busy.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        drain.last_request_ms.store(drain.now_ms(), std::sync::atomic::Ordering::Release);
        Busy(drain.clone())
    }

    /// `response`, whose body holds this count until it ends.
    pub(super) fn hold(self, response: Response) -> Response {
        hold(response, self)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// `response`, whose body holds `guard` until it ends (or is dropped).
pub(super) fn hold<G: Send + Unpin + 'static>(response: Response, guard: G) -> Response {
    response.map(|body| Body::new(Held { body, _guard: guard }))
}

/// A response body that holds a guard (its request counted as in flight,
/// its JSON-RPC id claimed) until it ends.
pub(super) struct Held<G> {
    body: Body,
    _guard: G,
}

impl<G: Send + Unpin + 'static> hyper::body::Body for Held<G> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drain {
    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis().try_into().unwrap_or(u64::MAX)
    }

    /// Makes [`Drain::handed_over`] wait until no request has begun for
    /// `quiet`: a fleet's host, whose balancer takes a moment to see it
    /// leave, serves its sessions until their requests go to another host
    /// (which restores them).
    pub fn hand_over_after(&self, quiet: Duration) {
        self.epoch.get_or_init(Instant::now);
        self.handover_ms.store(quiet.as_millis().try_into().unwrap_or(u64::MAX), std::sync::atomic::Ordering::Release);
    }

    /// Whether nothing is left to hand over: no request in flight, and
    /// none begun for the quiet time [`Drain::hand_over_after`] set.
    pub fn handed_over(&self) -> bool {
        let quiet = self.handover_ms.load(std::sync::atomic::Ordering::Acquire);
        let last = self.last_request_ms.load(std::sync::atomic::Ordering::Acquire);
        self.in_flight() == 0 && (quiet == 0 || self.now_ms().saturating_sub(last) >= quiet)
    }

    /// Stops taking new sessions.
    pub fn start(&self) {
        self.draining.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The drain is over: from now on every request of the MCP endpoints
    /// is refused (503), so that none starts while the host exits; wait
    /// for [`Drain::in_flight`] to reach 0 once more after this.
    pub fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether new sessions are refused.
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Acquire)
    }

    /// MCP sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Requests of the MCP endpoints and turns being answered now (their
    /// responses not yet sent to the end); a session's open event stream
    /// (`GET /mcp`) is not one: an idle session keeps no request in flight.
    pub fn in_flight(&self) -> usize {
        self.busy.load(std::sync::atomic::Ordering::Acquire)
    }
}
