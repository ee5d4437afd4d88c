//! Bodies held to a size and to the call's deadline as they stream.

use crate::WasiHttpError;
use bytes::Bytes;
use http_body::{Body, Frame};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

/// The byte bounds of one call's requests, and where one request's body
/// bytes are counted (for the audit).
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(crate) response_bytes: usize,
    pub(crate) request_bytes: usize,
    pub(crate) bytes_out: Arc<AtomicU64>,
    pub(crate) bytes_in: Arc<AtomicU64>,
}

/// A body cut at `cap` bytes and at the deadline.
pub(crate) struct Capped<B> {
    inner: B,
    seen: usize,
    cap: usize,
    deadline: Pin<Box<tokio::time::Sleep>>,
    over: fn(usize) -> WasiHttpError,
    late: fn() -> WasiHttpError,
    /// Bytes that passed, for the audit.
    counted: Arc<AtomicU64>,
    /// A response's connection, closed when the body is not read to its
    /// end (cut, late, or dropped by the guest): never kept for reuse.
    connection: Option<tokio::task::AbortHandle>,
    /// The body was read to its end.
    finished: bool,
    /// Told when a response body is read to its end, so the pool knows
    /// its connection is about to be ready again.
    read: Option<Arc<AtomicBool>>,
}

impl<B> Drop for Capped<B> {
    fn drop(&mut self) {
        if !self.finished
            && let Some(c) = &self.connection
        {
            c.abort();
        }
    }
}

impl<B> Capped<B> {
    /// A response body: past `cap` bytes the guest's read fails with
    /// `HTTP-response-body-size`; past the deadline with a timeout.
    pub(crate) fn response(
        inner: B,
        cap: usize,
        deadline: Instant,
        counted: Arc<AtomicU64>,
        connection: tokio::task::AbortHandle,
        read: Arc<AtomicBool>,
    ) -> Capped<B> {
        Capped {
            inner,
            seen: 0,
            cap,
            deadline: Box::pin(tokio::time::sleep_until(deadline.into())),
            over: |cap| WasiHttpError::HttpResponseBodySize(Some(cap as u64)),
            late: || WasiHttpError::HttpResponseTimeout,
            counted,
            connection: Some(connection),
            finished: false,
            read: Some(read),
        }
    }

    /// A request body: past `cap` bytes the send fails with
    /// `HTTP-request-body-size`.
    pub(crate) fn request(inner: B, cap: usize, deadline: Instant, counted: Arc<AtomicU64>) -> Capped<B> {
        Capped {
            inner,
            seen: 0,
            cap,
            deadline: Box::pin(tokio::time::sleep_until(deadline.into())),
            over: |cap| WasiHttpError::HttpRequestBodySize(Some(cap as u64)),
            late: || WasiHttpError::ConnectionWriteTimeout,
            counted,
            connection: None,
            finished: false,
            read: None,
        }
    }
}

impl<B> Capped<B> {
    fn finish(&mut self) {
        self.finished = true;
        if let Some(read) = &self.read {
            read.store(true, Ordering::Release);
        }
    }
}

impl<B> Body for Capped<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<WasiHttpError>,
{
    type Data = Bytes;
    type Error = WasiHttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, WasiHttpError>>> {
        let this = &mut *self;
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err((this.late)())));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.seen = this.seen.saturating_add(data.len());
                    if this.seen > this.cap {
                        return Poll::Ready(Some(Err((this.over)(this.cap))));
                    }
                    this.counted.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                // A guest that stops at Content-Length has read it all.
                if this.inner.is_end_stream() {
                    this.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
