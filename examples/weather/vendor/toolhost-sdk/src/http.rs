//! HTTP requests from a plugin, through `wasi:http`.
//!
//! A small blocking client for [`Tool::call`](crate::Tool::call): build a
//! request with [`get`], [`post`] or [`request`], add headers, query
//! parameters and a body, and [`send`](Request::send) it; the whole response
//! is read before `send` returns. (It runs on wstd's runtime, under
//! `wstd::runtime::block_on`: do not call it from inside another
//! `block_on`.)
//!
//! The network is a capability: the host sends a plugin's requests only to
//! the origins the operator granted it (`plugins.grants.<plugin>.http`) and
//! refuses the rest with a message saying so, which [`Error`] keeps
//! verbatim; `?` turns any [`Error`] into
//! [`ToolError::Failed`](crate::ToolError::Failed) with that message, so
//! the model and the operator read the host's own words.
//!
//! ```no_run
//! use toolhost_sdk::{ToolError, http, secret};
//!
//! #[derive(serde::Deserialize)]
//! struct Quote {
//!     price: f64,
//! }
//!
//! fn price(symbol: &str) -> Result<f64, ToolError> {
//!     let key = secret::get("api_key")?;
//!     let response = http::get("https://api.example.com/v1/quote")
//!         .query("symbol", symbol)
//!         .header("accept", "application/json")
//!         .bearer_auth(&key)
//!         .send()?
//!         .error_for_status()?; // a 4xx/5xx answer becomes an error naming the status
//!     Ok(response.json::<Quote>()?.price)
//! }
//! ```
//!
//! A POST with a JSON body:
//!
//! ```no_run
//! # use toolhost_sdk::{ToolError, http};
//! # fn post() -> Result<(), ToolError> {
//! let response = http::post("https://api.example.com/v1/notes").json(&serde_json::json!({"text": "hi"})).send()?;
//! assert!(response.is_success(), "{}", response.status());
//! # Ok(())
//! # }
//! ```
//!
//! Compiled natively (unit tests), there is no `wasi:http`: building a
//! request works (and checks the URL and headers), but every
//! [`send`](Request::send) fails with an [`ErrorKind::Unsupported`] error.
//! [`Response::new`] builds a response to test the code that reads one.

// Flat files beside this one, as every SDK file is (`toolhost new` vendors
// `sdk/src` file by file).
#[path = "http_error.rs"]
mod error;
#[cfg(target_arch = "wasm32")]
#[path = "http_wasi.rs"]
mod wasi;

use std::fmt::{self, Display};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use error::{Error, ErrorKind};

/// The WASI HTTP `error-code`, which [`Error`] translates.
#[cfg(any(target_arch = "wasm32", test))]
use wasip2::http::types::ErrorCode;

/// A `GET` request for `url` (`http://` or `https://`).
pub fn get(url: impl Into<String>) -> Request {
    Request::new("GET", url)
}

/// A `POST` request for `url`; give it a body with [`Request::body`] or
/// [`Request::json`].
pub fn post(url: impl Into<String>) -> Request {
    Request::new("POST", url)
}

/// A request with any `method` (`PUT`, `PATCH`, `DELETE`, `HEAD` ...) for
/// `url`.
pub fn request(method: &str, url: impl Into<String>) -> Request {
    Request::new(method, url)
}

/// An HTTP request being built. Nothing is sent until [`send`](Request::send).
///
/// A builder method given something invalid (a header name with a space, a
/// value with a newline, a body that fails to serialize) records the first
/// such error, and `send` returns it without sending anything.
#[derive(Clone)]
#[must_use = "a request is sent only by `send`"]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    error: Option<Error>,
}

impl Request {
    /// A request with `method` for `url`; [`get`], [`post`] and [`request`]
    /// call this. The standard methods are written in capitals whatever
    /// their case here (`get` sends `GET`).
    pub fn new(method: &str, url: impl Into<String>) -> Request {
        let url = url.into();
        let error = check_method(method).err().or_else(|| check_url(&url).err());
        let method = match STANDARD_METHODS.iter().find(|m| m.eq_ignore_ascii_case(method)) {
            Some(standard) => standard.to_string(),
            None => method.to_string(),
        };
        Request { method, url, headers: Vec::new(), body: Vec::new(), error }
    }

    /// Adds header `name: value` (another value when the name is already
    /// there). Names are case-insensitive.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Request {
        let (name, value) = (name.into(), value.into());
        if let Err(e) = check_header(&name, &value) {
            self.error.get_or_insert(e);
        }
        self.headers.push((name, value));
        self
    }

    /// Adds `authorization: Bearer <token>`.
    pub fn bearer_auth(self, token: impl Display) -> Request {
        self.header("authorization", format!("Bearer {token}"))
    }

    /// Appends query parameter `name=value` to the URL, percent-encoding
    /// both (before any `#fragment`): `.query("q", "rain in Spain")` adds
    /// `q=rain%20in%20Spain`. Numbers work as they are: `.query("latitude", 52.5)`.
    pub fn query(mut self, name: &str, value: impl Display) -> Request {
        self.url = with_query(&self.url, name, &value.to_string());
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, and `content-type:
    /// application/json` unless a content type is set already.
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Request {
        match serde_json::to_vec(value) {
            Ok(body) => {
                self.body = body;
                if self.header_value("content-type").is_none() {
                    self.headers.push(("content-type".into(), "application/json".into()));
                }
            }
            Err(e) => {
                self.error.get_or_insert(Error::new(
                    ErrorKind::InvalidRequest,
                    format!("the JSON body of {} {} does not serialize: {e}", self.method, origin(&self.url)),
                ));
            }
        }
        self
    }

    /// The method.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The URL, with the query parameters added so far.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The headers, in the order they were added.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body.
    pub fn body_bytes(&self) -> &[u8] {
        &self.body
    }

    /// Sends the request and reads the whole response.
    ///
    /// Any status is a response, 404 and 500 included: check
    /// [`Response::is_success`] or call [`Response::error_for_status`].
    ///
    /// # Errors
    ///
    /// The request was invalid ([`ErrorKind::InvalidRequest`]), the host
    /// refused it ([`ErrorKind::Host`], its message verbatim), it failed on
    /// the way ([`ErrorKind::Network`]), or there is no `wasi:http`
    /// ([`ErrorKind::Unsupported`], natively).
    pub fn send(self) -> Result<Response, Error> {
        if let Some(error) = self.error {
            return Err(error);
        }
        send(self)
    }
}

/// Header values are left out: they may hold a secret.
impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &self.headers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>())
            .field("body_len", &self.body.len())
            .finish_non_exhaustive()
    }
}

#[cfg(target_arch = "wasm32")]
fn send(request: Request) -> Result<Response, Error> {
    wasi::send(request)
}

#[cfg(not(target_arch = "wasm32"))]
fn send(request: Request) -> Result<Response, Error> {
    Err(Error::new(
        ErrorKind::Unsupported,
        format!(
            "HTTP requests work only inside a toolhost plugin (a wasm32-wasip2 component); \
             this native build has no wasi:http to send {} {}",
            request.method,
            origin(&request.url)
        ),
    ))
}

/// A response, read whole.
#[derive(Clone, PartialEq, Eq)]
pub struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    url: String,
}

impl Response {
    /// A response with `status` and `body` and no headers, for testing the
    /// code that reads responses (natively there is no other way to get
    /// one). Add headers with [`with_header`](Response::with_header).
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Response {
        Response { status, headers: Vec::new(), body: body.into(), url: String::new() }
    }

    /// This response with header `name: value` added.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The status code (200, 404 ...).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Whether the status is a success (2xx).
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// This response when its status is a success (2xx), otherwise an
    /// [`ErrorKind::Status`] error naming the status and the URL, followed
    /// by the start of the body (where APIs say what was wrong):
    /// `HTTP 401 Unauthorized from https://api.example.com/v1/quote: {"error":"bad key"}`.
    pub fn error_for_status(self) -> Result<Response, Error> {
        if self.is_success() {
            return Ok(self);
        }
        let mut message = format!("HTTP {}", self.status);
        if let Some(reason) = reason(self.status) {
            message.push(' ');
            message.push_str(reason);
        }
        if !self.url.is_empty() {
            message.push_str(" from ");
            message.push_str(without_query(&self.url));
        }
        let excerpt = excerpt(&self.body, 300);
        if !excerpt.is_empty() {
            message.push_str(": ");
            message.push_str(&excerpt);
        }
        Err(Error::status_error(self.status, message))
    }

    /// The first value of header `name` (case-insensitive); `None` when
    /// there is none.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Every header, in the order received (names in lowercase).
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The body.
    pub fn bytes(&self) -> &[u8] {
        &self.body
    }

    /// The body, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.body
    }

    /// The body as UTF-8 text.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Body`] when the body is not UTF-8.
    pub fn text(&self) -> Result<&str, Error> {
        std::str::from_utf8(&self.body).map_err(|e| {
            Error::new(
                ErrorKind::Body,
                format!("the response{} is not UTF-8 text (byte {})", self.from(), e.valid_up_to()),
            )
        })
    }

    /// The body parsed as JSON into `T`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Body`] naming where the body differs from `T`:
    /// ``the response from https://api.example.com/v1/quote is not the JSON expected: at `price`: invalid type: string "n/a", expected f64``.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let mut de = serde_json::Deserializer::from_slice(&self.body);
        let (path, error) = match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Ok(value) => match de.end() {
                Ok(()) => return Ok(value),
                Err(e) => (String::new(), e),
            },
            Err(e) => (e.path().to_string(), e.into_inner()),
        };
        let place = if path.is_empty() || path == "." { String::new() } else { format!("at `{path}`: ") };
        Err(Error::new(
            ErrorKind::Body,
            format!("the response{} is not the JSON expected: {place}{error}", self.from()),
        ))
    }

    /// The URL the response answers (without its query); empty for one
    /// made with [`Response::new`].
    pub fn url(&self) -> &str {
        without_query(&self.url)
    }

    /// ` from URL`, or nothing.
    fn from(&self) -> String {
        if self.url.is_empty() { String::new() } else { format!(" from {}", without_query(&self.url)) }
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("url", &without_query(&self.url))
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// `scheme://authority` of `url`, without any user info: how errors name
/// where a request went.
fn origin(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    format!("{}://{authority}", scheme.to_ascii_lowercase())
}

/// `url` without its query and fragment (query parameters may carry keys).
fn without_query(url: &str) -> &str {
    &url[..url.find(['?', '#']).unwrap_or(url.len())]
}

/// The start of `body` as one line of text, at most `max` characters.
fn excerpt(body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let words: Vec<&str> = text.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= max {
        line
    } else {
        let mut cut: String = line.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

/// The reason phrase of common status codes.
fn reason(status: u16) -> Option<&'static str> {
    Some(match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => return None,
    })
}

/// Checks that `url` is an absolute `http://` or `https://` URL with a host
/// and no whitespace or control characters. (The rest is checked when the
/// request is sent.)
fn check_url(url: &str) -> Result<(), Error> {
    let invalid = |why: &str| Err(Error::new(ErrorKind::InvalidRequest, format!("invalid URL {url:?}: {why}")));
    let Some((scheme, rest)) = url.split_once("://") else {
        return invalid("it must start with http:// or https://");
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return invalid("it must start with http:// or https://");
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority.contains('@') {
        return invalid("it holds credentials; send them in a header (`bearer_auth`, `header`)");
    }
    if authority.is_empty() || authority.starts_with(':') {
        return invalid("it has no host");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return invalid("it contains whitespace or control characters (percent-encode them, or use `query`)");
    }
    Ok(())
}

/// The methods of RFC 9110 and PATCH.
const STANDARD_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];

/// Methods are HTTP tokens (`GET`, `PATCH` ...).
fn check_method(method: &str) -> Result<(), Error> {
    if !method.is_empty() && method.bytes().all(is_token_byte) {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::InvalidRequest, format!("invalid HTTP method {method:?}")))
    }
}

/// Header names are HTTP tokens; values hold no control characters but tab.
fn check_header(name: &str, value: &str) -> Result<(), Error> {
    if name.is_empty() || !name.bytes().all(is_token_byte) {
        return Err(Error::new(ErrorKind::InvalidRequest, format!("invalid header name {name:?}")));
    }
    if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        // The value is not shown: it may be a secret.
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!("the value of header {name} contains a control character (a newline?)"),
        ));
    }
    Ok(())
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `url` with `name=value` appended to its query, both percent-encoded,
/// before any fragment.
fn with_query(url: &str, name: &str, value: &str) -> String {
    let (base, fragment) = match url.find('#') {
        Some(i) => (&url[..i], &url[i..]),
        None => (url, ""),
    };
    let separator = match base.find('?') {
        None => "?",
        Some(i) if i + 1 == base.len() || base.ends_with('&') => "",
        Some(_) => "&",
    };
    format!("{base}{separator}{}={}{fragment}", encode(name), encode(value))
}

/// Percent-encodes everything but unreserved characters and `,:/@`, which
/// a query may hold as they are.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~,:/@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolError;

    #[test]
    fn requests_are_built_with_query_headers_and_bodies() {
        let r = get("https://api.example.com/v1/forecast")
            .query("latitude", 52.52)
            .query("longitude", -13.4)
            .query("current", "temperature_2m,wind_speed_10m")
            .query("q", "rain in Spain & more=1%")
            .header("Accept", "application/json")
            .bearer_auth("sk-123");
        assert_eq!(r.method(), "GET");
        assert_eq!(
            r.url(),
            "https://api.example.com/v1/forecast?latitude=52.52&longitude=-13.4\
             &current=temperature_2m,wind_speed_10m&q=rain%20in%20Spain%20%26%20more%3D1%25"
        );
        assert_eq!(r.header_value("accept"), Some("application/json"));
        assert_eq!(r.header_value("Authorization"), Some("Bearer sk-123"));
        assert_eq!(r.headers().count(), 2);
        assert!(r.body_bytes().is_empty());
        assert!(!format!("{r:?}").contains("sk-123"), "Debug hides header values: {r:?}");

        let r = post("http://127.0.0.1:8080/notes").json(&serde_json::json!({"text": "hi"}));
        assert_eq!(r.body_bytes(), br#"{"text":"hi"}"#);
        assert_eq!(r.header_value("content-type"), Some("application/json"));
        let r = request("PUT", "http://h/x").header("content-type", "application/merge-patch+json").json(&1);
        assert_eq!(r.headers().collect::<Vec<_>>(), [("content-type", "application/merge-patch+json")]);
        assert_eq!(request("DELETE", "http://h/x").body("raw").body_bytes(), b"raw");
        assert_eq!(request("patch", "http://h/x").method(), "PATCH");
        assert_eq!(request("PROPFIND", "http://h/x").method(), "PROPFIND");
    }

    #[test]
    fn query_parameters_join_an_existing_query_and_keep_the_fragment() {
        assert_eq!(with_query("http://h/p?a=1", "b", "2"), "http://h/p?a=1&b=2");
        assert_eq!(with_query("http://h/p?", "b", "2"), "http://h/p?b=2");
        assert_eq!(with_query("http://h/p?a=1&", "b", "2"), "http://h/p?a=1&b=2");
        assert_eq!(with_query("http://h/p#top", "b", "x y"), "http://h/p?b=x%20y#top");
        assert_eq!(with_query("http://h", "é", "ü"), "http://h?%C3%A9=%C3%BC");
    }

    #[test]
    fn invalid_requests_fail_at_send_without_sending() {
        for (r, expected) in [
            (get("ftp://h/x"), "invalid URL \"ftp://h/x\": it must start with http:// or https://"),
            (get("api.example.com/x"), "invalid URL \"api.example.com/x\": it must start with http:// or https://"),
            (get("https:///x"), "invalid URL \"https:///x\": it has no host"),
            (
                get("https://u:p@h/x"),
                "invalid URL \"https://u:p@h/x\": it holds credentials; send them in a header (`bearer_auth`, `header`)",
            ),
            (
                get("https://h/a b"),
                "invalid URL \"https://h/a b\": it contains whitespace or control characters (percent-encode them, or use `query`)",
            ),
            (request("GE T", "http://h/"), "invalid HTTP method \"GE T\""),
            (get("http://h/").header("bad name", "v"), "invalid header name \"bad name\""),
            (
                get("http://h/").header("authorization", "Bearer sk\r\nx: y").header("bad name", "v"),
                "the value of header authorization contains a control character (a newline?)",
            ),
        ] {
            let err = r.send().unwrap_err();
            assert_eq!((err.kind(), err.message()), (ErrorKind::InvalidRequest, expected));
        }
        let err = post("http://h/").json(&std::collections::HashMap::from([(vec![1u8], 1)])).send().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        assert!(err.message().starts_with("the JSON body of POST http://h does not serialize: "), "{err}");
    }

    #[test]
    fn natively_sending_says_http_needs_a_plugin() {
        let err = get("https://api.example.com:8443/v1/x?key=s3cret").send().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(
            err.to_string(),
            "HTTP requests work only inside a toolhost plugin (a wasm32-wasip2 component); \
             this native build has no wasi:http to send GET https://api.example.com:8443"
        );
        let ToolError::Failed(m) = ToolError::from(err) else { panic!() };
        assert!(m.starts_with("HTTP requests work only inside a toolhost plugin"), "{m}");
    }

    #[test]
    fn responses_are_read_as_text_json_or_bytes() {
        let r = Response::new(200, r#"{"current":{"temperature_2m":12.5}}"#)
            .with_header("Content-Type", "application/json");
        assert!(r.is_success());
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("x-missing"), None);
        assert_eq!(r.text().unwrap(), r#"{"current":{"temperature_2m":12.5}}"#);
        let v: serde_json::Value = r.json().unwrap();
        assert_eq!(v["current"]["temperature_2m"], 12.5);
        assert_eq!(r.bytes().len(), 35);
        assert_eq!(r.clone().into_bytes().len(), 35);
        assert_eq!(r.clone().error_for_status().unwrap(), r);

        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Current {
            current: Temp,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Temp {
            temperature_2m: f64,
        }
        let err = Response::new(200, r#"{"current":{"temperature_2m":"warm"}}"#).json::<Current>().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Body);
        assert!(
            err.message().starts_with(
                "the response is not the JSON expected: at `current.temperature_2m`: invalid type: string \"warm\""
            ),
            "{err}"
        );
        let err = Response::new(200, "{} x").json::<serde_json::Value>().unwrap_err();
        assert!(err.message().contains("trailing characters"), "{err}");
        let mut r = Response::new(200, vec![b'a', 0xff]);
        r.url = "https://h/p?k=secret".into();
        assert_eq!(r.text().unwrap_err().message(), "the response from https://h/p is not UTF-8 text (byte 1)");
        assert_eq!(r.url(), "https://h/p");
    }

    #[test]
    fn error_for_status_names_the_status_the_url_and_the_start_of_the_body() {
        let mut r = Response::new(401, "{\"error\": true,\n  \"reason\": \"bad key\"}");
        r.url = "https://api.example.com/v1/forecast?latitude=1".into();
        let err = r.error_for_status().unwrap_err();
        assert_eq!((err.kind(), err.status()), (ErrorKind::Status, Some(401)));
        assert_eq!(
            err.to_string(),
            "HTTP 401 Unauthorized from https://api.example.com/v1/forecast: {\"error\": true, \"reason\": \"bad key\"}"
        );
        assert_eq!(Response::new(599, "").error_for_status().unwrap_err().to_string(), "HTTP 599");
        let long = Response::new(500, "x".repeat(1000)).error_for_status().unwrap_err();
        assert_eq!(long.message().chars().count(), "HTTP 500 Internal Server Error: ".len() + 301);
        assert!(Response::new(204, "").error_for_status().is_ok());
        assert!(Response::new(302, "").error_for_status().is_err());
    }

    #[test]
    fn origins_leave_out_paths_queries_and_user_info() {
        assert_eq!(origin("HTTPS://u:p@h.example:8443/x?y#z"), "https://h.example:8443");
        assert_eq!(origin("http://h?x"), "http://h");
        assert_eq!(origin("nonsense"), "nonsense");
        assert_eq!(without_query("http://h/p?k=v#f"), "http://h/p");
    }
}
