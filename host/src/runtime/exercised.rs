//! Which capabilities a call actually used, for the audit trail. The
//! interfaces through which a grant is exercised are shadowed by thin
//! wrappers that set a flag and delegate to wasmtime-wasi:
//! `wasi:filesystem/preopens` (a guest asks for its directories before any
//! file access) and `wasi:cli/environment`. The memory interface and the
//! socket address check set their flags directly.

use super::State;
use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::cli::WasiCliCtxView;
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::p2::bindings::cli::environment;
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::Descriptor;

/// Bits of [`crate::tool::CallStats::capabilities_used`].
pub const FILES: u8 = 1;
/// See [`FILES`].
pub const ENV: u8 = 2;
/// See [`FILES`].
pub const MEMORY: u8 = 4;
/// See [`FILES`].
pub const NETWORK: u8 = 8;

/// Names of the capabilities set in `bits`.
pub fn names(bits: u8) -> Vec<&'static str> {
    [(FILES, "files"), (ENV, "env"), (MEMORY, "memory"), (NETWORK, "network")]
        .into_iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| n)
        .collect()
}

pub(crate) struct Fs<'a> {
    used: &'a mut u8,
    granted: bool,
    inner: WasiFilesystemCtxView<'a>,
}

pub(crate) struct HasFs;
impl HasData for HasFs {
    type Data<'a> = Fs<'a>;
}

pub(crate) fn fs(s: &mut State) -> Fs<'_> {
    Fs {
        used: &mut s.used,
        granted: s.files_granted,
        inner: WasiFilesystemCtxView { ctx: s.wasi.filesystem(), table: &mut s.table },
    }
}

impl preopens::Host for Fs<'_> {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        if self.granted {
            *self.used |= FILES;
        }
        preopens::Host::get_directories(&mut self.inner)
    }
}

pub(crate) struct Env<'a> {
    used: &'a mut u8,
    granted: bool,
    inner: WasiCliCtxView<'a>,
}

pub(crate) struct HasEnv;
impl HasData for HasEnv {
    type Data<'a> = Env<'a>;
}

pub(crate) fn env(s: &mut State) -> Env<'_> {
    Env { used: &mut s.used, granted: s.env_granted, inner: WasiCliCtxView { ctx: s.wasi.cli(), table: &mut s.table } }
}

impl environment::Host for Env<'_> {
    fn get_environment(&mut self) -> wasmtime::Result<Vec<(String, String)>> {
        if self.granted {
            *self.used |= ENV;
        }
        environment::Host::get_environment(&mut self.inner)
    }

    fn get_arguments(&mut self) -> wasmtime::Result<Vec<String>> {
        environment::Host::get_arguments(&mut self.inner)
    }

    fn initial_cwd(&mut self) -> wasmtime::Result<Option<String>> {
        environment::Host::initial_cwd(&mut self.inner)
    }
}
