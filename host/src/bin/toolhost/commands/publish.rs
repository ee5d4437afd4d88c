use super::push::push_plugin;
use crate::args::RuntimeArgs;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::catalogue::{Catalogues, Entry, EntryAsks, EntryTool, Publisher};
use toolhost::oci::OciRef;

/// Publish a signed plugin to the marketplace: push it to an OCI registry
/// as `toolhost push` does, then add its entry to a catalogue (a
/// repository in any OCI registry) for `toolhost search` and `toolhost
/// install` to find. The entry says what a DM and a reviewer decide by:
/// name, version, description, publisher (the signing key), tools with
/// their declared tiers, what it asks for, the badge, the digest. Each
/// entry is a tag of its own in the catalogue: authors publishing at once
/// never overwrite each other, and a republished version is the newer
/// entry. Only a signed plugin is published.
#[derive(Debug, clap::Args)]
pub struct Publish {
    /// The signed component file.
    file: PathBuf,
    /// Where the component goes: oci://HOST[:PORT]/REPO:TAG.
    reference: String,
    /// The catalogue to list it in: oci://HOST[:PORT]/REPOSITORY
    /// [default: the one marketplace.catalogues names, when it names one].
    #[arg(long, value_name = "OCI")]
    catalogue: Option<String>,
    /// Speak plain HTTP to these registries (loopback registries always are).
    #[arg(long)]
    insecure: bool,
    /// Where calibration results are kept, for the badge [default: as `serve`].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

/// The catalogue a command writes to: `--catalogue`, else the only one
/// `marketplace.catalogues` names.
pub(crate) fn which_catalogue(flag: Option<&String>, configured: &[String]) -> Result<String> {
    match (flag, configured) {
        (Some(c), _) => Ok(c.clone()),
        (None, [one]) => Ok(one.clone()),
        (None, []) => {
            bail!("which catalogue? pass --catalogue oci://HOST/NS/catalogue (or name it in marketplace.catalogues)")
        }
        (None, many) => bail!("which catalogue? marketplace.catalogues names {}: pass --catalogue", many.join(", ")),
    }
}

impl Publish {
    pub fn run(self) -> Result<ExitCode> {
        let r = OciRef::parse(&self.reference)?;
        let builder = self.runtime.builder()?.state_dir(self.state_dir.clone());
        let config = builder.config().clone();
        let catalogue = which_catalogue(self.catalogue.as_ref(), &config.marketplace.catalogues)?;
        // A catalogue refused before anything is pushed.
        if !catalogue.starts_with("oci://") || OciRef::parse(&catalogue).is_err() {
            bail!("--catalogue {catalogue:?}: write oci://HOST[:PORT]/REPOSITORY");
        }
        let p = push_plugin(&builder, &self.file, &r, false, self.insecure)?;
        let Some(v) = &p.verified else { bail!("{} is not signed", self.file.display()) };
        let m = &v.manifest;
        let ceilings = toolhost::budget::Ceilings::default();
        let tools = p
            .defs
            .iter()
            .map(|d| EntryTool {
                name: d.name.clone(),
                description: d.description.clone(),
                tier: match d.meta.estimated_duration_ms {
                    Some(ms) => ceilings
                        .tier_for(std::time::Duration::from_millis(ms.into()))
                        .map_or_else(|| "OVER".to_string(), |t| t.to_string().to_uppercase()),
                    None => String::new(),
                },
                estimated_ms: d.meta.estimated_duration_ms.map_or(0, u64::from),
                max_ms: d.meta.max_duration_ms.map_or(0, u64::from),
            })
            .collect();
        let entry = Entry {
            name: p.name.clone(),
            version: m.version.clone(),
            description: m.description.clone(),
            publisher: Publisher { key_id: v.fingerprint(), author: m.author.clone() },
            tools,
            asks: EntryAsks {
                capabilities: m.capabilities.clone(),
                http_hosts: m.http_hosts.clone(),
                secrets: m.secrets.clone(),
                memory_mib: m.memory_mib,
            },
            badge: p.badges.clone(),
            reference: r.to_string(),
            digest: p.pushed.digest.clone(),
            published: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        };
        let mut store = builder.oci_store()?;
        if self.insecure {
            store.allow_insecure(r.registry());
            if let Ok(c) = OciRef::parse(&catalogue) {
                store.allow_insecure(c.registry());
            }
        }
        let catalogues = Catalogues::new(
            &store,
            builder.resolved_cache_dir().as_deref(),
            config.marketplace.refresh_secs,
            config.marketplace.max_entries,
        );
        let tag = catalogues
            .publish(&catalogue, &entry)
            .with_context(|| format!("{} {} was pushed to {r}, but not listed", entry.name, entry.version))?;
        println!("published {} {} by {} ({})", entry.name, entry.version, m.author, entry.publisher.key_id);
        println!("  component {r}");
        println!("  digest    {}", entry.digest);
        println!("  listed in {catalogue} (entry {tag})");
        println!("  asks for  {}", entry.asks.in_words());
        Ok(ExitCode::SUCCESS)
    }
}
