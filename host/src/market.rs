//! The marketplace as one host's config sees it: its catalogues
//! (`marketplace.catalogues`), the keys it trusts, search with each
//! plugin's newest version, and the choice and checking of an entry to
//! install. `toolhost search`, `toolhost install` and the DM's page all go
//! through here.

use crate::catalogue::{Catalogues, Hit, Listed, version_order};
use crate::oci::{OciRef, OciStore};
use crate::{HostBuilder, tool::log_safe};
use std::collections::BTreeSet;

/// The most entries of one version and publisher tried before giving up.
pub const MAX_CANDIDATES: usize = 8;

/// Why the marketplace could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum MarketError {
    /// No catalogue is configured.
    #[error(
        "no catalogues to read: name them in the config, e.g.\n  marketplace:\n    catalogues: [\"oci://registry.example.org/toolhost/catalogue\"]"
    )]
    NoCatalogues,
    /// The config's registry client or trust policy cannot be built.
    #[error(transparent)]
    Build(Box<crate::BuildError>),
    /// Nothing matches, or several publishers do, or every entry lied.
    #[error("{0}")]
    Choice(String),
    /// The registry failed while an entry was checked.
    #[error("{what}: {source}")]
    Registry {
        /// What was being done.
        what: String,
        /// The registry's error.
        source: Box<crate::oci::OciError>,
    },
}

impl From<crate::BuildError> for MarketError {
    fn from(e: crate::BuildError) -> MarketError {
        MarketError::Build(Box::new(e))
    }
}

/// The marketplace as this config sees it.
pub struct Market {
    /// The config's builder.
    pub builder: HostBuilder,
    /// Its registry client.
    pub store: OciStore,
    /// The key ids this host trusts (revoked ones left out).
    trusted: BTreeSet<String>,
}

/// An entry checked against the signed component, ready to add.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// The entry.
    pub listed: Listed,
    /// Its component, pinned at the digest checked.
    pub pinned: OciRef,
    /// Entries of the same version skipped because they lied, with why.
    pub skipped: Vec<String>,
}

impl Market {
    /// The marketplace of `builder`'s config.
    pub fn open(builder: HostBuilder) -> Result<Market, MarketError> {
        if builder.config().marketplace.catalogues.is_empty() {
            return Err(MarketError::NoCatalogues);
        }
        let store = builder.oci_store()?;
        // A revoked key is not trusted here, whatever trust.keys says.
        let policy = builder.trust()?;
        // Sigstore publishers as entries name them (`Verified::fingerprint`):
        // what the entry claims, which `install` holds to the component.
        let revoked =
            |id: &str| policy.revoked.iter().any(|r| r == id) || policy.published.iter().any(|r| r.entry == id);
        let publishers = policy.publishers.iter().filter(|p| {
            let id = match &p.signer {
                crate::sigstore::Signer::Identity { identity, .. } => identity,
                crate::sigstore::Signer::Key { key_id, .. } => key_id,
            };
            !revoked(id)
        });
        let trusted = policy
            .keys
            .iter()
            .map(|k| crate::package::fingerprint(&k.public_key))
            .filter(|id| !revoked(id))
            .chain(publishers.map(|p| p.signer.describe()))
            .collect();
        Ok(Market { builder, store, trusted })
    }

    /// Every entry of every catalogue, and the warnings of reading them.
    pub fn entries(&self, refresh: bool) -> (Vec<Listed>, Vec<String>) {
        let m = &self.builder.config().marketplace;
        let catalogues =
            Catalogues::new(&self.store, self.builder.resolved_cache_dir().as_deref(), m.refresh_secs, m.max_entries);
        catalogues.read_all(&m.catalogues, refresh)
    }

    /// Whether this host trusts the key `key_id`.
    pub fn trusts(&self, key_id: &str) -> bool {
        self.trusted.contains(key_id)
    }

    /// `query` ranked over every catalogue: the newest version of each
    /// plugin and publisher, at most `limit`, and the warnings of reading
    /// the catalogues (a warm search reads each one's index, not its copy).
    pub fn search(&self, query: &str, refresh: bool, limit: usize) -> (Vec<Hit>, Vec<String>) {
        let m = &self.builder.config().marketplace;
        let catalogues =
            Catalogues::new(&self.store, self.builder.resolved_cache_dir().as_deref(), m.refresh_secs, m.max_entries);
        catalogues.search(&m.catalogues, refresh, query, limit)
    }

    /// The entries `spec` (`NAME` or `NAME@VERSION`) names among
    /// `entries`: of its newest version and one publisher (`publisher`,
    /// else the only one trusted here), newest entry first.
    pub fn choose(
        &self,
        entries: Vec<Listed>,
        spec: &str,
        publisher: Option<&str>,
    ) -> Result<Vec<Listed>, MarketError> {
        let (name, version) = match spec.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (spec, None),
        };
        let mut found: Vec<Listed> = entries
            .into_iter()
            .filter(|l| l.entry.name == name && version.is_none_or(|v| l.entry.version == v))
            .filter(|l| publisher.is_none_or(|p| l.entry.publisher.key_id == p))
            .collect();
        if found.is_empty() {
            return Err(MarketError::Choice(format!(
                "no {} in the marketplace{}: `toolhost search {}` shows what there is",
                log_safe(spec),
                publisher.map(|p| format!(" published by {}", log_safe(p))).unwrap_or_default(),
                log_safe(name)
            )));
        }
        let publishers: BTreeSet<String> = found.iter().map(|l| l.entry.publisher.key_id.clone()).collect();
        if publishers.len() > 1 {
            let trusted: Vec<&String> = publishers.iter().filter(|p| self.trusts(p)).collect();
            match trusted.as_slice() {
                [one] => {
                    let one = (*one).clone();
                    found.retain(|l| l.entry.publisher.key_id == one);
                }
                _ => {
                    let list: Vec<String> = publishers
                        .iter()
                        .map(|p| format!("{p}{}", if self.trusts(p) { " (trusted here)" } else { "" }))
                        .collect();
                    return Err(MarketError::Choice(format!(
                        "{} is published by {} publishers: {}; choose one with --publisher KEY_ID",
                        name,
                        publishers.len(),
                        list.join(", ")
                    )));
                }
            }
        }
        // The newest version first; of one version, the newest entry first.
        // Only that version is tried: an older one is never installed in
        // its place.
        found.sort_by(|a, b| {
            version_order(&b.entry.version, &a.entry.version).then_with(|| b.entry.published.cmp(&a.entry.published))
        });
        let newest = found[0].entry.version.clone();
        found.retain(|l| l.entry.version == newest);
        found.truncate(MAX_CANDIDATES);
        Ok(found)
    }

    /// Holds each candidate to what the registry serves and the signature
    /// inside, newest first: the first that does not lie. One that lies is
    /// skipped, named (anyone who can push to a catalogue can add entries;
    /// none can hide an honest one this way).
    pub fn check(&self, candidates: Vec<Listed>, spec: &str) -> Result<Chosen, MarketError> {
        let mut skipped = Vec::new();
        for listed in candidates {
            let e = &listed.entry;
            let reg = |what: String| move |source| MarketError::Registry { what, source: Box::new(source) };
            let r = OciRef::parse(&e.reference).map_err(reg(format!("the entry's reference {}", e.reference)))?;
            let (digest, _) = self.store.manifest(&r).map_err(reg(format!("resolving {}", e.reference)))?;
            let pinned = r.at_digest(&digest);
            let fetched = self.store.fetch(&pinned, None).map_err(reg(format!("fetching {pinned}")))?;
            let verified = crate::package::parse(&fetched.bytes).and_then(|p| p.verify(&e.name));
            let verified = match verified {
                Ok(v) => v,
                Err(err) => {
                    skipped.push(format!(
                        "an entry of {} {} in {}: its component: {err}",
                        e.name, e.version, listed.catalogue
                    ));
                    continue;
                }
            };
            match e.check_against(
                &digest,
                verified.as_ref().map(|v| v.fingerprint()).as_deref(),
                verified.as_ref().map(|v| &v.manifest),
            ) {
                Ok(()) => return Ok(Chosen { listed, pinned, skipped }),
                Err(lies) => skipped.push(format!(
                    "an entry of {} {} in {} lies about {}",
                    e.name,
                    e.version,
                    listed.catalogue,
                    log_safe(&lies.join("; and about "))
                )),
            }
        }
        Err(MarketError::Choice(format!("refusing {}: {}", log_safe(spec), skipped.join("; "))))
    }
}

/// The tiers of an entry's tools, in words (`FAST`, `FAST/DEEP`).
pub fn tiers(l: &Listed) -> String {
    let t: BTreeSet<&str> = l
        .entry
        .tools
        .iter()
        .map(|t| match t.tier.as_str() {
            "" => "undeclared",
            "OVER" => "over budget",
            tier => tier,
        })
        .collect();
    t.into_iter().collect::<Vec<_>>().join("/")
}
