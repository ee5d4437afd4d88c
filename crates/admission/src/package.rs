//! Signed plugin packages, the trust policy and the lock file.
//!
//! A package is one component file: the component as the author's toolchain
//! built it, followed by one custom section named `toolhost-package` that
//! holds the manifest and an ed25519 signature. Custom sections are part of
//! the component format, so a signed package loads in any wasm runtime.
//!
//! The signature covers the manifest, which names the sha256 digest of the
//! component without that section: changing any byte of the component (or
//! the manifest) after signing breaks it. The manifest says who made it
//! (name, version, author, description) and what it asks for (the
//! capabilities its imports need, filled in by `toolhost sign`).
//!
//! The host's [`TrustPolicy`] names trusted author keys. A package signed by
//! one of them loads; an unsigned package, one signed by an unknown key, or
//! one whose signature does not verify is refused, unless the operator
//! allows unsigned packages explicitly. A [`LockFile`] pins digests by
//! plugin name; a mismatch is refused whatever the signature says.
//!
//! In place of an ed25519 signature, the section may carry a Sigstore
//! bundle over the same manifest text ([`crate::sigstore`]): the publisher
//! is then an identity and issuer (keyless) or a key, which
//! `trust.publishers` names, and the signing time is the transparency log's.
//!
//! A signed package's identity is the name in its manifest: offered under any
//! other name (a file `fileio.wasm` holding a package signed as `weather`),
//! it is refused, so it can never take another plugin's grants, lock entry or
//! place. Unsigned components (admitted only with `allow_unsigned`) are named
//! by their file and reported as unsigned everywhere.

use crate::sigstore::Bundle;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::path::Path;

/// Name of the custom section that carries the manifest and signature.
pub const SECTION: &str = "toolhost-package";
/// The largest package section read (a manifest with a Sigstore bundle is a
/// few KiB).
pub const MAX_SECTION_BYTES: usize = 1 << 20;
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// What a signed package says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Plugin name.
    pub name: String,
    /// Version (semver).
    pub version: String,
    /// Who made it.
    pub author: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Capabilities its imports ask for (`files`, `env`, `memory`, `network`).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// sha256 of the component without the package section, hex.
    pub sha256: String,
    /// Origins it asks to reach over HTTP (`https://api.open-meteo.com`),
    /// as `plugins.grants.<plugin>.http` would grant them. A new version
    /// asking for an origin its grants do not cover is held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_hosts: Vec<String>,
    /// Secrets it needs (`toolhost secret set <plugin> <name>`): it is held
    /// until each is set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Memory per call it asks for, MiB: the operator decides
    /// (`plugins.limits.<plugin>.memory_mib`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<usize>,
    /// When it was signed (RFC 3339), by the signer's clock: what a key's
    /// `not_before` / `not_after` are held against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_at: Option<String>,
}

/// What a plugin asks of the operator beyond capabilities, recorded in its
/// signed manifest by `toolhost sign`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Asks {
    /// Origins it wants to reach over HTTP.
    pub http_hosts: Vec<String>,
    /// Secrets it needs.
    pub secrets: Vec<String>,
    /// Memory per call, MiB.
    pub memory_mib: Option<usize>,
}

impl Manifest {
    /// In plain words, what it asks of the operator beyond capabilities,
    /// each phrase to follow "asks" (empty when nothing).
    pub fn asks_in_words(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.http_hosts.is_empty() {
            out.push(format!("to reach over HTTP: {}", self.http_hosts.join(", ")));
        }
        if !self.secrets.is_empty() {
            let commands: Vec<String> =
                self.secrets.iter().map(|s| format!("toolhost secret set {} {s}", self.name)).collect();
            out.push(format!(
                "for the secret{} {} (set with: {})",
                if self.secrets.len() == 1 { "" } else { "s" },
                self.secrets.join(", "),
                commands.join("; ")
            ));
        }
        if let Some(m) = self.memory_mib {
            out.push(format!("for {m} MiB of memory per call (plugins.limits.{}.memory_mib)", self.name));
        }
        out
    }
}

/// The package section's payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    /// The manifest as signed (canonical JSON text).
    manifest: String,
    /// The signer's public key, base64 (ed25519 signatures).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    public_key: String,
    /// ed25519 signature over `manifest`, base64.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    signature: String,
    /// A Sigstore bundle over `manifest`, in place of the two above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sigstore: Option<Box<Bundle>>,
}

/// A component file split into the component and its package section.
#[derive(Debug, Clone)]
pub struct Package<'a> {
    /// The component without the package section.
    pub component: &'a [u8],
    /// The verified-shape (not yet trust-checked) signature, if any.
    signed: Option<Envelope>,
}

/// Where a loaded plugin came from, for `toolhost grants` and audits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Provenance {
    /// Compiled into the binary.
    Builtin,
    /// Signed by a trusted key.
    Signed {
        /// The manifest.
        manifest: Box<Manifest>,
        /// The trusted key's name in the policy.
        key_name: String,
        /// The key (ed25519, base64), so a reload that drops it can tell;
        /// empty for a Sigstore signature.
        #[serde(default)]
        public_key: String,
        /// How it was verified through Sigstore, when it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sigstore: Option<SigstoreSigned>,
    },
    /// Not signed (or not by a trusted key), admitted because the operator
    /// allowed unsigned plugins.
    Unsigned {
        /// Why it would otherwise have been refused.
        reason: String,
    },
}

impl Provenance {
    /// One line for reports.
    pub fn describe(&self) -> String {
        match self {
            Provenance::Builtin => "built in (part of the toolhost binary)".into(),
            Provenance::Signed { manifest, key_name, sigstore: Some(s), .. } => {
                format!("signed by {} for publisher {key_name:?}, version {}", s.describe(), manifest.version)
            }
            Provenance::Signed { manifest, key_name, public_key, sigstore: None } => format!(
                "signed by {} with trusted key {}, version {}",
                manifest.author,
                // A record from before keys were kept has only the name.
                if public_key.is_empty() { key_name.clone() } else { named_fingerprint(public_key, Some(key_name)) },
                manifest.version
            ),
            Provenance::Unsigned { reason } => {
                format!("NOT VERIFIED: loaded only because the operator allows unsigned plugins ({reason})")
            }
        }
    }
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// How a key is shown everywhere (`verify`, `show`, `inspect`, `grants`,
/// `keygen`, errors, the registry's key-id annotation): `ed25519:` and the
/// first 16 hex digits of the sha256 of the raw 32-byte public key, from
/// its base64 form as `.pub` files and `trust.keys` hold it. Text that is
/// not a valid key is shown as `ed25519:?` rather than as a made-up id.
pub fn fingerprint(public_key_b64: &str) -> String {
    match B64.decode(public_key_b64.trim()).ok().filter(|raw| raw.len() == 32) {
        Some(raw) => format!("ed25519:{}", &sha256_hex(&raw)[..16]),
        None => "ed25519:?".to_string(),
    }
}

/// [`fingerprint`] with the key's name beside it when it has one:
/// `ed25519:680805dfc1691c84 (alice)`.
pub fn named_fingerprint(public_key_b64: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("{} ({n})", fingerprint(public_key_b64)),
        None => fingerprint(public_key_b64),
    }
}

/// Splits `bytes` into the component and its trailing package section.
pub fn parse(bytes: &[u8]) -> Result<Package<'_>, PackageError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(PackageError::Malformed("not a WebAssembly file".into()));
    }
    // Walk the top-level sections; the package section must be the last one.
    let mut pos = 8;
    let mut found: Option<(usize, &[u8])> = None;
    while pos < bytes.len() {
        let start = pos;
        let id = bytes[pos];
        pos += 1;
        let size = read_leb128(bytes, &mut pos).ok_or_else(|| PackageError::Malformed("truncated section".into()))?;
        let end = pos.checked_add(size).filter(|e| *e <= bytes.len());
        let end = end.ok_or_else(|| PackageError::Malformed("truncated section".into()))?;
        if id == 0 {
            let mut p = pos;
            let nlen =
                read_leb128(bytes, &mut p).ok_or_else(|| PackageError::Malformed("bad custom section".into()))?;
            if p + nlen <= end && &bytes[p..p + nlen] == SECTION.as_bytes() {
                if found.is_some() {
                    return Err(PackageError::Malformed(format!("more than one {SECTION} section")));
                }
                found = Some((start, &bytes[p + nlen..end]));
            }
        } else if found.is_some() {
            return Err(PackageError::Malformed(format!("the {SECTION} section must be the last section")));
        }
        pos = end;
    }
    match found {
        None => Ok(Package { component: bytes, signed: None }),
        Some((start, payload)) => {
            // A manifest and a signature or bundle are a few KiB: a bigger
            // section is never parsed.
            if payload.len() > MAX_SECTION_BYTES {
                return Err(PackageError::Malformed(format!(
                    "the {SECTION} section is {} bytes, over the {MAX_SECTION_BYTES} a manifest and its signature may take",
                    payload.len()
                )));
            }
            let env: Envelope = serde_json::from_slice(payload)
                .map_err(|e| PackageError::Malformed(format!("{SECTION} section: {e}")))?;
            Ok(Package { component: &bytes[..start], signed: Some(env) })
        }
    }
}

/// A signing key with its author name.
#[derive(Debug)]
pub struct KeyPair {
    /// The author's name, written into manifests.
    pub author: String,
    key: SigningKey,
}

/// The public half, as the trust policy lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicKey {
    /// A name for the key (the author's).
    pub name: String,
    /// ed25519 public key, base64.
    pub public_key: String,
    /// Plugins it signed before this time (RFC 3339) are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// Plugins it signed after this time (RFC 3339) are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
}

impl PublicKey {
    /// Its [`fingerprint`], with its name beside it.
    pub fn fingerprint(&self) -> String {
        named_fingerprint(&self.public_key, Some(&self.name))
    }
}

impl KeyPair {
    /// A new random key.
    pub fn generate(author: &str) -> Result<KeyPair, PackageError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| PackageError::Key(format!("no randomness: {e}")))?;
        Ok(KeyPair { author: author.to_string(), key: SigningKey::from_bytes(&seed) })
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey {
            name: self.author.clone(),
            public_key: B64.encode(self.key.verifying_key().to_bytes()),
            not_before: None,
            not_after: None,
        }
    }

    /// Writes `<stem>.key` (secret, mode 0600) and `<stem>.pub`.
    pub fn save(&self, stem: &Path) -> Result<(), PackageError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let secret = serde_json::json!({"author": self.author, "secret_key": B64.encode(self.key.to_bytes())});
        let key_path = stem.with_extension("key");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key_path)
            .map_err(|e| PackageError::Key(format!("writing {}: {e}", key_path.display())))?;
        f.write_all(format!("{secret}\n").as_bytes())
            .map_err(|e| PackageError::Key(format!("writing {}: {e}", key_path.display())))?;
        let pub_path = stem.with_extension("pub");
        let text = serde_json::to_string_pretty(&self.public()).unwrap_or_default();
        std::fs::write(&pub_path, format!("{text}\n"))
            .map_err(|e| PackageError::Key(format!("writing {}: {e}", pub_path.display())))
    }

    /// Reads a `.key` file written by [`KeyPair::save`].
    pub fn load(path: &Path) -> Result<KeyPair, PackageError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PackageError::Key(format!("reading the key {}: {e}", path.display())))?;
        if text.trim_start().starts_with("-----BEGIN") {
            return Err(PackageError::Key(format!(
                "{} is a PEM key, not a toolhost key file: for a Sigstore key, sign with --sigstore-key",
                path.display()
            )));
        }
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| PackageError::Key(format!("{} is not a toolhost key file: {e}", path.display())))?;
        let secret = v["secret_key"]
            .as_str()
            .and_then(|s| B64.decode(s).ok())
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| PackageError::Key(format!("{} has no valid secret_key", path.display())))?;
        Ok(KeyPair {
            author: v["author"].as_str().unwrap_or("unknown").to_string(),
            key: SigningKey::from_bytes(&secret),
        })
    }

    /// Signs a component (replacing an earlier signature): returns the
    /// package bytes and the manifest.
    pub fn sign(
        &self,
        bytes: &[u8],
        name: &str,
        version: &str,
        description: &str,
        capabilities: Vec<String>,
    ) -> Result<(Vec<u8>, Manifest), PackageError> {
        self.sign_with_asks(bytes, name, version, description, capabilities, Asks::default())
    }

    /// [`KeyPair::sign`], recording what the plugin asks of the operator.
    pub fn sign_with_asks(
        &self,
        bytes: &[u8],
        name: &str,
        version: &str,
        description: &str,
        capabilities: Vec<String>,
        asks: Asks,
    ) -> Result<(Vec<u8>, Manifest), PackageError> {
        let (manifest, text) = Manifest::prepare(bytes, name, version, &self.author, description, capabilities, asks)?;
        let env = Envelope {
            signature: B64.encode(self.key.sign(text.as_bytes()).to_bytes()),
            public_key: self.public().public_key,
            manifest: text,
            sigstore: None,
        };
        Ok((with_envelope(bytes, &env)?, manifest))
    }
}

impl Manifest {
    /// Whether any of its text holds a control character: it is shown to
    /// operators, and a terminal would obey one.
    fn has_control_characters(&self) -> bool {
        let texts = [&self.name, &self.version, &self.author, &self.description];
        let lists = self.capabilities.iter().chain(&self.http_hosts).chain(&self.secrets);
        texts.into_iter().chain(lists).any(|t| t.chars().any(char::is_control))
    }

    /// The manifest for `bytes` (a component, signed or not) and the text a
    /// signature covers.
    pub fn prepare(
        bytes: &[u8],
        name: &str,
        version: &str,
        author: &str,
        description: &str,
        capabilities: Vec<String>,
        asks: Asks,
    ) -> Result<(Manifest, String), PackageError> {
        let component = parse(bytes)?.component;
        let manifest = Manifest {
            name: name.to_string(),
            version: version.to_string(),
            author: author.to_string(),
            description: description.to_string(),
            capabilities,
            sha256: sha256_hex(component),
            http_hosts: asks.http_hosts,
            secrets: asks.secrets,
            memory_mib: asks.memory_mib,
            signed_at: Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        };
        if manifest.has_control_characters() {
            return Err(PackageError::Malformed(
                "the name, version, author, description or an ask holds a control character".into(),
            ));
        }
        let text = serde_json::to_string(&manifest).map_err(|e| PackageError::Malformed(e.to_string()))?;
        Ok((manifest, text))
    }
}

/// What a package proves, before any trust decision.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The manifest.
    pub manifest: Manifest,
    /// The signer's public key, base64 (empty for a Sigstore bundle).
    pub public_key: String,
    /// The Sigstore bundle over the manifest, when it has one: only a
    /// trust policy, which holds the trusted root, verifies it
    /// ([`TrustPolicy::verify_bundle`]).
    pub bundle: Option<Box<Bundle>>,
    /// The manifest text the signature covers.
    manifest_text: String,
}

impl Verified {
    /// The manifest text the signature covers (the artifact a Sigstore
    /// bundle signs).
    pub fn manifest_text(&self) -> Option<&str> {
        Some(self.manifest_text.as_str()).filter(|t| !t.is_empty())
    }

    /// The signer's [`fingerprint`]; for a Sigstore bundle, the signer it
    /// names (`alice@example.org (issuer ...)`, `Sigstore key ecdsa:...`),
    /// not yet verified ([`TrustPolicy::verify_bundle`] does).
    pub fn fingerprint(&self) -> String {
        match &self.bundle {
            Some(b) => b.claimed_signer().map_or_else(|| "sigstore:?".into(), |s| s.describe()),
            None => fingerprint(&self.public_key),
        }
    }
}

impl TrustPolicy {
    /// The name this policy gives the key `public_key_b64` (base64), when
    /// it trusts it.
    pub fn key_name(&self, public_key_b64: &str) -> Option<&str> {
        self.keys.iter().find(|k| k.public_key == public_key_b64).map(|k| k.name.as_str())
    }
}

impl Package<'_> {
    /// Checks the signature and the digest. `Ok(None)`: not signed.
    ///
    /// For a Sigstore bundle, this checks the manifest's digest only: the
    /// bundle is verified by [`TrustPolicy::verify_bundle`], under the
    /// policy's trusted root.
    pub fn verify(&self, plugin: &str) -> Result<Option<Verified>, PackageError> {
        let Some(env) = &self.signed else { return Ok(None) };
        let bad = |reason: String| PackageError::BadSignature { plugin: plugin.to_string(), reason };
        if let Some(bundle) = &env.sigstore {
            let manifest = self.checked_manifest(plugin, &env.manifest)?;
            return Ok(Some(Verified {
                manifest,
                public_key: String::new(),
                bundle: Some(bundle.clone()),
                manifest_text: env.manifest.clone(),
            }));
        }
        let key = B64
            .decode(&env.public_key)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .and_then(|b| VerifyingKey::from_bytes(&b).ok())
            .ok_or_else(|| bad("the public key is malformed".into()))?;
        let sig = B64
            .decode(&env.signature)
            .ok()
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
            .map(|b| Signature::from_bytes(&b))
            .ok_or_else(|| bad("the signature is malformed".into()))?;
        key.verify(env.manifest.as_bytes(), &sig)
            .map_err(|_| bad("the signature does not match the manifest".into()))?;
        let manifest = self.checked_manifest(plugin, &env.manifest)?;
        Ok(Some(Verified {
            manifest,
            public_key: env.public_key.clone(),
            bundle: None,
            manifest_text: env.manifest.clone(),
        }))
    }

    fn checked_manifest(&self, plugin: &str, text: &str) -> Result<Manifest, PackageError> {
        let bad = |reason: String| PackageError::BadSignature { plugin: plugin.to_string(), reason };
        let manifest: Manifest =
            serde_json::from_str(text).map_err(|e| bad(format!("the manifest is malformed: {e}")))?;
        if manifest.has_control_characters() {
            return Err(PackageError::Malformed(format!(
                "plugin {plugin:?}: its manifest holds control characters (a terminal would obey them); refusing it"
            )));
        }
        let actual = sha256_hex(self.component);
        if manifest.sha256 != actual {
            return Err(bad(format!(
                "the component's sha256 is {actual}, the signed manifest says {}",
                manifest.sha256
            )));
        }
        Ok(manifest)
    }
}

/// `trust:` section of the config: who may publish plugins to this host.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrustConfig {
    /// Trusted author keys (the contents of their `.pub` files).
    pub keys: Vec<PublicKey>,
    /// Trusted author keys as `.pub` files (from `toolhost keygen`).
    pub key_files: Vec<std::path::PathBuf>,
    /// Admit unsigned or untrusted plugins (reported as such). Default false.
    pub allow_unsigned: bool,
    /// Lock file pinning plugin digests [default: `toolhost.lock` beside the
    /// config, when it exists].
    pub lock_file: Option<std::path::PathBuf>,
    /// Revoked: signing keys by key id (`ed25519:` and 16 hex digits, as
    /// `keygen` and `verify` print it) and components by sha256 (64 hex
    /// digits, `sha256:` optional). What they name is refused at load,
    /// whatever else trusts it, and a reload unloads it from a serving
    /// host. Also Sigstore publishers, by identity (an email or URI) or
    /// key id (`ecdsa:...`).
    pub revoked: Vec<String>,
    /// Publishers trusted through Sigstore: `{identity, issuer}` for
    /// keyless signatures, `{key_file}` for keyed ones; each may carry
    /// `not_before` / `not_after`, held against the transparency log's time.
    pub publishers: Vec<PublisherConfig>,
    /// Where Sigstore's trust comes from.
    pub sigstore: SigstoreConfig,
}

/// The decision procedure for plugin files.
#[derive(Debug, Clone, Default)]
pub struct TrustPolicy {
    /// Trusted keys.
    pub keys: Vec<PublicKey>,
    /// Admit what is not signed by a trusted key (reported as such).
    pub allow_unsigned: bool,
    /// Pinned digests.
    pub lock: Option<LockFile>,
    /// Revoked signing keys (key ids) and components (sha256): refused
    /// whatever else says ([`TrustConfig::revoked`]).
    pub revoked: Vec<String>,
    /// Revoked by signed revocation lists published to a catalogue, which
    /// the operator trusts (`marketplace.revocations_signed_by`).
    pub published: Vec<Revocation>,
    /// Publishers trusted through Sigstore (`trust.publishers`).
    pub publishers: Vec<Publisher>,
    /// The Sigstore trusted root [default: the public-good instance's].
    pub sigstore_root: Option<std::sync::Arc<crate::sigstore::TrustedRoot>>,
}

impl TrustPolicy {
    /// A policy that admits everything (the library default: embedding
    /// programs and tests decide for themselves).
    pub fn permissive() -> TrustPolicy {
        TrustPolicy { allow_unsigned: true, ..TrustPolicy::default() }
    }

    /// Decides on `bytes` offered as plugin `plugin`: returns the component
    /// bytes to load and where they come from.
    pub fn admit<'a>(&self, plugin: &str, bytes: &'a [u8]) -> Result<(&'a [u8], Provenance), PackageError> {
        let package = parse(bytes).map_err(|e| match e {
            PackageError::Malformed(m) => PackageError::Malformed(format!("plugin {plugin:?}: {m}")),
            e => e,
        })?;
        if let Some(entry) = self.lock.as_ref().and_then(|l| l.plugins.get(plugin)) {
            let actual = sha256_hex(package.component);
            if entry.sha256 != actual {
                return Err(PackageError::LockMismatch {
                    plugin: plugin.to_string(),
                    locked: entry.sha256.clone(),
                    actual,
                });
            }
        }
        let mut verified = package.verify(plugin);
        // A Sigstore bundle is verified here, under the policy's root.
        let mut sigstore = None;
        if let Ok(Some(v)) = &verified
            && let Some(bundle) = &v.bundle
        {
            match self.verify_sigstore(plugin, bundle, &v.manifest_text) {
                Ok(s) => sigstore = Some(s),
                Err(e) => verified = Err(e),
            }
        }
        let signer = match (&verified, &sigstore) {
            (_, Some(s)) => Some(window::Signer::Sigstore(s)),
            (Ok(Some(v)), None) => Some(window::Signer::Ed25519(v.public_key.as_str())),
            _ => None,
        };
        self.check_revoked(plugin, signer.as_ref(), &sha256_hex(package.component))?;
        let refusal = match verified {
            // A broken signature is refused even when unsigned plugins are allowed.
            Err(e) => return Err(e),
            Ok(None) => PackageError::Unsigned { plugin: plugin.to_string() },
            Ok(Some(v)) if v.manifest.name != plugin => {
                // Checked before trust: a package signed by anyone never
                // borrows another plugin's name, grants or lock entry.
                return Err(PackageError::NameMismatch { plugin: plugin.to_string(), signed: v.manifest.name });
            }
            Ok(Some(v)) if sigstore.is_some() => {
                let signed = sigstore.expect("checked");
                match self.trusted_publisher(plugin, &signed, &v.manifest) {
                    Ok(p) => {
                        return Ok((
                            package.component,
                            Provenance::Signed {
                                key_name: p.name.clone(),
                                manifest: Box::new(v.manifest),
                                public_key: String::new(),
                                sigstore: Some(signed),
                            },
                        ));
                    }
                    Err(e @ PackageError::OutsideKeyWindow { .. }) => return Err(e),
                    Err(e) => e,
                }
            }
            Ok(Some(v)) => match self.keys.iter().find(|k| k.public_key == v.public_key) {
                Some(k) => {
                    Self::check_window(plugin, k, &v.manifest)?;
                    return Ok((
                        package.component,
                        Provenance::Signed {
                            manifest: Box::new(v.manifest),
                            key_name: k.name.clone(),
                            public_key: v.public_key,
                            sigstore: None,
                        },
                    ));
                }
                None => {
                    PackageError::Untrusted { plugin: plugin.to_string(), key: v.public_key, author: v.manifest.author }
                }
            },
        };
        if self.allow_unsigned {
            let reason = match &refusal {
                PackageError::Untrusted { author, key, .. } => {
                    format!("signed by untrusted author {author:?} with key {}", fingerprint(key))
                }
                PackageError::UntrustedPublisher { signer, .. } => {
                    format!("signed through Sigstore by untrusted publisher {signer}")
                }
                _ => "unsigned".into(),
            };
            Ok((package.component, Provenance::Unsigned { reason }))
        } else {
            Err(refusal)
        }
    }

    /// Whether this policy would still admit a plugin loaded as
    /// `provenance` with component digest `digest` (a config reload
    /// changed the trust): its key still trusted (or unsigned plugins
    /// allowed), its digest still the locked one. Built-ins always are.
    pub fn still_admits(&self, plugin: &str, digest: &str, provenance: &Provenance) -> Result<(), PackageError> {
        if matches!(provenance, Provenance::Builtin) {
            return Ok(());
        }
        if let Some(entry) = self.lock.as_ref().and_then(|l| l.plugins.get(plugin))
            && entry.sha256 != digest
        {
            return Err(PackageError::LockMismatch {
                plugin: plugin.to_string(),
                locked: entry.sha256.clone(),
                actual: digest.to_string(),
            });
        }
        let signer = match provenance {
            Provenance::Signed { sigstore: Some(s), .. } => Some(window::Signer::Sigstore(s)),
            Provenance::Signed { public_key, .. } => Some(window::Signer::Ed25519(public_key.as_str())),
            _ => None,
        };
        self.check_revoked(plugin, signer.as_ref(), digest)?;
        if let Provenance::Signed { sigstore: Some(s), manifest, .. } = provenance {
            return match self.trusted_publisher(plugin, s, manifest) {
                Ok(_) => Ok(()),
                Err(_) if self.allow_unsigned => Ok(()),
                Err(e) => Err(e),
            };
        }
        let trusted = match provenance {
            Provenance::Signed { public_key, manifest, .. } => {
                self.keys.iter().find(|k| &k.public_key == public_key).map(|k| (k, manifest))
            }
            _ => None,
        };
        if let Some((key, manifest)) = trusted {
            return Self::check_window(plugin, key, manifest);
        }
        match provenance {
            _ if self.allow_unsigned => Ok(()),
            Provenance::Signed { manifest, public_key, .. } => Err(PackageError::Untrusted {
                plugin: plugin.to_string(),
                key: public_key.clone(),
                author: manifest.author.clone(),
            }),
            _ => Err(PackageError::Unsigned { plugin: plugin.to_string() }),
        }
    }
}

/// The sha256 of a file's component bytes (without any package section).
pub fn component_digest(bytes: &[u8]) -> Result<String, PackageError> {
    Ok(sha256_hex(parse(bytes)?.component))
}

mod error;
mod lock;
mod publishers;
mod revocation;
mod section;
mod window;
pub use error::PackageError;
pub use lock::{LockEntry, LockFile};
pub use publishers::{Publisher, PublisherConfig, SigstoreConfig, SigstoreSigned, publisher_window};
pub use revocation::{MAX_REVOKED_PER_LIST, Revocation, RevocationList};
pub use section::with_sigstore;
use section::{read_leb128, with_envelope};
pub use window::{TrustEntryError, check_key_window, check_revoked_entry};
#[cfg(test)]
mod tests;
