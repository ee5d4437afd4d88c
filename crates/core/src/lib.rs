//! toolhost-core: the call pipeline every tool goes through, whatever its
//! provider, and nothing that serves it.
//!
//! [`Host`] is the pipeline: rate, resolve in the [`registry`], enforce the
//! caller's allow-list and tier ([`budget`], [`Conversation`] turns), the
//! [`ResultCache`], validation, the deadline, the run, the measurement, the
//! [`counters`] and one [`audit`] record. Around it: [`calibrate`] (probes),
//! [`rates`] (token buckets), [`package`] (signed packages and the trust
//! policy that admits plugin bytes) and [`config`] (`toolhost.yaml`).
//!
//! **API boundary.** The layers above (distribution, the MCP edge, the
//! speech bridge, operations) use only what this crate exports, and hand it
//! what it must not know about: a plugin's bytes rather than where they were
//! pulled from ([`Host::install_plugin_bytes`]), a memory store behind
//! [`runtime::MemoryBackend`] rather than a database. This crate depends on
//! no MCP, HTTP, OCI or database crate (its `Cargo.toml` is the proof) and
//! builds no wasm guest.
//!
//! ```no_run
//! use toolhost_core::{Host, runtime::{Limits, Runtime}, tool::CallContext};
//!
//! let runtime = Runtime::new(Limits::default(), None).unwrap();
//! let host = Host::new(runtime);
//! let out = host.call("roll", &serde_json::json!({"expression": "2d6+3"}), &CallContext::default());
//! println!("{out:?}");
//! ```

#![deny(unsafe_code)]

pub mod activity;
pub mod audit;
pub mod budget;
pub mod calibrate;
pub mod config;
pub mod counters;
pub mod package;
pub mod paths;
mod pipeline;
pub mod rates;
pub mod readiness;
pub mod registry;
pub mod secrets;

/// The wasm runtime (the `toolhost-runtime` crate).
pub use toolhost_runtime as runtime;
/// Capabilities (a module of the runtime).
pub use toolhost_runtime::capabilities;
/// The shared vocabulary (the `toolhost-types` crate).
pub use toolhost_types as tool;
/// Argument validation (the vocabulary's).
pub use toolhost_types::validate;

pub use pipeline::{
    AddPluginError, BackgroundCalibration, Batch, CacheStats, Conversation, GrantPlan, HeldPlugin, Host, Installed,
    LiveBudget, PluginChange, ResultCache, TurnCues, TurnTier, canonical_json, is_plugin_file, plugin_files,
};
