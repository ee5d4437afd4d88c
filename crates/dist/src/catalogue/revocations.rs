//! Revocation lists in a catalogue: each a tag of its own
//! ([`REVOCATIONS_TAG_PREFIX`] and 12 hex digits of its digest), an
//! artifact of type [`REVOCATIONS_MEDIA_TYPE`] whose one layer is a signed
//! [`RevocationList`]. Like entries, a publish writes only its own tag;
//! unlike entries, a list is acted on only when its signer is one the
//! operator names (`marketplace.revocations_signed_by`).

use super::{CatalogueError, Catalogues, Fetch, fetch_layer};
use crate::oci::OciRef;
use sha2::Digest as _;
use toolhost_admission::package::{Revocation, RevocationList};

/// A revocation list's media type: its artifact type and its one layer's.
pub const REVOCATIONS_MEDIA_TYPE: &str = "application/vnd.toolhost.catalogue.revocations.v1+json";
/// What a revocation list's tag starts with (no plugin name starts with
/// `_`, so no entry's tag does).
pub const REVOCATIONS_TAG_PREFIX: &str = "_revocations-";

/// The signer's key id a revocation list's tag claims
/// (`_revocations-<16 hex>-<12 hex>`), as `ed25519:<16 hex>`. A claim: the
/// list's signature is what counts; the tag only lets readers skip the
/// lists of signers they do not act on without fetching them.
pub fn claimed_signer(tag: &str) -> Option<String> {
    let rest = tag.strip_prefix(REVOCATIONS_TAG_PREFIX)?;
    let (id, _) = rest.split_once('-')?;
    (id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        .then(|| format!("ed25519:{id}"))
}

/// A tag's revocation list, or why it is not one.
type Got = (String, Result<RevocationList, String>);

/// The most revocation lists fetched from one catalogue in one read (the
/// rest are fetched by the reads that follow).
pub const MAX_LISTS: usize = 256;

impl Catalogues<'_> {
    /// Publishes a signed revocation list to `catalogue` (its signature is
    /// checked first): its tag.
    pub fn publish_revocations(&self, catalogue: &str, list: &RevocationList) -> Result<String, CatalogueError> {
        Self::repo(catalogue)?;
        let signer = list.verify().map_err(|e| CatalogueError::Invalid(e.to_string()))?;
        let body = serde_json::to_vec_pretty(list).map_err(|e| CatalogueError::Invalid(e.to_string()))?;
        if body.len() > super::MAX_ENTRY_BYTES {
            return Err(CatalogueError::Invalid(format!(
                "the list is {} bytes, over {}",
                body.len(),
                super::MAX_ENTRY_BYTES
            )));
        }
        let tag = format!(
            "{REVOCATIONS_TAG_PREFIX}{}-{}",
            signer.strip_prefix("ed25519:").unwrap_or(&signer),
            &hex::encode(sha2::Sha256::digest(&body))[..12]
        );
        let annotations = serde_json::json!({ crate::oci::annotations::CREATED: list.issued });
        self.push_artifact(catalogue, &tag, REVOCATIONS_MEDIA_TYPE, body, annotations)?;
        Ok(tag)
    }

    /// Fetches the revocation lists under `tags` whose tag names a signer
    /// this reader acts on ([`Catalogues::with_revocation_signers`]), at
    /// most [`MAX_LISTS`] a read (the rest at the next): each one's result
    /// (a tag that is not a valid list: why). Lists of other signers are
    /// never fetched, so no one can push enough of them to hide one.
    pub(super) fn fetch_revocations(
        &self,
        catalogue: &str,
        r: &OciRef,
        tags: &[String],
    ) -> Result<Vec<Got>, CatalogueError> {
        let Some(signers) = &self.revocation_signers else { return Ok(Vec::new()) };
        let tags: Vec<&String> =
            tags.iter().filter(|t| claimed_signer(t).is_some_and(|id| signers.contains(&id))).take(MAX_LISTS).collect();
        if tags.is_empty() {
            return Ok(Vec::new());
        }
        let reg = |source| CatalogueError::Registry { catalogue: catalogue.into(), source };
        let mut reader = self.store.reader(r).map_err(reg)?;
        let registry = r.registry().to_string();
        let repository = r.repository().to_string();
        self.store
            .block(&registry, async {
                let mut out = Vec::new();
                for tag in tags {
                    let got =
                        match fetch_layer(&mut reader, &repository, tag, REVOCATIONS_MEDIA_TYPE, "revocation list")
                            .await
                        {
                            Err(Fetch::Registry(message)) => return Err(crate::oci::classify(&registry, r, message)),
                            Err(Fetch::Invalid(why)) => Err(why),
                            Ok(body) => serde_json::from_slice::<RevocationList>(&body).map_err(|e| {
                                format!("not a revocation list: {}", crate::tool::log_safe(&e.to_string()))
                            }),
                        };
                    out.push((tag.clone(), got));
                }
                Ok(out)
            })
            .map_err(reg)
    }
}

/// What the revocation lists of `catalogue` revoke, of those signed by a
/// key whose id `signers` holds; and why each other list is ignored.
pub fn revoked_by(catalogue: &super::Catalogue, signers: &dyn Fn(&str) -> bool) -> (Vec<Revocation>, Vec<String>) {
    let mut out = Vec::new();
    let mut ignored = Vec::new();
    for (tag, list) in &catalogue.revocations {
        match list.verify() {
            Ok(key_id) if claimed_signer(tag).is_some_and(|c| c != key_id) => ignored.push(format!(
                "revocation list {tag} of {}: its tag names another signer than the one who signed it ({key_id})",
                catalogue.catalogue
            )),
            Ok(key_id) if signers(&key_id) => {
                let source = format!("the revocation list {} of {} signed by {key_id}", tag, catalogue.catalogue);
                for entry in &list.revoked {
                    out.push(Revocation { entry: entry.clone(), source: source.clone(), reason: list.reason.clone() });
                }
            }
            Ok(key_id) => ignored.push(format!(
                "revocation list {tag} of {}: signed by {key_id}, which marketplace.revocations_signed_by does not name",
                catalogue.catalogue
            )),
            Err(e) => ignored.push(format!("revocation list {tag} of {}: {e}", catalogue.catalogue)),
        }
    }
    (out, ignored)
}

#[cfg(test)]
mod tests {
    use super::claimed_signer;

    #[test]
    fn a_lists_tag_names_its_signer() {
        assert_eq!(
            claimed_signer("_revocations-0123456789abcdef-a1b2c3d4e5f6").as_deref(),
            Some("ed25519:0123456789abcdef")
        );
        for bad in
            ["_revocations-0123456789ABCDEF-a1", "_revocations-0123-a1", "dice_1.0.0_ab", "_revocations-a1b2c3d4e5f6"]
        {
            assert_eq!(claimed_signer(bad), None, "{bad}");
        }
    }
}
