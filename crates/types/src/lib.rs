//! toolhost's vocabulary, shared by every layer: what a tool is
//! ([`ToolDef`]), what a call returns ([`Content`], [`CallError`]), who runs
//! it ([`Provider`], described by plain data in [`ProviderInfo`]), the
//! capability names a reviewer reads ([`Capability`]), the latency tier
//! names ([`Tier`]), the one tool-name rule ([`valid_tool_name`]) and the
//! one deadline rule ([`DeadlinePolicy`]).
//!
//! This crate knows nothing of wasmtime, MCP or any wire format; everything
//! else depends on it, and it depends on nothing of toolhost's.

#![deny(unsafe_code)]

mod cancel;
mod capability;
mod deadline;
mod names;
pub mod offer;
pub mod origin;
mod text;
mod tier;
mod tool;
pub mod trace;
pub mod validate;

pub use capability::{Capabilities, Capability};
pub use deadline::DeadlinePolicy;
pub use names::{TOOL_NAME_PATTERN, valid_tool_name};
pub use text::{cut_at, cut_with_note, log_safe};
pub use tier::{Tier, UnknownTier};
pub use tool::{
    Annotations, Audience, CallContext, CallCost, CallError, CallStats, Cancel, Content, HostContact, ModelNote,
    PluginEvent, Provider, ProviderInfo, ProviderKind, ResourceBody, ResourceLink, ToolAnnotations, ToolDef, ToolMeta,
    ToolOutput,
};
pub use validate::{Mismatch, SchemaError, Validator};
