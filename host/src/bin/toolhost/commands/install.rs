use super::search::MarketArgs;
use anyhow::{Result, bail};
use std::process::ExitCode;
use toolhost::market::tiers;

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
    pub fn run(self) -> Result<ExitCode> {
        let market = self.market.open()?;
        let state = crate::args::StateArgs {
            config: self.market.config.clone(),
            state_dir: self.state_dir.clone(),
            pid: self.pid,
        };
        // The host it goes into, found first: nothing is fetched for nothing.
        let admin = state.admin()?;
        let (entries, warnings) = market.entries(self.refresh);
        for w in warnings {
            eprintln!("warning: {w}");
        }
        let candidates = market.choose(entries, &self.plugin, self.publisher.as_deref())?;
        // Each entry is a claim: held to what the registry serves and the
        // signature inside, before the host is asked to load anything.
        let chosen = market.check(candidates, &self.plugin);
        let chosen = match chosen {
            Ok(c) => c,
            Err(e) => bail!("{e}"),
        };
        for why in &chosen.skipped {
            eprintln!("warning: {why}: skipped");
        }
        let (listed, pinned) = (&chosen.listed, &chosen.pinned);
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
            tiers(listed)
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
