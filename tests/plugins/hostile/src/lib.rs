//! A plugin that misbehaves on purpose, one tool per way a guest can attack
//! its host. The host's tests prove each is stopped with a typed error and
//! that the host keeps serving afterwards.

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });
}

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};
use std::hint::black_box;

struct Plugin;

fn tool(name: &str, description: &str, max_ms: u32) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: description.into(),
        input_schema: r#"{"type":"object"}"#.into(),
        estimated_duration_ms: 1,
        max_duration_ms: max_ms,
        idempotent: false,
        cacheable_seconds: 0,
        probe_arguments: None,
    }
}

fn recurse(n: u64) -> u64 {
    // black_box keeps the optimiser from turning this into a loop.
    let local = black_box([n; 16]);
    if black_box(n) == u64::MAX { local[0] } else { recurse(n + 1) + local[3] }
}

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![
            tool("spin", "Loops forever.", 100),
            tool("grow", "Allocates memory until something stops it.", 1000),
            tool("recurse", "Recurses without end.", 1000),
            tool("panic", "Panics.", 100),
            tool("big_output", "Returns 10 MB of text.", 1000),
            tool("echo", "Returns its arguments: proves the plugin still works.", 100),
        ]
    }

    fn call(name: String, arguments: String) -> Result<Vec<Content>, ToolError> {
        match name.as_str() {
            "spin" => {
                let mut i = 0u64;
                loop {
                    i = black_box(i.wrapping_add(1));
                }
            }
            "grow" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    black_box(&hoard);
                }
            }
            "recurse" => Ok(vec![Content::Text(recurse(0).to_string())]),
            "panic" => panic!("the hostile plugin panicked on purpose"),
            "big_output" => Ok(vec![Content::Text("x".repeat(10 * 1024 * 1024))]),
            "echo" => Ok(vec![Content::Text(arguments)]),
            other => Err(ToolError::NotFound(other.into())),
        }
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);
