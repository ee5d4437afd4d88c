//! The `ruleslookup` plugin: ranked keyword search (BM25) and lookup by id over
//! the D&D 5e System Reference Document 5.1. The data and its inverted index
//! are built into the component at compile time (see `build.rs`).
//!
//! This work includes material taken from the System Reference Document 5.1
//! ("SRD 5.1") by Wizards of the Coast LLC, licensed under CC-BY-4.0; see
//! `ATTRIBUTION.md`.

pub mod text;

use serde::{Deserialize, Serialize};

/// One rule document.
pub struct Doc {
    /// Stable id such as `condition-blinded` or `spell-fireball`.
    pub id: &'static str,
    /// Display name.
    pub name: &'static str,
    /// `condition`, `combat`, `spell` or `general`.
    pub category: &'static str,
    /// The rule text (Markdown).
    pub text: &'static str,
    /// Weighted length in terms, for BM25 normalisation.
    pub len: u32,
}

/// Generated tables: `DOCS`, `TERMS`, `POSTINGS`, `AVG_LEN`, `ATTRIBUTION`.
#[allow(clippy::all)]
pub mod data {
    use super::Doc;
    include!(concat!(env!("OUT_DIR"), "/srd.rs"));
}

/// The categories rules are filed under.
pub const CATEGORIES: &[&str] = &["condition", "combat", "spell", "general"];
/// Game systems this data set answers for (matched case-insensitively).
pub const SYSTEMS: &[&str] = &["dnd5e", "5e", "srd", "srd5.1", "dnd"];

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A ranked search hit.
#[derive(Debug, Serialize)]
pub struct Hit {
    /// Rule id, for `get_rule`.
    pub id: &'static str,
    /// Display name.
    pub name: &'static str,
    /// Category.
    pub category: &'static str,
    /// BM25 score, higher is better.
    pub score: f64,
    /// The start of the rule text.
    pub snippet: String,
}

fn snippet(text: &str) -> String {
    const MAX: usize = 200;
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.len() <= MAX {
        return flat;
    }
    let mut end = MAX;
    while !flat.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &flat[..end])
}

/// Ranks documents for `query` with BM25, optionally within one category.
pub fn search(query: &str, category: Option<&str>, limit: usize) -> Vec<Hit> {
    let n = data::DOCS.len() as f64;
    let mut scores = vec![0f64; data::DOCS.len()];
    let mut terms = text::terms(query);
    terms.sort();
    terms.dedup();
    for term in &terms {
        let Ok(t) = data::TERMS.binary_search(&term.as_str()) else { continue };
        let postings = data::POSTINGS[t];
        let df = postings.len() as f64;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        for &(doc, tf) in postings {
            let tf = f64::from(tf);
            let len = f64::from(data::DOCS[doc as usize].len);
            scores[doc as usize] += idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / data::AVG_LEN));
        }
    }
    // A query that is exactly a rule's name puts that rule first.
    let q = query.trim().to_lowercase();
    for (i, doc) in data::DOCS.iter().enumerate() {
        if scores[i] > 0.0 && doc.name.to_lowercase() == q {
            scores[i] += 100.0;
        }
    }
    let mut ranked: Vec<usize> = (0..data::DOCS.len())
        .filter(|&i| scores[i] > 0.0)
        .filter(|&i| category.is_none_or(|c| data::DOCS[i].category == c))
        .collect();
    ranked.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    ranked
        .into_iter()
        .take(limit)
        .map(|i| {
            let d = &data::DOCS[i];
            Hit {
                id: d.id,
                name: d.name,
                category: d.category,
                score: (scores[i] * 1000.0).round() / 1000.0,
                snippet: snippet(d.text),
            }
        })
        .collect()
}

/// Finds a rule by id.
pub fn get(id: &str) -> Option<&'static Doc> {
    data::DOCS.binary_search_by(|d| d.id.cmp(id)).ok().map(|i| &data::DOCS[i])
}

/// Ids that look like what the caller meant: same suffix after the category
/// prefix, or containing the query.
pub fn suggest(id: &str) -> Vec<&'static str> {
    let id = id.trim().to_lowercase();
    let tail = id.split_once('-').map_or(id.as_str(), |(_, t)| t);
    data::DOCS
        .iter()
        .filter(|d| d.id.ends_with(&format!("-{id}")) || d.id.ends_with(&format!("-{tail}")) || d.id.contains(&id))
        .map(|d| d.id)
        .take(5)
        .collect()
}

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "plugin" });
}

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};

#[derive(Deserialize)]
struct SearchArgs {
    query: String,
    system: Option<String>,
    category: Option<String>,
    limit: Option<usize>,
}

#[derive(Serialize)]
struct SearchResult<'a> {
    query: &'a str,
    results: Vec<Hit>,
}

#[derive(Deserialize)]
struct GetArgs {
    id: String,
}

#[derive(Serialize)]
struct RuleResult {
    id: &'static str,
    name: &'static str,
    category: &'static str,
    text: &'static str,
    attribution: &'static str,
}

fn parse<'a, T: Deserialize<'a>>(arguments: &'a str) -> Result<T, ToolError> {
    serde_json::from_str(arguments).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

fn json(value: &impl Serialize) -> Result<Vec<Content>, ToolError> {
    serde_json::to_string(value).map(|s| vec![Content::Json(s)]).map_err(|e| ToolError::Failed(e.to_string()))
}

fn search_rules(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let args: SearchArgs = parse(arguments)?;
    if let Some(system) = &args.system
        && !SYSTEMS.iter().any(|s| s.eq_ignore_ascii_case(system.trim()))
    {
        return Err(ToolError::InvalidInput(format!(
            "no rules for system {system:?}; this plugin covers D&D 5e (SRD 5.1): use \"dnd5e\" or leave system out"
        )));
    }
    if let Some(c) = &args.category
        && !CATEGORIES.contains(&c.as_str())
    {
        return Err(ToolError::InvalidInput(format!("unknown category {c:?}; use one of {}", CATEGORIES.join(", "))));
    }
    if text::terms(&args.query).is_empty() {
        return Err(ToolError::InvalidInput("query has no searchable words".into()));
    }
    let limit = args.limit.unwrap_or(5).clamp(1, 20);
    json(&SearchResult { query: &args.query, results: search(&args.query, args.category.as_deref(), limit) })
}

fn get_rule(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let args: GetArgs = parse(arguments)?;
    match get(args.id.trim()) {
        Some(d) => json(&RuleResult {
            id: d.id,
            name: d.name,
            category: d.category,
            text: d.text,
            attribution: "SRD 5.1 by Wizards of the Coast LLC, CC-BY-4.0",
        }),
        None => {
            let close = suggest(&args.id);
            let hint = if close.is_empty() {
                "use search_rules to find ids".to_string()
            } else {
                format!("did you mean {}?", close.join(", "))
            };
            Err(ToolError::NotFound(format!("no rule with id {:?}; {hint}", args.id)))
        }
    }
}

const SEARCH_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "query": { "type": "string", "minLength": 1, "maxLength": 500, "description": "Keywords, e.g. \"grapple\", \"blinded\", \"opportunity attack\"." },
    "system": { "type": "string", "description": "Game system; only \"dnd5e\" (SRD 5.1) is available." },
    "category": { "type": "string", "enum": ["condition", "combat", "spell", "general"], "description": "Only return rules of this category." },
    "limit": { "type": "integer", "minimum": 1, "maximum": 20, "description": "Most results to return (default 5)." }
  },
  "required": ["query"],
  "additionalProperties": false
}"#;

const GET_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "id": { "type": "string", "minLength": 1, "maxLength": 200, "description": "Rule id such as \"condition-blinded\" or \"spell-fireball\"; search_rules returns ids." }
  },
  "required": ["id"],
  "additionalProperties": false
}"#;

struct Plugin;

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![
            ToolInfo {
                name: "search_rules".into(),
                description: "Keyword search across the D&D 5e SRD 5.1 rules: conditions, combat, spells and general rules. Returns ranked rule ids with snippets; fetch the full text with get_rule.".into(),
                input_schema: SEARCH_SCHEMA.into(),
                estimated_duration_ms: 30,
                max_duration_ms: 100,
                idempotent: true,
                cacheable_seconds: 3600,
                probe_arguments: Some(r#"{"query":"grapple"}"#.into()),
            },
            ToolInfo {
                name: "get_rule".into(),
                description: "Retrieve the full text of a D&D 5e SRD rule by its id (e.g. condition-blinded, spell-fireball). Use search_rules first to discover ids.".into(),
                input_schema: GET_SCHEMA.into(),
                estimated_duration_ms: 5,
                max_duration_ms: 20,
                idempotent: true,
                cacheable_seconds: 3600,
                probe_arguments: Some(r#"{"id":"condition-blinded"}"#.into()),
            },
        ]
    }

    fn call(name: String, arguments: String) -> Result<Vec<Content>, ToolError> {
        match name.as_str() {
            "search_rules" => search_rules(&arguments),
            "get_rule" => get_rule(&arguments),
            other => Err(ToolError::NotFound(format!("ruleslookup has no tool {other:?}"))),
        }
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blinded_ranks_the_condition_first() {
        let hits = search("blinded", None, 5);
        assert_eq!(hits[0].id, "condition-blinded");
    }

    #[test]
    fn multiword_queries_rank_the_right_rule() {
        assert_eq!(search("opportunity attack", None, 3)[0].id, "combat-making-an-attack");
        assert_eq!(search("fireball", None, 3)[0].id, "spell-fireball");
        assert_eq!(search("cover", Some("combat"), 3)[0].id, "combat-cover");
    }

    #[test]
    fn category_filter_excludes_others() {
        let hits = search("fire damage", Some("spell"), 20);
        assert!(!hits.is_empty());
        assert!(hits.iter().all(|h| h.category == "spell"));
    }

    #[test]
    fn ids_resolve_and_unknown_ids_get_suggestions() {
        assert_eq!(get("spell-fireball").unwrap().name, "Fireball");
        assert!(get("condition-blinded").unwrap().text.contains("can't see"));
        assert!(get("fireball").is_none());
        assert!(suggest("fireball").contains(&"spell-fireball"));
    }

    #[test]
    fn every_category_has_rules() {
        for c in CATEGORIES {
            assert!(data::DOCS.iter().any(|d| d.category == *c), "{c}");
        }
    }

    #[test]
    fn unknown_words_find_nothing() {
        assert!(search("xyzzyplugh", None, 5).is_empty());
    }
}
