//! Origins: what an `http` grant names, and what a request or a signed
//! manifest's ask is matched against. An entry is a scheme, a host (or a
//! `*.` suffix) and an optional port (default: the scheme's):
//! `https://api.open-meteo.com`, `https://*.wikipedia.org`,
//! `http://127.0.0.1:8080`.
//!
//! Only the vocabulary lives here, shared by the manifest, admission and the
//! reports. What the `http` capability does with it (resolving a plugin's
//! grant, linking `wasi:http`, checking each request) is one place, the
//! `toolhost-http` crate.

use std::net::IpAddr;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpScheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl HttpScheme {
    /// The scheme called `name` (lowercase).
    pub fn from_name(name: &str) -> Option<HttpScheme> {
        match name {
            "http" => Some(HttpScheme::Http),
            "https" => Some(HttpScheme::Https),
            _ => None,
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpScheme::Http => "http",
            HttpScheme::Https => "https",
        }
    }

    /// Its default port.
    pub fn default_port(self) -> u16 {
        match self {
            HttpScheme::Http => 80,
            HttpScheme::Https => 443,
        }
    }
}

/// Which hosts an entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this name (lowercase, no trailing dot).
    Name(String),
    /// Any name ending in this suffix (with its leading dot: `.wikipedia.org`
    /// for `*.wikipedia.org`), never the bare domain itself.
    Suffix(String),
    /// Exactly this address, written as a literal.
    Ip(IpAddr),
}

/// Why an `http` entry is not an origin ([`HttpGrant::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpGrantError {
    /// No `scheme://`.
    #[error("expected scheme://host[:port]")]
    NoScheme,
    /// A scheme other than `http` or `https`.
    #[error("the scheme must be http or https")]
    Scheme,
    /// A path, query, fragment, user or space after the scheme.
    #[error("only an origin: no path, query, fragment or user")]
    NotAnOrigin,
    /// `[` without its `]`.
    #[error("an IPv6 address needs its closing ]")]
    UnclosedIpv6,
    /// Something other than `:port` after `]`.
    #[error("expected :port after ]")]
    AfterIpv6,
    /// A port that is not 1 to 65535.
    #[error("the port must be 1 to 65535")]
    Port,
    /// Brackets around what is not an IPv6 address.
    #[error("not an IPv6 address")]
    Ipv6,
    /// A host name with other than letters, digits, `-` and `.`, an empty
    /// label, or too long.
    #[error("{0:?} is not a host name")]
    HostName(String),
    /// A wildcard over a single label (`*.org`).
    #[error("a wildcard must leave at least two labels (*.example.org, not *.org)")]
    WideWildcard,
}

/// One granted origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    /// Its scheme.
    pub scheme: HttpScheme,
    /// Its host or hosts.
    pub host: HostPattern,
    /// Its port (the scheme's when the entry gives none).
    pub port: u16,
}

impl HttpGrant {
    /// Parses `scheme://host[:port]`, `scheme://*.domain[:port]` or
    /// `scheme://[v6]:port`; a trailing `/` is allowed, nothing else after
    /// the authority is.
    pub fn parse(entry: &str) -> Result<HttpGrant, HttpGrantError> {
        let e = entry.trim();
        let (scheme, rest) = e.split_once("://").ok_or(HttpGrantError::NoScheme)?;
        let scheme = HttpScheme::from_name(&scheme.to_ascii_lowercase()).ok_or(HttpGrantError::Scheme)?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@', ' ']) {
            return Err(HttpGrantError::NotAnOrigin);
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (addr, after) = v6.split_once(']').ok_or(HttpGrantError::UnclosedIpv6)?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or(HttpGrantError::AfterIpv6)?),
            };
            (format!("[{addr}]"), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        let port = match port {
            None => scheme.default_port(),
            Some(p) => p.parse::<u16>().ok().filter(|&p| p > 0).ok_or(HttpGrantError::Port)?,
        };
        let host = host.to_ascii_lowercase();
        let host = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            HostPattern::Ip(IpAddr::V6(v6.parse().map_err(|_| HttpGrantError::Ipv6)?))
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            HostPattern::Ip(ip)
        } else if let Some(domain) = host.strip_prefix("*.") {
            check_name(domain)?;
            if !domain.contains('.') {
                return Err(HttpGrantError::WideWildcard);
            }
            HostPattern::Suffix(format!(".{domain}"))
        } else {
            check_name(&host)?;
            HostPattern::Name(host)
        };
        Ok(HttpGrant { scheme, host, port })
    }

    /// Whether a request to `scheme://host:port` matches this entry. `host`
    /// as the request names it (a name, or an address literal; IPv6 with or
    /// without brackets).
    pub fn allows(&self, scheme: HttpScheme, host: &str, port: u16) -> bool {
        if scheme != self.scheme || port != self.port {
            return false;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(&host);
        match &self.host {
            HostPattern::Name(n) => *n == host,
            HostPattern::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_str()),
            HostPattern::Ip(ip) => bare.parse::<IpAddr>().is_ok_and(|h| h == *ip),
        }
    }

    /// Whether this entry names the address `ip` literally, with this
    /// scheme and port (which lets a request reach exactly that address and
    /// port even where the address policy refuses it: loopback, private,
    /// link-local...). A grant of `http://127.0.0.1:9999` never lets a name
    /// that resolves to 127.0.0.1 reach another port there.
    pub fn names_socket(&self, scheme: HttpScheme, ip: IpAddr, port: u16) -> bool {
        self.scheme == scheme && self.port == port && self.host == HostPattern::Ip(ip)
    }

    /// Whether this entry names `host` (lowercase, no final dot) exactly,
    /// not through a wildcard, with this port: the entries an operator's
    /// `plugins.http_resolve` pin for that name applies to.
    pub fn names_host(&self, host: &str, port: u16) -> bool {
        self.port == port && matches!(&self.host, HostPattern::Name(n) if n == host)
    }

    /// Whether every request `other` allows, this entry allows too (a
    /// plugin's asked-for origin against a granted one).
    pub fn covers(&self, other: &HttpGrant) -> bool {
        if self.scheme != other.scheme || self.port != other.port {
            return false;
        }
        match (&self.host, &other.host) {
            (_, HostPattern::Name(n)) => self.allows(other.scheme, n, other.port),
            (HostPattern::Suffix(mine), HostPattern::Suffix(theirs)) => theirs.ends_with(mine.as_str()),
            (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
            _ => false,
        }
    }

    /// Whether it is a wildcard.
    pub fn is_wildcard(&self) -> bool {
        matches!(self.host, HostPattern::Suffix(_))
    }
}

impl std::fmt::Display for HttpGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = match &self.host {
            HostPattern::Name(n) => n.clone(),
            HostPattern::Suffix(s) => format!("*{s}"),
            HostPattern::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
            HostPattern::Ip(ip) => ip.to_string(),
        };
        write!(f, "{}://{host}:{}", self.scheme.as_str(), self.port)
    }
}

/// A DNS name as a grant may name it: letters, digits, `-` and `.`.
fn check_name(name: &str) -> Result<(), HttpGrantError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if ok { Ok(()) } else { Err(HttpGrantError::HostName(name.to_string())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_to_origins_and_bad_ones_say_why() {
        let g = HttpGrant::parse("https://API.open-meteo.com/").unwrap();
        assert_eq!(g.to_string(), "https://api.open-meteo.com:443");
        assert_eq!(
            HttpGrant::parse("http://127.0.0.1:8080").unwrap().host,
            HostPattern::Ip("127.0.0.1".parse().unwrap())
        );
        assert_eq!(HttpGrant::parse("https://[::1]:8443").unwrap().to_string(), "https://[::1]:8443");
        assert!(HttpGrant::parse("https://*.wikipedia.org").unwrap().is_wildcard());
        for bad in [
            "api.example.test",
            "ftp://x.test",
            "https://x.test/path",
            "https://user@x.test",
            "https://x.test:0",
            "https://x.test:99999",
            "https://*.org",
            "https://*",
            "https://ex ample.test",
            "https://x.test?q",
        ] {
            assert!(HttpGrant::parse(bad).is_err(), "{bad}");
        }
        // What the operator reads, word for word.
        let said = |e: &str| HttpGrant::parse(e).unwrap_err().to_string();
        assert_eq!(said("api.example.test"), "expected scheme://host[:port]");
        assert_eq!(said("ftp://x.test"), "the scheme must be http or https");
        assert_eq!(said("https://x.test/path"), "only an origin: no path, query, fragment or user");
        assert_eq!(said("https://[::1"), "an IPv6 address needs its closing ]");
        assert_eq!(said("https://[::1]8080"), "expected :port after ]");
        assert_eq!(said("https://x.test:0"), "the port must be 1 to 65535");
        assert_eq!(said("https://[x]"), "not an IPv6 address");
        assert_eq!(said("https://ex_ample.test"), "\"ex_ample.test\" is not a host name");
        assert_eq!(said("https://*.org"), "a wildcard must leave at least two labels (*.example.org, not *.org)");
    }

    #[test]
    fn a_request_matches_only_its_scheme_host_and_port() {
        let g = HttpGrant::parse("https://api.example.test").unwrap();
        assert!(g.allows(HttpScheme::Https, "api.example.test", 443));
        assert!(g.allows(HttpScheme::Https, "API.Example.Test.", 443));
        assert!(!g.allows(HttpScheme::Http, "api.example.test", 443), "not http for an https grant");
        assert!(!g.allows(HttpScheme::Https, "api.example.test", 8443), "not another port");
        assert!(!g.allows(HttpScheme::Https, "api.example.test.evil.test", 443));
        assert!(!g.allows(HttpScheme::Https, "evilapi.example.test", 443));
        let w = HttpGrant::parse("https://*.wikipedia.org").unwrap();
        assert!(w.allows(HttpScheme::Https, "en.wikipedia.org", 443));
        assert!(!w.allows(HttpScheme::Https, "wikipedia.org", 443), "not the bare domain");
        assert!(!w.allows(HttpScheme::Https, "en.wikipedia.org.evil.test", 443));
        assert!(!w.allows(HttpScheme::Https, "evilwikipedia.org", 443));
        let ip = HttpGrant::parse("http://[::1]:8080").unwrap();
        assert!(ip.allows(HttpScheme::Http, "[::1]", 8080) && ip.allows(HttpScheme::Http, "::1", 8080));
        assert!(ip.names_socket(HttpScheme::Http, "::1".parse().unwrap(), 8080));
        assert!(!ip.names_socket(HttpScheme::Http, "::1".parse().unwrap(), 8081), "not another port");
        assert!(!ip.names_socket(HttpScheme::Https, "::1".parse().unwrap(), 8080), "not another scheme");
        let n = HttpGrant::parse("https://api.example.test").unwrap();
        assert!(n.names_host("api.example.test", 443) && !n.names_host("api.example.test", 444));
        assert!(!w.names_host("en.wikipedia.org", 443), "a wildcard names no host");
    }

    #[test]
    fn a_grant_covers_an_ask_only_when_it_allows_everything_the_ask_does() {
        let g = |e: &str| HttpGrant::parse(e).unwrap();
        assert!(g("https://api.example.test").covers(&g("https://api.example.test:443/")));
        assert!(g("https://*.example.test").covers(&g("https://api.example.test")));
        assert!(g("https://*.example.test").covers(&g("https://*.eu.example.test")));
        assert!(!g("https://api.example.test").covers(&g("https://*.example.test")), "a name never covers a wildcard");
        assert!(
            !g("https://*.eu.example.test").covers(&g("https://*.example.test")),
            "nor a narrower wildcard a wider"
        );
        assert!(!g("https://api.example.test").covers(&g("http://api.example.test")), "not another scheme");
        assert!(!g("https://api.example.test").covers(&g("https://api.example.test:8443")), "not another port");
        assert!(g("http://127.0.0.1:8080").covers(&g("http://127.0.0.1:8080")));
        assert!(!g("http://127.0.0.1:8080").covers(&g("http://localhost:8080")));
    }
}
