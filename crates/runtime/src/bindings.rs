//! The one place the host generates bindings for the `tool` WIT world.

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "memory-plugin",
});

pub use self::toolhost::plugin::host::LogLevel;
pub use self::toolhost::plugin::types::ResourceBody;
pub use MemoryPlugin as Plugin;
pub use MemoryPluginPre as PluginPre;
pub use exports::toolhost::plugin::tool::{Content, ToolError, ToolInfo};

/// The export every plugin must provide, without its version.
pub const TOOL_INTERFACE: &str = "toolhost:plugin/tool";
/// The contract's package version (`wit/tool.wit`).
pub const CONTRACT_VERSION: &str = "0.1.0";
