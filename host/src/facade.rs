//! [`Host`]: one host's parts behind one handle. The call pipeline runs
//! calls; admission decides what joins it. Commands, the admin API and the
//! fronts each take the part they need ([`Host::pipeline`],
//! [`Host::admission`]); operations ([`crate::Installer`], reload, the
//! fleet) hold these handles, not a copy of their state.

use std::sync::Arc;
use toolhost_admission::Admission;
use toolhost_core::Pipeline;
use toolhost_core::budget::Budget;
use toolhost_core::runtime::Runtime;
use toolhost_core::tool::{CallContext, CallError, ToolOutput};

/// A host: its call pipeline and the admission in front of it.
#[derive(Debug, Clone)]
pub struct Host {
    pipeline: Arc<Pipeline>,
    admission: Arc<Admission>,
}

impl Host {
    /// A host with no tools, default budget settings and no agents; every
    /// plugin file admitted (no trust policy).
    pub fn new(runtime: Runtime) -> Host {
        Host::from_pipeline(Pipeline::new(runtime))
    }

    /// A host with a configured budget (agents, ceilings, selector).
    pub fn with_budget(runtime: Runtime, budget: Budget) -> Host {
        Host::from_pipeline(Pipeline::with_budget(runtime, budget))
    }

    /// A host around `pipeline`, with default admission.
    pub fn from_pipeline(pipeline: Pipeline) -> Host {
        Host::from_admission(Admission::new(Arc::new(pipeline)))
    }

    /// A host around `admission` and the pipeline it feeds.
    pub fn from_admission(admission: Admission) -> Host {
        Host { pipeline: admission.pipeline().clone(), admission: Arc::new(admission) }
    }

    /// Which plugin files may load from now on (see
    /// [`Admission::set_trust`]).
    pub fn with_trust(self, trust: toolhost_admission::package::TrustPolicy) -> Host {
        self.admission.set_trust(trust);
        self
    }

    /// The operator's grants (`plugins.grants`), relative paths resolved
    /// against `base`, for plugins loaded from now on.
    pub fn with_grants(self, grants: toolhost_core::capabilities::GrantsByPlugin, base: &std::path::Path) -> Host {
        self.admission.grants().set(grants, base);
        self
    }

    /// The campaign memory store behind the `memory` capability (the first
    /// one given stays), also asked by the readiness probe.
    pub fn with_memory(self, store: Arc<dyn toolhost_core::runtime::MemoryBackend>) -> Host {
        let reachable = store.clone();
        if self.admission.grants().set_memory(store) {
            self.pipeline.readiness().depend_on(move || reachable.reachable());
        }
        self
    }

    /// The call pipeline: registry, budget, turns, cache, rates, audit.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Admission: trust, grants, values and secrets, install.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// Calls `tool` as the operator (see [`Pipeline::call`]).
    pub fn call(&self, tool: &str, arguments: &serde_json::Value, ctx: &CallContext) -> Result<ToolOutput, CallError> {
        self.pipeline.call(tool, arguments, ctx)
    }
}
