//! The call pipeline every tool goes through, whatever its provider:
//! resolve the name, check the arguments are an object that matches the
//! schema, then run it on the provider.

use crate::builtin::BUILTINS;
use crate::registry::{Registry, RegistryError};
use crate::runtime::{LoadError, Runtime, WasmPlugin};
use crate::tool::{CallContext, CallError, ToolOutput};
use std::path::Path;
use std::sync::Arc;

/// Why a plugin could not be added to the host.
#[derive(Debug, thiserror::Error)]
pub enum AddPluginError {
    /// The component did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The registry refused it (a name clash).
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// The runtime and the registry, and the one way to call a tool.
#[derive(Debug)]
pub struct Host {
    runtime: Runtime,
    registry: Registry,
}

impl Host {
    /// A host with no tools.
    pub fn new(runtime: Runtime) -> Host {
        Host { runtime, registry: Registry::new() }
    }

    /// The wasm runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The tool registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Loads and registers every built-in plugin.
    pub fn add_builtins(&self) -> Result<(), AddPluginError> {
        for b in BUILTINS {
            let plugin = self.runtime.load(b.name, b.bytes)?;
            self.registry.add(Arc::new(plugin))?;
        }
        Ok(())
    }

    /// Loads a component file and registers its tools.
    pub fn add_plugin_file(&self, path: &Path) -> Result<Arc<WasmPlugin>, AddPluginError> {
        let plugin = Arc::new(self.runtime.load_file(path)?);
        self.registry.add(plugin.clone())?;
        Ok(plugin)
    }

    /// Calls `tool` with `arguments`: resolves it, validates the arguments
    /// against its schema (invalid input never reaches the tool), runs it.
    pub fn call(&self, tool: &str, arguments: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        let catalog = self.registry.snapshot();
        let entry = catalog.get(tool).ok_or_else(|| CallError::UnknownTool(tool.to_string()))?;
        if !arguments.is_object() {
            return Err(CallError::InvalidInput {
                tool: tool.to_string(),
                message: format!("arguments must be a JSON object, not {}", json_kind(arguments)),
            });
        }
        entry
            .validator
            .check(arguments)
            .map_err(|message| CallError::InvalidInput { tool: tool.to_string(), message })?;
        entry.provider.call(&entry.def.name, arguments, ctx)
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
