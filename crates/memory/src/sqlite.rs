//! The SQLite store (the default): one file in WAL mode, FTS5 indexes over
//! transcripts and facts ranked by BM25.

use crate::{
    Campaign, CampaignStore, DEMO_CAMPAIGN, Entity, Fact, FactHit, LineHit, MemoryError, Relationship, Session,
    fts_words,
};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;

/// The SQLite store: one file, WAL.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// The file (or `:memory:`).
    location: String,
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
pub(crate) fn fts_query(q: &str) -> Option<String> {
    let words: Vec<String> = fts_words(q).iter().map(|w| format!("\"{w}\"")).collect();
    (!words.is_empty()).then(|| words.join(" OR "))
}

impl SqliteStore {
    /// Opens (or creates) the store at `path`; an empty store gets the demo campaign.
    pub fn open(path: &Path) -> Result<SqliteStore, MemoryError> {
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
        Ok(SqliteStore { conn: Mutex::new(conn), location: path.display().to_string() })
    }

    /// A store in memory holding the demo campaign, gone when dropped (for
    /// hosts that were not given a file).
    pub fn in_memory() -> Result<SqliteStore, MemoryError> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(SCHEMA)?;
        let store = SqliteStore { conn: Mutex::new(conn), location: ":memory:".into() };
        store.import(&serde_json::from_str(DEMO_CAMPAIGN)?)?;
        Ok(store)
    }
}

impl CampaignStore for SqliteStore {
    fn import(&self, c: &Campaign) -> Result<(), MemoryError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        import_into(&tx, c)?;
        tx.commit()?;
        Ok(())
    }

    fn export(&self) -> Result<Campaign, MemoryError> {
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

    fn remember(&self, text: &str, session_id: Option<&str>) -> Result<String, MemoryError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let id: String = tx.query_row("SELECT 'fact-' || lower(hex(randomblob(8)))", [], |r| r.get(0))?;
        tx.execute("INSERT INTO facts (id, text, session_id) VALUES (?1, ?2, ?3)", params![id, text, session_id])?;
        tx.execute("INSERT INTO facts_fts (text, id) VALUES (?1, ?2)", params![text, id])?;
        tx.commit()?;
        Ok(id)
    }

    fn search_sessions(&self, q: &str, session: Option<&str>, limit: u32) -> Result<Vec<LineHit>, MemoryError> {
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

    fn query_entities(&self, name: Option<&str>, kind: Option<&str>, limit: u32) -> Result<Vec<Entity>, MemoryError> {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = c.prepare_cached(
            "SELECT id, name, kind, attributes FROM entities
             WHERE (?1 IS NULL OR name LIKE '%' || ?1 || '%' ESCAPE '\\') AND (?2 IS NULL OR kind = ?2)
             ORDER BY name LIMIT ?3",
        )?;
        let name = name.map(crate::like_literal);
        let rows = st.query_map(params![name, kind, limit], entity_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn get_entity(&self, id: &str) -> Result<Option<Entity>, MemoryError> {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        Ok(c.query_row("SELECT id, name, kind, attributes FROM entities WHERE id = ?1", params![id], entity_row)
            .optional()?)
    }

    fn relationships(&self, id: &str) -> Result<Vec<Relationship>, MemoryError> {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = c.prepare_cached(
            "SELECT source, target, kind FROM relationships WHERE source = ?1 OR target = ?1 ORDER BY source, kind, target",
        )?;
        let rows =
            st.query_map(params![id], |r| Ok(Relationship { source: r.get(0)?, target: r.get(1)?, kind: r.get(2)? }))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn search_facts(&self, q: &str, limit: u32) -> Result<Vec<FactHit>, MemoryError> {
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

    /// The file (or `:memory:`).
    fn describe(&self) -> String {
        self.location.clone()
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

fn entity_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Entity> {
    let attrs: String = r.get(3)?;
    Ok(Entity {
        id: r.get(0)?,
        name: r.get(1)?,
        kind: r.get(2)?,
        attributes: serde_json::from_str(&attrs).unwrap_or_default(),
    })
}
