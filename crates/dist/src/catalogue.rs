//! Catalogues of plugins, hosted in any OCI registry: the marketplace needs
//! no server of its own.
//!
//! A catalogue is one repository (`oci://HOST/NS/catalogue`); each entry is
//! one tag of it, pointing at a small artifact (artifact type
//! [`ENTRY_MEDIA_TYPE`]) whose one layer is the entry as JSON. A tag is
//! named after the plugin, its version and the entry's own digest, so a
//! publish only ever writes a tag of its own: two authors publishing at once
//! both end up in the catalogue, with no read-modify-write to race on (OCI
//! registries have no compare-and-swap). A republished entry is a new tag;
//! readers keep the newest entry of each name, version and publisher.
//!
//! Reading is incremental: the tag list (paged, [`TAGS_PAGE`] at a time) is
//! read whole, and only the tags not seen before are fetched; the rest come
//! from the local copy under `<cache dir>/catalogues/`. Everything a
//! catalogue serves is bounded (a tag-list page [`MAX_TAG_PAGE_BYTES`], an
//! entry [`MAX_ENTRY_BYTES`], the entries read `marketplace.max_entries`,
//! each registry operation `oci.timeout_secs`), and an entry is a claim,
//! never trusted: [`Entry::check_against`] holds it to the signed component
//! at install.

use crate::oci::{OciError, OciRef, OciStore, is_sha256_digest, sha256_digest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An entry's media type: its artifact type and its one layer's.
pub const ENTRY_MEDIA_TYPE: &str = "application/vnd.toolhost.catalogue.entry.v1+json";
/// The empty config descriptor's media type (OCI 1.1 artifacts).
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The largest entry read, in bytes.
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;
/// The largest entry manifest read, in bytes.
const MAX_ENTRY_MANIFEST_BYTES: usize = 16 * 1024;
/// Tags asked for per page of the tag list.
pub const TAGS_PAGE: usize = 1000;
/// The largest page of the tag list read, in bytes (a thousand tags of the
/// longest kind the distribution spec allows fit in 140 KiB).
pub const MAX_TAG_PAGE_BYTES: usize = 1 << 20;
/// Tags fetched per registry operation (each bounded by `oci.timeout_secs`).
const FETCH_BATCH: usize = 256;

/// Why a catalogue could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// The registry failed or served something refused.
    #[error("catalogue {catalogue}: {source}")]
    Registry {
        /// The catalogue.
        catalogue: String,
        /// What went wrong.
        #[source]
        source: OciError,
    },
    /// The catalogue's answer is not what the distribution spec says.
    #[error("catalogue {catalogue}: {reason}")]
    Malformed {
        /// The catalogue.
        catalogue: String,
        /// What is wrong.
        reason: String,
    },
    /// An entry to publish is not valid.
    #[error("the entry is not valid: {0}")]
    Invalid(String),
    /// The local copy could not be written.
    #[error("catalogue cache {path}: {message}")]
    Cache {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Why an entry is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidEntry(pub String);

/// Who published an entry: the key that signed the component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publisher {
    /// The signing key's id (`ed25519:` and 16 hex digits).
    pub key_id: String,
    /// The author as the signed manifest names them.
    #[serde(default)]
    pub author: String,
}

/// One tool of an entry, as declared by the component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryTool {
    /// Tool name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Its declared latency tier (`FAST`, `STANDARD`, `DEEP`), from its
    /// declared p50 under the default ceilings; `OVER` when over every
    /// tier, empty when it declares none (a host then gives it
    /// `budget.unmeasured_tier` until it is measured).
    #[serde(default)]
    pub tier: String,
    /// Declared p50, ms.
    #[serde(default)]
    pub estimated_ms: u64,
    /// Declared maximum, ms.
    #[serde(default)]
    pub max_ms: u64,
}

/// What an entry says its component asks of the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EntryAsks {
    /// Capabilities (`files`, `env`, `network`, `memory`, `http`, ...).
    pub capabilities: Vec<String>,
    /// Origins it reaches over HTTP.
    pub http_hosts: Vec<String>,
    /// Secrets it needs.
    pub secrets: Vec<String>,
    /// Memory per call it asks for, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<usize>,
}

impl EntryAsks {
    /// In plain words ("nothing" when it asks for nothing).
    pub fn in_words(&self) -> String {
        let mut out = Vec::new();
        if !self.capabilities.is_empty() {
            out.push(self.capabilities.join(", "));
        }
        if !self.http_hosts.is_empty() {
            out.push(format!("HTTP to {}", self.http_hosts.join(", ")));
        }
        if !self.secrets.is_empty() {
            out.push(format!("secret{} {}", if self.secrets.len() == 1 { "" } else { "s" }, self.secrets.join(", ")));
        }
        if let Some(m) = self.memory_mib {
            out.push(format!("{m} MiB per call"));
        }
        if out.is_empty() { "nothing".into() } else { out.join("; ") }
    }
}

/// One catalogue entry: what a DM and a reviewer decide by. Every field is
/// the publisher's claim until [`Entry::check_against`] has held it to the
/// signed component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Plugin name.
    pub name: String,
    /// Version.
    pub version: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Who signed it.
    pub publisher: Publisher,
    /// Its tools.
    #[serde(default)]
    pub tools: Vec<EntryTool>,
    /// What it asks for.
    #[serde(default)]
    pub asks: EntryAsks,
    /// Measured speed badges by tool, when the publisher measured them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub badge: BTreeMap<String, String>,
    /// Where the component is: `oci://HOST/REPO:TAG`.
    pub reference: String,
    /// The component artifact's manifest digest.
    pub digest: String,
    /// When it was published (RFC 3339).
    pub published: String,
}

/// A text field of an entry: at most `max` characters, none of them a
/// control character (an entry is printed to a terminal: no escape
/// sequence from a catalogue reaches it).
fn too_long(what: &str, s: &str, max: usize) -> Result<(), String> {
    if s.chars().count() > max {
        return Err(format!("{what} is over {max} characters"));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("{what} holds a control character"));
    }
    Ok(())
}

impl Entry {
    /// Checks the entry's shape: a valid plugin name, a sha256 digest, an
    /// `oci://` reference, bounded fields.
    pub fn validate(&self) -> Result<(), InvalidEntry> {
        self.check_shape().map_err(InvalidEntry)
    }

    fn check_shape(&self) -> Result<(), String> {
        if !toolhost_types::valid_tool_name(&self.name) {
            return Err(format!("{:?} is not a valid plugin name", crate::tool::log_safe(&self.name)));
        }
        if self.version.is_empty() || self.version.len() > 64 || self.version.chars().any(|c| c.is_control()) {
            return Err("the version must be 1 to 64 printable characters".into());
        }
        if !is_sha256_digest(&self.digest) {
            return Err("the digest is not a sha256 digest".into());
        }
        let r = OciRef::parse(&self.reference).map_err(|e| format!("reference: {e}"))?;
        if r.digest().is_some() {
            return Err("the reference must name a tag, the digest is its own field".into());
        }
        too_long("the description", &self.description, 2000)?;
        too_long("the publisher's key id", &self.publisher.key_id, 128)?;
        too_long("the author", &self.publisher.author, 256)?;
        too_long("the publish time", &self.published, 64)?;
        // Entries are ordered by it: one from the future would outrank
        // every honest entry.
        match chrono::DateTime::parse_from_rfc3339(&self.published) {
            Ok(t) if t <= chrono::Utc::now() + chrono::Duration::hours(24) => {}
            Ok(_) => return Err("the publish time is in the future".into()),
            Err(_) => return Err("the publish time is not an RFC 3339 time".into()),
        }
        if self.tools.len() > 256 {
            return Err("over 256 tools".into());
        }
        for t in &self.tools {
            too_long("a tool's name", &t.name, 128)?;
            too_long("a tool's description", &t.description, 2000)?;
            too_long("a tool's tier", &t.tier, 16)?;
        }
        let a = &self.asks;
        if a.capabilities.len() + a.http_hosts.len() + a.secrets.len() > 256 {
            return Err("over 256 asks".into());
        }
        for s in a.capabilities.iter().chain(&a.http_hosts).chain(&a.secrets) {
            too_long("an ask", s, 256)?;
        }
        if self.badge.len() > 256 {
            return Err("over 256 badges".into());
        }
        for (tool, badge) in &self.badge {
            too_long("a badge's tool", tool, 128)?;
            too_long("a badge", badge, 32)?;
        }
        Ok(())
    }

    /// The tag this entry is published under: its name, version and the
    /// first 12 hex digits of its own digest, in the characters a tag may
    /// hold (`[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`).
    pub fn tag(&self) -> String {
        let clean = |s: &str, max: usize| -> String {
            s.chars()
                .take(max)
                .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
                .collect()
        };
        let json = serde_json::to_vec(self).unwrap_or_default();
        let own = &sha256_digest(&json)["sha256:".len()..][..12];
        format!("{}_{}_{own}", clean(&self.name, 64), clean(&self.version, 48))
    }

    /// Holds the entry to what was actually fetched: `digest` (what its
    /// reference resolves to now), and the signed component's
    /// `manifest` and signer `key_id`. Each lie is named: another digest,
    /// another name or version, another publisher, fewer asks.
    pub fn check_against(
        &self,
        digest: &str,
        key_id: Option<&str>,
        manifest: Option<&toolhost_admission::package::Manifest>,
    ) -> Result<(), Vec<String>> {
        let mut lies = Vec::new();
        if digest != self.digest {
            lies.push(format!(
                "its digest: the entry says {}, {} is {digest}",
                self.digest,
                crate::tool::log_safe(&self.reference)
            ));
        }
        let (Some(key_id), Some(m)) = (key_id, manifest) else {
            lies.push("its publisher: the entry names a signing key, the component is not signed".into());
            return Err(lies);
        };
        if key_id != self.publisher.key_id {
            lies.push(format!(
                "its publisher: the entry says {}, the component is signed by {key_id}",
                self.publisher.key_id
            ));
        }
        if m.author != self.publisher.author {
            lies.push(format!(
                "its author: the entry says {:?}, the signed manifest says {:?}",
                crate::tool::log_safe(&self.publisher.author),
                crate::tool::log_safe(&m.author)
            ));
        }
        if m.name != self.name || m.version != self.version {
            lies.push(format!(
                "what it is: the entry says {} {}, the signed component is {} {}",
                self.name, self.version, m.name, m.version
            ));
        }
        let unlisted = |asked: &[String], listed: &[String]| -> Vec<String> {
            asked.iter().filter(|a| !listed.contains(a)).cloned().collect()
        };
        let caps = unlisted(&m.capabilities, &self.asks.capabilities);
        let hosts = unlisted(&m.http_hosts, &self.asks.http_hosts);
        let secrets = unlisted(&m.secrets, &self.asks.secrets);
        let memory = m.memory_mib.filter(|want| self.asks.memory_mib.is_none_or(|listed| listed < *want));
        if !caps.is_empty() || !hosts.is_empty() || !secrets.is_empty() || memory.is_some() {
            let mut hidden = Vec::new();
            if !caps.is_empty() {
                hidden.push(format!("capabilities {}", caps.join(", ")));
            }
            if !hosts.is_empty() {
                hidden.push(format!("HTTP to {}", hosts.join(", ")));
            }
            if !secrets.is_empty() {
                hidden.push(format!("secrets {}", secrets.join(", ")));
            }
            if let Some(m) = memory {
                hidden.push(format!("{m} MiB per call"));
            }
            lies.push(format!(
                "its asks: the signed component also asks for {}, which the entry leaves out",
                hidden.join("; ")
            ));
        }
        if lies.is_empty() { Ok(()) } else { Err(lies) }
    }
}

/// A catalogue as last read: its entries by tag, and the tags that are not
/// entries (with why), so that neither is fetched again.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Catalogue {
    /// `oci://HOST/REPOSITORY`.
    pub catalogue: String,
    /// When it was read from the registry (Unix seconds).
    pub synced: u64,
    /// Entries, by tag.
    pub entries: BTreeMap<String, Entry>,
    /// Tags that are not valid entries, with why.
    pub skipped: BTreeMap<String, String>,
    /// Whether the tag list went past `marketplace.max_entries` (the rest
    /// was not read).
    #[serde(default)]
    pub truncated: bool,
    /// Revocation lists, by tag, as published (their signatures are
    /// checked where they are used).
    #[serde(default)]
    pub revocations: BTreeMap<String, toolhost_admission::package::RevocationList>,
}

/// How a read went.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    /// Entries fetched from the registry this time.
    pub fetched: usize,
    /// Served from the local copy without asking the registry (fresh).
    pub from_cache: bool,
    /// What to tell the user (a registry unreachable and the local copy
    /// used, entries skipped, a catalogue cut at the bound).
    pub warnings: Vec<String>,
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::from(d.subsec_nanos()))
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The catalogues a host reads, through its registry client.
#[derive(Debug, Clone)]
pub struct Catalogues<'a> {
    store: &'a OciStore,
    cache: Option<PathBuf>,
    /// How old a local copy may be, in seconds.
    pub refresh_secs: u64,
    /// The most entries read from one catalogue.
    pub max_entries: usize,
    /// The key ids whose revocation lists are read (`None`: none are).
    revocation_signers: Option<Vec<String>>,
    /// Whether a read fetches new entries (not when only revocation lists
    /// are wanted: a revocation check never pulls a whole catalogue).
    entries_too: bool,
}

#[derive(Deserialize)]
struct TagPage {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

impl<'a> Catalogues<'a> {
    /// Catalogues read through `store`, kept under `cache_dir/catalogues`
    /// (no local copy: `None`).
    pub fn new(store: &'a OciStore, cache_dir: Option<&Path>, refresh_secs: u64, max_entries: usize) -> Self {
        Catalogues {
            store,
            cache: cache_dir.map(|d| d.join("catalogues")),
            refresh_secs,
            max_entries,
            revocation_signers: None,
            entries_too: true,
        }
    }

    /// Reads the revocation lists of these signers (key ids) too.
    pub fn with_revocation_signers(mut self, signers: Vec<String>) -> Self {
        self.revocation_signers = Some(signers);
        self
    }

    /// Reads revocation lists only: new entries are left for a search or
    /// an install to fetch, and the copy's sync time is left as it was (so
    /// they do fetch them).
    pub fn revocations_only(mut self) -> Self {
        self.entries_too = false;
        self
    }

    fn repo(catalogue: &str) -> Result<OciRef, CatalogueError> {
        let r = OciRef::parse(catalogue).map_err(|source| CatalogueError::Registry {
            catalogue: crate::tool::log_safe(catalogue).into_owned(),
            source,
        })?;
        if r.digest().is_some() || catalogue.rsplit('/').next().is_some_and(|last| last.contains(':')) {
            return Err(CatalogueError::Malformed {
                catalogue: catalogue.into(),
                reason: "a catalogue is a repository: write it with no tag or digest".into(),
            });
        }
        Ok(r)
    }

    fn at_tag(catalogue: &str, tag: &str) -> Result<OciRef, CatalogueError> {
        OciRef::parse(&format!("{catalogue}:{tag}"))
            .map_err(|source| CatalogueError::Registry { catalogue: catalogue.into(), source })
    }

    /// Publishes `entry` to `catalogue`, under a tag of its own
    /// ([`Entry::tag`]): the tag.
    pub fn publish(&self, catalogue: &str, entry: &Entry) -> Result<String, CatalogueError> {
        Self::repo(catalogue)?;
        entry.validate().map_err(|e| CatalogueError::Invalid(e.0))?;
        let body = serde_json::to_vec_pretty(entry).map_err(|e| CatalogueError::Invalid(e.to_string()))?;
        if body.len() > MAX_ENTRY_BYTES {
            return Err(CatalogueError::Invalid(format!("it is {} bytes, over {MAX_ENTRY_BYTES}", body.len())));
        }
        let tag = entry.tag();
        let annotations = serde_json::json!({
            crate::oci::annotations::TITLE: entry.name,
            crate::oci::annotations::VERSION: entry.version,
            crate::oci::annotations::CREATED: entry.published,
        });
        self.push_artifact(catalogue, &tag, ENTRY_MEDIA_TYPE, body, annotations)?;
        Ok(tag)
    }

    /// Pushes `body` to `catalogue` under `tag`, as an artifact of type
    /// `media_type` whose one layer it is.
    fn push_artifact(
        &self,
        catalogue: &str,
        tag: &str,
        media_type: &str,
        body: Vec<u8>,
        annotations: serde_json::Value,
    ) -> Result<(), CatalogueError> {
        let r = Self::at_tag(catalogue, tag)?;
        let empty = b"{}".to_vec();
        let (body_digest, empty_digest) = (sha256_digest(&body), sha256_digest(&empty));
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": crate::oci::MANIFEST_MEDIA_TYPE,
            "artifactType": media_type,
            "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": empty_digest, "size": 2},
            "layers": [{"mediaType": media_type, "digest": body_digest, "size": body.len()}],
            "annotations": annotations,
        });
        let manifest = serde_json::to_vec(&manifest).map_err(|e| CatalogueError::Invalid(e.to_string()))?;
        // Publishers at once upload the same small blobs (the empty config)
        // to one repository, and a registry may fail one of two concurrent
        // uploads of a blob (the distribution server answers DIGEST_INVALID
        // or BLOB_UNKNOWN): the push is whole or not at all, and writes
        // only this tag, so it is tried again.
        let mut attempt = 0u64;
        loop {
            let parts = vec![(body.clone(), body_digest.clone()), (empty.clone(), empty_digest.clone())];
            match self.store.push_parts(&r, parts, manifest.clone()) {
                Ok(_) => return Ok(()),
                Err(OciError::Registry { .. }) if attempt < 4 => {
                    attempt += 1;
                    let jitter = u64::from(std::process::id() % 50) + (now_nanos() % 100);
                    std::thread::sleep(std::time::Duration::from_millis(50 * attempt + jitter));
                }
                Err(source) => return Err(CatalogueError::Registry { catalogue: catalogue.into(), source }),
            }
        }
    }

    fn cache_file(&self, catalogue: &str) -> Option<PathBuf> {
        let key = hex::encode(&sha2::Sha256::digest(catalogue.as_bytes())[..12]);
        Some(self.cache.as_ref()?.join(format!("{key}.json")))
    }

    /// The local copy of `catalogue`, if any (one that cannot be read is
    /// none: it is read again).
    pub fn cached(&self, catalogue: &str) -> Option<Catalogue> {
        let path = self.cache_file(catalogue)?;
        // Bounded by what max_entries entries can take.
        let max = self.max_entries.saturating_mul(MAX_ENTRY_BYTES / 8).max(1 << 20);
        let bytes = crate::runtime::private::read_state(&path, max).ok()??;
        serde_json::from_slice::<Catalogue>(&bytes).ok().filter(|c| c.catalogue == catalogue)
    }

    fn save(&self, c: &Catalogue) -> Result<(), CatalogueError> {
        let Some(path) = self.cache_file(&c.catalogue) else { return Ok(()) };
        let err = |path: &Path, message: String| CatalogueError::Cache { path: path.to_path_buf(), message };
        let dir = path.parent().unwrap_or(Path::new("."));
        if let Some(root) = self.cache.as_ref().and_then(|c| c.parent()) {
            crate::runtime::private::ensure_private_dir(root).map_err(|e| err(root, e.to_string()))?;
        }
        crate::runtime::private::ensure_private_dir(dir).map_err(|e| err(dir, e.to_string()))?;
        let bytes = serde_json::to_vec(c).map_err(|e| err(&path, e.to_string()))?;
        crate::runtime::private::write_private(&path, &bytes).map_err(|e| err(&path, e.to_string()))?;
        self.save_index(c);
        Ok(())
    }

    /// Reads `catalogue`: from the local copy when it is fresher than
    /// `refresh_secs` (and `refresh` is false), else the registry's tag
    /// list and the entries not seen before. When the registry cannot be
    /// reached, the local copy is used, with a warning.
    pub fn read(&self, catalogue: &str, refresh: bool) -> Result<(Catalogue, SyncReport), CatalogueError> {
        let r = Self::repo(catalogue)?;
        let old = self.cached(catalogue);
        if let Some(c) = &old
            && !refresh
            && now_secs().saturating_sub(c.synced) < self.refresh_secs
        {
            return Ok((c.clone(), SyncReport { from_cache: true, ..SyncReport::default() }));
        }
        let mut report = SyncReport::default();
        let (tags, truncated) = match self.list_tags(catalogue, &r) {
            Ok(t) => t,
            Err(CatalogueError::Registry { source: OciError::Unreachable { registry, message }, .. })
                if old.is_some() =>
            {
                report.from_cache = true;
                report.warnings.push(format!(
                    "catalogue {catalogue}: registry {registry} cannot be reached ({message}); using the copy read before"
                ));
                return Ok((old.unwrap_or_default(), report));
            }
            Err(e) => return Err(e),
        };
        let mut c = old.unwrap_or_default();
        c.catalogue = catalogue.to_string();
        c.truncated = truncated;
        let listed: std::collections::BTreeSet<&String> = tags.iter().collect();
        c.entries.retain(|t, _| listed.contains(t));
        c.skipped.retain(|t, _| listed.contains(t));
        // Revocation lists stay once read, whatever the registry lists now:
        // deleting a tag, emptying the registry or pushing tags ahead of
        // it past max_entries never takes a revocation back.
        let (lists, new): (Vec<String>, Vec<String>) = tags
            .iter()
            .filter(|t| !c.entries.contains_key(*t) && !c.skipped.contains_key(*t) && !c.revocations.contains_key(*t))
            .cloned()
            .partition(|t| t.starts_with(REVOCATIONS_TAG_PREFIX));
        for (tag, got) in self.fetch_revocations(catalogue, &r, &lists)? {
            match got {
                Ok(list) => {
                    c.revocations.insert(tag, list);
                }
                Err(why) => {
                    report.warnings.push(format!(
                        "catalogue {catalogue}: revocation list {} left out: {}",
                        crate::tool::log_safe(&tag),
                        crate::tool::log_safe(&why)
                    ));
                    c.skipped.insert(tag, why);
                }
            }
        }
        let new = if self.entries_too { new } else { Vec::new() };
        for batch in new.chunks(FETCH_BATCH) {
            for (tag, got) in self.fetch_entries(catalogue, &r, batch)? {
                match got {
                    Ok(e) => {
                        report.fetched += 1;
                        c.entries.insert(tag, e);
                    }
                    Err(why) => {
                        c.skipped.insert(tag, why);
                    }
                }
            }
        }
        if truncated {
            report.warnings.push(format!(
                "catalogue {catalogue} lists more than {} entries (marketplace.max_entries): the first {} were read",
                self.max_entries, self.max_entries
            ));
        }
        if !c.skipped.is_empty() {
            let (tag, why) = c.skipped.iter().next().map(|(t, w)| (t.clone(), w.clone())).unwrap_or_default();
            report.warnings.push(format!(
                "catalogue {catalogue}: {} tag{} that {} not a valid entry left out (the first, {}: {})",
                c.skipped.len(),
                if c.skipped.len() == 1 { "" } else { "s" },
                if c.skipped.len() == 1 { "is" } else { "are" },
                crate::tool::log_safe(&tag),
                crate::tool::log_safe(&why)
            ));
        }
        if self.entries_too {
            c.synced = now_secs();
        }
        self.save(&c)?;
        Ok((c, report))
    }

    /// The tag list, page after page, up to `max_entries` (`true`: there
    /// were more). A registry that pages without moving on is refused.
    fn list_tags(&self, catalogue: &str, r: &OciRef) -> Result<(Vec<String>, bool), CatalogueError> {
        let reg = |source| CatalogueError::Registry { catalogue: catalogue.into(), source };
        let mut reader = self.store.reader(r).map_err(reg)?;
        let registry = r.registry().to_string();
        let repository = r.repository().to_string();
        let max = self.max_entries;
        let listed = self.store.block(&registry, async {
            let mut tags: Vec<String> = Vec::new();
            let mut last: Option<String> = None;
            let mut seen = std::collections::HashSet::new();
            loop {
                let mut query = format!("list?n={TAGS_PAGE}");
                if let Some(l) = &last {
                    query.push_str(&format!("&last={l}"));
                }
                let page = reader
                    .get(&repository, "tags", &query, "application/json", MAX_TAG_PAGE_BYTES)
                    .await
                    .map_err(|message| classify(&registry, r, message))?;
                // No repository yet: nothing was published to it.
                let Some(page) = page else { return Ok(Err(tags)) };
                let page: TagPage = serde_json::from_slice(&page).map_err(|e| OciError::Refused {
                    reference: r.to_string(),
                    reason: format!("the tag list is not the distribution spec's JSON: {e}"),
                })?;
                let page = page.tags.unwrap_or_default();
                let n = page.len();
                let mut moved = false;
                for t in page {
                    if !valid_tag(&t) {
                        return Err(OciError::Refused {
                            reference: r.to_string(),
                            reason: format!("the tag list holds {:?}, not a tag", crate::tool::log_safe(&t)),
                        });
                    }
                    // The next page starts after the last tag of this one.
                    last = Some(t.clone());
                    // A page with no tag not seen before is a registry
                    // going round in circles.
                    if seen.insert(t.clone()) {
                        moved = true;
                        tags.push(t);
                        if tags.len() > max {
                            tags.truncate(max);
                            return Ok(Ok((tags, true)));
                        }
                    }
                }
                if n < TAGS_PAGE || !moved {
                    return Ok(Ok((tags, false)));
                }
            }
        });
        match listed.map_err(reg)? {
            Ok(t) => Ok(t),
            Err(_) => Ok((Vec::new(), false)),
        }
    }

    /// Fetches the entries under `tags`: each one's result (a tag that is
    /// not a valid entry: why).
    fn fetch_entries(
        &self,
        catalogue: &str,
        r: &OciRef,
        tags: &[String],
    ) -> Result<Vec<(String, Fetched)>, CatalogueError> {
        let reg = |source| CatalogueError::Registry { catalogue: catalogue.into(), source };
        let mut reader = self.store.reader(r).map_err(reg)?;
        let registry = r.registry().to_string();
        let repository = r.repository().to_string();
        self.store
            .block(&registry, async {
                let mut out = Vec::with_capacity(tags.len());
                for tag in tags {
                    let got = fetch_entry(&mut reader, &repository, tag).await;
                    let got = match got {
                        Err(Fetch::Registry(message)) => return Err(classify(&registry, r, message)),
                        Err(Fetch::Invalid(why)) => Err(why),
                        Ok(e) => Ok(e),
                    };
                    out.push((tag.clone(), got));
                }
                Ok(out)
            })
            .map_err(reg)
    }

    /// Every entry of `catalogues` (each read as [`Catalogues::read`]
    /// does), all of them: an entry is a claim until it is checked, so a
    /// newer entry never hides an older one of the same name, version and
    /// publisher (`install` tries the next when one lies). A catalogue
    /// that cannot be read is a warning, not an end.
    pub fn read_all(&self, catalogues: &[String], refresh: bool) -> (Vec<Listed>, Vec<String>) {
        let mut listed = Vec::new();
        let mut warnings = Vec::new();
        for catalogue in catalogues {
            match self.read(catalogue, refresh) {
                Ok((c, report)) => {
                    warnings.extend(report.warnings);
                    listed.extend(c.entries.into_values().map(|e| Listed { catalogue: catalogue.clone(), entry: e }));
                }
                Err(e) => warnings.push(format!("{e}")),
            }
        }
        (listed, warnings)
    }
}

use sha2::Digest as _;

/// An entry and the catalogue it was read from.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// The catalogue.
    pub catalogue: String,
    /// The entry.
    #[serde(flatten)]
    pub entry: Entry,
}

use crate::oci::classify;
use crate::oci::reference::valid_tag;

/// A tag's entry, or why it is not one.
type Fetched = Result<Entry, String>;

mod fetch;
use fetch::{Fetch, fetch_entry, fetch_layer};
mod index;
mod revocations;
mod search;
pub use revocations::{REVOCATIONS_MEDIA_TYPE, REVOCATIONS_TAG_PREFIX, claimed_signer, revoked_by};
pub use search::{Hit, search, version_order};

#[cfg(test)]
mod tests;
