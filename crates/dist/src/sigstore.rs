//! Signing through Sigstore: a certificate from Fulcio for an OIDC identity
//! (keyless) or a key of the author's own, and an entry in Rekor.
//!
//! The wire is the services' documented v1/v2 REST APIs:
//! - Fulcio `POST /api/v2/signingCert` with the identity token and a fresh
//!   ECDSA P-256 public key, proven by a signature over the token's `sub`
//!   claim; the answer is the certificate chain with an embedded SCT
//!   (<https://github.com/sigstore/fulcio/blob/main/fulcio.proto>);
//! - Rekor `POST /api/v1/log/entries` with a `hashedrekord` 0.0.1 entry; the
//!   answer holds the entry's body, integrated time, signed entry timestamp
//!   and inclusion proof
//!   (<https://github.com/sigstore/rekor/blob/main/openapi.yaml>).
//!
//! The result is a bundle (v0.3) that cosign, sigstore-python and
//! sigstore-js verify, and that [`toolhost_admission::sigstore::verify`]
//! verifies offline.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use toolhost_admission::sigstore::{self, Bundle, TlogEntry};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;
/// The public-good instance's Fulcio.
pub const PUBLIC_FULCIO: &str = "https://fulcio.sigstore.dev";
/// The public-good instance's Rekor.
pub const PUBLIC_REKOR: &str = "https://rekor.sigstore.dev";
/// DER prefix of a P-256 SubjectPublicKeyInfo before its 65-byte point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// The largest answer read from Fulcio or Rekor.
const MAX_ANSWER: usize = 1 << 20;

/// Why signing through Sigstore failed.
#[derive(Debug, thiserror::Error)]
pub enum SigstoreSignError {
    /// The identity token cannot be read.
    #[error("the identity token {0}")]
    Token(String),
    /// The key file cannot be read.
    #[error("{0}")]
    Key(String),
    /// Fulcio refused or answered something unreadable.
    #[error("Fulcio at {url}: {reason}")]
    Fulcio {
        /// Its base URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// Rekor refused or answered something unreadable.
    #[error("Rekor at {url}: {reason}")]
    Rekor {
        /// Its base URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
}

/// Where to sign.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Fulcio's base URL.
    pub fulcio: String,
    /// Rekor's base URL.
    pub rekor: String,
}

impl Default for Instance {
    fn default() -> Self {
        Instance { fulcio: PUBLIC_FULCIO.into(), rekor: PUBLIC_REKOR.into() }
    }
}

/// The claims of an identity token that signing uses (not verified here:
/// Fulcio verifies the token).
#[derive(Debug, Clone)]
pub struct TokenClaims {
    /// `sub`.
    pub subject: String,
    /// `email`, when the token has one.
    pub email: Option<String>,
    /// `iss`.
    pub issuer: String,
}

impl TokenClaims {
    /// Reads a JWT's claims.
    pub fn read(token: &str) -> Result<TokenClaims, SigstoreSignError> {
        if token.trim().is_empty() {
            return Err(SigstoreSignError::Token(
                "is empty (is the variable you passed set?): pass a JWT from your OIDC provider".into(),
            ));
        }
        let payload = token.split('.').nth(1).ok_or_else(|| SigstoreSignError::Token("is not a JWT".into()))?;
        let raw = B64URL
            .decode(payload.trim_end_matches('='))
            .map_err(|_| SigstoreSignError::Token("is not a JWT (its claims are not base64url)".into()))?;
        let v: serde_json::Value = serde_json::from_slice(&raw)
            .map_err(|_| SigstoreSignError::Token("is not a JWT (claims not JSON)".into()))?;
        let text = |k: &str| v[k].as_str().map(str::to_string);
        if let Some(exp) = v["exp"].as_i64()
            && exp < chrono::Utc::now().timestamp()
        {
            return Err(SigstoreSignError::Token(format!(
                "expired at {}: get a fresh one",
                chrono::DateTime::from_timestamp(exp, 0).map_or(exp.to_string(), |d| d.to_rfc3339())
            )));
        }
        Ok(TokenClaims {
            subject: text("sub").ok_or_else(|| SigstoreSignError::Token("has no sub claim".into()))?,
            email: text("email"),
            issuer: text("iss").ok_or_else(|| SigstoreSignError::Token("has no iss claim".into()))?,
        })
    }

    /// The identity Fulcio will certify: the email, else the subject.
    pub fn identity(&self) -> &str {
        self.email.as_deref().unwrap_or(&self.subject)
    }
}

/// The signing key: a fresh one (keyless) or the author's.
pub struct SigningKey {
    pair: EcdsaKeyPair,
}

impl SigningKey {
    /// A fresh P-256 key, for one keyless signature.
    pub fn ephemeral() -> Result<SigningKey, SigstoreSignError> {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING)
            .map_err(|_| SigstoreSignError::Key("no ECDSA key could be generated".into()))?;
        Ok(SigningKey { pair })
    }

    /// An ECDSA P-256 private key in PEM (`PRIVATE KEY`, PKCS#8, or
    /// `EC PRIVATE KEY`), as `openssl genpkey -algorithm EC -pkeyopt
    /// ec_paramgen_curve:P-256` writes it.
    pub fn from_pem(pem: &str, what: &str) -> Result<SigningKey, SigstoreSignError> {
        if pem.trim_start().starts_with('{') {
            return Err(SigstoreSignError::Key(format!(
                "{what} is a toolhost (ed25519) key file: sign with --key {what}, or give --sigstore-key an ECDSA key"
            )));
        }
        if pem.contains("PUBLIC KEY-----") {
            return Err(SigstoreSignError::Key(format!(
                "{what} is a public key: --sigstore-key takes the private key it was made from"
            )));
        }
        if pem.contains("ENCRYPTED") {
            return Err(SigstoreSignError::Key(format!(
                "{what} is encrypted (a cosign key?): toolhost reads unencrypted PEM keys; decrypt it, or make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {what}`"
            )));
        }
        let der =
            sigstore::pem_der(pem).ok_or_else(|| SigstoreSignError::Key(format!("{what} is not a PEM private key")))?;
        let pair = EcdsaKeyPair::from_private_key_der(&ECDSA_P256_SHA256_ASN1_SIGNING, &der).map_err(|_| {
            SigstoreSignError::Key(format!(
                "{what} is not an ECDSA P-256 private key (make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {what}`)"
            ))
        })?;
        Ok(SigningKey { pair })
    }

    /// The public key, DER SubjectPublicKeyInfo.
    pub fn spki(&self) -> Vec<u8> {
        let mut out = P256_SPKI_PREFIX.to_vec();
        out.extend_from_slice(self.pair.public_key().as_ref());
        out
    }

    /// The public key in PEM.
    pub fn public_pem(&self) -> String {
        pem("PUBLIC KEY", &self.spki())
    }

    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, SigstoreSignError> {
        self.pair
            .sign(&SystemRandom::new(), msg)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| SigstoreSignError::Key("signing failed".into()))
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = B64.encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or_default()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| format!("no HTTP client: {e}"))
}

/// A request error in words: a timeout says so, others with their cause.
fn request_error(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "no answer within 60 s".into();
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out = format!("{out}: {s}");
        source = s.source();
    }
    out
}

async fn post(url: &str, body: &serde_json::Value) -> Result<serde_json::Value, String> {
    let resp = client()?.post(url).json(body).send().await.map_err(|e| format!("POST {url}: {}", request_error(&e)))?;
    let status = resp.status();
    let bytes = toolhost_base::bounded::read_capped(resp.content_length(), MAX_ANSWER, resp.bytes_stream())
        .await
        .map_err(|e| match e {
            toolhost_base::bounded::BodyError::Read(e) if e.is_timeout() => "no whole answer within 60 s".to_string(),
            e => format!("reading the answer: {e}"),
        })?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    if !status.is_success() {
        let msg = v["message"].as_str().map_or_else(|| String::from_utf8_lossy(&bytes).into_owned(), str::to_string);
        // The service's words, without what a terminal would obey.
        let msg: String = msg.chars().take(500).map(|c| if c.is_control() { ' ' } else { c }).collect();
        return Err(format!(
            "POST {url} answered {status}: {msg}{}",
            if status == reqwest::StatusCode::NOT_FOUND {
                " (the URL flags take the service's base URL, as https://fulcio.sigstore.dev)"
            } else {
                ""
            }
        ));
    }
    if v.is_null() {
        return Err("the answer is not JSON".into());
    }
    Ok(v)
}

/// Signs `artifact` keyless: a certificate from Fulcio for `token`, an
/// entry in Rekor.
pub async fn sign_keyless(artifact: &[u8], token: &str, at: &Instance) -> Result<Bundle, SigstoreSignError> {
    let claims = TokenClaims::read(token)?;
    let key = SigningKey::ephemeral()?;
    let proof = key.sign(claims.subject.as_bytes())?;
    let fulcio = |reason: String| SigstoreSignError::Fulcio { url: at.fulcio.clone(), reason };
    let request = serde_json::json!({
        "credentials": {"oidcIdentityToken": token},
        "publicKeyRequest": {
            "publicKey": {"algorithm": "ECDSA", "content": key.public_pem()},
            "proofOfPossession": B64.encode(proof),
        },
    });
    let answer =
        post(&format!("{}/api/v2/signingCert", at.fulcio.trim_end_matches('/')), &request).await.map_err(fulcio)?;
    if answer.get("signedCertificateDetachedSct").is_some() {
        return Err(fulcio("it answered with a detached SCT; only certificates with an embedded SCT are used".into()));
    }
    let leaf_pem = answer["signedCertificateEmbeddedSct"]["chain"]["certificates"][0]
        .as_str()
        .ok_or_else(|| fulcio("its answer holds no certificate chain".into()))?
        .to_string();
    let leaf = sigstore::pem_der(&leaf_pem).ok_or_else(|| fulcio("its certificate is not PEM".into()))?;
    if sigstore::certificate_signer(&leaf).is_none() {
        return Err(fulcio(
            "its certificate is not a Sigstore signing certificate (no identity or issuer in it)".into(),
        ));
    }
    let signature = key.sign(artifact)?;
    let entry = log(artifact, &signature, &leaf_pem, at).await?;
    Ok(bundle(artifact, signature, entry, Some(leaf), None))
}

/// Signs `artifact` with the author's key, logged in Rekor.
pub async fn sign_with_key(artifact: &[u8], key: &SigningKey, at: &Instance) -> Result<Bundle, SigstoreSignError> {
    let signature = key.sign(artifact)?;
    let entry = log(artifact, &signature, &key.public_pem(), at).await?;
    Ok(bundle(artifact, signature, entry, None, Some(sigstore::spki_id(&key.spki()))))
}

fn bundle(
    artifact: &[u8],
    signature: Vec<u8>,
    entry: TlogEntry,
    leaf: Option<Vec<u8>>,
    hint: Option<String>,
) -> Bundle {
    serde_json::from_value(serde_json::json!({
        "mediaType": sigstore::MEDIA_TYPE,
        "verificationMaterial": {},
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": B64.encode(Sha256::digest(artifact))},
            "signature": B64.encode(&signature),
        },
    }))
    .map(|mut b: Bundle| {
        b.verification_material.certificate =
            leaf.map(|raw_bytes| toolhost_admission::sigstore::RawBytes { raw_bytes });
        b.verification_material.public_key = hint.map(|hint| toolhost_admission::sigstore::KeyHint { hint });
        b.verification_material.tlog_entries = vec![entry];
        b
    })
    .expect("a bundle's fixed JSON reads")
}

/// Logs a `hashedrekord` entry; returns it as a bundle holds it.
async fn log(artifact: &[u8], signature: &[u8], key_pem: &str, at: &Instance) -> Result<TlogEntry, SigstoreSignError> {
    let rekor = |reason: String| SigstoreSignError::Rekor { url: at.rekor.clone(), reason };
    let request = serde_json::json!({
        "apiVersion": "0.0.1",
        "kind": "hashedrekord",
        "spec": {
            "data": {"hash": {"algorithm": "sha256", "value": hex::encode(Sha256::digest(artifact))}},
            "signature": {"content": B64.encode(signature), "publicKey": {"content": B64.encode(key_pem)}},
        },
    });
    let answer =
        post(&format!("{}/api/v1/log/entries", at.rekor.trim_end_matches('/')), &request).await.map_err(rekor)?;
    let (_uuid, e) =
        answer.as_object().and_then(|m| m.iter().next()).ok_or_else(|| rekor("its answer holds no entry".into()))?;
    let proof = &e["verification"]["inclusionProof"];
    let hex_b64 = |v: &serde_json::Value| v.as_str().and_then(|h| hex::decode(h).ok()).map(|b| B64.encode(b));
    let hashes: Option<Vec<String>> = proof["hashes"].as_array().map(|a| a.iter().filter_map(hex_b64).collect());
    let entry = serde_json::json!({
        "logIndex": e["logIndex"].as_u64().map(|n| n.to_string()),
        "logId": {"keyId": hex_b64(&e["logID"])},
        "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
        "integratedTime": e["integratedTime"].as_u64().map(|n| n.to_string()),
        "inclusionPromise": {"signedEntryTimestamp": e["verification"]["signedEntryTimestamp"]},
        "inclusionProof": {
            "logIndex": proof["logIndex"].as_u64().map(|n| n.to_string()),
            "rootHash": hex_b64(&proof["rootHash"]),
            "treeSize": proof["treeSize"].as_u64().map(|n| n.to_string()),
            "hashes": hashes,
            "checkpoint": {"envelope": proof["checkpoint"]},
        },
        "canonicalizedBody": e["body"],
    });
    serde_json::from_value(entry).map_err(|err| rekor(format!("its entry is incomplete: {err}")))
}

/// The job's own identity token in a GitHub Actions job with
/// `permissions: id-token: write` (`ACTIONS_ID_TOKEN_REQUEST_URL` and
/// `_TOKEN` set), for audience `sigstore`; `None` elsewhere.
pub async fn ambient_token() -> Result<Option<String>, SigstoreSignError> {
    let (Ok(url), Ok(bearer)) =
        (std::env::var("ACTIONS_ID_TOKEN_REQUEST_URL"), std::env::var("ACTIONS_ID_TOKEN_REQUEST_TOKEN"))
    else {
        return Ok(None);
    };
    let bad = |e: String| SigstoreSignError::Token(format!("from GitHub Actions: {e}"));
    let sep = if url.contains('?') { '&' } else { '?' };
    let resp = client()
        .map_err(bad)?
        .get(format!("{url}{sep}audience=sigstore"))
        .bearer_auth(bearer)
        .send()
        .await
        .map_err(|e| bad(e.to_string()))?;
    if !resp.status().is_success() {
        return Err(bad(format!("{}", resp.status())));
    }
    let bytes = toolhost_base::bounded::read_capped(resp.content_length(), MAX_ANSWER, resp.bytes_stream())
        .await
        .map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    v["value"].as_str().map(|t| Some(t.to_string())).ok_or_else(|| bad("no token in the answer".into()))
}
