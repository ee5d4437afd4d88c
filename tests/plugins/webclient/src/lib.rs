//! A plugin that sends HTTP requests through `wasi:http` (it imports
//! `wasi:http/outgoing-handler`). toolhost must refuse to load it unless
//! the operator grants `http`, and then let its requests reach only the
//! granted origins, the addresses they resolve to checked, bounded per
//! call.
//!
//! `get {"url", "times"?, "follow"?, "bearer"?}` sends `times` GETs
//! (default 1) and answers `{"status", "bytes", "body", "location"}` of the
//! last, following up to `follow` redirects; any failure is its error
//! text (the WASI HTTP error code and message), as a `failed` tool error.

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_sdk::{Output, Tool, ToolError};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};

#[derive(Deserialize, JsonSchema)]
struct Args {
    /// `http://` or `https://` URL.
    url: String,
    /// How many times to send it (default 1).
    times: Option<u32>,
    /// Redirects to follow (default 0).
    follow: Option<u32>,
    /// A bearer token to send.
    bearer: Option<String>,
}

struct Answer {
    status: u16,
    body: Vec<u8>,
    location: Option<String>,
}

fn get(url: &str, bearer: Option<&str>) -> Result<Answer, String> {
    let (scheme, rest) = url.split_once("://").ok_or("not a URL")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let headers = Fields::new();
    if let Some(token) = bearer {
        headers.append("authorization", format!("Bearer {token}").as_bytes()).map_err(|e| format!("{e:?}"))?;
    }
    let request = OutgoingRequest::new(headers);
    request.set_method(&Method::Get).map_err(|()| "method")?;
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    request.set_scheme(Some(&scheme)).map_err(|()| "scheme")?;
    request.set_authority(Some(authority)).map_err(|()| "authority")?;
    request.set_path_with_query(Some(path)).map_err(|()| "path")?;
    let future = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    future.subscribe().block();
    let response = future.get().ok_or("no response")?.map_err(|()| "taken twice")?.map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let location = response.headers().get("location").first().map(|v| String::from_utf8_lossy(v).into_owned());
    let body = response.consume().map_err(|()| "no body")?;
    let stream = body.stream().map_err(|()| "no stream")?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(wasip2::io::streams::StreamError::Closed) => break,
            Err(wasip2::io::streams::StreamError::LastOperationFailed(e)) => {
                let code = wasip2::http::types::http_error_code(&e);
                return Err(format!(
                    "reading the body: {:?}",
                    code.map_or_else(|| e.to_debug_string(), |c| format!("{c:?}"))
                ));
            }
        }
    }
    drop(stream);
    Ok(Answer { status, body: bytes, location })
}

struct Get;

impl Tool for Get {
    type Args = Args;
    const NAME: &'static str = "get";
    const DESCRIPTION: &'static str = "GET a URL through wasi:http, `times` times, following up to `follow` redirects.";
    const MAX_MS: u32 = 5000;

    fn call(a: Args) -> Result<Output, ToolError> {
        let mut last = None;
        for _ in 0..a.times.unwrap_or(1).max(1) {
            let mut url = a.url.clone();
            let mut answer = get(&url, a.bearer.as_deref()).map_err(ToolError::failed)?;
            for _ in 0..a.follow.unwrap_or(0) {
                match (&answer.location, answer.status) {
                    (Some(next), 301 | 302 | 303 | 307 | 308) => {
                        url = next.clone();
                        answer = get(&url, a.bearer.as_deref()).map_err(ToolError::failed)?;
                    }
                    _ => break,
                }
            }
            last = Some(answer);
        }
        let a = last.expect("at least one request");
        let text = String::from_utf8_lossy(&a.body);
        Ok(Output::text(
            serde_json::json!({
                "status": a.status,
                "bytes": a.body.len(),
                "body": text.chars().take(2000).collect::<String>(),
                "location": a.location,
            })
            .to_string(),
        ))
    }
}

toolhost_sdk::plugin!(Get);
