//! toolhost-dist: where plugins come from, other than a file the operator
//! names. [`oci`]: `oci://` references, registry pull and push through
//! `oci-client`, the Wasm OCI artifact shape checks, credentials and the
//! digest cache; [`builtin`] (the `builtins` feature, on by default): the
//! four built-in plugins, compiled by `build.rs` and embedded;
//! [`catalogue`]: the marketplace's catalogues, hosted in OCI registries,
//! and search over them.
//!
//! What it fetches goes through the core's trust policy and install path
//! (`toolhost_core::Pipeline::install_plugin_bytes`): a registry never decides
//! what loads.

#![deny(unsafe_code)]

#[cfg(feature = "builtins")]
pub mod builtin;
pub mod catalogue;
pub mod oci;
pub mod sigstore;

use toolhost_core::{runtime, tool};
