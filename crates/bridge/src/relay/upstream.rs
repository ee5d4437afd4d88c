//! The upstream voice APIs: each one's base URL, the operator's key and the
//! models clients may ask for, and the WebSocket connection to it.

use super::RelayError;
use super::policy;
use crate::Format;
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};
use toolhost_config::VoiceUpstream;

/// How long the relay waits for an upstream to accept a connection.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One upstream voice API, ready to connect to.
#[derive(Clone)]
pub(super) struct Upstream {
    pub(super) base: String,
    pub(super) key: String,
    pub(super) models: policy::Models,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("base", &self.base).field("key", &"<redacted>").finish()
    }
}

impl Upstream {
    pub(super) fn from_config(which: &str, cfg: &VoiceUpstream, default_env: &str) -> Result<Upstream, RelayError> {
        let url = url::Url::parse(&cfg.url)
            .map_err(|e| RelayError::Config(format!("{which}.url {:?} is not a URL: {e}", cfg.url)))?;
        if !matches!(url.scheme(), "ws" | "wss") || url.query().is_some() || url.fragment().is_some() {
            return Err(RelayError::Config(format!(
                "{which}.url must be a ws:// or wss:// base URL without query, like wss://api.openai.com/v1; got {:?}",
                cfg.url
            )));
        }
        let env = cfg.api_key_env.as_deref().unwrap_or(default_env);
        let key = std::env::var(env).ok().filter(|k| !k.is_empty()).ok_or_else(|| {
            RelayError::Config(format!(
                "{which}: the operator's API key is read from ${env} (voice.{which}.api_key_env), which is not set"
            ))
        })?;
        let models = policy::Models::from_config(cfg, which == "gemini")?;
        Ok(Upstream { base: cfg.url.trim_end_matches('/').to_string(), key, models })
    }
}

pub(super) type UpStream = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the upstream WebSocket with the operator's key.
pub(super) async fn connect(url: &str, format: Format, key: &str, max_message: usize) -> Result<UpStream, String> {
    let mut request = url.into_client_request().map_err(|e| format!("bad URL: {e}"))?;
    let value = match format {
        Format::OpenAiRealtime => format!("Bearer {key}"),
        Format::GeminiLive => key.to_string(),
    };
    let name = match format {
        Format::OpenAiRealtime => "authorization",
        Format::GeminiLive => "x-goog-api-key",
    };
    request.headers_mut().insert(name, value.parse().map_err(|_| "the API key is not a valid header value")?);
    let config = tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(r))) => Err(format!("it answered HTTP {}", r.status())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no connection within {} s", CONNECT_TIMEOUT.as_secs())),
    }
}
