//! Argument validation against a tool's declared JSON Schema, before the tool
//! runs: invalid input never reaches a plugin or an external server.

use std::fmt;

/// A compiled JSON Schema.
pub struct Validator {
    inner: jsonschema::Validator,
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Validator")
    }
}

/// A schema that is not a valid JSON Schema, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SchemaError(pub String);

/// Arguments that do not match their schema: each offending field by its
/// JSON pointer, or "arguments" for the object itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Mismatch(pub String);

/// Most schema violations listed in one error message.
const MAX_REPORTED: usize = 5;

/// Most bytes of one violation's text (its field's path and the schema
/// library's words, which quote the offending value): a 3 MB invalid
/// argument must not come back as a 3 MB error.
const MAX_PROBLEM_BYTES: usize = 160;

/// `text` cut to at most `max` bytes on a character boundary, with `…`
/// and the number of bytes left out when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[{} more bytes]", &text[..end], text.len() - end)
}

impl Validator {
    /// Compiles `schema`; fails when it is not a valid JSON Schema.
    pub fn new(schema: &serde_json::Value) -> Result<Validator, SchemaError> {
        jsonschema::validator_for(schema).map(|inner| Validator { inner }).map_err(|e| SchemaError(e.to_string()))
    }

    /// Checks `instance`. The error names each offending field by its JSON
    /// pointer (`/expression`), or says "arguments" for the object itself;
    /// at most five, each cut to 160 bytes (the value it quotes included),
    /// so the whole stays under 1 KB whatever the arguments.
    pub fn check(&self, instance: &serde_json::Value) -> Result<(), Mismatch> {
        let mut problems: Vec<String> = Vec::new();
        let mut more = 0;
        for e in self.inner.iter_errors(instance) {
            if problems.len() == MAX_REPORTED {
                more += 1;
                continue;
            }
            let path = e.instance_path().as_str();
            let place = if path.is_empty() { "arguments".to_string() } else { format!("field {path}") };
            problems.push(cut(&format!("{place}: {e}"), MAX_PROBLEM_BYTES));
        }
        if problems.is_empty() {
            return Ok(());
        }
        if more > 0 {
            problems.push(format!("and {more} more"));
        }
        Err(Mismatch(problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A 3 MB invalid argument (which came back in a 3,000,251-byte error)
    /// gets an error under 1 KB, still naming the field.
    #[test]
    fn an_error_quotes_at_most_a_few_hundred_bytes_of_an_argument() {
        let v = Validator::new(&json!({
            "type": "object",
            "properties": { "expression": { "type": "string", "maxLength": 64 } },
            "patternProperties": { "^é": { "type": "integer" } },
        }))
        .unwrap();
        let huge = "é".repeat(1_500_000);
        let mut args = serde_json::Map::new();
        args.insert("expression".into(), json!(huge));
        for i in 0..10 {
            args.insert(format!("é{i}{huge}"), json!("not an integer"));
        }
        let e = v.check(&serde_json::Value::Object(args)).unwrap_err();
        assert!(e.0.len() < 1024, "{} bytes", e.0.len());
        assert!(e.0.contains("field /"), "{}", e.0);
        assert!(e.0.contains("more bytes]"), "{}", e.0);
    }

    fn roll_schema() -> Validator {
        Validator::new(&json!({
            "type": "object",
            "properties": { "expression": { "type": "string", "minLength": 1 }, "seed": { "type": "integer" } },
            "required": ["expression"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn valid_arguments_pass() {
        roll_schema().check(&json!({"expression": "1d20"})).unwrap();
    }

    #[test]
    fn errors_name_the_field() {
        let e = roll_schema().check(&json!({"expression": 5})).unwrap_err().0;
        assert!(e.contains("field /expression"), "{e}");
        assert!(e.contains("string"), "{e}");
    }

    #[test]
    fn missing_required_field_is_reported_on_the_object() {
        let e = roll_schema().check(&json!({})).unwrap_err().0;
        assert!(e.starts_with("arguments:"), "{e}");
        assert!(e.contains("expression"), "{e}");
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let e = roll_schema().check(&json!({"expression": "1d4", "bogus": 1})).unwrap_err().0;
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn invalid_schemas_are_refused() {
        assert!(Validator::new(&json!({"type": "nonsense"})).is_err());
    }
}
