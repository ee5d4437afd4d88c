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

impl Validator {
    /// Compiles `schema`; fails when it is not a valid JSON Schema.
    pub fn new(schema: &serde_json::Value) -> Result<Validator, SchemaError> {
        jsonschema::validator_for(schema).map(|inner| Validator { inner }).map_err(|e| SchemaError(e.to_string()))
    }

    /// Checks `instance`. The error names each offending field by its JSON
    /// pointer (`/expression`), or says "arguments" for the object itself.
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
            problems.push(format!("{place}: {e}"));
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
