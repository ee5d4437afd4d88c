//! The transparency log entry: signed entry timestamp, Merkle inclusion
//! proof (RFC 9162 section 2.1.3.2) and its signed checkpoint (a signed note,
//! <https://github.com/transparency-dev/formats/tree/main/log>), and the
//! `hashedrekord` 0.0.1 body.

use super::bundle::TlogEntry;
use super::root::{LogKey, TrustedRoot};
use super::{SigstoreError, cert};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Verifies the entry under a log key of `root`; returns its integrated
/// time, now trusted.
pub(super) fn verify_entry(entry: &TlogEntry, root: &TrustedRoot) -> Result<i64, SigstoreError> {
    let bad = |m: String| SigstoreError::Log(m);
    if entry.kind_version.kind != "hashedrekord" || entry.kind_version.version != "0.0.1" {
        return Err(bad(format!(
            "kind {} {}: only hashedrekord 0.0.1 entries are accepted",
            entry.kind_version.kind, entry.kind_version.version
        )));
    }
    let time = i64::try_from(entry.integrated_time).map_err(|_| bad("integrated time out of range".into()))?;
    let key = root.tlogs.iter().find(|k| k.key_id == entry.log_id.key_id).ok_or_else(|| {
        bad(format!("its log (key id {:?}) is not in the trusted root", hex::encode(&entry.log_id.key_id)))
    })?;
    if !key.valid_at(time) {
        return Err(bad(format!("the log's key was not valid at the entry's time {}", super::rfc3339(time))));
    }
    // The signed entry timestamp is what makes the integrated time trusted.
    let promise = entry.inclusion_promise.as_ref().ok_or_else(|| {
        bad("no inclusion promise (signed entry timestamp): the entry's time cannot be trusted".into())
    })?;
    let set = format!(
        r#"{{"body":"{}","integratedTime":{},"logID":"{}","logIndex":{}}}"#,
        B64.encode(&entry.canonicalized_body),
        entry.integrated_time,
        hex::encode(&entry.log_id.key_id),
        entry.log_index
    );
    cert::verify_signature(&key.spki, set.as_bytes(), &promise.signed_entry_timestamp)
        .map_err(|e| bad(format!("the signed entry timestamp: {e}")))?;
    let proof = entry.inclusion_proof.as_ref().ok_or_else(|| bad("no inclusion proof".into()))?;
    let leaf = Sha256::new_with_prefix([0u8]).chain_update(&entry.canonicalized_body).finalize().to_vec();
    let computed = root_from_proof(proof.log_index, proof.tree_size, leaf, &proof.hashes).map_err(bad)?;
    if computed != proof.root_hash {
        return Err(bad("the inclusion proof does not lead to its root hash".into()));
    }
    verify_checkpoint(&proof.checkpoint.envelope, key, proof.tree_size, &proof.root_hash).map_err(bad)?;
    Ok(time)
}

/// RFC 9162 2.1.3.2: the root a proof leads to from leaf `index` of a tree
/// of `size`.
fn root_from_proof(index: u64, size: u64, leaf: Vec<u8>, hashes: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    if index >= size {
        return Err(format!("leaf index {index} is outside a tree of {size}"));
    }
    let node = |l: &[u8], r: &[u8]| Sha256::new_with_prefix([1u8]).chain_update(l).chain_update(r).finalize().to_vec();
    let (mut f_n, mut s_n) = (index, size - 1);
    let mut r = leaf;
    for p in hashes {
        if s_n == 0 {
            return Err("the inclusion proof has too many hashes".into());
        }
        if f_n & 1 == 1 || f_n == s_n {
            r = node(p, &r);
            if f_n & 1 == 0 {
                while f_n & 1 == 0 && f_n != 0 {
                    f_n >>= 1;
                    s_n >>= 1;
                }
            }
        } else {
            r = node(&r, p);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    if s_n != 0 {
        return Err("the inclusion proof has too few hashes".into());
    }
    Ok(r)
}

/// A checkpoint: `origin\nsize\nbase64(root)\n[other lines]\n\n— name base64(hint+sig)\n...`,
/// signed by the log's key (hint: the first 4 bytes of its key id).
fn verify_checkpoint(envelope: &str, key: &LogKey, size: u64, root: &[u8]) -> Result<(), String> {
    let split = envelope.find("\n\n").ok_or("the checkpoint is not a signed note")?;
    let (note, signatures) = (&envelope[..=split], &envelope[split + 2..]);
    let mut lines = note.lines();
    let _origin = lines.next().filter(|o| !o.is_empty()).ok_or("the checkpoint has no origin")?;
    let noted_size: u64 =
        lines.next().and_then(|l| l.parse().ok()).ok_or("the checkpoint's tree size is not a number")?;
    let noted_root = lines.next().and_then(|l| B64.decode(l).ok()).ok_or("the checkpoint's root hash is not base64")?;
    if noted_size != size || noted_root != root {
        return Err(format!("the checkpoint is for a tree of {noted_size}, not the proof's tree of {size}"));
    }
    for line in signatures.lines() {
        let Some(rest) = line.strip_prefix("\u{2014} ") else { continue };
        let Some(sig) = rest.split(' ').nth(1).and_then(|s| B64.decode(s).ok()) else { continue };
        if sig.len() > 4 && key.key_id.get(..4) == Some(&sig[..4]) {
            return cert::verify_signature(&key.spki, note.as_bytes(), &sig[4..])
                .map_err(|e| format!("the checkpoint's signature: {e}"));
        }
    }
    Err("the checkpoint is not signed by the log's key".into())
}

/// What a `hashedrekord` 0.0.1 body logs.
#[derive(Debug)]
pub(super) struct Body {
    /// sha256 of the artifact, hex.
    pub digest_hex: String,
    /// The signature.
    pub signature: Vec<u8>,
    /// The certificate or public key, DER (from the PEM the body holds).
    pub key_pem_der: Vec<u8>,
}

impl Body {
    pub(super) fn parse(body: &[u8]) -> Result<Body, SigstoreError> {
        let bad = |m: &str| SigstoreError::Log(format!("the entry's body: {m}"));
        let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| bad("not JSON"))?;
        if v["kind"] != "hashedrekord" || v["apiVersion"] != "0.0.1" {
            return Err(bad("not a hashedrekord 0.0.1 body"));
        }
        let spec = &v["spec"];
        if spec["data"]["hash"]["algorithm"] != "sha256" {
            return Err(bad("the hash is not sha256"));
        }
        let digest_hex = spec["data"]["hash"]["value"].as_str().ok_or_else(|| bad("no hash"))?.to_lowercase();
        let signature = spec["signature"]["content"]
            .as_str()
            .and_then(|s| B64.decode(s).ok())
            .ok_or_else(|| bad("no signature"))?;
        let pem = spec["signature"]["publicKey"]["content"]
            .as_str()
            .and_then(|s| B64.decode(s).ok())
            .and_then(|p| String::from_utf8(p).ok())
            .ok_or_else(|| bad("no public key"))?;
        let key_pem_der = cert::pem_der(&pem).ok_or_else(|| bad("the public key is not PEM"))?;
        Ok(Body { digest_hex, signature, key_pem_der })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(i: u8) -> Vec<u8> {
        Sha256::new_with_prefix([0u8]).chain_update([i]).finalize().to_vec()
    }
    fn node(l: &[u8], r: &[u8]) -> Vec<u8> {
        Sha256::new_with_prefix([1u8]).chain_update(l).chain_update(r).finalize().to_vec()
    }

    #[test]
    fn inclusion_proofs_lead_to_the_root_and_wrong_ones_do_not() {
        // A tree of 5: ((0 1)(2 3)) 4.
        let (l0, l1, l2, l3, l4) = (leaf(0), leaf(1), leaf(2), leaf(3), leaf(4));
        let n01 = node(&l0, &l1);
        let n23 = node(&l2, &l3);
        let n0123 = node(&n01, &n23);
        let root = node(&n0123, &l4);
        assert_eq!(root_from_proof(2, 5, l2.clone(), &[l3.clone(), n01.clone(), l4.clone()]).unwrap(), root);
        assert_eq!(root_from_proof(4, 5, l4.clone(), std::slice::from_ref(&n0123)).unwrap(), root);
        assert_eq!(root_from_proof(0, 1, l0.clone(), &[]).unwrap(), l0);
        assert_ne!(root_from_proof(3, 5, l2.clone(), &[l3.clone(), n01.clone(), l4.clone()]).unwrap(), root);
        assert!(root_from_proof(4, 5, l4.clone(), &[n0123.clone(), l0.clone()]).is_err());
        assert!(root_from_proof(2, 5, l2, &[l3, n01]).is_err());
        assert!(root_from_proof(5, 5, l4, &[]).is_err());
    }
}
