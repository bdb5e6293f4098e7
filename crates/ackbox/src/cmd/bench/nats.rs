//! NATS JetStream as a benchmark target: a work-queue stream on file
//! storage, publishes counted when the stream acknowledged them, a durable
//! pull consumer fetching up to 10 and acknowledging each. JetStream
//! acknowledges a publish before its write reaches the disk (it fsyncs on
//! an interval), so its figures promise less than ackbox's.

use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::context::Context as JetStream;
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use bytes::Bytes;
use futures_util::StreamExt;

use super::target::{Consumer, Producer, Target};

/// What the numbers promise.
pub(super) const DURABILITY: &str = "file storage, acknowledged before fsync (sync every 2 min)";

/// One stream and its durable consumer.
#[derive(Debug)]
pub(super) struct NatsTarget {
    jetstream: JetStream,
    stream: String,
    consumer: PullConsumer,
}

impl NatsTarget {
    /// Creates stream `name` on the server at `url`.
    pub(super) async fn create(url: &str, name: &str) -> anyhow::Result<Self> {
        let client = async_nats::connect(url)
            .await
            .with_context(|| format!("connecting to NATS at {url}"))?;
        let jetstream = async_nats::jetstream::new(client);
        let stream = jetstream
            .create_stream(stream::Config {
                name: name.to_owned(),
                subjects: vec![name.to_owned()],
                retention: RetentionPolicy::WorkQueue,
                storage: StorageType::File,
                ..stream::Config::default()
            })
            .await
            .map_err(|error| anyhow::anyhow!("creating stream {name}: {error}"))?;
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(format!("{name}_bench")),
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(60),
                max_ack_pending: 10_000,
                ..pull::Config::default()
            })
            .await
            .map_err(|error| anyhow::anyhow!("creating the consumer of {name}: {error}"))?;
        Ok(Self {
            jetstream,
            stream: name.to_owned(),
            consumer,
        })
    }
}

impl Target for NatsTarget {
    type Producer = NatsProducer;
    type Consumer = NatsConsumer;

    async fn producer(&self) -> anyhow::Result<NatsProducer> {
        Ok(NatsProducer {
            jetstream: self.jetstream.clone(),
            subject: self.stream.clone(),
        })
    }

    async fn consumer(&self) -> anyhow::Result<NatsConsumer> {
        Ok(NatsConsumer {
            consumer: self.consumer.clone(),
        })
    }

    async fn remove(&self) -> anyhow::Result<()> {
        self.jetstream
            .delete_stream(&self.stream)
            .await
            .map(drop)
            .map_err(|error| anyhow::anyhow!("deleting stream {}: {error}", self.stream))
    }
}

/// Publishes a batch, then awaits every acknowledgement.
#[derive(Debug, Clone)]
pub(super) struct NatsProducer {
    jetstream: JetStream,
    subject: String,
}

impl Producer for NatsProducer {
    async fn send(&self, bodies: &[Bytes]) -> anyhow::Result<u64> {
        let mut acks = Vec::with_capacity(bodies.len());
        for body in bodies {
            acks.push(
                self.jetstream
                    .publish(self.subject.clone(), body.clone())
                    .await?,
            );
        }
        let mut stored = 0;
        for ack in acks {
            ack.await?;
            stored += 1;
        }
        Ok(stored)
    }
}

/// Fetches up to 10 from the durable consumer.
#[derive(Debug)]
pub(super) struct NatsConsumer {
    consumer: PullConsumer,
}

impl Consumer for NatsConsumer {
    async fn receive(&mut self, wait: Duration) -> anyhow::Result<Vec<Bytes>> {
        // Whatever is there at once; else the first message to arrive (a
        // batch of 10 with a deadline would wait for all 10 or the deadline).
        let bodies = self.pull(10, None).await?;
        if !bodies.is_empty() {
            return Ok(bodies);
        }
        self.pull(1, Some(wait)).await
    }
}

impl NatsConsumer {
    async fn pull(&self, max: usize, wait: Option<Duration>) -> anyhow::Result<Vec<Bytes>> {
        let mut batch = match wait {
            None => self.consumer.fetch().max_messages(max).messages().await,
            Some(wait) => {
                self.consumer
                    .batch()
                    .max_messages(max)
                    .expires(wait.max(Duration::from_millis(100)))
                    .messages()
                    .await
            }
        }
        .map_err(|error| anyhow::anyhow!("fetching: {error}"))?;
        let mut bodies = Vec::with_capacity(max);
        while let Some(message) = batch.next().await {
            let message = message.map_err(|error| anyhow::anyhow!("fetching: {error}"))?;
            message
                .ack()
                .await
                .map_err(|error| anyhow::anyhow!("acknowledging: {error}"))?;
            bodies.push(message.payload.clone());
        }
        Ok(bodies)
    }
}
