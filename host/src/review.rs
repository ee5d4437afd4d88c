//! What changes between two versions of a plugin, for a DM about to
//! upgrade mid-game and a reviewer deciding whether to let it: the report
//! `toolhost review` prints and the page shows.
//!
//! A [`Version`] is what a DM and a reviewer decide by, read from the
//! component itself (its imports, its signed manifest, its `list-tools`),
//! never from a catalogue's claims. [`Review::between`] compares two.

use crate::budget::Ceilings;
use crate::capabilities::CAPABILITIES;
use crate::package::Provenance;
use crate::report::ToolDeclaration;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One version of a plugin, as its component says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Version {
    /// Plugin name.
    pub name: String,
    /// The signed version (`None`: not signed).
    pub version: Option<String>,
    /// The signed manifest's author.
    pub author: Option<String>,
    /// The signing key's fingerprint.
    pub key_id: Option<String>,
    /// Component digest (without the signature section).
    pub sha256: String,
    /// Capabilities its imports ask for (not those inert without a grant).
    pub capabilities: Vec<String>,
    /// Origins its signed manifest asks to reach.
    pub http_hosts: Vec<String>,
    /// Secrets its signed manifest asks for.
    pub secrets: Vec<String>,
    /// Memory per call its signed manifest asks for, MiB.
    pub memory_mib: Option<usize>,
    /// Its imports (what the held-upgrade rule compares).
    pub imports: Vec<String>,
    /// Its tools.
    pub tools: Vec<ToolDeclaration>,
}

impl Version {
    /// A version from its imports, its signature's manifest and signer
    /// (`None`: not signed) and its tools.
    pub fn new(
        name: &str,
        sha256: &str,
        imports: Vec<String>,
        signed: Option<(&crate::package::Manifest, String)>,
        tools: Vec<ToolDeclaration>,
    ) -> Version {
        let asks = CAPABILITIES.review(&imports, Default::default()).asks;
        let mut v = Version {
            name: name.to_string(),
            sha256: sha256.to_string(),
            capabilities: asks.names().into_iter().map(str::to_string).collect(),
            imports,
            tools,
            ..Version::default()
        };
        if let Some((m, key_id)) = signed {
            v.version = Some(m.version.clone());
            v.author = Some(m.author.clone());
            v.key_id = Some(key_id);
            v.http_hosts = m.http_hosts.clone();
            v.secrets = m.secrets.clone();
            v.memory_mib = m.memory_mib;
        }
        v
    }

    /// The signer's manifest and key id, from a loaded plugin's provenance.
    pub fn signer(p: &Provenance) -> Option<(&crate::package::Manifest, String)> {
        match p {
            Provenance::Signed { manifest, public_key, .. } => {
                Some((manifest, crate::package::fingerprint(public_key)))
            }
            _ => None,
        }
    }

    /// "dice 1.2.0 (sha256 ab12…)", or "dice (unsigned, sha256 …)".
    pub fn label(&self) -> String {
        let short = self.sha256.get(..12).unwrap_or(&self.sha256);
        match &self.version {
            Some(v) => format!("{} {v} (sha256 {short}…)", self.name),
            None => format!("{} (unsigned, sha256 {short}…)", self.name),
        }
    }

    /// Each ask in words: `http (wasi:http)`, `HTTP to https://…`,
    /// `secret api_key`, `64 MiB per call`.
    pub fn asks(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for c in &self.capabilities {
            out.insert(format!("capability {c}"));
        }
        for h in &self.http_hosts {
            out.insert(format!("HTTP to {h}"));
        }
        for s in &self.secrets {
            out.insert(format!("secret {s}"));
        }
        if let Some(m) = self.memory_mib {
            out.insert(format!("{m} MiB per call"));
        }
        out
    }
}

/// The declared tier of a tool, by its declared p50 under the default
/// ceilings (`FAST`, `STANDARD`, `DEEP`, `OVER`; `undeclared`).
pub fn declared_tier(t: &ToolDeclaration) -> String {
    match t.estimated_duration_ms {
        Some(ms) => Ceilings::default()
            .tier_for(Duration::from_millis(ms.into()))
            .map_or_else(|| "OVER".to_string(), |t| t.to_string().to_uppercase()),
        None => "undeclared".into(),
    }
}

/// A tool in a review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolLine {
    /// Its name.
    pub name: String,
    /// Its declared tier.
    pub tier: String,
    /// Its description.
    pub description: String,
}

/// A tool both versions offer, changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolChange {
    /// Its name.
    pub tool: String,
    /// What changed, in words (arguments added or removed, required ones,
    /// types, the declared tier, the description).
    pub changes: Vec<String>,
}

/// The difference between the version serving and a new one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    /// The version serving (or compared against).
    pub old: Version,
    /// The new version.
    pub new: Version,
    /// Whether the publisher (signing key or author) changed.
    pub publisher_changed: bool,
    /// Asks the new version adds.
    pub asks_added: Vec<String>,
    /// Asks it drops.
    pub asks_removed: Vec<String>,
    /// Tools it adds.
    pub tools_added: Vec<ToolLine>,
    /// Tools it drops: an agent calling one gets "unknown tool" after the
    /// upgrade.
    pub tools_removed: Vec<ToolLine>,
    /// Tools of both, changed.
    pub tools_changed: Vec<ToolChange>,
    /// Whether `plugin add` would hold the upgrade, and why (filled by the
    /// caller, who knows the grants).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

impl Review {
    /// Compares `old` with `new`.
    pub fn between(old: Version, new: Version) -> Review {
        let (a, b) = (old.asks(), new.asks());
        let line = |t: &ToolDeclaration| ToolLine {
            name: t.name.clone(),
            tier: declared_tier(t),
            description: t.description.clone(),
        };
        let before: BTreeMap<&str, &ToolDeclaration> = old.tools.iter().map(|t| (t.name.as_str(), t)).collect();
        let after: BTreeMap<&str, &ToolDeclaration> = new.tools.iter().map(|t| (t.name.as_str(), t)).collect();
        let tools_added = after.iter().filter(|(n, _)| !before.contains_key(*n)).map(|(_, t)| line(t)).collect();
        let tools_removed = before.iter().filter(|(n, _)| !after.contains_key(*n)).map(|(_, t)| line(t)).collect();
        let tools_changed = before
            .iter()
            .filter_map(|(n, o)| {
                let changes = tool_changes(o, after.get(n)?);
                (!changes.is_empty()).then(|| ToolChange { tool: n.to_string(), changes })
            })
            .collect();
        Review {
            publisher_changed: old.key_id != new.key_id || old.author != new.author,
            asks_added: b.difference(&a).cloned().collect(),
            asks_removed: a.difference(&b).cloned().collect(),
            tools_added,
            tools_removed,
            tools_changed,
            held: None,
            old,
            new,
        }
    }

    /// Whether nothing a DM decides by changed (the digest aside).
    pub fn is_same(&self) -> bool {
        !self.publisher_changed
            && self.asks_added.is_empty()
            && self.asks_removed.is_empty()
            && self.tools_added.is_empty()
            && self.tools_removed.is_empty()
            && self.tools_changed.is_empty()
    }
}

/// The properties of an object schema, with their types in words.
fn properties(schema: &Value) -> BTreeMap<String, String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .map(|(k, v)| {
                    let ty = match v.get("type") {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => "any".into(),
                    };
                    (k.clone(), ty)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn required(schema: &Value) -> BTreeSet<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// What changed in a tool both versions offer.
fn tool_changes(old: &ToolDeclaration, new: &ToolDeclaration) -> Vec<String> {
    let mut out = Vec::new();
    let (p0, p1) = (properties(&old.input_schema), properties(&new.input_schema));
    let (r0, r1) = (required(&old.input_schema), required(&new.input_schema));
    for (k, ty) in &p1 {
        match p0.get(k) {
            None if r1.contains(k) => {
                out.push(format!("argument {k} ({ty}) added, required: calls written for the old version fail"))
            }
            None => out.push(format!("argument {k} ({ty}) added")),
            Some(old_ty) if old_ty != ty => out.push(format!("argument {k}: type {old_ty} → {ty}")),
            Some(_) => {}
        }
    }
    for k in p0.keys().filter(|k| !p1.contains_key(*k)) {
        out.push(format!("argument {k} removed"));
    }
    for k in r1.difference(&r0).filter(|k| p0.contains_key(*k)) {
        out.push(format!("argument {k} now required"));
    }
    for k in r0.difference(&r1).filter(|k| p1.contains_key(*k)) {
        out.push(format!("argument {k} no longer required"));
    }
    if out.is_empty() && old.input_schema != new.input_schema {
        out.push("input schema changed (beyond its arguments' names and types)".into());
    }
    let (t0, t1) = (declared_tier(old), declared_tier(new));
    if t0 != t1 {
        out.push(format!("declared tier {t0} → {t1}"));
    }
    if old.estimated_duration_ms != new.estimated_duration_ms || old.max_duration_ms != new.max_duration_ms {
        let ms = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| format!("{v} ms"));
        out.push(format!(
            "declared p50/max {}/{} → {}/{}",
            ms(old.estimated_duration_ms),
            ms(old.max_duration_ms),
            ms(new.estimated_duration_ms),
            ms(new.max_duration_ms)
        ));
    }
    if old.idempotent != new.idempotent {
        out.push(format!("idempotent {} → {}", old.idempotent, new.idempotent));
    }
    if old.description != new.description {
        out.push("description changed".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: Value, p50: Option<u32>) -> ToolDeclaration {
        ToolDeclaration {
            name: name.into(),
            description: format!("{name} things"),
            input_schema: schema,
            estimated_duration_ms: p50,
            max_duration_ms: p50.map(|v| v * 4),
            idempotent: true,
            cacheable_seconds: 0,
        }
    }

    fn version(tools: Vec<ToolDeclaration>, hosts: &[&str], key: &str) -> Version {
        Version {
            name: "weather".into(),
            version: Some("1.0.0".into()),
            author: Some("alice".into()),
            key_id: Some(key.into()),
            sha256: "ab".repeat(32),
            http_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            tools,
            ..Version::default()
        }
    }

    #[test]
    fn asks_tools_schemas_tiers_and_publisher_are_compared() {
        let s = json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]});
        let s2 = json!({"type":"object","properties":{"city":{"type":"string"},"units":{"type":"string"}},"required":["city","units"]});
        let old =
            version(vec![tool("now", s.clone(), Some(10)), tool("gone", s.clone(), None)], &["https://a.test"], "k1");
        let new = version(vec![tool("now", s2, Some(900)), tool("later", s, Some(10))], &["https://b.test"], "k2");
        let r = Review::between(old, new);
        assert!(r.publisher_changed);
        assert_eq!(r.asks_added, vec!["HTTP to https://b.test"]);
        assert_eq!(r.asks_removed, vec!["HTTP to https://a.test"]);
        assert_eq!(r.tools_added.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["later"]);
        assert_eq!(r.tools_removed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["gone"]);
        let now = &r.tools_changed[0];
        assert_eq!(now.tool, "now");
        assert!(now.changes[0].starts_with("argument units (string) added, required"), "{:?}", now.changes);
        assert!(now.changes.iter().any(|c| c == "declared tier FAST → STANDARD"), "{:?}", now.changes);
        assert!(!r.is_same());
    }

    #[test]
    fn the_same_component_twice_is_the_same() {
        let s = json!({"type":"object","properties":{}});
        let v = version(vec![tool("now", s, Some(10))], &["https://a.test"], "k1");
        let r = Review::between(v.clone(), v);
        assert!(r.is_same(), "{r:?}");
    }
}
