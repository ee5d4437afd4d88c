//! The `ruleslookup` plugin: ranked keyword search (BM25) and lookup by id over
//! the D&D 5e System Reference Document 5.1. The data and its inverted index
//! are built into the component at compile time (see `build.rs`).
//!
//! This work includes material taken from the System Reference Document 5.1
//! ("SRD 5.1") by Wizards of the Coast LLC, licensed under CC-BY-4.0; see
//! `ATTRIBUTION.md`.

pub mod text;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_sdk::schema::not_null;
use toolhost_sdk::{ToolError, TypedTool};

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
#[derive(Debug, Serialize, JsonSchema)]
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

// The arguments of `search_rules`. No doc comment here: it would describe
// the whole arguments object in the schema.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    /// Keywords, e.g. "grapple", "blinded", "opportunity attack".
    #[schemars(length(min = 1, max = 500))]
    query: String,
    /// Game system; only "dnd5e" (SRD 5.1) is available.
    #[schemars(transform = not_null)]
    system: Option<String>,
    /// Only return rules of this category.
    #[schemars(transform = not_null, extend("enum" = CATEGORIES))]
    category: Option<String>,
    /// Most results to return (default 5).
    #[schemars(transform = not_null, range(min = 1, max = 20))]
    limit: Option<usize>,
}

/// What `search_rules` returns.
#[derive(Serialize, JsonSchema)]
struct SearchResult {
    /// The query, as given.
    query: String,
    /// The best matches, best first.
    results: Vec<Hit>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    /// Rule id such as "condition-blinded" or "spell-fireball"; search_rules returns ids.
    #[schemars(length(min = 1, max = 200))]
    id: String,
}

/// What `get_rule` returns.
#[derive(Serialize, JsonSchema)]
struct RuleResult {
    /// Rule id.
    id: &'static str,
    /// Display name.
    name: &'static str,
    /// Category.
    category: &'static str,
    /// The rule text (Markdown).
    text: &'static str,
    /// The CC-BY-4.0 attribution that must accompany the text.
    attribution: &'static str,
}

/// `search_rules`: BM25 keyword search.
struct SearchRules;

impl TypedTool for SearchRules {
    type Args = SearchArgs;
    type Output = SearchResult;
    const NAME: &'static str = "search_rules";
    const DESCRIPTION: &'static str = "Keyword search across the D&D 5e SRD 5.1 rules: conditions, combat, spells and general rules. Returns ranked rule ids with snippets; fetch the full text with get_rule.";
    const ESTIMATED_MS: u32 = 30;
    const MAX_MS: u32 = 100;
    const IDEMPOTENT: bool = true;
    const CACHEABLE_SECONDS: u32 = 3600;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"query":"grapple"}"#);

    fn call(args: SearchArgs) -> Result<SearchResult, ToolError> {
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
            return Err(ToolError::InvalidInput(format!(
                "unknown category {c:?}; use one of {}",
                CATEGORIES.join(", ")
            )));
        }
        if text::terms(&args.query).is_empty() {
            return Err(ToolError::InvalidInput("query has no searchable words".into()));
        }
        let limit = args.limit.unwrap_or(5).clamp(1, 20);
        let results = search(&args.query, args.category.as_deref(), limit);
        Ok(SearchResult { query: args.query, results })
    }
}

/// `get_rule`: one rule's full text by id.
struct GetRule;

impl TypedTool for GetRule {
    type Args = GetArgs;
    type Output = RuleResult;
    const NAME: &'static str = "get_rule";
    const DESCRIPTION: &'static str = "Retrieve the full text of a D&D 5e SRD rule by its id (e.g. condition-blinded, spell-fireball). Use search_rules first to discover ids.";
    const ESTIMATED_MS: u32 = 5;
    const MAX_MS: u32 = 20;
    const IDEMPOTENT: bool = true;
    const CACHEABLE_SECONDS: u32 = 3600;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"id":"condition-blinded"}"#);

    fn call(args: GetArgs) -> Result<RuleResult, ToolError> {
        match get(args.id.trim()) {
            Some(d) => Ok(RuleResult {
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
}

toolhost_sdk::plugin!(SearchRules, GetRule);

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

    #[test]
    fn tools_answer_through_the_sdk() {
        use toolhost_sdk::{Content, invoke};
        let out = invoke::<SearchRules>(r#"{"query":"blinded","limit":1}"#).unwrap();
        let [Content::Json(out)] = &out[..] else { panic!("expected one JSON block") };
        assert!(
            out.starts_with(r#"{"query":"blinded","results":[{"id":"condition-blinded","name":"Blinded","#),
            "{out}"
        );
        let out = invoke::<GetRule>(r#"{"id":" spell-fireball "}"#).unwrap();
        let [Content::Json(out)] = &out[..] else { panic!("expected one JSON block") };
        assert!(out.starts_with(r#"{"id":"spell-fireball","name":"Fireball","category":"spell","text":"#), "{out}");
        assert!(out.ends_with(r#""attribution":"SRD 5.1 by Wizards of the Coast LLC, CC-BY-4.0"}"#), "{out}");

        let err = invoke::<GetRule>(r#"{"id":"fireball"}"#).unwrap_err();
        assert!(
            matches!(&err, ToolError::NotFound(m) if m.starts_with("no rule with id \"fireball\"; did you mean ") && m.contains("spell-fireball")),
            "{err}"
        );
        let err = invoke::<SearchRules>(r#"{"query":"grapple","system":"pf2e"}"#).unwrap_err();
        assert!(matches!(&err, ToolError::InvalidInput(m) if m.starts_with("no rules for system \"pf2e\"")), "{err}");
        let err = invoke::<SearchRules>(r#"{"query":"grapple","category":"feats"}"#).unwrap_err();
        assert_eq!(
            err,
            ToolError::invalid_input("unknown category \"feats\"; use one of condition, combat, spell, general")
        );
        let err = invoke::<SearchRules>(r#"{"query":"the of"}"#).unwrap_err();
        assert_eq!(err, ToolError::invalid_input("query has no searchable words"));
    }

    #[test]
    fn schemas_keep_their_constraints() {
        use serde_json::json;
        let search: serde_json::Value =
            serde_json::from_str(&toolhost_sdk::describe::<SearchRules>().input_schema).unwrap();
        let p = &search["properties"];
        assert_eq!((p["query"]["minLength"].as_u64(), p["query"]["maxLength"].as_u64()), (Some(1), Some(500)));
        assert_eq!(p["system"]["type"], "string", "no null: {search}");
        assert_eq!(p["category"]["enum"], json!(CATEGORIES), "{search}");
        assert_eq!(p["category"]["description"], "Only return rules of this category.", "{search}");
        assert_eq!((p["limit"]["type"].as_str(), p["limit"]["minimum"].as_u64()), (Some("integer"), Some(1)));
        assert_eq!(p["limit"]["maximum"], 20, "{search}");
        assert_eq!(search["required"], json!(["query"]), "{search}");
        assert_eq!(search["additionalProperties"], false, "{search}");
        let get: serde_json::Value = serde_json::from_str(&toolhost_sdk::describe::<GetRule>().input_schema).unwrap();
        assert_eq!(get["properties"]["id"]["maxLength"], 200, "{get}");
        assert_eq!(get["required"], json!(["id"]), "{get}");
    }
}
