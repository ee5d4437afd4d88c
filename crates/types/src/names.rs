//! The tool-name rule, defined once. LLM function-calling APIs accept only
//! `^[a-zA-Z0-9_-]{1,64}$` (OpenAI, Anthropic, Gemini), so every name a
//! model sees fits it: wasm tools are refused at load otherwise, and names
//! from external MCP servers are rewritten to fit. `wit/tool.wit` states the
//! same rule and the guest SDK checks it at compile time; one test checks
//! that the three agree.

/// The rule as a regular expression, for documentation and error messages.
pub const TOOL_NAME_PATTERN: &str = "^[a-zA-Z0-9_-]{1,64}$";

/// Whether `name` is 1 to 64 ASCII letters, digits, `_` or `-`.
pub const fn valid_tool_name(name: &str) -> bool {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > 64 {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if !(b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-') {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::valid_tool_name;

    #[test]
    fn the_rule() {
        for ok in ["roll", "get_rule", "a-b", "A9", &"x".repeat(64)] {
            assert!(valid_tool_name(ok), "{ok}");
        }
        for bad in ["", "has space", "dotted.name", "ü", "new\nline", &"x".repeat(65)] {
            assert!(!valid_tool_name(bad), "{bad:?}");
        }
    }
}
