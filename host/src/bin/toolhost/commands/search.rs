use crate::args::ConfigArgs;
use crate::output::{print_json, print_table};
use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::market::{Market, tiers};

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

impl MarketArgs {
    pub fn open(&self) -> Result<Market> {
        let mut builder = toolhost::HostBuilder::new(self.config.load()?);
        if let Some(d) = &self.cache_dir {
            builder = builder.cache(toolhost::CacheChoice::Dir(d.clone()));
        }
        Ok(Market::open(builder)?)
    }
}

impl Search {
    pub fn run(self) -> Result<ExitCode> {
        let market = self.market.open()?;
        let query = self.query.join(" ");
        let (hits, warnings) = market.search(&query, self.refresh, self.limit);
        for w in warnings {
            eprintln!("warning: {w}");
        }
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
