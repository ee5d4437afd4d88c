//! The campaign memory store behind the `memory` and `memory_write`
//! capabilities: session transcripts and facts with full-text search, and
//! the knowledge graph's entities and relationships.
//!
//! Two stores answer the same operations with the same shapes:
//! - [`SqliteStore`] (the default, `memory.path`): one file in WAL mode,
//!   FTS5 indexes ranked by BM25, safe for concurrent calls and for a killed
//!   host;
//! - [`PgStore`] (`memory.url: postgres://...`): PostgreSQL, shared by the
//!   hosts of a fleet, `tsvector` columns under GIN indexes ranked by
//!   `ts_rank`.
//!
//! Both implement [`CampaignStore`]; [`MemoryStore`] is either, chosen by
//! the configuration.

#![deny(unsafe_code)]

mod pgconn;
mod postgres;
mod sqlite;

pub use pgconn::{PgConnection, PgTarget, PgUrlError, PgUrlProblem, explain};

/// What a plugin is told when the store cannot be reached (a database
/// outage): a stable code first, for agents and scripts to match on.
pub const UNAVAILABLE: &str = "memory_unavailable";

impl From<tokio_postgres::Error> for MemoryError {
    fn from(e: tokio_postgres::Error) -> MemoryError {
        // The connection is gone, or the server is not taking any
        // (SQLSTATE class 08, connection exceptions, and 57P, shutdowns).
        let lost = e.is_closed() || e.code().is_some_and(|c| c.code().starts_with("08") || c.code().starts_with("57P"));
        if lost { MemoryError::Unavailable(explain(&e)) } else { MemoryError::Postgres(explain(&e)) }
    }
}

impl From<deadpool_postgres::PoolError> for MemoryError {
    /// No connection could be had: the database is unreachable or refuses.
    fn from(e: deadpool_postgres::PoolError) -> MemoryError {
        MemoryError::Unavailable(explain(&e))
    }
}

impl MemoryError {
    /// What a plugin is told: for an unreachable store, [`UNAVAILABLE`]
    /// and no detail of the database (its name and address stay in the
    /// host's log); for another PostgreSQL failure, that it failed.
    pub fn for_plugin(self) -> String {
        match self {
            MemoryError::Unavailable(why) => {
                tracing::debug!("a memory call failed: the store is unavailable: {why}");
                format!("{UNAVAILABLE}: the campaign memory store cannot be reached now; try again shortly")
            }
            MemoryError::Postgres(why) => {
                tracing::warn!("a memory call failed: {why}");
                "memory_error: the campaign memory store failed this operation (the host's log says why)".into()
            }
            other => other.to_string(),
        }
    }
}
pub use postgres::{OPERATION_TIMEOUT, POOL_SIZE, PgStore, redact};
pub use sqlite::SqliteStore;

use serde::{Deserialize, Serialize};
use std::path::Path;
use toolhost_runtime::capabilities::memory as wit;

/// The demo campaign, loaded into an empty store.
pub const DEMO_CAMPAIGN: &str = include_str!("../data/demo-campaign.json");

/// A campaign: what `toolhost memory import FILE.json` reads and
/// `toolhost memory export` writes.
#[derive(Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Campaign {
    /// Sessions with their transcripts.
    #[serde(default)]
    pub sessions: Vec<Session>,
    /// Knowledge-graph entities.
    #[serde(default)]
    pub entities: Vec<Entity>,
    /// Edges between entities.
    #[serde(default)]
    pub relationships: Vec<Relationship>,
    /// Facts.
    #[serde(default)]
    pub facts: Vec<Fact>,
}

/// A session of play.
#[derive(Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// Id, e.g. `session-1`.
    pub id: String,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// Transcript lines: `[speaker, text]`.
    pub transcript: Vec<(String, String)>,
}

/// An entity.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Entity {
    /// Id, e.g. `npc-bartok`.
    pub id: String,
    /// Name.
    pub name: String,
    /// Kind: npc, location, faction, item, pc ...
    pub kind: String,
    /// Attributes (a JSON object).
    #[serde(default)]
    pub attributes: serde_json::Map<String, serde_json::Value>,
}

/// An edge.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Relationship {
    /// From entity id.
    pub source: String,
    /// To entity id.
    pub target: String,
    /// Kind, e.g. `owns`, `member_of`, `enemy_of`.
    pub kind: String,
}

/// A fact.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    /// Id.
    pub id: String,
    /// The fact.
    pub text: String,
    /// Session it came from.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// A transcript hit.
#[derive(Debug, Clone, PartialEq)]
pub struct LineHit {
    /// Session.
    pub session_id: String,
    /// Line number (1-based).
    pub line: u32,
    /// Who spoke.
    pub speaker: String,
    /// What was said.
    pub text: String,
    /// Relevance (higher is better).
    pub score: f64,
}

/// A fact hit.
#[derive(Debug, Clone, PartialEq)]
pub struct FactHit {
    /// Fact id.
    pub id: String,
    /// Text.
    pub text: String,
    /// Session.
    pub session_id: Option<String>,
    /// Relevance.
    pub score: f64,
}

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// SQLite failed.
    #[error("memory store: {0}")]
    Sql(#[from] rusqlite::Error),
    /// PostgreSQL failed, or no connection to it could be had in time:
    /// why, with the causes the driver keeps ([`explain`]).
    #[error("memory store (PostgreSQL): {0}")]
    Postgres(String),
    /// The store did not answer, or could not be started.
    #[error("memory store: {0}")]
    Unavailable(String),
    /// `memory.url` is not a PostgreSQL connection string.
    #[error("memory.url {url}: {reason}")]
    Url {
        /// The URL, without its password.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The campaign file is malformed.
    #[error("campaign file: {0}")]
    Campaign(#[from] serde_json::Error),
    /// What was given cannot be stored (a NUL character in PostgreSQL).
    #[error("{0}")]
    Invalid(String),
}

/// The words of a search, for either store's full-text query: runs of
/// letters, digits and apostrophes longer than one character. Nothing else
/// of the input reaches the query, so it cannot inject query syntax.
pub(crate) fn fts_words(q: &str) -> Vec<&str> {
    q.split(|c: char| !c.is_alphanumeric() && c != '\'').filter(|w| w.len() > 1).collect()
}

/// A name fragment as a `LIKE` pattern's literal middle: `\`, `%` and `_`
/// escaped (with `ESCAPE '\'`), so input never acts as a wildcard.
pub(crate) fn like_literal(name: &str) -> String {
    name.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}

/// What a campaign store answers, the same way whichever database holds
/// it: implemented by [`SqliteStore`] and [`PgStore`], and reached through
/// [`MemoryStore`].
pub trait CampaignStore: Send + Sync + std::fmt::Debug {
    /// Imports a campaign in one transaction (replacing records with the same ids).
    fn import(&self, c: &Campaign) -> Result<(), MemoryError>;

    /// The whole store as a campaign, in one read transaction: what
    /// [`CampaignStore::import`] takes back (sessions, entities and facts by
    /// id, relationships and transcript lines in order).
    fn export(&self) -> Result<Campaign, MemoryError>;

    /// Records a fact (in one transaction, durable once it returns) and
    /// returns its new id (`fact-` and 16 random hex digits). A
    /// `session_id` ties it to a session of play.
    fn remember(&self, text: &str, session_id: Option<&str>) -> Result<String, MemoryError>;

    /// Full-text search over transcripts (within `session`, when given),
    /// best first, at most `limit` lines.
    fn search_sessions(&self, q: &str, session: Option<&str>, limit: u32) -> Result<Vec<LineHit>, MemoryError>;

    /// Entities by name substring (case-insensitive, wildcards literal)
    /// and/or kind, by name, at most `limit`.
    fn query_entities(&self, name: Option<&str>, kind: Option<&str>, limit: u32) -> Result<Vec<Entity>, MemoryError>;

    /// One entity.
    fn get_entity(&self, id: &str) -> Result<Option<Entity>, MemoryError>;

    /// Relationships touching an entity, either direction.
    fn relationships(&self, id: &str) -> Result<Vec<Relationship>, MemoryError>;

    /// Full-text search over facts, best first, at most `limit`.
    fn search_facts(&self, q: &str, limit: u32) -> Result<Vec<FactHit>, MemoryError>;

    /// Where the store is: the SQLite file, or the PostgreSQL URL without
    /// its password.
    fn describe(&self) -> String;

    /// Whether the store answered its last health check (for `/readyz`).
    /// Never blocks: a store over the network checks in the background.
    fn reachable(&self) -> bool {
        true
    }
}

/// The campaign memory: SQLite or PostgreSQL, chosen by the
/// configuration. Every operation is the store's own: a `MemoryStore`
/// dereferences to its [`CampaignStore`].
#[derive(Debug)]
pub struct MemoryStore(Box<dyn CampaignStore>);

impl MemoryStore {
    /// Opens (or creates) the SQLite store at `path`; an empty store gets
    /// the demo campaign.
    pub fn open(path: &Path) -> Result<MemoryStore, MemoryError> {
        SqliteStore::open(path).map(MemoryStore::new)
    }

    /// Connects to the PostgreSQL store at `url`, creating its tables where
    /// missing; an empty store gets the demo campaign.
    pub fn connect(url: &str) -> Result<MemoryStore, MemoryError> {
        PgStore::connect(url).map(MemoryStore::new)
    }

    /// A SQLite store in memory holding the demo campaign, gone when
    /// dropped (for hosts that were not given a file).
    pub fn in_memory() -> Result<MemoryStore, MemoryError> {
        SqliteStore::in_memory().map(MemoryStore::new)
    }

    /// The campaign memory held by `store`.
    pub fn new(store: impl CampaignStore + 'static) -> MemoryStore {
        MemoryStore(Box::new(store))
    }
}

impl std::ops::Deref for MemoryStore {
    type Target = dyn CampaignStore;

    fn deref(&self) -> &(dyn CampaignStore + 'static) {
        &*self.0
    }
}

/// The store as plugins granted `memory` see it (the runtime's
/// `toolhost:plugin/memory` interface).
impl toolhost_runtime::MemoryBackend for MemoryStore {
    fn search_sessions(
        &self,
        query: &str,
        session_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<wit::TranscriptLine>, String> {
        let hits = self.0.search_sessions(query, session_id, limit).map_err(MemoryError::for_plugin)?;
        Ok(hits
            .into_iter()
            .map(|h| wit::TranscriptLine {
                session_id: h.session_id,
                line: h.line,
                speaker: h.speaker,
                text: h.text,
                score: h.score,
            })
            .collect())
    }

    fn query_entities(&self, name: Option<&str>, kind: Option<&str>, limit: u32) -> Result<Vec<wit::Entity>, String> {
        let found = self.0.query_entities(name, kind, limit).map_err(MemoryError::for_plugin)?;
        Ok(found.into_iter().map(wit_entity).collect())
    }

    fn get_entity(&self, id: &str) -> Result<Option<wit::Entity>, String> {
        Ok(self.0.get_entity(id).map_err(MemoryError::for_plugin)?.map(wit_entity))
    }

    fn relationships(&self, id: &str) -> Result<Vec<wit::Relationship>, String> {
        let rels = self.0.relationships(id).map_err(MemoryError::for_plugin)?;
        Ok(rels.into_iter().map(|r| wit::Relationship { source: r.source, target: r.target, kind: r.kind }).collect())
    }

    fn search_facts(&self, query: &str, limit: u32) -> Result<Vec<wit::Fact>, String> {
        let hits = self.0.search_facts(query, limit).map_err(MemoryError::for_plugin)?;
        Ok(hits
            .into_iter()
            .map(|f| wit::Fact { id: f.id, text: f.text, session_id: f.session_id, score: f.score })
            .collect())
    }

    fn remember(&self, text: &str, session_id: Option<&str>) -> Result<String, String> {
        self.0.remember(text, session_id).map_err(MemoryError::for_plugin)
    }

    fn reachable(&self) -> bool {
        self.0.reachable()
    }
}

fn wit_entity(e: Entity) -> wit::Entity {
    wit::Entity {
        id: e.id,
        name: e.name,
        kind: e.kind,
        attributes: serde_json::Value::Object(e.attributes).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sqlite::fts_query;

    fn store() -> (tempfile::TempDir, MemoryStore) {
        let d = tempfile::tempdir().unwrap();
        let s = MemoryStore::open(&d.path().join("m.sqlite3")).unwrap();
        (d, s)
    }

    #[test]
    fn the_demo_campaign_is_loaded_into_an_empty_store() {
        let (_d, s) = store();
        assert!(!s.query_entities(None, Some("npc"), 100).unwrap().is_empty());
        assert!(!s.search_sessions("dragon", None, 5).unwrap().is_empty());
    }

    #[test]
    fn fts_input_cannot_inject_syntax() {
        let (_d, s) = store();
        assert!(s.search_facts("\" OR * NEAR(", 5).is_ok());
        assert!(s.search_sessions("AND OR NOT", None, 5).is_ok());
        assert_eq!(fts_query("a"), None);
    }

    #[test]
    fn an_export_imports_into_an_empty_store_as_the_same_campaign() {
        let (_d, store) = store();
        let mut extra: Campaign = serde_json::from_str(DEMO_CAMPAIGN).unwrap();
        extra.facts.push(Fact { id: "fact-zz".into(), text: "The well is poisoned.".into(), session_id: None });
        store.import(&extra).unwrap();
        let exported = store.export().unwrap();
        assert!(exported.facts.iter().any(|f| f.id == "fact-zz"));
        let text = serde_json::to_string(&exported).unwrap();
        let again: Campaign = serde_json::from_str(&text).unwrap();
        let other = MemoryStore::in_memory().unwrap();
        other.import(&again).unwrap();
        assert_eq!(other.export().unwrap(), exported);
        assert_eq!(other.search_facts("poisoned", 5).unwrap()[0].id, "fact-zz");
    }

    #[test]
    fn a_remembered_fact_is_found_and_survives_reopening() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("m.sqlite3");
        let id = MemoryStore::open(&path).unwrap().remember("The ferryman fears the moon.", Some("session-2")).unwrap();
        assert!(id.starts_with("fact-") && id.len() == 21, "{id}");
        let store = MemoryStore::open(&path).unwrap();
        let hits = store.search_facts("ferryman", 5).unwrap();
        assert_eq!((hits[0].id.as_str(), hits[0].session_id.as_deref()), (id.as_str(), Some("session-2")));
        // Not idempotent: the same words are another fact.
        assert_ne!(store.remember("The ferryman fears the moon.", None).unwrap(), id);
    }

    #[test]
    fn data_survives_reopening() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.sqlite3");
        let s = MemoryStore::open(&p).unwrap();
        s.import(&Campaign {
            sessions: vec![],
            entities: vec![Entity {
                id: "x".into(),
                name: "Zed".into(),
                kind: "npc".into(),
                attributes: Default::default(),
            }],
            relationships: vec![],
            facts: vec![],
        })
        .unwrap();
        drop(s);
        let s = MemoryStore::open(&p).unwrap();
        assert_eq!(s.get_entity("x").unwrap().unwrap().name, "Zed");
    }
}
