//! The names an upstream server's tools get here. LLM APIs accept only
//! `^[a-zA-Z0-9_-]{1,64}$`, and an upstream is not trusted to keep to it:
//!
//! - a name with control or invisible formatting characters (newlines,
//!   bidirectional overrides ...), or over [`MAX_UPSTREAM_NAME`] bytes, is
//!   refused: the tool is skipped, with a warning;
//! - any other name keeps its own spelling when it fits the rule and no other
//!   provider has it;
//! - otherwise it becomes `<server>_<tool>`, each character outside the rule
//!   replaced by `_`; a result over 64 characters is cut to 57 and ends in `_`
//!   and 6 hex digits of the sha256 of the server and tool names, so distinct
//!   tools keep distinct names.

use crate::tool::valid_tool_name;
use sha2::Digest as _;

/// The longest upstream tool name accepted, in bytes.
pub(super) const MAX_UPSTREAM_NAME: usize = 128;

/// The name `server`'s tool `tool` is registered under, or why it is not.
/// `taken` says whether another provider has a name.
pub(super) fn exposed_name(server: &str, tool: &str, taken: impl Fn(&str) -> bool) -> Result<String, String> {
    if tool.is_empty() {
        return Err("an empty tool name".into());
    }
    if tool.len() > MAX_UPSTREAM_NAME {
        return Err(format!("a tool name of {} bytes (at most {MAX_UPSTREAM_NAME})", tool.len()));
    }
    if crate::tool::log_safe(tool) != tool {
        return Err(format!("a tool name with control or formatting characters: {}", crate::tool::log_safe(tool)));
    }
    if valid_tool_name(tool) && !taken(tool) {
        return Ok(tool.to_string());
    }
    let fit = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
    };
    let mut name = format!("{}_{}", fit(server), fit(tool));
    if name.len() > 64 {
        let digest = sha2::Sha256::digest(format!("{server}\0{tool}").as_bytes());
        name.truncate(57);
        name.push('_');
        name.push_str(&hex::encode(digest)[..6]);
    }
    debug_assert!(valid_tool_name(&name), "{name}");
    if taken(&name) {
        return Err(format!("both {tool} and {name} are taken by other providers"));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> bool {
        false
    }

    #[test]
    fn a_name_that_fits_and_is_free_is_kept() {
        assert_eq!(exposed_name("everything", "echo", none).unwrap(), "echo");
    }

    #[test]
    fn a_taken_or_unfit_name_is_prefixed_without_dots() {
        assert_eq!(exposed_name("everything-http", "echo", |n| n == "echo").unwrap(), "everything-http_echo");
        assert_eq!(exposed_name("gh", "repo.search", none).unwrap(), "gh_repo_search");
        assert_eq!(exposed_name("my server", "héllo wörld", none).unwrap(), "my_server_h_llo_w_rld");
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_distinct() {
        let a = exposed_name("srv", &format!("{}a", "x".repeat(100)), none).unwrap();
        let b = exposed_name("srv", &format!("{}b", "x".repeat(100)), none).unwrap();
        assert_eq!(a.len(), 64);
        assert!(valid_tool_name(&a) && valid_tool_name(&b));
        assert_ne!(a, b);
    }

    #[test]
    fn hostile_names_are_refused() {
        assert!(exposed_name("s", "evil\nname\u{202e}", none).unwrap_err().contains("control or formatting"));
        assert!(exposed_name("s", &"x".repeat(5000), none).unwrap_err().contains("5000 bytes"));
        assert!(exposed_name("s", "", none).is_err());
        assert!(exposed_name("s", "a", |_| true).unwrap_err().contains("taken"));
    }
}
