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

/// A tag's revocation list, or why it is not one.
type Got = (String, Result<RevocationList, String>);

/// The most revocation lists read from one catalogue.
pub const MAX_LISTS: usize = 256;

impl Catalogues<'_> {
    /// Publishes a signed revocation list to `catalogue` (its signature is
    /// checked first): its tag.
    pub fn publish_revocations(&self, catalogue: &str, list: &RevocationList) -> Result<String, CatalogueError> {
        Self::repo(catalogue)?;
        list.verify().map_err(|e| CatalogueError::Invalid(e.to_string()))?;
        let body = serde_json::to_vec_pretty(list).map_err(|e| CatalogueError::Invalid(e.to_string()))?;
        if body.len() > super::MAX_ENTRY_BYTES {
            return Err(CatalogueError::Invalid(format!(
                "the list is {} bytes, over {}",
                body.len(),
                super::MAX_ENTRY_BYTES
            )));
        }
        let tag = format!("{REVOCATIONS_TAG_PREFIX}{}", &hex::encode(sha2::Sha256::digest(&body))[..12]);
        let annotations = serde_json::json!({ crate::oci::annotations::CREATED: list.issued });
        self.push_artifact(catalogue, &tag, REVOCATIONS_MEDIA_TYPE, body, annotations)?;
        Ok(tag)
    }

    /// Fetches the revocation lists under `tags` (at most [`MAX_LISTS`]):
    /// each one's result (a tag that is not a valid list: why).
    pub(super) fn fetch_revocations(
        &self,
        catalogue: &str,
        r: &OciRef,
        tags: &[String],
    ) -> Result<Vec<Got>, CatalogueError> {
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
                for (i, tag) in tags.iter().enumerate() {
                    if i >= MAX_LISTS {
                        out.push((tag.clone(), Err(format!("over {MAX_LISTS} revocation lists: not read"))));
                        continue;
                    }
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
