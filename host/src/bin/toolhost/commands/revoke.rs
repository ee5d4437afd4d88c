use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::catalogue::Catalogues;
use toolhost::oci::OciRef;
use toolhost::package::KeyPair;

/// Publish a signed revocation list to a catalogue: every host serving
/// with that catalogue in marketplace.catalogues, and your key in
/// marketplace.revocations_signed_by, stops loading what it names within
/// marketplace.revocations_secs (or at its next reload), without a
/// restart: the plugins signed by a revoked key, or with a revoked
/// component, are unloaded, audited, and their tools leave every session
/// with `list_changed`. A list is never taken back: publish a new key and
/// sign again. Hosts that do not name your key ignore it (with a warning).
#[derive(Debug, clap::Args)]
pub struct Revoke {
    /// What to revoke: key ids (`ed25519:` and 16 hex digits, as `keygen`
    /// and `verify` print them) and components (sha256, as `inspect`
    /// prints `component sha256`).
    #[arg(required = true, value_name = "KEY_ID|SHA256")]
    entries: Vec<String>,
    /// The key that signs the list (a `.key` file written by `keygen`).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// Why, in words (shown by hosts beside what they unload).
    #[arg(long, value_name = "TEXT", default_value = "")]
    reason: String,
    /// The catalogue: oci://HOST[:PORT]/REPOSITORY [default: the one
    /// marketplace.catalogues names, when it names one].
    #[arg(long, value_name = "OCI")]
    catalogue: Option<String>,
    /// Speak plain HTTP to this registry (loopback registries always are).
    #[arg(long)]
    insecure: bool,
    #[command(flatten)]
    runtime: crate::args::RuntimeArgs,
}

impl Revoke {
    pub fn run(self) -> Result<ExitCode> {
        let builder = self.runtime.builder()?;
        let config = builder.config().clone();
        let catalogue = super::publish::which_catalogue(self.catalogue.as_ref(), &config.marketplace.catalogues)?;
        let key = KeyPair::load(&self.key)?;
        let list = key.sign_revocations(self.entries.clone(), &self.reason)?;
        let mut store = builder.oci_store()?;
        if self.insecure
            && let Ok(c) = OciRef::parse(&catalogue)
        {
            store.allow_insecure(c.registry());
        }
        let catalogues = Catalogues::new(&store, None, 0, config.marketplace.max_entries);
        let tag = catalogues
            .publish_revocations(&catalogue, &list)
            .with_context(|| format!("publishing the revocation list to {catalogue}"))?;
        let signer = key.public().fingerprint();
        println!("revoked {} (signed by {signer})", self.entries.join(", "));
        println!("  listed in {catalogue} (revocation list {tag})");
        println!(
            "  hosts whose marketplace.revocations_signed_by names {} act on it within marketplace.revocations_secs, or at their next reload",
            signer.split(' ').next().unwrap_or(&signer)
        );
        Ok(ExitCode::SUCCESS)
    }
}
