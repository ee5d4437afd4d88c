//! The suite's resources, resource template, prompts and completions.

use crate::bindings::exports::toolhost::plugin::offer::{
    Completion, CompletionRef, Guest, PromptArgument, PromptInfo, PromptMessage, PromptResult, ResourceInfo,
    ResourceTemplateInfo,
};
use crate::bindings::toolhost::plugin::types::{Content, EmbeddedResource, ResourceBody, Role, ToolError};
use crate::{Plugin, RED_PIXEL_PNG, png, text};

fn resource(uri: &str, name: &str, mime: &str) -> ResourceInfo {
    ResourceInfo {
        uri: uri.into(),
        name: name.into(),
        title: None,
        description: None,
        mime_type: Some(mime.into()),
        size: None,
        icons: Vec::new(),
    }
}

fn argument(name: &str, description: &str) -> PromptArgument {
    PromptArgument { name: name.into(), title: None, description: Some(description.into()), required: true }
}

fn prompt(name: &str, description: &str, arguments: Vec<PromptArgument>) -> PromptInfo {
    PromptInfo { name: name.into(), title: None, description: Some(description.into()), arguments, icons: Vec::new() }
}

fn user(content: Content) -> PromptMessage {
    PromptMessage { role: Role::User, content }
}

fn arg<'a>(arguments: &'a [(String, String)], name: &str) -> &'a str {
    arguments.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
}

impl Guest for Plugin {
    fn list_resources() -> Vec<ResourceInfo> {
        vec![
            resource("test://static-text", "static-text", "text/plain"),
            resource("test://static-binary", "static-binary", "image/png"),
        ]
    }

    fn list_resource_templates() -> Vec<ResourceTemplateInfo> {
        vec![ResourceTemplateInfo {
            uri_template: "test://template/{id}/data".into(),
            name: "template-data".into(),
            title: None,
            description: Some("Data for one id".into()),
            mime_type: Some("application/json".into()),
            icons: Vec::new(),
        }]
    }

    fn read_resource(uri: String) -> Result<Vec<EmbeddedResource>, ToolError> {
        let one = |mime: &str, body: ResourceBody| {
            Ok(vec![EmbeddedResource { uri: uri.clone(), mime_type: Some(mime.into()), body }])
        };
        match uri.as_str() {
            "test://static-text" => {
                one("text/plain", ResourceBody::Text("This is the content of the static text resource.".into()))
            }
            "test://static-binary" => one("image/png", ResourceBody::Blob(RED_PIXEL_PNG.to_vec())),
            _ => match uri.strip_prefix("test://template/").and_then(|rest| rest.strip_suffix("/data")) {
                Some(id) if !id.is_empty() && !id.contains('/') => one(
                    "application/json",
                    ResourceBody::Text(format!(r#"{{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}}"#)),
                ),
                _ => Err(ToolError::NotFound(format!("no resource {uri}"))),
            },
        }
    }

    fn list_prompts() -> Vec<PromptInfo> {
        vec![
            prompt("test_simple_prompt", "A simple prompt without arguments", Vec::new()),
            prompt(
                "test_prompt_with_arguments",
                "A prompt with two arguments",
                vec![argument("arg1", "First test argument"), argument("arg2", "Second test argument")],
            ),
            prompt(
                "test_prompt_with_embedded_resource",
                "A prompt embedding a resource",
                vec![argument("resourceUri", "URI of the resource to embed")],
            ),
            prompt("test_prompt_with_image", "A prompt with an image", Vec::new()),
        ]
    }

    fn get_prompt(name: String, arguments: Vec<(String, String)>) -> Result<PromptResult, ToolError> {
        let messages = match name.as_str() {
            "test_simple_prompt" => vec![user(text("This is a simple prompt for testing."))],
            "test_prompt_with_arguments" => vec![user(text(&format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                arg(&arguments, "arg1"),
                arg(&arguments, "arg2")
            )))],
            "test_prompt_with_embedded_resource" => vec![
                user(Content::Resource(EmbeddedResource {
                    uri: arg(&arguments, "resourceUri").into(),
                    mime_type: Some("text/plain".into()),
                    body: ResourceBody::Text("Embedded resource content for testing.".into()),
                })),
                user(text("Please process the embedded resource above.")),
            ],
            "test_prompt_with_image" => vec![user(png()), user(text("Please analyze the image above."))],
            other => return Err(ToolError::NotFound(format!("no prompt {other}"))),
        };
        Ok(PromptResult { description: None, messages })
    }

    fn complete(
        reference: CompletionRef,
        argument: String,
        value: String,
        _context: Vec<(String, String)>,
    ) -> Result<Completion, ToolError> {
        let choices: &[&str] = match (&reference, argument.as_str()) {
            (CompletionRef::Prompt(p), "arg1" | "arg2") if p == "test_prompt_with_arguments" => {
                &["test", "testing", "tested", "hello", "world"]
            }
            (CompletionRef::ResourceTemplate(t), "id") if t == "test://template/{id}/data" => &["1", "2", "3", "123"],
            _ => &[],
        };
        let values: Vec<String> =
            choices.iter().filter(|c| c.starts_with(value.as_str())).map(|c| c.to_string()).collect();
        Ok(Completion { total: Some(values.len() as u32), values, has_more: false })
    }
}
