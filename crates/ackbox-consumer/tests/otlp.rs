//! One order followed across the broker by its trace (W3C trace context,
//! exported over OTLP/HTTP to a collector stub): the producer's span
//! writes an event to the outbox, the relay publishes it to ackbox, the
//! consumer's span for it is the producer span's child and the event its
//! handler writes carries that span on, through the relay, to the next
//! consumer span. A message that fails ends its span in error.
//!
//! One test in this binary: it installs the process's global tracer
//! provider.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackbox_consumer::outbox::{Outbox, OutboxEvent, OutboxRelay, SqliteOutbox};
use ackbox_consumer::trace::TRACEPARENT_ATTRIBUTE;
use ackbox_consumer::{
    CancellationToken, Consumer, Handler, HandlerError, Message, SqsTransport, async_trait, otlp,
};
use opentelemetry::context::FutureExt;
use opentelemetry::trace::{Span, TraceContextExt, Tracer};
use opentelemetry::{Context, global};
use serde_json::Value;
use sqlx::{Sqlite, Transaction};
use support::{Backend, Broker, LedgerSql, SqliteBackend, SqsBroker, body, eventually};

/// A collector that keeps every OTLP/HTTP JSON export it is sent.
#[derive(Clone, Default)]
struct Collector {
    exports: Arc<Mutex<Vec<Value>>>,
}

impl Collector {
    /// Listens on a port of its own; returns its base URL.
    async fn start(&self) -> String {
        let exports = Arc::clone(&self.exports);
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: String| {
                let exports = Arc::clone(&exports);
                async move {
                    exports
                        .lock()
                        .unwrap()
                        .push(serde_json::from_str(&body).expect("an OTLP JSON export"));
                    "{}"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    /// Every span exported, with its service's name beside it.
    fn spans(&self) -> Vec<(String, Value)> {
        let mut spans = Vec::new();
        for export in self.exports.lock().unwrap().iter() {
            for resource in export["resourceSpans"].as_array().unwrap() {
                let service = attribute(&resource["resource"], "service.name");
                for scope in resource["scopeSpans"].as_array().unwrap() {
                    for span in scope["spans"].as_array().unwrap() {
                        spans.push((service.clone(), span.clone()));
                    }
                }
            }
        }
        spans
    }
}

/// A string attribute of an OTLP span or resource.
fn attribute(holder: &Value, key: &str) -> String {
    holder["attributes"]
        .as_array()
        .and_then(|attributes| attributes.iter().find(|kv| kv["key"] == key))
        .and_then(|kv| kv["value"]["stringValue"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Records each order and tells the next step about it (once).
struct Fulfil {
    outbox: SqliteOutbox,
    destination: String,
}

#[async_trait]
impl Handler<Sqlite> for Fulfil {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, Sqlite>,
    ) -> Result<(), HandlerError> {
        let body: support::Body = message.json()?;
        SqliteBackend::record(transaction, &body.key).await?;
        if !body.key.starts_with("shipped-") {
            self.outbox
                .enqueue(
                    transaction,
                    OutboxEvent::new(
                        &self.destination,
                        support::body(&format!("shipped-{}", body.key)),
                    ),
                )
                .await?;
        }
        Ok(())
    }
}

const FOREIGN_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trace_runs_from_the_producer_through_each_consumer_and_its_outbox() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let exporter = otlp::install(Some(&endpoint), "orders-service").unwrap();

    let backend = SqliteBackend::start().await.unwrap();
    let broker = SqsBroker::start(5, 10).await;
    let outbox = backend.outbox();
    outbox.migrate().await.unwrap();

    // The producer: a request's span writes the order to the outbox.
    let request = global::tracer("orders-api").start("POST /orders");
    let producer = request.span_context().clone();
    let request = Context::new().with_span(request);
    async {
        let mut transaction = backend.inbox().pool().begin().await.unwrap();
        outbox
            .enqueue(
                &mut transaction,
                OutboxEvent::new(broker.destination(), body("order-1")),
            )
            .await
            .unwrap();
        transaction.commit().await.unwrap();
    }
    .with_context(request.clone())
    .await;
    request.span().end();
    // A message a producer without this SDK sent with a trace of its own,
    // which the handler cannot read.
    broker
        .send_with_attributes(
            "not JSON",
            &[(
                TRACEPARENT_ATTRIBUTE,
                &format!("00-{FOREIGN_TRACE}-b7ad6b7169203331-01"),
            )],
        )
        .await;

    let shutdown = CancellationToken::new();
    let relay =
        OutboxRelay::new(outbox.clone(), broker.publisher().await).idle(Duration::from_millis(50));
    let relaying = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { relay.run(shutdown).await })
    };
    let consumer = Arc::new(
        Consumer::builder("fulfilment")
            .transport(
                SqsTransport::new(broker.client.clone(), &broker.url).with_ackbox_extensions(),
            )
            .inbox(backend.inbox())
            .concurrency(2)
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let handler = Fulfil {
        outbox: outbox.clone(),
        destination: broker.destination(),
    };
    let consuming = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    eventually(
        Duration::from_secs(20),
        "the order, its shipment and the poison are decided",
        || async {
            let stats = consumer.stats();
            stats.applied() == 2 && stats.quarantined() == 1
        },
    )
    .await;
    shutdown.cancel();
    consuming.await.unwrap().unwrap();
    relaying.await.unwrap();
    tokio::task::spawn_blocking(move || exporter.shutdown())
        .await
        .unwrap()
        .unwrap();

    let spans = collector.spans();
    let trace = producer.trace_id().to_string();
    let find = |name: &str, parent: &str| {
        spans
            .iter()
            .find(|(_, span)| {
                span["traceId"] == trace && span["name"] == name && span["parentSpanId"] == parent
            })
            .unwrap_or_else(|| panic!("no {name} span under {parent} in trace {trace}: {spans:#?}"))
    };
    let (service, request) = find("POST /orders", "");
    assert_eq!(service, "orders-service");
    let (_, order) = find("process work", request["spanId"].as_str().unwrap());
    let (_, shipment) = find("process work", order["spanId"].as_str().unwrap());
    for span in [order, shipment] {
        assert_eq!(span["kind"], 5, "a consumer span: {span}");
        assert_eq!(span["status"]["code"], 1, "ended ok: {span}");
        assert_eq!(attribute(span, "ackbox.decision"), "applied", "{span}");
        assert_eq!(attribute(span, "messaging.destination.name"), "work");
        assert_eq!(
            attribute(span, "messaging.consumer.group.name"),
            "fulfilment"
        );
        assert!(
            !attribute(span, "messaging.message.id").is_empty(),
            "{span}"
        );
    }

    // The shipment event carried the order's span on as its traceparent.
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT attributes FROM ackbox_outbox ORDER BY rowid")
            .fetch_all(backend.inbox().pool())
            .await
            .unwrap();
    let traceparents: Vec<String> = stored
        .iter()
        .map(|attributes| {
            let attributes: Value = serde_json::from_str(attributes).unwrap();
            attributes[TRACEPARENT_ATTRIBUTE]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        traceparents,
        [
            format!("00-{trace}-{}-01", request["spanId"].as_str().unwrap()),
            format!("00-{trace}-{}-01", order["spanId"].as_str().unwrap()),
        ]
    );

    let (_, poison) = spans
        .iter()
        .find(|(_, span)| span["traceId"] == FOREIGN_TRACE)
        .unwrap_or_else(|| panic!("the foreign trace goes on: {spans:#?}"));
    assert_eq!(poison["parentSpanId"], "b7ad6b7169203331");
    assert_eq!(poison["status"]["code"], 2, "ended in error: {poison}");
    assert!(
        poison["status"]["message"]
            .as_str()
            .is_some_and(|reason| reason.starts_with("Deserialize: ")),
        "{poison}"
    );
    assert_eq!(attribute(poison, "ackbox.decision"), "quarantined");
    assert_eq!(backend.total_effects().await, 2);
}
