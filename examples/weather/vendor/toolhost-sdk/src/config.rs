//! The operator's settings for this plugin (`wasi:config/store`).
//!
//! The operator sets plain values per plugin in the host's configuration
//! (`plugins.config.<plugin>: {units: metric}`) and secrets with
//! `toolhost secret set <plugin> <name>`; a plugin sees only its own, in one
//! namespace. Read plain values with [`get`] and secrets with
//! [`secret::get`](crate::secret::get), which fails with a message telling
//! the operator how to set a missing one.
//!
//! Every plugin may read its values: no grant is needed, and a component
//! imports `wasi:config/store` only when its code calls one of these
//! functions.
//!
//! ```no_run
//! use toolhost_sdk::{ToolError, config};
//!
//! fn units() -> Result<String, ToolError> {
//!     Ok(config::get("units")?.unwrap_or_else(|| "metric".into()))
//! }
//! ```
//!
//! Compiled natively (unit tests), there is no store: every read fails
//! saying so.

use crate::ToolError;

/// Reads `key`: `Ok(None)` when the operator set no value of that name.
pub(crate) fn read(key: &str) -> Result<Option<String>, String> {
    imp::get(key)
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use crate::config_bindings::wasi::config::store;

    pub(super) fn get(key: &str) -> Result<Option<String>, String> {
        store::get(key).map_err(|e| match e {
            store::Error::Upstream(m) => m,
            store::Error::Io(m) => format!("I/O error: {m}"),
        })
    }
}

/// Natively there is no host, hence no store.
#[cfg(not(target_arch = "wasm32"))]
mod imp {
    pub(super) fn get(_: &str) -> Result<Option<String>, String> {
        Err(super::UNAVAILABLE.into())
    }
}

#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
const UNAVAILABLE: &str = "wasi:config/store exists only inside toolhost (wasm32 components)";

/// The value of setting `key` for this plugin, `None` when the operator set
/// none.
///
/// Plain values (`plugins.config.<plugin>`) and secrets share one namespace,
/// so this also returns a secret's value; prefer
/// [`secret::get`](crate::secret::get) for secrets, which explains how to set
/// a missing one.
///
/// # Errors
///
/// [`ToolError::Failed`] with the store's message when the store fails
/// (natively: always, there is no store).
pub fn get(key: &str) -> Result<Option<String>, ToolError> {
    read(key).map_err(|m| ToolError::failed(format!("reading setting {key:?}: {m}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natively_there_is_no_store() {
        let err = get("units").unwrap_err();
        assert_eq!(
            err,
            ToolError::failed(
                "reading setting \"units\": wasi:config/store exists only inside toolhost (wasm32 components)"
            )
        );
    }
}
