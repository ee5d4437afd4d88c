use crate::args::{ConfigArgs, TrustArgs};
use crate::output::print_json;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::HostBuilder;

/// Check a package's signature and say whether this host would load it
/// (trust.keys, trust.allow_unsigned, the lock file). Exit 1 if not.
#[derive(Debug, clap::Args)]
pub struct Verify {
    /// The component file.
    file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    trust: TrustArgs,
}

impl Verify {
    pub fn run(self) -> Result<ExitCode> {
        let policy = HostBuilder::new(self.config.load()?).allow_unsigned(self.trust.allow_unsigned).trust()?;
        let file = &self.file;
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let name = toolhost::runtime::plugin_name_from_path(file);
        let package = toolhost::package::parse(&bytes)?;
        let signature = package.verify(&name);
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
                    println!(
                        "{}: signature valid: {} {} by {} (key {})",
                        file.display(),
                        m.name,
                        m.version,
                        m.author,
                        toolhost::package::named_fingerprint(&v.public_key, policy.key_name(&v.public_key))
                    );
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
