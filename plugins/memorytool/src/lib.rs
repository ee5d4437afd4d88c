//! The `memorytool` plugin: the seed's four memory tools over the host's
//! `memory` capability (session transcripts, facts, the knowledge graph).
//! The data lives in the host's SQLite store; this plugin shapes queries and
//! answers for the model.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "memory-plugin" });
}

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};
use bindings::toolhost::plugin::memory;

struct Plugin;

fn parse<'a, T: Deserialize<'a>>(arguments: &'a str) -> Result<T, ToolError> {
    serde_json::from_str(arguments).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

fn json_out(value: &impl Serialize) -> Result<Vec<Content>, ToolError> {
    serde_json::to_string(value).map(|s| vec![Content::Json(s)]).map_err(|e| ToolError::Failed(e.to_string()))
}

fn store_err(e: String) -> ToolError {
    ToolError::Failed(format!("memory store: {e}"))
}

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

#[derive(Deserialize)]
struct SearchSessions {
    query: String,
    session_id: Option<String>,
    limit: Option<u32>,
}

fn search_sessions(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let a: SearchSessions = parse(arguments)?;
    let hits = memory::search_sessions(&a.query, a.session_id.as_deref(), a.limit.unwrap_or(10).clamp(1, 50))
        .map_err(store_err)?;
    json_out(&json!({"query": a.query, "results": hits.iter().map(line_json).collect::<Vec<_>>()}))
}

#[derive(Deserialize)]
struct QueryEntities {
    name: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    limit: Option<u32>,
}

fn query_entities(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let a: QueryEntities = parse(arguments)?;
    let found = memory::query_entities(a.name.as_deref(), a.kind.as_deref(), a.limit.unwrap_or(20).clamp(1, 100))
        .map_err(store_err)?;
    json_out(&json!({"entities": found.iter().map(entity_json).collect::<Vec<_>>()}))
}

#[derive(Deserialize)]
struct GetSummary {
    entity_id: String,
}

fn get_summary(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let a: GetSummary = parse(arguments)?;
    let Some(entity) = memory::get_entity(&a.entity_id).map_err(store_err)? else {
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
    let rels = memory::relationships(&entity.id).map_err(store_err)?;
    let mut connected = Vec::new();
    let mut relationships = Vec::new();
    for r in &rels {
        let other_id = if r.source == entity.id { &r.target } else { &r.source };
        let other = memory::get_entity(other_id).map_err(store_err)?;
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
    json_out(&json!({"entity": entity_json(&entity), "relationships": relationships, "connected": connected}))
}

#[derive(Deserialize)]
struct SearchFacts {
    query: String,
    top_k: Option<u32>,
}

fn search_facts(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let a: SearchFacts = parse(arguments)?;
    let k = a.top_k.unwrap_or(10).clamp(1, 50);
    let facts = memory::search_facts(&a.query, k).map_err(store_err)?;
    if !facts.is_empty() {
        let list: Vec<Value> = facts
            .iter()
            .map(|f| json!({"id": f.id, "text": f.text, "session_id": f.session_id, "score": (f.score * 1000.0).round() / 1000.0}))
            .collect();
        return json_out(&json!({"query": a.query, "source": "facts", "facts": list}));
    }
    // No fact matched (and no embedding index exists): fall back to the
    // session transcripts, as the seed specifies.
    let lines = memory::search_sessions(&a.query, None, k).map_err(store_err)?;
    json_out(
        &json!({"query": a.query, "source": "transcripts", "facts": lines.iter().map(line_json).collect::<Vec<_>>()}),
    )
}

fn tool(name: &str, description: &str, schema: &str, p50: u32, max: u32, probe: &str) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: description.into(),
        input_schema: schema.into(),
        estimated_duration_ms: p50,
        max_duration_ms: max,
        idempotent: true,
        cacheable_seconds: 0,
        probe_arguments: Some(probe.into()),
    }
}

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![
            tool(
                "search_sessions",
                "Full-text search across session transcripts. Optionally restrict to a single session.",
                r#"{"type":"object","properties":{"query":{"type":"string","minLength":1,"maxLength":500},"session_id":{"type":"string","description":"Only this session, e.g. session-2."},"limit":{"type":"integer","minimum":1,"maximum":50}},"required":["query"],"additionalProperties":false}"#,
                100,
                500,
                r#"{"query":"dragon"}"#,
            ),
            tool(
                "query_entities",
                "Find entities in the campaign's knowledge graph by name and/or type (npc, pc, location, faction, item).",
                r#"{"type":"object","properties":{"name":{"type":"string","maxLength":200,"description":"Part of the name, case-insensitive."},"type":{"type":"string","maxLength":50,"description":"npc, pc, location, faction or item."},"limit":{"type":"integer","minimum":1,"maximum":100}},"additionalProperties":false}"#,
                50,
                200,
                r#"{"type":"npc"}"#,
            ),
            tool(
                "get_summary",
                "Retrieve a full identity snapshot of a knowledge-graph entity: attributes, relationships and connected entities. Use query_entities to find ids.",
                r#"{"type":"object","properties":{"entity_id":{"type":"string","minLength":1,"maxLength":200,"description":"e.g. npc-bartok"}},"required":["entity_id"],"additionalProperties":false}"#,
                80,
                300,
                r#"{"entity_id":"npc-bartok"}"#,
            ),
            tool(
                "search_facts",
                "Full-text search for facts recorded across session history. Falls back to transcript search when no fact matches.",
                r#"{"type":"object","properties":{"query":{"type":"string","minLength":1,"maxLength":500},"top_k":{"type":"integer","minimum":1,"maximum":50,"default":10}},"required":["query"],"additionalProperties":false}"#,
                200,
                800,
                r#"{"query":"dragon"}"#,
            ),
        ]
    }

    fn call(name: String, arguments: String) -> Result<Vec<Content>, ToolError> {
        match name.as_str() {
            "search_sessions" => search_sessions(&arguments),
            "query_entities" => query_entities(&arguments),
            "get_summary" => get_summary(&arguments),
            "search_facts" => search_facts(&arguments),
            other => Err(ToolError::NotFound(format!("memorytool has no tool {other:?}"))),
        }
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);
