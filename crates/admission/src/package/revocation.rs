//! Signed revocation lists: what a publisher or an operator's security
//! team publishes to a catalogue so that serving hosts stop loading a key
//! or a component without anyone editing their config.
//!
//! A list names key ids and component digests (as `trust.revoked` does),
//! says why and when, and is signed with an ed25519 key. A host acts on a
//! list only when its signer is one the operator names in
//! `marketplace.revocations_signed_by`; anyone who can push to a
//! catalogue can add a list, none can revoke in someone else's name.

use super::{B64, KeyPair, PackageError, check_revoked_entry, fingerprint};
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};

/// The most entries one list may name.
pub const MAX_REVOKED_PER_LIST: usize = 1000;

/// The part of a list its signature covers (serialised as this struct,
/// fields in this order).
#[derive(Serialize)]
struct Signed<'a> {
    revoked: &'a [String],
    reason: &'a str,
    issued: &'a str,
}

/// A signed revocation list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevocationList {
    /// Key ids (`ed25519:...`) and component digests (`sha256:...` or 64
    /// hex digits) revoked.
    pub revoked: Vec<String>,
    /// Why, in words.
    #[serde(default)]
    pub reason: String,
    /// When it was issued (RFC 3339).
    pub issued: String,
    /// The signer's ed25519 public key, base64.
    pub key: String,
    /// ed25519 signature over the revoked entries, reason and issue time,
    /// base64.
    pub signature: String,
}

/// One revoked key id or digest, with the list that revoked it (as a
/// trust policy holds it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// The key id or digest.
    pub entry: String,
    /// Where it comes from, in words (`the revocation list of oci://… signed by ed25519:…`).
    pub source: String,
    /// Why, as the list says.
    #[serde(default)]
    pub reason: String,
}

impl KeyPair {
    /// Signs a revocation list naming `revoked` for `reason`, issued now.
    pub fn sign_revocations(&self, revoked: Vec<String>, reason: &str) -> Result<RevocationList, PackageError> {
        let issued = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut list = RevocationList {
            revoked,
            reason: reason.to_string(),
            issued,
            key: B64.encode(self.key.verifying_key().to_bytes()),
            signature: String::new(),
        };
        list.check_shape()?;
        let signature = self.key.sign(&list.signed_bytes()?);
        list.signature = B64.encode(signature.to_bytes());
        Ok(list)
    }
}

impl RevocationList {
    fn signed_bytes(&self) -> Result<Vec<u8>, PackageError> {
        serde_json::to_vec(&Signed { revoked: &self.revoked, reason: &self.reason, issued: &self.issued })
            .map_err(|e| PackageError::Revocations(e.to_string()))
    }

    fn check_shape(&self) -> Result<(), PackageError> {
        let bad = |m: String| Err(PackageError::Revocations(m));
        if self.revoked.is_empty() {
            return bad("a revocation list names nothing to revoke".into());
        }
        if self.revoked.len() > MAX_REVOKED_PER_LIST {
            return bad(format!("a revocation list names {} entries, over {MAX_REVOKED_PER_LIST}", self.revoked.len()));
        }
        for (i, e) in self.revoked.iter().enumerate() {
            check_revoked_entry(e).map_err(|e| PackageError::Revocations(format!("revoked[{i}]: {e}")))?;
        }
        if self.reason.chars().count() > 500 || self.reason.chars().any(char::is_control) {
            return bad("the reason is over 500 characters or holds a control character".into());
        }
        if chrono::DateTime::parse_from_rfc3339(&self.issued).is_err() {
            return bad(format!("issued {:?} is not an RFC 3339 time", self.issued));
        }
        Ok(())
    }

    /// The signer's key id (`ed25519:...`), once the signature and the
    /// list's shape are checked.
    pub fn verify(&self) -> Result<String, PackageError> {
        self.check_shape()?;
        let key = B64
            .decode(&self.key)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .and_then(|b| VerifyingKey::from_bytes(&b).ok())
            .ok_or_else(|| PackageError::Revocations("the list's key is not an ed25519 public key".into()))?;
        let sig = B64
            .decode(&self.signature)
            .ok()
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
            .map(|b| Signature::from_bytes(&b))
            .ok_or_else(|| PackageError::Revocations("the list's signature is not an ed25519 signature".into()))?;
        key.verify(&self.signed_bytes()?, &sig)
            .map_err(|_| PackageError::Revocations("the list's signature does not verify".into()))?;
        Ok(fingerprint(&self.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_list_verifies_and_any_change_breaks_it() {
        let k = KeyPair::generate("sec").unwrap();
        let id = format!("ed25519:{}", "ab".repeat(8));
        let list = k.sign_revocations(vec![id.clone()], "leaked").unwrap();
        assert_eq!(list.verify().unwrap(), k.public().fingerprint().split(' ').next().unwrap());
        let mut more = list.clone();
        more.revoked.push("cd".repeat(32));
        assert!(more.verify().unwrap_err().to_string().contains("does not verify"));
        let mut other = list.clone();
        other.key = KeyPair::generate("x").unwrap().public().public_key;
        assert!(other.verify().is_err());
        assert!(k.sign_revocations(vec![], "").is_err());
        assert!(k.sign_revocations(vec!["alice".into()], "").unwrap_err().to_string().contains("revoked[0]"));
    }
}
