//! toolhost-core: the call pipeline every tool goes through, whatever its
//! provider, and nothing that serves it or decides what joins it.
//!
//! [`Pipeline`] is the pipeline: rate, resolve in the [`registry`], enforce
//! the caller's allow-list and tier ([`budget`], [`Conversation`] turns),
//! the [`ResultCache`], validation, the deadline, the run, the measurement,
//! the [`counters`] and one [`audit`] record. Around it: [`calibrate`]
//! (probes) and [`rates`] (token buckets).
//!
//! **API boundary.** The layers above (admission, distribution, the MCP
//! edge, the speech bridge, operations) use only what this crate exports,
//! and hand it what it must not know about: plugins already admitted (the
//! `toolhost-admission` crate holds trust, signatures, grants and
//! secrets), a memory store behind [`runtime::MemoryBackend`] rather than a
//! database. This crate depends on no MCP, HTTP, OCI, signature, config
//! parsing or database crate (its `Cargo.toml` is the proof) and builds no
//! wasm guest.
//!
//! ```no_run
//! use toolhost_core::{Pipeline, runtime::{Limits, Runtime}, tool::CallContext};
//!
//! let runtime = Runtime::new(Limits::default(), None).unwrap();
//! let pipeline = Pipeline::new(runtime);
//! let out = pipeline.call("roll", &serde_json::json!({"expression": "2d6+3"}), &CallContext::default());
//! println!("{out:?}");
//! ```

#![deny(unsafe_code)]

pub mod activity;
pub mod audit;
pub mod budget;
pub mod calibrate;
pub mod counters;
mod pipeline;
pub mod rates;
pub mod readiness;
pub mod registry;

/// The wasm runtime (the `toolhost-runtime` crate).
pub use toolhost_runtime as runtime;
/// Capabilities (a module of the runtime).
pub use toolhost_runtime::capabilities;
/// The shared vocabulary (the `toolhost-types` crate).
pub use toolhost_types as tool;
pub use toolhost_types::trace;
/// Argument validation (the vocabulary's).
pub use toolhost_types::validate;

pub use pipeline::{
    BackgroundCalibration, Batch, CacheStats, Conversation, LiveBudget, Pipeline, ResultCache, TurnCues, TurnTier,
    canonical_json,
};
