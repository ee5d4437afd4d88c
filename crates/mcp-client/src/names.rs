//! The names an upstream server's tools get here. LLM APIs accept only
//! `^[a-zA-Z0-9_-]{1,64}$`, and an upstream is not trusted to keep to it:
//!
//! - a name with control or invisible formatting characters (newlines,
//!   bidirectional overrides ...), or over [`MAX_UPSTREAM_NAME`] bytes, is
//!   refused: the tool is skipped, with a warning;
//! - any other name keeps its own spelling when it fits the rule, no other
//!   provider has it, and it does not sit in another provider's namespace;
//! - otherwise it becomes `<server>_<tool>`, each character outside the rule
//!   replaced by `_`; a result over 64 characters is cut to 57 and ends in `_`
//!   and 6 hex digits of the sha256 of the server and tool names, so distinct
//!   tools keep distinct names. If even that is taken (a squatter got there
//!   first), the hashed form is used whatever the length.
//!
//! Names are compared as a model or a DM reads them ([`name_key`]): case and
//! `-` versus `_` do not tell tools apart, so an upstream `Roll` or `ROLL`
//! never sits beside the built-in `roll`. A provider's namespace is its
//! name followed by `_` ([`namespace_key`]): a server's tool named
//! `weather_forecast` while a provider `weather` is loaded is offered as
//! `<server>_weather_forecast`, so no server can squat the names another's
//! tools are renamed to.
//!
//! An upstream's prompt keeps its name unless an earlier server has a
//! prompt of that name; then it is `<server>_<prompt>` (same fitting, same
//! refusals), or under the server's `prefix`: see [`renamed_prompt`].

use crate::tool::valid_tool_name;
use sha2::Digest as _;

/// The longest upstream tool name accepted, in bytes.
pub(super) const MAX_UPSTREAM_NAME: usize = 128;

/// Two names that are one to a reader have the same key: ASCII lowercase,
/// `-` read as `_`.
pub(super) fn name_key(name: &str) -> String {
    name.chars().map(|c| if c == '-' { '_' } else { c.to_ascii_lowercase() }).collect()
}

/// The key prefix of the names in `provider`'s namespace: its name fitted to
/// the tool-name rule, then `_`.
pub(super) fn namespace_key(provider: &str) -> String {
    format!("{}_", name_key(&fit(provider)))
}

/// The name `server`'s tool `tool` is registered under, or why it is not.
/// `taken` says whether another provider has a name (compared by
/// [`name_key`]); `namespaces` are the [`namespace_key`]s of the other
/// providers.
pub(super) fn exposed_name(
    server: &str,
    tool: &str,
    taken: impl Fn(&str) -> bool,
    namespaces: &[String],
) -> Result<String, String> {
    refuse_hostile("tool", tool)?;
    let key = name_key(tool);
    if valid_tool_name(tool) && !taken(tool) && !namespaces.iter().any(|ns| key.starts_with(ns.as_str())) {
        return Ok(tool.to_string());
    }
    let name = prefixed(server, tool);
    if !taken(&name) {
        return Ok(name);
    }
    let hashed = hashed(server, tool);
    if !taken(&hashed) {
        return Ok(hashed);
    }
    Err(format!("{tool}, {name} and {hashed} are all taken by other providers"))
}

/// Refuses a prompt name as a tool's would be refused (empty, too long,
/// control or formatting characters).
pub(super) fn check_prompt_name(prompt: &str) -> Result<(), String> {
    refuse_hostile("prompt", prompt)
}

/// The name `server`'s prompt `prompt` is offered under when an earlier
/// server has a prompt of that name: `<server>_<prompt>`, by the same rule
/// as a renamed tool; under the server's `prefix` when it has one.
pub(super) fn renamed_prompt(server: &str, prefix: Option<&str>, prompt: &str) -> String {
    match prefix {
        Some(p) => format!("{p}{prompt}"),
        None => prefixed(server, prompt),
    }
}

/// Refuses an empty name, one over [`MAX_UPSTREAM_NAME`] bytes, and one
/// with control or formatting characters.
fn refuse_hostile(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("an empty {what} name"));
    }
    if name.len() > MAX_UPSTREAM_NAME {
        return Err(format!("a {what} name of {} bytes (at most {MAX_UPSTREAM_NAME})", name.len()));
    }
    if crate::tool::log_safe(name) != name {
        return Err(format!("a {what} name with control or formatting characters: {}", crate::tool::log_safe(name)));
    }
    Ok(())
}

/// `s` with each character outside the tool-name rule replaced by `_`.
fn fit(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// `tool` behind the operator's `prefix` (`mcp.servers[].prefix`): the
/// name made to fit as a clash would make it, but under the prefix as
/// given. Hostile names are refused as always; a name still taken is an
/// error.
pub(super) fn with_prefix(prefix: &str, tool: &str, taken: impl Fn(&str) -> bool) -> Result<String, String> {
    refuse_hostile("tool", tool)?;
    let mut name = format!("{prefix}{}", fit(tool));
    if name.len() > 64 {
        let digest = sha2::Sha256::digest(format!("{prefix}\0{tool}").as_bytes());
        name.truncate(57);
        name.push('_');
        name.push_str(&hex::encode(digest)[..6]);
    }
    if !valid_tool_name(&name) {
        return Err(format!("{name:?} breaks the tool-name rule"));
    }
    if taken(&name) {
        return Err(format!("{name} is already served by another provider"));
    }
    Ok(name)
}

/// `<server>_<tool>`, fitted to the tool-name rule.
fn prefixed(server: &str, tool: &str) -> String {
    let name = format!("{}_{}", fit(server), fit(tool));
    if name.len() > 64 { hashed(server, tool) } else { name }
}

/// `<server>_<tool>` cut to 57 characters, then `_` and 6 hex digits of
/// the sha256 of both names.
fn hashed(server: &str, tool: &str) -> String {
    let mut name = format!("{}_{}", fit(server), fit(tool));
    let digest = sha2::Sha256::digest(format!("{server}\0{tool}").as_bytes());
    name.truncate(57);
    name.push('_');
    name.push_str(&hex::encode(digest)[..6]);
    debug_assert!(valid_tool_name(&name), "{name}");
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> bool {
        false
    }

    #[test]
    fn a_name_that_fits_and_is_free_is_kept() {
        assert_eq!(exposed_name("everything", "echo", none, &[]).unwrap(), "echo");
    }

    #[test]
    fn a_taken_or_unfit_name_is_prefixed_without_dots() {
        assert_eq!(exposed_name("everything-http", "echo", |n| n == "echo", &[]).unwrap(), "everything-http_echo");
        assert_eq!(exposed_name("gh", "repo.search", none, &[]).unwrap(), "gh_repo_search");
        assert_eq!(exposed_name("my server", "héllo wörld", none, &[]).unwrap(), "my_server_h_llo_w_rld");
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_distinct() {
        let a = exposed_name("srv", &format!("{}a", "x".repeat(100)), none, &[]).unwrap();
        let b = exposed_name("srv", &format!("{}b", "x".repeat(100)), none, &[]).unwrap();
        assert_eq!(a.len(), 64);
        assert!(valid_tool_name(&a) && valid_tool_name(&b));
        assert_ne!(a, b);
    }

    #[test]
    fn a_configured_prefix_is_used_as_given_and_a_taken_name_refused() {
        assert_eq!(with_prefix("wiki_", "search", none).unwrap(), "wiki_search");
        assert_eq!(with_prefix("gh-", "repo.search", none).unwrap(), "gh-repo_search");
        assert!(with_prefix("wiki_", "search", |n| n == "wiki_search").is_err());
        assert!(with_prefix("wiki_", "evil\nname", none).is_err());
        assert_eq!(with_prefix("p_", &"x".repeat(100), none).unwrap().len(), 64);
    }

    #[test]
    fn a_renamed_prompt_says_whose_it_is() {
        assert_eq!(renamed_prompt("everything", None, "simple-prompt"), "everything_simple-prompt");
        assert_eq!(renamed_prompt("gh", None, "review.pr"), "gh_review_pr");
        assert_eq!(renamed_prompt("gh", Some("git_"), "review.pr"), "git_review.pr");
        assert!(check_prompt_name("bad\u{202e}").unwrap_err().contains("prompt name with control"));
    }

    #[test]
    fn case_and_separator_variants_of_a_taken_name_are_prefixed() {
        let builtins = ["roll", "search_rules"].map(name_key);
        let taken = |n: &str| builtins.contains(&name_key(n));
        assert_eq!(exposed_name("dice", "Roll", taken, &[]).unwrap(), "dice_Roll");
        assert_eq!(exposed_name("dice", "ROLL", taken, &[]).unwrap(), "dice_ROLL");
        assert_eq!(exposed_name("rules", "search-rules", taken, &[]).unwrap(), "rules_search-rules");
        assert_eq!(exposed_name("dice", "reroll", taken, &[]).unwrap(), "reroll");
    }

    #[test]
    fn no_server_squats_another_providers_namespace() {
        let ns = [namespace_key("weather"), namespace_key("everything-http")];
        // A tool spelled like another provider's renamed tool is renamed itself.
        assert_eq!(exposed_name("squat", "weather_forecast", none, &ns).unwrap(), "squat_weather_forecast");
        assert_eq!(exposed_name("squat", "Everything-HTTP_echo", none, &ns).unwrap(), "squat_Everything-HTTP_echo");
        assert_eq!(exposed_name("squat", "weatherly", none, &ns).unwrap(), "weatherly");
        // A server whose renamed tool a squatter took first still gets a name.
        let squatted = |n: &str| name_key(n) == "weather_echo";
        let got = exposed_name("weather", "echo", |n| n == "echo" || squatted(n), &[]).unwrap();
        assert!(got.starts_with("weather_echo_") && got.len() == "weather_echo_".len() + 6, "{got}");
        assert!(valid_tool_name(&got) && !squatted(&got), "{got}");
    }

    #[test]
    fn hostile_names_are_refused() {
        assert!(exposed_name("s", "evil\nname\u{202e}", none, &[]).unwrap_err().contains("control or formatting"));
        assert!(exposed_name("s", &"x".repeat(5000), none, &[]).unwrap_err().contains("5000 bytes"));
        assert!(exposed_name("s", "", none, &[]).is_err());
        assert!(exposed_name("s", "a", |_| true, &[]).unwrap_err().contains("taken"));
    }
}
