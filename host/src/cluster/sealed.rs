//! A server's credentials in the change log: `server add` in a fleet puts
//! the server's whole config in the log, so its bearer token, OAuth client
//! secret and environment values are sealed with the fleet's key, as
//! secrets are, and opened by each host as it applies the change. The
//! log, its backups and whoever reads the database never hold them in the
//! clear (rows written before are read as they are).

use super::{Change, Key};

/// What marks a sealed value in a logged server config.
const MARK: &str = "toolhost-sealed:";

/// The secret `name` of server `server` as sealing binds it.
fn bound(server: &str) -> String {
    format!("server {server}")
}

impl Change {
    /// This change with a server's credentials sealed with `key`.
    pub(super) fn sealed(&self, key: &Key) -> Change {
        let Change::ServerAdded { server } = self else { return self.clone() };
        let mut server = server.clone();
        let who = bound(&server.name);
        let seal = |name: &str, value: &mut String| {
            if !value.is_empty() {
                *value = format!("{MARK}{}", key.seal(&who, name, 0, value));
            }
        };
        if let Some(auth) = &mut server.auth {
            if let Some(token) = &mut auth.token {
                seal("auth.token", token);
            }
            if let Some(oauth) = &mut auth.oauth {
                seal("auth.oauth.client_secret", &mut oauth.client_secret);
            }
        }
        for (var, value) in &mut server.env {
            seal(&format!("env.{var}"), value);
        }
        Change::ServerAdded { server }
    }

    /// This change with a server's sealed credentials opened with `key`;
    /// a value that does not open (another key, moved from another
    /// server) refuses the change.
    pub(super) fn opened(self, key: &Key) -> Result<Change, String> {
        let Change::ServerAdded { mut server } = self else { return Ok(self) };
        let who = bound(&server.name);
        let open = |name: &str, value: &mut String| -> Result<(), String> {
            if let Some(sealed) = value.strip_prefix(MARK) {
                *value = key
                    .open(&who, name, 0, sealed)
                    .ok_or_else(|| format!("server {}: its {name} does not open with this fleet's key", who))?;
            }
            Ok(())
        };
        if let Some(auth) = &mut server.auth {
            if let Some(token) = &mut auth.token {
                open("auth.token", token)?;
            }
            if let Some(oauth) = &mut auth.oauth {
                open("auth.oauth.client_secret", &mut oauth.client_secret)?;
            }
        }
        for (var, value) in &mut server.env {
            open(&format!("env.{var}"), value)?;
        }
        Ok(Change::ServerAdded { server })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_credentials_are_sealed_in_the_log_and_open_with_the_key_only() {
        let server: crate::config::McpServerConfig = serde_json::from_value(serde_json::json!({
            "name": "wiki", "transport": "streamable-http", "url": "https://wiki.example/mcp",
            "auth": {"token": "tok-1234567890"}, "env": {"API_KEY": "env-secret"}
        }))
        .unwrap();
        let change = Change::ServerAdded { server: Box::new(server) };
        let key = Key([7; 32]);
        let logged = serde_json::to_string(&change.sealed(&key)).unwrap();
        assert!(!logged.contains("tok-1234567890") && !logged.contains("env-secret"), "{logged}");
        let read: Change = serde_json::from_str(&logged).unwrap();
        assert_eq!(read.clone().opened(&key).unwrap(), change);
        let e = read.opened(&Key([8; 32])).unwrap_err();
        assert!(e.contains("does not open with this fleet's key"), "{e}");
        // Moved to another server's change: does not open either.
        let moved = logged.replace("\"wiki\"", "\"other\"");
        let moved: Change = serde_json::from_str(&moved).unwrap();
        assert!(moved.opened(&key).is_err());
    }
}
