//! Registry credentials: where they come from, and that they go to their
//! own registry only.

use super::*;

/// Where registry credentials come from, in order: the `TOOLHOST_REGISTRY_*`
/// variables (for the one registry `TOOLHOST_REGISTRY_HOST` names), then the
/// first credentials file with an entry for the registry: `oci.auth_file`,
/// `$REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG/config.json` (else
/// `~/.docker/config.json`). No entry: anonymous.
#[derive(Clone, Default)]
pub struct Credentials {
    pub(super) files: Vec<PathBuf>,
    pub(super) env: Option<(String, RegistryAuth)>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("files", &self.files)
            .field("env_registry", &self.env.as_ref().map(|(h, _)| h))
            .finish()
    }
}

#[derive(Deserialize)]
struct AuthFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

/// `https://host:port/v1/` → `host:port`.
fn auth_key(k: &str) -> &str {
    let k = k.strip_prefix("https://").or_else(|| k.strip_prefix("http://")).unwrap_or(k);
    k.split('/').next().unwrap_or(k)
}

impl Credentials {
    /// From the environment and the config's `oci.auth_file` (already resolved).
    pub fn from_env(auth_file: Option<PathBuf>) -> Result<Credentials, OciError> {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        let mut files: Vec<PathBuf> = auth_file.into_iter().collect();
        files.extend(var("REGISTRY_AUTH_FILE").map(PathBuf::from));
        match var("DOCKER_CONFIG") {
            Some(d) => files.push(PathBuf::from(d).join("config.json")),
            None => files.extend(std::env::home_dir().map(|h| h.join(".docker/config.json"))),
        }
        let env = match (
            var("TOOLHOST_REGISTRY_HOST"),
            var("TOOLHOST_REGISTRY_USERNAME"),
            var("TOOLHOST_REGISTRY_TOKEN"),
        ) {
            (Some(host), Some(user), _) => {
                let password = var("TOOLHOST_REGISTRY_PASSWORD").ok_or_else(|| {
                    OciError::Credentials(
                        "TOOLHOST_REGISTRY_USERNAME is set but TOOLHOST_REGISTRY_PASSWORD is not".into(),
                    )
                })?;
                Some((host, RegistryAuth::Basic(user, password)))
            }
            (Some(host), None, Some(token)) => Some((host, RegistryAuth::Bearer(token))),
            (None, Some(_), _) | (None, _, Some(_)) => {
                return Err(OciError::Credentials(
                    "TOOLHOST_REGISTRY_USERNAME/TOKEN need TOOLHOST_REGISTRY_HOST: credentials go to the one registry named"
                        .into(),
                ));
            }
            _ => None,
        };
        Ok(Credentials { files, env })
    }

    /// The credentials for `registry`, and where they came from (for logs: never the secret).
    pub fn for_registry(&self, registry: &str) -> Result<(RegistryAuth, String), OciError> {
        if let Some((host, auth)) = &self.env
            && host == registry
        {
            return Ok((auth.clone(), "TOOLHOST_REGISTRY_* variables".into()));
        }
        for f in &self.files {
            let text = match std::fs::read_to_string(f) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(OciError::Credentials(format!("reading {}: {}", f.display(), e.kind()))),
            };
            // The parse error is not shown: it could quote a secret.
            let parsed: AuthFile = serde_json::from_str(&text).map_err(|e| {
                OciError::Credentials(format!("{} is not a credentials file (line {})", f.display(), e.line()))
            })?;
            let Some(entry) = parsed.auths.iter().find(|(k, _)| auth_key(k) == registry).map(|(_, v)| v) else {
                continue;
            };
            let from = format!("{}", f.display());
            let bad = || OciError::Credentials(format!("{}: the entry for {registry} is malformed", f.display()));
            if let Some(token) = &entry.registrytoken {
                return Ok((RegistryAuth::Bearer(token.clone()), from));
            }
            if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
                return Ok((RegistryAuth::Basic(u.clone(), p.clone()), from));
            }
            if let Some(auth) = &entry.auth {
                let decoded = base64::engine::general_purpose::STANDARD.decode(auth.trim()).map_err(|_| bad())?;
                let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
                let (u, p) = decoded.split_once(':').ok_or_else(bad)?;
                return Ok((RegistryAuth::Basic(u.to_string(), p.to_string()), from));
            }
            return Err(bad());
        }
        Ok((RegistryAuth::Anonymous, "anonymous".into()))
    }
}
