//! Sigstore's trusted root (`application/vnd.dev.sigstore.trustedroot+json`):
//! the keys of the transparency logs and CT logs, and the certificate
//! authorities, each with the window it is valid for.

use super::SigstoreError;
use base64::Engine as _;
use serde::Deserialize;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The public-good instance's trusted root, as sigstore-python 4.5.1 ships
/// it (`_store/https%3A%2F%2Ftuf-repo-cdn.sigstore.dev/trusted_root.json`):
/// the default when `trust.sigstore.trusted_root` names no file.
const PUBLIC_GOOD: &str = include_str!("public_good_trusted_root.json");

/// A log's key, valid for a window.
#[derive(Debug, Clone)]
pub(super) struct LogKey {
    /// sha256 of the key's DER SubjectPublicKeyInfo.
    pub key_id: Vec<u8>,
    /// DER SubjectPublicKeyInfo.
    pub spki: Vec<u8>,
    pub start: i64,
    pub end: Option<i64>,
}

/// A certificate authority: its chain, leaf-most first, root last.
#[derive(Debug, Clone)]
pub(super) struct Authority {
    pub chain: Vec<Vec<u8>>,
    pub start: i64,
    pub end: Option<i64>,
}

/// A Sigstore trusted root.
#[derive(Debug, Clone)]
pub struct TrustedRoot {
    pub(super) tlogs: Vec<LogKey>,
    pub(super) ctlogs: Vec<LogKey>,
    pub(super) authorities: Vec<Authority>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RootJson {
    media_type: String,
    #[serde(default)]
    tlogs: Vec<LogJson>,
    #[serde(default)]
    certificate_authorities: Vec<AuthorityJson>,
    #[serde(default)]
    ctlogs: Vec<LogJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogJson {
    public_key: KeyJson,
    log_id: LogIdJson,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyJson {
    #[serde(default)]
    raw_bytes: String,
    #[serde(default)]
    valid_for: Option<WindowJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogIdJson {
    key_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthorityJson {
    cert_chain: ChainJson,
    #[serde(default)]
    valid_for: Option<WindowJson>,
}

#[derive(Deserialize)]
struct ChainJson {
    certificates: Vec<RawJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawJson {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct WindowJson {
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    end: Option<String>,
}

fn time(t: &Option<String>, what: &str) -> Result<Option<i64>, SigstoreError> {
    t.as_deref()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|d| d.timestamp())
                .map_err(|e| SigstoreError::Root(format!("{what}: {t:?} is not an RFC 3339 time: {e}")))
        })
        .transpose()
}

fn window(w: &Option<WindowJson>, what: &str) -> Result<(i64, Option<i64>), SigstoreError> {
    match w {
        None => Ok((i64::MIN, None)),
        Some(w) => Ok((time(&w.start, what)?.unwrap_or(i64::MIN), time(&w.end, what)?)),
    }
}

fn bytes(b64: &str, what: &str) -> Result<Vec<u8>, SigstoreError> {
    B64.decode(b64.trim()).map_err(|e| SigstoreError::Root(format!("{what} is not base64: {e}")))
}

fn logs(list: &[LogJson], what: &str) -> Result<Vec<LogKey>, SigstoreError> {
    list.iter()
        .enumerate()
        .map(|(i, l)| {
            let (start, end) = window(&l.public_key.valid_for, &format!("{what}[{i}]"))?;
            let key_id = bytes(&l.log_id.key_id, &format!("{what}[{i}].logId"))?;
            if key_id.len() != 32 {
                return Err(SigstoreError::Root(format!(
                    "{what}[{i}].logId.keyId is {} bytes, not the 32 of a sha256",
                    key_id.len()
                )));
            }
            Ok(LogKey { key_id, spki: bytes(&l.public_key.raw_bytes, &format!("{what}[{i}].publicKey"))?, start, end })
        })
        .collect()
}

impl TrustedRoot {
    /// Reads a trusted root's JSON.
    pub fn from_json(text: &str) -> Result<TrustedRoot, SigstoreError> {
        // sigstore-python's `--trust-config` file holds a root: read that.
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| SigstoreError::Root(e.to_string()))?;
        let v = match v["mediaType"].as_str() {
            Some(t) if t.starts_with("application/vnd.dev.sigstore.clienttrustconfig") => v["trustedRoot"].clone(),
            _ => v,
        };
        let root: RootJson = serde_json::from_value(v).map_err(|e| SigstoreError::Root(e.to_string()))?;
        if !root.media_type.starts_with("application/vnd.dev.sigstore.trustedroot") {
            return Err(SigstoreError::Root(format!("media type {:?} is not a trusted root's", root.media_type)));
        }
        let authorities = root
            .certificate_authorities
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let (start, end) = window(&a.valid_for, &format!("certificateAuthorities[{i}]"))?;
                let chain = a
                    .cert_chain
                    .certificates
                    .iter()
                    .map(|c| bytes(&c.raw_bytes, &format!("certificateAuthorities[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?;
                if chain.is_empty() {
                    return Err(SigstoreError::Root(format!("certificateAuthorities[{i}] has no certificate")));
                }
                Ok(Authority { chain, start, end })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustedRoot { tlogs: logs(&root.tlogs, "tlogs")?, ctlogs: logs(&root.ctlogs, "ctlogs")?, authorities })
    }

    /// Reads a trusted root file.
    pub fn read(path: &std::path::Path) -> Result<TrustedRoot, SigstoreError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SigstoreError::Root(format!("reading {}: {e}", path.display())))?;
        Self::from_json(&text).map_err(|e| match e {
            SigstoreError::Root(m) => SigstoreError::Root(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// The public-good instance's root (Fulcio at fulcio.sigstore.dev,
    /// Rekor at rekor.sigstore.dev), as compiled in.
    pub fn public_good() -> TrustedRoot {
        Self::from_json(PUBLIC_GOOD).expect("the compiled-in public-good trusted root parses")
    }
}

impl LogKey {
    pub(super) fn valid_at(&self, t: i64) -> bool {
        self.start <= t && self.end.is_none_or(|e| t <= e)
    }
}

impl Authority {
    pub(super) fn valid_at(&self, t: i64) -> bool {
        self.start <= t && self.end.is_none_or(|e| t <= e)
    }
}
