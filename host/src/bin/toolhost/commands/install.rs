use super::search::{MarketArgs, tiers};
use anyhow::{Context, Result, bail};
use std::process::ExitCode;
use toolhost::catalogue::{Listed, version_order};
use toolhost::oci::OciRef;

/// The most entries of one version and publisher tried before giving up.
const MAX_CANDIDATES: usize = 8;

fn safe(s: &str) -> std::borrow::Cow<'_, str> {
    toolhost::tool::log_safe(s)
}

/// Install a plugin from the marketplace into the running host: the
/// newest version of NAME (or NAME@VERSION) in marketplace.catalogues.
/// Holds the entry to the signed component (its digest, its publisher's
/// key and author, its name and version, every ask: an entry that lies is
/// skipped, naming the lie, for the next entry of that version), shows what
/// it asks for, then adds it as `toolhost plugin add oci://...@sha256:...`
/// does: through this host's trust policy, held until what it asks for is
/// granted.
#[derive(Debug, clap::Args)]
pub struct Install {
    /// NAME or NAME@VERSION, as `toolhost search` shows them.
    plugin: String,
    /// When several publishers offer NAME: the one whose key id this is
    /// (`ed25519:...`) [default: the only one this host trusts].
    #[arg(long, value_name = "KEY_ID")]
    publisher: Option<String>,
    /// Read every catalogue from its registry now.
    #[arg(long)]
    refresh: bool,
    /// The running host's state directory, where its admin endpoint record is
    /// [default: $TOOLHOST_STATE_DIR, $XDG_STATE_HOME/toolhost or ~/.local/state/toolhost].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// The running host's process id, when several serve with this state directory.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    #[command(flatten)]
    market: MarketArgs,
}

impl Install {
    /// The entries `self.plugin` names, among `entries`: of its newest
    /// version (and the one publisher), newest entry first.
    fn choose(&self, entries: Vec<Listed>, trusts: impl Fn(&str) -> bool) -> Result<Vec<Listed>> {
        let (name, version) = match self.plugin.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (self.plugin.as_str(), None),
        };
        let mut found: Vec<Listed> = entries
            .into_iter()
            .filter(|l| l.entry.name == name && version.is_none_or(|v| l.entry.version == v))
            .filter(|l| self.publisher.as_ref().is_none_or(|p| l.entry.publisher.key_id == *p))
            .collect();
        if found.is_empty() {
            bail!(
                "no {} in the marketplace{}: `toolhost search {name}` shows what there is",
                self.plugin,
                self.publisher.as_ref().map(|p| format!(" published by {p}")).unwrap_or_default()
            );
        }
        let publishers: std::collections::BTreeSet<String> =
            found.iter().map(|l| l.entry.publisher.key_id.clone()).collect();
        if publishers.len() > 1 {
            let trusted: Vec<&String> = publishers.iter().filter(|p| trusts(p)).collect();
            match trusted.as_slice() {
                [one] => {
                    let one = (*one).clone();
                    found.retain(|l| l.entry.publisher.key_id == one);
                }
                _ => {
                    let list: Vec<String> = publishers
                        .iter()
                        .map(|p| format!("{p}{}", if trusts(p) { " (trusted here)" } else { "" }))
                        .collect();
                    bail!(
                        "{} is published by {} publishers: {}; choose one with --publisher KEY_ID",
                        name,
                        publishers.len(),
                        list.join(", ")
                    );
                }
            }
        }
        // The newest version first; of one version, the newest entry first.
        // Only that version is tried: an older one is never installed in
        // its place.
        found.sort_by(|a, b| {
            version_order(&b.entry.version, &a.entry.version).then_with(|| b.entry.published.cmp(&a.entry.published))
        });
        let newest = found[0].entry.version.clone();
        found.retain(|l| l.entry.version == newest);
        found.truncate(MAX_CANDIDATES);
        Ok(found)
    }

    pub fn run(self) -> Result<ExitCode> {
        let market = self.market.open()?;
        let state = crate::args::StateArgs {
            config: self.market.config.clone(),
            state_dir: self.state_dir.clone(),
            pid: self.pid,
        };
        // The host it goes into, found first: nothing is fetched for nothing.
        let admin = state.admin()?;
        let candidates = self.choose(market.entries(self.refresh), |k| market.trusts(k))?;
        // Each entry is a claim: held to what the registry serves and the
        // signature inside, before the host is asked to load anything. One
        // that lies is skipped, named, for the next entry of the same
        // version and publisher (anyone who can push to a catalogue can add
        // entries; none can hide an honest one this way).
        let mut refused = Vec::new();
        let mut chosen = None;
        for listed in candidates {
            let e = &listed.entry;
            let r = OciRef::parse(&e.reference)?;
            let (digest, _) = market.store.manifest(&r).with_context(|| format!("resolving {}", e.reference))?;
            let pinned = r.at_digest(&digest);
            let fetched = market.store.fetch(&pinned, None)?;
            let package = toolhost::package::parse(&fetched.bytes)?;
            let verified = package.verify(&e.name)?;
            match e.check_against(
                &digest,
                verified.as_ref().map(|v| v.fingerprint()).as_deref(),
                verified.as_ref().map(|v| &v.manifest),
            ) {
                Ok(()) => {
                    chosen = Some((listed, pinned));
                    break;
                }
                Err(lies) => {
                    let why = format!(
                        "an entry of {} {} in {} lies about {}",
                        e.name,
                        e.version,
                        listed.catalogue,
                        safe(&lies.join("; and about "))
                    );
                    eprintln!("warning: {why}: skipped");
                    refused.push(why);
                }
            }
        }
        let Some((listed, pinned)) = chosen else {
            bail!("refusing {}: {}", self.plugin, refused.join("; "));
        };
        let e = &listed.entry;
        let trusted = if market.trusts(&e.publisher.key_id) {
            "trusted here"
        } else {
            "NOT trusted here: no key in this config's trust.keys or trust.key_files"
        };
        // What a catalogue says is shown escaped, as `search` shows it.
        println!("{} {}: {}", e.name, safe(&e.version), safe(&e.description));
        println!("  publisher {} ({}, {trusted})", safe(&e.publisher.author), safe(&e.publisher.key_id));
        println!("  from      {} (listed in {})", e.reference, listed.catalogue);
        println!(
            "  tools     {} ({})",
            safe(&e.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")),
            tiers(&listed)
        );
        println!("  asks for  {}", safe(&e.asks.in_words()));
        let reply = admin.add_plugin(std::path::Path::new(&pinned.to_string()))?;
        let i = &reply.installed;
        let verb = if i.replaced.is_none() { "installed" } else { "upgraded" };
        println!("{verb} {} {} (sha256 {}): {}", i.name, e.version, i.digest, i.tools.join(", "));
        println!("  {}", reply.provenance_text);
        if let Some(source) = &i.source {
            println!("  from {source}");
        }
        Ok(ExitCode::SUCCESS)
    }
}
