use crate::args::RuntimeArgs;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;
use toolhost::Host;
use toolhost::budget::Budget;
use toolhost::oci::{ComponentInfo, OciRef, annotations as ann};

/// Push a signed plugin to an OCI registry as a Wasm OCI artifact (config
/// `application/vnd.wasm.config.v0+json`, one `application/wasm` layer: the
/// file as it is, signature included). A plugin signed through Sigstore
/// also gets its bundle beside it: an artifact of type
/// `application/vnd.dev.sigstore.bundle.v0.3+json` whose subject is the
/// plugin's manifest, listed at tag `sha256-<hex>` (the OCI referrers tag
/// schema). The signed manifest's fields (name,
/// version, author, description, capabilities, the tools' declared
/// latencies, the measured badge when this host has one, the signing key's
/// id) become the manifest's annotations. Refuses an unsigned file unless
/// --allow-unsigned.
#[derive(Debug, clap::Args)]
pub struct Push {
    /// The (signed) component file.
    file: PathBuf,
    /// Where to: oci://HOST[:PORT]/REPO:TAG.
    reference: String,
    /// Push a file that is not signed.
    #[arg(long)]
    allow_unsigned: bool,
    /// Speak plain HTTP to this registry (loopback registries always are).
    #[arg(long)]
    insecure: bool,
    /// Where calibration results are kept, for the badge [default: as `serve`].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

/// What [`push_plugin`] pushed, and what it read on the way.
pub(crate) struct PushedPlugin {
    /// The plugin's name (the signed one, else the file's).
    pub name: String,
    /// The signature, when signed.
    pub verified: Option<toolhost::package::Verified>,
    /// Its tools as the component declares them.
    pub defs: Vec<toolhost::tool::ToolDef>,
    /// Measured badges by tool, when this host measured them.
    pub badges: BTreeMap<String, String>,
    /// The push.
    pub pushed: toolhost::oci::Pushed,
    /// The referrers tag listing its Sigstore bundle, when it has one.
    pub bundle_tag: Option<String>,
}

impl Push {
    pub fn run(self) -> Result<ExitCode> {
        let r = OciRef::parse(&self.reference)?;
        let builder = self.runtime.builder()?.state_dir(self.state_dir.clone());
        let started = Instant::now();
        let p = push_plugin(&builder, &self.file, &r, self.allow_unsigned, self.insecure)?;
        let took = started.elapsed();
        match &p.verified {
            Some(v) => println!("pushed {} {} by {} to {r}", p.name, v.manifest.version, v.manifest.author),
            None => println!("pushed {} (UNSIGNED) to {r}", p.name),
        }
        println!("  digest {}", p.pushed.digest);
        println!("  pinned {}", r.at_digest(&p.pushed.digest));
        println!("  layer  {} ({} bytes) in {} ms", p.pushed.layer_digest, p.pushed.bytes, took.as_millis());
        if let Some(tag) = &p.bundle_tag {
            println!("  sigstore bundle beside it: a referrer of its manifest, listed at tag {tag}");
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Pushes `file` to `r` as `toolhost push` does: a signed file (unsigned
/// only with `allow_unsigned`; a broken signature never), its manifest's
/// fields, its tools' declared latencies and this host's badge as
/// annotations.
pub(crate) fn push_plugin(
    builder: &toolhost::HostBuilder,
    file: &std::path::Path,
    r: &OciRef,
    allow_unsigned: bool,
    insecure: bool,
) -> Result<PushedPlugin> {
    {
        let runtime = builder.runtime()?;
        let limit = runtime.limits().max_component_bytes + (1 << 16);
        let stem = toolhost::runtime::plugin_name_from_path(file);
        let bytes = toolhost::runtime::read_bounded(file, limit)
            .map_err(|kind| toolhost::runtime::LoadError { plugin: stem.clone(), kind })
            .with_context(|| format!("reading {}", file.display()))?;
        let package = toolhost::package::parse(&bytes)?;
        // A broken signature is never pushed, whatever the flags.
        let verified = package.verify(&stem)?;
        if verified.is_none() && !allow_unsigned {
            bail!(
                "{} is not signed: sign it first (`toolhost sign --key KEY.key`), or pass --allow-unsigned to push it anyway",
                file.display()
            );
        }
        let name = verified.as_ref().map_or(stem.clone(), |v| v.manifest.name.clone());
        let compiled = runtime.compile(&name, package.component)?;
        let info = ComponentInfo {
            imports: compiled.imports.clone(),
            exports: compiled.exports.clone(),
            author: verified.as_ref().map(|v| v.manifest.author.clone()),
        };
        let defs = runtime.describe_compiled(&compiled).unwrap_or_default();
        // The badge, when this host measured these tools (same build).
        let cfg = builder.config().clone();
        let host = Host::with_budget(runtime.clone(), Budget::new(cfg.budget.clone(), Vec::new()));
        let mut badges = BTreeMap::new();
        if let Ok(p) = runtime.instantiate_compiled(compiled, Default::default())
            && host.pipeline().registry().add(Arc::new(p)).is_ok()
        {
            let store =
                toolhost::calibrate::CalibrationStore::new(&builder.resolved_state_dir(), &cfg.budget.environment);
            if store.load_into(host.pipeline()) > 0 {
                for def in &defs {
                    if let Some(b) = host.pipeline().budget().status(def).badge {
                        badges.insert(def.name.clone(), b.as_str().to_string());
                    }
                }
            }
        }
        let mut a = BTreeMap::new();
        a.insert(ann::TITLE.to_string(), name.clone());
        a.insert(ann::CREATED.to_string(), chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        a.insert(ann::COMPONENT_SHA256.to_string(), toolhost::package::component_digest(&bytes)?);
        let latencies: Vec<serde_json::Value> = defs
            .iter()
            .map(|d| {
                serde_json::json!({
                    "name": d.name,
                    "estimated_ms": d.meta.estimated_duration_ms,
                    "max_ms": d.meta.max_duration_ms,
                    "idempotent": d.meta.idempotent,
                })
            })
            .collect();
        a.insert(ann::LATENCIES.to_string(), serde_json::to_string(&latencies)?);
        if !badges.is_empty() {
            a.insert(ann::BADGE.to_string(), serde_json::to_string(&badges)?);
        }
        match &verified {
            Some(v) => {
                let m = &v.manifest;
                a.insert(ann::VERSION.to_string(), m.version.clone());
                a.insert(ann::AUTHORS.to_string(), m.author.clone());
                a.insert(ann::DESCRIPTION.to_string(), m.description.clone());
                a.insert(ann::CAPABILITIES.to_string(), m.capabilities.join(","));
                a.insert(ann::KEY_ID.to_string(), v.fingerprint());
                if !v.public_key.is_empty() {
                    a.insert(ann::PUBLIC_KEY.to_string(), v.public_key.clone());
                }
            }
            None => {
                let caps = toolhost::capabilities::CAPABILITIES.imported(&info.imports);
                a.insert(ann::CAPABILITIES.to_string(), caps.names().join(","));
                a.insert(ann::DESCRIPTION.to_string(), "unsigned".to_string());
            }
        }
        let mut store = builder.oci_store()?;
        if insecure {
            store.allow_insecure(r.registry());
        }
        let pushed = store.push(r, &bytes, &info, a)?;
        // A Sigstore bundle also goes beside it, as a referrer of its
        // manifest, where Sigstore and OCI tools look for signatures.
        let mut bundle_tag = None;
        if let Some(bundle) = verified.as_ref().and_then(|v| v.bundle.as_ref()) {
            let annotations = serde_json::json!({
                ann::CREATED: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                "dev.sigstore.bundle.content": "message-signature",
                "dev.toolhost.sigstore.artifact": "the plugin's signed manifest: `toolhost verify FILE --bundle-out` writes it",
            });
            let body = bundle.to_json().into_bytes();
            store.push_referrer(
                r,
                (&pushed.digest, pushed.manifest_size),
                toolhost::sigstore::MEDIA_TYPE,
                body,
                annotations,
            )?;
            bundle_tag = Some(toolhost::oci::referrers_tag(&pushed.digest));
        }
        Ok(PushedPlugin { name, verified, defs, badges, pushed, bundle_tag })
    }
}
