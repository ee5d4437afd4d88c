//! This plugin's secrets (API keys, tokens), as the operator set them with
//! `toolhost secret set <plugin> <name>` (the value read from stdin).
//!
//! Secrets are read through `wasi:config/store`, in the same namespace as
//! the plugin's plain settings ([`config`](crate::config)); a plugin sees
//! only its own. The host keeps a secret's value out of its own channels
//! (log lines, progress messages, error text are redacted), but what the
//! plugin does with it is the plugin's: it can send it wherever its HTTP
//! grants allow. The grant is the boundary.
//!
//! ```no_run
//! use toolhost_sdk::{ToolError, http, secret};
//!
//! fn fetch() -> Result<String, ToolError> {
//!     let key = secret::get("api_key")?;
//!     let response = http::get("https://api.example.com/v1/items").bearer_auth(&key).send()?;
//!     Ok(response.error_for_status()?.text()?.to_owned())
//! }
//! ```

use crate::ToolError;

/// The value of secret `name`.
///
/// # Errors
///
/// A missing secret is [`ToolError::Failed`] reading
/// ``secret NAME is not set; the operator sets it with `toolhost secret set <plugin> NAME` ``;
/// a failing store is [`ToolError::Failed`] with its message (natively:
/// always, there is no store).
pub fn get(name: &str) -> Result<String, ToolError> {
    match crate::config::read(name) {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(not_set(name)),
        Err(m) => Err(ToolError::failed(format!("reading secret {name}: {m}"))),
    }
}

fn not_set(name: &str) -> ToolError {
    ToolError::failed(format!(
        "secret {name} is not set; the operator sets it with `toolhost secret set <plugin> {name}`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_secret_says_how_to_set_it() {
        assert_eq!(
            not_set("api_key").message(),
            "secret api_key is not set; the operator sets it with `toolhost secret set <plugin> api_key`"
        );
        assert_eq!(not_set("api_key").kind(), "failed");
    }

    #[test]
    fn natively_there_is_no_store() {
        let err = get("api_key").unwrap_err();
        assert_eq!(
            err,
            ToolError::failed(
                "reading secret api_key: wasi:config/store exists only inside toolhost (wasm32 components)"
            )
        );
    }
}
