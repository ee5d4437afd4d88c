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

/// Recursion the optimiser cannot turn into a loop: the result is combined
/// after the call returns. Everything stays in wasm locals, so it is the wasm
/// stack (not Rust's shadow stack in linear memory) that overflows.
fn recurse(n: u64, limit: u64) -> u64 {
    if n == limit { n } else { recurse(n + 1, limit).wrapping_mul(31).wrapping_add(n) }
}

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![
            tool("spin", "Loops forever.", 100),
            tool("grow", "Allocates memory until something stops it.", 1000),
            tool("recurse", "Recurses without end.", 1000),
            tool("panic", "Panics.", 100),
            tool("big_output", "Returns 10 MB of text.", 1000),
            tool("sleep", "Sleeps {\"ms\": N} milliseconds (std::thread::sleep, a WASI timer).", 1000),
            tool("env", "Returns every environment variable it can see, NAME=value per line.", 100),
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
            "recurse" => Ok(vec![Content::Text(recurse(0, u64::MAX - arguments.len() as u64).to_string())]),
            "panic" => panic!("the hostile plugin panicked on purpose"),
            "big_output" => Ok(vec![Content::Text("x".repeat(10 * 1024 * 1024))]),
            "sleep" => {
                // A tiny hand parser keeps this crate free of serde.
                let ms: u64 = arguments
                    .chars()
                    .filter(char::is_ascii_digit)
                    .collect::<String>()
                    .parse()
                    .map_err(|_| ToolError::InvalidInput("want {\"ms\": N}".into()))?;
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(vec![Content::Text(format!("slept {ms} ms"))])
            }
            "env" => Ok(vec![Content::Text(std::env::vars().map(|(k, v)| format!("{k}={v}\n")).collect())]),
            "echo" => Ok(vec![Content::Text(arguments)]),
            other => Err(ToolError::NotFound(other.into())),
        }
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);
