//! Sessions a fleet's hosts share (`cluster_sessions`): a 2025-11-25 MCP
//! session begun on one host goes on on any other
//! ([`crate::mcp::http::SessionShare`]), so a client whose host died or
//! stopped is not answered 404 by the next.
//!
//! A row holds what the client agreed in `initialize`, tagged with the
//! cluster key as the change log is (a row written to the database without
//! the key is not restored), and expires `server.session_idle_secs` after
//! the session was last used, as the session itself does. Expired rows are
//! deleted when a session begins.

use super::tasks::Lent;
use super::{Cluster, tag};
use crate::mcp::http::SessionShare;
use crate::mcp::server::ShareError;
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The control plane as a fleet's shared session store.
#[derive(Debug)]
pub struct FleetSessions {
    host_id: String,
    connections: Lent,
}

/// The largest record a host shares or reads (a session's `initialize`
/// parameters): 256 KiB.
const MAX_RECORD: i32 = 256 << 10;

/// The tag of session `id` of `endpoint` with `record` (distinct from a
/// change's, tagged with its sequence number, and from a task's).
fn session_tag(key: &[u8; 32], endpoint: &str, id: &str, record: &str) -> String {
    tag(key, 0, &format!("session\n{endpoint}\n{id}"), record)
}

impl FleetSessions {
    /// Sessions shared through `cluster`.
    pub fn new(cluster: Arc<Cluster>) -> FleetSessions {
        FleetSessions { host_id: cluster.host_id.clone(), connections: Lent::new(cluster) }
    }
}

impl SessionShare for FleetSessions {
    fn load(&self, endpoint: &str, id: &str, idle: Duration) -> BoxFuture<'static, Result<Option<Value>, ShareError>> {
        let (endpoint, id) = (endpoint.to_string(), id.to_string());
        self.connections.with(move |client, key| async move {
            // A record past the size any host writes is not read at all.
            let row = client
                .query_opt(
                    "SELECT record, tag FROM cluster_sessions \
                     WHERE endpoint = $1 AND id = $2 AND expires > now() AND octet_length(record) <= $3",
                    &[&endpoint, &id, &MAX_RECORD],
                )
                .await?;
            let Some(record) = row.and_then(|r| {
                let (record, tagged): (String, String) = (r.try_get(0).ok()?, r.try_get(1).ok()?);
                if !toolhost_base::seal::same_secret(
                    session_tag(&key, &endpoint, &id, &record).as_bytes(),
                    tagged.as_bytes(),
                ) {
                    tracing::warn!(endpoint, "a shared session's row does not carry the cluster key's tag: not restored");
                    return None;
                }
                serde_json::from_str::<Value>(&record).ok()
            }) else {
                return Ok(None);
            };
            // Read: used now (only a row whose tag checked).
            client
                .execute(
                    "UPDATE cluster_sessions SET expires = now() + make_interval(secs => $3) WHERE endpoint = $1 AND id = $2",
                    &[&endpoint, &id, &idle.as_secs_f64()],
                )
                .await?;
            Ok(Some(record))
        })
    }

    fn store(
        &self,
        endpoint: &str,
        id: &str,
        record: Value,
        idle: Duration,
    ) -> BoxFuture<'static, Result<(), ShareError>> {
        let (endpoint, id, host) = (endpoint.to_string(), id.to_string(), self.host_id.clone());
        self.connections.with(move |client, key| async move {
            let text = record.to_string();
            if text.len() > MAX_RECORD as usize {
                // Not shared: the session is this host's only.
                tracing::warn!(endpoint, "a session's initialize parameters are too large to share with the fleet");
                return Ok(());
            }
            let tagged = session_tag(&key, &endpoint, &id, &text);
            client.execute("DELETE FROM cluster_sessions WHERE expires < now()", &[]).await?;
            client
                .execute(
                    "INSERT INTO cluster_sessions (endpoint, id, host_id, record, tag, expires) \
                     VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6)) \
                     ON CONFLICT (endpoint, id) DO UPDATE SET record = EXCLUDED.record, tag = EXCLUDED.tag, \
                     expires = EXCLUDED.expires",
                    &[&endpoint, &id, &host, &text, &tagged, &idle.as_secs_f64()],
                )
                .await?;
            Ok(())
        })
    }

    fn touch(&self, endpoint: &str, id: &str, idle: Duration) -> BoxFuture<'static, Result<bool, ShareError>> {
        let (endpoint, id) = (endpoint.to_string(), id.to_string());
        self.connections.with(move |client, _| async move {
            let touched = client
                .execute(
                    "UPDATE cluster_sessions SET expires = now() + make_interval(secs => $3) \
                     WHERE endpoint = $1 AND id = $2 AND expires > now()",
                    &[&endpoint, &id, &idle.as_secs_f64()],
                )
                .await?;
            Ok(touched > 0)
        })
    }

    fn delete(&self, endpoint: &str, id: &str) -> BoxFuture<'static, Result<(), ShareError>> {
        let (endpoint, id) = (endpoint.to_string(), id.to_string());
        self.connections.with(move |client, _| async move {
            client.execute("DELETE FROM cluster_sessions WHERE endpoint = $1 AND id = $2", &[&endpoint, &id]).await?;
            Ok(())
        })
    }
}
