//! Version 1 of the plugin the hot-loading test replaces while calls run.
//! Both versions answer `version`; only version 2 has `new_in_v2`.

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });
}

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};

const VERSION: u32 = 1;

struct Plugin;

fn tool(name: &str, description: &str) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: description.into(),
        input_schema: r#"{"type":"object","additionalProperties":false}"#.into(),
        estimated_duration_ms: 1,
        max_duration_ms: 100,
        idempotent: true,
        cacheable_seconds: 0,
        probe_arguments: None,
    }
}

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![tool("version", "Says which version of the plugin answered.")]
    }

    fn call(name: String, _arguments: String) -> Result<Vec<Content>, ToolError> {
        match name.as_str() {
            "version" => Ok(vec![Content::Json(format!("{{\"version\":{VERSION}}}"))]),
            "new_in_v2" if VERSION == 2 => Ok(vec![Content::Text("new".into())]),
            _ => Err(ToolError::NotFound(format!("no tool {name}"))),
        }
    }
}

bindings::export!(Plugin with_types_in bindings);
