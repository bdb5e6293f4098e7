//! Exporting spans to an OpenTelemetry collector over OTLP/HTTP (JSON),
//! with the feature `otlp`: the consumer's spans ([`crate::trace`]) and any
//! the application makes through OpenTelemetry's global tracer.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tracing = ackbox_consumer::otlp::install(Some("http://127.0.0.1:4318"), "payments")?;
//! // … run consumers and relays …
//! tracing.shutdown()?; // exports what is still buffered
//! # Ok(()) }
//! ```
//!
//! Without an endpoint, the exporter reads OpenTelemetry's own variables
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, …) and defaults to
//! `http://localhost:4318`.

use opentelemetry::global;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::trace::SdkTracerProvider;

pub use opentelemetry_otlp::ExporterBuildError;

/// Where OTLP/HTTP takes traces, under a collector's base URL.
const TRACES_PATH: &str = "/v1/traces";

/// The installed exporter: spans are batched and sent in the background
/// until [`OtlpTracing::shutdown`].
#[derive(Debug)]
pub struct OtlpTracing {
    provider: SdkTracerProvider,
}

/// Makes the process's global tracer provider export to the collector at
/// `endpoint` (its base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it), as
/// service `service_name`.
pub fn install(
    endpoint: Option<&str>,
    service_name: &str,
) -> Result<OtlpTracing, ExporterBuildError> {
    let mut exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson);
    if let Some(endpoint) = endpoint {
        exporter =
            exporter.with_endpoint(format!("{}{TRACES_PATH}", endpoint.trim_end_matches('/')));
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter.build()?)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .build();
    global::set_tracer_provider(provider.clone());
    Ok(OtlpTracing { provider })
}

impl OtlpTracing {
    /// Sends the spans ended so far now.
    pub fn flush(&self) -> Result<(), OTelSdkError> {
        self.provider.force_flush()
    }

    /// Sends what is buffered and stops exporting.
    pub fn shutdown(self) -> Result<(), OTelSdkError> {
        self.provider.shutdown()
    }
}
