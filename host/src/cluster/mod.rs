//! The fleet's control plane (`cluster.url`): several hosts that behave as
//! one, through PostgreSQL rather than a protocol of our own.
//!
//! - Every run-time change made on a host (a plugin added by OCI reference,
//!   pinned to its digest; a plugin removed; a server added or removed; a
//!   DM override set or cleared) is appended to `cluster_changes` and
//!   announced on the channel [`CHANNEL`] with `NOTIFY`, in one
//!   transaction.
//! - Every host `LISTEN`s, and on each notice (and every few seconds, and
//!   after a reconnect) applies the changes after the last one it applied,
//!   in order, through the same paths as a local change: a plugin is pulled
//!   by digest through the trust policy and the capability checks.
//! - A host that starts, or comes back after a partition, catches up from
//!   the table, not from notices it missed, applying only the latest
//!   change to each plugin, server, agent and secret; `/readyz` is unready
//!   until it has.
//! - Each host writes a heartbeat row in `cluster_hosts` (version, last
//!   seen, last change applied, plugins and their digests):
//!   `toolhost cluster status` reads them.
//!
//! Changes are applied in the order the database gave them, but a host
//! applies its own change at once and skips it in the log (by its number,
//! not its origin's id): two operators
//! changing the same thing on two hosts within the same second can leave
//! those two hosts disagreeing until the next change to it. `cluster
//! status` flags hosts whose plugins differ.

mod chain;
mod hosts;
mod key;
mod sealed;
mod secrets;
mod sessions;
mod tasks;

use hosts::{HOST_COLUMNS, host_row};
pub use hosts::{HostRow, forget, mismatches, status};
pub use key::{Key, KeyError};
use key::{beat_tag, tag};
pub use secrets::{Applied, FleetSecret, list_secrets, read_secrets, remove_secret, set_secret, wait_applied};
pub use sessions::FleetSessions;
pub use tasks::FleetTasks;

use crate::memory::PgTarget;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

/// The `LISTEN/NOTIFY` channel of the control plane.
pub const CHANNEL: &str = "toolhost_changes";

/// How often a host writes its heartbeat, and reads the log even without
/// a notice.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// How long a stopping host waits with no request coming before it
/// exits: `deploy/haproxy.cfg` takes two failed checks 500 ms apart to see
/// it leave, and sends its sessions' requests elsewhere from then.
pub const HANDOVER: Duration = Duration::from_secs(2);

/// A host not seen for this long is listed as gone.
pub const GONE_AFTER: Duration = Duration::from_secs(10);

/// `cluster status` flags two hosts with one id for this long after a
/// heartbeat last found the other's in its place.
pub const CLASH_SHOWN: Duration = Duration::from_secs(30);

const SCHEMA: &str = r#"
SELECT pg_advisory_xact_lock(hashtext('toolhost cluster schema'));
CREATE TABLE IF NOT EXISTS cluster_changes (
    seq BIGSERIAL PRIMARY KEY, at TIMESTAMPTZ NOT NULL DEFAULT now(),
    host_id TEXT NOT NULL, change TEXT NOT NULL, tag TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cluster_hosts (
    host_id TEXT PRIMARY KEY, version TEXT NOT NULL, started TIMESTAMPTZ NOT NULL,
    last_seen TIMESTAMPTZ NOT NULL, applied_seq BIGINT NOT NULL, plugins TEXT NOT NULL);
ALTER TABLE cluster_hosts ADD COLUMN IF NOT EXISTS instance TEXT NOT NULL DEFAULT '';
ALTER TABLE cluster_hosts ADD COLUMN IF NOT EXISTS clash_at TIMESTAMPTZ;
ALTER TABLE cluster_hosts ADD COLUMN IF NOT EXISTS tag TEXT NOT NULL DEFAULT '';
ALTER TABLE cluster_changes ADD COLUMN IF NOT EXISTS prev TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS cluster_tasks (
    endpoint TEXT NOT NULL, id TEXT NOT NULL, host_id TEXT NOT NULL, record TEXT NOT NULL,
    tag TEXT NOT NULL, expires TIMESTAMPTZ NOT NULL, cancel_asked BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (endpoint, id));
CREATE TABLE IF NOT EXISTS cluster_sessions (
    endpoint TEXT NOT NULL, id TEXT NOT NULL, host_id TEXT NOT NULL, record TEXT NOT NULL,
    tag TEXT NOT NULL, expires TIMESTAMPTZ NOT NULL, PRIMARY KEY (endpoint, id));
CREATE TABLE IF NOT EXISTS cluster_secrets (
    plugin TEXT NOT NULL, name TEXT NOT NULL, sealed TEXT NOT NULL, seq BIGINT NOT NULL,
    set_at TIMESTAMPTZ NOT NULL DEFAULT now(), set_by TEXT NOT NULL, PRIMARY KEY (plugin, name));
"#;

/// One run-time change, as the log holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    /// A plugin added from a registry, pinned (`oci://...@sha256:...`).
    PluginAdded {
        /// The plugin's name.
        name: String,
        /// The pinned reference.
        reference: String,
    },
    /// A plugin removed.
    PluginRemoved {
        /// The plugin's name.
        name: String,
    },
    /// An external MCP server added.
    ServerAdded {
        /// Its configuration.
        server: Box<crate::config::McpServerConfig>,
    },
    /// An external MCP server removed.
    ServerRemoved {
        /// Its name.
        name: String,
    },
    /// A DM override: `agent` works at `tier` until the time given.
    OverrideSet {
        /// The agent.
        agent: String,
        /// The tier.
        tier: crate::budget::Tier,
        /// When it ends, in milliseconds since the Unix epoch.
        until_unix_ms: u64,
    },
    /// A DM override ended early.
    OverrideCleared {
        /// The agent.
        agent: String,
    },
    /// A plugin's secret set in `cluster_secrets` (the value is there,
    /// sealed, never in the log): every host reads the secrets again.
    SecretSet {
        /// The plugin.
        plugin: String,
        /// The secret's name.
        name: String,
    },
    /// A plugin's secret removed from `cluster_secrets`.
    SecretRemoved {
        /// The plugin.
        plugin: String,
        /// The secret's name.
        name: String,
    },
}

/// Why the control plane could not be reached or used.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// PostgreSQL failed.
    #[error("control plane {at}: {}", crate::memory::explain(.error))]
    Postgres {
        /// The URL, without its password.
        at: String,
        /// Why (its causes are in the message: tokio-postgres says "db
        /// error" or "error connecting to server" and keeps why in them).
        error: tokio_postgres::Error,
    },
    /// `cluster.url` could not be used.
    #[error("control plane {at}: {reason}")]
    Unusable {
        /// The URL, without its password.
        at: String,
        /// Why.
        reason: String,
    },
}

/// How a host applies a change from another host, and reports its plugins.
pub trait Apply: Send + Sync {
    /// Applies one change (on a blocking thread). A failure is logged; the
    /// host moves on to the next change.
    fn apply(&self, change: &Change) -> Result<(), String>;
    /// Puts the fleet's secrets in force (on a blocking thread), in place
    /// of those held; a failure is logged.
    fn secrets(&self, secrets: crate::secrets::Secrets) -> Result<(), String>;
    /// The plugins this host runs, name to digest, for its heartbeat.
    fn plugins(&self) -> std::collections::BTreeMap<String, String>;
}

thread_local! {
    /// Set while a change from the log is applied on this thread: the
    /// run-time record must not publish it again.
    static APPLYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is applying a change from the log.
pub fn applying_from_log() -> bool {
    APPLYING.with(std::cell::Cell::get)
}

/// A host's link to the control plane.
#[derive(Debug)]
pub struct Cluster {
    host_id: String,
    /// SHA-256 of `cluster.secret_key_file`: tags each change.
    key: Key,
    /// Where the control plane is, and how to reach it (`sslmode`).
    pg: PgTarget,
    target: String,
    /// The last change applied (or skipped as this host's own).
    applied: AtomicI64,
    caught_up: AtomicBool,
    /// The changes this process published (each applied here when it was
    /// made): the follower skips exactly these, so two hosts given the
    /// same `host_id` by mistake still apply each other's changes.
    published: Arc<std::sync::Mutex<std::collections::HashSet<i64>>>,
    /// Rows refused (their tags did not check), each logged once.
    refused: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// The tag of the last change applied: the next one chains to it.
    last_tag: std::sync::Mutex<String>,
    /// Damage found in the log (a break, a roll-back), said once each.
    damage: std::sync::Mutex<Option<String>>,
    /// When this host joined.
    started: std::time::SystemTime,
    /// This process, in its heartbeat row: another process writing the
    /// same row is another host with the same id.
    instance: String,
    /// Whether this process has written its heartbeat yet, and when it
    /// last said that another host has its id.
    beaten: AtomicBool,
    clash_said: std::sync::Mutex<Option<std::time::Instant>>,
    rt: Option<tokio::runtime::Runtime>,
}

impl Change {
    /// What the change is about: a later change to the same thing
    /// supersedes it.
    fn subject(&self) -> (&'static str, String) {
        match self {
            Change::PluginAdded { name, .. } | Change::PluginRemoved { name } => ("plugin", name.clone()),
            Change::ServerAdded { server } => ("server", server.name.clone()),
            Change::ServerRemoved { name } => ("server", name.clone()),
            Change::OverrideSet { agent, .. } | Change::OverrideCleared { agent } => ("override", agent.clone()),
            Change::SecretSet { plugin, name } | Change::SecretRemoved { plugin, name } => {
                ("secret", format!("{plugin}\n{name}"))
            }
        }
    }

    /// What the change does, for logs: its operation and what it names,
    /// never a server's settings (they may hold tokens and environment).
    pub fn describe(&self) -> String {
        match self {
            Change::PluginAdded { name, reference } => format!("plugin_added {name} from {reference}"),
            Change::PluginRemoved { name } => format!("plugin_removed {name}"),
            Change::ServerAdded { server } => format!("server_added {}", server.name),
            Change::ServerRemoved { name } => format!("server_removed {name}"),
            Change::OverrideSet { agent, tier, until_unix_ms } => {
                format!("override_set {agent} {tier} until {until_unix_ms}")
            }
            Change::OverrideCleared { agent } => format!("override_cleared {agent}"),
            Change::SecretSet { plugin, name } => format!("secret_set {plugin} {name}"),
            Change::SecretRemoved { plugin, name } => format!("secret_removed {plugin} {name}"),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Appends the change `text` from `host_id` to the log in `tx` and
/// announces it at commit; its sequence number.
async fn append(
    tx: &tokio_postgres::Transaction<'_>,
    key: &Key,
    host_id: &str,
    text: &str,
) -> Result<i64, tokio_postgres::Error> {
    // One publisher at a time: rows commit in the order of their numbers,
    // so a host reading the log never sees a later change before an
    // earlier one still committing (and skips it).
    tx.batch_execute("SELECT pg_advisory_xact_lock(hashtext('toolhost cluster publish'))").await?;
    let seq: i64 = tx.query_one("SELECT nextval(pg_get_serial_sequence('cluster_changes', 'seq'))", &[]).await?.get(0);
    // Chained to the change before it: a deleted or replaced row breaks
    // the chain ([`chain`]). No change is added to a damaged log: hosts
    // would not apply it, or apply it over a rewound history.
    let (_, prev, damage) = chain::check_log(tx, key).await?;
    if let Some(d) = damage {
        let said = format!("refused: {d}").replace('\'', "''");
        tx.batch_execute(&format!("DO $$ BEGIN RAISE EXCEPTION '{said}'; END $$")).await?;
    }
    let tag = chain::tag_change(key, seq, host_id, text, &prev);
    tx.execute(
        "INSERT INTO cluster_changes (seq, host_id, change, tag, prev) VALUES ($1, $2, $3, $4, $5)",
        &[&seq, &host_id, &text, &tag, &prev],
    )
    .await?;
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &seq.to_string()]).await?;
    Ok(seq)
}

async fn connect(
    pg: &PgTarget,
) -> Result<(tokio_postgres::Client, crate::memory::PgConnection), tokio_postgres::Error> {
    pg.connect(Duration::from_secs(5)).await
}

impl Cluster {
    /// Connects to the control plane at `url` as `host_id`, creating its
    /// tables where missing.
    pub fn connect(url: &str, host_id: &str, key: Key) -> Result<Arc<Cluster>, ClusterError> {
        let target = crate::memory::redact(url);
        let pg =
            PgTarget::parse(url).map_err(|e| ClusterError::Unusable { at: target.clone(), reason: e.to_string() })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("toolhost-cluster")
            .enable_all()
            .build()
            .map_err(|e| ClusterError::Unusable { at: target.clone(), reason: e.to_string() })?;
        let failed = |error| ClusterError::Postgres { at: target.clone(), error };
        rt.block_on(async {
            let (mut client, conn) = connect(&pg).await?;
            let driver = tokio::spawn(conn);
            let tx = client.transaction().await?;
            tx.batch_execute(SCHEMA).await?;
            tx.commit().await?;
            let fits = key_fits(&client, &key).await?;
            drop(client);
            let _ = driver.await;
            Ok::<_, tokio_postgres::Error>(fits)
        })
        .map_err(failed)
        .and_then(|fits| {
            if fits { Ok(()) } else { Err(ClusterError::Unusable { at: target.clone(), reason: NOT_THE_KEY.into() }) }
        })?;
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes)
            .map_err(|e| ClusterError::Unusable { at: target.clone(), reason: e.to_string() })?;
        let instance = hex::encode(bytes);
        Ok(Arc::new(Cluster {
            host_id: host_id.to_string(),
            key,
            pg,
            target,
            applied: AtomicI64::new(0),
            caught_up: AtomicBool::new(false),
            published: Default::default(),
            refused: Default::default(),
            last_tag: Default::default(),
            damage: Default::default(),
            started: std::time::SystemTime::now(),
            instance,
            beaten: AtomicBool::new(false),
            clash_said: Default::default(),
            rt: Some(rt),
        }))
    }

    /// This host's id.
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime lives until drop")
    }

    /// Appends `change` to the log and announces it, in one transaction.
    /// Returns its sequence number. Blocking.
    pub fn publish(&self, change: &Change) -> Result<i64, ClusterError> {
        // A server's credentials are sealed: the log never holds them.
        let text = serde_json::to_string(&change.sealed(&self.key)).expect("a change serializes");
        let (pg, host_id, key, published) =
            (self.pg.clone(), self.host_id.clone(), Key(self.key.0), self.published.clone());
        let work = async move {
            let (mut client, conn) = connect(&pg).await?;
            let driver = tokio::spawn(conn);
            let tx = client.transaction().await?;
            let seq = append(&tx, &key, &host_id, &text).await?;
            // Before the commit: the follower may read the row before this
            // returns. A number left by a failed commit is never reused.
            published.lock().unwrap_or_else(|p| p.into_inner()).insert(seq);
            tx.commit().await?;
            drop(client);
            let _ = driver.await;
            Ok::<_, tokio_postgres::Error>(seq)
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt().spawn(async move {
            let _ = tx.send(tokio::time::timeout(Duration::from_secs(10), work).await);
        });
        match rx.recv() {
            Ok(Ok(Ok(seq))) => Ok(seq),
            Ok(Ok(Err(error))) => Err(ClusterError::Postgres { at: self.target.clone(), error }),
            _ => Err(ClusterError::Unusable { at: self.target.clone(), reason: "no answer within 10 s".into() }),
        }
    }

    /// Starts following the log: catches up, then applies each change as
    /// it is announced, reconnecting after a failure; and writes this
    /// host's heartbeat on the same connection, every [`HEARTBEAT`] and
    /// after each change applied. `ready` is dropped after the first
    /// catch-up.
    pub fn follow(self: &Arc<Self>, apply: Arc<dyn Apply>, ready: Option<toolhost_core::readiness::ReadyHold>) {
        let me = self.clone();
        self.rt().spawn(async move {
            let mut ready = ready;
            loop {
                if let Err(e) = me.follow_once(&apply, &mut ready).await {
                    tracing::warn!(error = %crate::memory::explain(&e), "control plane: connection lost; catching up when it is back");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    async fn follow_once(
        &self,
        apply: &Arc<dyn Apply>,
        ready: &mut Option<toolhost_core::readiness::ReadyHold>,
    ) -> Result<(), tokio_postgres::Error> {
        use futures::StreamExt as _;
        let (client, mut conn) = connect(&self.pg).await?;
        let (notices_tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(m) = messages.next().await {
                match m {
                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => {
                        let _ = notices_tx.send(());
                    }
                    Ok(_) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        let mut last_beat: Option<std::time::Instant> = None;
        loop {
            let before = self.applied.load(Ordering::Acquire);
            self.catch_up(&client, apply).await?;
            // After a change applied at once, so that `cluster status`
            // sees it; otherwise every HEARTBEAT.
            if self.applied.load(Ordering::Acquire) != before || last_beat.is_none_or(|t| t.elapsed() >= HEARTBEAT) {
                self.heartbeat(&client, apply).await?;
                last_beat = Some(std::time::Instant::now());
            }
            if ready.take().is_some() {
                tracing::info!(applied = self.applied.load(Ordering::Acquire), "control plane: caught up");
            }
            self.caught_up.store(true, Ordering::Release);
            tokio::select! {
                n = notices.recv() => {
                    if n.is_none() {
                        break;
                    }
                    // A burst of notices is one read of the log.
                    while notices.try_recv().is_ok() {}
                }
                () = tokio::time::sleep(HEARTBEAT) => {}
            }
        }
        match driver.await {
            Ok(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    async fn catch_up(
        &self,
        client: &tokio_postgres::Client,
        apply: &Arc<dyn Apply>,
    ) -> Result<(), tokio_postgres::Error> {
        let first = !self.caught_up.load(Ordering::Acquire);
        let from = self.applied.load(Ordering::Acquire);
        let last_tag = self.last_tag.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // The change applied last must still be in the log as it was.
        let mut damage = None;
        if from > 0 {
            let still = client.query_opt("SELECT tag FROM cluster_changes WHERE seq = $1", &[&from]).await?;
            if still.and_then(|r| r.try_get::<_, String>(0).ok()).is_none_or(|t| t != last_tag) {
                damage = Some(chain::gone(from));
            }
        }
        // The heartbeats before the log: a change committed between the
        // two reads is in the log read second.
        let newest = chain::newest_applied(client, &self.key).await?;
        let rows = if damage.is_some() {
            Vec::new()
        } else {
            client
                .query(
                    &format!(
                        "SELECT {} FROM cluster_changes WHERE seq > $1 AND {} ORDER BY seq",
                        chain::LOG_COLUMNS,
                        chain::IN_RANGE
                    ),
                    &[&from],
                )
                .await?
        };
        let (rows, _, refused, broken) =
            chain::walk(rows.iter().filter_map(chain::log_row).collect(), &self.key, last_tag);
        damage = damage.or(broken);
        // A log that ends before what a host of the fleet applied (this
        // one's earlier run included) was rolled back.
        if damage.is_none() {
            let last = rows.last().map_or(from, |r| r.seq);
            if let Some((applied, by)) = newest
                && applied > last
            {
                damage = Some(chain::rolled_back(last, applied, &format!("host {}", crate::tool::log_safe(&by))));
            }
        }
        for seq in refused {
            // Not applied, and not counted as read either: a forged row
            // far ahead must not make this host skip the real changes
            // before it.
            if self.refused.lock().unwrap_or_else(|p| p.into_inner()).insert(seq) {
                tracing::warn!(
                    seq,
                    "control plane: a change not made with this fleet's key (cluster.secret_key_file), or moved from its place in the log, is ignored"
                );
            }
        }
        {
            let mut said = self.damage.lock().unwrap_or_else(|p| p.into_inner());
            if *said != damage {
                match &damage {
                    Some(d) => tracing::error!("{d}"),
                    None if said.is_some() => tracing::warn!("control plane: the change log is whole again"),
                    None => {}
                }
                said.clone_from(&damage);
            }
        }
        // Damage found at start: nothing from the log is applied (what it
        // says now is older than what the fleet served); a running host
        // applies the changes before a break, and none after.
        let rows = if first && damage.is_some() { Vec::new() } else { rows };
        // Only the last change to each thing counts: a starting host (or
        // one back after a partition) applies each plugin's, server's,
        // agent's latest change, not the whole history.
        let mut latest = std::collections::HashMap::new();
        for r in &rows {
            if let Ok(change) = serde_json::from_str::<Change>(&r.text) {
                latest.insert(change.subject(), r.seq);
            }
        }
        for row in rows {
            let chain::LogRow { seq, origin, text, tag, .. } = row;
            // This process's own changes were applied when they were made;
            // every other change is applied, those an earlier run of this
            // host made included (they may predate its local record).
            let own = self.published.lock().unwrap_or_else(|p| p.into_inner()).remove(&seq);
            if !own {
                match serde_json::from_str::<Change>(&text) {
                    Ok(change) if latest.get(&change.subject()) != Some(&seq) => {
                        tracing::debug!(seq, change = %change.describe(), "control plane: a change superseded later in the log");
                    }
                    Ok(change @ (Change::SecretSet { .. } | Change::SecretRemoved { .. })) => {
                        // At start, once after the log (below).
                        if !first {
                            self.load_secrets(client, apply).await?;
                        }
                        tracing::info!(seq, from = %crate::tool::log_safe(&origin), change = %change.describe(), "control plane: change applied");
                    }
                    Ok(change) => {
                        let change = match change.opened(&self.key) {
                            Ok(c) => c,
                            Err(e) => {
                                tracing::warn!(seq, error = %e, "control plane: change not applied");
                                self.applied.store(seq, Ordering::Release);
                                *self.last_tag.lock().unwrap_or_else(|p| p.into_inner()) = tag;
                                continue;
                            }
                        };
                        let applier = apply.clone();
                        // The change's records name the host that made it.
                        let actor = crate::audit::Actor::new(format!("host {origin}"), "cluster");
                        let outcome = tokio::task::spawn_blocking(move || {
                            APPLYING.with(|a| a.set(true));
                            let r = crate::audit::acting(actor, || applier.apply(&change));
                            APPLYING.with(|a| a.set(false));
                            r.map(|()| change)
                        })
                        .await;
                        match outcome {
                            Ok(Ok(change)) => {
                                tracing::info!(seq, from = %crate::tool::log_safe(&origin), change = %change.describe(), "control plane: change applied")
                            }
                            Ok(Err(e)) => {
                                tracing::warn!(seq, from = %origin, error = %e, "control plane: change not applied")
                            }
                            Err(e) => tracing::warn!(seq, error = %e, "control plane: applying a change failed"),
                        }
                    }
                    Err(e) => tracing::warn!(seq, error = %e, "control plane: a change this version does not read"),
                }
            }
            self.applied.store(seq, Ordering::Release);
            *self.last_tag.lock().unwrap_or_else(|p| p.into_inner()) = tag;
        }
        // At start the builder read the secrets before any plugin loaded;
        // they are read once more here, after the log (a change made since
        // is in it), not once per secret change the log holds.
        if first && damage.is_none() {
            self.load_secrets(client, apply).await?;
        }
        Ok(())
    }

    /// Reads the fleet's secrets and puts them in force on this host.
    async fn load_secrets(
        &self,
        client: &tokio_postgres::Client,
        apply: &Arc<dyn Apply>,
    ) -> Result<(), tokio_postgres::Error> {
        // A damaged log: the secrets in force stay (said in `current`).
        let Some(secrets) = secrets::load(client, &self.key).await? else { return Ok(()) };
        let applier = apply.clone();
        match tokio::task::spawn_blocking(move || applier.secrets(secrets)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "control plane: the fleet's secrets were not put in force"),
            Err(e) => tracing::warn!(error = %e, "control plane: putting the fleet's secrets in force failed"),
        }
        Ok(())
    }

    async fn heartbeat(
        &self,
        client: &tokio_postgres::Client,
        apply: &Arc<dyn Apply>,
    ) -> Result<(), tokio_postgres::Error> {
        let started = self.started;
        let plugins = serde_json::to_string(&apply.plugins()).unwrap_or_else(|_| "{}".into());
        let started_secs = started.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        // A row last written by another process, after this one's first
        // heartbeat, is another host running with this id.
        let beaten = self.beaten.load(Ordering::Acquire);
        let applied = self.applied.load(Ordering::Acquire);
        let version = env!("CARGO_PKG_VERSION");
        let tag = beat_tag(&self.key.0, &self.host_id, &self.instance, version, applied, &plugins);
        let row = client
            .query_one(
                "INSERT INTO cluster_hosts (host_id, version, started, last_seen, applied_seq, plugins, instance, tag)
                 VALUES ($1, $2, to_timestamp($3), now(), $4, $5, $6, $8)
                 ON CONFLICT (host_id) DO UPDATE SET version = EXCLUDED.version, started = EXCLUDED.started,
                   last_seen = now(), applied_seq = EXCLUDED.applied_seq, plugins = EXCLUDED.plugins,
                   instance = EXCLUDED.instance, tag = EXCLUDED.tag,
                   clash_at = CASE WHEN $7 AND cluster_hosts.instance <> EXCLUDED.instance
                                   THEN now() ELSE cluster_hosts.clash_at END
                 RETURNING clash_at IS NOT NULL AND clash_at = now()",
                &[&self.host_id, &version, &started_secs, &applied, &plugins, &self.instance, &beaten, &tag],
            )
            .await?;
        self.beaten.store(true, Ordering::Release);
        if row.try_get::<_, bool>(0).unwrap_or(false) {
            let mut said = self.clash_said.lock().unwrap_or_else(|p| p.into_inner());
            if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                *said = Some(std::time::Instant::now());
                tracing::error!(
                    host_id = %crate::tool::log_safe(&self.host_id),
                    "control plane: another running host has this cluster.host_id; give each host its own (its audit records and its row in `cluster status` are mixed with this host's)"
                );
            }
        }
        Ok(())
    }
}

/// Whether `key` is the fleet's: some change among the latest in the log
/// checks with it (or the log holds none yet).
async fn key_fits(client: &tokio_postgres::Client, key: &Key) -> Result<bool, tokio_postgres::Error> {
    // The oldest changes and the latest within the log's own numbers (rows
    // forged outside them are never read), and the hosts' heartbeats: rows
    // forged among them cannot hide them all.
    let rows = client
        .query(
            &format!(
                "(SELECT {c} FROM cluster_changes WHERE {r} ORDER BY seq LIMIT 500)
                 UNION (SELECT {c} FROM cluster_changes WHERE {r} ORDER BY seq DESC LIMIT 500)",
                c = chain::LOG_COLUMNS,
                r = chain::IN_RANGE
            ),
            &[],
        )
        .await?;
    let rows: Vec<_> = rows.iter().filter_map(chain::log_row).collect();
    if rows.is_empty() || rows.iter().any(|r| r.checks(key)) {
        return Ok(true);
    }
    Ok(chain::newest_applied(client, key).await?.is_some())
}

/// What a key that is not the fleet's is told.
const NOT_THE_KEY: &str = "cluster.secret_key_file is not this fleet's key: no change in the control plane's log checks with it (every host and every operator must hold the same file); nothing was changed";

/// Refuses `key` when it is not the fleet's (`key_fits`), and, when
/// `to_write`, a control plane no host has joined yet (its first host's
/// key becomes the fleet's: a change written before with another file
/// would keep every host out). Blocking; for the CLI.
pub fn check_key(url: &str, key: &Key, to_write: bool) -> Result<(), ClusterError> {
    let (fits, hosts) = once(url, async |client| {
        let hosts: i64 = client.query_one("SELECT count(*) FROM cluster_hosts", &[]).await?.try_get(0).unwrap_or(0);
        Ok((key_fits(client, key).await?, hosts))
    })?;
    let at = crate::memory::redact(url);
    if !fits {
        return Err(ClusterError::Unusable { at, reason: NOT_THE_KEY.into() });
    }
    if to_write && hosts == 0 {
        return Err(ClusterError::Unusable {
            at,
            reason: "no host has joined this control plane yet: start the fleet's first host (toolhost serve --http with this cluster.url), then run this again; is cluster.url the fleet's?".into(),
        });
    }
    Ok(())
}

/// Runs `work` on one connection to the control plane at `url`, on a
/// runtime of its own (for the CLI, which has none).
fn once<T>(
    url: &str,
    work: impl AsyncFnOnce(&mut tokio_postgres::Client) -> Result<T, tokio_postgres::Error>,
) -> Result<T, ClusterError> {
    let target = crate::memory::redact(url);
    let pg = PgTarget::parse(url).map_err(|e| ClusterError::Unusable { at: target.clone(), reason: e.to_string() })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Unusable { at: target.clone(), reason: e.to_string() })?;
    rt.block_on(async {
        let (mut client, conn) = connect(&pg).await?;
        let driver = tokio::spawn(conn);
        // Before any host has made the tables, they are empty, not missing.
        let out = match client.batch_execute(SCHEMA).await {
            Ok(()) => work(&mut client).await,
            Err(e) => Err(e),
        };
        drop(client);
        let _ = driver.await;
        out
    })
    .map_err(|error| ClusterError::Postgres { at: target, error })
}

/// This machine's name (`localhost` when it has none): in a host's default
/// id and in the origin of a change the CLI makes.
pub fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|n| n.trim().to_string()).unwrap_or_default();
    if name.is_empty() { "localhost".to_string() } else { name }
}

/// A digest's first 12 hex digits, for listings.
pub fn short(digest: &str) -> &str {
    let d = digest.strip_prefix("sha256:").unwrap_or(digest);
    d.get(..12).unwrap_or(d)
}
