//! Where toolhost keeps its files: the compile cache and the state
//! directory (calibration, measurements, the audit trail, the memory store,
//! the admin endpoint record).

use std::path::PathBuf;

/// A per-user directory: `$<override_var>` if set, else `$<xdg_var>/toolhost`,
/// else `~/<home_fallback>/toolhost`, else under the system temp dir.
pub fn user_dir(override_var: &str, xdg_var: &str, home_fallback: &str) -> PathBuf {
    let set = |v: &str| std::env::var_os(v).filter(|d| !d.is_empty()).map(PathBuf::from);
    if let Some(d) = set(override_var) {
        return d;
    }
    if let Some(d) = set(xdg_var) {
        return d.join("toolhost");
    }
    if let Some(home) = set("HOME") {
        return home.join(home_fallback).join("toolhost");
    }
    std::env::temp_dir().join(format!("toolhost-{}", home_fallback.replace('/', "-").trim_start_matches('.')))
}

/// Where calibration results and other state live by default:
/// `$TOOLHOST_STATE_DIR`, `$XDG_STATE_HOME/toolhost` or `~/.local/state/toolhost`.
pub fn default_state_dir() -> PathBuf {
    user_dir("TOOLHOST_STATE_DIR", "XDG_STATE_HOME", ".local/state")
}

/// Where compiled components are cached by default: `$TOOLHOST_CACHE_DIR`,
/// `$XDG_CACHE_HOME/toolhost` or `~/.cache/toolhost`.
pub fn default_cache_dir() -> PathBuf {
    user_dir("TOOLHOST_CACHE_DIR", "XDG_CACHE_HOME", ".cache")
}
