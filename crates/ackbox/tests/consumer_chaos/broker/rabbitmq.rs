//! RabbitMQ (`ACKBOX_TEST_AMQP_URL`): quorum queues of the trial's own on
//! the machine's shared broker, which is never killed. The queues expire an
//! hour after their last use should a run die before it deletes them.

use std::time::Duration;

use ackbox_consumer::TransportError;
use ackbox_consumer::rabbitmq::{RabbitMqQueue, RabbitMqTransport};
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::{Broker, Depth, Endpoint, LEASE, MAX_DELIVERIES, QueueAddress, RETRY_CAP, unique_name};
use crate::workload::{Outgoing, Workload};

pub(crate) const URL_VARIABLE: &str = "ACKBOX_TEST_AMQP_URL";
/// Deliveries RabbitMQ pushes ahead of a consumer: its concurrency.
const PREFETCH: u16 = 16;
/// Publishes awaiting their confirm at once.
const IN_FLIGHT: usize = 500;

pub(crate) struct RabbitMqBroker {
    url: String,
    connection: Connection,
    /// In confirm mode: a publish returns once the broker stored it.
    channel: Channel,
    queues: Vec<RabbitMqQueue>,
}

/// How the driver and every consumer process declare queue `name`: the
/// same arguments everywhere, or the broker refuses the second declaration.
pub(crate) fn queue(name: &str) -> RabbitMqQueue {
    RabbitMqQueue::new(name)
        .lease(LEASE)
        .max_deliveries(MAX_DELIVERIES)
        .prefetch(PREFETCH)
        .expires(Duration::from_secs(3_600))
}

/// A consumer process's transport, on a connection of its own.
pub(crate) async fn transport(
    url: &str,
    address: &QueueAddress,
) -> Result<RabbitMqTransport, TransportError> {
    RabbitMqTransport::connect(url, queue(&address.name)).await
}

impl RabbitMqBroker {
    /// `None` (after a "skipped" line) when `ACKBOX_TEST_AMQP_URL` is unset.
    pub(crate) async fn connect() -> Option<Self> {
        let Ok(url) = std::env::var(URL_VARIABLE) else {
            println!(
                "skipped: {URL_VARIABLE} is not set, so the RabbitMQ chaos trial does not run"
            );
            return None;
        };
        let connection = Connection::connect(&url, ConnectionProperties::default())
            .await
            .expect("RabbitMQ is reachable at ACKBOX_TEST_AMQP_URL");
        let channel = connection.create_channel().await.expect("a channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        Some(Self {
            url,
            connection,
            channel,
            queues: Vec::new(),
        })
    }

    /// Ready messages in `name`, 0 if it does not exist: asked on a channel
    /// of its own, since asking about a missing queue closes the channel.
    async fn ready_in(&self, name: &str) -> Option<u64> {
        let channel = self.connection.create_channel().await.ok()?;
        let declared = channel
            .queue_declare(
                name.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        let _ = channel.close(200, "counted".into()).await;
        Some(declared.map_or(0, |queue| u64::from(queue.message_count())))
    }
}

/// The retry tiers the consumers' backoff can reach (the transport
/// declares one when first needed): its delays never exceed the cap.
fn used_retry_queues(queue: &RabbitMqQueue) -> Vec<String> {
    let longest = queue.retry_queue(RETRY_CAP);
    let mut names = Vec::new();
    for name in queue.retry_queues() {
        let last = name == longest;
        names.push(name);
        if last {
            break;
        }
    }
    names
}

impl Broker for RabbitMqBroker {
    fn endpoint(&self) -> Endpoint {
        Endpoint::RabbitMq(self.url.clone())
    }

    fn keeps_group_order(&self) -> bool {
        false
    }

    async fn declare(&mut self, workload: Workload) -> QueueAddress {
        assert!(
            !workload.fifo(),
            "the RabbitMQ transport has no message groups yet"
        );
        let queue = queue(&unique_name("ackbox_chaos", workload));
        queue
            .declare(&self.channel)
            .await
            .expect("the queues are declared");
        let address = QueueAddress {
            workload,
            name: queue.name().to_owned(),
        };
        self.queues.push(queue);
        address
    }

    async fn publish(&self, queue: &QueueAddress, messages: &[Outgoing]) {
        for (chunk_index, chunk) in messages.chunks(IN_FLIGHT).enumerate() {
            let mut confirms = Vec::with_capacity(chunk.len());
            for (index, message) in chunk.iter().enumerate() {
                // A message id of its own: a producer duplicate is another
                // message, as it would be from a real producer.
                let id = format!("{}-{}", queue.name, chunk_index * IN_FLIGHT + index);
                confirms.push(
                    self.channel
                        .basic_publish(
                            "".into(),
                            queue.name.as_str().into(),
                            BasicPublishOptions::default(),
                            message.body.as_bytes(),
                            BasicProperties::default()
                                .with_message_id(id.as_str().into())
                                .with_delivery_mode(2),
                        )
                        .await
                        .expect("basic.publish"),
                );
            }
            for confirm in confirms {
                assert!(
                    confirm.await.expect("a publisher confirm").is_ack(),
                    "RabbitMQ refused a publish"
                );
            }
        }
    }

    /// Unacknowledged deliveries are invisible to AMQP: `held` counts only
    /// retries waiting in their tier queues. The trial checks again once
    /// every consumer has stopped, when the broker has taken everything back.
    async fn depths(&self) -> Vec<Depth> {
        let mut depths = Vec::new();
        for queue in &self.queues {
            let mut waiting = 0u64;
            for retry_queue in used_retry_queues(queue) {
                waiting =
                    waiting.saturating_add(self.ready_in(&retry_queue).await.unwrap_or(u64::MAX));
            }
            depths.push(Depth {
                queue: queue.name().to_owned(),
                ready: self.ready_in(queue.name()).await.unwrap_or(u64::MAX),
                held: waiting,
            });
            let dead_letters = queue.dead_letter_queue();
            depths.push(Depth {
                ready: self.ready_in(&dead_letters).await.unwrap_or(u64::MAX),
                queue: dead_letters,
                held: 0,
            });
        }
        depths
    }

    fn can_crash(&self) -> bool {
        false
    }

    async fn crash_and_restart(&mut self) {
        unreachable!("a shared broker is never killed");
    }

    async fn remove(self) {
        for queue in &self.queues {
            let mut names = vec![queue.name().to_owned(), queue.dead_letter_queue()];
            names.extend(queue.retry_queues());
            for name in names {
                // Retry queues exist only once used, and an error closes
                // its channel: one channel per queue.
                if let Ok(channel) = self.connection.create_channel().await {
                    let _ = channel
                        .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                        .await;
                }
            }
        }
        let _ = self.connection.close(200, "trial done".into()).await;
    }
}
