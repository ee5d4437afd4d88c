//! Traces: the spans every hop of a call makes (OpenTelemetry), and the W3C
//! trace context that links them across processes.
//!
//! The libraries use the OpenTelemetry API only; the binary installs the
//! SDK and its OTLP exporter when `telemetry.otlp_endpoint` is set, and
//! only then turns spans on ([`set_enabled`]). Off, [`start`] returns at
//! once without touching the API: a call pays one atomic load.
//!
//! Trace context comes in as the HTTP `traceparent` / `tracestate` headers
//! or as the same keys in an MCP request's `params._meta` (as MCP's
//! SEP-414 documents them), and goes out the same ways.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{KeyValue, global};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::sync::atomic::{AtomicBool, Ordering};

pub use opentelemetry::Context;
pub use opentelemetry::KeyValue as Attribute;
pub use opentelemetry::trace::SpanKind as Kind;

/// The instrumentation scope every span of the host is made under.
pub const SCOPE: &str = "toolhost";
/// The W3C trace context keys, in headers and in `_meta`.
pub const KEYS: [&str; 2] = ["traceparent", "tracestate"];

static ON: AtomicBool = AtomicBool::new(false);

/// Turns spans on or off (the binary does, once its exporter is set up).
pub fn set_enabled(on: bool) {
    ON.store(on, Ordering::Release);
}

/// Whether spans are made.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

fn propagator() -> TraceContextPropagator {
    TraceContextPropagator::new()
}

/// The longest `tracestate` taken or passed on, in bytes: W3C allows 32
/// members of 512 bytes; a context that large would pass the header
/// limits of the servers it goes on to.
pub const MAX_TRACESTATE: usize = 512;

/// `value` of trace context key `key` when it has the W3C shape: a
/// `traceparent` of version 00 (55 characters, lower-case hex, dashes in
/// place; a later version's first 55, as the spec asks), a `tracestate` of
/// at most [`MAX_TRACESTATE`] printable ASCII characters. Anything else
/// is not taken.
fn shaped<'a>(key: &str, value: &'a str) -> Option<&'a str> {
    let b = value.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    let ok = match key {
        "traceparent" => {
            b.len() >= 55
                && (b.len() == 55 || (&b[..2] != b"00" && b[55] == b'-'))
                && &b[..2] != b"ff"
                && [2, 35, 52].iter().all(|&i| b[i] == b'-')
                && hex(0..2)
                && hex(3..35)
                && hex(36..52)
                && hex(53..55)
        }
        "tracestate" => !b.is_empty() && b.len() <= MAX_TRACESTATE && b.iter().all(|c| (0x20..0x7f).contains(c)),
        _ => true,
    };
    ok.then_some(value)
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok()).and_then(|v| shaped(key, v))
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeadersOut<'a>(&'a mut http::HeaderMap);

impl Injector for HeadersOut<'_> {
    fn set(&mut self, key: &str, value: String) {
        let Ok(k) = http::HeaderName::from_bytes(key.as_bytes()) else { return };
        match http::HeaderValue::from_str(&value) {
            Ok(v) if shaped(key, &value).is_some() => {
                self.0.insert(k, v);
            }
            _ => {
                self.0.remove(k);
            }
        }
    }
}

struct Meta<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str).and_then(|v| shaped(key, v))
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct MetaOut<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl Injector for MetaOut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if shaped(key, &value).is_some() {
            self.0.insert(key.to_string(), serde_json::Value::String(value));
        }
    }
}

/// The trace context a request carries: its `params._meta` first (it
/// names this request, where a header may name the whole connection),
/// else its HTTP headers. `None` when neither holds a valid `traceparent`.
pub fn incoming(
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
    headers: Option<&http::HeaderMap>,
) -> Option<Context> {
    let root = Context::new();
    let from_meta =
        meta.filter(|m| m.contains_key("traceparent")).map(|m| propagator().extract_with_context(&root, &Meta(m)));
    let cx = from_meta
        .filter(|cx| cx.span().span_context().is_valid())
        .or_else(|| headers.map(|h| propagator().extract_with_context(&root, &Headers(h))))?;
    cx.span().span_context().is_valid().then_some(cx)
}

/// Writes `cx`'s trace context into an MCP request's `_meta`.
pub fn inject_meta(cx: &Context, meta: &mut serde_json::Map<String, serde_json::Value>) {
    propagator().inject_context(cx, &mut MetaOut(meta));
}

/// Writes `cx`'s trace context into HTTP headers, replacing any the
/// request had (a plugin's own `tracestate` does not stay beside the
/// host's `traceparent`).
pub fn inject_headers(cx: &Context, headers: &mut http::HeaderMap) {
    for key in KEYS {
        headers.remove(key);
    }
    propagator().inject_context(cx, &mut HeadersOut(headers));
}

/// Starts a span under `parent` (a remote context from a client, or a span
/// of this host's), or a new trace's root without one; `describe` gives
/// its name and attributes, and is called only when spans are on. `None`
/// when they are off: the caller carries the parent on unchanged.
pub fn start<N: Into<std::borrow::Cow<'static, str>>>(
    kind: SpanKind,
    parent: Option<&Context>,
    describe: impl FnOnce() -> (N, Vec<KeyValue>),
) -> Option<Context> {
    if !enabled() {
        return None;
    }
    let (name, attributes) = describe();
    // The provider is set before spans are turned on: the tracer taken at
    // the first span is the exporter's.
    static TRACER: std::sync::OnceLock<global::BoxedTracer> = std::sync::OnceLock::new();
    let tracer = TRACER.get_or_init(|| global::tracer(SCOPE));
    let builder = tracer.span_builder(name).with_kind(kind).with_attributes(attributes);
    let root = Context::new();
    let span = builder.start_with_context(tracer, parent.unwrap_or(&root));
    Some(Context::new().with_span(span))
}

/// Adds attributes to `cx`'s span (nothing when it has none).
pub fn annotate(cx: Option<&Context>, attributes: Vec<KeyValue>) {
    if let Some(cx) = cx {
        cx.span().set_attributes(attributes);
    }
}

/// Ends `cx`'s span, as failed with `error` when one is given.
pub fn end(cx: Option<&Context>, error: Option<&str>) {
    if let Some(cx) = cx {
        let span = cx.span();
        if let Some(e) = error {
            span.set_status(opentelemetry::trace::Status::error(e.to_string()));
        }
        span.end();
    }
}

/// `(trace id, span id)` of `cx`'s span, as lower-case hex, for the audit
/// trail: this host's span when spans are on, else the caller's.
pub fn ids(cx: Option<&Context>) -> Option<(String, String)> {
    let cx = cx?;
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// A key-value attribute.
pub fn attr(key: &'static str, value: impl Into<opentelemetry::Value>) -> KeyValue {
    KeyValue::new(key, value)
}

/// Starts a span of its own trace at once and ends it: a lifecycle event
/// (a plugin loaded, a reload) as one point in time.
pub fn event(name: &'static str, attributes: impl FnOnce() -> Vec<KeyValue>) {
    if let Some(cx) = start(SpanKind::Internal, None, || (name, attributes())) {
        cx.span().end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_in_meta_wins_over_the_header_and_bad_ones_are_ignored() {
        let mut headers = http::HeaderMap::new();
        headers.insert("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".parse().unwrap());
        let mut meta = serde_json::Map::new();
        meta.insert("traceparent".into(), "00-11111111111111111111111111111111-2222222222222222-01".into());
        let (t, s) = ids(incoming(Some(&meta), Some(&headers)).as_ref()).unwrap();
        assert_eq!((t.as_str(), s.as_str()), ("11111111111111111111111111111111", "2222222222222222"));
        let (t, _) = ids(incoming(None, Some(&headers)).as_ref()).unwrap();
        assert_eq!(t, "0af7651916cd43dd8448eb211c80319c");
        for bad in [
            "00-00000000000000000000000000000000-2222222222222222-01",
            "00-11111111111111111111111111111111-0000000000000000-01",
            "ff-11111111111111111111111111111111-2222222222222222-01",
            "00-1111111111111111111111111111111-2222222222222222-01",
            "00-11111111111111111111111111111111-2222222222222222-01-extra",
            "00-1111111111111111111111111111111G-2222222222222222-01",
            "00-+1111111111111111111111111111111-2222222222222222-01",
            "00-11111111111111111111111111111111-2222222222222222-1",
            "00-11111111111111111111111111111111-222222222222222-011",
            "00-AF7651916CD43DD8448EB211C80319C0-b7ad6b7169203331-01",
        ] {
            meta.insert("traceparent".into(), bad.into());
            assert!(incoming(Some(&meta), None).is_none(), "{bad}");
        }
    }

    #[test]
    fn an_oversized_or_unprintable_tracestate_is_not_taken_and_a_later_version_is() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        for state in ["a=".to_string() + &"x".repeat(MAX_TRACESTATE), "a=b\u{7}".into()] {
            let mut meta = serde_json::Map::new();
            meta.insert("traceparent".into(), parent.into());
            meta.insert("tracestate".into(), state.into());
            let cx = incoming(Some(&meta), None).unwrap();
            let mut out = http::HeaderMap::new();
            out.insert("tracestate", "plugin=own".parse().unwrap());
            inject_headers(&cx, &mut out);
            assert_eq!(out["traceparent"], parent);
            assert!(out.get("tracestate").is_none(), "neither the client's nor the plugin's own");
        }
        let mut meta = serde_json::Map::new();
        meta.insert("traceparent".into(), "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future".into());
        assert!(incoming(Some(&meta), None).is_some());
    }

    #[test]
    fn context_written_to_meta_reads_back() {
        let mut meta = serde_json::Map::new();
        meta.insert("traceparent".into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
        meta.insert("tracestate".into(), "vendor=1".into());
        let cx = incoming(Some(&meta), None).unwrap();
        let mut out = serde_json::Map::new();
        inject_meta(&cx, &mut out);
        assert_eq!(out["traceparent"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert_eq!(out["tracestate"], "vendor=1");
        assert!(start(SpanKind::Internal, Some(&cx), || ("x", Vec::new())).is_none(), "off by default");
    }
}
