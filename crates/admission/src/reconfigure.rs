//! What a config reload changes on a serving host beyond the budget: the
//! grants (loaded plugins re-granted, or unloaded when they import what is
//! no longer granted) and the trust policy (loaded plugins the new policy
//! would refuse are unloaded). Each step is audited; calls already running
//! finish on the version they started with.

use crate::Admission;
use crate::capabilities::{GrantError, Grants, GrantsByPlugin};
use crate::runtime::WasmPlugin;
use crate::tool::Provider as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// New grants, resolved for every loaded plugin whose grant changed: made
/// by [`Admission::plan_grants`] (which fails, changing nothing, when a grant
/// cannot be honoured), applied by [`Admission::apply_grants`].
#[derive(Debug)]
pub struct GrantPlan {
    grants: GrantsByPlugin,
    base: PathBuf,
    changed: Vec<(Arc<WasmPlugin>, Grants)>,
    /// Plugins an earlier reload unloaded for want of a grant, with their
    /// grants under the new config.
    withheld: Vec<(Arc<WasmPlugin>, Grants)>,
}

impl GrantPlan {
    /// The plugins whose grants change.
    pub fn plugins(&self) -> Vec<String> {
        self.changed.iter().chain(&self.withheld).map(|(p, _)| p.name().to_string()).collect()
    }
}

/// A plugin a reload unloaded, kept to load again when allowed again.
#[derive(Debug)]
pub(crate) struct Held {
    plugin: Arc<WasmPlugin>,
    provenance: crate::package::Provenance,
    why: String,
}

impl Held {
    /// The held plugin's component digest.
    pub(crate) fn digest(&self) -> &str {
        self.plugin.digest()
    }
}

/// A plugin a reload unloaded and holds back, for `plugin list`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldPlugin {
    /// The plugin.
    pub name: String,
    /// Why it is out, and what loads it again.
    pub reason: String,
}

/// What a reload did to one loaded plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginChange {
    /// The plugin.
    pub plugin: String,
    /// `regranted` (it runs under its new grants), `unloaded`, `loaded`
    /// (held, and allowed again), `upgraded` (a held new version loaded)
    /// or `refused` (a held new version that cannot load at all).
    pub action: String,
    /// Why, in words.
    pub detail: String,
}

impl Admission {
    /// Resolves `grants` (relative paths against `base`) for every loaded
    /// plugin whose grant differs from the one in force, without changing
    /// anything. Fails when one cannot be resolved (a granted directory that
    /// does not exist, a malformed network grant ...).
    pub fn plan_grants(&self, grants: GrantsByPlugin, base: &Path) -> Result<GrantPlan, GrantError> {
        let old = self.grants.current();
        let mut changed = Vec::new();
        for plugin in self.pipeline.registry().wasm_plugins() {
            let name = plugin.name();
            let after = self.grants.config_in(&grants, name);
            if self.grants.config_in(&old.0, name) == after && old.1 == base {
                continue;
            }
            let resolved = self.grants.resolve(&after, name, base)?;
            changed.push((plugin, resolved));
        }
        let withheld: Vec<Arc<WasmPlugin>> =
            self.withheld.lock().unwrap_or_else(|p| p.into_inner()).values().map(|h| h.plugin.clone()).collect();
        let mut again = Vec::new();
        for plugin in withheld {
            let cfg = self.grants.config_in(&grants, plugin.name());
            again.push((plugin.clone(), self.grants.resolve(&cfg, plugin.name(), base)?));
        }
        Ok(GrantPlan { grants, base: base.to_path_buf(), changed, withheld: again })
    }

    /// Puts the planned grants in force: each changed plugin is re-granted
    /// (same code, new grants, its measurements kept), or unloaded when it
    /// imports a capability the new grants no longer give. Plugins loaded
    /// later get the new grants.
    pub fn apply_grants(&self, plan: GrantPlan) -> Vec<PluginChange> {
        let _one_at_a_time = self.one_at_a_time();
        self.grants.set(plan.grants, &plan.base);
        let mut out = Vec::new();
        for (plugin, grants) in plan.changed {
            let name = plugin.name().to_string();
            // Replaced or removed since the plan: the new version was loaded
            // under the new grants already.
            let current = self.pipeline.registry().snapshot().provider(&name).cloned();
            if !current.is_some_and(|c| std::ptr::addr_eq(Arc::as_ptr(&c), Arc::as_ptr(&plugin))) {
                continue;
            }
            match self.pipeline.runtime().regrant(&plugin, grants) {
                Ok(regranted) => {
                    let regranted = Arc::new(regranted);
                    if let Err(e) = self.pipeline.registry().upsert(regranted.clone()) {
                        tracing::warn!(plugin = %name, "not re-granted: {e}");
                        continue;
                    }
                    let held = regranted.held().names();
                    self.audit_regrant(&regranted, Some(plugin.digest()), self.provenance(&name).as_ref());
                    tracing::info!(plugin = %name, held = ?held, "plugin re-granted (config reload)");
                    out.push(PluginChange {
                        plugin: name,
                        action: "regranted".into(),
                        detail: {
                            let allows = regranted.grants().describe();
                            if allows.is_empty() {
                                "re-granted: now holds no capability".to_string()
                            } else {
                                format!("re-granted: now {}", allows.join("; "))
                            }
                        },
                    });
                }
                Err(e) => {
                    let reason =
                        format!("unloaded: {e} (grant it in plugins.grants.{name} and reload to load it again)");
                    self.hold(&name, plugin, &reason);
                    out.push(PluginChange { plugin: name, action: "unloaded".into(), detail: reason });
                }
            }
        }
        for (plugin, grants) in plan.withheld {
            let name = plugin.name().to_string();
            let Some(held) = self.withheld.lock().unwrap_or_else(|p| p.into_inner()).remove(&name) else {
                continue;
            };
            let provenance = held.provenance.clone();
            let trusted =
                self.trust.load().still_admits(&name, plugin.digest(), &provenance).map_err(|e| e.to_string());
            let again = trusted
                .and_then(|()| self.pipeline.runtime().regrant(&plugin, grants).map_err(|e| e.to_string()))
                .and_then(|p| {
                    let p = Arc::new(p);
                    self.pipeline.registry().add(p.clone()).map(|()| p).map_err(|e| e.to_string())
                });
            match again {
                Ok(p) => {
                    let held = p.held().names();
                    self.audit_regrant(&p, None, Some(&provenance));
                    self.set_provenance(&name, Some(provenance));
                    tracing::info!(plugin = %name, held = ?held, "plugin loaded again: its grants and the trust policy allow it (config reload)");
                    out.push(PluginChange {
                        plugin: name,
                        action: "loaded".into(),
                        detail: format!(
                            "loaded again: its grants cover what it imports and the trust policy admits it (holds {})",
                            if held.is_empty() { "nothing".to_string() } else { held.join(", ") }
                        ),
                    });
                }
                // Still not allowed: it stays out, and waits for the next reload.
                Err(why) => {
                    self.withheld.lock().unwrap_or_else(|p| p.into_inner()).insert(name, Held { why, ..held });
                }
            }
        }
        out.extend(self.load_held_upgrades());
        out
    }

    /// Plugins held back, sorted by name: those a reload unloaded (loaded
    /// again by the reload that allows them again), those waiting for a
    /// secret (loaded when it is set), and new versions waiting for a grant
    /// while the running version serves (loaded by the reload that grants
    /// it).
    pub fn withheld_plugins(&self) -> Vec<HeldPlugin> {
        let mut v: Vec<HeldPlugin> = self
            .withheld
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, h)| HeldPlugin { name: name.clone(), reason: h.why.clone() })
            .collect();
        v.extend(self.values.awaiting_reasons().into_iter().map(|(name, reason)| HeldPlugin { name, reason }));
        v.extend(self.held_upgrades().into_iter().map(|(name, reason)| HeldPlugin { name, reason }));
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Unloads `name` for `reason` and holds it back.
    fn hold(&self, name: &str, plugin: Arc<WasmPlugin>, reason: &str) {
        // One added without a record of where it came from (through the
        // library) is judged as unsigned when it could load again.
        let provenance = self.provenance(name).unwrap_or_else(|| crate::package::Provenance::Unsigned {
            reason: "added without a record of its origin".into(),
        });
        // Audited with the reason; one already gone has nothing to unload.
        let _ = self.remove_registered(name, Some(reason));
        self.withheld
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), Held { plugin, provenance, why: reason.to_string() });
    }

    /// The `plugin_regrant` audit record of `now` (re-granted, or loaded
    /// again after being held), replacing the version `previous`.
    fn audit_regrant(&self, now: &WasmPlugin, previous: Option<&str>, origin: Option<&crate::package::Provenance>) {
        self.pipeline.audit().write_plugin(&crate::audit::PluginRecord {
            time: crate::audit::now_rfc3339(),
            event: crate::audit::PluginEventKind::PluginRegrant,
            plugin: now.name(),
            path: None,
            sha256: Some(now.digest()),
            previous_sha256: previous,
            origin: origin.map(|p| p.describe()),
            capabilities_held: now.held().names(),
            error: None,
        });
    }

    /// Puts `trust` in force, unloading each loaded plugin it would refuse
    /// now (its key no longer trusted and unsigned plugins not allowed, or
    /// its digest no longer the locked one).
    pub fn apply_trust(&self, trust: crate::package::TrustPolicy) -> Vec<PluginChange> {
        let _one_at_a_time = self.one_at_a_time();
        let trust = self.with_published(trust);
        // A canary under way is judged as a plain version: rolled back first.
        let mut out = self.end_canaries_locked("a change of the trust policy");
        for plugin in self.pipeline.registry().wasm_plugins() {
            let name = plugin.name().to_string();
            let Some(provenance) = self.provenance(&name) else { continue };
            if let Err(e) = trust.still_admits(&name, plugin.digest(), &provenance) {
                let again = match &e {
                    crate::package::PackageError::Revoked { by, .. } if by != "trust.revoked" => {
                        "a revocation list is not taken back; a reload that no longer names its signer in marketplace.revocations_signed_by loads it again"
                    }
                    _ => "a reload whose trust admits it loads it again",
                };
                let reason = format!("unloaded: the trust policy now refuses it: {e} ({again})");
                self.hold(&name, plugin, &reason);
                out.push(PluginChange { plugin: name, action: "unloaded".into(), detail: reason });
            }
        }
        self.trust.store(Arc::new(trust));
        out
    }

    /// Puts in force what signed revocation lists revoke now (replacing
    /// what they revoked before), beside the config's `trust.revoked`:
    /// each loaded plugin they name is unloaded, audited, and its tools
    /// leave every session's list. Returns what changed.
    pub fn apply_revocations(&self, published: Vec<crate::package::Revocation>) -> Vec<PluginChange> {
        {
            let mut now = self.published.lock().unwrap_or_else(|p| p.into_inner());
            if *now == published {
                return Vec::new();
            }
            *now = published;
        }
        self.apply_trust((*self.trust()).clone())
    }

    /// What signed revocation lists revoke now.
    pub fn published_revocations(&self) -> Vec<crate::package::Revocation> {
        self.published.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
