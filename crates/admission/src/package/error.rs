//! Why a package is refused.

use super::{fingerprint, publishers};

/// Why a package could not be signed, verified or admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackageError {
    /// The bytes are not a component, or the package section is malformed.
    #[error("{0}")]
    Malformed(String),
    /// No signature, and the policy wants one.
    #[error(
        "plugin {plugin:?} is not signed; sign it (`toolhost sign`) with a trusted key, or allow unsigned plugins explicitly (--allow-unsigned / trust.allow_unsigned)"
    )]
    Unsigned {
        /// Plugin name.
        plugin: String,
    },
    /// Signed by a key the policy does not trust.
    #[error(
        "plugin {plugin:?} is signed by an untrusted key {} (author {author:?}); add the key to trust.keys to accept it",
        fingerprint(key)
    )]
    Untrusted {
        /// Plugin name.
        plugin: String,
        /// The signer's public key (base64).
        key: String,
        /// The author the manifest names.
        author: String,
    },
    /// Signed through Sigstore by a publisher the policy does not name.
    #[error(
        "plugin {plugin:?} is signed through Sigstore by {signer} (author {author:?}), a publisher this host does not trust ({}); add it to trust.publishers to accept it",
        publishers::trusted_list(.trusted)
    )]
    UntrustedPublisher {
        /// Plugin name.
        plugin: String,
        /// The signer, in words.
        signer: String,
        /// The author the manifest names.
        author: String,
        /// The publishers the policy trusts, in words.
        trusted: Vec<String>,
    },
    /// The signature does not match the bytes: changed after signing.
    #[error("plugin {plugin:?}: {reason}; the package was changed after it was signed, refusing it")]
    BadSignature {
        /// Plugin name.
        plugin: String,
        /// What did not match.
        reason: String,
    },
    /// The lock file pins another digest.
    #[error("plugin {plugin:?} has sha256 {actual}, but the lock file pins {locked}; refusing it")]
    LockMismatch {
        /// Plugin name.
        plugin: String,
        /// Digest in the lock file.
        locked: String,
        /// Digest of the file offered.
        actual: String,
    },
    /// A key file could not be read or parsed.
    #[error("{0}")]
    Key(String),
    /// A revocation list is malformed or its signature does not verify.
    #[error("{0}")]
    Revocations(String),
    /// `trust.revoked`, or a revocation list the operator trusts, names
    /// its signing key or its component.
    #[error("plugin {plugin:?} is revoked: {by} lists {entry} ({what}); refusing it")]
    Revoked {
        /// Plugin name.
        plugin: String,
        /// Which list: `trust.revoked`, or the revocation list it came from.
        by: String,
        /// The entry of `trust.revoked` that matched.
        entry: String,
        /// What it names: `its signing key` or `its component`.
        what: &'static str,
    },
    /// A Sigstore bundle that does not verify under the trusted root.
    #[error("plugin {plugin:?}: {reason}; refusing it")]
    Sigstore {
        /// Plugin name.
        plugin: String,
        /// What did not verify.
        reason: String,
    },
    /// Signed outside the window the trust policy gives its key.
    #[error(
        "plugin {plugin:?} was signed by {kind} {key:?} {}, outside the window trust gives that {kind} ({}); refusing it",
        .signed_at.as_deref().map_or_else(|| "with no signing time".to_string(), |t| format!("at {t}")),
        .window
    )]
    OutsideKeyWindow {
        /// Plugin name.
        plugin: String,
        /// `key` or `publisher`.
        kind: &'static str,
        /// The key's name.
        key: String,
        /// When the manifest says it was signed.
        signed_at: Option<String>,
        /// The window, in words (`from ... to ...`).
        window: String,
    },
    /// A signed package offered under a name other than the one it was signed
    /// with: its identity (grants, lock entry, what it replaces) is the signed
    /// name, never the file's.
    #[error(
        "\"{plugin}.wasm\" is offered as plugin {plugin:?} but is signed as plugin {signed:?}; a package loads only under its signed name: name the file {signed}.wasm (it then gets {signed:?}'s grants, not {plugin:?}'s)"
    )]
    NameMismatch {
        /// The name it was offered under (the file's stem).
        plugin: String,
        /// The name in its signed manifest.
        signed: String,
    },
}
