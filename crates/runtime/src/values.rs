//! What a plugin reads through `wasi:config/store`: the operator's plain
//! values for it (`plugins.config.<plugin>`) and its secrets (`toolhost
//! secret set`), in one namespace, and only its own.
//!
//! Every plugin may import `wasi:config/store`: it exposes nothing but what
//! the operator set for that plugin. The values are looked up per call, so
//! a secret set while the host serves is read by the next call.
//!
//! A secret's value never leaves the host through toolhost's own channels:
//! exact occurrences in the plugin's log lines, progress messages, error
//! text and captured stdout/stderr are replaced by `[secret NAME]`
//! ([`PluginValues::redact`]). What a plugin sends where its grants allow
//! (an HTTP request, its answer) is the plugin's: the grant is the boundary.

use std::borrow::Cow;
use std::collections::BTreeMap;
use wasmtime_wasi_config::WasiConfigVariables;

/// Secrets shorter than this are not redacted: replacing every occurrence
/// of a two-letter string would garble every message and hide nothing.
pub const REDACT_MIN_LEN: usize = 4;

/// One plugin's values in `wasi:config/store`.
#[derive(Default)]
pub struct PluginValues {
    pub(crate) vars: WasiConfigVariables,
    /// (name, value) of each secret long enough to redact, longest first
    /// (so a secret containing another is replaced whole).
    secrets: Vec<(String, String)>,
}

impl std::fmt::Debug for PluginValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.debug_struct("PluginValues")
            .field("secrets", &self.secrets.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl PluginValues {
    /// The values `config` (plain) and `secrets` make: one namespace, the
    /// caller having refused a name in both.
    pub fn new(config: &BTreeMap<String, String>, secrets: &BTreeMap<String, String>) -> PluginValues {
        let mut vars = WasiConfigVariables::new();
        for (k, v) in config.iter().chain(secrets) {
            vars.insert(k.clone(), v.clone());
        }
        let mut redact: Vec<(String, String)> =
            secrets.iter().filter(|(_, v)| v.len() >= REDACT_MIN_LEN).map(|(n, v)| (n.clone(), v.clone())).collect();
        redact.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        PluginValues { vars, secrets: redact }
    }

    /// `text` with every exact occurrence of a secret's value replaced by
    /// `[secret NAME]`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (name, value) in &self.secrets {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), &format!("[secret {name}]")));
            }
        }
        out
    }

    /// Whether there is anything to redact.
    pub fn has_secrets(&self) -> bool {
        !self.secrets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(secrets: &[(&str, &str)]) -> PluginValues {
        let secrets = secrets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        PluginValues::new(&BTreeMap::from([("units".to_string(), "metric".to_string())]), &secrets)
    }

    #[test]
    fn every_occurrence_of_a_secret_is_replaced_by_its_name() {
        let v = values(&[("api_key", "sk-live-123456")]);
        assert_eq!(
            v.redact("key sk-live-123456 refused; sk-live-123456!"),
            "key [secret api_key] refused; [secret api_key]!"
        );
        assert!(matches!(v.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_secret_containing_another_is_replaced_whole() {
        let v = values(&[("short", "abcd"), ("long", "xxabcdxx")]);
        assert_eq!(v.redact("xxabcdxx abcd"), "[secret long] [secret short]");
    }

    #[test]
    fn secrets_too_short_to_hide_anything_are_left_and_plain_values_never_redacted() {
        let v = values(&[("pin", "42")]);
        assert!(!v.has_secrets());
        assert_eq!(v.redact("42 metric"), "42 metric");
        assert!(!format!("{v:?}").contains("42"), "Debug never shows a value");
    }
}
