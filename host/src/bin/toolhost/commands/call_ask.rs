//! The questions a tool asks during `toolhost call` (elicitation from a
//! plugin or an external server): asked on the terminal, answered with
//! the schema's defaults (`--accept-defaults`), or declined.

use serde_json::{Map, Value, json};
use std::io::{BufRead, Write};
use std::time::Duration;
use toolhost::tool::offer::{AskError, Asker};

/// Answers a call's questions at the terminal that ran `toolhost call`.
pub struct Terminal {
    /// Accept every form with its schema's defaults, asking nothing.
    pub accept_defaults: bool,
    /// Stdin and stderr are a terminal: a person can be asked.
    pub interactive: bool,
    /// URLs go to this file and are taken as opened (`--print-url-to`).
    pub print_url_to: Option<std::path::PathBuf>,
}

impl Asker for Terminal {
    fn ask(&self, method: &str, params: Value, _wait: Duration) -> Result<Value, AskError> {
        if method != "elicitation/create" {
            return Err(AskError::Unsupported(format!(
                "`toolhost call` cannot answer {method} (it has no model to ask)"
            )));
        }
        let message = params.get("message").and_then(Value::as_str).unwrap_or_default();
        let message = toolhost::tool::log_safe(message);
        if params.get("mode").and_then(Value::as_str) == Some("url") {
            let url = params.get("url").and_then(Value::as_str).unwrap_or_default();
            if !toolhost::tool::offer::is_web_url(url) {
                return Err(AskError::Failed("an elicitation URL is http: or https:, with no spaces".into()));
            }
            if let Some(file) = &self.print_url_to {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file)
                    .map_err(|e| AskError::Failed(format!("--print-url-to {}: {e}", file.display())))?;
                writeln!(f, "{url}")
                    .map_err(|e| AskError::Failed(format!("--print-url-to {}: {e}", file.display())))?;
                return Ok(json!({"action": "accept"}));
            }
            return match self.interactive {
                true => open_url(&message, url),
                false => Err(AskError::Unsupported("`toolhost call` without a terminal cannot open a URL".into())),
            };
        }
        let schema = params.get("requestedSchema").cloned().unwrap_or(Value::Null);
        if self.accept_defaults {
            return Ok(defaults(&schema).map_or_else(
                |missing| {
                    eprintln!("toolhost: declined {message:?}: the required field {missing:?} has no default");
                    json!({"action": "decline"})
                },
                |content| json!({"action": "accept", "content": content}),
            ));
        }
        if !self.interactive {
            return Err(AskError::Unsupported(
                "`toolhost call` without a terminal asks nobody (pass --accept-defaults to accept the defaults)".into(),
            ));
        }
        form(&message, &schema)
    }
}

/// The schema's defaults, or the first required field without one.
fn defaults(schema: &Value) -> Result<Map<String, Value>, String> {
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let mut content = Map::new();
    for (name, p) in properties {
        if let Some(d) = p.get("default") {
            content.insert(name.clone(), d.clone());
        }
    }
    let required = schema.get("required").and_then(Value::as_array).into_iter().flatten();
    match required.filter_map(Value::as_str).find(|r| !content.contains_key(*r)) {
        Some(missing) => Err(missing.to_string()),
        None => Ok(content),
    }
}

/// Reads one line from stdin; `None` at its end.
fn line(prompt: &str) -> Option<String> {
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let mut s = String::new();
    match std::io::stdin().lock().read_line(&mut s) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(s.trim().to_string()),
    }
}

fn open_url(message: &str, url: &str) -> Result<Value, AskError> {
    eprintln!("\n{message}\nOpen: {}", toolhost::tool::log_safe(url));
    match line("Press Enter when done, or type n to decline: ").as_deref() {
        None => Ok(json!({"action": "cancel"})),
        Some("n" | "N" | "no") => Ok(json!({"action": "decline"})),
        Some(_) => Ok(json!({"action": "accept"})),
    }
}

/// Asks each field in turn: Enter takes the default (or leaves an
/// optional field out), `-` declines the whole form, end of input cancels it.
fn form(message: &str, schema: &Value) -> Result<Value, AskError> {
    eprintln!("\n{message}\n(Enter takes the [default]; `-` declines; Ctrl-D cancels)");
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let mut content = Map::new();
    for (name, p) in properties {
        let kind = p.get("type").and_then(Value::as_str).unwrap_or("string");
        let choices: Vec<&str> =
            p.get("enum").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let default = p.get("default");
        let mut prompt = toolhost::tool::log_safe(name).into_owned();
        if let Some(d) = p.get("description").and_then(Value::as_str) {
            prompt = format!("{prompt} ({})", toolhost::tool::log_safe(d));
        }
        if !choices.is_empty() {
            prompt = format!("{prompt} {{{}}}", choices.join("|"));
        }
        if let Some(d) = default {
            prompt = format!("{prompt} [{d}]");
        }
        loop {
            let Some(answer) = line(&format!("{prompt}: ")) else { return Ok(json!({"action": "cancel"})) };
            if answer == "-" {
                return Ok(json!({"action": "decline"}));
            }
            if answer.is_empty() {
                match default {
                    Some(d) => {
                        content.insert(name.clone(), d.clone());
                    }
                    None if required.contains(&name.as_str()) => {
                        eprintln!("  {name} is required");
                        continue;
                    }
                    None => {}
                }
                break;
            }
            let value = match kind {
                "integer" => answer.parse::<i64>().ok().map(Value::from),
                "number" => answer.parse::<f64>().ok().map(Value::from),
                "boolean" => match answer.to_ascii_lowercase().as_str() {
                    "y" | "yes" | "true" => Some(Value::Bool(true)),
                    "n" | "no" | "false" => Some(Value::Bool(false)),
                    _ => None,
                },
                _ if !choices.is_empty() && !choices.contains(&answer.as_str()) => None,
                _ => Some(Value::String(answer)),
            };
            match value {
                Some(v) => {
                    content.insert(name.clone(), v);
                    break;
                }
                None => eprintln!("  not a valid {}", if choices.is_empty() { kind } else { "choice" }),
            }
        }
    }
    Ok(json!({"action": "accept", "content": content}))
}
