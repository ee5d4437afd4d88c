//! Revocation lists, live: a serving host reads the signed revocation lists
//! of its catalogues (`marketplace.catalogues`) every
//! `marketplace.revocations_secs` and at every reload, and puts in force
//! those signed by a key `marketplace.revocations_signed_by` names. A
//! plugin they revoke (its signing key or its component) is unloaded
//! without a restart: audited, its tools gone from every session with
//! `list_changed`, listed as held back with the list that revoked it. In a
//! fleet every host reads the same catalogues, so every host drops it
//! within one interval.
//!
//! A catalogue that cannot be read changes nothing: what was revoked stays
//! revoked (a registry an attacker can make unreachable must not un-revoke
//! a key).

use crate::catalogue::{Catalogues, revoked_by};
use crate::package::Revocation;
use crate::{HostBuilder, Installer, PluginChange};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Reads revocation lists and puts them in force.
#[derive(Debug)]
pub struct RevocationWatch {
    installer: Arc<Installer>,
    /// One check at a time (the interval and a reload may meet).
    one_at_a_time: Mutex<()>,
}

impl RevocationWatch {
    /// A watch over `installer`'s host.
    pub fn new(installer: Arc<Installer>) -> Arc<RevocationWatch> {
        Arc::new(RevocationWatch { installer, one_at_a_time: Mutex::new(()) })
    }

    /// Reads the revocation lists of `builder`'s catalogues now and puts in
    /// force what those signed by a key it trusts for that revoke: the
    /// plugins that changed, and warnings (a catalogue unreachable, a list
    /// ignored and why). With `network` false only the local copies are
    /// read (at start, before the host takes a call).
    pub fn check(&self, builder: &HostBuilder, network: bool) -> (Vec<PluginChange>, Vec<String>) {
        let _one = self.one_at_a_time.lock().unwrap_or_else(|p| p.into_inner());
        let config = builder.config();
        let market = &config.marketplace;
        let admission = self.installer.host().admission();
        if market.revocations_signed_by.is_empty() || market.catalogues.is_empty() {
            return (admission.apply_revocations(Vec::new()), Vec::new());
        }
        let mut warnings = Vec::new();
        // The signers, by key id: ids as written, names through trust.keys.
        let keys = builder.trust().map(|t| t.keys).unwrap_or_default();
        let mut signers = Vec::new();
        for s in &market.revocations_signed_by {
            if s.starts_with("ed25519:") {
                signers.push(s.clone());
            } else if let Some(k) = keys.iter().find(|k| &k.name == s) {
                signers.push(crate::package::fingerprint(&k.public_key));
            } else {
                warnings.push(format!(
                    "marketplace.revocations_signed_by: {s:?} is neither a key id nor the name of a trusted key: its lists are ignored"
                ));
            }
        }
        let store = match builder.oci_store() {
            Ok(s) => s,
            Err(e) => {
                warnings.push(format!("revocation lists not read: {e}: what was revoked stays revoked"));
                return (Vec::new(), warnings);
            }
        };
        let cache = builder.resolved_cache_dir();
        let catalogues = Catalogues::new(&store, cache.as_deref(), 0, market.max_entries)
            .with_revocation_signers(signers.clone())
            .revocations_only();
        let in_force = admission.published_revocations();
        let mut revoked: Vec<Revocation> = Vec::new();
        for c in &market.catalogues {
            let read = if network {
                catalogues.read(c, true).map(|(catalogue, report)| {
                    // What a read says of revocation lists (one left out,
                    // the registry unreachable and the copy used).
                    warnings.extend(
                        report
                            .warnings
                            .into_iter()
                            .filter(|w| w.contains("revocation list") || w.contains("cannot be reached")),
                    );
                    Some(catalogue)
                })
            } else {
                Ok(catalogues.cached(c))
            };
            match read {
                Ok(Some(catalogue)) => {
                    let (lists, ignored) = revoked_by(&catalogue, &|id| signers.iter().any(|s| s == id));
                    revoked.extend(lists);
                    warnings.extend(ignored);
                }
                // Nothing read and no copy: what this catalogue revoked
                // before stays revoked.
                other => {
                    if let Err(e) = other {
                        warnings
                            .push(format!("revocation lists of {c} not read ({e}): what they revoked stays revoked"));
                    }
                    let from = format!(" of {c} signed by ");
                    revoked.extend(in_force.iter().filter(|r| r.source.contains(&from)).cloned());
                }
            }
        }
        revoked.sort_by(|a, b| (&a.entry, &a.source).cmp(&(&b.entry, &b.source)));
        revoked.dedup();
        let changes = admission.apply_revocations(revoked);
        for c in &changes {
            tracing::warn!(target: "toolhost::revocations", plugin = %c.plugin, "{}", c.detail);
        }
        (changes, warnings)
    }

    /// Checks now, then every `marketplace.revocations_secs` of the config
    /// `reloader` holds (a reload that shortens it applies at once), on a
    /// thread of its own, for the life of the process.
    pub fn spawn(self: &Arc<Self>, reloader: Arc<crate::reload::Reloader>) -> std::io::Result<()> {
        let watch = self.clone();
        std::thread::Builder::new().name("toolhost-revocations".into()).spawn(move || {
            let mut said = Vec::new();
            loop {
                let (_, warnings) = watch.check(&reloader.builder(), true);
                // A warning is said once, not every interval.
                for w in warnings.iter().filter(|w| !said.contains(*w)) {
                    tracing::warn!(target: "toolhost::revocations", "{w}");
                }
                said = warnings;
                let since = std::time::Instant::now();
                while since.elapsed().as_secs() < reloader.builder().config().marketplace.revocations_secs.max(1) {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        })?;
        Ok(())
    }
}
