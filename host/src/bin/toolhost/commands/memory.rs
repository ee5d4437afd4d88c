use crate::args::StateArgs;
use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::MemoryLocation;
use toolhost::memory::Campaign;

/// The campaign memory store (session transcripts, facts, knowledge graph):
/// the SQLite file `memory.path` (default `<state dir>/memory.sqlite3`), or
/// the PostgreSQL database `memory.url`.
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
    /// Write the whole store as a campaign file, in the shape `import`
    /// reads: `toolhost memory export -o campaign.json` then `toolhost
    /// memory import campaign.json` against another store (say, with
    /// `memory.url` set) moves a campaign, SQLite to PostgreSQL or back.
    /// Safe while hosts serve from the store (one read transaction).
    Export {
        /// The file to write (replaced whole, atomically); without it, stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

impl Memory {
    pub fn run(self) -> Result<ExitCode> {
        let state = self.state;
        let cfg = state.config.load()?;
        let at = match cfg.memory.url {
            Some(_) => MemoryLocation::of(&cfg, std::path::Path::new("")),
            None => MemoryLocation::of(&cfg, &state.state_dir()?),
        };
        let file = match self.action {
            Action::Import { file } => file,
            Action::Export { output } => return export(&at, output),
        };
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let campaign: Campaign =
            serde_json::from_str(&text).with_context(|| format!("{} is not a valid campaign file", file.display()))?;
        let store = at.open().with_context(|| format!("opening the memory store {at}"))?;
        store.import(&campaign).with_context(|| format!("importing into the memory store {at}"))?;
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

/// `toolhost memory export`.
fn export(at: &MemoryLocation, output: Option<PathBuf>) -> Result<ExitCode> {
    if let MemoryLocation::File(path) = at
        && !path.exists()
    {
        anyhow::bail!("no memory store at {} (a host creates it on its first start)", path.display());
    }
    let store = at.open().with_context(|| format!("opening the memory store {at}"))?;
    let campaign = store.export().with_context(|| format!("reading the memory store {at}"))?;
    let mut text = serde_json::to_string_pretty(&campaign)?;
    text.push('\n');
    match output {
        None => {
            use std::io::Write as _;
            std::io::stdout().lock().write_all(text.as_bytes()).context("writing to stdout")?;
        }
        Some(out) => {
            let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            let mut tmp =
                tempfile::NamedTempFile::new_in(dir).with_context(|| format!("writing in {}", dir.display()))?;
            std::io::Write::write_all(&mut tmp, text.as_bytes())?;
            tmp.as_file().sync_all()?;
            tmp.persist(&out).with_context(|| format!("writing {}", out.display()))?;
            eprintln!(
                "exported {} sessions, {} entities, {} relationships, {} facts to {}",
                campaign.sessions.len(),
                campaign.entities.len(),
                campaign.relationships.len(),
                campaign.facts.len(),
                out.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
