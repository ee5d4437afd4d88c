//! The error body every HTTP front of toolhost answers with (the MCP front's
//! own refusals, the admin API, the DM's page): the JSON-RPC error shape,
//! so an MCP client reads it as it reads any error.

use serde::{Deserialize, Serialize};

/// An error, in the JSON-RPC error shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorReply {
    /// `"2.0"`.
    pub jsonrpc: String,
    /// Always null (not an answer to a JSON-RPC request).
    pub id: Option<u64>,
    /// The error.
    pub error: ErrorBody,
}

/// The error inside [`ErrorReply`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// JSON-RPC code (-32000: a server error).
    pub code: i64,
    /// What went wrong, for the operator.
    pub message: String,
    /// The machine-readable kind.
    pub data: ErrorData,
}

/// The machine-readable part of an error.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorData {
    /// `not_found`, `invalid_input`, `forbidden`, `capacity_exceeded`, `handler_error`.
    pub code: String,
}

impl ErrorReply {
    /// An error with `code` and `message`.
    pub fn new(code: &str, message: impl Into<String>) -> ErrorReply {
        ErrorReply {
            jsonrpc: "2.0".into(),
            id: None,
            error: ErrorBody { code: -32000, message: message.into(), data: ErrorData { code: code.into() } },
        }
    }
}
