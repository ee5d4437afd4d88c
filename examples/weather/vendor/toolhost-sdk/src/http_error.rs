//! [`Error`]: why a request failed, and how WASI HTTP error codes read.

use std::fmt;

/// Why an HTTP request failed.
///
/// It implements [`std::error::Error`], so `?` in a
/// [`Tool::call`](crate::Tool::call) turns it into
/// [`ToolError::Failed`](crate::ToolError::Failed) carrying its message.
///
/// The message is written for the model and the operator. When the host
/// stopped the request and said why (a WASI HTTP `internal-error` with a
/// message: an origin the plugin was not granted, too many requests in one
/// call ...), the message is the host's, verbatim, and the kind is
/// [`ErrorKind::Host`]:
///
/// ```text
/// toolhost: https://api.example.test:8443 is not granted to plugin weather (plugins.grants.weather.http lists the origins it may reach)
/// ```
///
/// Other WASI HTTP error codes read as words naming the origin, such as
/// `connection refused (https://api.example.test:8443)` or
/// `DNS timeout (https://api.example.test)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    status: Option<u16>,
}

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The host stopped the request and said why (a WASI HTTP
    /// `internal-error` with a message): the origin is not granted, the
    /// call sent too many requests, the address is one the host refuses, the
    /// response was larger than allowed ... The message is the host's.
    Host,
    /// The request did not complete: DNS, connection, TLS, timeouts, a
    /// protocol error (any other WASI HTTP error code).
    Network,
    /// The request could not be built: a bad URL, method, header or body.
    InvalidRequest,
    /// The server answered with a status that is not a success
    /// ([`Response::error_for_status`](super::Response::error_for_status)).
    Status,
    /// The response body is not what was asked for: not UTF-8 text, not the
    /// JSON expected.
    Body,
    /// There is no `wasi:http` here: the code runs natively (a unit test),
    /// not inside a toolhost plugin.
    Unsupported,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), status: None }
    }

    pub(crate) fn status_error(status: u16, message: impl Into<String>) -> Error {
        Error { kind: ErrorKind::Status, message: message.into(), status: Some(status) }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, as [`Display`](fmt::Display) shows it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The response status, for an [`ErrorKind::Status`] error.
    pub fn status(&self) -> Option<u16> {
        self.status
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(any(target_arch = "wasm32", test))]
/// The words for a WASI HTTP `error-code` case, by its Rust (CamelCase)
/// name, as the bindings and their `Debug` output spell it.
fn case_words(case: &str) -> Option<&'static str> {
    Some(match case {
        "DnsTimeout" => "DNS timeout",
        "DnsError" => "DNS error",
        "DestinationNotFound" => "destination not found",
        "DestinationUnavailable" => "destination unavailable",
        "DestinationIpProhibited" => "destination IP address prohibited",
        "DestinationIpUnroutable" => "destination IP address unroutable",
        "ConnectionRefused" => "connection refused",
        "ConnectionTerminated" => "connection terminated",
        "ConnectionTimeout" => "connection timeout",
        "ConnectionReadTimeout" => "connection read timeout",
        "ConnectionWriteTimeout" => "connection write timeout",
        "ConnectionLimitReached" => "connection limit reached",
        "TlsProtocolError" => "TLS protocol error",
        "TlsCertificateError" => "TLS certificate error",
        "TlsAlertReceived" => "TLS alert received",
        "HttpRequestDenied" => "HTTP request denied",
        "HttpRequestLengthRequired" => "HTTP request length required",
        "HttpRequestBodySize" => "HTTP request body too large",
        "HttpRequestMethodInvalid" => "HTTP request method invalid",
        "HttpRequestUriInvalid" => "HTTP request URI invalid",
        "HttpRequestUriTooLong" => "HTTP request URI too long",
        "HttpRequestHeaderSectionSize" => "HTTP request header section too large",
        "HttpRequestHeaderSize" => "HTTP request header too large",
        "HttpRequestTrailerSectionSize" => "HTTP request trailer section too large",
        "HttpRequestTrailerSize" => "HTTP request trailer too large",
        "HttpResponseIncomplete" => "HTTP response incomplete",
        "HttpResponseHeaderSectionSize" => "HTTP response header section too large",
        "HttpResponseHeaderSize" => "HTTP response header too large",
        "HttpResponseBodySize" => "HTTP response body too large",
        "HttpResponseTrailerSectionSize" => "HTTP response trailer section too large",
        "HttpResponseTrailerSize" => "HTTP response trailer too large",
        "HttpResponseTransferCoding" => "HTTP response transfer-coding error",
        "HttpResponseContentCoding" => "HTTP response content-coding error",
        "HttpResponseTimeout" => "HTTP response timeout",
        "HttpUpgradeFailed" => "HTTP upgrade failed",
        "HttpProtocolError" => "HTTP protocol error",
        "LoopDetected" => "loop detected",
        "ConfigurationError" => "configuration error",
        "InternalError" => "internal error",
        _ => return None,
    })
}

#[cfg(any(target_arch = "wasm32", test))]
/// `words (origin)`, or `words` alone when the origin is unknown.
fn at_origin(words: &str, origin: &str) -> String {
    if origin.is_empty() { words.to_string() } else { format!("{words} ({origin})") }
}

/// The [`Error`] for a WASI HTTP `error-code` met reaching `origin`
/// (`https://host:port`): the host's message verbatim for
/// `internal-error(some(message))`, words naming the origin otherwise.
#[cfg(any(target_arch = "wasm32", test))]
pub(crate) fn from_code(code: &super::ErrorCode, origin: &str) -> Error {
    use super::ErrorCode as C;

    let case = format!("{code:?}");
    let case = case.trim_start_matches("ErrorCode::");
    let case = &case[..case.find('(').unwrap_or(case.len())];
    let words = case_words(case).map_or_else(|| case.to_string(), str::to_string);
    let bytes = |n: Option<u64>| n.map_or(String::new(), |n| format!(", {n} bytes"));
    let field = |name: &Option<String>, size: Option<u32>| {
        let mut s = String::new();
        if let Some(name) = name {
            s.push_str(&format!(", field {name}"));
        }
        if let Some(size) = size {
            s.push_str(&format!(", {size} bytes"));
        }
        s
    };
    let detail = match code {
        C::InternalError(Some(message)) => return Error::new(ErrorKind::Host, message.clone()),
        C::DnsError(p) => {
            let mut s = String::new();
            if let Some(rcode) = &p.rcode {
                s.push_str(&format!(", rcode {rcode}"));
            }
            if let Some(info) = p.info_code {
                s.push_str(&format!(", info code {info}"));
            }
            s
        }
        C::TlsAlertReceived(p) => {
            let mut s = String::new();
            if let Some(id) = p.alert_id {
                s.push_str(&format!(", alert {id}"));
            }
            if let Some(m) = &p.alert_message {
                s.push_str(&format!(", {m}"));
            }
            s
        }
        C::HttpRequestBodySize(n) | C::HttpResponseBodySize(n) => bytes(*n),
        C::HttpRequestHeaderSectionSize(n)
        | C::HttpRequestTrailerSectionSize(n)
        | C::HttpResponseHeaderSectionSize(n)
        | C::HttpResponseTrailerSectionSize(n) => bytes(n.map(u64::from)),
        C::HttpRequestHeaderSize(Some(p)) => field(&p.field_name, p.field_size),
        C::HttpRequestTrailerSize(p) | C::HttpResponseHeaderSize(p) | C::HttpResponseTrailerSize(p) => {
            field(&p.field_name, p.field_size)
        }
        C::HttpResponseTransferCoding(Some(m)) | C::HttpResponseContentCoding(Some(m)) => format!(", {m}"),
        _ => String::new(),
    };
    let words = if detail.is_empty() { words } else { format!("{words}{detail}") };
    Error::new(ErrorKind::Network, at_origin(&words, origin))
}

#[cfg(any(target_arch = "wasm32", test))]
/// The [`Error`] for the failure of a response body stream, given as the
/// text of `wasi:io/error.to-debug-string`: `http-error-code` gives no code
/// for it under wasmtime 48, which keeps its own error type there and
/// writes that type's `Display` (`HTTP response body size exceeds limit:
/// 8388608 bytes`, `internal error: <message>`); a host that stores the WIT
/// code writes its `Debug` form
/// (`ErrorCode::HttpResponseBodySize(Some(1048576))`). The message of an
/// internal error is the host's, kept verbatim; other texts read as words
/// naming the origin. Only the first line counts (a backtrace may follow).
pub(crate) fn from_stream_error(text: &str, origin: &str) -> Error {
    let line = text.lines().next().unwrap_or("").trim();
    if let Some(message) = line.strip_prefix("internal error: ") {
        return Error::new(ErrorKind::Host, message);
    }
    if let Some(error) = from_debug_text(line, origin) {
        return error;
    }
    let line = if line.is_empty() { "the response body stream failed" } else { line };
    Error::new(ErrorKind::Network, at_origin(line, origin))
}

#[cfg(any(target_arch = "wasm32", test))]
/// The [`Error`] for the `Debug` form of a WASI HTTP error code
/// (`ErrorCode::HttpResponseBodySize(Some(1048576))`); `None` when `line`
/// is not one.
fn from_debug_text(line: &str, origin: &str) -> Option<Error> {
    let rest = line.strip_prefix("ErrorCode::").unwrap_or(line);
    let (case, payload) = match rest.find('(') {
        Some(i) if rest.ends_with(')') => (&rest[..i], Some(&rest[i + 1..rest.len() - 1])),
        Some(_) => return None,
        None => (rest, None),
    };
    let words = case_words(case)?;
    // `Some("...")`, `Some(12)` or `None`; anything else shown as it is.
    let payload = payload.map(|p| match p.strip_prefix("Some(").and_then(|p| p.strip_suffix(')')) {
        Some(inner) => match inner.strip_prefix('"').and_then(|i| i.strip_suffix('"')) {
            Some(quoted) => Payload::Text(unescape(quoted)),
            None if inner.bytes().all(|b| b.is_ascii_digit()) && !inner.is_empty() => {
                Payload::Number(inner.to_string())
            }
            None => Payload::Raw(inner.to_string()),
        },
        None if p == "None" => Payload::Nothing,
        None => Payload::Raw(p.to_string()),
    });
    let words = match payload {
        Some(Payload::Text(message)) if case == "InternalError" => return Some(Error::new(ErrorKind::Host, message)),
        Some(Payload::Text(m) | Payload::Raw(m)) => format!("{words}, {m}"),
        Some(Payload::Number(n)) if case.ends_with("Size") => format!("{words}, {n} bytes"),
        Some(Payload::Number(n)) => format!("{words}, {n}"),
        Some(Payload::Nothing) | None => words.to_string(),
    };
    Some(Error::new(ErrorKind::Network, at_origin(&words, origin)))
}

#[cfg(any(target_arch = "wasm32", test))]
enum Payload {
    Text(String),
    Number(String),
    Raw(String),
    Nothing,
}

#[cfg(any(target_arch = "wasm32", test))]
/// Undoes Rust's `Debug` escaping of a string's contents.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('0') => out.push('\0'),
            Some('u') => {
                // \u{1f600}
                let rest: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let hex = rest.trim_start_matches('{');
                match u32::from_str_radix(hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => out.push_str(&format!("\\u{rest}}}")),
                }
            }
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ErrorCode;
    use wasip2::http::types::{DnsErrorPayload, FieldSizePayload, TlsAlertReceivedPayload};

    const REFUSAL: &str = "toolhost: https://api.example.test:8443 is not granted to plugin weather \
                           (plugins.grants.weather.http lists the origins it may reach)";

    #[test]
    fn the_hosts_words_are_kept_verbatim() {
        let err = from_code(&ErrorCode::InternalError(Some(REFUSAL.into())), "https://api.example.test:8443");
        assert_eq!(err.kind(), ErrorKind::Host);
        assert_eq!(err.to_string(), REFUSAL);
        assert_eq!(crate::ToolError::from(err), crate::ToolError::Failed(REFUSAL.into()));

        let quoted = "a \"quoted\" path C:\\x, a tab\there and \u{e9}";
        let err = from_code(&ErrorCode::InternalError(Some(quoted.into())), "");
        assert_eq!(err.to_string(), quoted);
        // The same message, met only as the text of a body stream's error:
        // wasmtime 48's Display of its own error, or the WIT code's Debug.
        let err = from_stream_error(&format!("internal error: {REFUSAL}\n\nStack backtrace:\n  0: x"), "https://h");
        assert_eq!((err.kind(), err.to_string()), (ErrorKind::Host, REFUSAL.to_string()));
        let debug = format!("{:?}", ErrorCode::InternalError(Some(quoted.into())));
        let err = from_stream_error(&debug, "https://h");
        assert_eq!((err.kind(), err.to_string()), (ErrorKind::Host, quoted.to_string()));
    }

    #[test]
    fn other_codes_read_as_words_naming_the_origin() {
        let origin = "https://api.example.test:8443";
        for (code, words) in [
            (ErrorCode::ConnectionRefused, "connection refused (https://api.example.test:8443)"),
            (ErrorCode::DnsTimeout, "DNS timeout (https://api.example.test:8443)"),
            (ErrorCode::InternalError(None), "internal error (https://api.example.test:8443)"),
            (ErrorCode::TlsCertificateError, "TLS certificate error (https://api.example.test:8443)"),
            (
                ErrorCode::DnsError(DnsErrorPayload { rcode: Some("NXDOMAIN".into()), info_code: None }),
                "DNS error, rcode NXDOMAIN (https://api.example.test:8443)",
            ),
            (
                ErrorCode::TlsAlertReceived(TlsAlertReceivedPayload {
                    alert_id: Some(40),
                    alert_message: Some("handshake failure".into()),
                }),
                "TLS alert received, alert 40, handshake failure (https://api.example.test:8443)",
            ),
            (
                ErrorCode::HttpResponseBodySize(Some(1 << 20)),
                "HTTP response body too large, 1048576 bytes (https://api.example.test:8443)",
            ),
            (
                ErrorCode::HttpResponseHeaderSize(FieldSizePayload {
                    field_name: Some("set-cookie".into()),
                    field_size: None,
                }),
                "HTTP response header too large, field set-cookie (https://api.example.test:8443)",
            ),
            (ErrorCode::HttpRequestUriInvalid, "HTTP request URI invalid (https://api.example.test:8443)"),
        ] {
            let err = from_code(&code, origin);
            assert_eq!((err.kind(), err.to_string().as_str()), (ErrorKind::Network, words), "{code:?}");
        }
        assert_eq!(from_code(&ErrorCode::ConnectionTimeout, "").to_string(), "connection timeout");
    }

    #[test]
    fn debug_texts_of_codes_read_the_same() {
        let origin = "http://127.0.0.1:9";
        for code in [
            ErrorCode::ConnectionTerminated,
            ErrorCode::HttpResponseTimeout,
            ErrorCode::HttpResponseBodySize(Some(1024)),
            ErrorCode::HttpResponseBodySize(None),
            ErrorCode::HttpResponseContentCoding(Some("gzip".into())),
        ] {
            let debug = format!("{code:?}");
            assert_eq!(from_stream_error(&debug, origin), from_code(&code, origin), "{debug}");
        }
        assert_eq!(
            from_debug_text("ErrorCode::HttpResponseTrailerSize(FieldSizePayload { x })", "").unwrap().message(),
            "HTTP response trailer too large, FieldSizePayload { x }"
        );
        assert_eq!(from_debug_text("connection reset by peer", origin), None);
        assert_eq!(from_debug_text("ErrorCode::NoSuchCase", origin), None);
        assert_eq!(from_debug_text("", origin), None);
    }

    #[test]
    fn body_stream_errors_read_as_the_hosts_text_naming_the_origin() {
        let origin = "http://127.0.0.1:9";
        // What wasmtime 48 gives for the host's response-size limit.
        let err = from_stream_error("HTTP response body size exceeds limit: 8388608 bytes", origin);
        assert_eq!(err.kind(), ErrorKind::Network);
        assert_eq!(err.message(), "HTTP response body size exceeds limit: 8388608 bytes (http://127.0.0.1:9)");
        let err = from_stream_error("ErrorCode::HttpResponseTimeout\nStack backtrace:", origin);
        assert_eq!(err.message(), "HTTP response timeout (http://127.0.0.1:9)");
        assert_eq!(from_stream_error("", "").message(), "the response body stream failed");
    }

    #[test]
    fn unescape_undoes_debug() {
        for s in ["plain", "q\"uote", "back\\slash", "nl\nx", "tab\t", "nul\0", "\u{1f600} \u{7f}", "é"] {
            let debug = format!("{s:?}");
            assert_eq!(unescape(&debug[1..debug.len() - 1]), s, "{debug}");
        }
    }

    #[test]
    fn errors_have_kinds_and_a_status() {
        let err = Error::status_error(503, "HTTP 503 Service Unavailable from https://h/");
        assert_eq!((err.kind(), err.status()), (ErrorKind::Status, Some(503)));
        assert_eq!(err.message(), "HTTP 503 Service Unavailable from https://h/");
        assert_eq!(Error::new(ErrorKind::Body, "b").status(), None);
    }
}
