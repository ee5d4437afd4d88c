//! The signing certificate: its chain to a certificate authority of the
//! trusted root (rustls-webpki, at the log's time), its embedded SCT
//! (RFC 6962 section 3.3), Sigstore's X.509 profile, and the identity and
//! issuer it carries; and signature checks with ECDSA and Ed25519 keys.

use super::root::TrustedRoot;
use super::{SigstoreError, rfc3339};
use aws_lc_rs::signature;
use base64::Engine as _;
use rustls_pki_types::{CertificateDer, UnixTime};
use sha2::{Digest as _, Sha256};
use x509_cert::der::asn1::{ObjectIdentifier, Utf8StringRef};
use x509_cert::der::{Decode as _, Encode as _};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{KeyUsage, KeyUsages, SubjectAltName};
use x509_cert::spki::SubjectPublicKeyInfoRef;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
const SCT_LIST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.11129.2.4.2");
const ISSUER_V1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.1");
const ISSUER_V2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.8");
/// id-kp-codeSigning (1.3.6.1.5.5.7.3.3), DER contents.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// The DER inside a PEM block (any label).
pub fn pem_der(pem: &str) -> Option<Vec<u8>> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----") && !l.trim().is_empty()).collect();
    if !pem.trim_start().starts_with("-----BEGIN ") {
        return None;
    }
    B64.decode(body.trim()).ok()
}

/// The DER SubjectPublicKeyInfo in a PEM `PUBLIC KEY` block.
pub fn spki_from_pem(pem: &str) -> Option<Vec<u8>> {
    let der = pem_der(pem)?;
    SubjectPublicKeyInfoRef::from_der(&der).ok()?;
    Some(der)
}

/// A Sigstore key's id, as messages and `trust.revoked` name it: `ecdsa:`
/// and the first 16 hex digits of the sha256 of its DER
/// SubjectPublicKeyInfo.
pub fn spki_id(spki: &[u8]) -> String {
    format!("ecdsa:{}", &spki_sha256(spki)[..16])
}

/// The whole sha256 of a key's DER SubjectPublicKeyInfo, hex: what a
/// trusted key is matched by (never the short id alone).
pub fn spki_sha256(spki: &[u8]) -> String {
    hex::encode(Sha256::digest(spki))
}

/// Verifies `sig` over `msg` with the key in `spki` (DER): ECDSA P-256 with
/// SHA-256, P-384 with SHA-384 (ASN.1 signatures), or Ed25519.
pub(super) fn verify_signature(spki: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), String> {
    let info = SubjectPublicKeyInfoRef::from_der(spki).map_err(|e| format!("the key is malformed: {e}"))?;
    let point = info.subject_public_key.raw_bytes();
    let alg: &'static dyn signature::VerificationAlgorithm = if info.algorithm.oid == ED25519 {
        &signature::ED25519
    } else if info.algorithm.oid == EC_PUBLIC_KEY {
        let curve = info.algorithm.parameters.and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
        match curve {
            Some(c) if c == P256 => &signature::ECDSA_P256_SHA256_ASN1,
            Some(c) if c == P384 => &signature::ECDSA_P384_SHA384_ASN1,
            _ => return Err("the key's curve is not P-256 or P-384".into()),
        }
    } else {
        return Err(format!("the key's algorithm {} is not ECDSA or Ed25519", info.algorithm.oid));
    };
    signature::UnparsedPublicKey::new(alg, point).verify(msg, sig).map_err(|_| "the signature does not verify".into())
}

/// What a verified signing certificate says.
pub(super) struct Checked {
    pub identity: String,
    pub issuer: String,
    /// Its DER SubjectPublicKeyInfo.
    pub spki: Vec<u8>,
}

/// Verifies the signing certificate at time `t` (Unix seconds): validity,
/// chain, SCT, key usage; returns its identity, issuer and key.
pub(super) fn verify_certificate(leaf: &[u8], t: i64, root: &TrustedRoot) -> Result<Checked, SigstoreError> {
    let bad = |m: String| SigstoreError::Certificate(m);
    let cert = x509_cert::Certificate::from_der(leaf).map_err(|e| bad(format!("not an X.509 certificate: {e}")))?;
    let tbs = &cert.tbs_certificate;
    let not_before = tbs.validity.not_before.to_unix_duration().as_secs() as i64;
    let not_after = tbs.validity.not_after.to_unix_duration().as_secs() as i64;
    if t < not_before || t > not_after {
        return Err(SigstoreError::Expired {
            not_before: rfc3339(not_before),
            not_after: rfc3339(not_after),
            logged_at: rfc3339(t),
        });
    }
    // The chain, for code signing, at the log's time.
    let end_entity = CertificateDer::from(leaf);
    let ee = webpki::EndEntityCert::try_from(&end_entity).map_err(|e| bad(format!("{e:?}")))?;
    let algs = [
        webpki::aws_lc_rs::ECDSA_P256_SHA256,
        webpki::aws_lc_rs::ECDSA_P256_SHA384,
        webpki::aws_lc_rs::ECDSA_P384_SHA256,
        webpki::aws_lc_rs::ECDSA_P384_SHA384,
        webpki::aws_lc_rs::ED25519,
    ];
    let when = UnixTime::since_unix_epoch(std::time::Duration::from_secs(t.max(0) as u64));
    let mut issuer_spki = None;
    let mut last_error = String::from("no certificate authority in the trusted root was valid at the log's time");
    for authority in root.authorities.iter().filter(|a| a.valid_at(t)) {
        let (anchor_der, intermediates) = authority.chain.split_last().expect("a chain is never empty");
        let anchor_cert = CertificateDer::from(anchor_der.as_slice());
        let anchor = match webpki::anchor_from_trusted_cert(&anchor_cert) {
            Ok(a) => a,
            Err(e) => {
                last_error = format!("a root certificate of the trusted root: {e:?}");
                continue;
            }
        };
        let intermediates: Vec<CertificateDer> =
            intermediates.iter().map(|c| CertificateDer::from(c.as_slice())).collect();
        match ee.verify_for_usage(
            &algs,
            &[anchor],
            &intermediates,
            when,
            webpki::KeyUsage::required(CODE_SIGNING),
            None,
            None,
        ) {
            Ok(_) => {
                issuer_spki = issuer_key(tbs, &authority.chain);
                break;
            }
            Err(e) => last_error = format!("{e:?}"),
        }
    }
    let issuer_spki =
        issuer_spki.ok_or_else(|| bad(format!("it does not chain to the trusted root ({last_error})")))?;
    verify_sct(&cert, &issuer_spki, root).map_err(|e| bad(format!("its SCT: {e}")))?;
    let usage = tbs.get::<KeyUsage>().ok().flatten().map(|(_, u)| u);
    if !usage.is_some_and(|u| u.0.contains(KeyUsages::DigitalSignature)) {
        return Err(bad("its key usage is not digital signature".into()));
    }
    let identity = identity(tbs).ok_or_else(|| bad("it names no email or URI identity".into()))?;
    let issuer = oidc_issuer(tbs).ok_or_else(|| bad("it names no OIDC issuer".into()))?;
    let spki = tbs.subject_public_key_info.to_der().map_err(|e| bad(e.to_string()))?;
    Ok(Checked { identity, issuer, spki })
}

/// The SubjectPublicKeyInfo of the certificate in `chain` that issued `tbs`.
fn issuer_key(tbs: &x509_cert::TbsCertificate, chain: &[Vec<u8>]) -> Option<Vec<u8>> {
    chain.iter().find_map(|der| {
        let ca = x509_cert::Certificate::from_der(der).ok()?;
        (ca.tbs_certificate.subject == tbs.issuer).then(|| ca.tbs_certificate.subject_public_key_info.to_der().ok())?
    })
}

/// RFC 6962 3.2: each SCT signs the precertificate's TBS (the certificate's
/// without the SCT list) and the issuer's key hash; one from a CT log of
/// the trusted root must verify.
fn verify_sct(cert: &x509_cert::Certificate, issuer_spki: &[u8], root: &TrustedRoot) -> Result<(), String> {
    let mut tbs = cert.tbs_certificate.clone();
    let extensions = tbs.extensions.as_mut().ok_or("none embedded")?;
    let at = extensions.iter().position(|e| e.extn_id == SCT_LIST).ok_or("none embedded")?;
    let list = extensions.remove(at).extn_value;
    let precert = tbs.to_der().map_err(|e| e.to_string())?;
    // The extension's value is an OCTET STRING holding the TLS-encoded list.
    let inner = x509_cert::der::asn1::OctetString::from_der(list.as_bytes()).map_err(|e| e.to_string())?;
    let mut r = inner.as_bytes();
    let total = take_u16(&mut r)?;
    if total != r.len() {
        return Err("the SCT list's length is wrong".into());
    }
    let issuer_key_hash = Sha256::digest(issuer_spki);
    let mut seen = 0;
    while !r.is_empty() {
        let len = take_u16(&mut r)?;
        let (mut sct, rest) = split(r, len)?;
        r = rest;
        seen += 1;
        let (version, s) = split(sct, 1)?;
        let (log_id, s) = split(s, 32)?;
        let (timestamp, s) = split(s, 8)?;
        sct = s;
        let ext_len = take_u16(&mut sct)?;
        let (exts, s) = split(sct, ext_len)?;
        let (_hash_sig_alg, mut s) = split(s, 2)?;
        let sig_len = take_u16(&mut s)?;
        let (sig, _) = split(s, sig_len)?;
        if version != [0] {
            continue;
        }
        let at = i64::try_from(u64::from_be_bytes(timestamp.try_into().expect("8 bytes")) / 1000).unwrap_or(i64::MAX);
        // The CT log's key must be one the root lists, valid when it signed.
        let Some(log) = root.ctlogs.iter().find(|l| l.key_id == log_id && l.valid_at(at)) else { continue };
        let mut signed = vec![0u8, 0u8];
        signed.extend_from_slice(timestamp);
        signed.extend_from_slice(&[0, 1]);
        signed.extend_from_slice(&issuer_key_hash);
        signed.extend_from_slice(&(precert.len() as u32).to_be_bytes()[1..]);
        signed.extend_from_slice(&precert);
        signed.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        signed.extend_from_slice(exts);
        if verify_signature(&log.spki, &signed, sig).is_ok() {
            return Ok(());
        }
    }
    Err(format!("none of its {seen} SCTs verifies under a CT log key of the trusted root"))
}

fn take_u16(r: &mut &[u8]) -> Result<usize, String> {
    let (n, rest) = split(r, 2)?;
    *r = rest;
    Ok(usize::from(u16::from_be_bytes([n[0], n[1]])))
}

fn split(r: &[u8], n: usize) -> Result<(&[u8], &[u8]), String> {
    if r.len() < n { Err("an SCT is truncated".into()) } else { Ok(r.split_at(n)) }
}

/// The first email or URI in the SAN.
fn identity(tbs: &x509_cert::TbsCertificate) -> Option<String> {
    let (_, san) = tbs.get::<SubjectAltName>().ok()??;
    san.0.iter().find_map(|n| match n {
        GeneralName::Rfc822Name(s) | GeneralName::UniformResourceIdentifier(s) => Some(s.to_string()),
        _ => None,
    })
}

/// The OIDC issuer: extension .1.8 (a DER UTF8String) or the older .1.1
/// (raw UTF-8).
fn oidc_issuer(tbs: &x509_cert::TbsCertificate) -> Option<String> {
    let extensions = tbs.extensions.as_ref()?;
    let value = |oid| extensions.iter().find(|e| e.extn_id == oid).map(|e| e.extn_value.as_bytes());
    if let Some(v) = value(ISSUER_V2) {
        return Utf8StringRef::from_der(v).ok().map(|s| s.as_str().to_string());
    }
    value(ISSUER_V1).and_then(|v| String::from_utf8(v.to_vec()).ok())
}

/// Who the certificate names (keyless) or the log body's key (keyed), not
/// verified: for showing a bundle before a trust policy has checked it.
pub(super) fn claimed(leaf: Option<&[u8]>, body_key: Option<&[u8]>) -> Option<super::Signer> {
    match leaf {
        Some(der) => {
            let cert = x509_cert::Certificate::from_der(der).ok()?;
            let tbs = &cert.tbs_certificate;
            Some(super::Signer::Identity { identity: identity(tbs)?, issuer: oidc_issuer(tbs)? })
        }
        None => body_key.map(|spki| super::Signer::Key { key_id: spki_id(spki), sha256: spki_sha256(spki) }),
    }
}
