//! `telemetry:`: the OpenTelemetry SDK behind the spans every layer makes
//! ([`crate::trace`]), exported over OTLP/HTTP (protobuf).
//!
//! Off (no `telemetry.otlp_endpoint`) nothing is set up and no span is
//! made. On, spans go through a batch processor (its own thread, a bounded
//! queue: a slow or dead collector drops spans, never slows a call) to the
//! collector, posted with the host's own HTTP client on the host's runtime.

use crate::config::telemetry::TelemetryConfig;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::time::Duration;

/// How long an export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The tracer provider, while telemetry is on: [`Telemetry::shutdown`]
/// sends what is queued.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("telemetry: {0}")]
pub struct TelemetryError(String);

impl Telemetry {
    /// Telemetry off.
    pub fn off() -> Telemetry {
        Telemetry { provider: None }
    }

    /// Sets up the exporter and turns spans on, when `config` names an
    /// endpoint; exports run on `runtime`.
    pub fn start(config: &TelemetryConfig, runtime: tokio::runtime::Handle) -> Result<Telemetry, TelemetryError> {
        let Some(url) = config.traces_url() else { return Ok(Telemetry::off()) };
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(EXPORT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| TelemetryError(format!("HTTP client: {e}")))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Exporting { client, runtime })
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_headers(config.headers.clone().into_iter().collect())
            .build()
            .map_err(|e| TelemetryError(format!("OTLP exporter for {url}: {e}")))?;
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name(config.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sample_ratio))))
            .with_resource(resource)
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        crate::trace::set_enabled(true);
        tracing::info!(endpoint = %url, sample_ratio = config.sample_ratio, "telemetry: exporting spans");
        Ok(Telemetry { provider: Some(provider) })
    }

    /// Whether spans are exported.
    pub fn is_on(&self) -> bool {
        self.provider.is_some()
    }

    /// Stops making spans and sends those still queued (at shutdown).
    pub fn shutdown(&self) {
        if let Some(p) = &self.provider {
            crate::trace::set_enabled(false);
            if let Err(e) = p.shutdown() {
                tracing::warn!("telemetry: the last spans were not all sent: {e}");
            }
        }
    }
}

/// The exporter's HTTP client: reqwest on the host's runtime (the batch
/// processor's thread has none of its own).
#[derive(Debug)]
struct Exporting {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Exporting {
    async fn send_bytes(
        &self,
        request: ::http::Request<bytes::Bytes>,
    ) -> Result<::http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let request = reqwest::Request::try_from(request)?;
            let response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            // A collector's answer is small; more is not read.
            let mut body = Vec::new();
            let mut response = response;
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > 64 << 10 {
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            let mut out = ::http::Response::new(bytes::Bytes::from(body));
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok::<_, reqwest::Error>(out)
        });
        match sent.await {
            Ok(r) => r.map_err(Into::into),
            Err(e) => Err(Box::new(e)),
        }
    }
}
