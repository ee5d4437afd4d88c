//! Where toolhost keeps its files: the compile cache and the state
//! directory (calibration, measurements, the audit trail, the memory store,
//! the admin endpoint record).

use std::path::PathBuf;

/// A per-user directory: `$<override_var>` if set, else `$<xdg_var>/toolhost`,
/// else `<home>/<home_fallback>/toolhost`, where home is `$HOME` or, when that
/// is unset, the user's home directory from the password database. Never a
/// shared directory such as the system temp dir: another local user could
/// create it first and own what toolhost keeps there (compiled code, keys).
/// A user without a home directory gets `/run/user/<uid>/toolhost-<kind>`,
/// where only root can create entries (a missing one is an error that names
/// `$<override_var>`).
pub fn user_dir(override_var: &str, xdg_var: &str, home_fallback: &str) -> PathBuf {
    let set = |v: &str| std::env::var_os(v).filter(|d| !d.is_empty()).map(PathBuf::from);
    if let Some(d) = set(override_var) {
        return d;
    }
    if let Some(d) = set(xdg_var).filter(|d| d.is_absolute()) {
        return d.join("toolhost");
    }
    match std::env::home_dir().filter(|h| h.is_absolute()) {
        Some(home) => home.join(home_fallback).join("toolhost"),
        None => PathBuf::from(format!(
            "/run/user/{}/toolhost-{}",
            crate::runtime::private::effective_uid(),
            home_fallback.rsplit('/').next().unwrap_or("state").trim_start_matches('.')
        )),
    }
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
