//! Sigstore publishers: packages whose section carries a Sigstore bundle
//! over the manifest, trusted by identity and issuer (keyless) or by key
//! (`--sigstore-key`), as `trust.publishers` names them.

use super::{Manifest, PackageError, TrustPolicy, window};
use crate::sigstore::{self, Bundle, Signer, TrustedRoot};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// One entry of `trust.publishers`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PublisherConfig {
    /// The certificate identity a keyless signature must carry: the email
    /// or URI in its SAN (`alice@example.org`,
    /// `https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main`).
    pub identity: Option<String>,
    /// The OIDC issuer that must have vouched for it
    /// (`https://accounts.google.com`, `https://token.actions.githubusercontent.com`).
    pub issuer: Option<String>,
    /// A PEM public key (ECDSA P-256 or P-384) for bundles signed with
    /// `toolhost sign --sigstore-key`, in place of identity and issuer.
    pub key_file: Option<PathBuf>,
    /// A name for reports [default: the identity, or the key file's stem].
    pub name: Option<String>,
    /// Plugins the log saw signed before this time (RFC 3339) are refused.
    pub not_before: Option<String>,
    /// Plugins the log saw signed after this time (RFC 3339) are refused.
    pub not_after: Option<String>,
}

/// `trust.sigstore`: where Sigstore's trust comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigstoreConfig {
    /// Sigstore's trusted-root JSON for the instance the publishers sign
    /// with [default: the public-good instance's, compiled in].
    pub trusted_root: Option<PathBuf>,
}

/// A publisher the policy trusts, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publisher {
    /// Its name in reports.
    pub name: String,
    /// What it signs as.
    pub signer: Signer,
    /// `not_before`, RFC 3339.
    pub not_before: Option<String>,
    /// `not_after`, RFC 3339.
    pub not_after: Option<String>,
}

impl Publisher {
    /// Whether this entry names `signer`: keys by their whole digest (an
    /// empty one, from a record before it was kept, names nothing),
    /// identities by identity and issuer, exactly.
    fn names(&self, signer: &Signer) -> bool {
        match (&self.signer, signer) {
            (Signer::Key { sha256: a, .. }, Signer::Key { sha256: b, .. }) => !a.is_empty() && a == b,
            (a, b) => a == b,
        }
    }
}

impl PublisherConfig {
    /// Resolves an entry; `read_key` reads a key file (the caller resolves
    /// its path and its ownership).
    pub fn resolve(&self, read_key: impl Fn(&PathBuf) -> Result<String, String>) -> Result<Publisher, String> {
        for (field, v) in [("identity", &self.identity), ("issuer", &self.issuer)] {
            if let Some(v) = v
                && (v.trim() != v || v.is_empty())
            {
                return Err(format!("{field} {v:?} is empty or has spaces around it: certificates never do"));
            }
        }
        let signer = match (&self.identity, &self.issuer, &self.key_file) {
            (Some(identity), Some(issuer), None) => {
                Signer::Identity { identity: identity.clone(), issuer: issuer.clone() }
            }
            (None, None, Some(file)) => {
                let pem = read_key(file)?;
                let spki = sigstore::spki_from_pem(&pem)
                    .ok_or_else(|| format!("{}: not a PEM public key (-----BEGIN PUBLIC KEY-----)", file.display()))?;
                Signer::Key { key_id: sigstore::spki_id(&spki), sha256: sigstore::spki_sha256(&spki) }
            }
            (Some(_), None, None) | (None, Some(_), None) => {
                return Err("name both identity and issuer: a keyless signature is trusted only for the pair".into());
            }
            (None, None, None) => return Err("name identity and issuer, or key_file".into()),
            _ => return Err("name identity and issuer, or key_file, not both".into()),
        };
        let name = self.name.clone().unwrap_or_else(|| match (&signer, &self.key_file) {
            (Signer::Identity { identity, .. }, _) => identity.clone(),
            (Signer::Key { .. }, Some(f)) => {
                let file = f.file_name().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
                let stem = file.strip_suffix(".pem").unwrap_or(&file);
                stem.strip_suffix(".pub").unwrap_or(stem).to_string()
            }
            (Signer::Key { key_id, .. }, None) => key_id.clone(),
        });
        let p = Publisher { name, signer, not_before: self.not_before.clone(), not_after: self.not_after.clone() };
        super::window::check_window_times(p.not_before.as_deref(), p.not_after.as_deref())?;
        Ok(p)
    }
}

/// How a Sigstore-signed plugin was verified, kept with its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigstoreSigned {
    /// The certificate identity (keyless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The OIDC issuer (keyless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The key id (keyed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The key's whole SubjectPublicKeyInfo sha256, hex (keyed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_sha256: Option<String>,
    /// When the transparency log saw it signed (RFC 3339).
    pub logged_at: String,
    /// Its index in the log.
    pub log_index: u64,
}

impl SigstoreSigned {
    pub(super) fn new(v: &sigstore::Verified) -> SigstoreSigned {
        let (identity, issuer, key_id, key_sha256) = match &v.signer {
            Signer::Identity { identity, issuer } => (Some(identity.clone()), Some(issuer.clone()), None, None),
            Signer::Key { key_id, sha256 } => (None, None, Some(key_id.clone()), Some(sha256.clone())),
        };
        SigstoreSigned { identity, issuer, key_id, key_sha256, logged_at: rfc3339(v.logged_at), log_index: v.log_index }
    }

    /// The signer, as the trust policy matches it.
    pub fn signer(&self) -> Signer {
        match (&self.identity, &self.issuer, &self.key_id) {
            (_, _, Some(key_id)) => {
                Signer::Key { key_id: key_id.clone(), sha256: self.key_sha256.clone().unwrap_or_default() }
            }
            (identity, issuer, None) => Signer::Identity {
                identity: identity.clone().unwrap_or_default(),
                issuer: issuer.clone().unwrap_or_default(),
            },
        }
    }

    /// What `trust.revoked` may name of it: its identity, or its key id.
    pub fn revocable(&self) -> String {
        self.key_id.clone().or_else(|| self.identity.clone()).unwrap_or_default()
    }

    /// One phrase: `alice@example.org (issuer https://...) through Sigstore, logged at ...`.
    pub fn describe(&self) -> String {
        format!(
            "{} through Sigstore, logged at {} (log index {})",
            self.signer().describe(),
            self.logged_at,
            self.log_index
        )
    }
}

fn rfc3339(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map_or_else(|| t.to_string(), |d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

static PUBLIC_GOOD: OnceLock<Arc<TrustedRoot>> = OnceLock::new();

impl TrustPolicy {
    /// The trusted root Sigstore bundles are verified under.
    pub fn sigstore_root(&self) -> Arc<TrustedRoot> {
        self.sigstore_root
            .clone()
            .unwrap_or_else(|| PUBLIC_GOOD.get_or_init(|| Arc::new(TrustedRoot::public_good())).clone())
    }

    /// Verifies a Sigstore bundle over `manifest_text` for `plugin`.
    pub(super) fn verify_sigstore(
        &self,
        plugin: &str,
        bundle: &Bundle,
        manifest_text: &str,
    ) -> Result<SigstoreSigned, PackageError> {
        sigstore::verify(bundle, manifest_text.as_bytes(), &self.sigstore_root()).map(|v| SigstoreSigned::new(&v)).map_err(
            |e| {
                // Under the compiled-in root, a private instance's log or CA is unknown.
                let hint = self.sigstore_root.is_none()
                    && matches!(e, sigstore::SigstoreError::Log(_) | sigstore::SigstoreError::Certificate(_));
                let hint = if hint {
                    " (checked under the public-good instance's root: for another instance, set trust.sigstore.trusted_root)"
                } else {
                    ""
                };
                PackageError::Sigstore { plugin: plugin.to_string(), reason: format!("{e}{hint}") }
            },
        )
    }

    /// The first publisher entry naming `signed`'s signer, whatever its
    /// window.
    pub fn publisher_for(&self, signed: &SigstoreSigned) -> Option<&Publisher> {
        let signer = signed.signer();
        self.publishers.iter().find(|p| p.names(&signer))
    }

    /// The publisher that trusts `signed`, when one does, and its window
    /// holds at the log's time.
    pub(super) fn trusted_publisher(
        &self,
        plugin: &str,
        signed: &SigstoreSigned,
        manifest: &Manifest,
    ) -> Result<&Publisher, PackageError> {
        let signer = signed.signer();
        let candidates: Vec<&Publisher> = self.publishers.iter().filter(|p| p.names(&signer)).collect();
        let Some(first) = candidates.first() else {
            // The identity trusted, at another issuer: say so.
            let other_issuer = match &signer {
                Signer::Identity { identity, .. } => self.publishers.iter().find_map(|p| match &p.signer {
                    Signer::Identity { identity: i, issuer } if i == identity => Some(issuer.clone()),
                    _ => None,
                }),
                Signer::Key { .. } => None,
            };
            return Err(PackageError::UntrustedPublisher {
                plugin: plugin.to_string(),
                signer: match other_issuer {
                    Some(trusted) => format!(
                        "{} (trust.publishers trusts that identity at issuer {trusted:?} only)",
                        signer.quoted()
                    ),
                    None => signer.quoted(),
                },
                author: manifest.author.clone(),
                trusted: self.publishers.iter().map(|p| p.signer.quoted()).collect(),
            });
        };
        let at = chrono::DateTime::parse_from_rfc3339(&signed.logged_at).ok().map(|t| t.timestamp());
        let parse = |t: &Option<String>| t.as_deref().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        let inside = |p: &Publisher| {
            at.is_some_and(|at| {
                parse(&p.not_before).is_none_or(|from| at >= from.timestamp())
                    && parse(&p.not_after).is_none_or(|to| at <= to.timestamp())
            })
        };
        // Any entry naming it whose window holds admits it.
        if let Some(p) = candidates.iter().find(|p| inside(p)) {
            return Ok(p);
        }
        Err(PackageError::OutsideKeyWindow {
            plugin: plugin.to_string(),
            kind: "publisher",
            key: first.name.clone(),
            signed_at: Some(format!("{} (the transparency log's time)", signed.logged_at)),
            window: window::window(first.not_before.as_deref(), first.not_after.as_deref()),
        })
    }
}

/// Why a publisher entry is refused, in words, for [`PackageError`].
pub(super) fn trusted_list(trusted: &[String]) -> String {
    if trusted.is_empty() {
        "trust.publishers names none".into()
    } else {
        format!("trust.publishers names {}", trusted.join("; "))
    }
}

/// `window` for publishers' reports.
pub fn publisher_window(p: &Publisher) -> String {
    window::window(p.not_before.as_deref(), p.not_after.as_deref())
}

impl TrustPolicy {
    /// Verifies the Sigstore bundle of a verified package under this
    /// policy's trusted root (`None`: it has none). Whether the publisher
    /// is trusted is not decided here: see [`TrustPolicy::admit`].
    pub fn verify_bundle(&self, plugin: &str, v: &super::Verified) -> Result<Option<SigstoreSigned>, PackageError> {
        match &v.bundle {
            None => Ok(None),
            Some(b) => self.verify_sigstore(plugin, b, &v.manifest_text).map(Some),
        }
    }
}
