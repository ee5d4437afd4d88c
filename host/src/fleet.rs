//! A host in a fleet: the changes other hosts made, applied here through
//! this host's own paths ([`HostApplier`]). The control plane itself is
//! `crate::cluster`.

use crate::cluster::Change;
use std::sync::Arc;
use std::time::Duration;

/// Applies the fleet's changes to this host through its own paths: the
/// installer (trust policy, capability checks, the registry cache), the
/// external servers, the budget; each also goes to the host's run-time
/// record, so that a restart without the control plane keeps it.
pub struct HostApplier {
    /// The host's installer.
    pub installer: Arc<crate::Installer>,
    /// Its external servers, when it runs any.
    pub servers: Option<Arc<crate::mcp_client::ExternalServers>>,
}

impl crate::cluster::Apply for HostApplier {
    fn apply(&self, change: &crate::cluster::Change) -> Result<(), String> {
        let applied = apply_here(self, change);
        // The record names who made the change (the control plane's
        // applier sets the actor: the host it came from).
        self.installer.host().pipeline().audit().write_action(&crate::audit::ActionRecord {
            time: crate::audit::now_rfc3339(),
            event: "fleet_change",
            detail: Some(serde_json::json!({
                "change": change.describe(),
                "applied": applied.is_ok(),
                "error": applied.as_ref().err(),
            })),
            trace_id: None,
        });
        applied
    }

    fn secrets(&self, secrets: crate::secrets::Secrets) -> Result<(), String> {
        // One secret clashing with this host's config must not stop the
        // others (a removal above all) from taking effect here.
        let (loaded, left_out) = self.installer.host().admission().put_secrets_but_clashes(secrets);
        for change in loaded {
            tracing::info!(plugin = %change.plugin, "{}", change.detail);
        }
        for why in left_out {
            tracing::error!("the fleet's secret is not used on this host: {why}");
        }
        Ok(())
    }

    fn plugins(&self) -> std::collections::BTreeMap<String, String> {
        self.installer
            .host()
            .pipeline()
            .registry()
            .snapshot()
            .providers()
            .filter_map(|p| Some((p.name().to_string(), p.fingerprint()?.to_string())))
            .collect()
    }
}

/// `change`, made on this host.
fn apply_here(applier: &HostApplier, change: &crate::cluster::Change) -> Result<(), String> {
    let host = applier.installer.host();
    let changes = applier.installer.runtime_changes();
    match change {
        Change::PluginAdded { name, reference } => {
            // Already added from this very reference (a restart
            // replaying the log): nothing to pull.
            let loaded = host.pipeline().registry().snapshot().providers().any(|p| p.name() == name);
            if loaded
                && changes.added_plugins().iter().any(|p| p.name == *name && p.path.as_os_str() == reference.as_str())
            {
                return Ok(());
            }
            applier
                .installer
                .add_plugin_at_run_time(std::path::Path::new(reference))
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Change::PluginRemoved { name } => {
            if host.pipeline().registry().snapshot().providers().any(|p| p.name() == name) {
                applier.installer.remove_plugin_at_run_time(name).map_err(|e| e.to_string())
            } else {
                changes.plugin_removed(name);
                Ok(())
            }
        }
        Change::ServerAdded { server } => {
            let servers = applier.servers.as_ref().ok_or("this host runs no external servers")?;
            let _ = servers.remove(&server.name);
            servers.add((**server).clone()).map_err(|e| e.to_string())?;
            changes.server_added(server);
            Ok(())
        }
        Change::ServerRemoved { name } => {
            if let Some(servers) = &applier.servers {
                let _ = servers.remove(name);
            }
            changes.server_removed(name);
            Ok(())
        }
        Change::OverrideSet { agent, tier, until_unix_ms } => {
            let left = until_unix_ms.saturating_sub(crate::changes::now_unix_ms());
            if left == 0 {
                return Ok(());
            }
            let ttl = Duration::from_millis(left);
            host.pipeline().budget().set_override(agent, *tier, ttl).map_err(|e| e.to_string())?;
            host.pipeline().registry().touch();
            changes.override_set(agent, *tier, ttl);
            Ok(())
        }
        Change::OverrideCleared { agent } => {
            host.pipeline().budget().clear_override(agent);
            host.pipeline().registry().touch();
            changes.override_cleared(agent);
            Ok(())
        }
        // The control plane reads the secrets whole and hands them to
        // `secrets` below.
        Change::SecretSet { .. } | Change::SecretRemoved { .. } => Ok(()),
    }
}
