//! The bridge's unit tests.

use super::*;
use crate::budget::{AgentProfile, Budget, BudgetConfig};
use crate::run::*;
use crate::tool::{CallStats, Provider, ProviderKind, ToolDef, ToolMeta};
use serde_json::json;

#[test]
fn gemini_schemas_keep_only_the_openapi_subset() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "expression": {"type": "string", "minLength": 1, "maxLength": 200, "description": "dice"},
            "seed": {"type": "integer", "format": "uint64", "minimum": 0},
            "count": {"type": "integer", "format": "int32", "exclusiveMinimum": 0},
            "note": {"type": ["string", "null"]},
            "mode": {"const": "fast"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "uniqueItems": true},
            "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "numbers": {"enum": [1, 2]},
        },
        "required": ["expression", "ghost"],
    });
    assert_eq!(
        gemini_schema(&schema),
        json!({
            "type": "OBJECT",
            "properties": {
                "expression": {"type": "STRING", "minLength": 1, "maxLength": 200, "description": "dice"},
                "seed": {"type": "INTEGER", "minimum": 0},
                "count": {"type": "INTEGER", "format": "int32"},
                "note": {"type": "STRING", "nullable": true},
                "mode": {"type": "STRING", "enum": ["fast"]},
                "tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["a", "b"]}},
                "either": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
                "numbers": {},
            },
            "required": ["expression"],
        })
    );
    assert_eq!(gemini_schema(&json!(true)), json!({}), "a boolean schema says nothing Gemini reads");
}

#[test]
fn outputs_are_bounded_and_binary_content_is_summarized() {
    let out = |content| ToolOutput { content, structured: None, stats: CallStats::default() };
    let (v, cut_) = render(
        &out(vec![
            Content::Text("a".into()),
            Content::Image { mime_type: "image/png".into(), data: vec![0; 5000] },
            Content::Audio { mime_type: "audio/wav".into(), data: vec![0; 7] },
        ]),
        1024,
    );
    assert_eq!(v, json!("a\n[image: image/png, 5000 bytes, not shown]\n[audio: audio/wav, 7 bytes, not played]"));
    assert!(!cut_);
    let (v, cut_) = render(&out(vec![Content::Text("é".repeat(5000))]), 1000);
    let s = v.as_str().unwrap();
    assert!(cut_ && s.len() <= 1000 && s.ends_with("[output truncated: 10000 bytes in all]"), "{s}");
    let (v, cut_) = render(&out(vec![Content::Json(json!({"total": 7}))]), 1000);
    assert_eq!((v, cut_), (json!({"total": 7}), false), "a structured result stays JSON");
    let (v, cut_) = render(&out(vec![Content::Json(json!({"big": "x".repeat(2000)}))]), 500);
    assert!(cut_ && v.as_str().is_some_and(|s| s.len() <= 500), "{v}");
}

#[test]
fn remembered_ids_are_bounded() {
    let mut ids = Ids::default();
    assert!(ids.insert("a") && !ids.insert("a"));
    for i in 0..REMEMBERED_IDS {
        ids.insert(&i.to_string());
    }
    assert!(!ids.contains("a"), "the oldest is forgotten");
    assert_eq!(ids.set.len(), REMEMBERED_IDS);
}

/// A provider whose tools return a picture, a long text, and nothing.
#[derive(Debug)]
struct Fake(Vec<ToolDef>);

impl Provider for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn kind(&self) -> ProviderKind {
        ProviderKind::Other
    }
    fn tools(&self) -> &[ToolDef] {
        &self.0
    }
    fn call(&self, tool: &str, _: &Value, _: &CallContext) -> Result<ToolOutput, CallError> {
        let content = match tool {
            "picture" => vec![
                Content::Text("a map".into()),
                Content::Image { mime_type: "image/png".into(), data: vec![1; 300_000] },
            ],
            _ => vec![Content::Text("x".repeat(100_000))],
        };
        Ok(ToolOutput { content, structured: None, stats: CallStats::default() })
    }
}

fn bridge(format: Format) -> Bridge {
    let agents = vec![AgentProfile {
        name: "npc".into(),
        budget_tier: Tier::Deep,
        tools: vec!["picture".into(), "chatty".into(), "9lives".into()],
        instructions: None,
        rate_limit: None,
        max_calls_per_turn: None,
        personality: None,
        engine: None,
    }];
    let runtime = toolhost_core::runtime::Runtime::new(toolhost_core::runtime::Limits::default(), None).unwrap();
    let host = Pipeline::with_budget(runtime, Budget::new(BudgetConfig::default(), agents));
    let def = |name: &str| ToolDef {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema: json!({"type": "object"}),
        meta: ToolMeta { estimated_duration_ms: Some(5), ..ToolMeta::default() },
        ..ToolDef::default()
    };
    host.registry().upsert(Arc::new(Fake(vec![def("picture"), def("chatty"), def("9lives")]))).unwrap();
    assert!(matches!(
        Bridge::new(
            Arc::new(Pipeline::new(
                toolhost_core::runtime::Runtime::new(toolhost_core::runtime::Limits::default(), None).unwrap()
            )),
            "npc",
            format
        ),
        Err(BridgeError::Agent(_))
    ));
    Bridge::new(Arc::new(host), "npc", format).unwrap()
}

#[test]
fn results_through_the_bridge_are_summarized_and_bounded() {
    let b = bridge(Format::OpenAiRealtime).with_max_output(4096);
    let out = b.handle_call("picture", "{}");
    assert_eq!(out.result, Ok(json!("a map\n[image: image/png, 300000 bytes, not shown]")));
    let out = b.handle_call("chatty", "");
    assert!(out.truncated && out.output_text().len() <= 4096, "{}", out.output_text().len());
    // No parameters: Gemini declares none; a name starting with a digit is left out.
    let g = bridge(Format::GeminiLive);
    let decl = g.declarations();
    let names: Vec<&str> =
        decl[0]["functionDeclarations"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["chatty", "picture"]);
    assert!(decl[0]["functionDeclarations"][0].get("parameters").is_none(), "{decl}");
    assert_eq!(b.declarations().as_array().unwrap().len(), 3, "OpenAI takes any toolhost name");
}

#[test]
fn hostile_events_get_clear_errors_and_never_run_anything() {
    let b = bridge(Format::OpenAiRealtime);
    for event in [
        json!({"type": "response.function_call_arguments.done", "name": "picture", "arguments": "{}"}),
        json!({"type": "response.function_call_arguments.done", "call_id": 7, "name": "picture"}),
        json!({"type": "response.output_item.done", "item": {"type": "function_call", "call_id": "x".repeat(300)}}),
    ] {
        let e = b.handle_event(&event).unwrap_err();
        assert!(matches!(e, BridgeError::MalformedEvent { .. }), "{e}");
        assert!(e.to_string().contains("call_id"), "{e}");
    }
    for ignored in [json!({"type": "response.audio.delta", "delta": "AAAA"}), json!(42), json!({"no": "type"})] {
        assert_eq!(b.handle_event(&ignored), Ok(None));
    }
    // A call with an id but no name, or with arguments that are not an
    // object, is answered with an error the model can read.
    let r = b.handle_event(&json!({"type": "response.function_call_arguments.done", "call_id": "c1"})).unwrap();
    assert!(r.unwrap()[0]["item"]["output"].as_str().unwrap().contains("invalid_input"));
    let r = b.handle_call("picture", "[1, 2]");
    assert_eq!(r.code(), Some("invalid_input"));
    assert!(r.output_text().contains("not an array"), "{}", r.output_text());
    let huge = format!("{{\"x\": \"{}\"}}", "y".repeat(MAX_ARGUMENTS_BYTES));
    assert_eq!(b.handle_call("picture", &huge).code(), Some("invalid_input"));
    assert_eq!(b.handle_call(&"n".repeat(100_000), "{}").code(), Some("not_found"));
    let g = bridge(Format::GeminiLive);
    let e = g
        .handle_event(&json!({"toolCall": {"functionCalls": [{"id": "a", "name": "picture"}, {"name": "chatty"}]}}))
        .unwrap_err();
    assert!(e.to_string().contains("functionCalls[1]: no id"), "{e}");
    assert!(g.handle_event(&json!({"toolCall": {"functionCalls": "roll"}})).is_err());
    assert!(g.handle_event(&json!({"toolCallCancellation": {}})).is_err());
    assert_eq!(g.handle_event(&json!({"serverContent": {"turnComplete": true}})), Ok(None));
    assert_eq!(
        g.update_tier(&"x".repeat(MAX_UTTERANCE_BYTES + 1), TurnCues::default()).unwrap_err(),
        BridgeError::UtteranceTooLong { bytes: MAX_UTTERANCE_BYTES + 1, limit: MAX_UTTERANCE_BYTES }
    );
}

#[test]
fn gemini_calls_past_the_per_event_cap_and_cancelled_calls() {
    let g = bridge(Format::GeminiLive);
    let calls: Vec<Value> =
        (0..MAX_CALLS_PER_EVENT + 2).map(|i| json!({"id": format!("function-call-{i}"), "name": "picture"})).collect();
    let r = g.handle_event(&json!({"toolCall": {"functionCalls": calls}})).unwrap().unwrap();
    let responses = r[0]["toolResponse"]["functionResponses"].as_array().unwrap();
    assert_eq!(responses.len(), MAX_CALLS_PER_EVENT + 2);
    assert!(responses[0]["response"]["output"].is_string());
    assert_eq!(responses[MAX_CALLS_PER_EVENT]["response"]["error"]["code"], "capacity_exceeded");
    // Cancelled before it arrived: not run, not answered.
    assert_eq!(g.handle_event(&json!({"toolCallCancellation": {"ids": ["function-call-99"]}})), Ok(None));
    let r = g.handle_event(&json!({"toolCall": {"functionCalls": [{"id": "function-call-99", "name": "picture"}]}}));
    assert_eq!(r, Ok(None));
    // Answered once only.
    let again = g.handle_event(&json!({"toolCall": {"functionCalls": [{"id": "function-call-0", "name": "picture"}]}}));
    assert_eq!(again, Ok(None));
}
