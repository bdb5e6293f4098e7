//! Prometheus metrics: `GET /metrics`, request durations, open connections.
//!
//! Counters and histograms are recorded where things happen (the engine
//! counts messages, the store's writer its commits, the app each request);
//! queue depths are gauges computed from the store when scraped, so they are
//! exact at scrape time and cost nothing in between. Every name starts with
//! `ackbox_`; labels are the queue, the action and the outcome.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use ackbox_core::error::ErrorCode;
use ackbox_core::queue_name::QueueName;

use crate::app::AppState;

/// Buckets for durations, seconds: 50 µs to 10 s.
const SECONDS_BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];
/// Buckets for how long consumers take from receive to delete, seconds:
/// 10 ms to the 12-hour longest lease.
const PROCESSING_BUCKETS: [f64; 15] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3_600.0, 43_200.0,
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
                // A full name's buckets win over a suffix's.
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full("ackbox_message_processing_seconds".into()),
                        &PROCESSING_BUCKETS,
                    )
                })
                .and_then(|builder| {
                    builder.set_buckets_for_metric(Matcher::Suffix("_jobs".into()), &JOBS_BUCKETS)
                })
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            describe();
            // At zero from the start: a rate over them is zero, not "no data".
            for code in AUTH_REFUSALS {
                metrics::counter!("ackbox_auth_refusals_total", "code" => code.query_code())
                    .absolute(0);
            }
            Some(handle)
        })
        .as_ref()
}

/// What a series is, for its `# HELP` line.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every series the broker exports, with its `# HELP` text: the one list,
/// which `docs/operations.md`'s table restates (`tests/metrics.rs` holds
/// them to each other).
const SERIES: &[(&str, Kind, &str)] = &[
    (
        "ackbox_queue_messages",
        Kind::Gauge,
        "Messages in a queue, by state (visible, in_flight, delayed).",
    ),
    (
        "ackbox_queue_oldest_message_age_seconds",
        Kind::Gauge,
        "Age of a queue's oldest message, seconds (0 when empty).",
    ),
    (
        "ackbox_dead_letter_queue_messages",
        Kind::Gauge,
        "Messages in a queue that some redrive policy names as its dead-letter queue.",
    ),
    (
        "ackbox_messages_sent_total",
        Kind::Counter,
        "Messages stored by sends and by topics' fan-out.",
    ),
    (
        "ackbox_deduplicated_sends_total",
        Kind::Counter,
        "FIFO sends absorbed by the five-minute deduplication window.",
    ),
    (
        "ackbox_messages_received_total",
        Kind::Counter,
        "Leases handed out by receives.",
    ),
    (
        "ackbox_messages_redelivered_total",
        Kind::Counter,
        "Leases of messages that were received before.",
    ),
    (
        "ackbox_messages_deleted_total",
        Kind::Counter,
        "Messages deleted by their consumers.",
    ),
    (
        "ackbox_messages_expired_total",
        Kind::Counter,
        "Messages dropped past their queue's retention period.",
    ),
    (
        "ackbox_messages_dead_lettered_total",
        Kind::Counter,
        "Messages moved to the dead-letter queue, by source queue.",
    ),
    (
        "ackbox_messages_dead_lettered_by_class_total",
        Kind::Counter,
        "Messages moved to the dead-letter queue, by source queue and last failure class (unreported: no consumer said why).",
    ),
    (
        "ackbox_message_processing_seconds",
        Kind::Histogram,
        "From the receive to the delete of a message, seconds, by queue: how long consumers take.",
    ),
    (
        "ackbox_move_task_messages_moved_total",
        Kind::Counter,
        "Messages redriven out of a dead-letter queue.",
    ),
    (
        "ackbox_move_tasks",
        Kind::Gauge,
        "Move tasks out of a dead-letter queue, by queue and status (running, paused).",
    ),
    (
        "ackbox_request_duration_seconds",
        Kind::Histogram,
        "API request duration, seconds, by action and outcome.",
    ),
    (
        "ackbox_auth_refusals_total",
        Kind::Counter,
        "Requests refused by authentication or authorization, by error code.",
    ),
    (
        "ackbox_store_commit_seconds",
        Kind::Histogram,
        "One group commit of the embedded store without its fsync, seconds.",
    ),
    (
        "ackbox_store_group_commit_jobs",
        Kind::Histogram,
        "Jobs per group commit of the embedded store.",
    ),
    (
        "ackbox_store_fsync_seconds",
        Kind::Histogram,
        "One fsync of the embedded store's write-ahead log, seconds.",
    ),
    (
        "ackbox_store_reclaim_seconds",
        Kind::Histogram,
        "One step returning free pages of the embedded store to the file system, seconds.",
    ),
    (
        "ackbox_store_backstop_checkpoint_seconds",
        Kind::Histogram,
        "One checkpoint by the embedded store's writer once the WAL holds 32 MiB, seconds.",
    ),
    (
        "ackbox_store_disk_full",
        Kind::Gauge,
        "1 while the store's disk is full and sends are refused, else 0.",
    ),
    (
        "ackbox_postgres_sends_per_commit",
        Kind::Histogram,
        "Sends committed together by one PostgreSQL transaction.",
    ),
    (
        "ackbox_postgres_vacuums_total",
        Kind::Counter,
        "Vacuums the PostgreSQL store ran on its hot tables, by table.",
    ),
    (
        "ackbox_topic_messages_published_total",
        Kind::Counter,
        "Messages published to a topic.",
    ),
    (
        "ackbox_topic_messages_delivered_total",
        Kind::Counter,
        "Copies a topic stored for its subscribed queues and push subscriptions.",
    ),
    (
        "ackbox_topic_deliveries_failed_total",
        Kind::Counter,
        "Copies a topic could not store: the subscribed queue is gone.",
    ),
    (
        "ackbox_subscription_messages_delivered_total",
        Kind::Counter,
        "Copies a topic stored in a subscribed queue, by topic and subscription.",
    ),
    (
        "ackbox_subscription_messages_filtered_out_total",
        Kind::Counter,
        "Messages a subscription's filter policy kept from its queue, by topic and subscription.",
    ),
    (
        "ackbox_push_deliveries_total",
        Kind::Counter,
        "Posts to push subscriptions, by topic, subscription and outcome (delivered, retried, dead_lettered, discarded).",
    ),
    (
        "ackbox_process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory of the server process, bytes.",
    ),
    (
        "ackbox_open_connections",
        Kind::Gauge,
        "Open client connections.",
    ),
    (
        "ackbox_worker_threads",
        Kind::Gauge,
        "Threads serving requests.",
    ),
];

fn describe() {
    for &(name, kind, help) in SERIES {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Histogram => metrics::describe_histogram!(name, help),
        }
    }
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

/// Every code a request is refused with by authentication or authorization.
const AUTH_REFUSALS: [ErrorCode; 6] = [
    ErrorCode::MissingAuthenticationToken,
    ErrorCode::InvalidClientTokenId,
    ErrorCode::SignatureDoesNotMatch,
    ErrorCode::IncompleteSignature,
    ErrorCode::RequestExpired,
    ErrorCode::AccessDenied,
];

/// Counts a request refused by authentication or authorization, by its code.
pub(crate) fn auth_refused(code: ErrorCode) {
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
    let live = match state.engine.queue_depths().await {
        Ok(depths) => {
            let live: HashSet<String> = depths.iter().map(|depth| depth.name.to_string()).collect();
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
                    move_tasks(&state, &depth.name).await;
                }
            }
            Some(live)
        }
        Err(error) => {
            tracing::warn!(%error, "queue depths unavailable for this scrape");
            None
        }
    };
    metrics::gauge!("ackbox_store_disk_full").set(if state.engine.disk_full() { 1.0 } else { 0.0 });
    metrics::gauge!("ackbox_process_resident_memory_bytes").set(resident_memory_bytes() as f64);
    metrics::gauge!("ackbox_open_connections").set(OPEN_CONNECTIONS.load(Ordering::Relaxed) as f64);
    metrics::gauge!("ackbox_worker_threads")
        .set(tokio::runtime::Handle::current().metrics().num_workers() as f64);
    let text = handle.render();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        match &live {
            Some(live) => without_gone_queues(&text, live),
            None => text,
        },
    )
        .into_response()
}

/// The dead-letter queue `name`'s running and paused move tasks. Only the
/// newest few are read: a queue runs one task at a time, and a running or
/// paused one is its newest.
async fn move_tasks(state: &AppState, name: &QueueName) {
    let arn = state.engine.realm().queue_arn(name);
    let tasks = match state.engine.list_message_move_tasks(&arn, Some(10)).await {
        Ok(tasks) => tasks,
        Err(error) => {
            tracing::warn!(queue = %name, %error, "move tasks unavailable for this scrape");
            return;
        }
    };
    for (status, label) in [("RUNNING", "running"), ("PAUSED", "paused")] {
        let count = tasks.iter().filter(|task| task.status == status).count();
        metrics::gauge!("ackbox_move_tasks", "queue" => name.to_string(), "status" => label)
            .set(count as f64);
    }
}

/// `text` without the samples of queues that no longer exist: the exporter
/// cannot forget a series, and a deleted queue's (its gauges at their last
/// value) would stay until the process restarts.
fn without_gone_queues(text: &str, live: &HashSet<String>) -> String {
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with('#') || queue_label(line).is_none_or(|queue| live.contains(queue)) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The value of a sample's `queue` label, if it has one. Queue names need
/// no escaping: they are letters, digits, `-`, `_` and `.fifo`.
fn queue_label(sample: &str) -> Option<&str> {
    let labels = &sample[sample.find('{')?..];
    let start = ["{queue=\"", ",queue=\""]
        .iter()
        .find_map(|key| labels.find(key).map(|at| at + key.len()))?;
    let length = labels[start..].find('"')?;
    Some(&labels[start..start + length])
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
