//! The campaign memory store behind the `memory` capability: SQLite (WAL)
//! with FTS5 indexes over session transcripts and facts, and tables for the
//! knowledge graph. One file, safe for concurrent calls and for a killed
//! host (SQLite's write-ahead log).

#![deny(unsafe_code)]

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Mutex;
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
    /// The campaign file is malformed.
    #[error("campaign file: {0}")]
    Campaign(#[from] serde_json::Error),
}

/// The store.
#[derive(Debug)]
pub struct MemoryStore {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, title TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS transcript (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    line INTEGER NOT NULL, speaker TEXT NOT NULL, text TEXT NOT NULL,
    PRIMARY KEY (session_id, line));
CREATE VIRTUAL TABLE IF NOT EXISTS transcript_fts USING fts5(
    text, speaker, session_id UNINDEXED, line UNINDEXED, tokenize = 'porter unicode61');
CREATE TABLE IF NOT EXISTS entities (id TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, attributes TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS entities_kind ON entities(kind);
CREATE TABLE IF NOT EXISTS relationships (source TEXT NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL,
    PRIMARY KEY (source, target, kind));
CREATE TABLE IF NOT EXISTS facts (id TEXT PRIMARY KEY, text TEXT NOT NULL, session_id TEXT);
CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5(text, id UNINDEXED, tokenize = 'porter unicode61');
";

/// Turns free text into an FTS5 query: words joined with OR, each quoted,
/// so user input never injects FTS syntax.
fn fts_query(q: &str) -> Option<String> {
    let words: Vec<String> = q
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| w.len() > 1)
        .map(|w| format!("\"{}\"", w.replace('"', "")))
        .collect();
    (!words.is_empty()).then(|| words.join(" OR "))
}

impl MemoryStore {
    /// Opens (or creates) the store at `path`; an empty store gets the demo campaign.
    pub fn open(path: &Path) -> Result<MemoryStore, MemoryError> {
        if let Some(dir) = path.parent() {
            let _ = toolhost_base::private::create_dirs(dir);
        }
        // 0600 before SQLite opens it (its -wal and -shm files take the
        // database's mode): a campaign's memory is the DM's alone.
        if let Err(e) = toolhost_base::private::touch_private(path) {
            tracing::debug!(path = %path.display(), error = %e, "could not pre-create the memory store 0600");
        }
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // WAL survives a killed host and lets readers run beside a writer.
        // The mode is stored in the file; switching needs a moment alone
        // with it, so several processes opening a new store retry.
        for attempt in 0.. {
            match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
                Ok(_) => break,
                Err(e) if attempt < 50 && is_busy(&e) => std::thread::sleep(std::time::Duration::from_millis(20)),
                Err(e) => return Err(e.into()),
            }
        }
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")?;
        // Schema and demo data in one immediate transaction: concurrent
        // first opens are serialised and the demo is loaded once.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(SCHEMA)?;
        let empty: bool = tx.query_row(
            "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM entities) + (SELECT count(*) FROM facts) = 0",
            [],
            |r| r.get(0),
        )?;
        if empty {
            import_into(&tx, &serde_json::from_str(DEMO_CAMPAIGN)?)?;
        }
        tx.commit()?;
        Ok(MemoryStore { conn: Mutex::new(conn) })
    }

    /// A store in memory holding the demo campaign, gone when dropped (for
    /// hosts that were not given a file).
    pub fn in_memory() -> Result<MemoryStore, MemoryError> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(SCHEMA)?;
        let store = MemoryStore { conn: Mutex::new(conn) };
        store.import(&serde_json::from_str(DEMO_CAMPAIGN)?)?;
        Ok(store)
    }

    /// Imports a campaign in one transaction (replacing records with the same ids).
    pub fn import(&self, c: &Campaign) -> Result<(), MemoryError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        import_into(&tx, c)?;
        tx.commit()?;
        Ok(())
    }

    /// The whole store as a campaign, in one read transaction: what
    /// [`MemoryStore::import`] takes back (sessions, entities and facts by
    /// id, relationships and transcript lines in order).
    pub fn export(&self) -> Result<Campaign, MemoryError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction()?;
        let mut sessions: Vec<Session> = tx
            .prepare("SELECT id, title FROM sessions ORDER BY id")?
            .query_map([], |r| Ok(Session { id: r.get(0)?, title: r.get(1)?, transcript: Vec::new() }))?
            .collect::<Result<_, _>>()?;
        {
            let mut lines = tx.prepare("SELECT speaker, text FROM transcript WHERE session_id = ?1 ORDER BY line")?;
            for s in &mut sessions {
                s.transcript =
                    lines.query_map(params![s.id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
            }
        }
        let entities = tx
            .prepare("SELECT id, name, kind, attributes FROM entities ORDER BY id")?
            .query_map([], entity_row)?
            .collect::<Result<_, _>>()?;
        let relationships = tx
            .prepare("SELECT source, target, kind FROM relationships ORDER BY rowid")?
            .query_map([], |r| Ok(Relationship { source: r.get(0)?, target: r.get(1)?, kind: r.get(2)? }))?
            .collect::<Result<_, _>>()?;
        let facts = tx
            .prepare("SELECT id, text, session_id FROM facts ORDER BY id")?
            .query_map([], |r| Ok(Fact { id: r.get(0)?, text: r.get(1)?, session_id: r.get(2)? }))?
            .collect::<Result<_, _>>()?;
        Ok(Campaign { sessions, entities, relationships, facts })
    }

    /// Records a fact (in one transaction, durable once it returns) and
    /// returns its new id (`fact-` and 16 random hex digits). A
    /// `session_id` ties it to a session of play.
    pub fn remember(&self, text: &str, session_id: Option<&str>) -> Result<String, MemoryError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let id: String = tx.query_row("SELECT 'fact-' || lower(hex(randomblob(8)))", [], |r| r.get(0))?;
        tx.execute("INSERT INTO facts (id, text, session_id) VALUES (?1, ?2, ?3)", params![id, text, session_id])?;
        tx.execute("INSERT INTO facts_fts (text, id) VALUES (?1, ?2)", params![text, id])?;
        tx.commit()?;
        Ok(id)
    }

    /// Full-text search over transcripts.
    pub fn search_sessions(&self, q: &str, session: Option<&str>, limit: u32) -> Result<Vec<LineHit>, MemoryError> {
        let Some(fts) = fts_query(q) else { return Ok(Vec::new()) };
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = c.prepare_cached(
            "SELECT session_id, line, speaker, text, -bm25(transcript_fts) FROM transcript_fts
             WHERE transcript_fts MATCH ?1 AND (?2 IS NULL OR session_id = ?2)
             ORDER BY bm25(transcript_fts) LIMIT ?3",
        )?;
        let rows = st.query_map(params![fts, session, limit], |r| {
            Ok(LineHit {
                session_id: r.get(0)?,
                line: r.get::<_, i64>(1)? as u32,
                speaker: r.get(2)?,
                text: r.get(3)?,
                score: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Entities by name substring and/or kind.
    pub fn query_entities(
        &self,
        name: Option<&str>,
        kind: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Entity>, MemoryError> {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = c.prepare_cached(
            "SELECT id, name, kind, attributes FROM entities
             WHERE (?1 IS NULL OR name LIKE '%' || ?1 || '%' ESCAPE '\\') AND (?2 IS NULL OR kind = ?2)
             ORDER BY name LIMIT ?3",
        )?;
        let name = name.map(|n| n.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        let rows = st.query_map(params![name, kind, limit], entity_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One entity.
    pub fn get_entity(&self, id: &str) -> Result<Option<Entity>, MemoryError> {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        Ok(c.query_row("SELECT id, name, kind, attributes FROM entities WHERE id = ?1", params![id], entity_row)
            .optional()?)
    }

    /// Relationships touching an entity.
    pub fn relationships(&self, id: &str) -> Result<Vec<Relationship>, MemoryError> {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = c.prepare_cached(
            "SELECT source, target, kind FROM relationships WHERE source = ?1 OR target = ?1 ORDER BY source, kind, target",
        )?;
        let rows =
            st.query_map(params![id], |r| Ok(Relationship { source: r.get(0)?, target: r.get(1)?, kind: r.get(2)? }))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Full-text search over facts.
    pub fn search_facts(&self, q: &str, limit: u32) -> Result<Vec<FactHit>, MemoryError> {
        let Some(fts) = fts_query(q) else { return Ok(Vec::new()) };
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = c.prepare_cached(
            "SELECT f.id, f.text, f.session_id, -bm25(facts_fts) FROM facts_fts JOIN facts f ON f.id = facts_fts.id
             WHERE facts_fts MATCH ?1 ORDER BY bm25(facts_fts) LIMIT ?2",
        )?;
        let rows = st.query_map(params![fts, limit], |r| {
            Ok(FactHit { id: r.get(0)?, text: r.get(1)?, session_id: r.get(2)?, score: r.get(3)? })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

fn import_into(tx: &rusqlite::Transaction<'_>, c: &Campaign) -> Result<(), MemoryError> {
    for s in &c.sessions {
        tx.execute("DELETE FROM transcript_fts WHERE session_id = ?1", params![s.id])?;
        tx.execute("DELETE FROM transcript WHERE session_id = ?1", params![s.id])?;
        tx.execute("INSERT OR REPLACE INTO sessions (id, title) VALUES (?1, ?2)", params![s.id, s.title])?;
        for (i, (speaker, text)) in s.transcript.iter().enumerate() {
            let line = i as i64 + 1;
            tx.execute(
                "INSERT INTO transcript (session_id, line, speaker, text) VALUES (?1, ?2, ?3, ?4)",
                params![s.id, line, speaker, text],
            )?;
            tx.execute(
                "INSERT INTO transcript_fts (text, speaker, session_id, line) VALUES (?1, ?2, ?3, ?4)",
                params![text, speaker, s.id, line],
            )?;
        }
    }
    for e in &c.entities {
        tx.execute(
            "INSERT OR REPLACE INTO entities (id, name, kind, attributes) VALUES (?1, ?2, ?3, ?4)",
            params![e.id, e.name, e.kind, serde_json::Value::Object(e.attributes.clone()).to_string()],
        )?;
    }
    for r in &c.relationships {
        tx.execute(
            "INSERT OR IGNORE INTO relationships (source, target, kind) VALUES (?1, ?2, ?3)",
            params![r.source, r.target, r.kind],
        )?;
    }
    for f in &c.facts {
        tx.execute("DELETE FROM facts_fts WHERE id = ?1", params![f.id])?;
        tx.execute(
            "INSERT OR REPLACE INTO facts (id, text, session_id) VALUES (?1, ?2, ?3)",
            params![f.id, f.text, f.session_id],
        )?;
        tx.execute("INSERT INTO facts_fts (text, id) VALUES (?1, ?2)", params![f.text, f.id])?;
    }
    Ok(())
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
        let hits = MemoryStore::search_sessions(self, query, session_id, limit).map_err(|e| e.to_string())?;
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
        let found = MemoryStore::query_entities(self, name, kind, limit).map_err(|e| e.to_string())?;
        Ok(found.into_iter().map(wit_entity).collect())
    }

    fn get_entity(&self, id: &str) -> Result<Option<wit::Entity>, String> {
        Ok(MemoryStore::get_entity(self, id).map_err(|e| e.to_string())?.map(wit_entity))
    }

    fn relationships(&self, id: &str) -> Result<Vec<wit::Relationship>, String> {
        let rels = MemoryStore::relationships(self, id).map_err(|e| e.to_string())?;
        Ok(rels.into_iter().map(|r| wit::Relationship { source: r.source, target: r.target, kind: r.kind }).collect())
    }

    fn search_facts(&self, query: &str, limit: u32) -> Result<Vec<wit::Fact>, String> {
        let hits = MemoryStore::search_facts(self, query, limit).map_err(|e| e.to_string())?;
        Ok(hits
            .into_iter()
            .map(|f| wit::Fact { id: f.id, text: f.text, session_id: f.session_id, score: f.score })
            .collect())
    }

    fn remember(&self, text: &str, session_id: Option<&str>) -> Result<String, String> {
        MemoryStore::remember(self, text, session_id).map_err(|e| e.to_string())
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

fn entity_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Entity> {
    let attrs: String = r.get(3)?;
    Ok(Entity {
        id: r.get(0)?,
        name: r.get(1)?,
        kind: r.get(2)?,
        attributes: serde_json::from_str(&attrs).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
