//! Reads from a registry with every answer bounded: manifests, token
//! answers and layers are read in chunks and refused past their limits
//! (oci-client reads manifests and token answers whole before anything
//! can check their size, so a hostile registry could fill the host's
//! memory through it). The token flow is the distribution spec's: an
//! anonymous request first, then on a `401` the challenge's realm (HTTPS
//! only, unless it is on loopback or listed in `oci.insecure`) with the
//! credentials, then the request again with the token.

use super::{RegistryAuth, is_loopback};
use base64::Engine as _;

/// The largest token answer read.
const MAX_TOKEN_BYTES: usize = 64 * 1024;

/// One registry, one set of credentials, its token once obtained.
pub(crate) struct Reader {
    http: reqwest::Client,
    scheme: &'static str,
    registry: String,
    insecure: Vec<String>,
    auth: RegistryAuth,
    token: Option<String>,
    timeout: std::time::Duration,
}

/// Reads a body, at most `max` bytes (the `what` of the errors).
async fn body(resp: reqwest::Response, max: usize, what: &str) -> Result<Vec<u8>, String> {
    use toolhost_base::bounded::{BodyError, read_capped};
    read_capped(resp.content_length(), max, resp.bytes_stream()).await.map_err(|e| match e {
        BodyError::TooLarge { .. } => format!("the {what} is {e}"),
        BodyError::Read(e) => format!("reading the {what}: {e}"),
    })
}

impl Reader {
    pub(super) fn new(
        registry: &str,
        plain: bool,
        insecure: &[String],
        auth: RegistryAuth,
        timeout: std::time::Duration,
    ) -> Result<Reader, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(timeout)
            // Blob stores often redirect; reqwest drops the
            // Authorization header when the host changes.
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| format!("no HTTP client: {e}"))?;
        Ok(Reader {
            http,
            scheme: if plain { "http" } else { "https" },
            registry: registry.to_string(),
            insecure: insecure.to_vec(),
            auth,
            token: None,
            timeout,
        })
    }

    fn authorization(&self) -> Option<String> {
        match (&self.token, &self.auth) {
            (Some(t), _) | (None, RegistryAuth::Bearer(t)) => Some(format!("Bearer {t}")),
            _ => None,
        }
    }

    fn basic(&self) -> Option<String> {
        match &self.auth {
            RegistryAuth::Basic(u, p) => {
                Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))))
            }
            _ => None,
        }
    }

    async fn send(&self, url: &str, accept: &str, authorization: Option<&str>) -> Result<reqwest::Response, String> {
        let mut req = self.http.get(url).header(reqwest::header::ACCEPT, accept);
        if let Some(a) = authorization {
            req = req.header(reqwest::header::AUTHORIZATION, a);
        }
        req.send().await.map_err(|e| match e.is_timeout() {
            true => format!("unreachable: no answer within {} s", self.timeout.as_secs()),
            false => format!("unreachable: {}", e.without_url()),
        })
    }

    /// Whether a token realm may be asked: HTTPS, or plain HTTP on
    /// loopback or to a host the operator listed as insecure.
    fn realm_allowed(&self, realm: &url::Url) -> bool {
        let host = match (realm.host_str(), realm.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            _ => return false,
        };
        match realm.scheme() {
            "https" => true,
            "http" => is_loopback(&host) || self.insecure.contains(&host),
            _ => false,
        }
    }

    /// Gets a token for the challenge in `header`.
    async fn token(&mut self, header: &str, repository: &str) -> Result<(), String> {
        let params = toolhost_base::www_authenticate::params(header, "bearer");
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let realm = get("realm").ok_or("the registry's challenge names no token realm")?;
        let mut url = url::Url::parse(&realm).map_err(|_| "the registry's token realm is not a URL".to_string())?;
        if !self.realm_allowed(&url) {
            return Err(format!(
                "the registry sends credentials to {}://{} over plain HTTP; refused (list the host in oci.insecure to allow it)",
                url.scheme(),
                url.host_str().unwrap_or("?")
            ));
        }
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = get("service") {
                q.append_pair("service", &s);
            }
            q.append_pair("scope", &get("scope").unwrap_or_else(|| format!("repository:{repository}:pull")));
        }
        let resp = self.send(url.as_str(), "application/json", self.basic().as_deref()).await?;
        let status = resp.status();
        let body = body(resp, MAX_TOKEN_BYTES, "token answer").await?;
        if !status.is_success() {
            return Err(format!("the token service answered {status}: check the registry credentials"));
        }
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let t: Token = serde_json::from_slice(&body).map_err(|_| "the token answer is not JSON".to_string())?;
        self.token = Some(t.token.or(t.access_token).ok_or("the token answer holds no token")?);
        Ok(())
    }

    /// GETs `/v2/<repository>/<kind>/<reference>`, at most `max` bytes;
    /// `Ok(None)` when the registry says it has no such thing.
    pub(crate) async fn get(
        &mut self,
        repository: &str,
        kind: &str,
        reference: &str,
        accept: &str,
        max: usize,
    ) -> Result<Option<Vec<u8>>, String> {
        let url = format!("{}://{}/v2/{repository}/{kind}/{reference}", self.scheme, self.registry);
        let mut resp = self.send(&url, accept, self.authorization().as_deref()).await?;
        if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
            let challenge = resp
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let retry = if challenge.to_ascii_lowercase().starts_with("bearer") {
                self.token(&challenge, repository).await?;
                self.authorization()
            } else {
                self.basic()
            };
            let Some(authorization) = retry else {
                return Err("the registry wants credentials (see `oci.auth_file` and TOOLHOST_REGISTRY_*)".into());
            };
            resp = self.send(&url, accept, Some(&authorization)).await?;
        }
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(format!("the registry answered {status}: check the registry credentials"));
        }
        if !status.is_success() {
            return Err(format!("the registry answered {status}"));
        }
        let what = match kind {
            "manifests" => "manifest",
            "tags" => "tag list",
            _ => "layer",
        };
        body(resp, max, what).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::{Reader, RegistryAuth};

    #[test]
    fn token_realms_must_be_https_unless_loopback_or_listed() {
        let insecure = ["plain.example:5000".to_string()];
        let timeout = std::time::Duration::from_secs(1);
        let r = Reader::new("registry.example", false, &insecure, RegistryAuth::Anonymous, timeout).unwrap();
        let ok = |u: &str| r.realm_allowed(&url::Url::parse(u).unwrap());
        assert!(ok("https://auth.example/token"));
        assert!(!ok("http://auth.example/token"), "credentials never go in clear text to a foreign host");
        assert!(ok("http://127.0.0.1:5001/token"));
        assert!(ok("http://plain.example:5000/token"));
        assert!(!ok("ftp://auth.example/token"));
    }
}
