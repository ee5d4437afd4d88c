//! Tasks a fleet's hosts share (`cluster_tasks`): a task made through one
//! host is read, waited for and cancelled through any other
//! ([`crate::mcp::server::TaskShare`]).
//!
//! The host that runs a task writes its record when it starts (before the
//! client hears of it) and when it ends; another host reads it there, and
//! asks for a cancellation by marking the row (the running host looks
//! every second, and stops the call). Each record is tagged with the
//! cluster key, as the change log is: a row someone wrote to the database
//! without the key is not served. Rows past their time are deleted when a
//! task starts.

use super::{Cluster, tag};
use crate::mcp::server::{ShareError, TaskShare};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The control plane as a fleet's shared task store.
#[derive(Debug)]
pub struct FleetTasks {
    cluster: Arc<Cluster>,
    connections: Lent,
}

/// Connections to the control plane lent to one use (tasks, sessions): a
/// pool of at most [`CONNECTIONS`], kept open between uses, so that a
/// flood of reads of unknown ids waits here (within the caller's wait),
/// not in PostgreSQL's `max_connections`.
#[derive(Clone)]
pub(super) struct Lent {
    pool: deadpool_postgres::Pool,
    key: [u8; 32],
}

impl std::fmt::Debug for Lent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent").field("status", &self.pool.status()).finish_non_exhaustive()
    }
}

/// The most connections one use holds at once.
const CONNECTIONS: usize = 4;

impl Lent {
    pub(super) fn new(cluster: Arc<Cluster>) -> Lent {
        use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
        let manager = Manager::from_config(
            cluster.pg.config.clone(),
            cluster.pg.tls.clone(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let wait = Some(Duration::from_secs(5));
        let pool = Pool::builder(manager)
            .max_size(CONNECTIONS)
            .runtime(Runtime::Tokio1)
            .wait_timeout(wait)
            .create_timeout(wait)
            .recycle_timeout(wait)
            .build()
            .expect("a pool with a runtime and timeouts builds");
        Lent { pool, key: cluster.key.0 }
    }

    /// Runs `work` on a pooled connection, with the cluster key.
    pub(super) fn with<T: Send + 'static, F>(
        &self,
        work: impl FnOnce(deadpool_postgres::Object, [u8; 32]) -> F + Send + 'static,
    ) -> BoxFuture<'static, Result<T, ShareError>>
    where
        F: std::future::Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
    {
        let (pool, key) = (self.pool.clone(), self.key);
        Box::pin(async move {
            let client = pool.get().await.map_err(|e| ShareError(format!("the control plane: {e}")))?;
            work(client, key).await.map_err(failed)
        })
    }
}

/// The tag of task `id` of `endpoint` with `record` (distinct from any
/// change's: those are tagged with their sequence number, from 1).
fn task_tag(key: &[u8; 32], endpoint: &str, id: &str, record: &str) -> String {
    tag(key, 0, &format!("task\n{endpoint}\n{id}"), record)
}

pub(super) fn failed(e: tokio_postgres::Error) -> ShareError {
    ShareError(format!("the control plane: {e}"))
}

impl FleetTasks {
    /// Tasks shared through `cluster`.
    pub fn new(cluster: Arc<Cluster>) -> FleetTasks {
        FleetTasks { connections: Lent::new(cluster.clone()), cluster }
    }

    /// A row's record, when its tag checks.
    fn checked(key: &[u8; 32], endpoint: &str, id: &str, record: &str, tagged: &str) -> Option<Value> {
        if !toolhost_base::seal::same_secret(task_tag(key, endpoint, id, record).as_bytes(), tagged.as_bytes()) {
            tracing::warn!(endpoint, task = id, "a shared task's row does not carry the cluster key's tag: not served");
            return None;
        }
        serde_json::from_str(record).ok()
    }
}

impl TaskShare for FleetTasks {
    fn put(
        &self,
        endpoint: &str,
        id: &str,
        record: Value,
        ttl: Duration,
        ending: bool,
    ) -> BoxFuture<'static, Result<bool, ShareError>> {
        let (endpoint, id, host) = (endpoint.to_string(), id.to_string(), self.cluster.host_id.clone());
        self.connections.with(move |client, key| async move {
            let text = record.to_string();
            let tagged = task_tag(&key, &endpoint, &id, &text);
            if ending {
                // Not over a cancellation asked through another host.
                client
                    .execute(
                        "UPDATE cluster_tasks SET record = $3, tag = $4 WHERE endpoint = $1 AND id = $2 AND NOT cancel_asked",
                        &[&endpoint, &id, &text, &tagged],
                    )
                    .await?;
                let row = client
                    .query_opt("SELECT cancel_asked FROM cluster_tasks WHERE endpoint = $1 AND id = $2", &[&endpoint, &id])
                    .await?;
                return Ok(row.is_some_and(|r| r.try_get::<_, bool>(0).unwrap_or(false)));
            }
            client.execute("DELETE FROM cluster_tasks WHERE expires < now()", &[]).await?;
            client
                .execute(
                    "INSERT INTO cluster_tasks (endpoint, id, host_id, record, tag, expires) \
                     VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6)) \
                     ON CONFLICT (endpoint, id) DO UPDATE SET record = EXCLUDED.record, tag = EXCLUDED.tag",
                    &[&endpoint, &id, &host, &text, &tagged, &ttl.as_secs_f64()],
                )
                .await?;
            Ok(false)
        })
    }

    fn get(&self, endpoint: &str, id: &str) -> BoxFuture<'static, Result<Option<Value>, ShareError>> {
        let (endpoint, id) = (endpoint.to_string(), id.to_string());
        self.connections.with(move |client, key| async move {
            let row = client
                .query_opt(
                    "SELECT record, tag FROM cluster_tasks WHERE endpoint = $1 AND id = $2 AND expires > now()",
                    &[&endpoint, &id],
                )
                .await?;
            Ok(row.and_then(|r| {
                let (record, tagged): (String, String) = (r.try_get(0).ok()?, r.try_get(1).ok()?);
                FleetTasks::checked(&key, &endpoint, &id, &record, &tagged)
            }))
        })
    }

    fn cancel(&self, endpoint: &str, id: &str) -> BoxFuture<'static, Result<Option<Value>, ShareError>> {
        let (endpoint, id) = (endpoint.to_string(), id.to_string());
        self.connections.with(move |mut client, key| async move {
            let tx = client.transaction().await?;
            let row = tx
                .query_opt(
                    "SELECT record, tag FROM cluster_tasks WHERE endpoint = $1 AND id = $2 AND expires > now() FOR UPDATE",
                    &[&endpoint, &id],
                )
                .await?;
            let Some(mut record) = row.and_then(|r| {
                let (record, tagged): (String, String) = (r.try_get(0).ok()?, r.try_get(1).ok()?);
                FleetTasks::checked(&key, &endpoint, &id, &record, &tagged)
            }) else {
                return Ok(None);
            };
            if record["status"] == "working" {
                record["status"] = "cancelled".into();
                record["message"] = "cancelled by the client".into();
                record["updated"] = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true).into();
                let text = record.to_string();
                let tagged = task_tag(&key, &endpoint, &id, &text);
                tx.execute(
                    "UPDATE cluster_tasks SET record = $3, tag = $4, cancel_asked = true WHERE endpoint = $1 AND id = $2",
                    &[&endpoint, &id, &text, &tagged],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(Some(record))
        })
    }

    fn cancel_asked(&self, endpoint: &str, id: &str) -> BoxFuture<'static, Result<bool, ShareError>> {
        let (endpoint, id) = (endpoint.to_string(), id.to_string());
        self.connections.with(move |client, _| async move {
            let row = client
                .query_opt("SELECT cancel_asked FROM cluster_tasks WHERE endpoint = $1 AND id = $2", &[&endpoint, &id])
                .await?;
            Ok(row.is_some_and(|r| r.try_get::<_, bool>(0).unwrap_or(false)))
        })
    }
}
