//! Tools as voice engines declare them: OpenAI Realtime functions, Gemini
//! Live function declarations with their schemas cut to Gemini's OpenAPI
//! subset (the S2S bridge's declarations, the voice relay's, and the
//! `openai` and `gemini` formats of `POST /mcp/<agent>/turn`).
//!
//! Gemini Live runs a function declared `NON_BLOCKING` while the model
//! keeps talking: a tool whose p50 (measured, else declared) is over the
//! FAST ceiling, or that the operator pinned above FAST, is declared so.

use crate::Pipeline;
use crate::budget::Tier;
use crate::registry::RegisteredTool;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// A tool as an OpenAI Realtime function tool.
pub fn openai_tool(t: &RegisteredTool) -> Value {
    let mut parameters = match &t.def.input_schema {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    parameters.remove("$schema");
    if !parameters.contains_key("type") {
        parameters.insert("type".into(), json!("object"));
    }
    json!({"type": "function", "name": t.def.name, "description": t.def.description, "parameters": parameters})
}

/// OpenAI Realtime's `session.tools` for `tools`.
pub fn openai_tools(tools: &[Arc<RegisteredTool>]) -> Value {
    Value::Array(tools.iter().map(|t| openai_tool(t)).collect())
}

/// Gemini Live's `setup.tools` for `tools` as `agent` sees them (`[]`
/// when none can be declared).
pub fn gemini_tools(host: &Pipeline, agent: Option<&str>, tools: &[Arc<RegisteredTool>]) -> Value {
    let functions: Vec<Value> = tools
        .iter()
        .filter_map(|t| {
            let mut f = gemini_function(t)?;
            if is_slow(host, agent, t) {
                f["behavior"] = json!("NON_BLOCKING");
            }
            Some(f)
        })
        .collect();
    if functions.is_empty() { json!([]) } else { json!([{"functionDeclarations": functions}]) }
}

/// Whether `tool`, as `agent` sees it, is slower than FAST: its p50 over
/// the FAST ceiling, or its tier above FAST. Gemini runs it without
/// blocking the conversation.
pub fn is_slow(host: &Pipeline, agent: Option<&str>, tool: &RegisteredTool) -> bool {
    let status = host.budget().status_for(&tool.def, agent);
    let fast = host.budget().config().ceilings().fast;
    status.tier.is_some_and(|t| t > Tier::Fast) || status.p50.is_some_and(|p| p > fast)
}

/// A tool as a Gemini function declaration; `None` when Gemini would
/// refuse its name.
pub fn gemini_function(t: &RegisteredTool) -> Option<Value> {
    let name = &t.def.name;
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        tracing::warn!(tool = %name, "left out of Gemini declarations: its name must start with a letter or '_'");
        return None;
    }
    let mut f = json!({"name": name, "description": t.def.description});
    let parameters = gemini_schema(&t.def.input_schema);
    let has_properties = parameters.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
    if has_properties {
        f["parameters"] = parameters;
    }
    Some(f)
}

/// Keywords of Gemini's schema (an OpenAPI 3.0 subset) kept as they are.
const GEMINI_KEEP: [&str; 13] = [
    "description",
    "title",
    "nullable",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "pattern",
    "example",
];

/// Formats Gemini knows.
const GEMINI_FORMATS: [&str; 6] = ["int32", "int64", "float", "double", "enum", "date-time"];

/// A JSON Schema in Gemini's subset (see the module documentation).
pub fn gemini_schema(schema: &Value) -> Value {
    let Value::Object(s) = schema else { return json!({}) };
    let mut out = Map::new();
    for key in GEMINI_KEEP {
        if let Some(v) = s.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(v) = s.get("default") {
        out.insert("default".into(), v.clone());
    }
    match s.get("type") {
        Some(Value::String(t)) => {
            out.insert("type".into(), json!(t.to_ascii_uppercase()));
        }
        Some(Value::Array(types)) => {
            let named: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            let non_null: Vec<&str> = named.iter().copied().filter(|t| *t != "null").collect();
            if non_null.len() < named.len() {
                out.insert("nullable".into(), json!(true));
            }
            match non_null.as_slice() {
                [one] => {
                    out.insert("type".into(), json!(one.to_ascii_uppercase()));
                }
                [] => {}
                several => {
                    let any: Vec<Value> = several.iter().map(|t| json!({"type": t.to_ascii_uppercase()})).collect();
                    out.insert("anyOf".into(), Value::Array(any));
                }
            }
        }
        _ => {}
    }
    if let Some(Value::String(f)) = s.get("format")
        && GEMINI_FORMATS.contains(&f.as_str())
    {
        out.insert("format".into(), json!(f));
    }
    match (s.get("enum"), s.get("const")) {
        (Some(Value::Array(values)), _) if values.iter().all(Value::is_string) => {
            out.insert("enum".into(), Value::Array(values.clone()));
        }
        (None, Some(Value::String(c))) => {
            out.insert("enum".into(), json!([c]));
            out.entry("type").or_insert(json!("STRING"));
        }
        _ => {}
    }
    if let Some(Value::Object(props)) = s.get("properties") {
        let props: Map<String, Value> = props.iter().map(|(k, v)| (k.clone(), gemini_schema(v))).collect();
        if !props.is_empty() {
            out.insert("properties".into(), Value::Object(props));
        }
    }
    if let Some(Value::Array(required)) = s.get("required") {
        let known: Vec<Value> = required
            .iter()
            .filter(|r| r.as_str().is_some_and(|r| out.get("properties").and_then(|p| p.get(r)).is_some()))
            .cloned()
            .collect();
        if !known.is_empty() {
            out.insert("required".into(), Value::Array(known));
        }
    }
    if let Some(items @ Value::Object(_)) = s.get("items") {
        out.insert("items".into(), gemini_schema(items));
    }
    if let Some(Value::Array(any)) = s.get("anyOf").or_else(|| s.get("oneOf")) {
        out.insert("anyOf".into(), Value::Array(any.iter().map(gemini_schema).collect()));
    }
    Value::Object(out)
}
