//! toolhost-admission: everything that decides whether and how a plugin
//! joins the call pipeline, and nothing that runs a call.
//!
//! [`Admission`] takes a plugin's bytes (from a file, a registry pull or a
//! built-in), passes them through the [`package`] trust policy (signatures,
//! the lock file), resolves the operator's grants ([`GrantBook`]), names its
//! tools (`plugins.prefix`), holds it until the [`secrets`] its manifest
//! names are set ([`Values`]), and only then hands the admitted plugin to
//! the pipeline's registry. A config reload goes through here too: grants,
//! the trust policy and values are put in force on the plugins already
//! loaded ([`Admission::apply_grants`], [`Admission::apply_trust`]), every
//! step audited.
//!
//! **API boundary.** This crate sits on `toolhost-core` (the pipeline it
//! feeds) and the runtime; it knows no registry protocol (OCI pulls hand it
//! bytes), no MCP and no database. The pipeline knows nothing of it.
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolhost_admission::Admission;
//! use toolhost_core::{Pipeline, runtime::{Limits, Runtime}};
//!
//! let pipeline = Arc::new(Pipeline::new(Runtime::new(Limits::default(), None).unwrap()));
//! let admission = Admission::new(pipeline.clone());
//! admission.add_plugin_file(std::path::Path::new("plugins/weather.wasm")).unwrap();
//! ```

#![deny(unsafe_code)]

pub mod canary;
mod grants;
mod install;
pub mod package;
mod reconfigure;
pub mod secrets;
pub mod sigstore;
mod values;

pub use grants::GrantBook;
pub use install::{AddPluginError, Installed, is_plugin_file, plugin_files, upgrade_held};
pub use reconfigure::{GrantPlan, HeldPlugin, PluginChange};
pub use values::{PluginConfigValues, Values};

use package::{Provenance, TrustPolicy};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use toolhost_core::Pipeline;
use toolhost_core::{audit, capabilities, registry, runtime, tool};

/// Admits plugins into a [`Pipeline`]: trust, grants, names, values and
/// secrets, install and reconfigure. One per host; the pipeline it feeds is
/// shared with everything that calls tools.
#[derive(Debug)]
pub struct Admission {
    pipeline: Arc<Pipeline>,
    /// `plugins.grants`, `plugins.prefix` and the memory store.
    grants: GrantBook,
    /// Which plugin bytes may load.
    trust: arc_swap::ArcSwap<TrustPolicy>,
    /// Where each loaded plugin came from.
    provenance: Mutex<HashMap<String, Provenance>>,
    /// Serializes installs, so two versions of one plugin never race.
    installing: Mutex<()>,
    /// Plugins a reload unloaded (their grants no longer covered their
    /// imports, or the trust policy refused them), with why: loaded again
    /// by the reload that allows them again.
    withheld: Mutex<HashMap<String, reconfigure::Held>>,
    /// New versions refused because they ask for more than their grants
    /// give, while the running version serves: loaded by the reload whose
    /// grants cover them.
    upgrades: Mutex<HashMap<String, install::HeldUpgrade>>,
    /// `plugins.config`, the secrets, and the plugins waiting for one.
    values: Values,
    /// What signed revocation lists revoke: kept across trust policies
    /// (a reload's policy is the config's, these are added to it).
    published: Mutex<Vec<crate::package::Revocation>>,
    /// How each plugin's last canary ended (one under way is in the registry).
    canaries: Mutex<HashMap<String, canary::CanaryStatus>>,
}

impl Admission {
    /// Admission into `pipeline`: no grants, every plugin file admitted
    /// ([`TrustPolicy::permissive`]), no values or secrets.
    pub fn new(pipeline: Arc<Pipeline>) -> Admission {
        Admission {
            grants: GrantBook::new(pipeline.runtime().extensions()),
            pipeline,
            trust: arc_swap::ArcSwap::from_pointee(TrustPolicy::permissive()),
            provenance: Mutex::default(),
            installing: Mutex::new(()),
            withheld: Mutex::default(),
            upgrades: Mutex::default(),
            values: Values::default(),
            published: Mutex::default(),
            canaries: Mutex::default(),
        }
    }

    /// The pipeline admitted plugins join.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// The operator's grants, prefixes and memory store.
    pub fn grants(&self) -> &GrantBook {
        &self.grants
    }

    /// `plugins.config` and the secrets (read them; change them through
    /// [`Admission::set_plugin_config`] and the secret methods, which
    /// register the plugins that were waiting).
    pub fn values(&self) -> &Values {
        &self.values
    }

    /// Which plugin files may load (default: everything, see
    /// [`TrustPolicy::permissive`]; the `toolhost` binary applies the
    /// config's `trust:` section).
    pub fn with_trust(self, trust: TrustPolicy) -> Admission {
        self.set_trust(trust);
        self
    }

    /// Replaces the trust policy for the loads that follow; plugins already
    /// loaded stay (a config reload uses [`Admission::apply_trust`], which
    /// unloads those the new policy refuses).
    pub fn set_trust(&self, trust: TrustPolicy) {
        self.trust.store(Arc::new(self.with_published(trust)));
    }

    /// `trust` with what the revocation lists revoke.
    fn with_published(&self, mut trust: TrustPolicy) -> TrustPolicy {
        trust.published = self.published.lock().unwrap_or_else(|p| p.into_inner()).clone();
        trust
    }

    /// The trust policy in force.
    pub fn trust(&self) -> Arc<TrustPolicy> {
        self.trust.load_full()
    }

    /// Where a loaded plugin came from (`None`: not a plugin of this host).
    pub fn provenance(&self, plugin: &str) -> Option<Provenance> {
        self.provenance.lock().unwrap_or_else(|p| p.into_inner()).get(plugin).cloned()
    }

    fn set_provenance(&self, plugin: &str, provenance: Option<Provenance>) {
        let mut all = self.provenance.lock().unwrap_or_else(|p| p.into_inner());
        match provenance {
            Some(p) => all.insert(plugin.to_string(), p),
            None => all.remove(plugin),
        };
    }

    /// One install, grant change or registration at a time.
    fn one_at_a_time(&self) -> std::sync::MutexGuard<'_, ()> {
        self.installing.lock().unwrap_or_else(|p| p.into_inner())
    }
}
