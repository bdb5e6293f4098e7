//! NATS JetStream as a transport, through `async-nats` (feature `nats`).
//!
//! A work-queue stream (file storage) with a durable pull consumer:
//! `AckWait` is the lease, `+WPI` (ack progress) the heartbeat, `-NAK` with
//! a delay the backoff. Dead letters go to a second stream, `NAME_DLQ`, as
//! copies with the failure in `Ackbox-Failure-*` headers, and the original is
//! terminated (`+TERM`). The delivery limit is enforced here rather than by
//! `MaxDeliver`, because a message that reaches `MaxDeliver` is silently
//! never delivered again: here, a delivery past the limit is dead-lettered
//! with its count instead of handed out.
//!
//! The message id is the publisher's `Nats-Msg-Id` (the outbox relay sets
//! the event id, so the stream's duplicate window drops a republished
//! event), or `Ackbox-Message-Id` on a redriven copy, or the stream and
//! sequence. JetStream would take an acknowledgement after `AckWait` ran out
//! and the message went to another consumer, so the transport also keeps the
//! lease, slightly shorter than the server's, and refuses a late one.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::context::Context;
use async_nats::jetstream::message::{AckKind, PublishMessage};
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;

use crate::error::{Failure, TransportError};
use crate::lease::Leases;
use crate::message::{Delivery, Message};
use crate::outbox::{EVENT_ID_ATTRIBUTE, PendingEvent, Publisher};
use crate::transport::{QueueSettings, Transport};

/// Header with a dead-lettered copy's failure class.
pub const FAILURE_CLASS_HEADER: &str = "Ackbox-Failure-Class";
/// Header with a dead-lettered copy's failure message.
pub const FAILURE_MESSAGE_HEADER: &str = "Ackbox-Failure-Message";
/// Header with the message id a copy keeps (a dead letter, a redrive).
pub const MESSAGE_ID_HEADER: &str = "Ackbox-Message-Id";
/// Header with the message's group: the publisher sets it from the outbox
/// event's group, and dead-lettered copies keep it.
pub const GROUP_ID_HEADER: &str = "Ackbox-Group-Id";
/// Header with the deliveries a dead-lettered copy had.
pub const DELIVERIES_HEADER: &str = "Ackbox-Deliveries";
const PUBLISH_DEDUP_HEADER: &str = "Nats-Msg-Id";
/// Publishes in flight at once, well under the client's bound.
const PUBLISH_CHUNK: usize = 1_000;
const FOUR_DAYS: Duration = Duration::from_secs(4 * 24 * 3_600);
/// JetStream's duplicate window for published message ids.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// How the stream, its dead-letter stream and the consumer are declared.
#[derive(Debug, Clone)]
pub struct NatsQueue {
    stream: String,
    lease: Duration,
    max_deliveries: u32,
    retention: Duration,
}

impl NatsQueue {
    /// Stream `stream` (its subject has the same name) with a 30 s lease,
    /// 10 deliveries before dead-lettering and four days' retention.
    pub fn new(stream: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            lease: Duration::from_secs(30),
            max_deliveries: 10,
            retention: FOUR_DAYS,
        }
    }

    /// The consumer's `AckWait`.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Deliveries before a message is dead-lettered (at least 1).
    pub fn max_deliveries(mut self, max_deliveries: u32) -> Self {
        self.max_deliveries = max_deliveries.max(1);
        self
    }

    /// The streams' `MaxAge`.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The work stream's name, which is also its subject.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The dead-letter stream's name, which is also its subject.
    pub fn dead_letter_stream(&self) -> String {
        format!("{}_DLQ", self.stream)
    }

    /// The durable consumer's name.
    pub fn consumer(&self) -> String {
        format!("{}_worker", self.stream)
    }

    fn stream_config(&self, name: String) -> stream::Config {
        stream::Config {
            subjects: vec![name.clone()],
            name,
            retention: RetentionPolicy::WorkQueue,
            storage: StorageType::File,
            max_age: self.retention,
            duplicate_window: DUPLICATE_WINDOW,
            ..stream::Config::default()
        }
    }

    /// Creates the streams and the consumer if they do not exist.
    pub async fn declare(&self, jetstream: &Context) -> Result<PullConsumer, TransportError> {
        jetstream
            .get_or_create_stream(self.stream_config(self.dead_letter_stream()))
            .await
            .map_err(|error| TransportError::new("stream create", error))?;
        let stream = jetstream
            .get_or_create_stream(self.stream_config(self.stream.clone()))
            .await
            .map_err(|error| TransportError::new("stream create", error))?;
        stream
            .get_or_create_consumer(
                &self.consumer(),
                pull::Config {
                    durable_name: Some(self.consumer()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: self.lease,
                    // Enforced by the transport, which dead-letters instead.
                    max_deliver: -1,
                    max_ack_pending: 10_000,
                    ..pull::Config::default()
                },
            )
            .await
            .map_err(|error| TransportError::new("consumer create", error))
    }
}

/// A JetStream work queue as a [`Transport`].
#[derive(Debug)]
pub struct NatsTransport {
    client: async_nats::Client,
    jetstream: Context,
    consumer: PullConsumer,
    queue: NatsQueue,
    /// Held deliveries: the reply subject acknowledgements go to, and what
    /// a dead-letter copy needs.
    leases: Leases<Held>,
}

#[derive(Debug, Clone)]
struct Held {
    reply: String,
    message: Message,
}

impl NatsTransport {
    /// Declares the queue on `client`'s JetStream and consumes it.
    pub async fn connect(
        client: async_nats::Client,
        queue: NatsQueue,
    ) -> Result<Self, TransportError> {
        let jetstream = async_nats::jetstream::new(client.clone());
        let consumer = queue.declare(&jetstream).await?;
        Ok(Self {
            client,
            jetstream,
            consumer,
            queue,
            leases: Leases::default(),
        })
    }

    /// The queue this transport consumes.
    pub fn queue(&self) -> &NatsQueue {
        &self.queue
    }

    /// The local lease ends before the server's `AckWait`, which started
    /// when the server sent the message, before it arrived here.
    fn local_lease(&self) -> Duration {
        self.queue
            .lease
            .saturating_sub((self.queue.lease / 10).min(Duration::from_secs(1)))
    }

    async fn fetch(
        &self,
        max: usize,
        wait: Option<Duration>,
    ) -> Result<Vec<async_nats::jetstream::Message>, TransportError> {
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
        .map_err(|error| TransportError::new("fetch", error))?;
        let mut messages = Vec::with_capacity(max);
        while let Some(message) = batch.next().await {
            messages.push(message.map_err(|error| TransportError::new("fetch", error))?);
        }
        Ok(messages)
    }

    fn hold(&self, received: async_nats::jetstream::Message) -> Result<Delivery, TransportError> {
        let info = received
            .info()
            .map_err(|error| TransportError::new("fetch", error))?;
        let (stream, sequence, delivered) =
            (info.stream.to_owned(), info.stream_sequence, info.delivered);
        let reply = received
            .reply
            .as_ref()
            .map(ToString::to_string)
            .ok_or_else(|| TransportError::new("fetch", "a message without a reply subject"))?;
        let headers = received.headers.clone();
        let header = |name: &str| {
            headers
                .as_ref()
                .and_then(|headers| headers.get(name))
                .map(|value| value.as_str().to_owned())
        };
        let id = header(PUBLISH_DEDUP_HEADER)
            .or_else(|| header(MESSAGE_ID_HEADER))
            .unwrap_or_else(|| format!("{stream}:{sequence}"));
        let attributes: BTreeMap<String, String> = headers
            .iter()
            .flat_map(|headers| headers.iter())
            .filter(|(name, _)| {
                let name = name.to_string();
                !name.starts_with("Nats-") && !name.starts_with("Ackbox-")
            })
            .filter_map(|(name, values)| {
                values
                    .last()
                    .map(|value| (name.to_string(), value.as_str().to_owned()))
            })
            .collect();
        let message = Message {
            id,
            body: String::from_utf8_lossy(&received.payload).into_owned(),
            attributes,
            receive_count: u32::try_from(delivered.max(1)).unwrap_or(u32::MAX),
            group_id: header(GROUP_ID_HEADER),
        };
        self.leases.hold(
            reply.clone(),
            Held {
                reply: reply.clone(),
                message: message.clone(),
            },
            self.local_lease(),
        );
        Ok(Delivery {
            message,
            token: reply,
        })
    }

    async fn send(&self, reply: &str, kind: AckKind) -> Result<(), TransportError> {
        self.client
            .publish(reply.to_owned(), Bytes::from(kind))
            .await
            .map_err(|error| TransportError::new("ack", error))
    }

    async fn flush(&self) -> Result<(), TransportError> {
        self.client
            .flush()
            .await
            .map_err(|error| TransportError::new("flush", error))
    }

    async fn dead_letter_held(&self, held: Held, failure: &Failure) -> Result<(), TransportError> {
        let mut headers = HeaderMap::new();
        for (name, value) in &held.message.attributes {
            headers.insert(name.as_str(), value.as_str());
        }
        headers.insert(MESSAGE_ID_HEADER, held.message.id.as_str());
        if let Some(group_id) = &held.message.group_id {
            headers.insert(GROUP_ID_HEADER, group_id.as_str());
        }
        headers.insert(FAILURE_CLASS_HEADER, failure.class.as_str());
        headers.insert(FAILURE_MESSAGE_HEADER, failure.message.as_str());
        headers.insert(
            DELIVERIES_HEADER,
            held.message.receive_count.to_string().as_str(),
        );
        self.jetstream
            .send_publish(
                self.queue.dead_letter_stream(),
                PublishMessage::build()
                    .payload(Bytes::from(held.message.body.clone()))
                    .headers(headers),
            )
            .await
            .map_err(|error| TransportError::new("dead-letter publish", error))?
            .await
            .map_err(|error| TransportError::new("dead-letter publish", error))?;
        self.send(&held.reply, AckKind::Term).await?;
        self.flush().await
    }
}

#[async_trait]
impl Transport for NatsTransport {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, TransportError> {
        let max = max.max(1);
        // Take what is there at once; otherwise wait for one message (a
        // request for more would hold deliveries nobody reads if it is
        // abandoned), then take what came with it.
        let mut received = self.fetch(max, None).await?;
        if received.is_empty() {
            received = self.fetch(1, Some(wait)).await?;
            if !received.is_empty() && max > 1 {
                received.extend(self.fetch(max - 1, None).await?);
            }
        }
        let mut deliveries = Vec::with_capacity(received.len());
        for message in received {
            let delivery = self.hold(message)?;
            let attempt = delivery.message.receive_count;
            if attempt > self.queue.max_deliveries {
                let held = self.leases.take(&delivery.token, "dead-letter")?;
                let failure = Failure {
                    class: "MaxDeliveriesExceeded".into(),
                    message: format!(
                        "delivered {attempt} times; the limit is {}",
                        self.queue.max_deliveries
                    ),
                };
                if let Err(error) = self.dead_letter_held(held, &failure).await {
                    tracing::warn!(message_id = %delivery.message.id, %error, "could not dead-letter a message past its delivery limit");
                }
                continue;
            }
            deliveries.push(delivery);
        }
        Ok(deliveries)
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), TransportError> {
        let held = self.leases.take(&delivery.token, "ack")?;
        self.send(&held.reply, AckKind::Ack).await?;
        self.flush().await
    }

    async fn ack_batch(&self, deliveries: &[Delivery]) -> Vec<Result<(), TransportError>> {
        let mut results = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let result = match self.leases.take(&delivery.token, "ack") {
                Ok(held) => self.send(&held.reply, AckKind::Ack).await,
                Err(error) => Err(error),
            };
            results.push(result);
        }
        if let Err(error) = self.flush().await {
            let detail = error.to_string();
            for result in &mut results {
                if result.is_ok() {
                    *result = Err(TransportError::new("ack", &detail));
                }
            }
        }
        results
    }

    async fn extend(&self, delivery: &Delivery, _lease: Duration) -> Result<(), TransportError> {
        // `+WPI` restarts the server's AckWait; the lease is that long.
        let held = self
            .leases
            .extend(&delivery.token, self.local_lease(), "extend")?;
        self.send(&held.reply, AckKind::Progress).await?;
        self.flush().await
    }

    async fn retry(
        &self,
        delivery: &Delivery,
        delay: Duration,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        let held = self.leases.take(&delivery.token, "retry")?;
        tracing::debug!(message_id = %held.message.id, class = %failure.class, ?delay, "nak with delay");
        self.send(&held.reply, AckKind::Nak(Some(delay))).await?;
        self.flush().await
    }

    async fn dead_letter(
        &self,
        delivery: &Delivery,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        let held = self.leases.take(&delivery.token, "dead-letter")?;
        self.dead_letter_held(held, failure).await
    }

    async fn release(&self, delivery: &Delivery) -> Result<(), TransportError> {
        let held = self.leases.take(&delivery.token, "release")?;
        self.send(&held.reply, AckKind::Nak(None)).await?;
        self.flush().await
    }

    async fn settings(&self) -> Result<QueueSettings, TransportError> {
        let retention = self.queue.retention.as_secs();
        Ok(QueueSettings {
            queue_name: self.queue.stream().to_owned(),
            dead_letter_queue: true,
            ordered_groups: false,
            lease: self.queue.lease,
            max_deliveries: Some(self.queue.max_deliveries),
            redelivery_horizon: Duration::from_secs(2 * retention),
            horizon_explanation: format!(
                "the stream's MaxAge {retention} s + the dead-letter stream's MaxAge {retention} s, \
                 since a redrive can bring a message back"
            ),
        })
    }

    /// The group travels in a header the publisher sets; the broker does
    /// not hold a group to one consumer, so order across processes needs a
    /// single consumer process.
    fn carries_groups(&self) -> bool {
        true
    }
}

/// Publishes outbox events to JetStream subjects (the event's destination)
/// and waits for each stream's acknowledgement. The event id is the
/// `Nats-Msg-Id`, so the stream drops an event published twice within its
/// duplicate window, and the `ackbox.event_id` header.
#[derive(Debug, Clone)]
pub struct NatsPublisher {
    jetstream: Context,
}

impl NatsPublisher {
    /// A publisher on `client`'s JetStream.
    pub fn new(client: async_nats::Client) -> Self {
        Self {
            jetstream: async_nats::jetstream::new(client),
        }
    }
}

#[async_trait]
impl Publisher for NatsPublisher {
    async fn publish(&self, events: &[PendingEvent]) -> Vec<Result<(), String>> {
        let mut results = Vec::with_capacity(events.len());
        // Publish a chunk, then wait for its acknowledgements: the client
        // bounds how many publishes may await theirs.
        for chunk in events.chunks(PUBLISH_CHUNK) {
            results.extend(self.publish_chunk(chunk).await);
        }
        results
    }
}

impl NatsPublisher {
    async fn publish_chunk(&self, events: &[PendingEvent]) -> Vec<Result<(), String>> {
        let mut acks = Vec::with_capacity(events.len());
        for pending in events {
            let event = &pending.event;
            let mut headers = HeaderMap::new();
            for (name, value) in &event.attributes {
                headers.insert(name.as_str(), value.as_str());
            }
            headers.insert(EVENT_ID_ATTRIBUTE, pending.event_id.as_str());
            if let Some(group_id) = &event.group_id {
                headers.insert(GROUP_ID_HEADER, group_id.as_str());
            }
            let publish = PublishMessage::build()
                .payload(Bytes::from(event.body.clone()))
                .headers(headers)
                .message_id(&pending.event_id);
            acks.push(
                self.jetstream
                    .send_publish(event.destination.clone(), publish)
                    .await,
            );
        }
        let mut results = Vec::with_capacity(events.len());
        for ack in acks {
            results.push(match ack {
                Err(error) => Err(error.to_string()),
                Ok(pending) => pending.await.map(drop).map_err(|error| error.to_string()),
            });
        }
        results
    }
}
