//! The Sigstore bundle's JSON (protobuf-specs `Bundle`, v0.1 to v0.3).
//!
//! Protobuf's JSON mapping writes 64-bit integers as strings and bytes as
//! base64; both forms of integer are read, strings are written.

use super::SigstoreError;
use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The media type of the bundles toolhost writes.
pub const MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A Sigstore bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bundle {
    /// `application/vnd.dev.sigstore.bundle.v0.3+json` (or .v0.1, .v0.2).
    pub media_type: String,
    /// The certificate or key hint, and the log entries.
    pub verification_material: Material,
    /// The signature over the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_signature: Option<MessageSignature>,
    /// A DSSE envelope (attestations): not accepted for packages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsse_envelope: Option<serde_json::Value>,
}

/// `verificationMaterial`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Material {
    /// The signing certificate (v0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<RawBytes>,
    /// The signing certificate and its chain (v0.1, v0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x509_certificate_chain: Option<CertificateChain>,
    /// A hint naming the key, for keyed signatures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<KeyHint>,
    /// Transparency log entries.
    #[serde(default)]
    pub tlog_entries: Vec<TlogEntry>,
    /// RFC 3161 timestamps (kept, not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_verification_data: Option<serde_json::Value>,
}

/// `{"rawBytes": base64}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawBytes {
    /// The bytes.
    #[serde(with = "b64")]
    pub raw_bytes: Vec<u8>,
}

/// `x509CertificateChain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateChain {
    /// Leaf first.
    pub certificates: Vec<RawBytes>,
}

/// `publicKey`: a hint naming the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyHint {
    /// The hint (toolhost writes the key id).
    #[serde(default)]
    pub hint: String,
}

/// `messageSignature`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageSignature {
    /// The artifact's digest, as the signer stated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_digest: Option<MessageDigest>,
    /// The signature (ASN.1 DER ECDSA), base64.
    #[serde(with = "b64")]
    pub signature: Vec<u8>,
}

/// `messageDigest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageDigest {
    /// `SHA2_256`.
    pub algorithm: String,
    /// The digest.
    #[serde(with = "b64")]
    pub digest: Vec<u8>,
}

/// One transparency log entry (`TransparencyLogEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlogEntry {
    /// Its index in the log.
    #[serde(with = "int")]
    pub log_index: u64,
    /// The log's key id.
    pub log_id: LogId,
    /// `hashedrekord` 0.0.1.
    pub kind_version: KindVersion,
    /// When the log integrated it (Unix seconds).
    #[serde(with = "int")]
    pub integrated_time: u64,
    /// The signed entry timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inclusion_promise: Option<InclusionPromise>,
    /// The Merkle inclusion proof and its checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inclusion_proof: Option<InclusionProof>,
    /// The entry's body as the log holds it.
    #[serde(with = "b64")]
    pub canonicalized_body: Vec<u8>,
}

/// `logId`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogId {
    /// sha256 of the log's public key (DER SubjectPublicKeyInfo).
    #[serde(with = "b64")]
    pub key_id: Vec<u8>,
}

/// `kindVersion`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindVersion {
    /// `hashedrekord`.
    pub kind: String,
    /// `0.0.1`.
    pub version: String,
}

/// `inclusionPromise`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InclusionPromise {
    /// The log's signature over the entry's body, time, id and index.
    #[serde(with = "b64")]
    pub signed_entry_timestamp: Vec<u8>,
}

/// `inclusionProof`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InclusionProof {
    /// The leaf's index in the tree.
    #[serde(with = "int")]
    pub log_index: u64,
    /// The tree's root hash.
    #[serde(with = "b64")]
    pub root_hash: Vec<u8>,
    /// The tree's size.
    #[serde(with = "int")]
    pub tree_size: u64,
    /// The proof's hashes, lowest level first.
    #[serde(with = "b64_list")]
    pub hashes: Vec<Vec<u8>>,
    /// The signed checkpoint for `root_hash`.
    pub checkpoint: Checkpoint,
}

/// `checkpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The signed note's text.
    pub envelope: String,
}

impl Bundle {
    /// Reads a bundle's JSON (at most 1 MiB: a bundle is a few KiB).
    pub fn from_json(text: &[u8]) -> Result<Bundle, SigstoreError> {
        if text.len() > 1 << 20 {
            return Err(SigstoreError::Malformed(format!("{} bytes, over the 1 MiB a bundle may have", text.len())));
        }
        let bundle: Bundle = serde_json::from_slice(text).map_err(|e| SigstoreError::Malformed(e.to_string()))?;
        if !bundle.media_type.starts_with("application/vnd.dev.sigstore.bundle") {
            return Err(SigstoreError::Malformed(format!(
                "media type {:?} is not a Sigstore bundle's",
                bundle.media_type
            )));
        }
        Ok(bundle)
    }

    /// The bundle's JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Its one log entry.
    pub(super) fn entry(&self) -> Result<&TlogEntry, SigstoreError> {
        match self.verification_material.tlog_entries.as_slice() {
            [entry] => Ok(entry),
            [] => Err(SigstoreError::Malformed(
                "no transparency log entry: without one there is no trusted signing time".into(),
            )),
            _ => Err(SigstoreError::Malformed("more than one transparency log entry".into())),
        }
    }

    /// The signature, and the digest the signer stated.
    pub(super) fn message_signature(&self) -> Result<(Vec<u8>, Option<&[u8]>), SigstoreError> {
        if self.dsse_envelope.is_some() {
            return Err(SigstoreError::Malformed("a DSSE envelope (an attestation), not a message signature".into()));
        }
        let m =
            self.message_signature.as_ref().ok_or_else(|| SigstoreError::Malformed("no message signature".into()))?;
        let digest = match &m.message_digest {
            Some(d) if d.algorithm != "SHA2_256" => {
                return Err(SigstoreError::Malformed(format!("message digest algorithm {:?}", d.algorithm)));
            }
            Some(d) => Some(d.digest.as_slice()),
            None => None,
        };
        Ok((m.signature.clone(), digest))
    }

    /// The signing certificate (DER), for a keyless bundle.
    pub(super) fn certificate(&self) -> Result<Option<Vec<u8>>, SigstoreError> {
        let m = &self.verification_material;
        let leaf = match (&m.certificate, &m.x509_certificate_chain) {
            (Some(c), _) => Some(c.raw_bytes.clone()),
            (None, Some(chain)) => chain.certificates.first().map(|c| c.raw_bytes.clone()),
            (None, None) => None,
        };
        if leaf.is_none() && m.public_key.is_none() {
            return Err(SigstoreError::Malformed("neither a certificate nor a public key".into()));
        }
        Ok(leaf)
    }
}

mod b64 {
    use super::*;
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(v))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        B64.decode(text.trim()).map_err(serde::de::Error::custom)
    }
}

mod b64_list {
    use super::*;
    pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|b| B64.encode(b)))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts.iter().map(|t| B64.decode(t.trim()).map_err(serde::de::Error::custom)).collect()
    }
}

mod int {
    use super::*;
    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Int {
            Text(String),
            Number(u64),
        }
        match Int::deserialize(d).map_err(|_| serde::de::Error::custom("expected an integer or a string of digits"))? {
            Int::Number(n) => Ok(n),
            Int::Text(t) => t.parse().map_err(|_| serde::de::Error::custom(format!("{t:?} is not an integer"))),
        }
    }
}
