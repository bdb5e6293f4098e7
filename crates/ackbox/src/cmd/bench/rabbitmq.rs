//! RabbitMQ as a benchmark target, as durable as ackbox: a quorum queue,
//! persistent messages, publisher confirms awaited before a batch counts,
//! manual acknowledgements (one `multiple` ack per batch of up to 10, with a
//! prefetch of 10).

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::target::{Consumer, Producer, Target};

/// What the numbers promise.
pub(super) const DURABILITY: &str = "quorum queue, persistent messages, publisher confirms";

/// One quorum queue.
#[derive(Debug)]
pub(super) struct RabbitMqTarget {
    url: String,
    queue: String,
}

impl RabbitMqTarget {
    /// Declares quorum queue `queue` on the broker at `url`.
    pub(super) async fn create(url: &str, queue: &str) -> anyhow::Result<Self> {
        let target = Self {
            url: url.to_owned(),
            queue: queue.to_owned(),
        };
        let (_connection, channel) = target.channel().await?;
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("quorum")),
        );
        channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                arguments,
            )
            .await
            .with_context(|| format!("declaring RabbitMQ queue {queue}"))?;
        Ok(target)
    }

    async fn channel(&self) -> anyhow::Result<(Connection, Channel)> {
        let connection = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .with_context(|| format!("connecting to RabbitMQ at {}", self.url))?;
        let channel = connection.create_channel().await?;
        Ok((connection, channel))
    }
}

impl Target for RabbitMqTarget {
    type Producer = RabbitMqProducer;
    type Consumer = RabbitMqConsumer;

    async fn producer(&self) -> anyhow::Result<RabbitMqProducer> {
        let (connection, channel) = self.channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(RabbitMqProducer {
            _connection: std::sync::Arc::new(connection),
            channel,
            queue: self.queue.clone(),
        })
    }

    async fn consumer(&self) -> anyhow::Result<RabbitMqConsumer> {
        let (connection, channel) = self.channel().await?;
        channel.basic_qos(10, BasicQosOptions::default()).await?;
        let consumer = channel
            .basic_consume(
                self.queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(RabbitMqConsumer {
            _connection: connection,
            channel,
            deliveries: consumer,
        })
    }

    async fn remove(&self) -> anyhow::Result<()> {
        let (_connection, channel) = self.channel().await?;
        channel
            .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await?;
        Ok(())
    }
}

/// A confirming channel of its own connection.
#[derive(Debug, Clone)]
pub(super) struct RabbitMqProducer {
    _connection: std::sync::Arc<Connection>,
    channel: Channel,
    queue: String,
}

impl Producer for RabbitMqProducer {
    async fn send(&self, bodies: &[Bytes]) -> anyhow::Result<u64> {
        let mut confirms = Vec::with_capacity(bodies.len());
        for body in bodies {
            confirms.push(
                self.channel
                    .basic_publish(
                        "".into(),
                        self.queue.as_str().into(),
                        BasicPublishOptions::default(),
                        body,
                        BasicProperties::default().with_delivery_mode(2),
                    )
                    .await?,
            );
        }
        let mut stored = 0;
        for confirm in confirms {
            if confirm.await?.is_ack() {
                stored += 1;
            }
        }
        if stored == 0 && !bodies.is_empty() {
            bail!("RabbitMQ refused the whole batch");
        }
        Ok(stored)
    }
}

/// Deliveries pushed by the broker, up to the prefetch, read in order (one
/// `multiple` acknowledgement covers every earlier tag).
#[derive(Debug)]
pub(super) struct RabbitMqConsumer {
    _connection: Connection,
    channel: Channel,
    deliveries: lapin::Consumer,
}

impl Consumer for RabbitMqConsumer {
    async fn receive(&mut self, wait: Duration) -> anyhow::Result<Vec<Bytes>> {
        let first = match tokio::time::timeout(wait, self.deliveries.next()).await {
            Ok(Some(delivery)) => delivery?,
            Ok(None) => bail!("the broker cancelled the consumer"),
            Err(_) => return Ok(Vec::new()),
        };
        let mut batch = vec![first];
        while batch.len() < 10 {
            match self.deliveries.next().now_or_never() {
                Some(Some(delivery)) => batch.push(delivery?),
                _ => break,
            }
        }
        let last = batch
            .last()
            .map(|delivery| delivery.delivery_tag)
            .unwrap_or_default();
        self.channel
            .basic_ack(last, BasicAckOptions { multiple: true })
            .await?;
        Ok(batch
            .into_iter()
            .map(|delivery| Bytes::from(delivery.data))
            .collect())
    }
}
