//! A plugin that sends HTTP requests through `wasi:http` (it imports
//! `wasi:http/outgoing-handler`). toolhost must refuse to load it unless
//! the operator grants `http`, and then let its requests reach only the
//! granted origins, the addresses they resolve to checked, bounded per
//! call.
//!
//! `hoard {"count"?, "bytes"?}` makes fields resources with one large
//! header each and keeps them (hostile: host memory); `burst {"url", "n"}`
//! starts `n` GETs before waiting for any (lookups in flight).
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

#[derive(Deserialize, JsonSchema)]
struct HoardArgs {
    /// How many fields resources to make and keep (default: until the host stops it).
    count: Option<u32>,
    /// Bytes of the one header each holds (default 120 KiB).
    bytes: Option<u32>,
}

/// Hostile: makes fields resources in a loop, one large header each, and
/// keeps them all (the host holds their memory, not the guest).
struct Hoard;

impl Tool for Hoard {
    type Args = HoardArgs;
    const NAME: &'static str = "hoard";
    const DESCRIPTION: &'static str = "Make fields resources with one large header each, and keep them.";
    const MAX_MS: u32 = 5000;

    fn call(a: HoardArgs) -> Result<Output, ToolError> {
        let value = vec![b'v'; a.bytes.unwrap_or(120 << 10) as usize];
        let mut kept = Vec::new();
        let mut refused = 0u32;
        for _ in 0..a.count.unwrap_or(u32::MAX) {
            let f = Fields::new();
            if f.append("x-a", &value).is_err() {
                refused += 1;
            }
            kept.push(f);
        }
        Ok(Output::text(format!("kept {} fields; {refused} headers refused", kept.len())))
    }
}

#[derive(Deserialize, JsonSchema)]
struct BurstArgs {
    /// `http://` or `https://` URL.
    url: String,
    /// How many requests to have in flight at once.
    n: u32,
}

/// Sends `n` GETs at once (each started before any is waited for) and
/// reports how each ended: for names whose lookups never end.
struct Burst;

impl Tool for Burst {
    type Args = BurstArgs;
    const NAME: &'static str = "burst";
    const DESCRIPTION: &'static str = "Send n GETs at once and report how each ended.";
    const MAX_MS: u32 = 2000;

    fn call(a: BurstArgs) -> Result<Output, ToolError> {
        let (scheme, rest) = a.url.split_once("://").ok_or_else(|| ToolError::failed("not a URL"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let mut futures = Vec::new();
        let mut outcomes = Vec::new();
        for _ in 0..a.n {
            let request = OutgoingRequest::new(Fields::new());
            let scheme = if scheme == "https" { Scheme::Https } else { Scheme::Http };
            let _ = request.set_scheme(Some(&scheme));
            let _ = request.set_authority(Some(authority));
            let _ = request.set_path_with_query(Some(path));
            match outgoing_handler::handle(request, None) {
                Ok(f) => futures.push(f),
                Err(e) => outcomes.push(format!("{e:?}")),
            }
        }
        for f in futures {
            f.subscribe().block();
            outcomes.push(match f.get() {
                Some(Ok(Ok(r))) => format!("status {}", r.status()),
                Some(Ok(Err(e))) => format!("{e:?}"),
                _ => "no response".into(),
            });
        }
        Ok(Output::text(serde_json::to_string(&outcomes).unwrap_or_default()))
    }
}

toolhost_sdk::plugin!(Get, Hoard, Burst);
