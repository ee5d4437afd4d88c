//! `server.oauth`: the HTTP front as an OAuth 2.1 resource server (the MCP
//! authorization specification), and the identities it maps to agents.

use serde::Deserialize;
use std::collections::BTreeMap;

/// One bearer token.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The secret (use `${VAR}` to keep it out of the file).
    pub token: String,
    /// The agent (an `npcs[].name`) this token acts as; absent: the operator.
    #[serde(default)]
    pub agent: Option<String>,
    /// A name for the token in the audit trail [default: `sha256:` and the
    /// first 8 hex digits of the token's sha256].
    #[serde(default)]
    pub id: Option<String>,
}

impl TokenConfig {
    /// The id the audit trail records for calls made with this token.
    pub fn audit_id(&self) -> String {
        use sha2::Digest as _;
        self.id
            .clone()
            .unwrap_or_else(|| format!("sha256:{}", &hex::encode(sha2::Sha256::digest(self.token.as_bytes()))[..8]))
    }
}

/// `server.oauth:` in the config. Unset: no OAuth (static `server.tokens`
/// and same-user loopback only).
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerOAuthConfig {
    /// The authorization server's issuer identifier (`iss` of its tokens),
    /// e.g. `https://id.example.org/realms/table`.
    pub issuer: String,
    /// The URL clients use for this server's MCP endpoints, e.g.
    /// `https://toolhost.example/mcp`: the resource tokens must be minted
    /// for (RFC 8707). A token's `aud` must name it or the agent's own
    /// endpoint (`https://toolhost.example/mcp/lyra` on `/mcp/lyra`); a
    /// token for any other server is refused. Its origin is also where the
    /// Protected Resource Metadata is said to be.
    pub audience: String,
    /// Where the issuer's signing keys are [default: the `jwks_uri` of its
    /// metadata, `/.well-known/openid-configuration` or
    /// `/.well-known/oauth-authorization-server`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
    /// Scopes every token must hold (`scope` or `scp`); one without them
    /// gets 403 `insufficient_scope` [default: none].
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// Slack for `exp` and `nbf`, seconds [default: 60].
    #[serde(default = "default_skew")]
    pub clock_skew_secs: u64,
    /// Which identities act as which agent: the first entry whose `match`
    /// holds wins. An identity that matches nothing (and not `operator`)
    /// is refused.
    #[serde(default)]
    pub agents: Vec<AgentMapping>,
    /// Which identities act as the operator [default: none].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<ClaimMatch>,
}

fn default_skew() -> u64 {
    60
}

/// One `server.oauth.agents` entry.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentMapping {
    /// The claims that must hold.
    #[serde(rename = "match")]
    pub matches: BTreeMap<String, String>,
    /// The agent (an `npcs[].name`) such a token acts as.
    pub agent: String,
}

/// `server.oauth.operator`.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimMatch {
    /// The claims that must hold.
    #[serde(rename = "match")]
    pub matches: BTreeMap<String, String>,
}

/// Whether every claim in `want` holds in `claims`: a string claim equals
/// the value, an array claim (`groups`, `roles`) contains it, a number or
/// boolean prints as it. `client_id` also matches `azp`, as identity
/// providers name the client either way.
pub fn claims_match(want: &BTreeMap<String, String>, claims: &serde_json::Value) -> bool {
    !want.is_empty()
        && want.iter().all(|(k, v)| {
            let holds = |c: &serde_json::Value| match c {
                serde_json::Value::String(s) => s == v,
                serde_json::Value::Array(a) => a.iter().any(|x| x.as_str() == Some(v.as_str())),
                serde_json::Value::Number(n) => n.to_string() == *v,
                serde_json::Value::Bool(b) => b.to_string() == *v,
                _ => false,
            };
            claims.get(k).is_some_and(holds) || (k == "client_id" && claims.get("azp").is_some_and(holds))
        })
}

impl ServerOAuthConfig {
    /// The problems with this section, each naming its key; `agents` are
    /// the `npcs[].name`s.
    pub fn problems(&self, agents: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        let url = |key: &str, v: &str, out: &mut Vec<String>| match url::Url::parse(v) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => out.push(format!("server.oauth.{key}: {v:?} is not an http:// or https:// URL")),
        };
        url("issuer", &self.issuer, &mut out);
        url("audience", &self.audience, &mut out);
        if let Some(j) = &self.jwks_uri {
            url("jwks_uri", j, &mut out);
        }
        for (i, m) in self.agents.iter().enumerate() {
            if m.matches.is_empty() {
                out.push(format!(
                    "server.oauth.agents[{i}].match: name at least one claim (sub, client_id, groups, ...)"
                ));
            }
            if !agents.contains(&m.agent.as_str()) {
                out.push(format!("server.oauth.agents[{i}].agent: no agent {:?} in npcs", m.agent));
            }
        }
        if self.operator.as_ref().is_some_and(|o| o.matches.is_empty()) {
            out.push("server.oauth.operator.match: name at least one claim".into());
        }
        if self.agents.is_empty() && self.operator.is_none() {
            out.push(
                "server.oauth: map identities with `agents` (or `operator`): as it is, every token would be refused"
                    .into(),
            );
        }
        out
    }

    /// `audience` without a trailing slash.
    pub fn resource(&self) -> &str {
        self.audience.trim_end_matches('/')
    }
}

impl crate::ServerConfig {
    /// Whether a same-user loopback connection without a token is the
    /// operator (`loopback_operator`, or its default).
    pub fn loopback_is_operator(&self) -> bool {
        self.loopback_operator.unwrap_or(self.tokens.is_empty() && self.oauth.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_match_strings_arrays_and_azp_and_never_an_empty_rule() {
        let claims = serde_json::json!({"sub": "alice", "groups": ["dm", "players"], "azp": "tablet", "lvl": 3});
        let m = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(claims_match(&m(&[("sub", "alice")]), &claims));
        assert!(claims_match(&m(&[("sub", "alice"), ("groups", "players")]), &claims));
        assert!(!claims_match(&m(&[("sub", "alice"), ("groups", "admins")]), &claims));
        assert!(claims_match(&m(&[("client_id", "tablet")]), &claims));
        assert!(claims_match(&m(&[("lvl", "3")]), &claims));
        assert!(!claims_match(&m(&[("sub", "Alice")]), &claims));
        assert!(!claims_match(&m(&[]), &claims));
    }
}
