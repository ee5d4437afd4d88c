//! The fixture tools that ask the client: the model (sampling) and the
//! user (elicitation).

use crate::bindings::toolhost::plugin::client::{
    self, AskError, ElicitAction, ElicitResult, SamplingMessage, SamplingRequest,
};
use crate::bindings::toolhost::plugin::types::{Content, Role, ToolError};
use crate::text;

/// The string `key` of a JSON arguments object (the suite's are plain).
fn string_arg(arguments: &str, key: &str) -> String {
    let Some(at) = arguments.find(&format!("\"{key}\"")) else { return String::new() };
    let rest = &arguments[at + key.len() + 2..];
    let Some(open) = rest.find('"') else { return String::new() };
    let rest = &rest[open + 1..];
    let mut out = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// A question the client could not answer, as the tool's error.
fn unanswered(e: AskError) -> ToolError {
    match e {
        AskError::Unsupported(m) => ToolError::Forbidden(format!("the client cannot be asked: {m}")),
        AskError::Timeout(m) | AskError::Refused(m) | AskError::Failed(m) => ToolError::Failed(m),
    }
}

fn action(r: &ElicitResult) -> &'static str {
    match r.action {
        ElicitAction::Accept => "accept",
        ElicitAction::Decline => "decline",
        ElicitAction::Cancel => "cancel",
    }
}

pub fn sampling(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let request = SamplingRequest {
        messages: vec![SamplingMessage { role: Role::User, content: Content::Text(string_arg(arguments, "prompt")) }],
        system_prompt: None,
        max_tokens: 100,
        temperature: None,
        stop_sequences: Vec::new(),
        model_preferences: None,
    };
    let answer = client::create_message(&request).map_err(unanswered)?;
    let said = match answer.content {
        Content::Text(t) => t,
        _ => "(not text)".into(),
    };
    Ok(vec![text(&format!("LLM response: {said}"))])
}

pub fn elicitation(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let schema = r#"{"type":"object","properties":{"username":{"type":"string","description":"User's response"},"email":{"type":"string","description":"User's email address"}},"required":["username","email"]}"#;
    let r = client::elicit_form(&string_arg(arguments, "message"), schema).map_err(unanswered)?;
    Ok(vec![text(&format!("User response: action={}, content={}", action(&r), r.content.as_deref().unwrap_or("{}")))])
}

fn completed(schema: &str) -> Result<Vec<Content>, ToolError> {
    let r =
        client::elicit_form("Please review and update the form fields with defaults", schema).map_err(unanswered)?;
    Ok(vec![text(&format!(
        "Elicitation completed: action={}, content={}",
        action(&r),
        r.content.as_deref().unwrap_or("{}")
    ))])
}

pub fn defaults() -> Result<Vec<Content>, ToolError> {
    completed(
        r#"{"type":"object","properties":{"name":{"type":"string","default":"John Doe"},"age":{"type":"integer","default":30},"score":{"type":"number","default":95.5},"status":{"type":"string","enum":["active","inactive","pending"],"default":"active"},"verified":{"type":"boolean","default":true}}}"#,
    )
}

pub fn enums() -> Result<Vec<Content>, ToolError> {
    completed(
        r#"{"type":"object","properties":{"untitledSingle":{"type":"string","enum":["option1","option2","option3"]},"titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},"legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},"untitledMulti":{"type":"array","items":{"type":"string","enum":["option1","option2","option3"]}},"titledMulti":{"type":"array","items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}}}"#,
    )
}

pub fn url(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let r = client::elicit_url("Please sign in to the campaign wiki", &string_arg(arguments, "url"), "wiki-login")
        .map_err(unanswered)?;
    Ok(vec![text(&format!("URL elicitation: action={}", action(&r)))])
}

/// Asks until the host says no: a plugin that never stops asking.
pub fn forever(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let sample = string_arg(arguments, "kind") == "sample";
    for n in 0..1000 {
        let asked = if sample {
            let request = SamplingRequest {
                messages: vec![SamplingMessage { role: Role::User, content: Content::Text(format!("again {n}")) }],
                system_prompt: None,
                max_tokens: 10,
                temperature: None,
                stop_sequences: Vec::new(),
                model_preferences: None,
            };
            client::create_message(&request).map(|_| ())
        } else {
            client::elicit_form(&format!("again {n}"), r#"{"type":"object","properties":{}}"#).map(|_| ())
        };
        if let Err(e) = asked {
            let why = match e {
                AskError::Unsupported(m) | AskError::Timeout(m) | AskError::Refused(m) | AskError::Failed(m) => m,
            };
            return Ok(vec![text(&format!("asked {n} times, then: {why}"))]);
        }
    }
    Ok(vec![text("asked 1000 times")])
}
