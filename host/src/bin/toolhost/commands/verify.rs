use crate::args::{ConfigArgs, TrustArgs};
use crate::output::print_json;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::HostBuilder;

/// Check a package's signature and say whether this host would load it
/// (trust.keys, trust.publishers, trust.allow_unsigned, the lock file).
/// Exit 1 if not.
///
/// A Sigstore bundle is verified offline, under trust.sigstore.trusted_root
/// (default: the public-good instance's root): its log entry, certificate
/// chain at the log's time, SCT and signature. --bundle-out writes the
/// bundle, and the manifest it signs, for other Sigstore tools.
#[derive(Debug, clap::Args)]
pub struct Verify {
    /// The component file.
    file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Write the package's Sigstore bundle to FILE, and the signed manifest
    /// (the artifact it signs) beside it as FILE's stem + `.manifest.json`,
    /// for `sigstore verify identity --bundle FILE MANIFEST` or cosign.
    #[arg(long, value_name = "FILE")]
    bundle_out: Option<PathBuf>,
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    trust: TrustArgs,
}

impl Verify {
    pub fn run(self) -> Result<ExitCode> {
        let cfg = self.config.load()?;
        let limit = cfg.limits().max_component_bytes + (1 << 16);
        let policy = HostBuilder::new(cfg).allow_unsigned(self.trust.allow_unsigned).trust()?;
        let file = &self.file;
        let name = toolhost::runtime::plugin_name_from_path(file);
        // As a host reads plugins: bounded by the plugin size limit.
        let bytes = toolhost::runtime::read_bounded(file, limit)
            .map_err(|kind| toolhost::runtime::LoadError { plugin: name.clone(), kind })
            .with_context(|| format!("reading {}", file.display()))?;
        let package = toolhost::package::parse(&bytes)?;
        let verified = package.verify(&name);
        let mut signature = verified.clone();
        // The Sigstore bundle, verified under this host's trusted root.
        let mut sigstore = None;
        if let Ok(Some(v)) = &signature {
            match policy.verify_bundle(&name, v) {
                Ok(s) => sigstore = s,
                Err(e) => signature = Err(e),
            }
        }
        if self.bundle_out.is_some() && !matches!(verified, Ok(Some(_))) {
            anyhow::bail!("--bundle-out: {} is not signed, so it has no Sigstore bundle", file.display());
        }
        if let (Some(out), Ok(Some(v))) = (&self.bundle_out, &verified) {
            let (Some(bundle), Some(text)) = (&v.bundle, v.manifest_text()) else {
                anyhow::bail!("--bundle-out: {} has no Sigstore bundle", file.display());
            };
            std::fs::write(out, bundle.to_json()).with_context(|| format!("writing {}", out.display()))?;
            let manifest = out.with_file_name(format!(
                "{}.manifest.json",
                out.file_stem().unwrap_or_default().to_string_lossy().trim_end_matches(".sigstore")
            ));
            std::fs::write(&manifest, text).with_context(|| format!("writing {}", manifest.display()))?;
            eprintln!("wrote {} and the manifest it signs, {}", out.display(), manifest.display());
        }
        let decision = policy.admit(&name, &bytes);
        if self.json {
            print_json(&json!({
                "file": file.display().to_string(),
                "sha256": toolhost::package::component_digest(&bytes)?,
                "signature": match &signature {
                    Ok(Some(v)) => json!({
                        "valid": true,
                        "public_key": v.public_key,
                        "key_id": v.fingerprint(),
                        "key_name": policy.key_name(&v.public_key),
                        "sigstore": sigstore,
                        "manifest": v.manifest,
                    }),
                    Ok(None) => json!({"valid": false, "reason": "not signed"}),
                    Err(e) => json!({"valid": false, "reason": e.to_string()}),
                },
                "admitted": decision.is_ok(),
                "decision": match &decision {
                    Ok((_, p)) => p.describe(),
                    Err(e) => e.to_string(),
                },
            }))?;
        } else {
            match &signature {
                Ok(Some(v)) => {
                    let m = &v.manifest;
                    let by = match &sigstore {
                        Some(s) => format!(", signed by {}", s.describe()),
                        None => format!(
                            " (key {})",
                            toolhost::package::named_fingerprint(&v.public_key, policy.key_name(&v.public_key))
                        ),
                    };
                    println!("{}: signature valid: {} {} by {}{by}", file.display(), m.name, m.version, m.author);
                    println!("  component sha256 {}", m.sha256);
                    println!(
                        "  asks for: {}",
                        if m.capabilities.is_empty() { "nothing".into() } else { m.capabilities.join(", ") }
                    );
                    for ask in m.asks_in_words() {
                        println!("  asks {ask}");
                    }
                }
                Ok(None) => println!("{}: not signed", file.display()),
                Err(e) => println!("{}: INVALID: {e}", file.display()),
            }
            match &decision {
                Ok((_, p)) => println!("this host would load it: {}", p.describe()),
                Err(e) => println!("this host would refuse it: {e}"),
            }
        }
        Ok(if decision.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }
}
