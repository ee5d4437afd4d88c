//! OAuth 2.1 client credentials for streamable-HTTP servers: a token
//! source that refreshes before expiry, and rmcp's HTTP client wrapped to
//! send it.

use crate::config::OAuthConfig;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// OAuth 2.1 client credentials: fetches a bearer token and refreshes it
/// before it expires.
#[derive(Debug)]
pub(super) struct TokenSource {
    cfg: OAuthConfig,
    client: reqwest::Client,
    current: tokio::sync::Mutex<Option<(String, Instant)>>,
}

impl TokenSource {
    pub(super) fn new(cfg: OAuthConfig, client: reqwest::Client) -> TokenSource {
        TokenSource { cfg, client, current: tokio::sync::Mutex::new(None) }
    }

    /// A valid access token, fetched anew when the cached one is within
    /// 10% of its lifetime (at most 30 s) of expiring.
    pub(super) async fn bearer(&self) -> Result<String, String> {
        let mut current = self.current.lock().await;
        if let Some((token, refresh_at)) = current.as_ref()
            && Instant::now() < *refresh_at
        {
            return Ok(token.clone());
        }
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if !self.cfg.scopes.is_empty() {
                form.append_pair("scope", &self.cfg.scopes.join(" "));
            }
            form.finish()
        };
        let response = self
            .client
            .post(&self.cfg.token_url)
            .basic_auth(&self.cfg.client_id, Some(&self.cfg.client_secret))
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(form)
            .timeout(Duration::from_secs(15))
            .send()
            .await
            .map_err(|e| format!("token endpoint {}: {e}", self.cfg.token_url))?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| format!("token endpoint answered {status}: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "token endpoint refused the client credentials ({status}): {}",
                body.get("error_description").or_else(|| body.get("error")).unwrap_or(&body)
            ));
        }
        let token = body["access_token"].as_str().ok_or("token endpoint sent no access_token")?.to_string();
        let lifetime = Duration::from_secs(body["expires_in"].as_u64().unwrap_or(3600));
        let margin = (lifetime / 10).min(Duration::from_secs(30));
        *current = Some((token.clone(), Instant::now() + lifetime - margin));
        tracing::debug!(token_url = %self.cfg.token_url, "fetched an OAuth access token for {} s", lifetime.as_secs());
        Ok(token)
    }
}

/// The reqwest client with a fresh OAuth token on every request.
#[derive(Clone)]
pub(super) struct OAuthHttp {
    pub(super) inner: reqwest::Client,
    pub(super) tokens: Arc<TokenSource>,
}

impl OAuthHttp {
    async fn auth(&self, given: Option<String>) -> Option<String> {
        match self.tokens.bearer().await {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("{e}");
                given
            }
        }
    }
}

mod oauth_client {
    use super::OAuthHttp;
    use futures::stream::BoxStream;
    use http::{HeaderName, HeaderValue};
    use rmcp::model::ClientJsonRpcMessage;
    use rmcp::transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
    };
    use sse_stream::{Error as SseError, Sse};
    use std::collections::HashMap;
    use std::sync::Arc;

    impl StreamableHttpClient for OAuthHttp {
        type Error = reqwest::Error;

        async fn post_message(
            &self,
            uri: Arc<str>,
            message: ClientJsonRpcMessage,
            session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner.post_message(uri, message, session_id, auth, custom_headers).await
        }

        async fn post_message_with_response_limits(
            &self,
            uri: Arc<str>,
            message: ClientJsonRpcMessage,
            session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
            limits: StreamableHttpResponseLimits,
        ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner.post_message_with_response_limits(uri, message, session_id, auth, custom_headers, limits).await
        }

        async fn delete_session(
            &self,
            uri: Arc<str>,
            session_id: Arc<str>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> Result<(), StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner.delete_session(uri, session_id, auth, custom_headers).await
        }

        async fn get_stream(
            &self,
            uri: Arc<str>,
            session_id: Option<Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner.get_stream(uri, session_id, last_event_id, auth, custom_headers).await
        }

        async fn get_stream_with_max_sse_event_size(
            &self,
            uri: Arc<str>,
            session_id: Option<Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
            max_sse_event_size: usize,
        ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
            let auth = self.auth(auth_header).await;
            self.inner
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth,
                    custom_headers,
                    max_sse_event_size,
                )
                .await
        }
    }
}
