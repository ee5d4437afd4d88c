//! [`OAuthHttp`] as rmcp's streamable HTTP client: the token on every
//! request, one retry with a fresh (or better) token on a refusal.

use super::{OAuthHttp, Refusal};
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, RequestId};

/// The id of a request (none for a notification or a response).
fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        rmcp::model::JsonRpcMessage::Request(r) => Some(r.id.clone()),
        _ => None,
    }
}
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};
use std::collections::HashMap;
use std::sync::Arc;

type Error = StreamableHttpError<reqwest::Error>;

/// A token failure as a transport error (the message names no secret).
fn oauth_error(e: String) -> Error {
    StreamableHttpError::Io(std::io::Error::other(format!("OAuth: {e}")))
}

/// The refusal in a failed request, with its challenge: a `401` (with
/// or without `WWW-Authenticate`) or a `403 insufficient_scope`.
fn refusal(e: &Error) -> Option<(Refusal, String)> {
    match e {
        StreamableHttpError::AuthRequired(a) => Some((Refusal::Unauthorized, a.www_authenticate_header.clone())),
        StreamableHttpError::InsufficientScope(s)
            if s.www_authenticate_header.to_ascii_lowercase().contains("insufficient_scope") =>
        {
            Some((Refusal::InsufficientScope, s.www_authenticate_header.clone()))
        }
        StreamableHttpError::Client(c) if c.status() == Some(reqwest::StatusCode::UNAUTHORIZED) => {
            Some((Refusal::Unauthorized, String::new()))
        }
        _ => None,
    }
}

impl OAuthHttp {
    async fn token(&self, uri: &str) -> Result<Option<String>, Error> {
        self.tokens.current(uri).await.map_err(oauth_error)
    }

    /// Runs `send` with the current token; after a refusal, once more
    /// with the token the refusal calls for. `id`: the request's, whose
    /// call's client can be shown a sign-in URL.
    async fn with_token<T, F, Fut>(&self, uri: &Arc<str>, id: Option<&RequestId>, send: F) -> Result<T, Error>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let token = self.token(uri).await?;
        let first = send(token.clone()).await;
        let Err(e) = &first else { return first };
        let Some((why, challenge)) = refusal(e) else { return first };
        if !self.tokens.protects(uri) {
            return first;
        }
        let show = match (why, id, &self.shown_by) {
            (Refusal::InsufficientScope, Some(id), Some(shown_by)) => shown_by(id),
            _ => None,
        };
        let token = self.tokens.after_refusal(token.as_deref(), &challenge, why, show).await.map_err(oauth_error)?;
        send(Some(token)).await
    }
}

impl StreamableHttpClient for OAuthHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let id = request_id(&message);
        self.with_token(&uri, id.as_ref(), |token| {
            self.inner.post_message(uri.clone(), message.clone(), session_id.clone(), token, custom_headers.clone())
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let id = request_id(&message);
        self.with_token(&uri, id.as_ref(), |token| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let token = self.token(&uri).await?;
        self.inner.delete_session(uri, session_id, token, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.with_token(&uri, None, |token| {
            self.inner.get_stream(uri.clone(), session_id.clone(), last_event_id.clone(), token, custom_headers.clone())
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.with_token(&uri, None, |token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
