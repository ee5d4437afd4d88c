//! The [`Tool`] and [`TypedTool`] traits, and what runs them: [`describe`],
//! [`invoke`].

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::schema::schema_for;
use crate::{Content, Output, ToolError, ToolInfo};

/// One tool: its name, description, latency metadata, typed arguments and
/// behaviour. Implement it on a unit struct and list the struct in
/// [`plugin!`](crate::plugin).
///
/// The latency constants feed the host's budget: a tool is placed in a latency
/// tier by [`ESTIMATED_MS`](Tool::ESTIMATED_MS) until the host has measured
/// it, and each call's hard deadline derives from [`MAX_MS`](Tool::MAX_MS).
///
/// A tool whose result is one JSON document of a fixed type can implement
/// [`TypedTool`] instead, which also gives it an output schema.
pub trait Tool {
    /// The arguments object. Its JSON Schema (from `JsonSchema`) is what the
    /// model sees and what the host validates against; doc comments on fields
    /// become descriptions. Use a struct with named fields (or [`NoArgs`]);
    /// `#[serde(deny_unknown_fields)]` makes the schema refuse extra fields.
    type Args: DeserializeOwned + JsonSchema;

    /// The name the model calls the tool by: 1 to 64 ASCII letters, digits,
    /// `_` or `-` ([`TOOL_NAME_PATTERN`](crate::TOOL_NAME_PATTERN)), unique
    /// within the plugin (checked at compile time by [`plugin!`](crate::plugin)).
    const NAME: &'static str;

    /// What the tool does, written for the model. Be specific.
    const DESCRIPTION: &'static str;

    /// Typical (p50) duration in milliseconds. Default 10.
    const ESTIMATED_MS: u32 = 10;

    /// Upper bound (p99) in milliseconds, at least [`ESTIMATED_MS`](Tool::ESTIMATED_MS).
    /// The host derives the call's deadline from it. Default 100.
    const MAX_MS: u32 = 100;

    /// True when calling twice with the same arguments has no further effect.
    /// Only idempotent tools are probed for calibration. Default `false`: say
    /// `true` for pure functions.
    const IDEMPOTENT: bool = false;

    /// How long a result may be cached, in seconds; 0 (the default) means never.
    const CACHEABLE_SECONDS: u32 = 0;

    /// A minimal valid arguments object, as JSON text, for latency probes.
    /// `None` (the default): the host derives one from the schema.
    const PROBE_ARGUMENTS: Option<&'static str> = None;

    /// Runs the tool. Return [`ToolError::invalid_input`] for arguments that
    /// make no sense, with a message that tells the model what would be right;
    /// `?` turns any other error into [`ToolError::Failed`].
    fn call(args: Self::Args) -> Result<Output, ToolError>;
}

/// A tool whose result is one JSON document of type [`Output`](TypedTool::Output).
///
/// Every `TypedTool` is a [`Tool`] (a blanket implementation serializes the
/// output into one JSON content block), so it goes into
/// [`plugin!`](crate::plugin) the same way; [`output_schema`](crate::output_schema)
/// gives the JSON Schema of its output. The constants mean what they mean on
/// [`Tool`]. Where both traits are in scope, name one explicitly:
/// `<Roll as Tool>::NAME`.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use toolhost_sdk::{ToolError, TypedTool};
///
/// #[derive(Deserialize, JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// struct AddArgs {
///     a: i64,
///     b: i64,
/// }
///
/// #[derive(Serialize, JsonSchema)]
/// struct Sum {
///     /// a + b.
///     sum: i64,
/// }
///
/// struct Add;
///
/// impl TypedTool for Add {
///     type Args = AddArgs;
///     type Output = Sum;
///     const NAME: &'static str = "add";
///     const DESCRIPTION: &'static str = "Adds two integers.";
///     const IDEMPOTENT: bool = true;
///
///     fn call(args: AddArgs) -> Result<Sum, ToolError> {
///         let sum = args.a.checked_add(args.b).ok_or_else(|| ToolError::invalid_input("the sum overflows"))?;
///         Ok(Sum { sum })
///     }
/// }
///
/// toolhost_sdk::plugin!(Add);
///
/// # fn main() {
/// let out = toolhost_sdk::invoke::<Add>(r#"{"a":1,"b":2}"#).unwrap();
/// assert_eq!(out, [toolhost_sdk::Content::Json(r#"{"sum":3}"#.into())]);
/// let schema = toolhost_sdk::output_schema::<Add>();
/// assert_eq!(schema["properties"]["sum"]["type"], "integer");
/// assert_eq!(schema["required"], serde_json::json!(["sum"]));
/// # }
/// ```
pub trait TypedTool {
    /// The arguments object, as [`Tool::Args`].
    type Args: DeserializeOwned + JsonSchema;

    /// The result, serialized with `serde_json` into one JSON content block.
    /// Its JSON Schema (describing how it serializes) is [`output_schema`](crate::output_schema).
    type Output: Serialize + JsonSchema;

    /// As [`Tool::NAME`].
    const NAME: &'static str;

    /// As [`Tool::DESCRIPTION`].
    const DESCRIPTION: &'static str;

    /// As [`Tool::ESTIMATED_MS`]. Default 10.
    const ESTIMATED_MS: u32 = 10;

    /// As [`Tool::MAX_MS`]. Default 100.
    const MAX_MS: u32 = 100;

    /// As [`Tool::IDEMPOTENT`]. Default `false`.
    const IDEMPOTENT: bool = false;

    /// As [`Tool::CACHEABLE_SECONDS`]. Default 0.
    const CACHEABLE_SECONDS: u32 = 0;

    /// As [`Tool::PROBE_ARGUMENTS`]. Default `None`.
    const PROBE_ARGUMENTS: Option<&'static str> = None;

    /// Runs the tool.
    fn call(args: Self::Args) -> Result<Self::Output, ToolError>;
}

impl<T: TypedTool> Tool for T {
    type Args = T::Args;
    const NAME: &'static str = <T as TypedTool>::NAME;
    const DESCRIPTION: &'static str = <T as TypedTool>::DESCRIPTION;
    const ESTIMATED_MS: u32 = <T as TypedTool>::ESTIMATED_MS;
    const MAX_MS: u32 = <T as TypedTool>::MAX_MS;
    const IDEMPOTENT: bool = <T as TypedTool>::IDEMPOTENT;
    const CACHEABLE_SECONDS: u32 = <T as TypedTool>::CACHEABLE_SECONDS;
    const PROBE_ARGUMENTS: Option<&'static str> = <T as TypedTool>::PROBE_ARGUMENTS;

    fn call(args: T::Args) -> Result<Output, ToolError> {
        Output::json(&<T as TypedTool>::call(args)?)
    }
}

/// Arguments of a tool that takes none: the schema is an empty object that
/// allows no properties.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

impl JsonSchema for NoArgs {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoArgs".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object", "properties": {}, "additionalProperties": false })
    }
}

/// The `tool-info` record [`plugin!`](crate::plugin) lists for tool `T`.
pub fn describe<T: Tool>() -> ToolInfo {
    ToolInfo {
        name: T::NAME.into(),
        description: T::DESCRIPTION.into(),
        input_schema: schema_for::<T::Args>().to_string(),
        estimated_duration_ms: T::ESTIMATED_MS,
        max_duration_ms: T::MAX_MS,
        idempotent: T::IDEMPOTENT,
        cacheable_seconds: T::CACHEABLE_SECONDS,
        probe_arguments: T::PROBE_ARGUMENTS.map(Into::into),
    }
}

/// Runs tool `T` on `arguments` (JSON text) the way the component's `call`
/// does: deserialize, call, flatten the output into blocks. Arguments that do
/// not deserialize give [`ToolError::InvalidInput`] naming the field and
/// listing the expected ones. Handy in native unit tests.
pub fn invoke<T: Tool>(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let args = parse_arguments::<T>(arguments)?;
    T::call(args).map(Output::into_blocks)
}

fn parse_arguments<T: Tool>(arguments: &str) -> Result<T::Args, ToolError> {
    let mut de = serde_json::Deserializer::from_str(arguments);
    let parsed = serde_path_to_error::deserialize::<_, T::Args>(&mut de);
    let error = match parsed {
        Ok(args) => match de.end() {
            Ok(()) => return Ok(args),
            Err(e) => (String::new(), e),
        },
        Err(e) => {
            let path = e.path().to_string();
            (path, e.into_inner())
        }
    };
    let (path, inner) = error;
    let place = if path.is_empty() || path == "." { String::new() } else { format!(" at `{path}`") };
    Err(ToolError::InvalidInput(format!(
        "invalid arguments for {}{place}: {}; {}",
        T::NAME,
        without_position(&inner),
        expected_fields(&schema_for::<T::Args>()),
    )))
}

/// serde_json's message without its "at line 1 column 9" suffix, which means
/// nothing to a model.
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(i) if error.line() > 0 => text[..i].to_string(),
        _ => text,
    }
}

/// "expected fields: name (string, required), excited (boolean)".
fn expected_fields(schema: &serde_json::Value) -> String {
    let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
        return "expected an object".into();
    };
    if properties.is_empty() {
        return "expected an empty object".into();
    }
    let required: Vec<&str> =
        schema.get("required").and_then(|r| r.as_array()).into_iter().flatten().filter_map(|r| r.as_str()).collect();
    let fields: Vec<String> = properties
        .iter()
        .map(|(name, property)| {
            let mut notes: Vec<String> = Vec::new();
            match property.get("type") {
                Some(serde_json::Value::String(t)) => notes.push(t.clone()),
                Some(serde_json::Value::Array(ts)) => {
                    notes.push(ts.iter().filter_map(|t| t.as_str()).collect::<Vec<_>>().join(" or "))
                }
                _ => {}
            }
            if required.contains(&name.as_str()) {
                notes.push("required".into());
            }
            if notes.is_empty() { name.clone() } else { format!("{name} ({})", notes.join(", ")) }
        })
        .collect();
    format!("expected fields: {}", fields.join(", "))
}
