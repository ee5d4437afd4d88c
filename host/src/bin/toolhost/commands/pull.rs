use crate::args::RegistryArgs;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use toolhost::oci::OciRef;

/// Pull a plugin from an OCI registry into a file (through the digest
/// cache), check its signature, and say whether this host would load it.
/// A package whose signature is broken is not written; one this host
/// would refuse (untrusted, unsigned) is written for review, and the exit
/// status is 1.
#[derive(Debug, clap::Args)]
pub struct Pull {
    /// oci://HOST[:PORT]/REPO:TAG or oci://HOST[:PORT]/REPO@sha256:DIGEST.
    reference: String,
    /// Write it here [default: NAME.wasm, NAME being the signed plugin name].
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

impl Pull {
    pub fn run(self) -> Result<ExitCode> {
        let r = OciRef::parse(&self.reference)?;
        let (policy, store) = self.registry.open(&r)?;
        let started = Instant::now();
        let fetched = store.fetch(&r, None)?;
        let took = started.elapsed();
        let package = toolhost::package::parse(&fetched.bytes)?;
        let verified = package.verify(r.short_name())?;
        let name = verified.as_ref().map_or_else(|| r.short_name().to_string(), |v| v.manifest.name.clone());
        let out = self.output.unwrap_or_else(|| PathBuf::from(format!("{name}.wasm")));
        let tmp = out.with_extension("wasm.pulling");
        std::fs::write(&tmp, &fetched.bytes)
            .and_then(|()| std::fs::rename(&tmp, &out))
            .with_context(|| format!("writing {}", out.display()))?;
        println!(
            "pulled {} to {} ({} bytes, {}, {} ms)",
            fetched.pinned(),
            out.display(),
            fetched.bytes.len(),
            if fetched.from_cache { "from the cache" } else { "from the registry" },
            took.as_millis()
        );
        match &verified {
            Some(v) => println!(
                "  signed as {} {} by {} (key {})",
                v.manifest.name,
                v.manifest.version,
                toolhost::tool::log_safe(&v.manifest.author),
                v.fingerprint()
            ),
            None => println!("  not signed"),
        }
        match policy.admit(&name, &fetched.bytes) {
            Ok((_, p)) => {
                println!("this host would load it: {}", p.describe());
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                println!("this host would refuse it: {e}");
                Ok(ExitCode::from(1))
            }
        }
    }
}
