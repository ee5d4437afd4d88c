//! Revocation and key windows: what `trust.revoked` and a trusted key's
//! `not_before` / `not_after` refuse, and the checks of their entries.

use super::{Manifest, PackageError, PublicKey, TrustPolicy, fingerprint, publishers::SigstoreSigned};

/// Who signed, as revocations name it.
pub(super) enum Signer<'a> {
    /// An ed25519 key, base64.
    Ed25519(&'a str),
    /// A Sigstore signer.
    Sigstore(&'a SigstoreSigned),
}

/// A `trust:` entry that is not valid (a revocation, a key's window).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TrustEntryError(pub String);

/// A key's window, in words.
pub(super) fn window(not_before: Option<&str>, not_after: Option<&str>) -> String {
    match (not_before, not_after) {
        (Some(a), Some(b)) => format!("from {a} to {b}"),
        (Some(a), None) => format!("from {a}"),
        (None, Some(b)) => format!("until {b}"),
        (None, None) => "always".into(),
    }
}

/// An RFC 3339 time, as seconds since the epoch.
fn rfc3339(t: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(t).ok().map(|t| t.timestamp())
}

/// Checks a `trust.revoked` entry's shape: a key id (`ed25519:` or
/// `ecdsa:` and 16 hex digits), a component's sha256, or a Sigstore
/// identity (an email or a URI).
pub fn check_revoked_entry(entry: &str) -> Result<(), TrustEntryError> {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    let key_id = entry.strip_prefix("ed25519:").or_else(|| entry.strip_prefix("ecdsa:"));
    match key_id {
        Some(id) if hex(id, 16) => Ok(()),
        None if hex(entry.strip_prefix("sha256:").unwrap_or(entry), 64) => Ok(()),
        None if is_identity(entry) => Ok(()),
        _ => Err(TrustEntryError(format!(
            "{entry:?} is neither a key id (ed25519: or ecdsa: and 16 lowercase hex digits, as keygen and verify print it), a component's sha256 (64 hex digits), nor a Sigstore identity (an email or a URI)"
        ))),
    }
}

/// An email or a URI, as a Sigstore certificate names its signer.
fn is_identity(entry: &str) -> bool {
    !entry.chars().any(char::is_whitespace)
        && (entry.split_once('@').is_some_and(|(a, b)| !a.is_empty() && b.contains('.')) || entry.contains("://"))
}

/// Checks a key's `not_before` / `not_after`: RFC 3339 times, in order.
pub fn check_key_window(key: &PublicKey) -> Result<(), TrustEntryError> {
    check_window_times(key.not_before.as_deref(), key.not_after.as_deref()).map_err(TrustEntryError)
}

/// `not_before` / `not_after`: RFC 3339 times, in order.
pub(super) fn check_window_times(not_before: Option<&str>, not_after: Option<&str>) -> Result<(), String> {
    for (field, t) in [("not_before", not_before), ("not_after", not_after)] {
        if let Some(t) = t
            && rfc3339(t).is_none()
        {
            return Err(format!("{field}: {t:?} is not an RFC 3339 time (e.g. 2027-01-01T00:00:00Z)"));
        }
    }
    if let (Some(a), Some(b)) = (not_before.and_then(rfc3339), not_after.and_then(rfc3339))
        && a > b
    {
        return Err("not_before is after not_after".into());
    }
    Ok(())
}

impl TrustPolicy {
    /// Checks its keys' windows and its revocations, naming the entry at
    /// fault.
    pub fn check_entries(&self) -> Result<(), TrustEntryError> {
        for k in &self.keys {
            check_key_window(k).map_err(|e| TrustEntryError(format!("trust: key {:?}: {e}", k.name)))?;
        }
        for (i, r) in self.revoked.iter().enumerate() {
            check_revoked_entry(r).map_err(|e| TrustEntryError(format!("trust.revoked[{i}]: {e}")))?;
        }
        Ok(())
    }

    /// Refuses what `trust.revoked` names: the signing key (by key id,
    /// `ed25519:...`), the Sigstore signer (by identity, or `ecdsa:...` key
    /// id) or the component (by sha256, with or without `sha256:`).
    /// Checked before anything else, whatever `allow_unsigned` says.
    pub(super) fn check_revoked(
        &self,
        plugin: &str,
        signer: Option<&Signer>,
        component_sha256: &str,
    ) -> Result<(), PackageError> {
        let key_id = signer.map(|s| match s {
            Signer::Ed25519(key) => fingerprint(key),
            Signer::Sigstore(s) => s.revocable(),
        });
        let listed =
            self.revoked.iter().map(|e| (e, "trust.revoked".to_string())).chain(self.published.iter().map(|r| {
                let why = if r.reason.is_empty() { String::new() } else { format!(" for {:?}", r.reason) };
                (&r.entry, format!("{}{why}", r.source))
            }));
        for (entry, by) in listed {
            // Identities as their owners write them: case aside.
            let named = key_id.as_deref().is_some_and(|id| {
                id == entry
                    || (matches!(signer, Some(Signer::Sigstore(s)) if s.key_id.is_none())
                        && id.eq_ignore_ascii_case(entry.trim()))
            });
            let what = if named {
                if matches!(signer, Some(Signer::Sigstore(s)) if s.key_id.is_none()) {
                    "its publisher"
                } else {
                    "its signing key"
                }
            } else if entry.strip_prefix("sha256:").unwrap_or(entry) == component_sha256 {
                "its component"
            } else {
                continue;
            };
            return Err(PackageError::Revoked { plugin: plugin.to_string(), by, entry: entry.clone(), what });
        }
        Ok(())
    }

    /// Refuses a plugin `key` signed outside the window trust gives it.
    pub(super) fn check_window(plugin: &str, key: &PublicKey, manifest: &Manifest) -> Result<(), PackageError> {
        if key.not_before.is_none() && key.not_after.is_none() {
            return Ok(());
        }
        let at = manifest.signed_at.as_deref().and_then(rfc3339);
        let inside = at.is_some_and(|at| {
            key.not_before.as_deref().and_then(rfc3339).is_none_or(|from| at >= from)
                && key.not_after.as_deref().and_then(rfc3339).is_none_or(|to| at <= to)
        });
        if inside {
            return Ok(());
        }
        Err(PackageError::OutsideKeyWindow {
            plugin: plugin.to_string(),
            kind: "key",
            key: key.name.clone(),
            signed_at: manifest.signed_at.clone(),
            window: window(key.not_before.as_deref(), key.not_after.as_deref()),
        })
    }
}
