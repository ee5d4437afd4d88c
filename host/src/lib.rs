//! toolhost: a WebAssembly plugin host for sandboxed LLM tools.
//!
//! Tools are WASI preview-2 components implementing the `toolhost:plugin`
//! WIT world (`wit/tool.wit`). The [`runtime`] compiles each once and runs
//! every call in a fresh instance under hard limits; the [`registry`] holds
//! every tool in one atomically replaceable catalogue; the [`Pipeline`] is
//! the one path a call goes through, and [`Admission`] decides what joins
//! it. [`Host`] holds both.
//!
//! ```no_run
//! use toolhost::{Host, runtime::{Limits, Runtime}, tool::CallContext};
//!
//! let runtime = Runtime::new(Limits::default(), None).unwrap();
//! let host = Host::new(runtime);
//! toolhost::builtin::add_builtins(host.admission()).unwrap();
//! let out = host
//!     .call("roll", &serde_json::json!({"expression": "2d6+3"}), &CallContext::default())
//!     .unwrap();
//! println!("{:?}", out.content);
//! ```

#![deny(unsafe_code)]

pub mod admin;
pub mod audit_query;
mod builder;
pub mod changes;
pub mod cluster;
pub mod doctor;
mod facade;
pub mod fleet;
pub mod install;
pub mod market;
pub mod metrics;
pub mod reload;
pub mod report;
pub mod review;
pub mod revocations;
pub mod scaffold;
pub mod serve;
pub mod telemetry;
pub mod ui;
pub mod watch;

/// Plugin admission: packages and trust, secrets (the `toolhost-admission` crate).
pub use toolhost_admission::{canary, package, secrets, sigstore};
/// The configuration file (the `toolhost-config` crate).
pub use toolhost_config as config;
/// The call pipeline and what it stands on (the `toolhost-core` crate).
pub use toolhost_core::{activity, audit, budget, calibrate, counters, rates, registry};

/// The speech-to-speech bridge (the `toolhost-bridge` crate).
pub use toolhost_bridge as bridge;
/// Signing through Sigstore (Fulcio, Rekor).
pub use toolhost_dist::sigstore as sigstore_signing;
/// Registries, the marketplace's catalogues and the built-in plugins (the `toolhost-dist` crate).
pub use toolhost_dist::{builtin, catalogue, oci};
/// `wasi:http` for plugins: the runtime extension `toolhost` installs.
pub use toolhost_http as http;
/// The MCP server front (the `toolhost-mcp` crate).
pub use toolhost_mcp as mcp;
/// The MCP client of external servers (the `toolhost-mcp-client` crate).
pub use toolhost_mcp_client as mcp_client;
/// The campaign memory store (the `toolhost-memory` crate).
pub use toolhost_memory as memory;
/// The wasm runtime (the `toolhost-runtime` crate).
pub use toolhost_runtime as runtime;
/// Capabilities (a module of the runtime).
pub use toolhost_runtime::capabilities;
/// The shared vocabulary (the `toolhost-types` crate).
pub use toolhost_types as tool;
/// Spans and W3C trace context ([`telemetry`] exports them).
pub use toolhost_types::trace;
/// Argument validation (the vocabulary's).
pub use toolhost_types::validate;

pub use builder::{Assembly, BuildError, CacheChoice, HostBuilder, MemoryLocation};
pub use facade::Host;
pub use install::Installer;
pub use toolhost_admission::{
    AddPluginError, Admission, GrantBook, GrantPlan, HeldPlugin, Installed, PluginChange, Values, is_plugin_file,
    plugin_files, upgrade_held,
};
pub use toolhost_core::{
    BackgroundCalibration, Batch, CacheStats, Conversation, LiveBudget, Pipeline, ResultCache, TurnCues, TurnTier,
    canonical_json,
};
