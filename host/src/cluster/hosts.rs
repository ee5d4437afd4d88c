//! The fleet's hosts as the control plane sees them: their heartbeats,
//! for `toolhost cluster status` and `cluster forget`.

use super::{ClusterError, GONE_AFTER, Key, chain, once, short};
use serde::Serialize;

/// A host's row in `cluster_hosts`, as `toolhost cluster status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct HostRow {
    /// `cluster.host_id`.
    pub host_id: String,
    /// The toolhost version it runs.
    pub version: String,
    /// Seconds since its last heartbeat.
    pub last_seen_secs: f64,
    /// The last change it applied.
    pub applied_seq: i64,
    /// Changes in the log after it.
    pub lag: i64,
    /// Its plugins, name to digest (or fingerprint).
    pub plugins: std::collections::BTreeMap<String, String>,
    /// Whether it is gone (no heartbeat for [`GONE_AFTER`]).
    pub gone: bool,
    /// Seconds since a heartbeat under this id found another running
    /// process's in its place (two hosts given one `cluster.host_id`).
    pub clash_secs: Option<f64>,
    /// Whether the row's tag checks with the fleet's key: one that does not
    /// was written by someone other than a host of this fleet.
    pub checks: bool,
}

/// A `cluster_hosts` row read as `status` reads it; `None` for a row of
/// another shape.
pub(super) fn host_row(key: &Key, latest: i64, r: &tokio_postgres::Row) -> Option<HostRow> {
    let host_id: String = r.try_get(0).ok()?;
    let version: String = r.try_get(1).ok()?;
    let last_seen_secs: f64 = r.try_get(2).ok()?;
    let applied_seq: i64 = r.try_get(3).ok()?;
    let plugins: String = r.try_get(4).ok()?;
    let instance: String = r.try_get(6).ok()?;
    let tag: String = r.try_get(7).ok()?;
    Some(HostRow {
        checks: key.checks_beat(&host_id, &instance, &version, applied_seq, &plugins, &tag),
        plugins: serde_json::from_str(&plugins).unwrap_or_default(),
        host_id,
        version,
        last_seen_secs,
        applied_seq,
        lag: latest - applied_seq,
        gone: last_seen_secs > GONE_AFTER.as_secs_f64(),
        clash_secs: r.try_get(5).ok()?,
    })
}

/// The columns [`host_row`] reads, in its order.
pub(super) const HOST_COLUMNS: &str =
    "host_id, version, extract(epoch FROM now() - last_seen)::float8, applied_seq, plugins,
    extract(epoch FROM now() - clash_at)::float8, instance, tag";

/// The fleet as the control plane sees it: every host that has written a
/// heartbeat, and the latest change made with the fleet's `key` (a row
/// that does not check is no change, and no host is behind for it).
/// Blocking; for `toolhost cluster status`.
pub fn status(url: &str, key: &Key) -> Result<(i64, Vec<HostRow>, Option<String>), ClusterError> {
    once(url, async |client| {
        let (latest, _, mut damage) = chain::check_log(client, key).await?;
        let foreign = chain::foreign_rows(client, key).await?;
        if damage.is_none() && foreign > 0 {
            damage = Some(format!(
                "{foreign} rows of cluster_changes were not written by this fleet's hosts (forged, or moved from their place): no host applies them; delete them, and find who can write to the database"
            ));
        }
        let rows = client.query(&format!("SELECT {HOST_COLUMNS} FROM cluster_hosts ORDER BY host_id"), &[]).await?;
        Ok((latest, rows.iter().filter_map(|r| host_row(key, latest, r)).collect(), damage))
    })
}

/// Deletes `host_id`'s heartbeat row: whether there was one. Blocking;
/// for `toolhost cluster forget`.
pub fn forget(url: &str, host_id: &str) -> Result<bool, ClusterError> {
    once(url, async |client| Ok(client.execute("DELETE FROM cluster_hosts WHERE host_id = $1", &[&host_id]).await? > 0))
}

/// What differs across the live hosts: versions, and plugins missing or at
/// another digest. Empty when they agree.
pub fn mismatches(hosts: &[HostRow]) -> Vec<String> {
    let live: Vec<&HostRow> = hosts.iter().filter(|h| !h.gone && h.checks).collect();
    let mut out = Vec::new();
    let versions: std::collections::BTreeSet<&str> = live.iter().map(|h| h.version.as_str()).collect();
    if versions.len() > 1 {
        out.push(format!("versions differ: {}", versions.into_iter().collect::<Vec<_>>().join(", ")));
    }
    let names: std::collections::BTreeSet<&String> = live.iter().flat_map(|h| h.plugins.keys()).collect();
    for name in names {
        let digests: std::collections::BTreeSet<Option<&String>> = live.iter().map(|h| h.plugins.get(name)).collect();
        if digests.len() > 1 {
            let each: Vec<String> = live
                .iter()
                .map(|h| format!("{}={}", h.host_id, h.plugins.get(name).map_or("missing", |d| short(d))))
                .collect();
            out.push(format!("plugin {name}: {}", each.join(", ")));
        }
    }
    out
}
