//! Content between the host's blocks and MCP's: one conversion each way,
//! and the shaping of what toolhost serves for the protocol version a
//! client negotiated.
//!
//! `to_mcp` shapes what toolhost serves; `from_mcp` reads what external
//! servers return. An external server's blocks survive the round trip as
//! it sent them: annotations, resource links, embedded resources (their
//! `_meta` and a link's icons are not kept).
//!
//! [`Dialect`] says what a protocol version can carry. Results and tool
//! definitions are built for the newest one, then shaped down for older
//! clients: before 2025-06-18 there is no `structuredContent` (its JSON
//! stays as a text block), no `outputSchema`, no tool `title`, no
//! `resource_link` block (it becomes a text block naming the resource) and
//! no `lastModified` annotation; before 2025-03-26 there is no audio block
//! (it becomes a text block saying what was left out) and no tool
//! annotations.

use crate::tool::{Annotations, Audience, Content, ResourceBody, ResourceLink};
use base64::Engine as _;
use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptResult, ProtocolVersion, Resource, ResourceContents, Role, Tool,
};
use serde_json::Value;

/// The host's blocks as MCP content blocks. JSON becomes its text.
pub fn to_mcp(content: &[Content]) -> Vec<ContentBlock> {
    content.iter().map(block_to_mcp).collect()
}

fn block_to_mcp(c: &Content) -> ContentBlock {
    let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    match c {
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
        Content::ResourceLink(l) => {
            let mut r = Resource::new(l.uri.clone(), l.name.clone());
            r.title = l.title.clone();
            r.description = l.description.clone();
            r.mime_type = l.mime_type.clone();
            r.size = l.size;
            ContentBlock::resource_link(r)
        }
        Content::Annotated { block, annotations } => {
            let mut b = block_to_mcp(block);
            if let Some(slot) = annotations_of(&mut b) {
                *slot = Some(annotations_to_mcp(annotations));
            }
            b
        }
    }
}

/// Where a block keeps its annotations (`None` for a kind of block this
/// host does not know).
fn annotations_of(b: &mut ContentBlock) -> Option<&mut Option<rmcp::model::Annotations>> {
    match b {
        ContentBlock::Text(t) => Some(&mut t.annotations),
        ContentBlock::Image(i) => Some(&mut i.annotations),
        ContentBlock::Audio(a) => Some(&mut a.annotations),
        ContentBlock::Resource(r) => Some(&mut r.annotations),
        ContentBlock::ResourceLink(l) => Some(&mut l.annotations),
        _ => None,
    }
}

fn annotations_to_mcp(a: &Annotations) -> rmcp::model::Annotations {
    let mut out = rmcp::model::Annotations::default();
    out.audience = a.audience.as_ref().map(|v| {
        v.iter()
            .map(|who| match who {
                Audience::User => Role::User,
                Audience::Assistant => Role::Assistant,
            })
            .collect()
    });
    out.priority = a.priority;
    out.last_modified = a.last_modified.clone();
    out
}

fn annotations_from_mcp(a: &rmcp::model::Annotations) -> Annotations {
    Annotations {
        audience: a.audience.as_ref().map(|v| {
            v.iter()
                .map(|who| match who {
                    Role::User => Audience::User,
                    Role::Assistant => Audience::Assistant,
                })
                .collect()
        }),
        priority: a.priority,
        last_modified: a.last_modified.clone(),
    }
}

/// The structured content of a result: its one JSON object block, if that
/// is what it is.
pub fn structured(content: &[Content]) -> Option<Value> {
    match content {
        [Content::Json(v)] if v.is_object() => Some(v.clone()),
        _ => None,
    }
}

/// MCP content blocks as the host's, each as it was sent: a block with
/// annotations becomes [`Content::Annotated`].
pub fn from_mcp(blocks: &[ContentBlock]) -> Vec<Content> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_default();
    blocks
        .iter()
        .map(|b| {
            let (content, annotations) = match b {
                ContentBlock::Text(t) => (Content::Text(t.text.clone()), t.annotations.as_ref()),
                ContentBlock::Image(i) => {
                    (Content::Image { mime_type: i.mime_type.clone(), data: b64(&i.data) }, i.annotations.as_ref())
                }
                ContentBlock::Audio(a) => {
                    (Content::Audio { mime_type: a.mime_type.clone(), data: b64(&a.data) }, a.annotations.as_ref())
                }
                ContentBlock::Resource(r) => {
                    let content = match &r.resource {
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
                    };
                    (content, r.annotations.as_ref())
                }
                ContentBlock::ResourceLink(l) => (
                    Content::ResourceLink(ResourceLink {
                        uri: l.uri.clone(),
                        name: l.name.clone(),
                        title: l.title.clone(),
                        description: l.description.clone(),
                        mime_type: l.mime_type.clone(),
                        size: l.size,
                    }),
                    l.annotations.as_ref(),
                ),
                other => (Content::Text(format!("(unsupported content block: {other:?})")), None),
            };
            match annotations {
                Some(a) => content.annotated(annotations_from_mcp(a)),
                None => content,
            }
        })
        .collect()
}

/// What a negotiated protocol version can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// Audio content blocks (2025-03-26 on).
    pub audio: bool,
    /// Tool annotations (2025-03-26 on).
    pub tool_annotations: bool,
    /// `structuredContent`, `outputSchema`, tool titles, `resource_link`
    /// blocks and the `lastModified` annotation (2025-06-18 on).
    pub structured: bool,
}

impl Dialect {
    /// Everything toolhost serves.
    pub const LATEST: Dialect = Dialect { audio: true, tool_annotations: true, structured: true };

    /// The dialect of `version`; the newest when none was negotiated or it
    /// is newer than any known (versions are dates, so they compare as
    /// text).
    pub fn of(version: Option<&ProtocolVersion>) -> Dialect {
        let Some(v) = version.map(ProtocolVersion::as_str) else { return Dialect::LATEST };
        Dialect {
            audio: v >= ProtocolVersion::V_2025_03_26.as_str(),
            tool_annotations: v >= ProtocolVersion::V_2025_03_26.as_str(),
            structured: v >= ProtocolVersion::V_2025_06_18.as_str(),
        }
    }
}

/// Shapes content blocks for `d`: blocks it cannot carry become text
/// blocks saying what they were (their annotations kept).
pub fn shape_blocks(blocks: &mut [ContentBlock], d: Dialect) {
    for b in blocks.iter_mut() {
        shape_block(b, d);
    }
}

fn shape_block(b: &mut ContentBlock, d: Dialect) {
    let replacement = match b {
        ContentBlock::Audio(a) if !d.audio => Some(format!(
            "[audio ({}, {} bytes of base64) left out: this protocol version has no audio content]",
            a.mime_type,
            a.data.len()
        )),
        ContentBlock::ResourceLink(l) if !d.structured => {
            let mut text = format!("Resource link: {} <{}>", l.name, l.uri);
            if let Some(m) = &l.mime_type {
                text.push_str(&format!(" ({m})"));
            }
            if let Some(desc) = &l.description {
                text.push_str(&format!(": {desc}"));
            }
            Some(text)
        }
        _ => None,
    };
    if let Some(text) = replacement {
        let annotations = annotations_of(b).and_then(Option::take);
        *b = ContentBlock::text(text);
        if let Some(slot) = annotations_of(b) {
            *slot = annotations;
        }
    }
    if !d.structured
        && let Some(Some(a)) = annotations_of(b)
    {
        a.last_modified = None;
    }
}

/// Shapes a tool result for `d`: without structured content, its JSON
/// stays in the content as a text block (added first when no text block
/// already holds it).
pub fn shape_result(r: &mut CallToolResult, d: Dialect) {
    if !d.structured
        && let Some(v) = r.structured_content.take()
    {
        let shown = r.content.iter().any(|b| {
            b.as_text().is_some_and(|t| serde_json::from_str::<Value>(&t.text).is_ok_and(|parsed| parsed == v))
        });
        if !shown {
            r.content.insert(0, ContentBlock::text(v.to_string()));
        }
    }
    shape_blocks(&mut r.content, d);
}

/// Shapes tool definitions for `d`.
pub fn shape_tools(tools: &mut [Tool], d: Dialect) {
    for t in tools {
        if !d.structured {
            t.output_schema = None;
            t.title = None;
        }
        if !d.tool_annotations {
            t.annotations = None;
        }
    }
}

/// Shapes a prompt's messages for `d`.
pub fn shape_prompt(r: &mut GetPromptResult, d: Dialect) {
    for m in &mut r.messages {
        shape_block(&mut m.content, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> Content {
        Content::ResourceLink(ResourceLink {
            uri: "demo://r/1".into(),
            name: "one".into(),
            mime_type: Some("text/plain".into()),
            ..ResourceLink::default()
        })
    }

    #[test]
    fn upstream_blocks_survive_the_round_trip() {
        let annotated = Content::Text("hi".into()).annotated(Annotations {
            audience: Some(vec![Audience::User]),
            priority: Some(0.7),
            last_modified: Some("2025-01-01T00:00:00Z".into()),
        });
        let blocks = vec![annotated, link(), Content::Audio { mime_type: "audio/wav".into(), data: vec![1, 2] }];
        let mcp = to_mcp(&blocks);
        assert_eq!(from_mcp(&mcp), blocks);
        let wire = serde_json::to_value(&mcp).unwrap();
        assert_eq!(wire[0]["annotations"]["audience"], serde_json::json!(["user"]));
        assert_eq!(wire[1]["type"], "resource_link");
        assert_eq!(wire[1]["mimeType"], "text/plain");
    }

    #[test]
    fn results_are_shaped_for_older_protocol_versions() {
        let mut r = CallToolResult::success(to_mcp(&[
            link(),
            Content::Audio { mime_type: "audio/wav".into(), data: vec![0; 4] },
        ]));
        r.structured_content = Some(serde_json::json!({"t": 1}));
        let mut old = r.clone();
        shape_result(&mut old, Dialect::of(Some(&ProtocolVersion::V_2024_11_05)));
        assert_eq!(old.structured_content, None);
        let texts: Vec<&str> = old.content.iter().filter_map(|b| b.as_text().map(|t| t.text.as_str())).collect();
        assert_eq!(texts.len(), 3, "{old:?}");
        assert_eq!(texts[0], r#"{"t":1}"#, "the structured JSON stays, as text");
        assert!(texts[1].starts_with("Resource link: one <demo://r/1>"), "{texts:?}");
        assert!(texts[2].contains("audio/wav"), "{texts:?}");
        let mut mid = r.clone();
        shape_result(&mut mid, Dialect::of(Some(&ProtocolVersion::V_2025_03_26)));
        assert!(mid.content[2].as_audio().is_some(), "2025-03-26 has audio: {mid:?}");
        let mut new = r.clone();
        shape_result(&mut new, Dialect::of(Some(&ProtocolVersion::V_2025_11_25)));
        assert_eq!(new, r, "nothing changes for a current client");
        assert_eq!(Dialect::of(None), Dialect::LATEST);
    }
}
