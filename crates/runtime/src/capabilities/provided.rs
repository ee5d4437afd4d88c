//! Capabilities whose host side an [`crate::Extension`] provides: `http`,
//! provided by the `toolhost-http` crate. The runtime knows which imports
//! such a capability answers, so it classifies them and refuses a component
//! importing one no installed extension provides; it knows nothing of the
//! grant's shape. The extension resolves the grant from
//! `plugins.grants.<plugin>` into its own type ([`ExtensionGrant`]), which
//! says whether it grants anything, reports and describes itself.

use super::{About, CapabilityFactor, Grants, InstanceSetup};
use crate::extension::ExtensionGrant;
use crate::state::State;
use toolhost_types::Capability;
use wasmtime::component::Linker;

/// A capability an extension provides.
pub struct Provided {
    about: &'static About,
}

static HTTP_ABOUT: About = About {
    capability: Capability::Http,
    interfaces: &["wasi:http/outgoing-handler", "wasi:http/types"],
    inert_without_grant: false,
    by_extension: true,
};

/// `http`: outgoing HTTP(S) requests to granted origins (`wasi:http`).
pub static HTTP: Provided = Provided { about: &HTTP_ABOUT };

impl Provided {
    fn grant<'g>(&self, grants: &'g Grants) -> Option<&'g dyn ExtensionGrant> {
        grants.extensions.get(self.about.capability)
    }
}

impl CapabilityFactor for Provided {
    fn about(&self) -> &'static About {
        self.about
    }

    fn held(&self, grants: &Grants) -> bool {
        self.grant(grants).is_some_and(|g| !g.is_empty())
    }

    fn configure(&self, _grants: &Grants, _setup: &mut InstanceSetup) -> Result<(), String> {
        // Nothing in the WASI context: the extension builds the call's
        // state from its grant (`Extension::instance`).
        Ok(())
    }

    fn link(&self, _linker: &mut Linker<State>) -> wasmtime::Result<()> {
        // Linked by the extension, when installed.
        Ok(())
    }

    fn report(&self, grants: &Grants) -> serde_json::Value {
        self.grant(grants).map_or_else(|| serde_json::Value::Array(Vec::new()), |g| g.report())
    }

    fn allows(&self, grants: &Grants) -> Vec<String> {
        self.grant(grants).map(|g| g.allows()).unwrap_or_default()
    }
}
