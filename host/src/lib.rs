//! toolhost: a WebAssembly plugin host for sandboxed LLM tools.
//!
//! Tools are WASI preview-2 components implementing the `toolhost:plugin`
//! WIT world (`wit/tool.wit`). The [`runtime`] compiles each once and runs
//! every call in a fresh instance under hard limits; the [`registry`] holds
//! every tool in one atomically replaceable catalogue; [`Host::call`] is the
//! one pipeline a call goes through.
//!
//! ```no_run
//! use toolhost::{Host, runtime::{Limits, Runtime}, tool::CallContext};
//!
//! let runtime = Runtime::new(Limits::default(), None).unwrap();
//! let host = Host::new(runtime);
//! host.add_builtins().unwrap();
//! let out = host
//!     .call("roll", &serde_json::json!({"expression": "2d6+3"}), &CallContext::default())
//!     .unwrap();
//! println!("{:?}", out.content);
//! ```

#![deny(unsafe_code)]

pub mod admin;
pub mod audit;
pub mod bridge;
pub mod budget;
pub mod builtin;
pub mod calibrate;
pub mod changes;
pub mod config;
pub mod doctor;
mod host;
pub mod limits;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod oci;
pub mod package;
pub mod paths;
pub mod registry;
pub mod reload;
pub mod report;
pub mod scaffold;
pub mod ui;
pub mod watch;

/// The wasm runtime (the `toolhost-runtime` crate).
pub use toolhost_runtime as runtime;
/// Capabilities (a module of the runtime).
pub use toolhost_runtime::capabilities;
/// The shared vocabulary (the `toolhost-types` crate).
pub use toolhost_types as tool;
/// Argument validation (the vocabulary's).
pub use toolhost_types::validate;

pub use host::{
    AddPluginError, Assembly, BackgroundCalibration, Batch, BuildError, CacheChoice, CacheStats, Conversation,
    GrantPlan, HeldPlugin, Host, HostBuilder, Installed, LiveBudget, PluginChange, ResultCache, TurnCues, TurnTier,
    canonical_json, plugin_files,
};
