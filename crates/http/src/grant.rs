//! The `http` grant: `plugins.grants.<plugin>.http`, the origins a plugin
//! may send requests to, resolved once when the plugin is admitted and
//! read by every request's check ([`crate::Hooks`]), by the reviewer's
//! reports and by an upgrade's check of its manifest's asks.

use std::sync::Arc;
use toolhost_runtime::{ExtensionGrant, GrantConfig, GrantError};
use toolhost_types::Capability;
use toolhost_types::origin::{HostPattern, HttpGrant};

/// One plugin's `http` grant: the only origins it may reach.
#[derive(Debug, Clone)]
pub struct HttpGrants(pub(crate) Arc<[HttpGrant]>);

impl HttpGrants {
    /// Parses `plugin`'s configured entries; the first that is not an
    /// origin is an error naming it.
    pub fn resolve(plugin: &str, config: &GrantConfig) -> Result<HttpGrants, GrantError> {
        config
            .http
            .iter()
            .map(|e| {
                HttpGrant::parse(e).map_err(|reason| GrantError::Extension {
                    plugin: plugin.into(),
                    capability: Capability::Http,
                    entry: e.clone(),
                    reason: reason.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|g| HttpGrants(g.into()))
    }

    /// The granted origins.
    pub fn origins(&self) -> &[HttpGrant] {
        &self.0
    }

    /// Whether some granted origin covers everything `ask` reaches.
    pub fn covers(&self, ask: &HttpGrant) -> bool {
        self.0.iter().any(|g| g.covers(ask))
    }
}

impl ExtensionGrant for HttpGrants {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn report(&self) -> serde_json::Value {
        self.0.iter().map(|g| g.to_string()).collect()
    }

    fn allows(&self) -> Vec<String> {
        if self.0.is_empty() {
            return Vec::new();
        }
        let origins: Vec<String> = self
            .0
            .iter()
            .map(|g| match &g.host {
                HostPattern::Suffix(s) => format!("{g} (a wildcard: every host under {})", &s[1..]),
                _ => g.to_string(),
            })
            .collect();
        // One line, whatever the number of origins: "and to no other" is
        // said once.
        vec![format!("may send HTTP requests to {}, and to no other origin", origins.join(", "))]
    }

    fn uncovered(&self, asks: &[String]) -> Vec<String> {
        asks.iter().filter(|a| !HttpGrant::parse(a).is_ok_and(|ask| self.covers(&ask))).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(entries: &[&str]) -> GrantConfig {
        GrantConfig { http: entries.iter().map(|e| e.to_string()).collect(), ..GrantConfig::default() }
    }

    #[test]
    fn a_bad_entry_is_refused_naming_the_plugin_the_capability_and_the_entry() {
        let e = HttpGrants::resolve("weather", &config(&["https://api.example.test", "ftp://x.test"])).unwrap_err();
        assert_eq!(e.to_string(), "plugins.grants.weather.http: \"ftp://x.test\": the scheme must be http or https");
    }

    #[test]
    fn a_grant_reports_its_origins_and_leaves_uncovered_asks_out() {
        let g = HttpGrants::resolve("wiki", &config(&["https://*.wikipedia.org", "http://127.0.0.1:8080"])).unwrap();
        assert_eq!(g.report(), serde_json::json!(["https://*.wikipedia.org:443", "http://127.0.0.1:8080"]));
        assert_eq!(
            g.allows(),
            [
                "may send HTTP requests to https://*.wikipedia.org:443 (a wildcard: every host under wikipedia.org), http://127.0.0.1:8080, and to no other origin"
            ]
        );
        assert!(HttpGrants(Vec::new().into()).allows().is_empty());
        let asks = ["https://en.wikipedia.org", "https://wikipedia.org", "not an origin", "http://127.0.0.1:8080/"];
        let asks: Vec<String> = asks.iter().map(|a| a.to_string()).collect();
        assert_eq!(g.uncovered(&asks), ["https://wikipedia.org", "not an origin"]);
    }
}
