//! The `memorytool` plugin: the seed's four memory tools over the host's
//! `memory` capability (session transcripts, facts, the knowledge graph),
//! and `remember`, which records a fact (the `memory_write` capability).
//! The data lives in the host's SQLite store; this plugin shapes queries and
//! answers for the model.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolhost_sdk::memory;
use toolhost_sdk::schema::not_null;
use toolhost_sdk::{Output, Tool, ToolError};

fn entity_json(e: &memory::Entity) -> Value {
    json!({
        "id": e.id,
        "name": e.name,
        "type": e.kind,
        "attributes": serde_json::from_str::<Value>(&e.attributes).unwrap_or(json!({})),
    })
}

fn line_json(l: &memory::TranscriptLine) -> Value {
    json!({"session_id": l.session_id, "line": l.line, "speaker": l.speaker, "text": l.text})
}

// The arguments of `search_sessions`. Only `///` comments reach the schema
// the model sees; the structs have none, so it has no top-level description.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchSessionsArgs {
    #[schemars(length(min = 1, max = 500))]
    query: String,
    /// Only this session, e.g. session-2.
    #[schemars(transform = not_null)]
    session_id: Option<String>,
    #[schemars(transform = not_null, range(min = 1, max = 50))]
    limit: Option<u32>,
}

/// `search_sessions`.
struct SearchSessions;

impl Tool for SearchSessions {
    type Args = SearchSessionsArgs;
    const NAME: &'static str = "search_sessions";
    const DESCRIPTION: &'static str =
        "Full-text search across session transcripts. Optionally restrict to a single session.";
    const ESTIMATED_MS: u32 = 100;
    const MAX_MS: u32 = 500;
    const IDEMPOTENT: bool = true;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"query":"dragon"}"#);

    fn call(a: SearchSessionsArgs) -> Result<Output, ToolError> {
        let hits = memory::search_sessions(&a.query, a.session_id.as_deref(), a.limit.unwrap_or(10).clamp(1, 50))?;
        Output::json(&json!({"query": a.query, "results": hits.iter().map(line_json).collect::<Vec<_>>()}))
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct QueryEntitiesArgs {
    /// Part of the name, case-insensitive.
    #[schemars(transform = not_null, length(max = 200))]
    name: Option<String>,
    /// npc, pc, location, faction or item.
    #[serde(rename = "type")]
    #[schemars(transform = not_null, length(max = 50))]
    kind: Option<String>,
    #[schemars(transform = not_null, range(min = 1, max = 100))]
    limit: Option<u32>,
}

/// `query_entities`.
struct QueryEntities;

impl Tool for QueryEntities {
    type Args = QueryEntitiesArgs;
    const NAME: &'static str = "query_entities";
    const DESCRIPTION: &'static str =
        "Find entities in the campaign's knowledge graph by name and/or type (npc, pc, location, faction, item).";
    const ESTIMATED_MS: u32 = 50;
    const MAX_MS: u32 = 200;
    const IDEMPOTENT: bool = true;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"type":"npc"}"#);

    fn call(a: QueryEntitiesArgs) -> Result<Output, ToolError> {
        let found = memory::query_entities(a.name.as_deref(), a.kind.as_deref(), a.limit.unwrap_or(20).clamp(1, 100))?;
        Output::json(&json!({"entities": found.iter().map(entity_json).collect::<Vec<_>>()}))
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetSummaryArgs {
    /// e.g. npc-bartok
    #[schemars(length(min = 1, max = 200))]
    entity_id: String,
}

/// `get_summary`.
struct GetSummary;

impl Tool for GetSummary {
    type Args = GetSummaryArgs;
    const NAME: &'static str = "get_summary";
    const DESCRIPTION: &'static str = "Retrieve a full identity snapshot of a knowledge-graph entity: attributes, relationships and connected entities. Use query_entities to find ids.";
    const ESTIMATED_MS: u32 = 80;
    const MAX_MS: u32 = 300;
    const IDEMPOTENT: bool = true;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"entity_id":"npc-bartok"}"#);

    fn call(a: GetSummaryArgs) -> Result<Output, ToolError> {
        let Some(entity) = memory::get_entity(&a.entity_id)? else {
            let hint = memory::query_entities(Some(&a.entity_id), None, 5)
                .map(|v| v.iter().map(|e| e.id.clone()).collect::<Vec<_>>())
                .unwrap_or_default();
            let hint = if hint.is_empty() {
                "use query_entities to find ids".to_string()
            } else {
                format!("did you mean {}?", hint.join(", "))
            };
            return Err(ToolError::NotFound(format!("no entity with id {:?}; {hint}", a.entity_id)));
        };
        let rels = memory::relationships(&entity.id)?;
        let mut connected = Vec::new();
        let mut relationships = Vec::new();
        for r in &rels {
            let other_id = if r.source == entity.id { &r.target } else { &r.source };
            let other = memory::get_entity(other_id)?;
            relationships.push(json!({
                "source": r.source,
                "kind": r.kind,
                "target": r.target,
                "other": other.as_ref().map(|o| json!({"id": o.id, "name": o.name, "type": o.kind})),
            }));
            if let Some(o) = other
                && !connected.iter().any(|c: &Value| c["id"] == o.id.as_str())
            {
                connected.push(entity_json(&o));
            }
        }
        Output::json(&json!({"entity": entity_json(&entity), "relationships": relationships, "connected": connected}))
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchFactsArgs {
    #[schemars(length(min = 1, max = 500))]
    query: String,
    #[schemars(transform = not_null, range(min = 1, max = 50), extend("default" = 10))]
    top_k: Option<u32>,
}

/// `search_facts`.
struct SearchFacts;

impl Tool for SearchFacts {
    type Args = SearchFactsArgs;
    const NAME: &'static str = "search_facts";
    const DESCRIPTION: &'static str = "Full-text search for facts recorded across session history. Falls back to transcript search when no fact matches.";
    const ESTIMATED_MS: u32 = 200;
    const MAX_MS: u32 = 800;
    const IDEMPOTENT: bool = true;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"query":"dragon"}"#);

    fn call(a: SearchFactsArgs) -> Result<Output, ToolError> {
        let k = a.top_k.unwrap_or(10).clamp(1, 50);
        let facts = memory::search_facts(&a.query, k)?;
        if !facts.is_empty() {
            let list: Vec<Value> = facts
                .iter()
                .map(|f| json!({"id": f.id, "text": f.text, "session_id": f.session_id, "score": (f.score * 1000.0).round() / 1000.0}))
                .collect();
            return Output::json(&json!({"query": a.query, "source": "facts", "facts": list}));
        }
        // No fact matched (and no embedding index exists): fall back to the
        // session transcripts, as the seed specifies.
        let lines = memory::search_sessions(&a.query, None, k)?;
        Output::json(
            &json!({"query": a.query, "source": "transcripts", "facts": lines.iter().map(line_json).collect::<Vec<_>>()}),
        )
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RememberArgs {
    /// The fact, in one or two sentences, e.g. "Bartok owes the party 20 gold."
    #[schemars(length(min = 1, max = 2000))]
    text: String,
    /// The session of play it came from, e.g. session-3.
    #[schemars(transform = not_null, length(min = 1, max = 200))]
    session_id: Option<String>,
}

/// `remember`.
struct Remember;

impl Tool for Remember {
    type Args = RememberArgs;
    const NAME: &'static str = "remember";
    const DESCRIPTION: &'static str = "Record a fact in the campaign memory, so that later searches (search_facts) find it. Each call records a new fact.";
    const ESTIMATED_MS: u32 = 50;
    const MAX_MS: u32 = 800;
    // A write: never retried, cached or probed.
    const IDEMPOTENT: bool = false;
    const PROBE_ARGUMENTS: Option<&'static str> = None;

    fn call(a: RememberArgs) -> Result<Output, ToolError> {
        let text = a.text.trim();
        if text.is_empty() {
            return Err(ToolError::InvalidInput("text is blank".into()));
        }
        let id = memory::remember(text, a.session_id.as_deref())?;
        Output::json(&json!({"id": id, "text": text, "session_id": a.session_id}))
    }
}

toolhost_sdk::plugin!(SearchSessions, QueryEntities, GetSummary, SearchFacts, Remember);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema<T: Tool>() -> Value {
        serde_json::from_str(&toolhost_sdk::describe::<T>().input_schema).unwrap()
    }

    #[test]
    fn schemas_keep_their_constraints() {
        let s = schema::<SearchSessions>();
        assert_eq!(s["required"], json!(["query"]), "{s}");
        assert_eq!(s["additionalProperties"], false, "{s}");
        assert_eq!(
            (s["properties"]["query"]["minLength"].as_u64(), s["properties"]["query"]["maxLength"].as_u64()),
            (Some(1), Some(500))
        );
        assert!(s["properties"]["query"].get("description").is_none(), "{s}");
        assert_eq!(s["properties"]["session_id"]["type"], "string", "no null: {s}");
        assert_eq!(
            (s["properties"]["limit"]["minimum"].as_u64(), s["properties"]["limit"]["maximum"].as_u64()),
            (Some(1), Some(50))
        );

        let q = schema::<QueryEntities>();
        assert!(q.get("required").is_none(), "{q}");
        assert_eq!(q["properties"]["type"]["maxLength"], 50, "{q}");
        assert_eq!(q["properties"]["name"]["maxLength"], 200, "{q}");
        assert_eq!(q["properties"]["limit"]["maximum"], 100, "{q}");
        assert_eq!(q["additionalProperties"], false, "{q}");

        let g = schema::<GetSummary>();
        assert_eq!(g["properties"]["entity_id"]["description"], "e.g. npc-bartok", "{g}");
        assert_eq!(g["required"], json!(["entity_id"]), "{g}");

        let f = schema::<SearchFacts>();
        assert_eq!(f["properties"]["top_k"]["default"], 10, "{f}");
        assert_eq!(f["properties"]["top_k"]["type"], "integer", "{f}");
        assert_eq!(f["required"], json!(["query"]), "{f}");
    }

    #[test]
    fn store_errors_are_failed() {
        // Natively there is no store: the SDK answers with an error, which
        // `?` turns into a `failed` tool error.
        let err = toolhost_sdk::invoke::<SearchFacts>(r#"{"query":"dragon"}"#).unwrap_err();
        assert!(matches!(&err, ToolError::Failed(m) if m.starts_with("memory store: ")), "{err}");
        let err = toolhost_sdk::invoke::<GetSummary>(r#"{"entity_id":"npc-bartok"}"#).unwrap_err();
        assert!(matches!(&err, ToolError::Failed(m) if m.starts_with("memory store: ")), "{err}");
    }
}
