//! Content between the host's blocks and MCP's: one conversion each way.
//! `to_mcp` shapes what toolhost serves; `from_mcp` reads what external
//! servers return.

use crate::tool::{Content, ResourceBody};
use base64::Engine as _;
use rmcp::model::{ContentBlock, ResourceContents};
use serde_json::Value;

/// The host's blocks as MCP content blocks. JSON becomes its text.
pub fn to_mcp(content: &[Content]) -> Vec<ContentBlock> {
    let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    content
        .iter()
        .map(|c| match c {
            Content::Text(t) => ContentBlock::text(t.clone()),
            Content::Json(v) => ContentBlock::text(v.to_string()),
            Content::Image { mime_type, data } => ContentBlock::image(b64(data), mime_type.clone()),
            Content::Audio { mime_type, data } => ContentBlock::audio(b64(data), mime_type.clone()),
            Content::Resource { uri, mime_type, body } => {
                let contents = match body {
                    ResourceBody::Text(t) => ResourceContents::TextResourceContents {
                        uri: uri.clone(),
                        mime_type: mime_type.clone(),
                        text: t.clone(),
                        meta: None,
                    },
                    ResourceBody::Blob(b) => ResourceContents::BlobResourceContents {
                        uri: uri.clone(),
                        mime_type: mime_type.clone(),
                        blob: b64(b),
                        meta: None,
                    },
                };
                ContentBlock::resource(contents)
            }
        })
        .collect()
}

/// The structured content of a result: its one JSON object block, if that
/// is what it is.
pub fn structured(content: &[Content]) -> Option<Value> {
    match content {
        [Content::Json(v)] if v.is_object() => Some(v.clone()),
        _ => None,
    }
}

/// MCP content blocks as the host's. Structured content, when the
/// server sent it, becomes a JSON block in place of its text rendering.
pub fn from_mcp(blocks: &[ContentBlock], structured: Option<&Value>) -> Vec<Content> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_default();
    let mut out: Vec<Content> = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text(t) => Content::Text(t.text.clone()),
            ContentBlock::Image(i) => Content::Image { mime_type: i.mime_type.clone(), data: b64(&i.data) },
            ContentBlock::Audio(a) => Content::Audio { mime_type: a.mime_type.clone(), data: b64(&a.data) },
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, mime_type, text, .. } => Content::Resource {
                    uri: uri.clone(),
                    mime_type: mime_type.clone(),
                    body: ResourceBody::Text(text.clone()),
                },
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => Content::Resource {
                    uri: uri.clone(),
                    mime_type: mime_type.clone(),
                    body: ResourceBody::Blob(b64(blob)),
                },
                other => Content::Text(format!("(unsupported resource contents: {other:?})")),
            },
            ContentBlock::ResourceLink(l) => Content::Text(format!("resource: {}", l.uri)),
            other => Content::Text(format!("(unsupported content block: {other:?})")),
        })
        .collect();
    if let Some(s) = structured
        && let [Content::Text(t)] = &out[..]
        && serde_json::from_str::<Value>(t).ok().as_ref() == Some(s)
    {
        out = vec![Content::Json(s.clone())];
    }
    out
}
