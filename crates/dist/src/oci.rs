//! Plugins from OCI registries: `oci://HOST[:PORT]/REPO:TAG` and
//! `oci://HOST[:PORT]/REPO@sha256:...` references, pushed and pulled as the
//! CNCF "Wasm OCI artifact" (one `application/wasm` layer, config media type
//! `application/vnd.wasm.config.v0+json`), through the `oci-client` crate.
//!
//! A registry is a transport, never a trust anchor: what it serves is
//! checked here for shape (one wasm layer of bounded size, the media types
//! above, digests that match the bytes) and then goes through the host's
//! [`TrustPolicy`](toolhost_admission::package::TrustPolicy) like any file: the signature
//! inside the component decides. The annotations a registry shows are the
//! signed manifest's fields as the pusher wrote them, for display only.
//!
//! Pulled manifests and layers are cached by digest under
//! `<cache dir>/oci/` (0700 directories, 0600 files) and re-hashed on every
//! read, so a restart needs no network: a digest reference (or a digest
//! pinned by `toolhost.lock`) is served from the cache without asking the
//! registry; a tag is asked for, and when the registry cannot be reached the
//! digest it last resolved to is used from the cache.
//!
//! Credentials (see [`Credentials`]) are only ever sent to the registry they
//! are configured for, and never appear in errors, logs or files toolhost
//! writes.

use base64::Engine as _;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The scheme of a registry reference.
pub const SCHEME: &str = "oci://";
/// The manifest's media type.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config's media type (the CNCF Wasm OCI artifact layout).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The one layer's media type.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Largest manifest or config accepted, in bytes.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;

/// The annotation keys `toolhost push` writes on the manifest.
pub mod annotations {
    /// Plugin name.
    pub const TITLE: &str = "org.opencontainers.image.title";
    /// Plugin version.
    pub const VERSION: &str = "org.opencontainers.image.version";
    /// Author.
    pub const AUTHORS: &str = "org.opencontainers.image.authors";
    /// Description.
    pub const DESCRIPTION: &str = "org.opencontainers.image.description";
    /// When it was pushed (RFC 3339).
    pub const CREATED: &str = "org.opencontainers.image.created";
    /// Capabilities it asks for, comma-separated.
    pub const CAPABILITIES: &str = "dev.toolhost.capabilities";
    /// Its tools' declared latencies: JSON `[{"name", "estimated_ms", "max_ms", "idempotent"}]`.
    pub const LATENCIES: &str = "dev.toolhost.latencies";
    /// Measured speed badges by tool, JSON `{"tool": "badge"}`, when measured.
    pub const BADGE: &str = "dev.toolhost.badge";
    /// The signing key's fingerprint ([`toolhost_admission::package::fingerprint`]:
    /// `ed25519:` and the first 16 hex digits of its sha256).
    pub const KEY_ID: &str = "dev.toolhost.signature.key-id";
    /// The signing key, base64.
    pub const PUBLIC_KEY: &str = "dev.toolhost.signature.public-key";
    /// sha256 of the component without its package section (what the lock file pins).
    pub const COMPONENT_SHA256: &str = "dev.toolhost.component.sha256";
}

/// Why a registry operation failed or its answer was refused. No variant
/// ever carries a credential.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The reference is not a valid `oci://` reference.
    #[error("{reference:?} is not a valid registry reference: {reason}")]
    Reference {
        /// The text given (credentials, if any, removed).
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// The registry could not be reached or answered with an error.
    #[error("registry {registry}: {message}")]
    Registry {
        /// `host[:port]`.
        registry: String,
        /// What went wrong (escaped, shortened).
        message: String,
    },
    /// The registry cannot be reached (connection refused, timed out).
    #[error("registry {registry} cannot be reached: {message}")]
    Unreachable {
        /// `host[:port]`.
        registry: String,
        /// What went wrong.
        message: String,
    },
    /// What the registry served is refused.
    #[error("{reference}: {reason}; refusing it")]
    Refused {
        /// The reference.
        reference: String,
        /// Why.
        reason: String,
    },
    /// A credentials file or variable is malformed.
    #[error("registry credentials: {0}")]
    Credentials(String),
    /// The cache could not be written.
    #[error("registry cache {path}: {message}")]
    Cache {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// `oci:` section of the config (a config section type of the core).
pub use toolhost_config::OciConfig;

pub use credentials::Credentials;
pub(crate) use reference::is_sha256_digest;
pub use reference::{OciRef, is_reference, path_is_reference};
pub use referrers::{INDEX_MEDIA_TYPE, referrers_tag};

/// Whether `registry` (`host[:port]`) is this machine (the one loopback
/// rule: [`toolhost_base::net::is_loopback_host`]).
pub fn is_loopback(registry: &str) -> bool {
    toolhost_base::net::is_loopback_host(toolhost_base::net::host_of(registry))
}

/// What was pulled.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The reference as asked for.
    pub reference: String,
    /// The manifest's digest (what `toolhost.lock` pins).
    pub digest: String,
    /// The layer's digest.
    pub layer_digest: String,
    /// The layer: the (signed) component file.
    pub bytes: Vec<u8>,
    /// The manifest's annotations (as the pusher wrote them: unverified).
    pub annotations: BTreeMap<String, String>,
    /// The cached layer file, when the cache is on.
    pub path: Option<PathBuf>,
    /// Served from the cache without asking the registry.
    pub from_cache: bool,
}

impl Fetched {
    /// `oci://HOST/REPO@sha256:...`, the exact artifact.
    pub fn pinned(&self) -> String {
        match OciRef::parse(&self.reference) {
            Ok(r) => r.at_digest(&self.digest).to_string(),
            Err(_) => self.reference.clone(),
        }
    }
}

/// What a push did.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The manifest's digest.
    pub digest: String,
    /// The layer's digest.
    pub layer_digest: String,
    /// Bytes pushed (layer, config, manifest).
    pub bytes: usize,
    /// The manifest's size, for referrers that name it as their subject.
    pub manifest_size: usize,
}

/// Component facts for the artifact's config (`component.imports/exports`).
#[derive(Debug, Clone, Default)]
pub struct ComponentInfo {
    /// The component's imports.
    pub imports: Vec<String>,
    /// The component's exports.
    pub exports: Vec<String>,
    /// Author, for the config's `author`.
    pub author: Option<String>,
}

/// A registry client with a digest-addressed cache.
#[derive(Debug, Clone)]
pub struct OciStore {
    cache: Option<PathBuf>,
    insecure: Vec<String>,
    credentials: Credentials,
    max_layer_bytes: usize,
    timeout: Duration,
}

pub(crate) fn sha256_digest(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// An `oci-client` error as text safe to show: escaped, bounded.
fn describe(e: &oci_client::errors::OciDistributionError) -> String {
    let text = e.to_string();
    let short: String = text.chars().take(300).collect();
    crate::tool::log_safe(&short).into_owned()
}

fn unreachable(e: &oci_client::errors::OciDistributionError) -> bool {
    matches!(e, oci_client::errors::OciDistributionError::RequestError(r) if r.is_connect() || r.is_timeout())
}

impl OciStore {
    /// A store caching under `<cache_dir>/oci` (no cache: `None`),
    /// accepting layers up to `max_layer_bytes`.
    pub fn new(
        config: &OciConfig,
        credentials: Credentials,
        cache_dir: Option<&Path>,
        max_layer_bytes: usize,
    ) -> OciStore {
        OciStore {
            cache: cache_dir.map(|d| d.join("oci")),
            insecure: config.insecure.clone(),
            credentials,
            max_layer_bytes,
            timeout: Duration::from_secs(config.timeout_secs.unwrap_or(120).max(1)),
        }
    }

    /// Allows plain HTTP to `registry` too (`--insecure`).
    pub fn allow_insecure(&mut self, registry: &str) {
        self.insecure.push(registry.to_string());
    }

    /// Largest layer accepted.
    pub fn max_layer_bytes(&self) -> usize {
        self.max_layer_bytes
    }

    fn client(&self, r: &OciRef) -> (Client, String) {
        let registry = r.registry().to_string();
        let plain = is_loopback(&registry) || self.insecure.contains(&registry);
        let protocol = if plain { ClientProtocol::HttpsExcept(vec![registry.clone()]) } else { ClientProtocol::Https };
        let client = Client::new(ClientConfig {
            protocol,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        });
        (client, registry)
    }

    fn auth(&self, r: &OciRef) -> Result<RegistryAuth, OciError> {
        let (auth, from) = self.credentials.for_registry(r.registry())?;
        tracing::debug!(registry = %r.registry(), credentials = %from, "registry credentials");
        Ok(auth)
    }

    /// Runs `f` on a runtime of its own, on a thread of its own (callable
    /// from anywhere, async context or not), bounded by the timeout.
    pub(crate) fn block<T: Send>(
        &self,
        registry: &str,
        f: impl std::future::Future<Output = Result<T, OciError>> + Send,
    ) -> Result<T, OciError> {
        let timeout = self.timeout;
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
                    OciError::Registry { registry: registry.to_string(), message: format!("no async runtime: {e}") }
                })?;
                rt.block_on(async {
                    tokio::time::timeout(timeout, f).await.unwrap_or_else(|_| {
                        Err(OciError::Unreachable {
                            registry: registry.to_string(),
                            message: format!("no answer within {} s", timeout.as_secs()),
                        })
                    })
                })
            })
            .join()
            .unwrap_or_else(|_| {
                Err(OciError::Registry {
                    registry: registry.to_string(),
                    message: "the registry client panicked".into(),
                })
            })
        })
    }

    /// A bounded reader for `r`'s registry with its credentials.
    pub(crate) fn reader(&self, r: &OciRef) -> Result<bounded::Reader, OciError> {
        let registry = r.reference.resolve_registry().to_string();
        let plain = is_loopback(r.registry()) || self.insecure.iter().any(|i| i == r.registry());
        let auth = self.auth(r)?;
        bounded::Reader::new(&registry, plain, &self.insecure, auth, self.timeout)
            .map_err(|message| OciError::Registry { registry: r.registry().to_string(), message })
    }

    /// Reads `kind` (`manifests`, `blobs`) `reference` of `r`'s repository
    /// with the bounded reader; `Ok(None)` when the registry has none.
    pub(crate) fn get_bounded(
        &self,
        r: &OciRef,
        kind: &str,
        reference: &str,
        accept: &str,
        max: usize,
    ) -> Result<Option<Vec<u8>>, OciError> {
        let mut reader = self.reader(r)?;
        let registry = r.registry().to_string();
        let repository = r.reference.repository().to_string();
        self.block(&registry, async {
            reader.get(&repository, kind, reference, accept, max).await.map_err(|m| classify(&registry, r, m))
        })
    }

    fn registry_err(registry: &str, e: &oci_client::errors::OciDistributionError) -> OciError {
        if unreachable(e) {
            OciError::Unreachable { registry: registry.to_string(), message: describe(e) }
        } else {
            OciError::Registry { registry: registry.to_string(), message: describe(e) }
        }
    }

    /// Pushes `package` (a component file) to `r` as a Wasm OCI artifact
    /// with `annotations` on the manifest.
    pub fn push(
        &self,
        r: &OciRef,
        package: &[u8],
        info: &ComponentInfo,
        annotations: BTreeMap<String, String>,
    ) -> Result<Pushed, OciError> {
        if r.digest().is_some() {
            return Err(OciError::Reference {
                reference: r.to_string(),
                reason: "push to a tag (REPO:TAG), not a digest".into(),
            });
        }
        let registry = r.registry().to_string();
        let layer_digest = sha256_digest(package);
        let config = serde_json::json!({
            "created": annotations.get(annotations::CREATED).cloned()
                .unwrap_or_else(|| chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            "author": info.author,
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
            "component": {"exports": info.exports, "imports": info.imports, "target": null},
        });
        let config = serde_json::to_vec(&config).unwrap_or_default();
        let config_digest = sha256_digest(&config);
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.into()),
            config: OciDescriptor {
                media_type: CONFIG_MEDIA_TYPE.into(),
                digest: config_digest.clone(),
                size: config.len() as i64,
                ..Default::default()
            },
            layers: vec![OciDescriptor {
                media_type: LAYER_MEDIA_TYPE.into(),
                digest: layer_digest.clone(),
                size: package.len() as i64,
                ..Default::default()
            }],
            annotations: Some(annotations),
            ..Default::default()
        };
        let manifest = serde_json::to_vec(&manifest).map_err(|e| OciError::Registry {
            registry: registry.clone(),
            message: format!("encoding the manifest: {e}"),
        })?;
        let total = package.len() + config.len() + manifest.len();
        let manifest_size = manifest.len();
        let digest =
            self.push_parts(r, vec![(package.to_vec(), layer_digest.clone()), (config, config_digest)], manifest)?;
        tracing::info!(reference = %r, %digest, "pushed");
        Ok(Pushed { digest, layer_digest, bytes: total, manifest_size })
    }

    /// Pushes `blobs` (each with its sha256 digest), then `manifest` (an
    /// OCI image manifest, as JSON, naming them) at `r`'s tag: the
    /// manifest's digest.
    pub(crate) fn push_parts(
        &self,
        r: &OciRef,
        blobs: Vec<(Vec<u8>, String)>,
        manifest: Vec<u8>,
    ) -> Result<String, OciError> {
        self.push_typed(r, blobs, manifest, MANIFEST_MEDIA_TYPE)
    }

    /// [`OciStore::push_parts`] for a manifest of media type `content_type`
    /// (an image index, say), at `r`'s tag or digest.
    pub(crate) fn push_typed(
        &self,
        r: &OciRef,
        blobs: Vec<(Vec<u8>, String)>,
        manifest: Vec<u8>,
        content_type: &'static str,
    ) -> Result<String, OciError> {
        let (client, registry) = self.client(r);
        let auth = self.auth(r)?;
        let digest = sha256_digest(&manifest);
        let reference = r.reference.clone();
        self.block(&registry, async {
            let err = |e: oci_client::errors::OciDistributionError| Self::registry_err(&registry, &e);
            client.store_auth_if_needed(reference.resolve_registry(), &auth).await;
            client.auth(&reference, &auth, oci_client::RegistryOperation::Push).await.map_err(err)?;
            for (bytes, digest) in blobs {
                client.push_blob(&reference, bytes, &digest).await.map_err(err)?;
            }
            let ct = http::HeaderValue::from_static(content_type);
            client.push_manifest_raw(&reference, manifest, ct).await.map_err(err)?;
            Ok(())
        })?;
        Ok(digest)
    }

    /// Checks a manifest's shape: the Wasm artifact layout, one layer of
    /// bounded size with a sha256 digest.
    fn check_manifest(&self, r: &OciRef, raw: &[u8]) -> Result<OciImageManifest, OciError> {
        let refuse = |reason: String| OciError::Refused { reference: r.to_string(), reason };
        if raw.len() > MAX_MANIFEST_BYTES {
            return Err(refuse(format!("the manifest is {} bytes, over the {MAX_MANIFEST_BYTES} limit", raw.len())));
        }
        let m: OciImageManifest = serde_json::from_slice(raw)
            .map_err(|e| refuse(format!("the manifest is not an OCI image manifest: {e}")))?;
        if m.media_type.as_deref().is_some_and(|t| t != MANIFEST_MEDIA_TYPE) {
            return Err(refuse(format!(
                "the manifest's media type is {:?}, not {MANIFEST_MEDIA_TYPE}",
                crate::tool::log_safe(m.media_type.as_deref().unwrap_or(""))
            )));
        }
        if m.config.media_type != CONFIG_MEDIA_TYPE {
            return Err(refuse(format!(
                "the config's media type is {:?}, not {CONFIG_MEDIA_TYPE}: not a Wasm artifact",
                crate::tool::log_safe(&m.config.media_type)
            )));
        }
        let [layer] = &m.layers[..] else {
            return Err(refuse(format!("a Wasm artifact has exactly one layer, this one has {}", m.layers.len())));
        };
        if layer.media_type != LAYER_MEDIA_TYPE {
            return Err(refuse(format!(
                "the layer's media type is {:?}, not {LAYER_MEDIA_TYPE}",
                crate::tool::log_safe(&layer.media_type)
            )));
        }
        if !is_sha256_digest(&layer.digest) {
            return Err(refuse("the layer's digest is not a sha256 digest".into()));
        }
        if layer.size < 0 || layer.size as u64 > self.max_layer_bytes as u64 {
            return Err(refuse(format!(
                "the layer is {} bytes, over the plugin size limit of {}",
                layer.size, self.max_layer_bytes
            )));
        }
        Ok(m)
    }

    /// The manifest (digest, parsed, checked) of `r`, from the registry
    /// (a digest reference: from the cache when there).
    pub fn manifest(&self, r: &OciRef) -> Result<(String, OciImageManifest), OciError> {
        if let Some(d) = r.digest()
            && let Some(raw) = self.read_blob(d, MAX_MANIFEST_BYTES)
        {
            return Ok((d.to_string(), self.check_manifest(r, &raw)?));
        }
        let name = r.digest().or(r.reference.tag()).unwrap_or("latest").to_string();
        let raw =
            self.get_bounded(r, "manifests", &name, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES)?.ok_or_else(|| {
                OciError::Registry {
                    registry: r.registry().to_string(),
                    message: format!("no {} in {}", crate::tool::log_safe(&name), r.reference.repository()),
                }
            })?;
        let raw = (raw, ());
        let digest = sha256_digest(&raw.0);
        if let Some(want) = r.digest()
            && want != digest
        {
            return Err(OciError::Refused {
                reference: r.to_string(),
                reason: format!("the registry served a manifest whose digest is {digest}"),
            });
        }
        Ok((digest, self.check_manifest(r, &raw.0)?))
    }

    /// Pulls `r` (at `pinned`, a manifest digest, when given): the cache
    /// first for a digest, the registry otherwise (and the cache again when
    /// the registry cannot be reached for a tag).
    pub fn fetch(&self, r: &OciRef, pinned: Option<&str>) -> Result<Fetched, OciError> {
        let refuse = |reason: String| OciError::Refused { reference: r.to_string(), reason };
        if let (Some(p), Some(d)) = (pinned, r.digest())
            && p != d
        {
            return Err(refuse(format!("the lock file pins {p}, the reference names {d}")));
        }
        let want = pinned.or(r.digest()).map(str::to_string);
        if let Some(d) = &want {
            if !is_sha256_digest(d) {
                return Err(refuse(format!("{:?} is not a sha256 digest", crate::tool::log_safe(d))));
            }
            if let Some(f) = self.cached(r, d)? {
                tracing::debug!(reference = %r, digest = %d, "served from the cache");
                return Ok(f);
            }
        }
        let target = match &want {
            Some(d) => r.at_digest(d),
            None => r.clone(),
        };
        let name = target.digest().or(target.reference.tag()).unwrap_or("latest").to_string();
        let raw = match self.get_bounded(&target, "manifests", &name, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES) {
            Ok(Some(raw)) => Ok(raw),
            Ok(None) => Err(match &want {
                Some(d) => refuse(format!("the registry no longer serves the pinned digest {d}")),
                None => OciError::Registry {
                    registry: r.registry().to_string(),
                    message: format!("no tag {} in {}", crate::tool::log_safe(&name), r.reference.repository()),
                },
            }),
            Err(e) => Err(e),
        };
        let raw = match raw {
            Ok(raw) => raw,
            Err(OciError::Unreachable { registry, message }) if want.is_none() => {
                // A tag, and the registry is gone: the digest it last named.
                if let Some(d) = self.read_tag(r)
                    && let Some(f) = self.cached(r, &d)?
                {
                    tracing::warn!(reference = %r, digest = %d, "registry unreachable ({message}); using the digest this tag last resolved to, from the cache");
                    return Ok(f);
                }
                return Err(OciError::Unreachable { registry, message });
            }
            Err(e) => return Err(e),
        };
        let digest = sha256_digest(&raw);
        if let Some(d) = &want
            && *d != digest
        {
            return Err(refuse(format!(
                "the registry serves different content for the pinned digest {d} (its sha256 is {digest})"
            )));
        }
        let manifest = self.check_manifest(r, &raw)?;
        let layer = manifest.layers[0].clone();
        let bytes = match self.read_blob(&layer.digest, self.max_layer_bytes) {
            Some(b) => b,
            None => {
                if layer.size < 0 || layer.size as u64 > self.max_layer_bytes as u64 {
                    return Err(refuse(format!(
                        "the layer is over the plugin size limit of {} bytes",
                        self.max_layer_bytes
                    )));
                }
                // Read no further than the manifest declares (itself within
                // the plugin size limit): a registry sending more is
                // refused at the first byte past it.
                let declared = usize::try_from(layer.size).unwrap_or(usize::MAX).min(self.max_layer_bytes);
                self.get_bounded(&target, "blobs", &layer.digest, "application/wasm", declared)
                    .map_err(|e| match e {
                        OciError::Refused { .. } => refuse(format!(
                            "the registry sent more than the {declared} bytes the manifest declares for the layer"
                        )),
                        e => e,
                    })?
                    .ok_or_else(|| refuse(format!("the registry does not serve the layer {}", layer.digest)))?
            }
        };
        let actual = sha256_digest(&bytes);
        if actual != layer.digest {
            return Err(refuse(format!("the layer's sha256 is {actual}, the manifest says {}", layer.digest)));
        }
        if bytes.len() as i64 != layer.size {
            return Err(refuse(format!("the layer is {} bytes, the manifest says {}", bytes.len(), layer.size)));
        }
        let path = self.write_blob(&layer.digest, &bytes)?;
        self.write_blob(&digest, &raw)?;
        if want.is_none() {
            self.write_tag(r, &digest)?;
        }
        Ok(Fetched {
            reference: r.to_string(),
            digest,
            layer_digest: layer.digest,
            bytes,
            annotations: manifest.annotations.unwrap_or_default(),
            path,
            from_cache: false,
        })
    }

    fn cached(&self, r: &OciRef, digest: &str) -> Result<Option<Fetched>, OciError> {
        let Some(raw) = self.read_blob(digest, MAX_MANIFEST_BYTES) else { return Ok(None) };
        let manifest = self.check_manifest(r, &raw)?;
        let layer = &manifest.layers[0];
        let Some(bytes) = self.read_blob(&layer.digest, self.max_layer_bytes) else { return Ok(None) };
        Ok(Some(Fetched {
            reference: r.to_string(),
            digest: digest.to_string(),
            layer_digest: layer.digest.clone(),
            path: self.blob_path(&layer.digest),
            bytes,
            annotations: manifest.annotations.clone().unwrap_or_default(),
            from_cache: true,
        }))
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:").filter(|_| is_sha256_digest(digest))?;
        Some(self.cache.as_ref()?.join("blobs/sha256").join(hex))
    }

    /// A cached blob, re-hashed: one whose bytes no longer match its name
    /// is removed and reported missing.
    fn read_blob(&self, digest: &str, limit: usize) -> Option<Vec<u8>> {
        let path = self.blob_path(digest)?;
        let bytes = crate::runtime::private::read_state(&path, limit).ok()??;
        if sha256_digest(&bytes) != digest {
            tracing::warn!(path = %path.display(), "cached registry blob does not match its digest; removing it");
            let _ = std::fs::remove_file(&path);
            return None;
        }
        Some(bytes)
    }

    fn write_blob(&self, digest: &str, bytes: &[u8]) -> Result<Option<PathBuf>, OciError> {
        let Some(path) = self.blob_path(digest) else { return Ok(None) };
        let err = |path: &Path, message: String| OciError::Cache { path: path.to_path_buf(), message };
        if let Some(root) = &self.cache {
            crate::runtime::private::ensure_private_dir(root).map_err(|e| err(root, e.to_string()))?;
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        crate::runtime::private::ensure_private_dir(dir).map_err(|e| err(dir, e.to_string()))?;
        crate::runtime::private::write_private(&path, bytes).map_err(|e| err(&path, e.to_string()))?;
        Ok(Some(path))
    }

    fn tag_path(&self, r: &OciRef) -> Option<PathBuf> {
        let key = format!("{}/{}:{}", r.registry(), r.repository(), r.tag().unwrap_or("latest"));
        Some(self.cache.as_ref()?.join("tags").join(hex::encode(Sha256::digest(key.as_bytes()))))
    }

    fn read_tag(&self, r: &OciRef) -> Option<String> {
        let text = crate::runtime::private::read_state(&self.tag_path(r)?, 128).ok()??;
        let d = String::from_utf8(text).ok()?.trim().to_string();
        is_sha256_digest(&d).then_some(d)
    }

    fn write_tag(&self, r: &OciRef, digest: &str) -> Result<(), OciError> {
        let Some(path) = self.tag_path(r) else { return Ok(()) };
        let dir = path.parent().unwrap_or(Path::new("."));
        let err = |path: &Path, message: String| OciError::Cache { path: path.to_path_buf(), message };
        crate::runtime::private::ensure_private_dir(dir).map_err(|e| err(dir, e.to_string()))?;
        crate::runtime::private::write_private(&path, digest.as_bytes()).map_err(|e| err(&path, e.to_string()))
    }
}

pub(crate) mod bounded;
mod credentials;
pub(crate) mod reference;
mod referrers;

/// A bounded reader's error as an [`OciError`]: the registry out of reach,
/// an answer over its limit (refused), or the registry's own error.
pub(crate) fn classify(registry: &str, r: &OciRef, message: String) -> OciError {
    if message.starts_with("unreachable") {
        OciError::Unreachable { registry: registry.to_string(), message }
    } else if message.contains("limit") {
        OciError::Refused { reference: r.to_string(), reason: message }
    } else {
        OciError::Registry { registry: registry.to_string(), message }
    }
}
#[cfg(test)]
mod tests;

/// A registry's failure, as the core reports a plugin that could not be
/// fetched.
impl From<OciError> for toolhost_admission::AddPluginError {
    fn from(e: OciError) -> toolhost_admission::AddPluginError {
        toolhost_admission::AddPluginError::Fetch(Box::new(e))
    }
}
