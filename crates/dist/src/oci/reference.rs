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
        // The distribution spec's grammar, by hand: oci-client's parser
        // compiles a large regular expression on first use, which cost each
        // command that names a reference some 50 ms.
        if !valid_host(host) {
            return Err(bad("the registry is not HOST[:PORT] (a host name, an IPv4 address or [IPv6], and a port)"));
        }
        let (name, digest) = match path.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (path, None),
        };
        let (repository, tag) = match name.rsplit_once(':') {
            Some((r, t)) => (r, Some(t)),
            None => (name, None),
        };
        if repository.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(bad("repository name must be lowercase"));
        }
        if !repository.split('/').all(valid_path_component) {
            return Err(bad(
                "the repository is not a valid name: lowercase letters and digits, separated by '.', '_', '__', '-' or '/'",
            ));
        }
        if host.len() + 1 + repository.len() > 255 {
            return Err(bad("the repository name is over 255 characters"));
        }
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return Err(bad(
                "the tag is not valid: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'",
            ));
        }
        // Docker Hub's names, as the distribution tools read them.
        let (host, repository) = match host {
            "docker.io" | "index.docker.io" if !repository.contains('/') => {
                ("docker.io", std::borrow::Cow::Owned(format!("library/{repository}")))
            }
            "index.docker.io" => ("docker.io", std::borrow::Cow::Borrowed(repository)),
            _ => (host, std::borrow::Cow::Borrowed(repository)),
        };
        let repository = repository.as_ref();
        let reference = match (tag, digest) {
            (_, Some(d)) if !is_sha256_digest(d) => {
                return Err(bad("only sha256 digests (64 lowercase hex digits) are accepted"));
            }
            (Some(t), Some(d)) => Reference::with_tag_and_digest(host.into(), repository.into(), t.into(), d.into()),
            (None, Some(d)) => Reference::with_digest(host.into(), repository.into(), d.into()),
            (Some(t), None) => Reference::with_tag(host.into(), repository.into(), t.into()),
            (None, None) => Reference::with_tag(host.into(), repository.into(), "latest".into()),
        };
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

/// `HOST[:PORT]`: a DNS name, an IPv4 address or a bracketed IPv6 one.
fn valid_host(host: &str) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) if addr.parse::<std::net::Ipv6Addr>().is_ok() => ("v6", rest.strip_prefix(':')),
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (host, None),
        },
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    port_ok && !name.is_empty() && name.len() <= 253 && name.split('.').all(label)
}

/// A repository path component: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

/// A tag: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
pub(crate) fn valid_tag(t: &str) -> bool {
    let mut chars = t.chars();
    t.len() <= 128
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
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
