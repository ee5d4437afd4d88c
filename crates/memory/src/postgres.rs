//! The PostgreSQL store (`memory.url: postgres://...`), for hosts that share
//! one campaign: the same tables as the SQLite store (prefixed `memory_`,
//! so the database can hold the control plane too), full-text search with
//! PostgreSQL's own `tsvector` columns under GIN indexes, and a
//! `tokio-postgres` pool (`deadpool-postgres`).
//!
//! The store's callers are synchronous (a plugin's host call runs on a
//! blocking thread), so the store owns a one-thread runtime and each
//! operation runs there, bounded by [`OPERATION_TIMEOUT`]: a database that
//! stops answering fails calls with a reason instead of hanging them.
//!
//! Ranking differs from SQLite's: `ts_rank` (how often and how close the
//! words occur, normalised by length) rather than BM25, which also weighs
//! how rare a word is across the store. Both order best first; ties go to
//! the lower id (and line). Scores are not comparable across stores.

use crate::{
    Campaign, CampaignStore, DEMO_CAMPAIGN, Entity, Fact, FactHit, LineHit, MemoryError, Relationship, Session,
    fts_words,
};
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest one operation (a query, an import, a write) may take,
/// waiting for a connection included.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per host (the pool's size).
pub const POOL_SIZE: usize = 16;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS memory_sessions (id TEXT COLLATE "C" PRIMARY KEY, title TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memory_transcript (
    session_id TEXT COLLATE "C" NOT NULL REFERENCES memory_sessions(id) ON DELETE CASCADE,
    line INTEGER NOT NULL, speaker TEXT NOT NULL, text TEXT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text || ' ' || speaker)) STORED,
    PRIMARY KEY (session_id, line));
CREATE INDEX IF NOT EXISTS memory_transcript_tsv ON memory_transcript USING GIN (tsv);
CREATE TABLE IF NOT EXISTS memory_entities (
    id TEXT COLLATE "C" PRIMARY KEY, name TEXT COLLATE "C" NOT NULL, kind TEXT COLLATE "C" NOT NULL,
    attributes TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS memory_entities_kind ON memory_entities (kind);
CREATE TABLE IF NOT EXISTS memory_relationships (
    seq BIGSERIAL NOT NULL, source TEXT COLLATE "C" NOT NULL, target TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL, PRIMARY KEY (source, target, kind));
CREATE INDEX IF NOT EXISTS memory_relationships_target ON memory_relationships (target);
CREATE TABLE IF NOT EXISTS memory_facts (
    id TEXT COLLATE "C" PRIMARY KEY, text TEXT NOT NULL, session_id TEXT,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED);
CREATE INDEX IF NOT EXISTS memory_facts_tsv ON memory_facts USING GIN (tsv);
"#;

/// Hosts opening one new database at once take turns (schema and demo
/// campaign once): a transaction-scoped advisory lock on this key.
const SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('toolhost memory schema'))";

/// Free text as a `websearch_to_tsquery` input: its words joined with
/// `or`. That function never fails on its input, and the words hold only
/// letters, digits and apostrophes.
pub(crate) fn ts_query(q: &str) -> Option<String> {
    let words = fts_words(q);
    (!words.is_empty()).then(|| words.join(" or "))
}

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PgStore {
    pool: Pool,
    health: Arc<Health>,
    /// Always `Some` until dropped (dropped without waiting: a runtime may
    /// not be dropped from inside another).
    rt: Option<tokio::runtime::Runtime>,
    target: String,
}

/// The last health check: cached, so that probes never wait on the
/// database and a flood of them runs at most one check a second.
#[derive(Debug)]
struct Health {
    reachable: AtomicBool,
    checking: AtomicBool,
    /// Milliseconds since `epoch` at the last check's start.
    checked_ms: AtomicU64,
    epoch: Instant,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// `url` without its password, for messages and logs:
/// `postgres://user:secret@host/db` becomes `postgres://user:***@host/db`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    // With a host part, everything up to the last `@` is the userinfo (a
    // password may hold `/`, `?` or `#` unencoded; an `@` in the query
    // then hides too much, never too little).
    let (userinfo, after) = match rest.rsplit_once('@') {
        Some((u, a)) if !rest.starts_with('/') => (Some(u), a),
        _ => (None, rest),
    };
    let mut out = format!("{scheme}://");
    if let Some(u) = userinfo {
        match u.split_once(':') {
            Some((user, _)) => out.push_str(&format!("{user}:***@")),
            None => out.push_str(&format!("{u}@")),
        }
    }
    out.push_str(after);
    // `password=` anywhere after the userinfo (the socket form's query,
    // or a query holding an `@` of its own), however its key is written.
    let mut masked = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = rest.find(['?', '&']) {
        masked.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let end = rest.find('&').unwrap_or(rest.len());
        let (key, _) = rest[..end].split_once('=').unwrap_or((&rest[..end], ""));
        if percent_encoding::percent_decode_str(key).decode_utf8_lossy() == "password" {
            masked.push_str(&format!("{key}=***"));
            rest = &rest[end..];
        }
    }
    masked.push_str(rest);
    masked
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:pass@host/db`,
    /// or `postgresql:///db?host=/run/postgresql` for a Unix socket),
    /// creates the tables where missing, and loads the demo campaign into
    /// an empty store.
    pub fn connect(url: &str) -> Result<PgStore, MemoryError> {
        let target = redact(url);
        let pg = crate::PgTarget::parse(url)
            .map_err(|reason| MemoryError::Url { url: target.clone(), reason: reason.to_string() })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("toolhost-pg")
            .enable_all()
            .build()
            .map_err(|e| MemoryError::Unavailable(format!("starting the PostgreSQL client: {e}")))?;
        let manager =
            Manager::from_config(pg.config, pg.tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(OPERATION_TIMEOUT / 2))
            .create_timeout(Some(OPERATION_TIMEOUT / 2))
            .recycle_timeout(Some(OPERATION_TIMEOUT / 2))
            .build()
            .map_err(|e| MemoryError::Unavailable(e.to_string()))?;
        let health = Arc::new(Health {
            reachable: AtomicBool::new(true),
            checking: AtomicBool::new(false),
            checked_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        });
        let store = PgStore { pool, health, rt: Some(rt), target };
        store.run(|pool| async move {
            let mut c = pool.get().await?;
            let tx = c.transaction().await?;
            tx.batch_execute(SCHEMA_LOCK).await?;
            tx.batch_execute(SCHEMA).await?;
            let empty: bool = tx
                .query_one(
                    "SELECT NOT EXISTS (SELECT 1 FROM memory_sessions) AND NOT EXISTS (SELECT 1 FROM memory_entities)
                       AND NOT EXISTS (SELECT 1 FROM memory_facts)",
                    &[],
                )
                .await?
                .get(0);
            if empty {
                import_into(&tx, &serde_json::from_str(DEMO_CAMPAIGN)?).await?;
            }
            tx.commit().await?;
            Ok(())
        })?;
        Ok(store)
    }

    /// Where the store is (the URL without its password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Runs one operation on the store's runtime and waits for it, at most
    /// [`OPERATION_TIMEOUT`].
    fn run<T, F, Fut>(&self, op: F) -> Result<T, MemoryError>
    where
        F: FnOnce(Pool) -> Fut,
        Fut: Future<Output = Result<T, MemoryError>> + Send + 'static,
        T: Send + 'static,
    {
        let Some(rt) = &self.rt else { return Err(MemoryError::Unavailable("the store is closed".into())) };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let work = op(self.pool.clone());
        rt.spawn(async move {
            let _ = tx.send(tokio::time::timeout(OPERATION_TIMEOUT, work).await);
        });
        match rx.recv() {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(MemoryError::Unavailable(format!(
                "PostgreSQL at {} did not answer within {} s",
                self.target,
                OPERATION_TIMEOUT.as_secs()
            ))),
            Err(_) => Err(MemoryError::Unavailable("the operation was dropped".into())),
        }
    }
}

impl CampaignStore for PgStore {
    fn import(&self, c: &Campaign) -> Result<(), MemoryError> {
        let text = serde_json::to_string(c)?;
        self.run(|pool| async move {
            let campaign: Campaign = serde_json::from_str(&text)?;
            let mut client = pool.get().await?;
            let tx = client.transaction().await?;
            import_into(&tx, &campaign).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// The whole store as a campaign, in one repeatable-read transaction:
    /// what [`CampaignStore::import`] takes back.
    fn export(&self) -> Result<Campaign, MemoryError> {
        self.run(|pool| async move {
            let mut client = pool.get().await?;
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await?;
            let mut sessions: Vec<Session> = tx
                .query("SELECT id, title FROM memory_sessions ORDER BY id", &[])
                .await?
                .iter()
                .map(|r| Session { id: r.get(0), title: r.get(1), transcript: Vec::new() })
                .collect();
            let lines =
                tx.prepare("SELECT speaker, text FROM memory_transcript WHERE session_id = $1 ORDER BY line").await?;
            for s in &mut sessions {
                s.transcript = tx.query(&lines, &[&s.id]).await?.iter().map(|r| (r.get(0), r.get(1))).collect();
            }
            let entities = tx
                .query("SELECT id, name, kind, attributes FROM memory_entities ORDER BY id", &[])
                .await?
                .iter()
                .map(entity_row)
                .collect();
            let relationships = tx
                .query("SELECT source, target, kind FROM memory_relationships ORDER BY seq", &[])
                .await?
                .iter()
                .map(|r| Relationship { source: r.get(0), target: r.get(1), kind: r.get(2) })
                .collect();
            let facts = tx
                .query("SELECT id, text, session_id FROM memory_facts ORDER BY id", &[])
                .await?
                .iter()
                .map(|r| Fact { id: r.get(0), text: r.get(1), session_id: r.get(2) })
                .collect();
            tx.commit().await?;
            Ok(Campaign { sessions, entities, relationships, facts })
        })
    }

    /// Records a fact, committed (durable) before it returns, and returns
    /// its new id (`fact-` and 16 random hex digits).
    fn remember(&self, text: &str, session_id: Option<&str>) -> Result<String, MemoryError> {
        if text.contains('\0') || session_id.is_some_and(|s| s.contains('\0')) {
            return Err(MemoryError::Invalid(
                "the text holds a NUL character (U+0000), which the campaign memory (PostgreSQL) cannot keep".into(),
            ));
        }
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| MemoryError::Unavailable(format!("no randomness for an id: {e}")))?;
        let id = format!("fact-{}", hex::encode(bytes));
        let (text, session_id) = (text.to_string(), session_id.map(str::to_string));
        let answer = id.clone();
        self.run(|pool| async move {
            let client = pool.get().await?;
            let insert =
                client.prepare_cached("INSERT INTO memory_facts (id, text, session_id) VALUES ($1, $2, $3)").await?;
            client.execute(&insert, &[&id, &text, &session_id]).await?;
            Ok(())
        })?;
        Ok(answer)
    }

    fn search_sessions(&self, q: &str, session: Option<&str>, limit: u32) -> Result<Vec<LineHit>, MemoryError> {
        let Some(query) = ts_query(q) else { return Ok(Vec::new()) };
        let session = session.map(str::to_string);
        self.run(|pool| async move {
            let client = pool.get().await?;
            let st = client
                .prepare_cached(
                    "SELECT session_id, line, speaker, text, ts_rank(tsv, q)::float8 AS score
                     FROM memory_transcript, websearch_to_tsquery('english', $1) q
                     WHERE tsv @@ q AND ($2::text IS NULL OR session_id = $2)
                     ORDER BY score DESC, session_id, line LIMIT $3",
                )
                .await?;
            let rows = client.query(&st, &[&query, &session, &i64::from(limit)]).await?;
            Ok(rows
                .iter()
                .map(|r| LineHit {
                    session_id: r.get(0),
                    line: r.get::<_, i32>(1) as u32,
                    speaker: r.get(2),
                    text: r.get(3),
                    score: r.get(4),
                })
                .collect())
        })
    }

    fn query_entities(&self, name: Option<&str>, kind: Option<&str>, limit: u32) -> Result<Vec<Entity>, MemoryError> {
        let name = name.map(crate::like_literal);
        let kind = kind.map(str::to_string);
        self.run(|pool| async move {
            let client = pool.get().await?;
            let st = client
                .prepare_cached(
                    "SELECT id, name, kind, attributes FROM memory_entities
                     WHERE ($1::text IS NULL OR name ILIKE '%' || $1 || '%' ESCAPE '\\')
                       AND ($2::text IS NULL OR kind = $2)
                     ORDER BY name, id LIMIT $3",
                )
                .await?;
            Ok(client.query(&st, &[&name, &kind, &i64::from(limit)]).await?.iter().map(entity_row).collect())
        })
    }

    fn get_entity(&self, id: &str) -> Result<Option<Entity>, MemoryError> {
        let id = id.to_string();
        self.run(|pool| async move {
            let client = pool.get().await?;
            let st =
                client.prepare_cached("SELECT id, name, kind, attributes FROM memory_entities WHERE id = $1").await?;
            Ok(client.query_opt(&st, &[&id]).await?.as_ref().map(entity_row))
        })
    }

    fn relationships(&self, id: &str) -> Result<Vec<Relationship>, MemoryError> {
        let id = id.to_string();
        self.run(|pool| async move {
            let client = pool.get().await?;
            let st = client
                .prepare_cached(
                    "SELECT source, target, kind FROM memory_relationships WHERE source = $1 OR target = $1
                     ORDER BY source, kind, target",
                )
                .await?;
            Ok(client
                .query(&st, &[&id])
                .await?
                .iter()
                .map(|r| Relationship { source: r.get(0), target: r.get(1), kind: r.get(2) })
                .collect())
        })
    }

    fn search_facts(&self, q: &str, limit: u32) -> Result<Vec<FactHit>, MemoryError> {
        let Some(query) = ts_query(q) else { return Ok(Vec::new()) };
        self.run(|pool| async move {
            let client = pool.get().await?;
            let st = client
                .prepare_cached(
                    "SELECT id, text, session_id, ts_rank(tsv, q)::float8 AS score
                     FROM memory_facts, websearch_to_tsquery('english', $1) q
                     WHERE tsv @@ q ORDER BY score DESC, id LIMIT $2",
                )
                .await?;
            Ok(client
                .query(&st, &[&query, &i64::from(limit)])
                .await?
                .iter()
                .map(|r| FactHit { id: r.get(0), text: r.get(1), session_id: r.get(2), score: r.get(3) })
                .collect())
        })
    }

    /// Whether the database answered its last check, which is at most a
    /// second old: a stale answer starts a new check in the background
    /// (bounded by two seconds) and is returned meanwhile. Never blocks.
    fn reachable(&self) -> bool {
        let h = &self.health;
        let now = h.epoch.elapsed().as_millis() as u64;
        if now.saturating_sub(h.checked_ms.load(Ordering::Acquire)) >= 1000
            && !h.checking.swap(true, Ordering::AcqRel)
            && let Some(rt) = &self.rt
        {
            h.checked_ms.store(now, Ordering::Release);
            let (pool, health, target) = (self.pool.clone(), h.clone(), self.target.clone());
            rt.spawn(async move {
                let ping = async { pool.get().await.ok()?.simple_query("SELECT 1").await.ok() };
                let ok = matches!(tokio::time::timeout(Duration::from_secs(2), ping).await, Ok(Some(_)));
                if health.reachable.swap(ok, Ordering::AcqRel) != ok {
                    if ok {
                        tracing::warn!("the campaign memory (PostgreSQL at {target}) answers again");
                    } else {
                        tracing::warn!(
                            "the campaign memory (PostgreSQL at {target}) does not answer: memory calls fail with {} until it does; tools that need no database go on",
                            crate::UNAVAILABLE
                        );
                    }
                }
                health.checking.store(false, Ordering::Release);
            });
        }
        h.reachable.load(Ordering::Acquire)
    }

    /// The URL without its password.
    fn describe(&self) -> String {
        self.target.clone()
    }
}

async fn import_into(tx: &impl GenericClient, c: &Campaign) -> Result<(), MemoryError> {
    for s in &c.sessions {
        tx.execute("DELETE FROM memory_transcript WHERE session_id = $1", &[&s.id]).await?;
        tx.execute(
            "INSERT INTO memory_sessions (id, title) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET title = EXCLUDED.title",
            &[&s.id, &s.title],
        )
        .await?;
        // One statement per session: the lines as arrays.
        let lines: Vec<i32> = (1..=s.transcript.len() as i32).collect();
        let speakers: Vec<&str> = s.transcript.iter().map(|(who, _)| who.as_str()).collect();
        let texts: Vec<&str> = s.transcript.iter().map(|(_, said)| said.as_str()).collect();
        tx.execute(
            "INSERT INTO memory_transcript (session_id, line, speaker, text)
             SELECT $1, * FROM unnest($2::int4[], $3::text[], $4::text[])",
            &[&s.id, &lines, &speakers, &texts],
        )
        .await?;
    }
    for e in &c.entities {
        let attributes = serde_json::Value::Object(e.attributes.clone()).to_string();
        tx.execute(
            "INSERT INTO memory_entities (id, name, kind, attributes) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, kind = EXCLUDED.kind, attributes = EXCLUDED.attributes",
            &[&e.id, &e.name, &e.kind, &attributes],
        )
        .await?;
    }
    for r in &c.relationships {
        tx.execute(
            "INSERT INTO memory_relationships (source, target, kind) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&r.source, &r.target, &r.kind],
        )
        .await?;
    }
    for f in &c.facts {
        tx.execute(
            "INSERT INTO memory_facts (id, text, session_id) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET text = EXCLUDED.text, session_id = EXCLUDED.session_id",
            &[&f.id, &f.text, &f.session_id],
        )
        .await?;
    }
    Ok(())
}

fn entity_row(r: &tokio_postgres::Row) -> Entity {
    let attributes: String = r.get(3);
    Entity {
        id: r.get(0),
        name: r.get(1),
        kind: r.get(2),
        attributes: serde_json::from_str(&attributes).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(redact("postgres://u:hunter2@db:5432/c"), "postgres://u:***@db:5432/c");
        assert_eq!(redact("postgresql://u:p@ss@/c?host=/run"), "postgresql://u:***@/c?host=/run");
        assert_eq!(redact("postgresql:///c?host=/run&user=u"), "postgresql:///c?host=/run&user=u");
        assert_eq!(redact("postgres://u@db/c"), "postgres://u@db/c");
        assert_eq!(redact("postgres://u:a/b?c#d@db/c"), "postgres://u:***@db/c");
        assert_eq!(redact("postgresql:///c?host=/run&password=hunter2"), "postgresql:///c?host=/run&password=***");
        assert_eq!(
            redact("postgres://db/app?user=svc@corp&password=hunter2"),
            "postgres://db/app?user=svc@corp&password=***",
            "an @ in the query"
        );
        assert_eq!(redact("postgres://db/app?pass%77ord=hunter2&x=1"), "postgres://db/app?pass%77ord=***&x=1");
    }

    #[test]
    fn search_words_cannot_inject_query_syntax() {
        assert_eq!(ts_query("who leads the Ashen Circle?").as_deref(), Some("who or leads or the or Ashen or Circle"));
        assert_eq!(ts_query("\"x\" -y & z | !w <-> (a)"), None);
        assert_eq!(ts_query("don't OR \"dragon\"").as_deref(), Some("don't or OR or dragon"));
    }
}
