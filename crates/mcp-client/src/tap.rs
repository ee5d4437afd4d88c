//! An upstream's progress reports, taken off its connection in the order
//! they arrive.
//!
//! rmcp hands each notification to the client's handler on a task of its
//! own, while the response that follows it goes to its caller at once: a
//! server's last `notifications/progress` could reach the relay after its
//! call's result had gone to the client (2 to 4 calls in 12 through the
//! HTTP front, issue #48), and the client dropped it. [`Tapped`] relays a
//! progress report as the message is read, before the next message (the
//! response) is: every report a server sends before its result reaches the
//! caller before that result.

use super::server::Server;
use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, JsonRpcNotification, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use std::sync::Arc;

/// A client transport whose progress notifications go to the server's
/// relay as they are read; everything else passes to rmcp unchanged.
pub(super) struct Tapped<T> {
    inner: T,
    server: Arc<Server>,
}

impl<T> Tapped<T> {
    pub(super) fn new(inner: T, server: Arc<Server>) -> Tapped<T> {
        Tapped { inner, server }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            let JsonRpcMessage::Notification(JsonRpcNotification {
                notification: ServerNotification::ProgressNotification(p),
                ..
            }) = &message
            else {
                return Some(message);
            };
            if self.server.notices.admit(&self.server.cfg.name)
                && let Some(token) = super::relay::token_number(&p.params.progress_token)
            {
                let p = p.params.clone();
                self.server.relay.progress(token, p.progress, p.total, p.message);
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
