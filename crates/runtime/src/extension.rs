//! Capabilities whose host side lives outside this crate.
//!
//! `wasi:http` needs hyper and a TLS stack, which this crate does not carry:
//! the whole capability (its grant, its linking, its per-call state and
//! hooks) is the `toolhost-http` crate, installed on the runtime as an
//! [`Extension`] by the layer that assembles it, the way a Spin factor holds
//! its config, state and linking in one place. The runtime asks it to
//! resolve a plugin's grant ([`Extension::resolve`]), links it, gives each
//! call of a plugin holding its capability the extension's per-call state
//! ([`State::extension`]), and refuses, at load, a component importing a
//! capability no installed extension provides.

use crate::Limits;
use crate::capabilities::{GrantConfig, GrantError, Grants};
use crate::state::State;
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
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
    /// The call's span (or the caller's trace context), for spans of the
    /// extension's own under it.
    pub trace: Option<&'a toolhost_types::trace::Context>,
}

/// One capability's host side, provided from outside this crate.
pub trait Extension: Send + Sync + 'static {
    /// The capability it provides.
    fn capability(&self) -> Capability;
    /// Resolves `plugin`'s grant of the capability from its
    /// `plugins.grants` entry (`config`), which grants it: its entries
    /// checked and parsed once, into the extension's own type.
    fn resolve(&self, plugin: &str, config: &GrantConfig) -> Result<Arc<dyn ExtensionGrant>, GrantError>;
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
    /// What the host refused the call whose state this is, in its own
    /// words (`X is not granted to plugin P ...`), distinct, oldest first,
    /// a few at most. A call that fails with a message leaving them out
    /// (JavaScript's `fetch()` turns every refusal into `NetworkError`)
    /// gets them added, so the caller learns why.
    fn refusals(&self, _call: &(dyn Any + Send)) -> Vec<String> {
        Vec::new()
    }
    /// When a call ended in `error` because it went past one of this
    /// capability's host-side limits (a set of headers too large...): what
    /// it did, for a [`toolhost_types::CallError::HostResources`].
    fn limit_hit(&self, _error: &wasmtime::Error, _limits: &Limits) -> Option<String> {
        None
    }
}

impl std::fmt::Debug for dyn Extension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extension").field("capability", &self.capability()).finish_non_exhaustive()
    }
}

/// A plugin's grant of a capability an [`Extension`] provides, resolved by
/// it ([`Extension::resolve`]) into its own type: the runtime holds it in
/// [`Grants::extensions`] and asks it only what it says of itself.
pub trait ExtensionGrant: Any + Send + Sync + std::fmt::Debug {
    /// Whether it grants nothing.
    fn is_empty(&self) -> bool;
    /// The grant in detail, for reports (JSON).
    fn report(&self) -> serde_json::Value;
    /// In plain words, what it allows.
    fn allows(&self) -> Vec<String>;
    /// Of what a signed manifest asks to reach through this capability
    /// (`asks`, as the manifest writes them), what this grant does not
    /// cover (an ask that is not even well formed is not covered).
    fn uncovered(&self, asks: &[String]) -> Vec<String>;
}

/// The grants of capabilities extensions provide, by capability.
#[derive(Debug, Clone, Default)]
pub struct ExtensionGrants(BTreeMap<Capability, Arc<dyn ExtensionGrant>>);

impl ExtensionGrants {
    /// The grant of `c`, when the plugin has one.
    pub fn get(&self, c: Capability) -> Option<&dyn ExtensionGrant> {
        self.0.get(&c).map(|g| &**g)
    }

    /// The grant of `c` as the extension's own type `T`.
    pub fn get_as<T: ExtensionGrant>(&self, c: Capability) -> Option<&T> {
        let g: &dyn Any = self.get(c)?;
        g.downcast_ref()
    }

    /// Sets the grant of `c`.
    pub fn insert(&mut self, c: Capability, grant: Arc<dyn ExtensionGrant>) {
        self.0.insert(c, grant);
    }
}
