//! Sessions a fleet's hosts share: a 2025-11-25 session (`Mcp-Session-Id`)
//! begun on one host goes on on any other, which restores it from the
//! control plane instead of answering 404 ([`SessionShare`]).
//!
//! What is shared is what the client agreed in `initialize` (its protocol
//! version, capabilities and name): rmcp replays that handshake on the host
//! that did not begin the session. What the session did since lives on the
//! host that served it and starts afresh: its log level, resource
//! subscriptions and the tier of a turn in progress. A restored session is
//! told its tool list may have changed (`notifications/tools/list_changed`),
//! since it may have missed an announcement while it moved.

use super::*;
use crate::server::ShareError;
use futures::future::BoxFuture;
use rmcp::transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError};
use serde_json::Value;

/// Where a fleet's hosts keep their HTTP sessions (the control plane's
/// PostgreSQL, `cluster.url`). A record is what rmcp needs to restore a
/// session: its `initialize` parameters, as JSON. Records are kept per
/// endpoint (an agent's name, `""` for the operator's), so that a session
/// begun on one agent's endpoint is never restored on another's, and
/// expire `idle` after they were last used, as the session does.
pub trait SessionShare: Send + Sync + std::fmt::Debug + 'static {
    /// The session's record, when it is there and not expired; reading it
    /// counts as using it.
    fn load(&self, endpoint: &str, id: &str, idle: Duration) -> BoxFuture<'static, Result<Option<Value>, ShareError>>;
    /// Keeps `record` for the session, for `idle` from now.
    fn store(
        &self,
        endpoint: &str,
        id: &str,
        record: Value,
        idle: Duration,
    ) -> BoxFuture<'static, Result<(), ShareError>>;
    /// The session was used: it expires `idle` from now. `false`: it is
    /// not shared any more (ended through another host, or expired).
    fn touch(&self, endpoint: &str, id: &str, idle: Duration) -> BoxFuture<'static, Result<bool, ShareError>>;
    /// The session ended (the client deleted it).
    fn delete(&self, endpoint: &str, id: &str) -> BoxFuture<'static, Result<(), ShareError>>;
}

/// One endpoint's sessions in a [`SessionShare`], as rmcp's session store.
#[derive(Debug)]
pub(super) struct EndpointSessions {
    pub(super) share: Arc<dyn SessionShare>,
    pub(super) endpoint: String,
    pub(super) idle: Duration,
}

#[async_trait::async_trait]
impl SessionStore for EndpointSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(record) = self.share.load(&self.endpoint, id, self.idle).await? else {
            return Ok(None);
        };
        match serde_json::from_value(record) {
            Ok(state) => Ok(Some(state)),
            Err(e) => {
                tracing::warn!(session = %id, "a shared session's record cannot be read ({e}): not restored");
                Ok(None)
            }
        }
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let record = serde_json::to_value(state)?;
        Ok(self.share.store(&self.endpoint, id, record, self.idle).await?)
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        Ok(self.share.delete(&self.endpoint, id).await?)
    }
}

/// How often a session in use is touched in the share at most: a call
/// does not write to the control plane each time. Also how long a session
/// ended through another host goes on here at most.
pub(super) fn touch_every(idle: Duration) -> Duration {
    (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(10))
}
