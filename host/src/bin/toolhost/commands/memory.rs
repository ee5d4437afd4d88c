use crate::args::StateArgs;
use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::memory::{Campaign, MemoryStore};

/// The campaign memory store (session transcripts, facts, knowledge graph).
#[derive(Debug, clap::Args)]
pub struct Memory {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Load a campaign from a JSON file (sessions with transcripts,
    /// entities, relationships, facts; the shape of crates/memory/data/demo-campaign.json).
    /// Records with the same ids are replaced.
    Import {
        /// The campaign file.
        file: PathBuf,
    },
}

impl Memory {
    pub fn run(self) -> Result<ExitCode> {
        let (Action::Import { file }, state) = (self.action, self.state);
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let campaign: Campaign =
            serde_json::from_str(&text).with_context(|| format!("{} is not a valid campaign file", file.display()))?;
        let cfg = state.config.load()?;
        let path = cfg
            .memory
            .path
            .as_ref()
            .map(|p| cfg.resolve(p))
            .map_or_else(|| state.state_dir().map(|d| d.join("memory.sqlite3")), Ok)?;
        let store = MemoryStore::open(&path).with_context(|| format!("opening the memory store {}", path.display()))?;
        store.import(&campaign)?;
        println!(
            "imported {} sessions, {} entities, {} relationships, {} facts",
            campaign.sessions.len(),
            campaign.entities.len(),
            campaign.relationships.len(),
            campaign.facts.len()
        );
        Ok(ExitCode::SUCCESS)
    }
}
