//! [`ToolError`]: why a call failed, as the model will read it.

use std::fmt;

/// Why a call failed. The message is shown to the model so it can correct
/// itself: say what was wrong and what would be right.
///
/// The four kinds are those of the WIT `tool-error` (the SDK converts at the
/// component's boundary). Build one with [`ToolError::invalid_input`],
/// [`not_found`](ToolError::not_found), [`forbidden`](ToolError::forbidden) or
/// [`failed`](ToolError::failed), or let `?` convert any
/// [`std::error::Error`] (an `std::io::Error`, a `serde_json::Error` ...)
/// into [`ToolError::Failed`] carrying its message:
///
/// ```
/// use toolhost_sdk::ToolError;
///
/// fn read_config(path: &str) -> Result<serde_json::Value, ToolError> {
///     let text = std::fs::read_to_string(path)?; // io::Error -> Failed
///     Ok(serde_json::from_str(&text)?) // serde_json::Error -> Failed
/// }
///
/// let err = read_config("/no/such/file.json").unwrap_err();
/// assert!(matches!(err, ToolError::Failed(_)), "{err}");
/// ```
///
/// To choose another kind, map the error yourself:
/// `.map_err(|e| ToolError::not_found(format!("{path}: {e}")))?`.
///
/// `ToolError` deliberately does not implement [`std::error::Error`]: that is
/// what lets the blanket `From` conversion exist.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolError {
    /// The arguments were well-formed but made no sense (bad dice expression,
    /// unknown table, path outside the sandbox ...).
    InvalidInput(String),
    /// The thing asked for does not exist (unknown rule id, missing file ...).
    NotFound(String),
    /// The request needs something the plugin was not granted.
    Forbidden(String),
    /// The tool ran and failed.
    Failed(String),
}

impl ToolError {
    /// The arguments were well-formed but made no sense.
    pub fn invalid_input(message: impl Into<String>) -> ToolError {
        ToolError::InvalidInput(message.into())
    }

    /// The thing asked for does not exist.
    pub fn not_found(message: impl Into<String>) -> ToolError {
        ToolError::NotFound(message.into())
    }

    /// The request needs something the plugin was not granted.
    pub fn forbidden(message: impl Into<String>) -> ToolError {
        ToolError::Forbidden(message.into())
    }

    /// The tool ran and failed.
    pub fn failed(message: impl Into<String>) -> ToolError {
        ToolError::Failed(message.into())
    }

    /// The message, whatever the kind.
    pub fn message(&self) -> &str {
        match self {
            ToolError::InvalidInput(m) | ToolError::NotFound(m) | ToolError::Forbidden(m) | ToolError::Failed(m) => m,
        }
    }

    /// The kind, as the WIT names it: `invalid-input`, `not-found`,
    /// `forbidden` or `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::InvalidInput(_) => "invalid-input",
            ToolError::NotFound(_) => "not-found",
            ToolError::Forbidden(_) => "forbidden",
            ToolError::Failed(_) => "failed",
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

/// Any error becomes [`ToolError::Failed`] with its message, followed by the
/// messages of its sources (`open config.json: permission denied`) unless
/// the message already includes them.
impl<E: std::error::Error> From<E> for ToolError {
    fn from(error: E) -> ToolError {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !text.is_empty() && !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        ToolError::Failed(message)
    }
}

/// The WIT `tool-error`, as the component's `call` returns it.
impl From<ToolError> for crate::bindings::toolhost::plugin::types::ToolError {
    fn from(error: ToolError) -> Self {
        use crate::bindings::toolhost::plugin::types::ToolError as Wit;
        match error {
            ToolError::InvalidInput(m) => Wit::InvalidInput(m),
            ToolError::NotFound(m) => Wit::NotFound(m),
            ToolError::Forbidden(m) => Wit::Forbidden(m),
            ToolError::Failed(m) => Wit::Failed(m),
        }
    }
}
