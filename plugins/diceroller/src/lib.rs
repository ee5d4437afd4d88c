//! The `diceroller` plugin: `roll` evaluates dice expressions, `roll_table`
//! rolls on a d100 table. Randomness comes from WASI random unless the caller
//! passes a `seed`, which makes the result reproducible.

pub mod dice;
pub mod tables;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "plugin" });
}

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};

struct Plugin;

#[derive(Deserialize)]
struct RollArgs {
    expression: String,
    seed: Option<u64>,
}

#[derive(Serialize)]
struct RollResult<'a> {
    expression: &'a str,
    rolls: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kept: Option<Vec<u32>>,
    total: i64,
}

#[derive(Deserialize)]
struct TableArgs {
    table_name: String,
    seed: Option<u64>,
}

#[derive(Serialize)]
struct TableResult<'a> {
    table: &'a str,
    roll: u32,
    result: &'a str,
}

fn rng(seed: Option<u64>) -> ChaCha8Rng {
    match seed {
        Some(s) => ChaCha8Rng::seed_from_u64(s),
        None => ChaCha8Rng::from_os_rng(),
    }
}

fn parse_args<'a, T: Deserialize<'a>>(arguments: &'a str) -> Result<T, ToolError> {
    serde_json::from_str(arguments).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

fn json(value: &impl Serialize) -> Result<Vec<Content>, ToolError> {
    serde_json::to_string(value).map(|s| vec![Content::Json(s)]).map_err(|e| ToolError::Failed(e.to_string()))
}

/// The whole `roll` tool as a plain function: arguments JSON in, result JSON
/// out, or an invalid-input message. The component calls this; so does the
/// host's benchmark, as the native baseline.
pub fn roll_json(arguments: &str) -> Result<String, String> {
    let args: RollArgs = serde_json::from_str(arguments).map_err(|e| e.to_string())?;
    let expr =
        dice::parse(&args.expression).map_err(|e| format!("invalid dice expression {:?}: {e}", args.expression))?;
    let r = dice::roll(&expr, &mut rng(args.seed));
    let out = RollResult { expression: &args.expression, rolls: r.rolls, kept: r.kept, total: r.total };
    serde_json::to_string(&out).map_err(|e| e.to_string())
}

fn roll(arguments: &str) -> Result<Vec<Content>, ToolError> {
    roll_json(arguments).map(|s| vec![Content::Json(s)]).map_err(ToolError::InvalidInput)
}

fn roll_table(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let args: TableArgs = parse_args(arguments)?;
    let Some(table) = tables::TABLES.iter().find(|t| t.name == args.table_name) else {
        let names: Vec<&str> = tables::TABLES.iter().map(|t| t.name).collect();
        return Err(ToolError::InvalidInput(format!(
            "unknown table {:?}; available: {}",
            args.table_name,
            names.join(", ")
        )));
    };
    use rand::Rng;
    let n = rng(args.seed).random_range(1..=100);
    json(&TableResult { table: table.name, roll: n, result: tables::lookup(table, n) })
}

const ROLL_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "expression": {
      "type": "string", "minLength": 1, "maxLength": 200,
      "description": "Dice expression: NdS terms and flat modifiers joined by + or -, e.g. 1d20, 2d6+3, 4d8-1, 2d6+1d4+3. Keep highest/lowest with khN/klN: 4d6kh3, 2d20kh1 (advantage), 2d20kl1 (disadvantage)."
    },
    "seed": { "type": "integer", "minimum": 0, "description": "Optional seed for a reproducible roll." }
  },
  "required": ["expression"],
  "additionalProperties": false
}"#;

fn table_schema() -> String {
    let names: Vec<String> = tables::TABLES.iter().map(|t| format!("{:?}", t.name)).collect();
    format!(
        r#"{{
  "type": "object",
  "properties": {{
    "table_name": {{ "type": "string", "enum": [{}], "description": "Which table to roll on." }},
    "seed": {{ "type": "integer", "minimum": 0, "description": "Optional seed for a reproducible roll." }}
  }},
  "required": ["table_name"],
  "additionalProperties": false
}}"#,
        names.join(", ")
    )
}

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![
            ToolInfo {
                name: "roll".into(),
                description: "Evaluate a dice expression (e.g. 2d6+3, 1d20, 4d8-1, 4d6kh3). Returns the individual die results and the total.".into(),
                input_schema: ROLL_SCHEMA.into(),
                estimated_duration_ms: 5,
                max_duration_ms: 20,
                idempotent: true,
                cacheable_seconds: 0,
                probe_arguments: Some(r#"{"expression":"1d20"}"#.into()),
            },
            ToolInfo {
                name: "roll_table".into(),
                description: format!(
                    "Roll a d100 on a named random table. Available tables: {}.",
                    tables::TABLES.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
                ),
                input_schema: table_schema(),
                estimated_duration_ms: 5,
                max_duration_ms: 20,
                idempotent: true,
                cacheable_seconds: 0,
                probe_arguments: Some(r#"{"table_name":"wild_magic"}"#.into()),
            },
        ]
    }

    fn call(name: String, arguments: String) -> Result<Vec<Content>, ToolError> {
        match name.as_str() {
            "roll" => roll(&arguments),
            "roll_table" => roll_table(&arguments),
            other => Err(ToolError::NotFound(format!("diceroller has no tool {other:?}"))),
        }
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roll_output_has_the_seed_shape() {
        let Ok(blocks) = roll(r#"{"expression":"2d6+3","seed":1}"#) else { panic!("roll failed") };
        let [Content::Json(out)] = &blocks[..] else { panic!("expected one JSON block") };
        let v: serde_json::Value = serde_json::from_str(out).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 3);
        let rolls = v["rolls"].as_array().unwrap();
        assert_eq!(rolls.len(), 2);
        let sum: i64 = rolls.iter().map(|r| r.as_i64().unwrap()).sum();
        assert_eq!(v["total"].as_i64().unwrap(), sum + 3);
        assert!(out.starts_with(r#"{"expression":"2d6+3","rolls":["#), "{out}");
    }

    #[test]
    fn table_schema_is_json_listing_every_table() {
        let v: serde_json::Value = serde_json::from_str(&table_schema()).unwrap();
        assert_eq!(v["properties"]["table_name"]["enum"].as_array().unwrap().len(), tables::TABLES.len());
        let _: serde_json::Value = serde_json::from_str(ROLL_SCHEMA).unwrap();
    }
}
