//! Prometheus metrics: `GET /metrics`, request durations, open connections.
//!
//! Counters and histograms are recorded where things happen (the engine
//! counts messages, the store's writer its commits, the app each request);
//! queue depths are gauges computed from the store when scraped, so they are
//! exact at scrape time and cost nothing in between. Every name starts with
//! `ackbox_`; labels are the queue, the action and the outcome.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::app::AppState;

/// Buckets for durations, seconds: 50 µs to 10 s.
const SECONDS_BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];
/// Buckets for group-commit sizes, jobs.
const JOBS_BUCKETS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
static OPEN_CONNECTIONS: AtomicI64 = AtomicI64::new(0);

/// The process's Prometheus recorder, installed on first use. `None` when the
/// embedding application installed a metrics recorder of its own first.
pub fn recorder() -> Option<&'static PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
                .and_then(|builder| {
                    builder.set_buckets_for_metric(Matcher::Suffix("_jobs".into()), &JOBS_BUCKETS)
                })
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok().map(|()| handle)
        })
        .as_ref()
}

/// Records one API request's duration by action and outcome.
pub(crate) fn request_finished(
    action: &'static str,
    status: StatusCode,
    elapsed: std::time::Duration,
) {
    metrics::histogram!("ackbox_request_duration_seconds", "action" => action, "outcome" => outcome(status))
        .record(elapsed);
}

/// Counts a request refused by authentication or authorization, by its code.
pub(crate) fn auth_refused(code: ackbox_core::error::ErrorCode) {
    metrics::counter!("ackbox_auth_refusals_total", "code" => code.query_code()).increment(1);
}

/// A response's outcome, as metrics and logs name it.
pub(crate) fn outcome(status: StatusCode) -> &'static str {
    if status.is_success() {
        "ok"
    } else if status.is_client_error() {
        "client_error"
    } else {
        "server_error"
    }
}

/// Resident memory of this process, bytes (Linux; 0 elsewhere).
fn resident_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4_096)
}

/// `GET /metrics`: the Prometheus text format.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let Some(handle) = recorder() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "another metrics recorder was installed in this process; it exports ackbox's metrics",
        )
            .into_response();
    };
    match state.engine.queue_depths().await {
        Ok(depths) => {
            for depth in depths {
                let queue = depth.name.to_string();
                let stats = depth.stats;
                for (state, count) in [
                    ("visible", stats.visible),
                    ("in_flight", stats.in_flight),
                    ("delayed", stats.delayed),
                ] {
                    metrics::gauge!("ackbox_queue_messages", "queue" => queue.clone(), "state" => state)
                        .set(count as f64);
                }
                metrics::gauge!("ackbox_queue_oldest_message_age_seconds", "queue" => queue.clone())
                    .set(depth.oldest_age_seconds());
                if depth.dead_letter_queue {
                    metrics::gauge!("ackbox_dead_letter_queue_messages", "queue" => queue)
                        .set((stats.visible + stats.in_flight + stats.delayed) as f64);
                }
            }
        }
        Err(error) => tracing::warn!(%error, "queue depths unavailable for this scrape"),
    }
    metrics::gauge!("ackbox_store_disk_full").set(if state.engine.disk_full() { 1.0 } else { 0.0 });
    metrics::gauge!("ackbox_process_resident_memory_bytes").set(resident_memory_bytes() as f64);
    metrics::gauge!("ackbox_open_connections").set(OPEN_CONNECTIONS.load(Ordering::Relaxed) as f64);
    metrics::gauge!("ackbox_worker_threads")
        .set(tokio::runtime::Handle::current().metrics().num_workers() as f64);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

/// Counts a connection as open until the guard drops.
pub(crate) fn connection_opened() -> OpenConnection {
    OPEN_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    OpenConnection
}

/// One open connection, counted while it lives.
#[derive(Debug)]
pub(crate) struct OpenConnection;

impl Drop for OpenConnection {
    fn drop(&mut self) {
        OPEN_CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
    }
}
