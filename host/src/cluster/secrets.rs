//! The fleet's secrets: `toolhost secret set` with `cluster.url` writes a
//! plugin's secret to the control plane's table `cluster_secrets`, and
//! every host reads them from there (not from its own `secrets.json`).
//!
//! Each value is sealed before it leaves the CLI, with AES-256-GCM-SIV
//! under a key derived from `cluster.secret_key_file`, and bound to its
//! plugin and name: the database, its backups and its logs hold no value.
//! Setting or removing one appends a change to the log in the same
//! transaction, so every host reads the secrets again within a second.
//!
//! What someone who can write the database but lacks the key file can do:
//! delete a secret, or put back an older sealed value of the same secret.
//! What they cannot: read a value, make one, or move one to another plugin
//! or name (it does not open there; hosts skip it and say so).

use super::{Change, ClusterError, Key, append, once};
use aws_lc_rs::aead::{AES_256_GCM_SIV, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Serialize;
use std::time::{Duration, Instant};

/// The sealed form's prefix: the scheme, so that a later one can differ.
const SCHEME: &str = "v1:";

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
    /// Whether it opens with this fleet's key: a row that does not was not
    /// made with it (or was moved from another plugin or name), and every
    /// host ignores it.
    pub opens: bool,
}

impl Key {
    fn sealing_key(&self) -> RandomizedNonceKey {
        let derived = toolhost_base::seal::tag(&self.0, &[b"toolhost fleet secrets v1"]);
        RandomizedNonceKey::new(&AES_256_GCM_SIV, &derived).expect("a 32-byte key suits AES-256-GCM-SIV")
    }

    /// `value` sealed for `plugin`'s secret `name`: `v1:` and the base64 of
    /// nonce, ciphertext and tag.
    pub(crate) fn seal(&self, plugin: &str, name: &str, value: &str) -> String {
        let mut out = value.as_bytes().to_vec();
        let nonce = self
            .sealing_key()
            .seal_in_place_append_tag(Aad::from(bound_to(plugin, name)), &mut out)
            .expect("sealing a bounded value");
        let mut whole = nonce.as_ref().to_vec();
        whole.extend_from_slice(&out);
        format!("{SCHEME}{}", B64.encode(whole))
    }

    /// The value of `sealed`, if it opens as `plugin`'s secret `name` with
    /// this key.
    pub(crate) fn open(&self, plugin: &str, name: &str, sealed: &str) -> Option<String> {
        let whole = B64.decode(sealed.strip_prefix(SCHEME)?).ok()?;
        let (nonce, rest) = whole.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut rest = rest.to_vec();
        let plain = self.sealing_key().open_in_place(nonce, Aad::from(bound_to(plugin, name)), &mut rest).ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

/// What a sealed value is bound to (names hold no newline).
fn bound_to(plugin: &str, name: &str) -> Vec<u8> {
    format!("toolhost secret\n{plugin}\n{name}").into_bytes()
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
    let sealed = key.seal(plugin, name, value);
    let change = serde_json::to_string(&Change::SecretSet { plugin: plugin.into(), name: name.into() })
        .expect("a change serializes");
    once(url, async |client| {
        let tx = client.transaction().await?;
        let replaced = tx
            .query_opt("SELECT 1 FROM cluster_secrets WHERE plugin = $1 AND name = $2 FOR UPDATE", &[&plugin, &name])
            .await?
            .is_some();
        tx.execute(
            "INSERT INTO cluster_secrets (plugin, name, sealed, set_at, set_by) VALUES ($1, $2, $3, now(), $4)
             ON CONFLICT (plugin, name) DO UPDATE SET sealed = EXCLUDED.sealed, set_at = now(), set_by = EXCLUDED.set_by",
            &[&plugin, &name, &sealed, &origin],
        )
        .await?;
        let seq = append(&tx, &key.0, origin, &change).await?;
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
        let seq = append(&tx, &key.0, origin, &change).await?;
        tx.commit().await?;
        Ok(Some(seq))
    })
}

/// The fleet's secrets, of `plugin` or everyone's, sorted by plugin and
/// name: names, when and where each was set, whether it opens with `key`.
/// Blocking; for `toolhost secret list`.
pub fn list_secrets(url: &str, key: &Key, plugin: Option<&str>) -> Result<Vec<FleetSecret>, ClusterError> {
    once(url, async |client| {
        let rows = client
            .query(
                "SELECT plugin, name, sealed, to_char(set_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), set_by
                 FROM cluster_secrets WHERE $1::text IS NULL OR plugin = $1 ORDER BY plugin, name",
                &[&plugin],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let (plugin, name, sealed): (String, String, String) = (r.get(0), r.get(1), r.get(2));
                let opens = key.open(&plugin, &name, &sealed).is_some();
                FleetSecret { plugin, name, set_at: r.get(3), set_by: r.get(4), opens }
            })
            .collect())
    })
}

/// The fleet's secrets that open with `key`, for a host to use. Blocking;
/// for a host's start.
pub fn read_secrets(url: &str, key: &Key) -> Result<crate::secrets::Secrets, ClusterError> {
    once(url, async |client| load(client, key).await)
}

/// The fleet's secrets that open with `key`; each row that does not is
/// skipped, and said so.
pub(super) async fn load(
    client: &tokio_postgres::Client,
    key: &Key,
) -> Result<crate::secrets::Secrets, tokio_postgres::Error> {
    let rows = client.query("SELECT plugin, name, sealed FROM cluster_secrets", &[]).await?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let (Ok(plugin), Ok(name), Ok(sealed)) =
            (row.try_get::<_, String>(0), row.try_get::<_, String>(1), row.try_get::<_, String>(2))
        else {
            tracing::warn!("control plane: a row of cluster_secrets of another shape is ignored");
            continue;
        };
        match key.open(&plugin, &name, &sealed) {
            Some(value) => entries.push((plugin, name, value)),
            None => tracing::warn!(
                plugin = %crate::tool::log_safe(&plugin),
                name = %crate::tool::log_safe(&name),
                "control plane: a secret that does not open with this fleet's key (cluster.secret_key_file), or moved from another plugin or name, is ignored"
            ),
        }
    }
    Ok(crate::secrets::Secrets::from_entries(entries))
}

/// Waits up to `within` for every live host (one seen in the last
/// [`super::GONE_AFTER`]) to have applied change `seq`: the ids of those
/// that have, and of those that have not. Blocking; for the CLI.
pub fn wait_applied(url: &str, seq: i64, within: Duration) -> Result<(Vec<String>, Vec<String>), ClusterError> {
    once(url, async |client| {
        let deadline = Instant::now() + within;
        loop {
            let rows = client
                .query(
                    "SELECT host_id, applied_seq >= $1 FROM cluster_hosts
                     WHERE now() - last_seen < make_interval(secs => $2) ORDER BY host_id",
                    &[&seq, &super::GONE_AFTER.as_secs_f64()],
                )
                .await?;
            let (done, behind): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.get::<_, bool>(1));
            let ids = |rows: Vec<&tokio_postgres::Row>| rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>();
            if behind.is_empty() || Instant::now() >= deadline {
                return Ok((ids(done), ids(behind)));
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
    fn a_sealed_secret_opens_only_with_its_key_as_its_plugin_and_name() {
        let k = key(7);
        let sealed = k.seal("weather", "api_key", "sk-1234");
        assert!(sealed.starts_with("v1:") && !sealed.contains("sk-1234"), "{sealed}");
        assert_ne!(sealed, k.seal("weather", "api_key", "sk-1234"), "a fresh nonce each time");
        assert_eq!(k.open("weather", "api_key", &sealed).as_deref(), Some("sk-1234"));
        assert_eq!(key(8).open("weather", "api_key", &sealed), None, "another fleet's key");
        assert_eq!(k.open("hostile", "api_key", &sealed), None, "moved to another plugin");
        assert_eq!(k.open("weather", "token", &sealed), None, "moved to another name");
        // One bit changed anywhere: it does not open.
        let mut bytes = B64.decode(&sealed[3..]).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(k.open("weather", "api_key", &format!("v1:{}", B64.encode(&bytes))), None);
        for junk in ["", "v1:", "v1:!!", "v2:AAAA", "sk-1234"] {
            assert_eq!(k.open("weather", "api_key", junk), None, "{junk:?}");
        }
    }
}
