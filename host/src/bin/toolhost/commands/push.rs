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
/// file as it is, signature included). The signed manifest's fields (name,
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

impl Push {
    pub fn run(self) -> Result<ExitCode> {
        let r = OciRef::parse(&self.reference)?;
        let builder = self.runtime.builder()?.state_dir(self.state_dir.clone());
        let runtime = builder.runtime()?;
        let limit = runtime.limits().max_component_bytes + (1 << 16);
        let stem = toolhost::runtime::plugin_name_from_path(&self.file);
        let bytes = toolhost::runtime::read_bounded(&self.file, limit)
            .map_err(|kind| toolhost::runtime::LoadError { plugin: stem.clone(), kind })
            .with_context(|| format!("reading {}", self.file.display()))?;
        let package = toolhost::package::parse(&bytes)?;
        // A broken signature is never pushed, whatever the flags.
        let verified = package.verify(&stem)?;
        if verified.is_none() && !self.allow_unsigned {
            bail!(
                "{} is not signed: sign it first (`toolhost sign --key KEY.key`), or pass --allow-unsigned to push it anyway",
                self.file.display()
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
                a.insert(ann::KEY_ID.to_string(), toolhost::package::fingerprint(&v.public_key));
                a.insert(ann::PUBLIC_KEY.to_string(), v.public_key.clone());
            }
            None => {
                let caps = toolhost::capabilities::CAPABILITIES.imported(&info.imports);
                a.insert(ann::CAPABILITIES.to_string(), caps.names().join(","));
                a.insert(ann::DESCRIPTION.to_string(), "unsigned".to_string());
            }
        }
        let mut store = builder.oci_store()?;
        if self.insecure {
            store.allow_insecure(r.registry());
        }
        let started = Instant::now();
        let pushed = store.push(&r, &bytes, &info, a)?;
        let took = started.elapsed();
        match &verified {
            Some(v) => println!("pushed {} {} by {} to {r}", name, v.manifest.version, v.manifest.author),
            None => println!("pushed {name} (UNSIGNED) to {r}"),
        }
        println!("  digest {}", pushed.digest);
        println!("  pinned {}", r.at_digest(&pushed.digest));
        println!("  layer  {} ({} bytes) in {} ms", pushed.layer_digest, bytes.len(), took.as_millis());
        Ok(ExitCode::SUCCESS)
    }
}
