use crate::args::ConfigArgs;
use crate::output::{print_json, print_table};
use anyhow::{Result, bail};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::catalogue::{Catalogues, Hit, Listed, search, version_order};

/// Search the marketplace: every catalogue in marketplace.catalogues,
/// ranked by relevance over plugin names, descriptions, tool names and
/// tool descriptions. Shows each plugin's newest version, its publisher
/// and whether this host trusts that publisher's key, its tools' declared
/// tiers and what it asks for. Catalogues are read from the registry when
/// their local copy is older than marketplace.refresh_secs.
#[derive(Debug, clap::Args)]
pub struct Search {
    /// Words to look for.
    #[arg(required = true, num_args = 1..)]
    query: Vec<String>,
    /// Read every catalogue from its registry now.
    #[arg(long)]
    refresh: bool,
    /// How many results to show.
    #[arg(long, default_value_t = 20, value_name = "N")]
    limit: usize,
    /// Print JSON: the results, each with its score and whether its publisher is trusted here
    /// (exit 1 when there is none, as without it).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    market: MarketArgs,
}

/// How the marketplace commands reach the catalogues.
#[derive(Debug, clap::Args)]
pub struct MarketArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Where catalogues' local copies are kept [default: the cache directory, as `serve`].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// The marketplace as this config sees it.
pub struct Market {
    pub builder: toolhost::HostBuilder,
    pub store: toolhost::oci::OciStore,
    /// The key ids this host trusts.
    pub trusted: BTreeSet<String>,
}

impl MarketArgs {
    pub fn open(&self) -> Result<Market> {
        let mut builder = toolhost::HostBuilder::new(self.config.load()?);
        if let Some(d) = &self.cache_dir {
            builder = builder.cache(toolhost::CacheChoice::Dir(d.clone()));
        }
        if builder.config().marketplace.catalogues.is_empty() {
            bail!(
                "no catalogues to read: name them in the config, e.g.\n  marketplace:\n    catalogues: [\"oci://registry.example.org/toolhost/catalogue\"]"
            );
        }
        let store = builder.oci_store()?;
        // A revoked key is not trusted here, whatever trust.keys says.
        let policy = builder.trust()?;
        let trusted = policy
            .keys
            .iter()
            .map(|k| toolhost::package::fingerprint(&k.public_key))
            .filter(|id| !policy.revoked.contains(id))
            .collect();
        Ok(Market { builder, store, trusted })
    }
}

impl Market {
    /// Every entry of every catalogue, with the warnings of reading them
    /// printed to standard error.
    pub fn entries(&self, refresh: bool) -> Vec<Listed> {
        let m = &self.builder.config().marketplace;
        let catalogues =
            Catalogues::new(&self.store, self.builder.resolved_cache_dir().as_deref(), m.refresh_secs, m.max_entries);
        let (entries, warnings) = catalogues.read_all(&m.catalogues, refresh);
        for w in warnings {
            eprintln!("warning: {w}");
        }
        entries
    }

    /// Whether this host trusts the key `key_id`.
    pub fn trusts(&self, key_id: &str) -> bool {
        self.trusted.contains(key_id)
    }
}

/// The tiers of an entry's tools, in words (`FAST`, `FAST/DEEP`).
pub fn tiers(l: &Listed) -> String {
    let t: BTreeSet<&str> = l
        .entry
        .tools
        .iter()
        .map(|t| match t.tier.as_str() {
            "" => "undeclared",
            "OVER" => "over budget",
            tier => tier,
        })
        .collect();
    t.into_iter().collect::<Vec<_>>().join("/")
}

/// Of `hits`, the newest version of each name and publisher.
fn newest(hits: Vec<Hit>) -> Vec<Hit> {
    let mut best: std::collections::HashMap<(String, String), Hit> = std::collections::HashMap::new();
    for h in hits {
        let e = &h.listed.entry;
        match best.entry((e.name.clone(), e.publisher.key_id.clone())) {
            std::collections::hash_map::Entry::Occupied(mut b) => {
                let b = b.get_mut();
                let order = version_order(&e.version, &b.listed.entry.version);
                if order.is_gt() || (order.is_eq() && e.published > b.listed.entry.published) {
                    let score = b.score.max(h.score);
                    *b = Hit { score, ..h };
                }
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(h);
            }
        }
    }
    let mut best: Vec<Hit> = best.into_values().collect();
    best.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.listed.entry.name.cmp(&b.listed.entry.name)));
    best
}

impl Search {
    pub fn run(self) -> Result<ExitCode> {
        let market = self.market.open()?;
        let query = self.query.join(" ");
        let hits: Vec<Hit> =
            newest(search(market.entries(self.refresh), &query)).into_iter().take(self.limit).collect();
        if self.json {
            let out: Vec<serde_json::Value> = hits
                .iter()
                .map(|h| {
                    let mut v = serde_json::to_value(h).unwrap_or_default();
                    v["trusted"] = market.trusts(&h.listed.entry.publisher.key_id).into();
                    v
                })
                .collect();
            print_json(&out)?;
            return Ok(ExitCode::from(u8::from(hits.is_empty())));
        }
        if hits.is_empty() {
            println!("nothing in the marketplace matches {query:?}");
            return Ok(ExitCode::from(1));
        }
        let rows: Vec<[String; 6]> = hits
            .iter()
            .map(|h| {
                let e = &h.listed.entry;
                let trusted = if market.trusts(&e.publisher.key_id) { "trusted here" } else { "NOT trusted here" };
                [
                    format!("{} {}", e.name, e.version),
                    format!("{} ({}, {trusted})", e.publisher.author, e.publisher.key_id),
                    tiers(&h.listed),
                    e.asks.in_words(),
                    e.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
                    e.description.chars().take(60).collect(),
                ]
            })
            .collect();
        print_table(&["PLUGIN", "PUBLISHER", "TIER", "ASKS FOR", "TOOLS", "DESCRIPTION"], &rows);
        println!("install one with: toolhost install NAME[@VERSION]");
        Ok(ExitCode::SUCCESS)
    }
}
