//! `oci://` references: parsed strictly, shown with credentials redacted.

use super::*;

/// A parsed `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    pub(super) reference: Reference,
}

impl std::fmt::Display for OciRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}", self.reference.whole())
    }
}

/// Whether `s` is an `oci://` reference rather than a file name.
pub fn is_reference(s: &str) -> bool {
    s.starts_with(SCHEME)
}

/// [`is_reference`] for a path given where a plugin file may be.
pub fn path_is_reference(p: &Path) -> bool {
    p.to_str().is_some_and(is_reference)
}

pub(crate) fn is_sha256_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

impl OciRef {
    /// Parses `oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]` (tag
    /// `latest` when neither is given). The registry must be named: there
    /// is no default registry.
    pub fn parse(text: &str) -> Result<OciRef, OciError> {
        let bad = |reason: &str| OciError::Reference {
            reference: crate::tool::log_safe(&redact(text)).into_owned(),
            reason: reason.to_string(),
        };
        let rest = text.strip_prefix(SCHEME).ok_or_else(|| bad("it must start with oci://"))?;
        if rest.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(bad("it contains spaces or control characters"));
        }
        let (host, path) = rest.split_once('/').ok_or_else(|| bad("name the registry: oci://HOST[:PORT]/REPO:TAG"))?;
        if host.contains('@') {
            return Err(bad("credentials do not belong in a reference; put them in a credentials file"));
        }
        if host.is_empty() || path.is_empty() {
            return Err(bad("name the registry and the repository: oci://HOST[:PORT]/REPO:TAG"));
        }
        if path.split(['/', ':', '@']).any(|seg| seg == ".." || seg == ".") {
            return Err(bad("a path segment is '.' or '..'"));
        }
        let reference: Reference = rest.parse().map_err(|e: oci_client::ParseError| bad(&e.to_string()))?;
        if reference.registry() != host {
            return Err(bad("name the registry host explicitly (HOST[:PORT]/REPO)"));
        }
        if let Some(d) = reference.digest()
            && !is_sha256_digest(d)
        {
            return Err(bad("only sha256 digests (64 lowercase hex digits) are accepted"));
        }
        Ok(OciRef { reference })
    }

    /// `host[:port]`.
    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// The repository path.
    pub fn repository(&self) -> &str {
        self.reference.repository()
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.reference.tag()
    }

    /// The digest, if the reference names one.
    pub fn digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    /// The same repository at `digest` (no tag).
    pub fn at_digest(&self, digest: &str) -> OciRef {
        OciRef {
            reference: Reference::with_digest(
                self.registry().to_string(),
                self.repository().to_string(),
                digest.to_string(),
            ),
        }
    }

    /// The last segment of the repository: an unsigned plugin's name.
    pub fn short_name(&self) -> &str {
        self.repository().rsplit('/').next().unwrap_or(self.repository())
    }
}

/// `text` with anything between `oci://` and an `@` in the host part
/// removed, for error messages.
fn redact(text: &str) -> String {
    match text.strip_prefix(SCHEME) {
        Some(rest) => {
            let host_end = rest.find('/').unwrap_or(rest.len());
            match rest[..host_end].rfind('@') {
                Some(at) => format!("{SCHEME}***@{}", &rest[at + 1..]),
                None => text.to_string(),
            }
        }
        None => text.chars().take(200).collect(),
    }
}
