//! The S2S bridge: recorded-shape server events of the OpenAI Realtime API
//! and Gemini Live (`fixtures/bridge/`) fed through `toolhost::bridge`, on
//! a host built through the library as the binary builds it. Declarations
//! follow the turn's tier, calls go through the pipeline (allow-list, tier,
//! turn cap, deadline, audit), failures come back as outputs the model can
//! read, and a closed bridge runs nothing.

use crate::common::CACHE;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::bridge::{Bridge, BridgeError, Format, MAX_TOOL_TIMEOUT};
use toolhost::config::Config;
use toolhost::{CacheChoice, Host, HostBuilder, TurnCues};
use toolhost_test_artifacts::HOSTILE_PATH;

/// Tiers pinned so that measurements made while the tests run never move
/// a tool: roll FAST, get_rule STANDARD, search_rules DEEP.
const CONFIG: &str = r#"
budget:
  pin:
    roll: fast
    get_rule: standard
    search_rules: deep
    sleep: fast
npcs:
  - name: Sage
    budget_tier: deep
    tools: [roll, get_rule, search_rules]
  - name: Terse
    budget_tier: deep
    tools: [roll]
    max_calls_per_turn: 1
  - name: Sleeper
    budget_tier: fast
    tools: [sleep]
audit:
  path: ./audit.jsonl
"#;

const OPENAI_ARGUMENTS_DONE: &str = include_str!("fixtures/bridge/openai_function_call_arguments_done.json");
const OPENAI_OUTPUT_ITEM_DONE: &str = include_str!("fixtures/bridge/openai_response_output_item_done.json");
const GEMINI_TOOL_CALL: &str = include_str!("fixtures/bridge/gemini_tool_call.json");
const GEMINI_CANCELLATION: &str = include_str!("fixtures/bridge/gemini_tool_call_cancellation.json");

/// A host built from [`CONFIG`] in `dir`, with the built-ins and the hostile
/// test plugin (unsigned: allowed explicitly).
fn host(dir: &Path) -> Arc<Host> {
    std::fs::write(dir.join("toolhost.yaml"), CONFIG).unwrap();
    let config = Config::load(&dir.join("toolhost.yaml")).unwrap();
    HostBuilder::new(config)
        .cache(CacheChoice::Dir(CACHE.path().to_path_buf()))
        .state_dir(Some(dir.join("state")))
        .plugins([PathBuf::from(HOSTILE_PATH)])
        .allow_unsigned(true)
        .build()
        .unwrap()
        .host
}

fn fixture(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn hello() -> TurnCues {
    TurnCues::default()
}

/// The declared function names of a declare event, in either format.
fn declared(event: &Value) -> Vec<String> {
    let list = match event.get("type") {
        Some(_) => event["session"]["tools"].as_array().unwrap().clone(),
        None => event["setup"]["tools"][0]["functionDeclarations"].as_array().cloned().unwrap_or_default(),
    };
    list.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// The output the model reads, as JSON, from the client events that answer
/// one call: OpenAI's `function_call_output` text parsed, or Gemini's
/// `response` object.
fn output_of(events: &[Value]) -> Value {
    match events {
        [create, respond] => {
            assert_eq!(create["type"], "conversation.item.create");
            assert_eq!(create["item"]["type"], "function_call_output");
            assert_eq!(respond, &json!({"type": "response.create"}));
            let text = create["item"]["output"].as_str().unwrap();
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
        }
        [response] => {
            let r = response["toolResponse"]["functionResponses"].as_array().unwrap();
            assert_eq!(r.len(), 1, "{response}");
            r[0]["response"].clone()
        }
        other => panic!("unexpected answer {other:?}"),
    }
}

/// A call event of `format` for `name` with raw `arguments` (OpenAI: the
/// JSON text as sent; Gemini: parsed when it parses, else as a string).
fn call_event(format: Format, id: &str, name: &str, arguments: &str) -> Value {
    match format {
        Format::OpenAiRealtime => json!({
            "event_id": format!("event_{id}"),
            "type": "response.function_call_arguments.done",
            "response_id": "resp_C9wVsQ2tW8uXa3bYc4dEf",
            "item_id": format!("item_{id}"),
            "output_index": 0,
            "call_id": format!("call_{id}"),
            "name": name,
            "arguments": arguments,
        }),
        Format::GeminiLive => {
            let args = serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.into()));
            json!({"toolCall": {"functionCalls": [{"id": format!("function-call-{id}"), "name": name, "args": args}]}})
        }
    }
}

fn answer(b: &Bridge, event: &Value) -> Value {
    output_of(&b.handle_event(event).unwrap().expect("a call event is answered"))
}

const FORMATS: [Format; 2] = [Format::OpenAiRealtime, Format::GeminiLive];

#[test]
fn declarations_follow_the_turns_tier_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    for format in FORMATS {
        let b = Bridge::new(host.pipeline().clone(), "Sage", format).unwrap();
        // Before any utterance: the agent's ceiling.
        assert_eq!(declared(&b.declare_event()), ["get_rule", "roll", "search_rules"], "{format:?}");

        let fast = b.update_tier("hello", hello()).unwrap();
        assert_eq!(fast.tier.tier.as_str(), "fast");
        let event = fast.declare.expect("the visible set changed: re-declare");
        assert_eq!(declared(&event), ["roll"], "{format:?}: {event}");
        match format {
            Format::OpenAiRealtime => {
                assert_eq!(event["type"], "session.update");
                assert_eq!(event["session"]["type"], "realtime");
                assert_eq!(event["session"]["tool_choice"], "auto");
                let roll = &event["session"]["tools"][0];
                assert_eq!(roll["type"], "function");
                assert!(roll["description"].as_str().unwrap().contains("dice"), "{roll}");
                assert_eq!(roll["parameters"]["type"], "object");
                assert_eq!(roll["parameters"]["required"], json!(["expression"]));
                assert!(roll["parameters"].get("$schema").is_none(), "{roll}");
                assert_eq!(b.declarations(), event["session"]["tools"]);
            }
            Format::GeminiLive => {
                let roll = &event["setup"]["tools"][0]["functionDeclarations"][0];
                assert_eq!(roll["parameters"]["type"], "OBJECT");
                assert_eq!(roll["parameters"]["properties"]["expression"]["type"], "STRING");
                assert_eq!(roll["parameters"]["required"], json!(["expression"]));
                let text = event.to_string();
                for dropped in ["$schema", "additionalProperties", "uint64"] {
                    assert!(!text.contains(dropped), "{dropped} left in {text}");
                }
                assert_eq!(b.declarations(), event["setup"]["tools"]);
            }
        }

        // Same set: nothing to re-declare.
        let again = b.update_tier("and hello again", hello()).unwrap();
        assert_eq!((again.tier.tier.as_str(), again.declare), ("fast", None));

        let deep = b.update_tier("Think carefully about the fireball rules", hello()).unwrap();
        assert_eq!(deep.tier.tier.as_str(), "deep", "{:?}", deep.tier);
        assert!(deep.tier.reason.contains("think carefully"), "{:?}", deep.tier);
        let event = deep.declare.expect("DEEP shows more");
        assert_eq!(declared(&event), ["get_rule", "roll", "search_rules"], "{format:?}");
        assert_eq!(b.visible_names(), ["get_rule", "roll", "search_rules"]);
    }
}

#[test]
fn a_roll_call_event_returns_a_function_output_with_a_total() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());

    let openai = Bridge::new(host.pipeline().clone(), "Sage", Format::OpenAiRealtime).unwrap();
    openai.update_tier("hello", hello()).unwrap();
    let events = openai.handle_event(&fixture(OPENAI_ARGUMENTS_DONE)).unwrap().unwrap();
    assert_eq!(events[0]["item"]["call_id"], "call_Ao7ovxnZ0wpBbJKv");
    let out = output_of(&events);
    let total = out["total"].as_i64().unwrap_or_else(|| panic!("no total in {out}"));
    assert!((5..=15).contains(&total), "2d6+3: {out}");
    assert_eq!(out["expression"], "2d6+3");
    // The engine also sends the finished item for the same call: one answer.
    assert_eq!(openai.handle_event(&fixture(OPENAI_OUTPUT_ITEM_DONE)), Ok(None));
    // The output item alone is answered too (a client that forwards only those).
    let item_only = fixture(&OPENAI_OUTPUT_ITEM_DONE.replace("call_Ao7ovxnZ0wpBbJKv", "call_Xk2pLq9RbT4wNc8Z"));
    let again = openai.handle_event(&item_only).unwrap().unwrap();
    assert_eq!(again[0]["item"]["call_id"], "call_Xk2pLq9RbT4wNc8Z");
    assert_eq!(output_of(&again)["total"], total, "the same seed, the same total");
    // Events that are not function calls need no answer.
    for other in [
        json!({"type": "response.output_audio.delta", "event_id": "event_1", "delta": "AAAA"}),
        json!({"type": "response.output_item.done", "item": {"type": "message", "role": "assistant"}}),
        json!({"type": "session.updated", "session": {}}),
    ] {
        assert_eq!(openai.handle_event(&other), Ok(None), "{other}");
    }

    let gemini = Bridge::new(host.pipeline().clone(), "Sage", Format::GeminiLive).unwrap();
    gemini.update_tier("hello", hello()).unwrap();
    let events = gemini.handle_event(&fixture(GEMINI_TOOL_CALL)).unwrap().unwrap();
    let response = &events[0]["toolResponse"]["functionResponses"][0];
    assert_eq!(response["id"], "function-call-13532187925868530283");
    assert_eq!(response["name"], "roll");
    assert_eq!(response["response"]["output"]["total"], total, "{response}");
    // A cancellation needs no answer; a cancelled call that arrives later runs nothing.
    assert_eq!(gemini.handle_event(&fixture(GEMINI_CANCELLATION)), Ok(None));
    let late = fixture(&GEMINI_TOOL_CALL.replace("13532187925868530283", "4862397442787398484"));
    assert_eq!(gemini.handle_event(&late), Ok(None));
}

#[test]
fn invisible_tools_are_refused_like_missing_ones_and_bad_arguments_get_error_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    for format in FORMATS {
        let b = Bridge::new(host.pipeline().clone(), "Sage", format).unwrap();
        b.update_tier("hello", hello()).unwrap();
        // get_rule: on the allow-list, over the FAST turn; echo: a real
        // tool off the allow-list; nope: no such tool.
        let answers: Vec<Value> = [("1", "get_rule"), ("2", "echo"), ("3", "nope")]
            .iter()
            .map(|(id, name)| {
                let out = answer(&b, &call_event(format, id, name, r#"{"id":"spell-fireball"}"#));
                let message = out["error"]["message"].as_str().unwrap().replace(name, "X");
                json!({"code": out["error"]["code"], "message": message})
            })
            .collect();
        assert_eq!(answers[0], json!({"code": "not_found", "message": "unknown tool \"X\""}), "{format:?}");
        assert!(answers.iter().all(|a| *a == answers[0]), "{format:?}: {answers:?}");

        let bad = answer(&b, &call_event(format, "4", "roll", r#"{"expression": "1d20""#));
        assert_eq!(bad["error"]["code"], "invalid_input", "{bad}");
        let message = bad["error"]["message"].as_str().unwrap();
        let expected = match format {
            // The arguments text does not parse.
            Format::OpenAiRealtime => "not valid JSON",
            // Gemini sends parsed args; a string is not an object.
            Format::GeminiLive => "not a string",
        };
        assert!(message.contains(expected), "{format:?}: {message}");
        let wrong = answer(&b, &call_event(format, "5", "roll", r#"{"expression": 7}"#));
        assert_eq!(wrong["error"]["code"], "invalid_input", "{wrong}");
        let not_object = answer(&b, &call_event(format, "6", "roll", "[1, 2]"));
        assert!(not_object["error"]["message"].as_str().unwrap().contains("not an array"), "{not_object}");
        let huge = format!(r#"{{"expression": "{}"}}"#, "9".repeat(100_000));
        let huge = answer(&b, &call_event(format, "7", "roll", &huge));
        assert!(huge["error"]["message"].as_str().unwrap().contains("over the bridge's limit"), "{huge}");

        // A call event without a call id cannot be answered: a clear error, nothing runs.
        let mut no_id = call_event(format, "8", "roll", r#"{"expression":"1d4"}"#);
        match format {
            Format::OpenAiRealtime => no_id.as_object_mut().unwrap().remove("call_id"),
            Format::GeminiLive => no_id["toolCall"]["functionCalls"][0].as_object_mut().unwrap().remove("id"),
        };
        let e = b.handle_event(&no_id).unwrap_err();
        assert!(matches!(e, BridgeError::MalformedEvent { .. }), "{e}");
    }

    // The turn cap: the second call of a turn is refused, a new utterance
    // starts a new turn.
    let b = Bridge::new(host.pipeline().clone(), "Terse", Format::OpenAiRealtime).unwrap();
    b.update_tier("hello", hello()).unwrap();
    assert!(!b.handle_call("roll", r#"{"expression":"1d6"}"#).is_error());
    let capped = b.handle_call("roll", r#"{"expression":"1d6"}"#);
    assert_eq!(capped.code(), Some("capacity_exceeded"));
    assert!(capped.output_text().contains("max_calls_per_turn"), "{}", capped.output_text());
    b.update_tier("one more", hello()).unwrap();
    assert!(!b.handle_call("roll", r#"{"expression":"1d6"}"#).is_error());
}

#[test]
fn a_call_past_the_bridge_timeout_gets_a_timeout_output() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let too_long = Bridge::new(host.pipeline().clone(), "Sleeper", Format::GeminiLive)
        .unwrap()
        .with_tool_timeout(Duration::from_secs(90));
    assert_eq!(too_long.tool_timeout(), MAX_TOOL_TIMEOUT, "never more than the seed's 30 s");
    for format in FORMATS {
        let b = Bridge::new(host.pipeline().clone(), "Sleeper", format)
            .unwrap()
            .with_tool_timeout(Duration::from_millis(200));
        let started = Instant::now();
        let out = answer(&b, &call_event(format, "9", "sleep", r#"{"ms": 5000}"#));
        let took = started.elapsed();
        assert_eq!(out["error"]["code"], "timeout", "{format:?}: {out}");
        assert_eq!(out["error"]["message"], "sleep timed out after 200 ms", "{out}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        // Within the timeout the call completes.
        let ok = answer(&b, &call_event(format, "10", "sleep", r#"{"ms": 10}"#));
        let text = match format {
            Format::OpenAiRealtime => ok.as_str().map(str::to_string),
            Format::GeminiLive => ok["output"].as_str().map(str::to_string),
        };
        assert_eq!(text.as_deref(), Some("slept 10 ms"), "{ok}");
    }
}

#[test]
fn after_close_calls_are_refused_and_the_audit_accounts_for_every_bridged_call() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let b = Bridge::new(host.pipeline().clone(), "Sage", Format::OpenAiRealtime)
        .unwrap()
        .with_session_id("rt_session_C9wVq");
    b.update_tier("hello", hello()).unwrap();
    assert!(answer(&b, &fixture(OPENAI_ARGUMENTS_DONE))["total"].is_i64());
    answer(&b, &call_event(Format::OpenAiRealtime, "a", "nope", "{}"));
    answer(&b, &call_event(Format::OpenAiRealtime, "b", "get_rule", r#"{"id":"spell-fireball"}"#));
    answer(&b, &call_event(Format::OpenAiRealtime, "c", "roll", "{not json"));

    b.close();
    assert!(b.is_closed());
    let refused = answer(&b, &call_event(Format::OpenAiRealtime, "d", "roll", r#"{"expression":"1d20"}"#));
    assert_eq!(refused["error"]["code"], "unavailable", "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("closed"), "{refused}");
    assert_eq!(b.handle_call("roll", r#"{"expression":"1d20"}"#).code(), Some("unavailable"));
    assert_eq!(b.update_tier("hello", hello()).unwrap_err(), BridgeError::Closed);
    assert_eq!(b.declarations(), json!([]));

    // Refused calls are counted per agent, reason and second: written now.
    host.pipeline().audit().flush_refusals(true);
    let all: Vec<Value> = std::fs::read_to_string(dir.path().join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    let records: Vec<Value> = all.iter().filter(|r| r["event"] == "call").cloned().collect();
    let mine: Vec<&Value> = records.iter().filter(|r| r["session"] == "rt_session_C9wVq").collect();
    let summary: Vec<(&str, &str)> =
        mine.iter().map(|r| (r["tool"].as_str().unwrap(), r["outcome"].as_str().unwrap())).collect();
    assert_eq!(
        summary,
        [("roll", "ok"), ("roll", "invalid_input")],
        "one record per bridged call that ran; none after close"
    );
    let mut refused: Vec<(&str, &str, u64)> = all
        .iter()
        .filter(|r| r["event"] == "refused")
        .map(|r| (r["agent"].as_str().unwrap(), r["reason"].as_str().unwrap(), r["count"].as_u64().unwrap()))
        .collect();
    refused.sort();
    assert_eq!(
        refused,
        [("Sage", "refused", 1), ("Sage", "unknown_tool", 1)],
        "the unknown and the hidden call, counted"
    );
    assert!(mine.iter().all(|r| r["agent"] == "Sage"), "{mine:?}");
    assert_eq!(records.len(), mine.len(), "no other calls were made");
}
