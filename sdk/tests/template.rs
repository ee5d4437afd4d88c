//! Compiles the `toolhost new` template's `src/lib.rs` against this SDK and
//! runs its unit tests, so the template cannot drift from the SDK's API.
//! (`host/src/scaffold.rs` embeds the same file; a real project built from it
//! for wasm32-wasip2 is checked with `toolhost inspect`.)

#[path = "../../host/templates/plugin/lib.rs.tmpl"]
mod template;

use toolhost_sdk::{Content, ToolError};

#[test]
fn the_template_tool_is_described_and_runs() {
    let info = toolhost_sdk::describe::<template::Greet>();
    assert_eq!(info.name, "greet");
    assert!(info.idempotent);
    let schema: serde_json::Value = serde_json::from_str(&info.input_schema).unwrap();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], serde_json::json!(["name"]));
    assert_eq!(schema["additionalProperties"], false);
    assert!(schema.get("description").is_none(), "the model sees the schema: no notes for the author in it");

    let out = toolhost_sdk::invoke::<template::Greet>(r#"{"name":"Ada"}"#).unwrap();
    assert_eq!(out, [Content::Json(r#"{"message":"Hello, Ada."}"#.into())]);
    let err = toolhost_sdk::invoke::<template::Greet>(r#"{"name":5}"#).unwrap_err();
    assert!(matches!(&err, ToolError::InvalidInput(m) if m.contains("`name`")), "{err}");
}
