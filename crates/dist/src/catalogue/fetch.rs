//! Fetching one artifact of a catalogue (an entry, a revocation list):
//! its manifest and its one layer, each bounded, checked against its
//! digest.

use super::{ENTRY_MEDIA_TYPE, Entry, MAX_ENTRY_BYTES, MAX_ENTRY_MANIFEST_BYTES};
use crate::oci::{is_sha256_digest, sha256_digest};
use serde::Deserialize;

pub(super) enum Fetch {
    /// The registry failed: the read stops.
    Registry(String),
    /// The tag is not a valid entry: it is left out.
    Invalid(String),
}

#[derive(Deserialize)]
struct EntryManifest {
    #[serde(rename = "artifactType", default)]
    artifact_type: Option<String>,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: i64,
}

pub(super) async fn fetch_entry(
    reader: &mut crate::oci::bounded::Reader,
    repository: &str,
    tag: &str,
) -> Result<Entry, Fetch> {
    let body = fetch_layer(reader, repository, tag, ENTRY_MEDIA_TYPE, "entry").await?;
    let entry: Entry = serde_json::from_slice(&body).map_err(|e| {
        Fetch::Invalid(format!("the entry is not valid JSON of an entry: {}", crate::tool::log_safe(&e.to_string())))
    })?;
    entry.validate().map_err(|e| Fetch::Invalid(e.0))?;
    Ok(entry)
}

/// The one layer of the artifact of type `media_type` under `tag` (an
/// `what`: `entry`, `revocation list`), at most [`MAX_ENTRY_BYTES`],
/// checked against its digest.
pub(super) async fn fetch_layer(
    reader: &mut crate::oci::bounded::Reader,
    repository: &str,
    tag: &str,
    media_type: &str,
    what: &str,
) -> Result<Vec<u8>, Fetch> {
    let over = |m: &str| m.contains("limit");
    let raw =
        match reader.get(repository, "manifests", tag, crate::oci::MANIFEST_MEDIA_TYPE, MAX_ENTRY_MANIFEST_BYTES).await
        {
            Ok(Some(raw)) => raw,
            Ok(None) => return Err(Fetch::Invalid("the registry no longer serves it".into())),
            Err(m) if over(&m) => return Err(Fetch::Invalid(m)),
            Err(m) => return Err(Fetch::Registry(m)),
        };
    let m: EntryManifest = serde_json::from_slice(&raw)
        .map_err(|e| Fetch::Invalid(format!("its manifest is not an OCI manifest: {e}")))?;
    if m.artifact_type.as_deref() != Some(media_type) {
        return Err(Fetch::Invalid(format!("not a catalogue {what} (artifact type {media_type})")));
    }
    let [layer] = &m.layers[..] else {
        return Err(Fetch::Invalid(format!("a catalogue {what} has exactly one layer")));
    };
    if layer.media_type != media_type || !is_sha256_digest(&layer.digest) {
        return Err(Fetch::Invalid(format!("its layer is not a catalogue {what}")));
    }
    if layer.size < 0 {
        return Err(Fetch::Invalid(format!("its layer declares a negative size ({})", layer.size)));
    }
    if layer.size as u64 > MAX_ENTRY_BYTES as u64 {
        return Err(Fetch::Invalid(format!("the {what} is {} bytes, over {MAX_ENTRY_BYTES}", layer.size)));
    }
    let declared = usize::try_from(layer.size).unwrap_or(0);
    let body = match reader.get(repository, "blobs", &layer.digest, media_type, declared).await {
        Ok(Some(b)) => b,
        Ok(None) => return Err(Fetch::Invalid(format!("the registry does not serve its {what}"))),
        Err(m) if over(&m) => return Err(Fetch::Invalid(m)),
        Err(m) => return Err(Fetch::Registry(m)),
    };
    if sha256_digest(&body) != layer.digest {
        return Err(Fetch::Invalid(format!("the {what}'s bytes do not match its digest")));
    }
    Ok(body)
}
