//! [`Output`]: the content blocks a call returns.

use serde::Serialize;

use crate::{Content, ToolError};

/// The result of a call: one or more content blocks.
///
/// Usually [`Output::text`] or [`Output::json`]; `From<String>` and
/// `From<&str>` make text too, so `Ok("done".into())` works.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    blocks: Vec<Content>,
}

impl Output {
    /// A plain-text result.
    pub fn text(text: impl Into<String>) -> Output {
        Output { blocks: vec![Content::Text(text.into())] }
    }

    /// A JSON result (structured output), serialized with `serde_json`.
    /// Returns a `Result` so it can end a [`Tool::call`](crate::Tool::call)
    /// directly; it fails (as [`ToolError::Failed`]) only when `value`'s
    /// `Serialize` does.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Output, ToolError> {
        Ok(Output { blocks: vec![json_block(value)?] })
    }

    /// A result made of the given blocks (images, audio, resources ...).
    pub fn from_blocks(blocks: Vec<Content>) -> Output {
        Output { blocks }
    }

    /// Appends a text block.
    pub fn with_text(mut self, text: impl Into<String>) -> Output {
        self.blocks.push(Content::Text(text.into()));
        self
    }

    /// Appends a JSON block.
    pub fn with_json<T: Serialize + ?Sized>(mut self, value: &T) -> Result<Output, ToolError> {
        self.blocks.push(json_block(value)?);
        Ok(self)
    }

    /// Appends any block.
    pub fn push(&mut self, block: Content) {
        self.blocks.push(block);
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[Content] {
        &self.blocks
    }

    /// The blocks, as the WIT `call` returns them.
    pub fn into_blocks(self) -> Vec<Content> {
        self.blocks
    }
}

fn json_block<T: Serialize + ?Sized>(value: &T) -> Result<Content, ToolError> {
    serde_json::to_string(value)
        .map(Content::Json)
        .map_err(|e| ToolError::Failed(format!("could not serialize the result as JSON: {e}")))
}

impl From<String> for Output {
    fn from(text: String) -> Output {
        Output::text(text)
    }
}

impl From<&str> for Output {
    fn from(text: &str) -> Output {
        Output::text(text)
    }
}

impl From<Content> for Output {
    fn from(block: Content) -> Output {
        Output { blocks: vec![block] }
    }
}

impl From<Vec<Content>> for Output {
    fn from(blocks: Vec<Content>) -> Output {
        Output { blocks }
    }
}
