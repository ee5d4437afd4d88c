//! The fixture tools of the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, server scenarios), as one plugin.
//! Loaded only in tests: toolhost serves it over streamable HTTP and the suite
//! calls these names and checks what comes back. Outputs follow the suite's
//! scenario descriptions (tests/peers/CONFORMANCE-NOTES.md).
//!
//! It targets the `server-plugin` world: besides the tools it serves the
//! suite's resources (`test://static-text`, `test://static-binary`, the
//! template `test://template/{id}/data`), its prompts and completions, and
//! the tools that ask the client (`test_sampling`, `test_elicitation`,
//! `test_elicitation_sep1034_defaults`, `test_elicitation_sep1330_enums`)
//! through `toolhost:plugin/client`.

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "long-server-plugin" });
}

mod asks;
mod offer;

use bindings::exports::toolhost::plugin::tool::{Content, Guest, ToolError, ToolInfo};
use bindings::toolhost::plugin::host::{self, LogLevel};
use bindings::toolhost::plugin::types::{EmbeddedResource, Media, ResourceBody};
use std::time::Duration;

struct Plugin;

/// A 1x1 red pixel, RGB, as a PNG file (69 bytes).
/// Base64: `iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mP4z8AAAAMBAQD3A0FDAAAAAElFTkSuQmCC`
pub const RED_PIXEL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53, 0xde, 0x00, 0x00, 0x00, 0x0c, 0x49,
    0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xf8, 0xcf, 0xc0, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00, 0xf7, 0x03, 0x41, 0x43,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A WAV file: PCM, mono, 8000 Hz, 16 bit, two samples of silence (48 bytes).
/// Base64: `UklGRigAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQQAAAAAAAAA`
pub const SILENCE_WAV: &[u8] = &[
    0x52, 0x49, 0x46, 0x46, 0x28, 0x00, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45, 0x66, 0x6d, 0x74, 0x20, 0x10, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x01, 0x00, 0x40, 0x1f, 0x00, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x02, 0x00, 0x10, 0x00, 0x64, 0x61,
    0x74, 0x61, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// The arguments schema of every fixture that takes none.
const NO_ARGUMENTS: &str = r#"{"type":"object","properties":{}}"#;

/// SEP-1613: the suite checks that `$schema`, `$defs` and
/// `additionalProperties: false` reach `tools/list` unchanged.
const JSON_SCHEMA_2020_12: &str = r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"}},"additionalProperties":false}"##;

/// The pause between two notifications of the logging and progress tools (the
/// suite asks for about 50 ms, to see notifications arrive during the call).
const STEP: Duration = Duration::from_millis(50);

fn tool(name: &str, description: &str, schema: &str, estimated_ms: u32, max_ms: u32, idempotent: bool) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: description.into(),
        input_schema: schema.into(),
        estimated_duration_ms: estimated_ms,
        max_duration_ms: max_ms,
        idempotent,
        cacheable_seconds: 0,
        probe_arguments: None,
    }
}

pub(crate) fn text(s: &str) -> Content {
    Content::Text(s.into())
}

pub(crate) fn png() -> Content {
    Content::Image(Media { mime_type: "image/png".into(), data: RED_PIXEL_PNG.to_vec() })
}

fn resource(uri: &str, mime_type: &str, body: &str) -> Content {
    Content::Resource(EmbeddedResource {
        uri: uri.into(),
        mime_type: Some(mime_type.into()),
        body: ResourceBody::Text(body.into()),
    })
}

impl Guest for Plugin {
    fn list_tools() -> Vec<ToolInfo> {
        vec![
            tool("test_simple_text", "Returns one text block.", NO_ARGUMENTS, 1, 100, true),
            tool("test_image_content", "Returns one image block: a 1x1 red PNG.", NO_ARGUMENTS, 1, 100, true),
            tool("test_audio_content", "Returns one audio block: a tiny WAV file.", NO_ARGUMENTS, 1, 100, true),
            tool("test_embedded_resource", "Returns one embedded text resource.", NO_ARGUMENTS, 1, 100, true),
            tool(
                "test_multiple_content_types",
                "Returns a text, an image and an embedded resource block.",
                NO_ARGUMENTS,
                1,
                100,
                true,
            ),
            tool(
                "test_tool_with_logging",
                "Sends three info log messages 50 ms apart while it runs.",
                NO_ARGUMENTS,
                110,
                1000,
                false,
            ),
            tool(
                "test_tool_with_progress",
                "Reports progress 0, 50 and 100 of 100, 50 ms apart, while it runs.",
                NO_ARGUMENTS,
                110,
                1000,
                false,
            ),
            tool("test_error_handling", "Always fails (an isError result).", NO_ARGUMENTS, 1, 100, false),
            tool(
                "test_reconnection",
                "SEP-1699 fixture: answers at once (the host does not close the stream mid-call).",
                NO_ARGUMENTS,
                1,
                100,
                true,
            ),
            tool(
                "json_schema_2020_12_tool",
                "Tool with JSON Schema 2020-12 features",
                JSON_SCHEMA_2020_12,
                1,
                100,
                true,
            ),
            tool(
                "test_sampling",
                "Asks the client's model to answer `prompt`.",
                r#"{"type":"object","properties":{"prompt":{"type":"string"}},"required":["prompt"]}"#,
                5,
                1000,
                false,
            ),
            tool(
                "test_elicitation",
                "Asks the user for a username and an email, showing `message`.",
                r#"{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}"#,
                5,
                1000,
                false,
            ),
            tool(
                "test_elicitation_sep1034_defaults",
                "Asks the user a form whose every field has a default (SEP-1034).",
                NO_ARGUMENTS,
                5,
                1000,
                false,
            ),
            tool(
                "test_elicitation_sep1330_enums",
                "Asks the user a form with every kind of enum (SEP-1330).",
                NO_ARGUMENTS,
                5,
                1000,
                false,
            ),
            tool(
                "long_quest",
                "A long tool (declared long-running, p50 2 s): works `steps` steps of 100 ms (default 20, at most 100), reporting each, then answers; not one of the suite's.",
                r#"{"type":"object","properties":{"steps":{"type":"integer","minimum":1,"maximum":100}}}"#,
                2000,
                20000,
                false,
            ),
            tool(
                "ask_forever",
                "Hostile: asks the client (`kind`: elicit or sample) again and again until refused; not one of the suite's.",
                r#"{"type":"object","properties":{"kind":{"enum":["elicit","sample"]}},"required":["kind"]}"#,
                5,
                1000,
                false,
            ),
            tool(
                "elicit_url",
                "Asks the user to open `url` (URL-mode elicitation); not one of the suite's.",
                r#"{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}"#,
                5,
                1000,
                false,
            ),
        ]
    }

    fn call(name: String, arguments: String) -> Result<Vec<Content>, ToolError> {
        match name.as_str() {
            "test_simple_text" => Ok(vec![text("This is a simple text response for testing.")]),
            "test_image_content" => Ok(vec![png()]),
            "test_audio_content" => {
                Ok(vec![Content::Audio(Media { mime_type: "audio/wav".into(), data: SILENCE_WAV.to_vec() })])
            }
            "test_embedded_resource" => {
                Ok(vec![resource("test://embedded-resource", "text/plain", "This is an embedded resource content.")])
            }
            "test_multiple_content_types" => Ok(vec![
                text("Multiple content types test:"),
                png(),
                resource("test://mixed-content-resource", "application/json", r#"{"test":"data","value":123}"#),
            ]),
            "test_tool_with_logging" => {
                host::log(LogLevel::Info, "Tool execution started");
                std::thread::sleep(STEP);
                host::log(LogLevel::Info, "Tool processing data");
                std::thread::sleep(STEP);
                host::log(LogLevel::Info, "Tool execution completed");
                Ok(vec![text("Tool with logging executed successfully")])
            }
            "test_tool_with_progress" => {
                for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        std::thread::sleep(STEP);
                    }
                    host::progress(step, Some(100.0), Some(&format!("Completed step {step} of 100")));
                }
                Ok(vec![text("Tool with progress executed successfully")])
            }
            "test_error_handling" => {
                Err(ToolError::Failed("This tool intentionally returns an error for testing".into()))
            }
            "test_reconnection" => Ok(vec![text("Reconnection test completed successfully")]),
            "json_schema_2020_12_tool" => Ok(vec![text(&format!("Received: {arguments}"))]),
            "test_sampling" => asks::sampling(&arguments),
            "test_elicitation" => asks::elicitation(&arguments),
            "test_elicitation_sep1034_defaults" => asks::defaults(),
            "test_elicitation_sep1330_enums" => asks::enums(),
            "elicit_url" => asks::url(&arguments),
            "ask_forever" => asks::forever(&arguments),
            "long_quest" => {
                let steps = number_arg(&arguments, "steps").unwrap_or(20).clamp(1, 100);
                for i in 1..=steps {
                    std::thread::sleep(Duration::from_millis(100));
                    host::progress(i as f64, Some(steps as f64), Some(&format!("step {i} of {steps}")));
                }
                Ok(vec![text(&format!("The quest is done after {steps} steps"))])
            }
            other => Err(ToolError::NotFound(format!("no tool named {other}"))),
        }
    }
}

/// `long_quest` runs long: a client that speaks MCP tasks may call it as one.
impl bindings::exports::toolhost::plugin::execution::Guest for Plugin {
    fn long_running() -> Vec<String> {
        vec!["long_quest".into()]
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Plugin with_types_in bindings);

/// The whole number at `key` of the arguments' JSON text, if any.
fn number_arg(arguments: &str, key: &str) -> Option<u32> {
    let at = arguments.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = arguments[at..].trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
