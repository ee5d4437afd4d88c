//! The fleet's secrets: `toolhost secret set` with `cluster.url` writes a
//! plugin's secret to the control plane's table `cluster_secrets`, and
//! every host reads them from there (not from its own `secrets.json`).
//!
//! Each value is sealed before it leaves the CLI, with AES-256-GCM-SIV
//! under a key derived from `cluster.secret_key_file`, and bound to its
//! plugin, its name and the number of the change that set it: the
//! database, its backups and its logs hold no value. Setting or removing
//! one appends that change to the log (tagged, as every change) in the
//! same transaction, and every host reads the secrets again.
//!
//! The log says which value is current: a host uses a row only when the
//! latest change of that secret in the log (whose tags check) is the
//! `secret_set` the row was sealed with. So whoever can write the database
//! but lacks the key file cannot read a value, make one, move one to
//! another plugin or name, put back an older value, or bring back a
//! removed one; hosts skip such a row and say so. They can still delete a
//! row (the secret is then missing on the hosts, as if removed).

use super::{Change, ClusterError, Key, append, once};
use aws_lc_rs::aead::{AES_256_GCM_SIV, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Serialize;
use std::time::{Duration, Instant};

/// The sealed form's prefix: the scheme, so that a later one can differ.
const SCHEME: &str = "v1:";

/// The longest sealed value a host reads (a value is at most 64 KiB).
const MAX_SEALED: i32 = 128 << 10;

/// A secret as `toolhost secret list` shows it in a fleet: never its value.
#[derive(Debug, Clone, Serialize)]
pub struct FleetSecret {
    /// The plugin that reads it.
    pub plugin: String,
    /// Its name.
    pub name: String,
    /// When it was set (RFC 3339, UTC).
    pub set_at: String,
    /// Where it was set from (`cli@<host name>`).
    pub set_by: String,
    /// Whether the hosts use it: it opens with this fleet's key and is the
    /// value the log says is current. One that is not was not made with
    /// the key, or was moved from another secret, or is an older or a
    /// removed value put back; every host ignores it.
    pub opens: bool,
}

impl Key {
    fn sealing_key(&self) -> RandomizedNonceKey {
        let derived = toolhost_base::seal::tag(&self.0, &[b"toolhost fleet secrets v1"]);
        RandomizedNonceKey::new(&AES_256_GCM_SIV, &derived).expect("a 32-byte key suits AES-256-GCM-SIV")
    }

    /// `value` sealed for `plugin`'s secret `name`, set by change `seq`:
    /// `v1:` and the base64 of nonce, ciphertext and tag.
    pub(crate) fn seal(&self, plugin: &str, name: &str, seq: i64, value: &str) -> String {
        let mut out = value.as_bytes().to_vec();
        let nonce = self
            .sealing_key()
            .seal_in_place_append_tag(Aad::from(bound_to(plugin, name, seq)), &mut out)
            .expect("sealing a bounded value");
        let mut whole = nonce.as_ref().to_vec();
        whole.extend_from_slice(&out);
        format!("{SCHEME}{}", B64.encode(whole))
    }

    /// The value of `sealed`, if it opens as `plugin`'s secret `name` set
    /// by change `seq`, with this key.
    pub(crate) fn open(&self, plugin: &str, name: &str, seq: i64, sealed: &str) -> Option<String> {
        let whole = B64.decode(sealed.strip_prefix(SCHEME)?).ok()?;
        let (nonce, rest) = whole.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut rest = rest.to_vec();
        let plain = self.sealing_key().open_in_place(nonce, Aad::from(bound_to(plugin, name, seq)), &mut rest).ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

/// What a sealed value is bound to (names hold no newline).
fn bound_to(plugin: &str, name: &str, seq: i64) -> Vec<u8> {
    format!("toolhost secret\n{plugin}\n{name}\n{seq}").into_bytes()
}

/// Each secret's latest change in the log, among those whose tags check
/// and chain: (plugin, name) to the change's number and whether it set
/// the secret (rather than removed it). `None` when the log is damaged (a
/// break, a roll-back: [`super::chain`]): a secret's history that may have
/// been rewound is not read at all.
async fn current(
    client: &tokio_postgres::Client,
    key: &Key,
) -> Result<Option<std::collections::HashMap<(String, String), (i64, bool)>>, tokio_postgres::Error> {
    let applied = super::chain::newest_applied(client, key).await?;
    let rows = client
        .query(
            &format!(
                "SELECT {} FROM cluster_changes WHERE {} ORDER BY seq",
                super::chain::LOG_COLUMNS,
                super::chain::IN_RANGE
            ),
            &[],
        )
        .await?;
    let (good, _, _, broken) =
        super::chain::walk(rows.iter().filter_map(super::chain::log_row).collect(), key, String::new());
    let last = good.last().map_or(0, |r| r.seq);
    let rolled = applied.is_some_and(|(applied, _)| applied > last);
    if broken.is_some() || rolled {
        tracing::error!(
            "control plane: the change log is damaged (see `toolhost cluster status`): the fleet's secrets are not read from it"
        );
        return Ok(None);
    }
    let mut latest = std::collections::HashMap::new();
    for r in good {
        match serde_json::from_str::<Change>(&r.text) {
            Ok(Change::SecretSet { plugin, name }) => latest.insert((plugin, name), (r.seq, true)),
            Ok(Change::SecretRemoved { plugin, name }) => latest.insert((plugin, name), (r.seq, false)),
            _ => None,
        };
    }
    Ok(Some(latest))
}

/// Sets `plugin`'s secret `name` to `value` in the control plane at `url`,
/// sealed with `key`, and appends the change to the log, in one
/// transaction: whether it replaced one, and the change's number.
/// Blocking; for `toolhost secret set`.
pub fn set_secret(
    url: &str,
    key: &Key,
    origin: &str,
    plugin: &str,
    name: &str,
    value: &str,
) -> Result<(bool, i64), ClusterError> {
    let change = serde_json::to_string(&Change::SecretSet { plugin: plugin.into(), name: name.into() })
        .expect("a change serializes");
    once(url, async |client| {
        let tx = client.transaction().await?;
        let replaced = tx
            .query_opt("SELECT 1 FROM cluster_secrets WHERE plugin = $1 AND name = $2 FOR UPDATE", &[&plugin, &name])
            .await?
            .is_some();
        let seq = append(&tx, key, origin, &change).await?;
        let sealed = key.seal(plugin, name, seq, value);
        tx.execute(
            "INSERT INTO cluster_secrets (plugin, name, sealed, seq, set_at, set_by) VALUES ($1, $2, $3, $4, now(), $5)
             ON CONFLICT (plugin, name) DO UPDATE
               SET sealed = EXCLUDED.sealed, seq = EXCLUDED.seq, set_at = now(), set_by = EXCLUDED.set_by",
            &[&plugin, &name, &sealed, &seq, &origin],
        )
        .await?;
        tx.commit().await?;
        Ok((replaced, seq))
    })
}

/// Removes `plugin`'s secret `name` from the control plane at `url` and
/// appends the change to the log, in one transaction: the change's number,
/// or `None` when there was no such secret. Blocking; for `toolhost secret
/// rm`.
pub fn remove_secret(
    url: &str,
    key: &Key,
    origin: &str,
    plugin: &str,
    name: &str,
) -> Result<Option<i64>, ClusterError> {
    let change = serde_json::to_string(&Change::SecretRemoved { plugin: plugin.into(), name: name.into() })
        .expect("a change serializes");
    once(url, async |client| {
        let tx = client.transaction().await?;
        if tx.execute("DELETE FROM cluster_secrets WHERE plugin = $1 AND name = $2", &[&plugin, &name]).await? == 0 {
            return Ok(None);
        }
        let seq = append(&tx, key, origin, &change).await?;
        tx.commit().await?;
        Ok(Some(seq))
    })
}

/// The fleet's secrets, of `plugin` or everyone's, sorted by plugin and
/// name: names, when and where each was set, whether it opens with `key`.
/// Blocking; for `toolhost secret list`.
pub fn list_secrets(url: &str, key: &Key, plugin: Option<&str>) -> Result<Vec<FleetSecret>, ClusterError> {
    once(url, async |client| {
        // A damaged log: listed, none said to open.
        let latest = current(client, key).await?.unwrap_or_default();
        let rows = client
            .query(
                "SELECT plugin, name, sealed, seq, to_char(set_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), set_by
                 FROM cluster_secrets WHERE $1::text IS NULL OR plugin = $1 ORDER BY plugin, name",
                &[&plugin],
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let (plugin, name, sealed, seq): (String, String, String, i64) =
                    (r.try_get(0).ok()?, r.try_get(1).ok()?, r.try_get(2).ok()?, r.try_get(3).ok()?);
                let opens = latest.get(&(plugin.clone(), name.clone())) == Some(&(seq, true))
                    && key.open(&plugin, &name, seq, &sealed).is_some();
                Some(FleetSecret {
                    plugin,
                    name,
                    set_at: r.try_get(4).unwrap_or_default(),
                    set_by: r.try_get(5).unwrap_or_default(),
                    opens,
                })
            })
            .collect())
    })
}

/// The fleet's secrets that open with `key`, for a host to use. Blocking;
/// for a host's start.
pub fn read_secrets(url: &str, key: &Key) -> Result<crate::secrets::Secrets, ClusterError> {
    // A damaged log: no fleet secret (the host starts, and says why).
    once(url, async |client| {
        Ok(load(client, key).await?.unwrap_or_else(|| crate::secrets::Secrets::from_entries(Vec::new())))
    })
}

/// The fleet's secrets that open with `key`; each row that does not is
/// skipped, and said so. `None` when the change log is damaged.
pub(super) async fn load(
    client: &tokio_postgres::Client,
    key: &Key,
) -> Result<Option<crate::secrets::Secrets>, tokio_postgres::Error> {
    let Some(latest) = current(client, key).await? else { return Ok(None) };
    let rows = client
        .query("SELECT plugin, name, sealed, seq FROM cluster_secrets WHERE octet_length(sealed) <= $1", &[&MAX_SEALED])
        .await?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let (Ok(plugin), Ok(name), Ok(sealed), Ok(seq)) = (
            row.try_get::<_, String>(0),
            row.try_get::<_, String>(1),
            row.try_get::<_, String>(2),
            row.try_get::<_, i64>(3),
        ) else {
            tracing::warn!("control plane: a row of cluster_secrets of another shape is ignored");
            continue;
        };
        let value = (latest.get(&(plugin.clone(), name.clone())) == Some(&(seq, true)))
            .then(|| key.open(&plugin, &name, seq, &sealed))
            .flatten();
        match value {
            Some(value) => entries.push((plugin, name, value)),
            None => tracing::warn!(
                plugin = %crate::tool::log_safe(&plugin),
                name = %crate::tool::log_safe(&name),
                "control plane: a secret that is not the fleet's is ignored: it does not open with this fleet's key (cluster.secret_key_file), or was moved from another secret, or is an older or a removed value put back"
            ),
        }
    }
    Ok(Some(crate::secrets::Secrets::from_entries(entries)))
}

/// Which hosts have applied a change ([`wait_applied`]).
#[derive(Debug, Clone)]
pub struct Applied {
    /// The live hosts that have.
    pub done: Vec<String>,
    /// The live hosts that have not (yet).
    pub behind: Vec<String>,
    /// Hosts of this fleet the control plane has heard of, live or not.
    pub known: i64,
}

/// Waits up to `within` for every live host (one seen in the last
/// [`super::GONE_AFTER`]) to have applied change `seq`: the ids of those
/// that have, and of those that have not. Blocking; for the CLI.
pub fn wait_applied(url: &str, key: &Key, seq: i64, within: Duration) -> Result<Applied, ClusterError> {
    once(url, async |client| {
        let deadline = Instant::now() + within;
        let query = format!("SELECT {} FROM cluster_hosts ORDER BY host_id", super::HOST_COLUMNS);
        let mut known = 0;
        loop {
            // Rows a host of this fleet wrote (their tags check), seen
            // lately and not in the future.
            let rows = client.query(&query, &[]).await?;
            let hosts: Vec<super::HostRow> =
                rows.iter().filter_map(|r| super::host_row(key, 0, r)).filter(|h| h.checks).collect();
            known = known.max(hosts.len());
            let live = hosts.iter().filter(|h| !h.gone && h.last_seen_secs > -5.0);
            let (done, behind): (Vec<_>, Vec<_>) = live.partition(|h| h.applied_seq >= seq);
            let ids = |hs: Vec<&super::HostRow>| hs.iter().map(|h| h.host_id.clone()).collect::<Vec<_>>();
            if behind.is_empty() || Instant::now() >= deadline {
                return Ok(Applied { done: ids(done), behind: ids(behind), known: known as i64 });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> Key {
        Key([byte; 32])
    }

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_as_its_plugin_name_and_change() {
        let k = key(7);
        let sealed = k.seal("weather", "api_key", 41, "sk-1234");
        assert!(sealed.starts_with("v1:") && !sealed.contains("sk-1234"), "{sealed}");
        assert_ne!(sealed, k.seal("weather", "api_key", 41, "sk-1234"), "a fresh nonce each time");
        assert_eq!(k.open("weather", "api_key", 41, &sealed).as_deref(), Some("sk-1234"));
        assert_eq!(key(8).open("weather", "api_key", 41, &sealed), None, "another fleet's key");
        assert_eq!(k.open("hostile", "api_key", 41, &sealed), None, "moved to another plugin");
        assert_eq!(k.open("weather", "token", 41, &sealed), None, "moved to another name");
        assert_eq!(k.open("weather", "api_key", 57, &sealed), None, "presented as set by another change");
        // One bit changed anywhere: it does not open.
        let mut bytes = B64.decode(&sealed[3..]).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(k.open("weather", "api_key", 41, &format!("v1:{}", B64.encode(&bytes))), None);
        for junk in ["", "v1:", "v1:!!", "v2:AAAA", "sk-1234"] {
            assert_eq!(k.open("weather", "api_key", 41, junk), None, "{junk:?}");
        }
    }
}
