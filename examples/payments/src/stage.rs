//! What both runs share: a broker with its queues, the fake gateway, the
//! orders placed through the outbox, the outbox relay, and the replay.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ackbox_consumer::outbox::{Outbox, OutboxEvent, OutboxRelay};
use ackbox_consumer::testing::{Faults, UnreliableTransport};
use ackbox_consumer::{
    CancellationToken, REPLAY_ATTRIBUTE, RetryPolicy, SqsPublisher, SqsTransport,
};
use ackbox_core::clock::SystemClock;
use ackbox_server::broker::{BrokerConfig, RunningBroker};
use anyhow::Context;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::app::AppDb;
use crate::faults::FaultPlan;
use crate::gateway::{self, GatewayClient, Ledger};

/// How long either consumer waits for the gateway before it counts the call
/// as timed out: shorter than a slow answer, so a slow answer is a timeout.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_millis(300);

/// How long a received message stays invisible before the broker hands it
/// out again: what a crashed consumer's message waits before it comes back.
const LEASE_SECONDS: &str = "2";

/// Concurrent deliveries per consumer, on both sides.
pub(crate) const CONCURRENCY: usize = 8;

/// How long one receive waits for messages.
pub(crate) const RECEIVE_WAIT: Duration = Duration::from_millis(200);

/// An order was placed (published to the payments queue).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct OrderPlaced {
    pub(crate) order_id: u64,
    pub(crate) cents: i64,
}

/// An order's status changed (published to the status queue).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StatusChanged {
    pub(crate) order_id: u64,
    pub(crate) status: String,
    pub(crate) version: i64,
}

/// The status event an order's payment (version 2) or placement (version 1)
/// publishes.
pub(crate) fn status_event(queue: &str, order_id: u64, status: &str, version: i64) -> OutboxEvent {
    let body = serde_json::to_string(&StatusChanged {
        order_id,
        status: status.to_owned(),
        version,
    })
    .expect("a status event serializes");
    OutboxEvent::new(queue, body)
        .attribute("event_type", "OrderStatusChanged")
        .attribute("aggregate_id", order_id.to_string())
}

fn cents(order_id: u64) -> i64 {
    i64::try_from(order_id * 100).unwrap_or(i64::MAX)
}

/// One run's world: its own broker, queues, gateway and database.
pub(crate) struct Stage<A: AppDb> {
    pub(crate) app: A,
    pub(crate) client: Client,
    pub(crate) payments_queue: String,
    pub(crate) status_queue: String,
    pub(crate) gateway: GatewayClient,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) outbox: A::Outbox,
    pub(crate) plan: FaultPlan,
    broker: RunningBroker,
    _data_dir: tempfile::TempDir,
}

impl<A: AppDb> Stage<A> {
    /// Starts a broker and a gateway, creates the queues and the
    /// application's tables, and places `orders` orders, each with its
    /// events in the outbox.
    pub(crate) async fn open(app: A, plan: FaultPlan, orders: u64) -> anyhow::Result<Self> {
        let data_dir = tempfile::tempdir()?;
        let broker = RunningBroker::start(
            BrokerConfig::new(
                SocketAddr::from(([127, 0, 0, 1], 0)),
                data_dir.path().to_path_buf(),
            ),
            Arc::new(SystemClock),
        )
        .await?;
        let client = Client::from_conf(
            aws_sdk_sqs::Config::builder()
                .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
                .region(aws_sdk_sqs::config::Region::new("us-east-1"))
                .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                    "key", "secret", None, None, "example",
                ))
                .endpoint_url(broker.url())
                .build(),
        );
        let dead_letters = create_queue(&client, "dead-letters", &[]).await?;
        let dead_letters_arn = client
            .get_queue_attributes()
            .queue_url(&dead_letters)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await?
            .attributes
            .unwrap_or_default()
            .remove(&QueueAttributeName::QueueArn)
            .context("no QueueArn")?;
        let queue_attributes = [
            (
                QueueAttributeName::VisibilityTimeout,
                LEASE_SECONDS.to_owned(),
            ),
            (
                QueueAttributeName::RedrivePolicy,
                format!(r#"{{"deadLetterTargetArn":"{dead_letters_arn}","maxReceiveCount":100}}"#),
            ),
        ];
        let payments_queue = create_queue(&client, "payments", &queue_attributes).await?;
        let status_queue = create_queue(&client, "order-status", &queue_attributes).await?;
        let (gateway_address, ledger) =
            gateway::start(plan.slow_answer_probability, plan.slow_answer_by).await?;
        app.migrate().await?;
        let stage = Self {
            outbox: app.outbox(),
            app,
            client,
            payments_queue,
            status_queue,
            gateway: GatewayClient::new(gateway_address),
            ledger,
            plan,
            broker,
            _data_dir: data_dir,
        };
        stage.place_orders(orders).await?;
        Ok(stage)
    }

    /// Orders, each with its two events, in one transaction each.
    async fn place_orders(&self, orders: u64) -> anyhow::Result<()> {
        for order_id in 1..=orders {
            let mut transaction = self.app.begin().await?;
            A::place_order(&mut transaction, order_id, cents(order_id)).await?;
            let placed = serde_json::to_string(&OrderPlaced {
                order_id,
                cents: cents(order_id),
            })?;
            self.outbox
                .enqueue(
                    &mut transaction,
                    OutboxEvent::new(&self.payments_queue, placed)
                        .attribute("event_type", "OrderPlaced")
                        .attribute("aggregate_id", order_id.to_string()),
                )
                .await?;
            self.outbox
                .enqueue(
                    &mut transaction,
                    status_event(&self.status_queue, order_id, "PLACED", 1),
                )
                .await?;
            transaction.commit().await?;
        }
        Ok(())
    }

    /// Starts the outbox relay, crashing as the plan says; returns its task
    /// and its crash counter.
    pub(crate) fn start_relay(&self, shutdown: CancellationToken) -> (JoinHandle<()>, Arc<Faults>) {
        let faults = self.plan.relay_faults();
        let relay = OutboxRelay::new(self.outbox.clone(), SqsPublisher::new(self.client.clone()))
            .batch(20)
            .idle(Duration::from_millis(50))
            .retry(RetryPolicy::exponential(
                u32::MAX,
                Duration::from_millis(100),
                Duration::from_secs(1),
            ))
            .faults(Arc::clone(&faults));
        (
            tokio::spawn(async move { relay.run(shutdown).await }),
            faults,
        )
    }

    /// A transport on `queue` that duplicates deliveries as the plan says,
    /// and reorders each batch when `reorder` is set.
    pub(crate) fn transport(
        &self,
        queue: &str,
        reorder: bool,
    ) -> Arc<UnreliableTransport<SqsTransport>> {
        let transport = UnreliableTransport::new(
            SqsTransport::new(self.client.clone(), queue).with_ackbox_extensions(),
        )
        .duplicating(self.plan.duplicate_probability);
        Arc::new(if reorder {
            transport.reordering()
        } else {
            transport
        })
    }

    /// Every event published and no message waiting, in flight or delayed.
    pub(crate) async fn quiet(&self) -> anyhow::Result<bool> {
        Ok(self.outbox.backlog().await?.unpublished == 0
            && drained(&self.client, &self.payments_queue).await?
            && drained(&self.client, &self.status_queue).await?)
    }

    /// Replays history: the first orders' events, as a replay tool sends
    /// them — new messages marked with the replay attribute. Returns how
    /// many orders were replayed.
    pub(crate) async fn replay(&self) -> anyhow::Result<u64> {
        let replay = MessageAttributeValue::builder()
            .data_type("String")
            .string_value("true")
            .build()?;
        let replayed = self.plan.replayed_orders;
        for order_id in 1..=replayed {
            self.client
                .send_message()
                .queue_url(&self.payments_queue)
                .message_body(serde_json::to_string(&OrderPlaced {
                    order_id,
                    cents: cents(order_id),
                })?)
                .message_attributes(REPLAY_ATTRIBUTE, replay.clone())
                .send()
                .await?;
            let old = StatusChanged {
                order_id,
                status: "PLACED".into(),
                version: 1,
            };
            self.client
                .send_message()
                .queue_url(&self.status_queue)
                .message_body(serde_json::to_string(&old)?)
                .message_attributes(REPLAY_ATTRIBUTE, replay.clone())
                .send()
                .await?;
        }
        Ok(replayed)
    }

    /// Stops the broker.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.broker.stop().await?;
        Ok(())
    }
}

async fn create_queue(
    client: &Client,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> anyhow::Result<String> {
    let mut request = client.create_queue().queue_name(name);
    for (attribute, value) in attributes {
        request = request.attributes(attribute.clone(), value);
    }
    request
        .send()
        .await?
        .queue_url
        .context("CreateQueue returned no URL")
}

async fn drained(client: &Client, url: &str) -> anyhow::Result<bool> {
    let attributes = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await?
        .attributes
        .unwrap_or_default();
    Ok([
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ]
    .iter()
    .all(|name| attributes.get(name).is_some_and(|count| count == "0")))
}
