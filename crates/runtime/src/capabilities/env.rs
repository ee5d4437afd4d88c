//! `env`: environment variables the operator names, read from the host's
//! environment once when the grant is resolved. Without a grant the
//! plugin's environment is empty, so the import (which every Rust guest has
//! through its standard library) exposes nothing.

use super::Noting;
use super::{About, CapabilityFactor, Grants, InstanceSetup};
use crate::state::State;
use toolhost_types::Capability;
use wasmtime::component::{HasData, Linker};
use wasmtime_wasi::cli::WasiCliCtxView;
use wasmtime_wasi::p2::bindings::cli::environment;

/// Reads the granted variables: (name, value) for those set, and the names
/// of those that are not.
pub(super) fn resolve(names: &[String]) -> (Vec<(String, String)>, Vec<String>) {
    let mut set = Vec::new();
    let mut missing = Vec::new();
    for name in names {
        match std::env::var(name) {
            Ok(v) => set.push((name.clone(), v)),
            Err(_) => missing.push(name.clone()),
        }
    }
    (set, missing)
}

/// The `env` capability.
pub struct Env;

static ABOUT: About = About {
    capability: Capability::Env,
    interfaces: &["wasi:cli/environment"],
    inert_without_grant: true,
    by_extension: false,
};

impl CapabilityFactor for Env {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    fn held(&self, grants: &Grants) -> bool {
        !grants.env.is_empty()
    }

    fn configure(&self, grants: &Grants, setup: &mut InstanceSetup) -> Result<(), String> {
        for (k, v) in &grants.env {
            setup.wasi.env(k, v);
        }
        Ok(())
    }

    fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()> {
        environment::add_to_linker::<State, HasEnv>(linker, |s| {
            let view = WasiCliCtxView { ctx: s.wasi.cli(), table: &mut s.table };
            Noting::new(&s.used, s.held, Capability::Env, view)
        })
    }

    fn report(&self, grants: &Grants) -> serde_json::Value {
        grants.env.iter().map(|(k, _)| k.clone()).collect()
    }

    fn allows(&self, grants: &Grants) -> Vec<String> {
        let set = grants.env.iter().map(|(name, _)| format!("may read the environment variable {name}"));
        let missing = grants
            .env_missing
            .iter()
            .map(|name| format!("was granted the environment variable {name}, which is not set on this host"));
        set.chain(missing).collect()
    }
}

struct HasEnv;
impl HasData for HasEnv {
    type Data<'a> = Noting<'a, WasiCliCtxView<'a>>;
}

impl environment::Host for Noting<'_, WasiCliCtxView<'_>> {
    fn get_environment(&mut self) -> wasmtime::Result<Vec<(String, String)>> {
        self.note();
        environment::Host::get_environment(&mut self.inner)
    }

    fn get_arguments(&mut self) -> wasmtime::Result<Vec<String>> {
        environment::Host::get_arguments(&mut self.inner)
    }

    fn initial_cwd(&mut self) -> wasmtime::Result<Option<String>> {
        environment::Host::initial_cwd(&mut self.inner)
    }
}
