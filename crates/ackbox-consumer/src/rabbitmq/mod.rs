//! RabbitMQ as a transport, through `lapin` (feature `rabbitmq`).
//!
//! The queue is a quorum queue (replicated, fsynced before the publisher
//! confirm) with a delivery limit and a dead-letter queue beside it:
//!
//! | queue            | role                                                         |
//! |------------------|--------------------------------------------------------------|
//! | `NAME`           | the work; `x-delivery-limit` dead-letters crash loops         |
//! | `NAME.retry.Nms` | transient failures wait here (per-message TTL), then return |
//! | `NAME.dlq`       | dead letters, with the failure in `x-ackbox-failure-*` headers |
//!
//! RabbitMQ holds an unacknowledged delivery until its channel closes, so
//! the transport keeps the lease itself: a delivery neither settled nor
//! extended within the lease is given back (`basic.nack` with requeue), and
//! its late acknowledgement is refused rather than sent. Prefetch is the
//! number of deliveries the broker may push ahead; set it to the consumer's
//! concurrency.
//!
//! A retry is a confirmed publish of a copy to a retry queue with the delay
//! as its expiration, followed by an acknowledgement of the original; a
//! crash between the two delivers the message twice, which the inbox
//! absorbs. The copy carries the attempts so far (`x-ackbox-attempts`), so
//! the attempt count survives the copy; quorum queues add
//! `x-delivery-count` for deliveries given back.
//!
//! Per-message TTL expires only at the head of a queue, so one retry queue
//! for every delay would hold a 1 s retry behind a 5 min one. Delays are
//! instead spread over tiers by powers of two: `NAME.retry.Nms` holds the
//! delays above N/2 ms up to N ms (N from 128; the queue is declared when
//! first needed). A retry then waits behind delays of its own tier only:
//! never less than its own delay, and less than twice it.
//!
//! Long because the lease RabbitMQ does not keep (its timer, giving back,
//! refusing a late acknowledgement) and reconnecting belong with the channel
//! they act on; the queues' declaration is in `queue.rs`.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use async_trait::async_trait;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use sha2::{Digest, Sha256};

use crate::error::{Failure, TransportError};
use crate::lease::Leases;
use crate::message::{Delivery, Message};
use crate::outbox::{EVENT_ID_ATTRIBUTE, PendingEvent, Publisher};
use crate::transport::{QueueSettings, Transport};

mod queue;

pub use queue::RabbitMqQueue;
use queue::{retry_tier_ms, string_value};

/// Header with the message's group: the publisher sets it from the outbox
/// event's group, and retried and dead-lettered copies keep it.
pub const GROUP_ID_HEADER: &str = "x-ackbox-group-id";
/// Header with the attempts a message had before this copy was published.
pub const ATTEMPTS_HEADER: &str = "x-ackbox-attempts";
/// Header with the failure class of a retried or dead-lettered copy.
pub const FAILURE_CLASS_HEADER: &str = "x-ackbox-failure-class";
/// Header with the failure message of a retried or dead-lettered copy.
pub const FAILURE_MESSAGE_HEADER: &str = "x-ackbox-failure-message";
/// Quorum queues count deliveries given back in this header.
const DELIVERY_COUNT_HEADER: &str = "x-delivery-count";
/// Headers the broker writes; a copy must not carry the original's.
const BROKER_HEADERS: [&str; 5] = [
    DELIVERY_COUNT_HEADER,
    "x-death",
    "x-first-death-exchange",
    "x-first-death-queue",
    "x-first-death-reason",
];
const PERSISTENT: u8 = 2;
/// A RabbitMQ queue as a [`Transport`]. Cheap to clone; the clones share
/// one connection. The connection closes when the last clone is dropped,
/// and the broker gives back what was not acknowledged.
#[derive(Clone)]
pub struct RabbitMqTransport {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RabbitMqTransport {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RabbitMqTransport")
            .field("queue", &self.inner.queue.name)
            .finish_non_exhaustive()
    }
}

struct Inner {
    url: String,
    queue: RabbitMqQueue,
    link: Mutex<Arc<Link>>,
    /// What the broker pushed, in order, waiting to be received.
    pushed: tokio::sync::Mutex<Pushed>,
    leases: Leases<Held>,
    generations: AtomicU64,
    /// Pushed by the broker, and settled since: the difference is what the
    /// broker counts as unacknowledged for this transport.
    delivered: Arc<AtomicU64>,
    settled: AtomicU64,
    /// Retry tiers (in milliseconds) whose queue this transport declared.
    retry_tiers: Mutex<HashSet<u64>>,
}

type Pushed = mpsc::UnboundedReceiver<lapin::Result<lapin::message::Delivery>>;

/// One connection's channels: deliveries and their acknowledgements on
/// one, confirmed publishes on the other.
struct Link {
    generation: u64,
    connection: Connection,
    deliveries: Channel,
    publisher: Channel,
}

/// What the transport keeps of a delivery to settle it.
#[derive(Clone)]
struct Held {
    link: Arc<Link>,
    tag: u64,
    message: Message,
    properties: BasicProperties,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let link = Arc::clone(&self.link.lock().expect("link lock poisoned"));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = link.connection.close(200, "transport dropped".into()).await;
            });
        }
    }
}

impl RabbitMqTransport {
    /// Connects to `url` (`amqp://user:password@host:5672/vhost`), declares
    /// the queues and starts consuming.
    pub async fn connect(url: &str, queue: RabbitMqQueue) -> Result<Self, TransportError> {
        let delivered = Arc::new(AtomicU64::new(0));
        let (link, pushed) = open(url, &queue, 0, &delivered).await?;
        let inner = Arc::new(Inner {
            url: url.to_owned(),
            queue,
            link: Mutex::new(link),
            pushed: tokio::sync::Mutex::new(pushed),
            leases: Leases::default(),
            generations: AtomicU64::new(0),
            delivered,
            settled: AtomicU64::new(0),
            retry_tiers: Mutex::default(),
        });
        spawn_lease_keeper(Arc::downgrade(&inner));
        Ok(Self { inner })
    }

    /// Closes the connection and waits until the broker has taken back
    /// whatever this transport still held (dropping the transport closes it
    /// too, but in the background: until then the broker may still push
    /// deliveries to it).
    pub async fn close(&self) -> Result<(), TransportError> {
        let link = Arc::clone(&self.inner.link.lock().expect("link lock poisoned"));
        link.connection
            .close(200, "transport closed".into())
            .await
            .map_err(|error| TransportError::new("connection.close", error))
    }

    /// The queue this transport consumes.
    pub fn queue(&self) -> &RabbitMqQueue {
        &self.inner.queue
    }

    /// Deliveries the broker pushed to this transport that are not settled
    /// yet (handed to the consumer, or waiting to be received).
    pub fn unsettled(&self) -> u64 {
        let delivered = self.inner.delivered.load(Ordering::Acquire);
        delivered.saturating_sub(self.inner.settled.load(Ordering::Acquire))
    }

    fn link(&self) -> Arc<Link> {
        Arc::clone(&self.inner.link.lock().expect("link lock poisoned"))
    }

    fn settle(&self) {
        self.inner.settled.fetch_add(1, Ordering::AcqRel);
    }

    /// Replaces a broken connection; the broker gave back what the old one
    /// held, so its leases are void.
    async fn reconnect(&self, pushed: &mut Pushed) -> Result<(), TransportError> {
        let generation = self.inner.generations.fetch_add(1, Ordering::AcqRel) + 1;
        let (link, fresh) = open(
            &self.inner.url,
            &self.inner.queue,
            generation,
            &self.inner.delivered,
        )
        .await?;
        self.inner.leases.clear();
        let given_back = self.unsettled();
        self.inner.settled.fetch_add(given_back, Ordering::AcqRel);
        *pushed = fresh;
        *self.inner.link.lock().expect("link lock poisoned") = link;
        tracing::warn!(queue = %self.inner.queue.name(), "reconnected to RabbitMQ; unacknowledged deliveries were given back");
        Ok(())
    }

    fn lease(&self, delivery: lapin::message::Delivery, link: &Arc<Link>) -> Delivery {
        let message = message_of(&delivery);
        let token = format!("{}:{}", link.generation, delivery.delivery_tag);
        self.inner.leases.hold(
            token.clone(),
            Held {
                link: Arc::clone(link),
                tag: delivery.delivery_tag,
                message: message.clone(),
                properties: delivery.properties,
            },
            self.inner.queue.lease,
        );
        Delivery { message, token }
    }

    /// The retry queue of `delay`'s tier, declared the first time this
    /// transport needs it.
    async fn declared_retry_queue(
        &self,
        link: &Link,
        delay: Duration,
    ) -> Result<String, TransportError> {
        let queue = &self.inner.queue;
        let tier = retry_tier_ms(delay);
        let name = queue.retry_queue_of_tier(tier);
        if !self.retry_tiers().contains(&tier) {
            queue.declare_retry_queue(&link.publisher, &name).await?;
            self.retry_tiers().insert(tier);
        }
        Ok(name)
    }

    fn retry_tiers(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.inner.retry_tiers.lock().expect("retry tiers poisoned")
    }

    /// Publishes a copy of `held` to `queue` with the failure and the
    /// attempts so far, waits for the broker's confirm, then acknowledges
    /// the original (or, if the copy failed, gives the original back).
    async fn move_to(
        &self,
        held: Held,
        queue: &str,
        expiration: Option<Duration>,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        let mut headers: BTreeMap<ShortString, AMQPValue> = held
            .properties
            .headers()
            .as_ref()
            .map(|table| table.inner().clone())
            .unwrap_or_default();
        for name in BROKER_HEADERS {
            headers.remove(name);
        }
        headers.insert(
            ATTEMPTS_HEADER.into(),
            AMQPValue::LongLongInt(i64::from(held.message.receive_count)),
        );
        headers.insert(FAILURE_CLASS_HEADER.into(), string_value(&failure.class));
        headers.insert(
            FAILURE_MESSAGE_HEADER.into(),
            string_value(&failure.message),
        );
        let mut properties = held
            .properties
            .clone()
            .with_headers(FieldTable::from(headers))
            .with_delivery_mode(PERSISTENT)
            .with_message_id(held.message.id.as_str().into());
        if let Some(delay) = expiration {
            properties = properties.with_expiration(delay.as_millis().to_string().into());
        }
        let published = publish_confirmed(
            &held.link.publisher,
            queue,
            held.message.body.as_bytes(),
            properties,
        )
        .await;
        match published {
            Ok(()) => self.acknowledge(&held).await,
            Err(error) => {
                // The lease is gone: give the original back rather than
                // leave it unacknowledged until the connection closes.
                if let Err(give_back) = self.give_back(&held).await {
                    tracing::warn!(message_id = %held.message.id, error = %give_back, "could not give back a message whose copy failed; it returns when the connection closes");
                }
                Err(error)
            }
        }
    }

    async fn acknowledge(&self, held: &Held) -> Result<(), TransportError> {
        let result = held
            .link
            .deliveries
            .basic_ack(held.tag, BasicAckOptions::default())
            .await
            .map_err(|error| TransportError::new("basic.ack", error));
        self.settle();
        result
    }

    async fn give_back(&self, held: &Held) -> Result<(), TransportError> {
        let result = held
            .link
            .deliveries
            .basic_nack(
                held.tag,
                BasicNackOptions {
                    multiple: false,
                    requeue: true,
                },
            )
            .await
            .map_err(|error| TransportError::new("basic.nack", error));
        self.settle();
        result
    }
}

/// Connects, declares the queues and starts consuming: the broker's pushes
/// are counted in `delivered` and wait in the returned channel.
async fn open(
    url: &str,
    queue: &RabbitMqQueue,
    generation: u64,
    delivered: &Arc<AtomicU64>,
) -> Result<(Arc<Link>, Pushed), TransportError> {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(|error| TransportError::new("connect", error))?;
    let deliveries = connection
        .create_channel()
        .await
        .map_err(|error| TransportError::new("channel.open", error))?;
    let publisher = connection
        .create_channel()
        .await
        .map_err(|error| TransportError::new("channel.open", error))?;
    publisher
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|error| TransportError::new("confirm.select", error))?;
    queue.declare(&publisher).await?;
    deliveries
        .basic_qos(queue.prefetch, BasicQosOptions::default())
        .await
        .map_err(|error| TransportError::new("basic.qos", error))?;
    let consumer = deliveries
        .basic_consume(
            queue.name.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|error| TransportError::new("basic.consume", error))?;
    let (push, pushed) = mpsc::unbounded_channel();
    let delivered = Arc::clone(delivered);
    // Deliveries are pushed by the delegate call itself, which lapin makes in
    // delivery order; the future it returns is spawned, and futures spawned
    // one per delivery would push them in whatever order they got to run.
    consumer.set_delegate(move |delivery: lapin::message::DeliveryResult| {
        let delivery = match delivery {
            Ok(Some(delivery)) => {
                delivered.fetch_add(1, Ordering::AcqRel);
                Some(Ok(delivery))
            }
            // The consumer was cancelled: nothing more comes.
            Ok(None) => None,
            Err(error) => Some(Err(error)),
        };
        if let Some(delivery) = delivery {
            // A closed receiver means the transport is gone or reconnected.
            let _ = push.send(delivery);
        }
        std::future::ready(())
    });
    let link = Arc::new(Link {
        generation,
        connection,
        deliveries,
        publisher,
    });
    Ok((link, pushed))
}

async fn publish_confirmed(
    channel: &Channel,
    queue: &str,
    body: &[u8],
    properties: BasicProperties,
) -> Result<(), TransportError> {
    let confirm = channel
        .basic_publish("".into(), queue.into(), MANDATORY, body, properties)
        .await
        .map_err(|error| TransportError::new("basic.publish", error))?
        .await
        .map_err(|error| TransportError::new("basic.publish", error))?;
    confirmed(confirm, queue).map_err(|detail| TransportError::new("basic.publish", detail))
}

/// Publishes are mandatory: a message no queue takes comes back (and fails)
/// instead of vanishing behind a positive confirm.
const MANDATORY: BasicPublishOptions = BasicPublishOptions {
    mandatory: true,
    immediate: false,
};

/// Whether the broker took the message: confirmed, and not returned as
/// unroutable.
fn confirmed(confirm: lapin::Confirmation, queue: &str) -> Result<(), String> {
    if !confirm.is_ack() {
        return Err(format!("the broker refused the message for {queue} (nack)"));
    }
    match confirm.take_message() {
        None => Ok(()),
        Some(returned) => Err(format!(
            "no queue {queue} took the message ({} {})",
            returned.reply_code, returned.reply_text
        )),
    }
}

/// Gives back deliveries whose leases ran out, until the transport is gone.
fn spawn_lease_keeper(inner: Weak<Inner>) {
    tokio::spawn(async move {
        loop {
            let period = match inner.upgrade() {
                Some(inner) => (inner.queue.lease / 10)
                    .clamp(Duration::from_millis(20), Duration::from_secs(1)),
                None => return,
            };
            tokio::time::sleep(period).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let transport = RabbitMqTransport { inner };
            for held in transport.inner.leases.expired() {
                tracing::debug!(message_id = %held.message.id, "lease ran out; giving the message back");
                if let Err(error) = transport.give_back(&held).await {
                    tracing::warn!(message_id = %held.message.id, %error, "could not give back a delivery whose lease ran out; it returns when the connection closes");
                }
            }
        }
    });
}

fn header<'a>(properties: &'a BasicProperties, name: &str) -> Option<&'a AMQPValue> {
    properties.headers().as_ref()?.inner().get(name)
}

fn header_number(properties: &BasicProperties, name: &str) -> u32 {
    let number = match header(properties, name) {
        Some(AMQPValue::LongLongInt(value)) => *value,
        Some(AMQPValue::LongInt(value)) => i64::from(*value),
        Some(AMQPValue::LongUInt(value)) => i64::from(*value),
        Some(AMQPValue::ShortInt(value)) => i64::from(*value),
        Some(AMQPValue::ShortUInt(value)) => i64::from(*value),
        Some(AMQPValue::ShortShortInt(value)) => i64::from(*value),
        Some(AMQPValue::ShortShortUInt(value)) => i64::from(*value),
        Some(AMQPValue::LongString(text)) => std::str::from_utf8(text.as_bytes())
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(0),
        _ => 0,
    };
    u32::try_from(number.max(0)).unwrap_or(u32::MAX)
}

fn message_of(delivery: &lapin::message::Delivery) -> Message {
    let properties = &delivery.properties;
    let body = String::from_utf8_lossy(&delivery.data).into_owned();
    let attributes: BTreeMap<String, String> = properties
        .headers()
        .as_ref()
        .map(|table| {
            table
                .inner()
                .iter()
                .filter(|(name, _)| !name.as_str().starts_with("x-"))
                .filter_map(|(name, value)| match value {
                    AMQPValue::LongString(text) => Some((
                        name.to_string(),
                        String::from_utf8_lossy(text.as_bytes()).into_owned(),
                    )),
                    AMQPValue::ShortString(text) => Some((name.to_string(), text.to_string())),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    // Without a publisher's message id, the body's digest keeps the id stable
    // across redeliveries (two identical bodies then share one).
    let id = properties.message_id().as_ref().map_or_else(
        || format!("sha256:{}", hex::encode(Sha256::digest(body.as_bytes()))),
        ToString::to_string,
    );
    let receive_count = header_number(properties, ATTEMPTS_HEADER)
        .saturating_add(header_number(properties, DELIVERY_COUNT_HEADER))
        .saturating_add(1);
    let group_id = match header(properties, GROUP_ID_HEADER) {
        Some(AMQPValue::LongString(text)) => {
            Some(String::from_utf8_lossy(text.as_bytes()).into_owned())
        }
        Some(AMQPValue::ShortString(text)) => Some(text.to_string()),
        _ => None,
    };
    Message {
        id,
        body,
        attributes,
        receive_count,
        group_id,
    }
}

#[async_trait]
impl Transport for RabbitMqTransport {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, TransportError> {
        let mut pushed = self.inner.pushed.lock().await;
        if !self.link().deliveries.status().connected() {
            self.reconnect(&mut pushed).await?;
        }
        let first = match tokio::time::timeout(wait, pushed.recv()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(Some(Ok(delivery))) => delivery,
            Ok(Some(Err(error))) => {
                self.reconnect(&mut pushed).await?;
                return Err(TransportError::new("basic.consume", error));
            }
            Ok(None) => {
                self.reconnect(&mut pushed).await?;
                return Ok(Vec::new());
            }
        };
        let link = self.link();
        let mut received = vec![first];
        while received.len() < max {
            match pushed.try_recv() {
                Ok(Ok(delivery)) => received.push(delivery),
                _ => break,
            }
        }
        drop(pushed);
        let mut deliveries = Vec::with_capacity(received.len());
        for delivery in received {
            let delivery = self.lease(delivery, &link);
            let attempt = delivery.message.receive_count;
            if attempt > self.inner.queue.max_deliveries {
                // A message copied for retry starts a new delivery count, so
                // the broker's limit alone would not stop a crash loop.
                let failure = Failure {
                    class: "MaxDeliveriesExceeded".into(),
                    message: format!(
                        "delivered {attempt} times; the limit is {}",
                        self.inner.queue.max_deliveries
                    ),
                };
                if let Err(error) = self.dead_letter(&delivery, &failure).await {
                    tracing::warn!(message_id = %delivery.message.id, %error, "could not dead-letter a message past its delivery limit");
                }
                continue;
            }
            deliveries.push(delivery);
        }
        Ok(deliveries)
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), TransportError> {
        let held = self.inner.leases.take(&delivery.token, "basic.ack")?;
        self.acknowledge(&held).await
    }

    async fn extend(&self, delivery: &Delivery, lease: Duration) -> Result<(), TransportError> {
        self.inner
            .leases
            .extend(&delivery.token, lease, "extend")
            .map(drop)
    }

    async fn retry(
        &self,
        delivery: &Delivery,
        delay: Duration,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        let held = self.inner.leases.take(&delivery.token, "retry")?;
        if delay.is_zero() {
            return self
                .move_to(held, &self.inner.queue.name, None, failure)
                .await;
        }
        match self.declared_retry_queue(&held.link, delay).await {
            Ok(retry_queue) => self.move_to(held, &retry_queue, Some(delay), failure).await,
            Err(error) => {
                if let Err(give_back) = self.give_back(&held).await {
                    tracing::warn!(message_id = %held.message.id, error = %give_back, "could not give back a message whose retry queue could not be declared; it returns when the connection closes");
                }
                Err(error)
            }
        }
    }

    async fn dead_letter(
        &self,
        delivery: &Delivery,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        let held = self.inner.leases.take(&delivery.token, "dead-letter")?;
        self.move_to(held, &self.inner.queue.dead_letter_queue(), None, failure)
            .await
    }

    async fn release(&self, delivery: &Delivery) -> Result<(), TransportError> {
        let held = self.inner.leases.take(&delivery.token, "release")?;
        self.give_back(&held).await
    }

    async fn settings(&self) -> Result<QueueSettings, TransportError> {
        let queue = &self.inner.queue;
        let retention = queue.retention.as_secs();
        let lease = queue.lease.as_secs();
        let max = queue.max_deliveries;
        Ok(QueueSettings {
            queue_name: queue.name().to_owned(),
            dead_letter_queue: true,
            ordered_groups: false,
            lease: queue.lease,
            max_deliveries: Some(max),
            // Every retry is a fresh copy whose retention starts again.
            redelivery_horizon: Duration::from_secs(
                u64::from(max) * (retention + lease) + retention,
            ),
            horizon_explanation: format!(
                "{max} deliveries × (retention {retention} s + lease {lease} s), since each retry \
                 is a new copy, + the dead-letter queue's retention {retention} s"
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

/// Publishes outbox events to RabbitMQ queues (the event's destination is a
/// queue name, reached through the default exchange) with publisher
/// confirms. The event id is the AMQP `message_id` and the
/// `ackbox.event_id` header, so consumers see a republished event as the
/// same message.
#[derive(Clone)]
pub struct RabbitMqPublisher {
    channel: Channel,
    _connection: Arc<Connection>,
}

impl std::fmt::Debug for RabbitMqPublisher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RabbitMqPublisher")
            .finish_non_exhaustive()
    }
}

impl RabbitMqPublisher {
    /// Connects to `url` and opens a confirmed channel.
    pub async fn connect(url: &str) -> Result<Self, TransportError> {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .map_err(|error| TransportError::new("connect", error))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|error| TransportError::new("channel.open", error))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|error| TransportError::new("confirm.select", error))?;
        Ok(Self {
            channel,
            _connection: Arc::new(connection),
        })
    }
}

#[async_trait]
impl Publisher for RabbitMqPublisher {
    async fn publish(&self, events: &[PendingEvent]) -> Vec<Result<(), String>> {
        // Publish all, then wait for every confirm: one round trip per pass.
        let mut confirms = Vec::with_capacity(events.len());
        for pending in events {
            let event = &pending.event;
            let mut headers = FieldTable::default();
            for (name, value) in &event.attributes {
                headers.insert(name.as_str().into(), string_value(value));
            }
            headers.insert(EVENT_ID_ATTRIBUTE.into(), string_value(&pending.event_id));
            if let Some(group_id) = &event.group_id {
                headers.insert(GROUP_ID_HEADER.into(), string_value(group_id));
            }
            let properties = BasicProperties::default()
                .with_message_id(pending.event_id.as_str().into())
                .with_delivery_mode(PERSISTENT)
                .with_headers(headers);
            confirms.push(
                self.channel
                    .basic_publish(
                        "".into(),
                        event.destination.as_str().into(),
                        MANDATORY,
                        event.body.as_bytes(),
                        properties,
                    )
                    .await,
            );
        }
        let mut results = Vec::with_capacity(events.len());
        for (confirm, pending) in confirms.into_iter().zip(events) {
            results.push(match confirm {
                Err(error) => Err(error.to_string()),
                Ok(confirm) => match confirm.await {
                    Ok(confirmation) => confirmed(confirmation, &pending.event.destination),
                    Err(error) => Err(error.to_string()),
                },
            });
        }
        results
    }
}
