//! `telemetry:`: OpenTelemetry traces over OTLP/HTTP.

use serde::Deserialize;
use std::collections::BTreeMap;

/// `telemetry:` in the config. Off (no endpoint) by default, and then no
/// span is made at all.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP endpoint spans are exported to: a collector's base URL
    /// (`http://127.0.0.1:4318`, to which `/v1/traces` is added) or the
    /// full traces URL (ending in `/v1/traces`). Unset: telemetry off.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` spans are reported under (default `toolhost`).
    pub service_name: String,
    /// The share of new traces recorded, 0 to 1 (default 1). A trace a
    /// client started follows the client's sampling decision.
    pub sample_ratio: f64,
    /// Headers sent with every export (a collector's API key).
    pub headers: BTreeMap<String, String>,
}

impl Default for TelemetryConfig {
    fn default() -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: "toolhost".into(),
            sample_ratio: 1.0,
            headers: BTreeMap::new(),
        }
    }
}

impl TelemetryConfig {
    /// Whether spans are exported.
    pub fn enabled(&self) -> bool {
        self.otlp_endpoint.is_some()
    }

    /// The URL spans are POSTed to.
    pub fn traces_url(&self) -> Option<String> {
        let base = self.otlp_endpoint.as_deref()?.trim_end_matches('/');
        Some(if base.ends_with("/v1/traces") { base.to_string() } else { format!("{base}/v1/traces") })
    }

    /// The problems with this section, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(url) = &self.otlp_endpoint {
            match url::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
                _ => out.push(format!("telemetry.otlp_endpoint: {url:?} is not an http:// or https:// URL")),
            }
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            out.push(format!("telemetry.sample_ratio: {} is not between 0 and 1", self.sample_ratio));
        }
        if self.service_name.trim().is_empty() {
            out.push("telemetry.service_name: empty".into());
        }
        for (k, v) in &self.headers {
            if http::HeaderName::from_bytes(k.as_bytes()).is_err() || http::HeaderValue::from_str(v).is_err() {
                out.push(format!("telemetry.headers: {k:?} is not a valid HTTP header name and value"));
            }
        }
        out
    }
}
