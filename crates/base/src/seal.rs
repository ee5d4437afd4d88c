//! Tags that prove a record or an artifact was written by this host (with
//! its key), and the comparison of secrets in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The HMAC-SHA256 of `parts` under `key`, the parts taken in order as one
/// message (a caller separates them itself where they could run together).
pub fn tag(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    mac(key, parts).finalize().into_bytes().into()
}

/// Whether `expected` is the [`tag`] of `parts` under `key`, compared in
/// constant time.
pub fn verify(key: &[u8], parts: &[&[u8]], expected: &[u8]) -> bool {
    mac(key, parts).verify_slice(expected).is_ok()
}

fn mac(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    mac
}

/// Compares secrets in time independent of where they differ (a length
/// mismatch answers at once: lengths are not secret here).
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_verifies_only_its_own_parts_and_key() {
        let t = tag(b"key", &[b"a", b"\0", b"b"]);
        assert!(verify(b"key", &[b"a", b"\0", b"b"], &t));
        assert!(verify(b"key", &[b"a\0b"], &t), "parts are one message");
        assert!(!verify(b"key", &[b"a", b"\0", b"c"], &t));
        assert!(!verify(b"other", &[b"a", b"\0", b"b"], &t));
        assert!(!verify(b"key", &[b"a", b"\0", b"b"], &t[..31]));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }
}
