//! The one place the host generates bindings for the WIT worlds.
//!
//! The host links against `host-links`, a superset of every world a plugin
//! may target. Its `offer` and `execution` exports are optional:
//! [`PluginPre`] finds `tool` (required), `offer` and `execution` (when the
//! component exports them) itself, where the generated pre-instance would
//! require all three.

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "host-links",
    // A question the client answers in a later request (MCP 2026-07-28's
    // `input_required`) ends the call: these may trap.
    imports: { "toolhost:plugin/client": trappable },
});

pub use self::toolhost::plugin::host::LogLevel;
pub use self::toolhost::plugin::types::ResourceBody;
pub use exports::toolhost::plugin::tool::{Content, ToolError, ToolInfo};
use exports::toolhost::plugin::{execution, offer, tool};
use wasmtime::component::{Instance, InstancePre};
use wasmtime::{AsContextMut, Result};

/// The export every plugin must provide, without its version.
pub const TOOL_INTERFACE: &str = "toolhost:plugin/tool";
/// The export of a plugin that offers resources, prompts or completions,
/// without its version.
pub const OFFER_INTERFACE: &str = "toolhost:plugin/offer";
/// The export of a plugin that says which of its tools run long, without
/// its version.
pub const EXECUTION_INTERFACE: &str = "toolhost:plugin/execution";
/// The contract's package version (`wit/tool.wit`).
pub const CONTRACT_VERSION: &str = "0.1.2";

/// A component linked and ready to instantiate, with where its exports are.
pub struct PluginPre<T: 'static> {
    instance_pre: InstancePre<T>,
    tool: tool::GuestIndices,
    offer: Option<offer::GuestIndices>,
    execution: Option<execution::GuestIndices>,
}

impl<T: 'static> Clone for PluginPre<T> {
    fn clone(&self) -> Self {
        PluginPre {
            instance_pre: self.instance_pre.clone(),
            tool: self.tool.clone(),
            offer: self.offer.clone(),
            execution: self.execution.clone(),
        }
    }
}

/// Whether the component of `pre` exports `interface` (any version).
fn exports<T>(pre: &InstancePre<T>, interface: &str) -> bool {
    pre.component()
        .component_type()
        .exports(pre.engine())
        .any(|(name, _)| name.starts_with(interface) && name[interface.len()..].starts_with('@'))
}

impl<T: 'static> PluginPre<T> {
    /// Finds the component's `tool` export (an error without it) and its
    /// `offer` export (when it has one).
    pub fn new(instance_pre: InstancePre<T>) -> Result<Self> {
        let tool = tool::GuestIndices::new(&instance_pre)?;
        let offer = match exports(&instance_pre, OFFER_INTERFACE) {
            true => Some(offer::GuestIndices::new(&instance_pre)?),
            false => None,
        };
        let execution = match exports(&instance_pre, EXECUTION_INTERFACE) {
            true => Some(execution::GuestIndices::new(&instance_pre)?),
            false => None,
        };
        Ok(PluginPre { instance_pre, tool, offer, execution })
    }

    pub fn instance_pre(&self) -> &InstancePre<T> {
        &self.instance_pre
    }

    /// Whether the component exports `offer`.
    pub fn offers(&self) -> bool {
        self.offer.is_some()
    }

    /// Whether the component exports `execution`.
    pub fn exports_execution(&self) -> bool {
        self.execution.is_some()
    }

    /// A fresh instance in `store`.
    pub fn instantiate(&self, mut store: impl AsContextMut<Data = T>) -> Result<Plugin> {
        let instance: Instance = self.instance_pre.instantiate(&mut store)?;
        let tool = self.tool.load(&mut store, &instance)?;
        let offer = match &self.offer {
            Some(o) => Some(o.load(&mut store, &instance)?),
            None => None,
        };
        let execution = match &self.execution {
            Some(e) => Some(e.load(&mut store, &instance)?),
            None => None,
        };
        Ok(Plugin { tool, offer, execution })
    }
}

/// One instance's exports.
pub struct Plugin {
    tool: tool::Guest,
    offer: Option<offer::Guest>,
    execution: Option<execution::Guest>,
}

impl Plugin {
    pub fn toolhost_plugin_tool(&self) -> &tool::Guest {
        &self.tool
    }

    /// Its `offer` export, when the component has one.
    pub fn toolhost_plugin_offer(&self) -> Option<&offer::Guest> {
        self.offer.as_ref()
    }

    /// Its `execution` export, when the component has one.
    pub fn toolhost_plugin_execution(&self) -> Option<&execution::Guest> {
        self.execution.as_ref()
    }
}
