//! JSON Schemas: of a tool's arguments (what the host validates calls
//! against), of a typed tool's output, and helpers for `#[schemars(...)]`
//! attributes.

use schemars::{JsonSchema, Schema};
use serde_json::Value;

use crate::TypedTool;

fn generate<A: JsonSchema + ?Sized>(serialize: bool) -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true);
    let settings = if serialize { settings.for_serialize() } else { settings.for_deserialize() };
    let mut schema = settings.into_generator().into_root_schema_for::<A>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
    }
    schema
}

/// The JSON Schema of an arguments type, as the host receives it: draft
/// 2020-12, describing how the type deserializes, subschemas inlined
/// (recursive types keep `$defs` at the root, so the schema is always
/// self-contained), without the Rust type's `title`.
pub fn schema_for<A: JsonSchema>() -> Value {
    generate::<A>(false)
}

/// The JSON Schema of a [`TypedTool`]'s output, as its JSON content block is
/// serialized: draft 2020-12, self-contained, without the Rust type's
/// `title`. (MCP's `outputSchema` wants an object, so make `Output` a struct
/// with named fields.)
pub fn output_schema<T: TypedTool>() -> Value {
    generate::<T::Output>(true)
}

/// A `#[schemars(transform = ...)]` helper: removes `null` from a schema, so
/// an `Option` field may be left out but not sent as `null`.
///
/// ```
/// # use schemars::JsonSchema;
/// #[derive(serde::Deserialize, JsonSchema)]
/// struct Args {
///     /// Optional seed; `{"seed": null}` is refused.
///     #[schemars(transform = toolhost_sdk::schema::not_null)]
///     seed: Option<u64>,
/// }
/// let schema = toolhost_sdk::schema_for::<Args>();
/// assert_eq!(schema["properties"]["seed"]["type"], "integer");
/// assert!(schema.get("required").is_none());
/// ```
pub fn not_null(schema: &mut Schema) {
    fn is_null(value: &Value) -> bool {
        match value.get("type") {
            Some(Value::String(t)) => t == "null",
            _ => value.get("const").is_some_and(Value::is_null),
        }
    }
    let Some(object) = schema.as_object_mut() else { return };
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            object.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Null) = object.get("default") {
        object.remove("default");
    }
    if let Some(Value::Array(options)) = object.get_mut("anyOf") {
        options.retain(|o| !is_null(o));
        if let [only] = options.as_slice()
            && let Some(inner) = only.as_object().cloned()
        {
            object.remove("anyOf");
            for (key, value) in inner {
                object.entry(key).or_insert(value);
            }
        }
    }
}
