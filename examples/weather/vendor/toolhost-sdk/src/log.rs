//! Logging and progress through the host.
//!
//! Lines go to the host's log (and to the MCP client as logging notifications
//! when it asked for them); the host bounds how many one call may write.
//! Every function takes anything `Display`, so both `log::info("done")` and
//! `log::debug(format_args!("rolled {n}"))` work.
//!
//! Compiled natively (unit tests), the lines go to stderr instead, so tool code
//! that logs stays testable outside the host.

use std::fmt::Display;

#[cfg(target_arch = "wasm32")]
use crate::bindings::toolhost::plugin::host;

#[derive(Clone, Copy)]
enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

#[cfg(target_arch = "wasm32")]
fn write(level: Level, message: &dyn Display) {
    let level = match level {
        Level::Trace => host::LogLevel::Trace,
        Level::Debug => host::LogLevel::Debug,
        Level::Info => host::LogLevel::Info,
        Level::Warn => host::LogLevel::Warn,
        Level::Error => host::LogLevel::Error,
    };
    host::log(level, &message.to_string());
}

#[cfg(not(target_arch = "wasm32"))]
fn write(level: Level, message: &dyn Display) {
    let level = match level {
        Level::Trace => "TRACE",
        Level::Debug => "DEBUG",
        Level::Info => "INFO",
        Level::Warn => "WARN",
        Level::Error => "ERROR",
    };
    eprintln!("{level} {message}");
}

/// Logs at trace level.
pub fn trace(message: impl Display) {
    write(Level::Trace, &message);
}

/// Logs at debug level.
pub fn debug(message: impl Display) {
    write(Level::Debug, &message);
}

/// Logs at info level.
pub fn info(message: impl Display) {
    write(Level::Info, &message);
}

/// Logs at warn level.
pub fn warn(message: impl Display) {
    write(Level::Warn, &message);
}

/// Logs at error level.
pub fn error(message: impl Display) {
    write(Level::Error, &message);
}

/// Reports progress of a long-running call: `progress` so far, out of `total`
/// when known, with an optional message. Forwarded to the MCP client as
/// `notifications/progress` when it asked for progress. Also re-exported at
/// the crate root.
pub fn progress(progress: f64, total: Option<f64>, message: Option<&str>) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::toolhost::plugin::host::progress(progress, total, message);
    #[cfg(not(target_arch = "wasm32"))]
    match (total, message) {
        (Some(total), Some(m)) => eprintln!("PROGRESS {progress}/{total} {m}"),
        (Some(total), None) => eprintln!("PROGRESS {progress}/{total}"),
        (None, Some(m)) => eprintln!("PROGRESS {progress} {m}"),
        (None, None) => eprintln!("PROGRESS {progress}"),
    }
}
