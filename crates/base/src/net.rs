//! Which hosts are loopback: one rule for every place that relaxes a check
//! for this machine (plain HTTP to a registry or a token endpoint, an OAuth
//! redirect URI).

use std::net::IpAddr;

/// Whether `host` (a name or an address, as in a URL's host: an IPv6
/// address may be in brackets; no port) is this machine: `localhost` and
/// names under it (RFC 6761 §6.3), case-insensitively and with or without
/// a final dot, or a loopback address (`127.0.0.0/8`, `::1`).
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return ip.is_loopback();
    }
    let name = bare.strip_suffix('.').unwrap_or(bare).to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// The host of an authority `host[:port]` (`[v6]:port` kept bracketed).
pub fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as a socket bound to
/// `[::]` sees an IPv4 peer) as the IPv4 address it is; any other as given.
pub fn canonical_ip(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_loopback_rule() {
        for yes in ["localhost", "LOCALHOST", "localhost.", "app.localhost", "127.0.0.1", "127.9.9.9", "::1", "[::1]"] {
            assert!(is_loopback_host(yes), "{yes}");
        }
        for no in ["", "localhost.example", "notlocalhost", "10.0.0.1", "0.0.0.0", "::", "[::2]", "example.com"] {
            assert!(!is_loopback_host(no), "{no}");
        }
    }

    #[test]
    fn authorities_lose_their_port() {
        assert_eq!(host_of("localhost:5000"), "localhost");
        assert_eq!(host_of("[::1]:5000"), "[::1]");
        assert_eq!(host_of("[::1]"), "[::1]");
        assert_eq!(host_of("registry.example"), "registry.example");
        assert_eq!(host_of("registry.example:"), "registry.example:");
    }
}
