//! Sigstore bundles: publisher identities for signed packages.
//!
//! A package may carry, in place of an ed25519 signature, a Sigstore bundle
//! (the JSON format cosign, sigstore-python and sigstore-js verify) whose
//! signed artifact is the package's manifest text: the same bytes an ed25519
//! signature covers, so the manifest's component digest and asks are what
//! the publisher vouched for.
//!
//! Verification is offline, from the bundle and a [`TrustedRoot`] (Sigstore's
//! trusted-root JSON), following the steps sigstore-python and cosign take:
//!
//! 1. the transparency log entry: its signed entry timestamp (which makes
//!    its integrated time trustworthy), its Merkle inclusion proof and the
//!    signed checkpoint it ends in, all under a log key the root lists;
//! 2. the entry's body against the bundle: same digest, signature and key;
//! 3. keyless: the signing certificate chains to a certificate authority of
//!    the root, for code signing, **at the log's integrated time**, so a
//!    short-lived certificate that had expired before its entry was logged
//!    is refused; its embedded SCT verifies under a CT log key of the root;
//!    its identity (SAN email or URI) and OIDC issuer (extension
//!    1.3.6.1.4.1.57264.1.8, or the older .1.1) are returned for the trust
//!    policy to match against `trust.publishers`;
//! 4. the signature over the artifact, with the certificate's key (keyless)
//!    or the key the log entry holds (keyed: `toolhost sign --sigstore-key`).
//!
//! Only `hashedrekord` 0.0.1 entries from Rekor v1 logs are accepted: the
//! kind every Sigstore client writes for a signed blob. A bundle with an
//! RFC 3161 timestamp but no log entry is refused (no trusted time).

mod bundle;
mod cert;
mod log;
mod root;

pub use bundle::{Bundle, KeyHint, MEDIA_TYPE, RawBytes, TlogEntry};
pub use cert::{pem_der, spki_from_pem, spki_id, spki_sha256};
pub use root::TrustedRoot;

use sha2::{Digest as _, Sha256};

/// Why a bundle does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigstoreError {
    /// Not a Sigstore bundle, or a part of it cannot be read.
    #[error("the Sigstore bundle is malformed: {0}")]
    Malformed(String),
    /// A trusted root that cannot be read.
    #[error("the Sigstore trusted root is malformed: {0}")]
    Root(String),
    /// The transparency log entry does not verify.
    #[error("the Sigstore bundle's transparency log entry does not verify: {0}")]
    Log(String),
    /// The signing certificate does not chain to the trusted root.
    #[error("the Sigstore signing certificate is not trusted: {0}")]
    Certificate(String),
    /// The certificate was not valid when its log entry was made.
    #[error(
        "the Sigstore signing certificate was valid from {not_before} to {not_after}, but its log entry was made at {logged_at}: it had expired (or was not yet valid) when it signed"
    )]
    Expired {
        /// The certificate's notBefore (RFC 3339).
        not_before: String,
        /// The certificate's notAfter (RFC 3339).
        not_after: String,
        /// The log entry's integrated time (RFC 3339).
        logged_at: String,
    },
    /// The signature does not match the artifact.
    #[error("the Sigstore signature does not match: {0}")]
    Signature(String),
}

/// Who signed a bundle, as verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// A keyless signature: a short-lived certificate for an OIDC identity.
    Identity {
        /// The certificate's identity (SAN email or URI).
        identity: String,
        /// The OIDC issuer that vouched for it.
        issuer: String,
    },
    /// A signature by a long-lived key (`--sigstore-key`).
    Key {
        /// The key's id: `ecdsa:` and 16 hex digits of the sha256 of its
        /// SubjectPublicKeyInfo ([`spki_id`]), for people.
        key_id: String,
        /// The whole sha256 of its SubjectPublicKeyInfo, hex: what trust
        /// matches ([`spki_sha256`]).
        sha256: String,
    },
}

impl Signer {
    /// One phrase for messages: `alice@example.org (issuer https://...)`.
    pub fn describe(&self) -> String {
        match self {
            Signer::Identity { identity, issuer } => format!("{identity} (issuer {issuer})"),
            Signer::Key { key_id, .. } => format!("Sigstore key {key_id}"),
        }
    }

    /// [`Signer::describe`] with the identity and issuer quoted, for
    /// refusals (a stray space shows).
    pub fn quoted(&self) -> String {
        match self {
            Signer::Identity { identity, issuer } => format!("{identity:?} (issuer {issuer:?})"),
            Signer::Key { key_id, .. } => format!("Sigstore key {key_id}"),
        }
    }
}

/// A verified bundle: who signed and when the log says it was signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The signer.
    pub signer: Signer,
    /// The log entry's integrated time (Unix seconds): when it was signed,
    /// by the log's clock, not the signer's.
    pub logged_at: i64,
    /// The entry's index in the log.
    pub log_index: u64,
}

/// Verifies `bundle` over `artifact` under `root` (steps in the module doc).
pub fn verify(bundle: &Bundle, artifact: &[u8], root: &TrustedRoot) -> Result<Verified, SigstoreError> {
    let entry = bundle.entry()?;
    let logged_at = log::verify_entry(entry, root)?;
    let body = log::Body::parse(&entry.canonicalized_body)?;
    let digest = Sha256::digest(artifact);
    if body.digest_hex != hex::encode(digest) {
        return Err(SigstoreError::Log(format!(
            "the entry logs sha256 {}, the artifact's is {}",
            body.digest_hex,
            hex::encode(digest)
        )));
    }
    let (signature, stated_digest) = bundle.message_signature()?;
    if let Some(d) = stated_digest
        && d != digest.as_slice()
    {
        return Err(SigstoreError::Signature("the bundle's message digest is not the artifact's".into()));
    }
    if body.signature != signature {
        return Err(SigstoreError::Log("the entry logs another signature than the bundle's".into()));
    }
    let (signer, spki) = match bundle.certificate()? {
        Some(leaf) => {
            if body.key_pem_der != leaf {
                return Err(SigstoreError::Log("the entry logs another certificate than the bundle's".into()));
            }
            let checked = cert::verify_certificate(&leaf, logged_at, root)?;
            (Signer::Identity { identity: checked.identity, issuer: checked.issuer }, checked.spki)
        }
        None => {
            // Keyed: the log entry holds the public key; the trust policy
            // decides whether it is one it trusts.
            let spki = body.key_pem_der.clone();
            (Signer::Key { key_id: spki_id(&spki), sha256: spki_sha256(&spki) }, spki)
        }
    };
    cert::verify_signature(&spki, artifact, &signature)
        .map_err(|e| SigstoreError::Signature(format!("{e} (over the signed manifest)")))?;
    Ok(Verified { signer, logged_at, log_index: entry.log_index })
}

/// The identity and issuer a signing certificate (DER) names, not
/// verified; `None` when it is not a Sigstore certificate.
pub fn certificate_signer(der: &[u8]) -> Option<Signer> {
    cert::claimed(Some(der), None)
}

impl Bundle {
    /// Who the bundle says signed it, **not verified**: for showing a
    /// package before a trust policy has checked it ([`verify`] does).
    pub fn claimed_signer(&self) -> Option<Signer> {
        let leaf = self.certificate().ok()?;
        let body = self.entry().ok().and_then(|e| log::Body::parse(&e.canonicalized_body).ok());
        cert::claimed(leaf.as_deref(), body.as_ref().map(|b| b.key_pem_der.as_slice()))
    }
}

fn rfc3339(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map_or_else(|| t.to_string(), |d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

#[cfg(test)]
mod tests;
