//! The `diceroller` plugin: `roll` evaluates dice expressions, `roll_table`
//! rolls on a d100 table. Randomness comes from WASI random unless the caller
//! passes a `seed`, which makes the result reproducible.

pub mod dice;
pub mod tables;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_sdk::schema::not_null;
use toolhost_sdk::{ToolError, TypedTool};

// The arguments of `roll`. No doc comment here: it would describe the whole
// arguments object in the schema.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RollArgs {
    /// Dice expression: NdS terms and flat modifiers joined by + or -, e.g. 1d20, 2d6+3, 4d8-1, 2d6+1d4+3. Keep highest/lowest with khN/klN: 4d6kh3, 2d20kh1 (advantage), 2d20kl1 (disadvantage).
    #[schemars(length(min = 1, max = 200))]
    expression: String,
    /// Optional seed for a reproducible roll.
    #[schemars(transform = not_null)]
    seed: Option<u64>,
}

/// What `roll` returns.
#[derive(Serialize, JsonSchema)]
struct RollResult {
    /// The expression, as given.
    expression: String,
    /// Every die rolled, in order.
    rolls: Vec<u32>,
    /// The dice kept by khN/klN, when the expression has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    kept: Option<Vec<u32>>,
    /// The result.
    total: i64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TableArgs {
    /// Which table to roll on.
    #[schemars(schema_with = "table_name_schema")]
    table_name: String,
    /// Optional seed for a reproducible roll.
    #[schemars(transform = not_null)]
    seed: Option<u64>,
}

/// `table_name`: one of the tables' names.
fn table_name_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = tables::TABLES.iter().map(|t| t.name).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
}

/// What `roll_table` returns.
#[derive(Serialize, JsonSchema)]
struct TableResult {
    /// The table rolled on.
    table: &'static str,
    /// The d100 result.
    roll: u32,
    /// The table's entry for that result.
    result: &'static str,
}

fn rng(seed: Option<u64>) -> ChaCha8Rng {
    match seed {
        Some(s) => ChaCha8Rng::seed_from_u64(s),
        None => ChaCha8Rng::from_os_rng(),
    }
}

fn roll_result(args: RollArgs) -> Result<RollResult, String> {
    let expr =
        dice::parse(&args.expression).map_err(|e| format!("invalid dice expression {:?}: {e}", args.expression))?;
    let r = dice::roll(&expr, &mut rng(args.seed));
    Ok(RollResult { expression: args.expression, rolls: r.rolls, kept: r.kept, total: r.total })
}

/// The whole `roll` tool as a plain function: arguments JSON in, result JSON
/// out, or an invalid-input message. The host's benchmark calls it as the
/// native baseline.
pub fn roll_json(arguments: &str) -> Result<String, String> {
    let args: RollArgs = serde_json::from_str(arguments).map_err(|e| e.to_string())?;
    serde_json::to_string(&roll_result(args)?).map_err(|e| e.to_string())
}

/// `roll`: evaluates a dice expression.
struct Roll;

impl TypedTool for Roll {
    type Args = RollArgs;
    type Output = RollResult;
    const NAME: &'static str = "roll";
    const DESCRIPTION: &'static str = "Evaluate a dice expression (e.g. 2d6+3, 1d20, 4d8-1, 4d6kh3). Returns the individual die results and the total.";
    const ESTIMATED_MS: u32 = 5;
    const MAX_MS: u32 = 20;
    const IDEMPOTENT: bool = true;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"expression":"1d20"}"#);

    fn call(args: RollArgs) -> Result<RollResult, ToolError> {
        roll_result(args).map_err(ToolError::InvalidInput)
    }
}

/// `roll_table`: a d100 roll on a named table.
struct RollTable;

impl TypedTool for RollTable {
    type Args = TableArgs;
    type Output = TableResult;
    const NAME: &'static str = "roll_table";
    /// Lists every table in `tables::TABLES` (a unit test checks it).
    const DESCRIPTION: &'static str =
        "Roll a d100 on a named random table. Available tables: wild_magic, treasure_hoard, random_encounter.";
    const ESTIMATED_MS: u32 = 5;
    const MAX_MS: u32 = 20;
    const IDEMPOTENT: bool = true;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"table_name":"wild_magic"}"#);

    fn call(args: TableArgs) -> Result<TableResult, ToolError> {
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
        Ok(TableResult { table: table.name, roll: n, result: tables::lookup(table, n) })
    }
}

toolhost_sdk::plugin!(Roll, RollTable);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolhost_sdk::{Content, describe, invoke};

    #[test]
    fn roll_output_has_the_seed_shape() {
        let Ok(blocks) = invoke::<Roll>(r#"{"expression":"2d6+3","seed":1}"#) else { panic!("roll failed") };
        let [Content::Json(out)] = &blocks[..] else { panic!("expected one JSON block") };
        let v: serde_json::Value = serde_json::from_str(out).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 3);
        let rolls = v["rolls"].as_array().unwrap();
        assert_eq!(rolls.len(), 2);
        let sum: i64 = rolls.iter().map(|r| r.as_i64().unwrap()).sum();
        assert_eq!(v["total"].as_i64().unwrap(), sum + 3);
        assert!(out.starts_with(r#"{"expression":"2d6+3","rolls":["#), "{out}");
        assert_eq!(roll_json(r#"{"expression":"2d6+3","seed":1}"#).unwrap(), *out);
        let kept = roll_json(r#"{"expression":"4d6kh3","seed":1}"#).unwrap();
        assert!(kept.contains(r#""kept":["#), "{kept}");
    }

    #[test]
    fn bad_input_is_invalid_input() {
        let err = invoke::<Roll>(r#"{"expression":"2x6"}"#).unwrap_err();
        assert!(
            matches!(&err, ToolError::InvalidInput(m) if m.starts_with("invalid dice expression \"2x6\": ")),
            "{err}"
        );
        let err = invoke::<RollTable>(r#"{"table_name":"nope"}"#).unwrap_err();
        assert_eq!(
            err,
            ToolError::InvalidInput(
                "unknown table \"nope\"; available: wild_magic, treasure_hoard, random_encounter".into()
            )
        );
        let out = invoke::<RollTable>(r#"{"table_name":"wild_magic","seed":3}"#).unwrap();
        let [Content::Json(out)] = &out[..] else { panic!("expected one JSON block") };
        assert!(out.starts_with(r#"{"table":"wild_magic","roll":"#), "{out}");
    }

    #[test]
    fn the_table_description_and_schema_list_every_table() {
        let names: Vec<&str> = tables::TABLES.iter().map(|t| t.name).collect();
        let info = describe::<RollTable>();
        assert_eq!(
            info.description,
            format!("Roll a d100 on a named random table. Available tables: {}.", names.join(", "))
        );
        let v: serde_json::Value = serde_json::from_str(&info.input_schema).unwrap();
        assert_eq!(v["properties"]["table_name"]["enum"], json!(names), "{v}");
        assert_eq!(v["properties"]["table_name"]["type"], "string", "{v}");
        assert_eq!(v["properties"]["table_name"]["description"], "Which table to roll on.", "{v}");
        assert_eq!(v["properties"]["seed"]["type"], "integer", "no null: {v}");
        assert_eq!(v["properties"]["seed"]["minimum"], 0, "{v}");
        assert_eq!(v["required"], json!(["table_name"]), "{v}");
        assert_eq!(v["additionalProperties"], false, "{v}");
    }

    #[test]
    fn the_roll_schema_keeps_its_limits() {
        let v: serde_json::Value = serde_json::from_str(&describe::<Roll>().input_schema).unwrap();
        let expression = &v["properties"]["expression"];
        assert_eq!((expression["type"].as_str(), expression["minLength"].as_u64()), (Some("string"), Some(1)), "{v}");
        assert_eq!(expression["maxLength"], 200, "{v}");
        assert!(expression["description"].as_str().unwrap().starts_with("Dice expression: NdS terms"), "{v}");
        assert_eq!(v["properties"]["seed"]["type"], "integer", "no null: {v}");
        assert_eq!(v["required"], json!(["expression"]), "{v}");
        assert_eq!(v["additionalProperties"], false, "{v}");
        let out = toolhost_sdk::output_schema::<Roll>();
        assert_eq!(out["required"], json!(["expression", "rolls", "total"]), "{out}");
    }
}
