//! One MCP client served over a line transport, as `toolhost serve --stdio`
//! serves it: the library function the binary and the end-to-end tests
//! share.
//!
//! The session runs on a current-thread runtime driven by a thread of its
//! own, which also runs the calls measured fast between its polls (the
//! [`lane`](crate::lane)): no thread hop for those. Fast calls go from the
//! transport straight to the lane, around rmcp's service
//! ([`DirectFront`]); a call's notifications go straight to the output, so
//! they (and the call's answer) still go out once the input has ended.
//! Other calls, and the blocking host functions of lane calls, run on the
//! runtime given as `calls`.

use super::LineTransport;
use crate::McpFront;
use crate::lane::{self, CallLane};
use crate::server::DirectFront;
use rmcp::ServiceExt as _;
use std::sync::Arc;
use tokio::io::AsyncBufRead;
use tokio::sync::oneshot;

/// Why a stdio session could not start, or how it ended badly.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The session's runtime or thread could not be started.
    #[error("starting the stdio session's {what}: {source}")]
    Start {
        /// What could not be started.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The client's `initialize` exchange failed.
    #[error("MCP initialization over stdio: {0}")]
    Initialize(#[source] Box<rmcp::service::ServerInitializeError>),
    /// The session's service task failed.
    #[error("MCP session over stdio: {0}")]
    Session(#[source] tokio::task::JoinError),
    /// The session's thread ended without saying how (it panicked).
    #[error("the stdio session's thread ended without a word")]
    Lost,
}

/// How a session takes its calls.
#[derive(Debug, Clone, Copy)]
pub struct SessionOptions {
    /// Fast calls go from the transport straight to the lane, around
    /// rmcp's service (true for `serve --stdio`).
    pub direct_calls: bool,
    /// How long the session polls its input for the next message before
    /// sleeping on it ([`super::INPUT_POLL`] by default; zero: never).
    pub input_poll: std::time::Duration,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions { direct_calls: true, input_poll: super::INPUT_POLL }
    }
}

/// A stdio session being served on a thread of its own.
#[derive(Debug)]
pub struct StdioSession {
    lane: Arc<CallLane>,
    direct: Arc<DirectFront>,
    /// The transport's output, once the session's thread has made it.
    replies: Arc<std::sync::OnceLock<super::Replies>>,
    ended: oneshot::Receiver<Result<(), SessionError>>,
    thread: std::thread::JoinHandle<()>,
}

impl StdioSession {
    /// Serves `front`'s tools to the one client behind the transport that
    /// `transport` makes (called on the session's thread, inside its
    /// runtime: [`super::stdio`] for this process's stdin and stdout,
    /// [`super::over`] for any pair of streams). Calls that are not run in
    /// the lane run on `calls`.
    pub fn start<R, T>(
        front: McpFront,
        calls: tokio::runtime::Handle,
        transport: T,
        options: SessionOptions,
    ) -> Result<StdioSession, SessionError>
    where
        R: AsyncBufRead + Send + Unpin + 'static,
        T: FnOnce() -> LineTransport<R> + Send + 'static,
    {
        let (lane, driver) = lane::lane(calls);
        let front = front.with_lane(lane.clone());
        let direct = Arc::new(DirectFront::new(front.clone()));
        let session_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| SessionError::Start { what: "runtime", source })?;
        let (done_tx, ended) = oneshot::channel();
        let taking = direct.clone();
        let replies = Arc::new(std::sync::OnceLock::new());
        let made = replies.clone();
        let thread = std::thread::Builder::new()
            .name("toolhost-stdio".into())
            .spawn(move || {
                let served = driver.run(&session_rt, async move {
                    let transport = transport().with_input_poll(options.input_poll);
                    let output = transport.replies();
                    let _ = made.set(transport.replies());
                    let front = front.with_replies(transport.replies());
                    let transport = if options.direct_calls { transport.with_direct(taking) } else { transport };
                    let service = match front.serve(transport).await {
                        Ok(service) => service,
                        Err(e) => {
                            // rmcp drops the transport without closing it:
                            // what was answered before still goes out.
                            output.finish().await;
                            return Err(SessionError::Initialize(Box::new(e)));
                        }
                    };
                    service.waiting().await.map(drop).map_err(SessionError::Session)
                });
                // A read of stdin may still be pending: do not wait for it.
                session_rt.shutdown_background();
                let _ = done_tx.send(served);
            })
            .map_err(|source| SessionError::Start { what: "thread", source })?;
        Ok(StdioSession { lane, direct, replies, ended, thread })
    }

    /// The session's call lane.
    pub fn lane(&self) -> &Arc<CallLane> {
        &self.lane
    }

    /// What takes the session's calls around rmcp's service (it takes none
    /// when started without [`SessionOptions::direct_calls`]).
    pub fn direct(&self) -> &Arc<DirectFront> {
        &self.direct
    }

    /// What a stop waits for: the session's requests not answered yet
    /// (an idle client holds nothing), read through the handle.
    pub fn unanswered(&self) -> Unanswered {
        Unanswered(self.replies.clone())
    }

    /// Waits for the session to end: the client closed its input, or the
    /// output, or the session failed.
    pub async fn ended(self) -> Result<(), SessionError> {
        let StdioSession { ended, thread, .. } = self;
        let r = ended.await.map_err(|_| SessionError::Lost).and_then(|r| r);
        // The thread has sent its word (or died): joining does not block.
        let _ = thread.join();
        r
    }
}

/// A handle on a [`StdioSession`]'s requests not answered yet, which stays
/// while [`StdioSession::ended`] is awaited.
#[derive(Debug, Clone)]
pub struct Unanswered(Arc<std::sync::OnceLock<super::Replies>>);

impl Unanswered {
    /// Requests the session has read and not answered yet (0 before its
    /// transport is made).
    pub fn count(&self) -> usize {
        self.0.get().map_or(0, super::Replies::unanswered)
    }

    /// Closes the session's output and waits until what is queued is
    /// written (for as long as the client reads): the answers given go out
    /// before the process ends.
    pub async fn flush(&self) {
        if let Some(r) = self.0.get() {
            r.finish().await;
        }
    }
}
