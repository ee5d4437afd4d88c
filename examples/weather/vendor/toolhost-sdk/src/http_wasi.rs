//! Sending a [`Request`] through `wasi:http` (wasm32 only), on wstd's
//! runtime.
//!
//! Not through `wstd::http::Client::send`: it writes the request body and
//! waits for the response together and returns whichever fails first. When
//! the host refuses a request it drops the request, body included, so the
//! body write fails at once (`connection reset`) and the refusal, which
//! only the response future carries, is lost. Here the body is written
//! first, and a failed write defers to the response's own error.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, IncomingBody, IncomingResponse, Method, OutgoingBody, OutgoingRequest, Scheme, http_error_code,
};
use wasip2::io::streams::StreamError;
use wstd::http::Uri;
use wstd::io::AsyncOutputStream;
use wstd::runtime::AsyncPollable;

use super::error::{from_code, from_stream_error};
use super::{Error, ErrorKind, Request, Response, origin};

/// The largest chunk read from a response body at a time.
const CHUNK: u64 = 64 * 1024;

pub(super) fn send(request: Request) -> Result<Response, Error> {
    let origin = origin(&request.url);
    let outgoing = outgoing(&request, &origin)?;
    let body = outgoing.body().map_err(|()| invalid(&request, &origin, "the request body was taken"))?;
    let Request { url, body: payload, .. } = request;
    wstd::runtime::block_on(async move {
        let pending = outgoing_handler::handle(outgoing, None).map_err(|code| from_code(&code, &origin))?;
        // The body first; a failure (the host dropped a refused request, the
        // server closed early) gives way to what the response says.
        let written = write_body(body, &payload).await;
        AsyncPollable::new(pending.subscribe()).wait_for().await;
        let incoming = match pending.get() {
            Some(Ok(Ok(incoming))) => incoming,
            Some(Ok(Err(code))) => return Err(from_code(&code, &origin)),
            Some(Err(())) | None => {
                return Err(written
                    .err()
                    .unwrap_or_else(|| Error::new(ErrorKind::Network, format!("no response ({origin})"))));
            }
        };
        read_response(incoming, url, &origin).await
    })
}

/// The `outgoing-request` for `request`, headers and all.
fn outgoing(request: &Request, origin: &str) -> Result<OutgoingRequest, Error> {
    let url = &request.url[..request.url.find('#').unwrap_or(request.url.len())];
    let uri: Uri = url.parse().map_err(|e| invalid(request, origin, &format!("invalid URL: {e}")))?;
    let scheme = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http") => Scheme::Http,
        Some("https") => Scheme::Https,
        _ => return Err(invalid(request, origin, "the URL must start with http:// or https://")),
    };
    let authority = uri.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());

    let headers = Fields::new();
    for (name, value) in &request.headers {
        headers
            .append(&name.to_ascii_lowercase(), value.as_bytes())
            .map_err(|e| invalid(request, origin, &format!("header {name} is refused by wasi:http ({e:?})")))?;
    }
    if !request.body.is_empty() && request.header_value("content-length").is_none() {
        let length = request.body.len().to_string();
        headers
            .append("content-length", length.as_bytes())
            .map_err(|e| invalid(request, origin, &format!("header content-length is refused by wasi:http ({e:?})")))?;
    }
    let outgoing = OutgoingRequest::new(headers);
    let method = match request.method.as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "CONNECT" => Method::Connect,
        "OPTIONS" => Method::Options,
        "TRACE" => Method::Trace,
        "PATCH" => Method::Patch,
        other => Method::Other(other.to_string()),
    };
    outgoing.set_method(&method).map_err(|()| invalid(request, origin, "wasi:http refuses the method"))?;
    outgoing.set_scheme(Some(&scheme)).map_err(|()| invalid(request, origin, "wasi:http refuses the scheme"))?;
    outgoing
        .set_authority(Some(&authority))
        .map_err(|()| invalid(request, origin, "wasi:http refuses the host and port"))?;
    outgoing.set_path_with_query(Some(path)).map_err(|()| invalid(request, origin, "wasi:http refuses the path"))?;
    Ok(outgoing)
}

fn invalid(request: &Request, origin: &str, why: &str) -> Error {
    Error::new(ErrorKind::InvalidRequest, format!("cannot send {} {origin}: {why}", request.method))
}

/// Writes `payload` and finishes the body.
async fn write_body(body: OutgoingBody, payload: &[u8]) -> Result<(), Error> {
    let failed = |what: &str| Error::new(ErrorKind::Network, format!("sending the request body: {what}"));
    let stream = body.write().map_err(|()| failed("the body stream was taken"))?;
    let stream = AsyncOutputStream::new(stream);
    let written = if payload.is_empty() { Ok(()) } else { stream.write_all(payload).await };
    // The stream is a child of the body: gone before `finish`.
    drop(stream);
    written.map_err(|e| failed(&e.to_string()))?;
    OutgoingBody::finish(body, None).map_err(|code| from_code(&code, ""))
}

/// Reads `incoming` whole.
async fn read_response(incoming: IncomingResponse, url: String, origin: &str) -> Result<Response, Error> {
    let status = incoming.status();
    let headers = incoming
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), String::from_utf8_lossy(&value).into_owned()))
        .collect();
    let reading = |e: Error| match e.kind() {
        ErrorKind::Host => e,
        _ => Error::new(e.kind(), format!("reading the response: {e}")),
    };
    let body = incoming.consume().map_err(|()| reading(Error::new(ErrorKind::Network, "the body was taken")))?;
    let bytes = read_body(&body, origin).await.map_err(reading)?;
    // Trailers are not read.
    drop(IncomingBody::finish(body));
    drop(incoming);
    Ok(Response { status, headers, body: bytes, url })
}

async fn read_body(body: &IncomingBody, origin: &str) -> Result<Vec<u8>, Error> {
    let stream = body.stream().map_err(|()| Error::new(ErrorKind::Network, format!("no body stream ({origin})")))?;
    let mut bytes = Vec::new();
    loop {
        match stream.read(CHUNK) {
            Ok(chunk) if chunk.is_empty() => AsyncPollable::new(stream.subscribe()).wait_for().await,
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(bytes),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(match http_error_code(&e) {
                    Some(code) => from_code(&code, origin),
                    None => from_stream_error(&e.to_debug_string(), origin),
                });
            }
        }
    }
}
