//! Writing the package section: the manifest with its signature or Sigstore
//! bundle, as a custom section after the component.

use super::{Bundle, Envelope, PackageError, SECTION, parse};

pub(super) fn leb128(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

pub(super) fn read_leb128(b: &[u8], pos: &mut usize) -> Option<usize> {
    let mut n: usize = 0;
    for shift in (0..35).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        n |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// The package for `bytes` (a component, signed or not) with a Sigstore
/// bundle over `manifest_text` (from [`Manifest::prepare`](super::Manifest::prepare)) in place of any
/// earlier signature.
pub fn with_sigstore(bytes: &[u8], manifest_text: &str, bundle: Bundle) -> Result<Vec<u8>, PackageError> {
    let env = Envelope {
        manifest: manifest_text.to_string(),
        public_key: String::new(),
        signature: String::new(),
        sigstore: Some(Box::new(bundle)),
    };
    with_envelope(bytes, &env)
}

pub(super) fn with_envelope(bytes: &[u8], env: &Envelope) -> Result<Vec<u8>, PackageError> {
    let component = parse(bytes)?.component;
    let payload = serde_json::to_vec(env).map_err(|e| PackageError::Malformed(e.to_string()))?;
    let mut section = Vec::new();
    leb128(SECTION.len(), &mut section);
    section.extend_from_slice(SECTION.as_bytes());
    section.extend_from_slice(&payload);
    let mut out = component.to_vec();
    out.push(0);
    leb128(section.len(), &mut out);
    out.extend_from_slice(&section);
    Ok(out)
}
