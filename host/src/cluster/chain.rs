//! The change log as a chain: each change's tag covers the tag of the
//! change before it, so a change deleted from the log, or replaced by an
//! older one, breaks the chain where it stood; and a log that ends before
//! a change some host has applied (its heartbeat, tagged, says so) was
//! rolled back. Hosts stop applying changes at such damage, with a clear
//! message, and `cluster status` reports it (exit 1).
//!
//! Rows are read only within the log's sequence (1 to the sequence's last
//! value): rows forged with numbers out of that range are never read, so
//! that no number of them hides the real log or stops a host from starting.

use super::Key;

/// A row of `cluster_changes`, as [`LOG_COLUMNS`] reads it.
#[derive(Debug, Clone)]
pub(super) struct LogRow {
    pub(super) seq: i64,
    pub(super) origin: String,
    pub(super) text: String,
    pub(super) tag: String,
    /// The tag of the change before it (`""`: the first change, or one
    /// written before the log was a chain).
    pub(super) prev: String,
}

/// The columns [`log_row`] reads.
pub(super) const LOG_COLUMNS: &str = "seq, host_id, change, tag, prev";

/// Rows within the log's sequence: `seq BETWEEN 1 AND` its last value.
pub(super) const IN_RANGE: &str = "seq BETWEEN 1 AND (SELECT last_value FROM cluster_changes_seq_seq)";

/// A row read with [`LOG_COLUMNS`]; `None` for a row of another shape.
pub(super) fn log_row(row: &tokio_postgres::Row) -> Option<LogRow> {
    Some(LogRow {
        seq: row.try_get(0).ok()?,
        origin: row.try_get(1).ok()?,
        text: row.try_get(2).ok()?,
        tag: row.try_get(3).ok()?,
        prev: row.try_get(4).ok()?,
    })
}

/// The key a chained change is tagged with: derived from the fleet's, so
/// that no chained row can be rewritten into a row without `prev` (the
/// first change, or one from before the chain) whose tag still checks.
fn chain_key(key: &Key) -> Key {
    Key(toolhost_base::seal::tag(&key.0, &[b"toolhost change chain v1"]))
}

/// Whether `prev` is a tag (64 hex digits): what a chained row names.
fn is_tag(prev: &str) -> bool {
    prev.len() == 64 && prev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The tag of change `text` from `host_id` at `seq`, chained to `prev`
/// (`""`: the first change).
pub(super) fn tag_change(key: &Key, seq: i64, host_id: &str, text: &str, prev: &str) -> String {
    if prev.is_empty() {
        super::tag(&key.0, seq, host_id, text)
    } else {
        // `prev` is always 64 hex digits: text and prev split one way only.
        super::tag(&chain_key(key).0, seq, host_id, &format!("{text}\n{prev}"))
    }
}

impl LogRow {
    /// Whether the row was written by a host of this fleet, at its place.
    pub(super) fn checks(&self, key: &Key) -> bool {
        if self.prev.is_empty() {
            key.checks(self.seq, &self.origin, &self.text, &self.tag)
        } else {
            is_tag(&self.prev)
                && chain_key(key).checks(self.seq, &self.origin, &format!("{}\n{}", self.text, self.prev), &self.tag)
        }
    }
}

/// Where the chain broke, in words for the operator.
pub(super) fn broken_before(seq: i64) -> String {
    format!(
        "the control plane's change log is damaged: the change before {seq} is missing or was replaced (a row deleted or rewritten in cluster_changes); this host applies no change from there on and keeps what it serves; restore the database from a backup, or see docs/deploy.md"
    )
}

/// The change applied last is gone from the log, in words for the operator.
pub(super) fn gone(seq: i64) -> String {
    format!(
        "the control plane's change log was rolled back: change {seq}, applied here, is no longer in cluster_changes as it was (deleted or rewritten); this host applies no change until it is back and keeps what it serves; restore the database from a backup, or see docs/deploy.md"
    )
}

/// The log rolled back, in words for the operator.
pub(super) fn rolled_back(last: i64, applied: i64, by: &str) -> String {
    format!(
        "the control plane's change log was rolled back: it ends at change {last}, but {by} applied change {applied} (rows deleted from cluster_changes); hosts apply no change until the log holds it again; restore the database from a backup, or see docs/deploy.md"
    )
}

/// The rows of `rows` (ascending) that check with `key` and follow the
/// change tagged `last_tag` one after the other, up to the first break:
/// those, the tag of the last of them, the numbers of the rows that did
/// not check, and the break (in words) when there is one.
pub(super) fn walk(
    rows: Vec<LogRow>,
    key: &Key,
    mut last_tag: String,
) -> (Vec<LogRow>, String, Vec<i64>, Option<String>) {
    let mut good = Vec::new();
    let mut refused = Vec::new();
    for row in rows {
        if !row.checks(key) {
            refused.push(row.seq);
            continue;
        }
        // A row without `prev` was written by a host of an earlier version
        // (or is the first): it checks, and the next one chains to it.
        if !row.prev.is_empty() && row.prev != last_tag {
            return (good, last_tag, refused, Some(broken_before(row.seq)));
        }
        last_tag = row.tag.clone();
        good.push(row);
    }
    (good, last_tag, refused, None)
}

/// The highest change any host of the fleet says it applied (heartbeats
/// whose tags check), and that host.
pub(super) async fn newest_applied(
    client: &impl tokio_postgres::GenericClient,
    key: &Key,
) -> Result<Option<(i64, String)>, tokio_postgres::Error> {
    let rows = client.query(&format!("SELECT {} FROM cluster_hosts", super::HOST_COLUMNS), &[]).await?;
    Ok(rows
        .iter()
        .filter_map(|r| super::host_row(key, 0, r))
        .filter(|h| h.checks)
        .max_by_key(|h| h.applied_seq)
        .map(|h| (h.applied_seq, h.host_id)))
}

/// The whole log's state: its last good change and tag, and its damage
/// (a break, or a roll-back below what a host applied).
pub(super) async fn check_log(
    client: &impl tokio_postgres::GenericClient,
    key: &Key,
) -> Result<(i64, String, Option<String>), tokio_postgres::Error> {
    // The heartbeats first: a change committed between the two reads is
    // in the log read second.
    let applied = newest_applied(client, key).await?;
    let rows =
        client.query(&format!("SELECT {LOG_COLUMNS} FROM cluster_changes WHERE {IN_RANGE} ORDER BY seq"), &[]).await?;
    let (good, last_tag, _, damage) = walk(rows.iter().filter_map(log_row).collect(), key, String::new());
    let last = good.last().map_or(0, |r| r.seq);
    if damage.is_some() {
        return Ok((last, last_tag, damage));
    }
    let damage = applied
        .filter(|(applied, _)| *applied > last)
        .map(|(applied, by)| rolled_back(last, applied, &format!("host {}", crate::tool::log_safe(&by))));
    Ok((last, last_tag, damage))
}

/// Rows of the log not written by this fleet's hosts (their tags do not
/// check, or they lie outside the log's numbers): forged or moved rows,
/// which no host applies, for `cluster status` to report.
pub(super) async fn foreign_rows(
    client: &impl tokio_postgres::GenericClient,
    key: &Key,
) -> Result<usize, tokio_postgres::Error> {
    let outside: i64 = client
        .query_one(&format!("SELECT count(*) FROM cluster_changes WHERE NOT ({IN_RANGE})"), &[])
        .await?
        .try_get(0)
        .unwrap_or(0);
    let rows = client.query(&format!("SELECT {LOG_COLUMNS} FROM cluster_changes WHERE {IN_RANGE}"), &[]).await?;
    let inside = rows.iter().filter(|r| log_row(r).is_none_or(|r| !r.checks(key))).count();
    Ok(usize::try_from(outside).unwrap_or(usize::MAX).saturating_add(inside))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &Key, seq: i64, text: &str, prev: &str) -> LogRow {
        LogRow {
            seq,
            origin: "a".into(),
            text: text.into(),
            tag: tag_change(key, seq, "a", text, prev),
            prev: prev.into(),
        }
    }

    #[test]
    fn a_chained_row_rewritten_without_its_link_does_not_check() {
        let key = Key([3; 32]);
        let first = row(&key, 1, r#"{"op":"override_cleared","agent":"x"}"#, "");
        let second = row(&key, 2, r#"{"op":"override_cleared","agent":"y"}"#, &first.tag);
        assert!(first.checks(&key) && second.checks(&key));
        // The link folded into the text, `prev` emptied: the tag no longer checks.
        let folded =
            LogRow { text: format!("{}\n{}", second.text, second.prev), prev: String::new(), ..second.clone() };
        assert!(!folded.checks(&key));
        // Nor does a `prev` that is no tag.
        let odd = LogRow { prev: "x".into(), ..second.clone() };
        assert!(!odd.checks(&key));
        let (good, _, _, broken) = walk(vec![first, second], &key, String::new());
        assert_eq!(good.len(), 2);
        assert!(broken.is_none());
    }
}
