//! The client-credentials token request, and how the client proves who it
//! is there: a secret (`client_secret_basic`, `client_secret_post`) or a
//! signed assertion (`private_key_jwt`, RFC 7523 §2.2).

use super::{ClientAuth, Endpoint, TokenSource, bearer_token, json_answer, refusal};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long an assertion is good for (RFC 7523 asks for a short life).
const ASSERTION_LIFETIME: Duration = Duration::from_secs(60);
/// The largest key file read, in bytes.
const MAX_KEY_BYTES: usize = 64 << 10;

/// The `client_assertion_type` of a JWT assertion (RFC 7523 §2.2).
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// The JWT bearer grant (RFC 7523 §2.1).
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The token exchange grant (RFC 8693) and the token types of cross-app access.
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";
const ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
/// The largest ID token read from a file, in bytes.
const MAX_ID_TOKEN_BYTES: usize = 64 << 10;

/// A client's private key for `private_key_jwt`.
pub(super) struct ClientKey {
    key: EncodingKey,
    alg: Algorithm,
    kid: Option<String>,
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey").field("alg", &self.alg).field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// The algorithms tried, in order, when none is configured.
const DEFAULT_ALGS: [Algorithm; 4] = [Algorithm::ES256, Algorithm::ES384, Algorithm::RS256, Algorithm::EdDSA];

impl ClientKey {
    /// Reads the key at `path` (a PEM file of the user's own) for `alg`, or
    /// the first algorithm it signs with. Errors name the file, never
    /// its contents.
    pub(super) fn load(path: &str, alg: Option<&str>, kid: Option<String>) -> Result<ClientKey, String> {
        let what = format!("auth.oauth.private_key_file {path:?}");
        let pem = toolhost_base::private::read_obeyed(std::path::Path::new(path), MAX_KEY_BYTES)
            .map_err(|e| format!("{what}: {e}"))?;
        let algs: Vec<Algorithm> = match alg {
            Some(a) => vec![a.parse().map_err(|_| {
                format!("auth.oauth.signing_alg {a:?}: not a JWS algorithm (ES256, ES384, RS256, PS256, EdDSA, ...)")
            })?],
            None => DEFAULT_ALGS.to_vec(),
        };
        for alg in &algs {
            let key = match alg {
                Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem.as_bytes()),
                Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()),
                _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
            };
            let Ok(key) = key else { continue };
            let k = ClientKey { key, alg: *alg, kid: kid.clone() };
            // A P-384 key is not an ES256 key: only a signature says.
            if k.sign("probe", "probe").is_ok() {
                return Ok(k);
            }
        }
        let tried: Vec<String> = algs.iter().map(|a| format!("{a:?}")).collect();
        Err(format!("{what}: not a PEM private key (PKCS#8) that signs with {}", tried.join(", ")))
    }

    /// A fresh assertion: issued by and about `client_id`, for `audience`.
    fn sign(&self, client_id: &str, audience: &str) -> Result<String, String> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).map_err(|e| format!("no randomness for the assertion's jti: {e}"))?;
        let claims = serde_json::json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME.as_secs(),
            "jti": hex::encode(id),
        });
        let mut header = Header::new(self.alg);
        header.kid = self.kid.clone();
        jsonwebtoken::encode(&header, &claims, &self.key).map_err(|e| format!("signing the client assertion: {e}"))
    }
}

/// The subject token of a token exchange's form.
fn id_token_of(pairs: &[(&str, String)]) -> String {
    pairs.iter().find(|(k, _)| *k == "subject_token").map(|(_, v)| v.clone()).unwrap_or_default()
}

/// `said` (a server's words) with every secret toolhost sent it, and the
/// forms they travel in (form-encoded, in an HTTP Basic header), blanked:
/// a server that echoes the request must not put them in the log.
pub(crate) fn redacted(said: String, secrets: &[String]) -> String {
    let mut said = said;
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        let encoded = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect::<String>();
        for form in [secret.as_str(), encoded.as_str()] {
            said = said.replace(form, "[redacted]");
        }
    }
    // Any Basic credentials: base64 of `id:secret`.
    if let Some(i) = said.find("Basic ") {
        let end =
            said[i + 6..].find(|c: char| c.is_whitespace() || c == '"' || c == '\'').map_or(said.len(), |e| i + 6 + e);
        said.replace_range(i + 6..end, "[redacted]");
    }
    said
}

/// An HTTP Basic `Authorization` value for a client id and secret, both
/// form-encoded before they are joined (RFC 6749 §2.3.1).
pub(crate) fn basic_auth(id: &str, secret: &str) -> String {
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", enc(id), enc(secret))))
}

/// How the client authenticates at an authorization server that lists
/// `methods` (`token_endpoint_auth_methods_supported`; empty: unsaid).
pub(super) fn client_auth(has_key: bool, methods: &[String], issuer: &str) -> Result<ClientAuth, String> {
    let lists = |m: &str| methods.iter().any(|x| x == m);
    match has_key {
        true if methods.is_empty() || lists("private_key_jwt") => Ok(ClientAuth::PrivateKeyJwt),
        true => Err(format!(
            "the authorization server {issuer} does not take private_key_jwt at its token endpoint (it takes {}); remove auth.oauth.private_key_file to use a client_secret",
            methods.join(", ")
        )),
        false if methods.is_empty() || lists("client_secret_basic") => Ok(ClientAuth::Basic),
        false if lists("client_secret_post") => Ok(ClientAuth::Post),
        false => Err(format!(
            "the authorization server {issuer} takes only {} at its token endpoint; toolhost authenticates with client_secret_basic, client_secret_post or private_key_jwt (auth.oauth.private_key_file)",
            methods.join(", ")
        )),
    }
}

impl TokenSource {
    /// Cross-app access, first step: the user's ID token exchanged at the
    /// identity provider for an identity assertion grant (`id-jag`) for
    /// this server's authorization server and resource.
    async fn exchange(
        &self,
        x: &crate::config::CrossAppConfig,
        endpoint: &Endpoint,
        scope: &str,
    ) -> Result<String, String> {
        let url = &x.idp_token_url;
        let what = format!("identity provider {url}");
        let id_token = match &x.id_token_file {
            Some(path) => toolhost_base::private::read_obeyed(std::path::Path::new(path), MAX_ID_TOKEN_BYTES)
                .map_err(|e| format!("auth.oauth.cross_app.id_token_file {path:?}: {e}"))?
                .trim()
                .to_string(),
            None => x.id_token.trim().to_string(),
        };
        if id_token.is_empty() {
            return Err("auth.oauth.cross_app: no ID token (set id_token or id_token_file)".into());
        }
        // The grant's audience: the authorization server's issuer.
        let audience = endpoint.issuer.clone().unwrap_or_else(|| endpoint.token_url.to_string());
        let mut pairs = vec![
            ("grant_type", TOKEN_EXCHANGE.to_string()),
            ("requested_token_type", ID_JAG.to_string()),
            ("audience", audience),
            ("resource", endpoint.resource.clone()),
            ("subject_token", id_token),
            ("subject_token_type", ID_TOKEN.to_string()),
        ];
        if !scope.is_empty() {
            pairs.push(("scope", scope.to_string()));
        }
        let mut request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(super::REQUEST_TIMEOUT);
        match x.idp_client_secret.is_empty() {
            true => pairs.push(("client_id", x.idp_client_id.clone())),
            false => {
                request =
                    request.header(reqwest::header::AUTHORIZATION, basic_auth(&x.idp_client_id, &x.idp_client_secret));
            }
        }
        let secrets: Vec<String> = vec![id_token_of(&pairs), x.idp_client_secret.clone()];
        let form = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
        let response = request.body(form).send().await.map_err(|e| format!("{what}: {e}"))?;
        let (status, body) = json_answer(response, &what).await?;
        if let Some(said) = refusal(status, &body) {
            let said = redacted(said, &secrets);
            return Err(format!("{what} refused to exchange the ID token ({status}): {said}"));
        }
        if body["issued_token_type"].as_str() != Some(ID_JAG) {
            return Err(format!(
                "{what} issued a {} token, not an identity assertion grant ({ID_JAG})",
                crate::tool::log_safe(body["issued_token_type"].as_str().unwrap_or("(unnamed)"))
            ));
        }
        let grant = body["access_token"].as_str().filter(|t| !t.is_empty());
        let grant = grant.ok_or_else(|| format!("{what} sent no access_token"))?;
        tracing::debug!(idp = %url, "exchanged the ID token for an identity assertion grant");
        Ok(grant.to_string())
    }

    /// The token request: client credentials, or cross-app access's JWT
    /// bearer grant.
    pub(super) async fn fetch(&self, endpoint: &Endpoint, scopes: &[String]) -> Result<(String, Instant), String> {
        let url = &endpoint.token_url;
        let scope = scopes.join(" ");
        let mut pairs = match &self.cfg.cross_app {
            // Cross-app access: the identity provider's grant, presented.
            Some(x) => vec![
                ("grant_type", JWT_BEARER_GRANT.to_string()),
                ("assertion", self.exchange(x, endpoint, &scope).await?),
            ],
            None => vec![("grant_type", "client_credentials".to_string())],
        };
        if !scope.is_empty() {
            pairs.push(("scope", scope));
        }
        pairs.push(("resource", endpoint.resource.clone()));
        let mut request = self
            .client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(super::REQUEST_TIMEOUT);
        match endpoint.auth {
            ClientAuth::Basic => {
                request = request
                    .header(reqwest::header::AUTHORIZATION, basic_auth(&self.cfg.client_id, &self.cfg.client_secret));
            }
            ClientAuth::Post => {
                pairs.push(("client_id", self.cfg.client_id.clone()));
                pairs.push(("client_secret", self.cfg.client_secret.clone()));
            }
            ClientAuth::PrivateKeyJwt => {
                let key = self.key.as_ref().ok_or("private_key_jwt without auth.oauth.private_key_file")?;
                // The audience: the authorization server's issuer
                // identifier, or the token endpoint when it was configured.
                let audience = endpoint.issuer.clone().unwrap_or_else(|| url.to_string());
                pairs.push(("client_id", self.cfg.client_id.clone()));
                pairs.push(("client_assertion_type", JWT_BEARER.to_string()));
                pairs.push(("client_assertion", key.sign(&self.cfg.client_id, &audience)?));
            }
        }
        // What was sent that a server could echo back in its refusal.
        let mut secrets: Vec<String> = vec![self.cfg.client_secret.clone()];
        secrets.extend(
            pairs.iter().filter(|(k, _)| matches!(*k, "assertion" | "client_assertion")).map(|(_, v)| v.clone()),
        );
        let form = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
        let response = request.body(form).send().await.map_err(|e| format!("token endpoint {url}: {e}"))?;
        let (status, body) = json_answer(response, &format!("token endpoint {url}")).await?;
        if let Some(said) = refusal(status, &body).map(|s| redacted(s, &secrets)) {
            return Err(format!(
                "token endpoint {url} refused the {} ({status}): {said}{}",
                if self.cfg.cross_app.is_some() { "identity assertion grant" } else { "client credentials" },
                if endpoint.grant_unlisted && self.cfg.cross_app.is_none() {
                    "; its metadata does not list client_credentials among grant_types_supported"
                } else {
                    ""
                }
            ));
        }
        let (token, seconds) = bearer_token(&body, url)?;
        let lifetime = Duration::from_secs(seconds.unwrap_or(3600).max(1));
        let margin = (lifetime / 10).min(Duration::from_secs(30));
        tracing::debug!(token_url = %url, "fetched an OAuth access token for {} s", lifetime.as_secs());
        Ok((token.to_string(), Instant::now() + lifetime - margin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    /// A fresh P-256 key as a PKCS#8 PEM file of the user's own.
    fn key_file(dir: &std::path::Path) -> String {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let der = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let body = STANDARD.encode(der.as_ref());
        let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", lines.join("\n"));
        let path = dir.join("key.pem");
        std::fs::write(&path, pem).unwrap();
        path.display().to_string()
    }

    fn part(jwt: &str, i: usize) -> serde_json::Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(jwt.split('.').nth(i).unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn an_assertion_is_issued_by_and_about_the_client_for_the_issuer_and_lives_a_minute() {
        let dir = tempfile::tempdir().unwrap();
        let key = ClientKey::load(&key_file(dir.path()), None, Some("k1".into())).unwrap();
        assert_eq!(key.alg, Algorithm::ES256);
        let jwt = key.sign("my-client", "https://auth.example").unwrap();
        let (header, claims) = (part(&jwt, 0), part(&jwt, 1));
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["kid"], "k1");
        assert_eq!(claims["iss"], "my-client");
        assert_eq!(claims["sub"], "my-client");
        assert_eq!(claims["aud"], "https://auth.example");
        assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 60);
        // Each assertion is new (RFC 7523: jti is single use).
        assert_ne!(part(&key.sign("my-client", "a").unwrap(), 1)["jti"], claims["jti"]);
    }

    #[test]
    fn a_bad_key_or_algorithm_is_named_and_the_key_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-a-key.pem");
        std::fs::write(&path, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n").unwrap();
        let e = ClientKey::load(&path.display().to_string(), None, None).unwrap_err();
        assert!(e.contains("not a PEM private key") && e.contains("not-a-key.pem"), "{e}");
        assert!(!e.contains("c2VjcmV0"), "{e}");
        let e = ClientKey::load(&key_file(dir.path()), Some("HS999"), None).unwrap_err();
        assert!(e.contains("auth.oauth.signing_alg \"HS999\""), "{e}");
        // An EC key is not an RSA key.
        let e = ClientKey::load(&key_file(dir.path()), Some("RS256"), None).unwrap_err();
        assert!(e.contains("signs with RS256"), "{e}");
        let e = ClientKey::load("/nonexistent/key.pem", None, None).unwrap_err();
        assert!(e.contains("/nonexistent/key.pem"), "{e}");
    }

    #[test]
    fn a_refusal_that_echoes_what_was_sent_is_logged_without_the_secrets() {
        let secrets = vec!["s3cret&=".to_string(), "eyJhbGciOi.payload.sig".to_string(), String::new()];
        let said =
            "bad request: client_secret=s3cret%26%3D assertion=eyJhbGciOi.payload.sig auth=Basic Y2lkOnMzY3JldA== end";
        let out = redacted(said.to_string(), &secrets);
        assert_eq!(out, "bad request: client_secret=[redacted] assertion=[redacted] auth=Basic [redacted] end");
        assert_eq!(redacted("nothing to hide".into(), &secrets), "nothing to hide");
    }

    #[test]
    fn private_key_jwt_is_used_when_a_key_is_given_and_the_server_takes_it() {
        let m = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(client_auth(true, &[], "i"), Ok(ClientAuth::PrivateKeyJwt));
        assert_eq!(
            client_auth(true, &m(&["client_secret_basic", "private_key_jwt"]), "i"),
            Ok(ClientAuth::PrivateKeyJwt)
        );
        assert!(
            client_auth(true, &m(&["client_secret_basic"]), "i").unwrap_err().contains("does not take private_key_jwt")
        );
        assert_eq!(client_auth(false, &m(&["client_secret_post"]), "i"), Ok(ClientAuth::Post));
        assert!(client_auth(false, &m(&["private_key_jwt"]), "i").unwrap_err().contains("auth.oauth.private_key_file"));
    }
}
