//! What a consumer tells operators (invariant 10, ARCHITECTURE.md): metrics labelled by
//! consumer and event type, one log line per decision carrying the
//! message's identity and lineage, and lineage handed on to the events a
//! handler writes to the outbox. Read here as an operator would read them:
//! the Prometheus text and the JSON log lines.
//!
//! One test in this binary: it installs the process's global metrics
//! recorder and log subscriber.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackbox_consumer::outbox::{Outbox, OutboxEvent, SqliteOutbox};
use ackbox_consumer::{
    CancellationToken, Consumer, Handler, HandlerError, Message, SqsTransport, async_trait,
};
use serde_json::Value;
use sqlx::{Sqlite, Transaction};
use support::{Backend, Broker, LedgerSql, SqliteBackend, SqsBroker, body, eventually};

/// Log lines, as the JSON formatter writes them.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn parsed(&self) -> Vec<Value> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

/// Records the body's key and tells the next service about it.
struct Notify {
    outbox: SqliteOutbox,
    destination: String,
}

#[async_trait]
impl Handler<Sqlite> for Notify {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, Sqlite>,
    ) -> Result<(), HandlerError> {
        let body: support::Body = message.json()?;
        SqliteBackend::record(transaction, &body.key).await?;
        self.outbox
            .enqueue(
                transaction,
                OutboxEvent::new(&self.destination, format!("notified {}", body.key)),
            )
            .await?;
        Ok(())
    }
}

/// The value of the Prometheus sample `name{labels}`, labels in any order.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{')?;
        let label_text = rest.strip_suffix('}')?;
        let matches = metric == name
            && labels.len() == label_text.split(',').count()
            && labels
                .iter()
                .all(|(label, value)| label_text.contains(&format!("{label}=\"{value}\"")));
        matches.then(|| value.parse().ok()).flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_and_logs_name_the_event_type_the_decision_and_the_lineage() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();
    let lines = Lines::default();
    let writer = lines.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();

    let backend = SqliteBackend::start().await.unwrap();
    let broker = SqsBroker::start(5, 10).await;
    let lineage = [
        ("event_type", "OrderPlaced"),
        ("ackbox.event_id", "event-1"),
        ("correlation_id", "checkout-9"),
        ("causation_id", "event-0"),
        ("aggregate_id", "order-1"),
        ("aggregate_version", "1"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
    ];
    broker
        .send_with_attributes(&body("order-1"), &lineage)
        .await;
    // The relay published the same event again: a duplicate.
    broker
        .send_with_attributes(&body("order-1"), &lineage)
        .await;
    broker
        .send_with_attributes("not JSON", &[("event_type", "OrderPaid")])
        .await;
    let outbox = backend.outbox();
    outbox.migrate().await.unwrap();
    let consumer = Arc::new(
        Consumer::builder("notifier")
            .transport(
                SqsTransport::new(broker.client.clone(), &broker.url).with_ackbox_extensions(),
            )
            .inbox(backend.inbox())
            .concurrency(1)
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let handler = Notify {
        outbox: outbox.clone(),
        destination: broker.destination(),
    };
    let shutdown = CancellationToken::new();
    let task = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    eventually(Duration::from_secs(15), "all three are decided", || async {
        let stats = consumer.stats();
        stats.applied() + stats.duplicates() + stats.quarantined() == 3
    })
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();

    let text = metrics.render();
    let placed = [("consumer", "notifier"), ("event_type", "OrderPlaced")];
    assert_eq!(
        sample(&text, "consumer_success_total", &placed),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "consumer_duplicate_total", &placed),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "consumer_failure_total",
            &[
                ("consumer", "notifier"),
                ("event_type", "OrderPaid"),
                ("reason", "Deserialize")
            ]
        ),
        Some(1.0),
        "{text}"
    );

    let logged = lines.parsed();
    let decision = |decision: &str| {
        logged
            .iter()
            .find(|line| line["decision"] == decision)
            .unwrap_or_else(|| panic!("no {decision} line in {logged:?}"))
            .clone()
    };
    let applied = decision("applied");
    for (field, value) in [
        ("consumer", "notifier"),
        ("queue", "work"),
        ("event_id", "event-1"),
        ("effect_key", "event-1"),
        ("event_type", "OrderPlaced"),
        ("aggregate_id", "order-1"),
        ("aggregate_version", "1"),
        ("correlation_id", "checkout-9"),
        ("causation_id", "event-0"),
        ("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"),
    ] {
        assert_eq!(applied[field], value, "{field} in {applied}");
    }
    assert_eq!(applied["attempt"], 1, "{applied}");
    assert_eq!(decision("duplicate")["effect_key"], "event-1");
    let quarantined = decision("quarantined");
    assert_eq!(quarantined["event_type"], "OrderPaid");
    assert!(
        quarantined["failure_reason"]
            .as_str()
            .is_some_and(|reason| reason.starts_with("Deserialize: ")),
        "{quarantined}"
    );

    // The event the handler wrote carries the conversation on: the same
    // correlation id, and the handled event as its cause.
    let attributes: Vec<String> = sqlx::query_scalar("SELECT attributes FROM ackbox_outbox")
        .fetch_all(backend.inbox().pool())
        .await
        .unwrap();
    let [attributes] = attributes.as_slice() else {
        panic!("one event enqueued, not {attributes:?}");
    };
    let attributes: Value = serde_json::from_str(attributes).unwrap();
    assert_eq!(attributes["correlation_id"], "checkout-9");
    assert_eq!(attributes["causation_id"], "event-1");
    // With no tracer provider, the trace passes through as it came.
    assert_eq!(
        attributes["traceparent"],
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    );
}
