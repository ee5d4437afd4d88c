//! The built-in tools through the library API, in real components.

use crate::common::{HOST, call, json_of};
use serde_json::json;
use toolhost::tool::CallError;

fn roll(expr: &str) -> serde_json::Value {
    json_of(call(&HOST, "roll", json!({ "expression": expr })).unwrap())
}

fn sum(v: &serde_json::Value) -> i64 {
    v.as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).sum()
}

#[test]
fn roll_returns_expression_rolls_and_total() {
    let v = roll("2d6+3");
    assert_eq!(v["expression"], "2d6+3");
    let rolls = v["rolls"].as_array().unwrap();
    assert_eq!(rolls.len(), 2);
    assert!(rolls.iter().all(|d| (1..=6).contains(&d.as_i64().unwrap())));
    assert_eq!(v["total"].as_i64().unwrap(), sum(&v["rolls"]) + 3);
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["expression", "rolls", "total"]);
}

#[test]
fn roll_handles_every_documented_form() {
    for (expr, dice, modifier) in [("1d20", 1, 0), ("d20", 1, 0), ("4d8-1", 4, -1), ("2d6+1d4+3", 3, 3)] {
        let v = roll(expr);
        assert_eq!(v["rolls"].as_array().unwrap().len(), dice, "{expr}");
        assert_eq!(v["total"].as_i64().unwrap(), sum(&v["rolls"]) + modifier, "{expr}");
    }
}

#[test]
fn keep_highest_counts_only_the_kept_dice() {
    let v = roll("4d6kh3");
    let mut rolls: Vec<i64> = v["rolls"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
    rolls.sort_unstable();
    assert_eq!(v["total"].as_i64().unwrap(), rolls[1..].iter().sum::<i64>());
    assert_eq!(v["kept"].as_array().unwrap().len(), 3);
    let adv = roll("2d20kh1");
    assert_eq!(
        adv["total"].as_i64().unwrap(),
        adv["rolls"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).max().unwrap()
    );
}

#[test]
fn a_seed_makes_rolls_reproducible() {
    let a = json_of(call(&HOST, "roll", json!({"expression": "10d10", "seed": 42})).unwrap());
    let b = json_of(call(&HOST, "roll", json!({"expression": "10d10", "seed": 42})).unwrap());
    assert_eq!(a, b);
}

#[test]
fn unseeded_rolls_use_wasi_random() {
    // 20 rolls of 10d10 all equal would mean randomness is broken.
    let first = roll("10d10");
    assert!((0..20).any(|_| roll("10d10")["rolls"] != first["rolls"]));
}

#[test]
fn nonsense_expressions_are_invalid_input() {
    for expr in ["0d6", "1d0", "1000000d6", "2d6+", "banana", "2d6 3"] {
        match call(&HOST, "roll", json!({ "expression": expr })) {
            Err(CallError::InvalidInput { tool, message }) => {
                assert_eq!(tool, "roll");
                assert!(message.contains(expr), "{expr}: {message}");
            }
            other => panic!("{expr}: {other:?}"),
        }
    }
}

#[test]
fn roll_table_rolls_every_table() {
    for table in ["wild_magic", "treasure_hoard", "random_encounter"] {
        let v = json_of(call(&HOST, "roll_table", json!({ "table_name": table })).unwrap());
        assert_eq!(v["table"], table);
        assert!((1..=100).contains(&v["roll"].as_i64().unwrap()));
        assert!(v["result"].as_str().unwrap().len() > 10);
    }
}

#[test]
fn roll_table_with_a_seed_is_reproducible_and_unknown_tables_are_refused_before_the_plugin() {
    let a = call(&HOST, "roll_table", json!({"table_name": "wild_magic", "seed": 3})).unwrap();
    let b = call(&HOST, "roll_table", json!({"table_name": "wild_magic", "seed": 3})).unwrap();
    assert_eq!(json_of(a), json_of(b));
    match call(&HOST, "roll_table", json!({"table_name": "dragons"})) {
        // The schema's enum rejects it: the message comes from the validator.
        Err(CallError::InvalidInput { message, .. }) => assert!(message.contains("/table_name"), "{message}"),
        other => panic!("{other:?}"),
    }
}

/// The host's validator answers in its own words ("field /expression: ...",
/// "arguments: ... is a required property"), never the plugin's (its serde
/// would say "missing field `expression`"), and the plugin is never called:
/// the budget records a call only once the plugin has run.
#[test]
fn schema_violations_name_the_field_and_never_reach_the_plugin() {
    let host = crate::common::host_with(toolhost::runtime::Limits::default());
    let roll_def = host.pipeline().registry().snapshot().get("roll").unwrap().def.clone();
    match call(&host, "roll", json!({"expression": 7})) {
        Err(CallError::InvalidInput { message, .. }) => {
            assert!(message.starts_with("field /expression: ") && message.contains("\"string\""), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match call(&host, "roll", json!({})) {
        Err(CallError::InvalidInput { message, .. }) => {
            assert_eq!(message, "arguments: \"expression\" is a required property", "{message}")
        }
        other => panic!("{other:?}"),
    }
    match call(&host, "roll", json!(["1d6"])) {
        Err(CallError::InvalidInput { message, .. }) => {
            assert_eq!(message, "arguments must be a JSON object, not an array", "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(host.pipeline().budget().status(&roll_def).real.map(|r| r.count), None, "the plugin never ran");
    // The check can fail: a valid call does reach the plugin and is recorded.
    call(&host, "roll", json!({"expression": "1d6"})).unwrap();
    assert_eq!(host.pipeline().budget().status(&roll_def).real.map(|r| r.count), Some(1));
}

#[test]
fn get_rule_returns_the_srd_text() {
    let v = json_of(call(&HOST, "get_rule", json!({"id": "spell-fireball"})).unwrap());
    assert_eq!(v["name"], "Fireball");
    assert_eq!(v["category"], "spell");
    let text = v["text"].as_str().unwrap();
    assert!(text.contains("8d6 fire damage"), "{text}");
    assert!(v["attribution"].as_str().unwrap().contains("CC-BY-4.0"));
    let blinded = json_of(call(&HOST, "get_rule", json!({"id": "condition-blinded"})).unwrap());
    assert!(blinded["text"].as_str().unwrap().contains("can't see"));
}

#[test]
fn get_rule_unknown_id_is_not_found_with_suggestions() {
    match call(&HOST, "get_rule", json!({"id": "fireball"})) {
        Err(e @ CallError::NotFound { .. }) => {
            assert!(e.to_string().contains("spell-fireball"), "{e}");
            assert_eq!(e.code(), "not_found");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn search_rules_ranks_the_condition_first() {
    let v = json_of(call(&HOST, "search_rules", json!({"query": "blinded"})).unwrap());
    assert_eq!(v["results"][0]["id"], "condition-blinded");
}

#[test]
fn search_rules_covers_every_category_and_filters() {
    for (query, category, first) in [
        ("grappled", "condition", "condition-grappled"),
        ("cover", "combat", "combat-cover"),
        ("fireball", "spell", "spell-fireball"),
        ("resting", "general", "rule-resting"),
    ] {
        let v = json_of(call(&HOST, "search_rules", json!({"query": query, "category": category})).unwrap());
        let results = v["results"].as_array().unwrap();
        assert_eq!(results[0]["id"], first, "{query}");
        assert!(results.iter().all(|r| r["category"] == category), "{query}");
    }
}

#[test]
fn search_rules_refuses_other_systems() {
    match call(&HOST, "search_rules", json!({"query": "stealth", "system": "pathfinder"})) {
        Err(CallError::InvalidInput { message, .. }) => assert!(message.contains("dnd5e"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(call(&HOST, "search_rules", json!({"query": "stealth", "system": "dnd5e"})).is_ok());
}

#[test]
fn unknown_tools_are_reported_as_such() {
    match call(&HOST, "teleport", json!({})) {
        Err(CallError::UnknownTool(name)) => assert_eq!(name, "teleport"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn builtins_declare_the_seed_latencies() {
    let cat = HOST.pipeline().registry().snapshot();
    for (tool, p50, max) in [("roll", 5, 20), ("roll_table", 5, 20), ("search_rules", 30, 100), ("get_rule", 5, 20)] {
        let t = cat.get(tool).unwrap();
        assert_eq!(t.def.meta.estimated_duration_ms, Some(p50), "{tool}");
        assert_eq!(t.def.meta.max_duration_ms, Some(max), "{tool}");
        assert!(t.def.meta.idempotent, "{tool}");
    }
}
