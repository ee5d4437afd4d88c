//! Capabilities whose host side lives outside this crate.
//!
//! `wasi:http` needs hyper and a TLS stack, which this crate does not carry:
//! its host side is the `toolhost-http` crate, installed on the runtime as
//! an [`Extension`] by the layer that assembles it. The runtime links it,
//! gives each call of a plugin holding its capability the extension's
//! per-call state ([`State::extension`]), and refuses, at load, a component
//! importing a capability no installed extension provides.

use crate::Limits;
use crate::capabilities::Grants;
use crate::state::State;
use std::any::Any;
use std::time::Instant;
use toolhost_types::Capability;
use wasmtime::component::Linker;

/// What an extension knows of the call it sets up.
#[derive(Debug)]
pub struct ExtensionCall<'a> {
    /// The plugin's identity (its name).
    pub plugin: &'a str,
    /// Its resolved grants.
    pub grants: &'a Grants,
    /// The limits the call runs under.
    pub limits: &'a Limits,
    /// When the call must end.
    pub deadline: Instant,
    /// The agent the call runs for (`None`: the operator): whose share of
    /// the process's descriptors its connections take.
    pub caller: Option<&'a str>,
}

/// One capability's host side, provided from outside this crate.
pub trait Extension: Send + Sync + 'static {
    /// The capability it provides.
    fn capability(&self) -> Capability;
    /// Links its host functions into the linker every instance is made
    /// from; they reach the call's state through [`State::extension`].
    fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()>;
    /// The state one call of a plugin holding the capability starts with.
    fn instance(&self, call: ExtensionCall<'_>) -> Box<dyn Any + Send>;
    /// What the call whose state this is contacted, for the audit (when it
    /// ended).
    fn contacts(&self, _call: &(dyn Any + Send)) -> Vec<toolhost_types::HostContact> {
        Vec::new()
    }
    /// When a call ended in `error` because it went past one of this
    /// capability's host-side limits (a set of headers too large...): what
    /// it did, for a [`toolhost_types::CallError::HostResources`].
    fn limit_hit(&self, _error: &wasmtime::Error, _limits: &Limits) -> Option<String> {
        None
    }
}
