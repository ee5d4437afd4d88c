//! Referrers: artifacts about a manifest (a Sigstore bundle about a
//! plugin), by the OCI distribution spec v1.1's referrers tag schema, which
//! any registry serves: the referrer is a manifest whose `subject` names
//! the plugin's manifest, pushed by digest, and listed in an image index at
//! the tag `sha256-<hex of the subject's digest>`, where `oras discover`,
//! cosign and the registries' own referrers APIs look.

use super::{MANIFEST_MEDIA_TYPE, OciError, OciRef, OciStore, sha256_digest};

/// An image index's media type.
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The largest referrers index read.
const MAX_INDEX_BYTES: usize = 1 << 20;
/// The most referrers one index keeps (the oldest go first).
const MAX_REFERRERS: usize = 256;

/// The fallback tag listing the referrers of `digest`.
pub fn referrers_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

impl OciStore {
    /// Pushes `body` as an artifact of type `artifact_type` referring to the
    /// manifest `subject` (digest and size) of `r`'s repository, and lists
    /// it in the referrers index of `subject`: the referrer's digest.
    pub fn push_referrer(
        &self,
        r: &OciRef,
        subject: (&str, usize),
        artifact_type: &str,
        body: Vec<u8>,
        annotations: serde_json::Value,
    ) -> Result<String, OciError> {
        let empty = b"{}".to_vec();
        let (body_digest, empty_digest) = (sha256_digest(&body), sha256_digest(&empty));
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "artifactType": artifact_type,
            "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": empty_digest, "size": 2},
            "layers": [{"mediaType": artifact_type, "digest": body_digest, "size": body.len()}],
            "subject": {"mediaType": MANIFEST_MEDIA_TYPE, "digest": subject.0, "size": subject.1},
            "annotations": annotations,
        });
        let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
        let digest = sha256_digest(&manifest);
        let size = manifest.len();
        let at = r.at_digest(&digest);
        self.push_typed(&at, vec![(body, body_digest), (empty, empty_digest)], manifest, MANIFEST_MEDIA_TYPE)?;
        // The index: what the tag holds now, this referrer added once.
        let tag = OciRef::parse(&format!("oci://{}/{}:{}", r.registry(), r.repository(), referrers_tag(subject.0)))?;
        let mut entries: Vec<serde_json::Value> = self
            .get_bounded(&tag, "manifests", tag.tag().unwrap_or_default(), INDEX_MEDIA_TYPE, MAX_INDEX_BYTES)?
            .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
            .and_then(|v| v["manifests"].as_array().cloned())
            .unwrap_or_default();
        entries.retain(|e| e["digest"] != digest.as_str());
        entries.push(serde_json::json!({
            "mediaType": MANIFEST_MEDIA_TYPE, "digest": digest, "size": size, "artifactType": artifact_type,
        }));
        let skip = entries.len().saturating_sub(MAX_REFERRERS);
        let index = serde_json::json!({
            "schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": &entries[skip..],
        });
        self.push_typed(&tag, Vec::new(), serde_json::to_vec(&index).unwrap_or_default(), INDEX_MEDIA_TYPE)?;
        Ok(digest)
    }
}
