//! The broker seam: what the consumer needs from a queue.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Failure, TransportError};
use crate::message::Delivery;

/// What the consumer learns about its queue at start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueSettings {
    /// The queue's name, for logs.
    pub queue_name: String,
    /// How long a delivery is leased before the broker may deliver it again.
    pub lease: Duration,
    /// Deliveries before the broker dead-letters a message, if it does.
    pub max_deliveries: Option<u32>,
    /// How long after its first delivery the broker can still deliver a
    /// message again, with how that was computed; the inbox must remember it
    /// at least that long.
    pub redelivery_horizon: Duration,
    /// The computation behind `redelivery_horizon`, for error messages.
    pub horizon_explanation: String,
    /// Whether messages that fail for good have a dead-letter queue to go
    /// to. Without one, a consumer refuses to start unless told otherwise.
    pub dead_letter_queue: bool,
    /// Whether the broker keeps each message group in order across
    /// consumers: it hands out a group's messages in order and nothing more
    /// of the group while one is leased (SQS FIFO queues).
    pub ordered_groups: bool,
}

/// A queue the consumer can take messages from. Implementations must make
/// `ack` after a lost lease harmless (a newer lease's holder decides).
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Up to `max` messages, waiting up to `wait` for the first.
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, TransportError>;
    /// The message is done: remove it.
    async fn ack(&self, delivery: &Delivery) -> Result<(), TransportError>;
    /// Several messages are done; one result per delivery, in order. The
    /// default acknowledges them one by one; brokers with a batch call use it.
    async fn ack_batch(&self, deliveries: &[Delivery]) -> Vec<Result<(), TransportError>> {
        let mut results = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            results.push(self.ack(delivery).await);
        }
        results
    }
    /// Keep the lease for `lease` more from now.
    async fn extend(&self, delivery: &Delivery, lease: Duration) -> Result<(), TransportError>;
    /// Give the message back to be delivered again after `delay`.
    async fn retry(
        &self,
        delivery: &Delivery,
        delay: Duration,
        failure: &Failure,
    ) -> Result<(), TransportError>;
    /// Move the message to the dead-letter queue with its reason.
    async fn dead_letter(
        &self,
        delivery: &Delivery,
        failure: &Failure,
    ) -> Result<(), TransportError>;
    /// Give an unstarted message back at once (shutdown).
    async fn release(&self, delivery: &Delivery) -> Result<(), TransportError>;
    /// The queue's lease and redelivery horizon.
    async fn settings(&self) -> Result<QueueSettings, TransportError>;
    /// Whether deliveries carry their message group ([`Message::group_id`](crate::Message::group_id)),
    /// so that a consumer can keep each group in order.
    fn carries_groups(&self) -> bool {
        false
    }
}

/// A shared transport, so a caller can keep a handle on it (to read a test
/// transport's counters, say) while a consumer owns it.
#[async_trait]
impl<T: Transport + ?Sized> Transport for std::sync::Arc<T> {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, TransportError> {
        (**self).receive(max, wait).await
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), TransportError> {
        (**self).ack(delivery).await
    }

    async fn ack_batch(&self, deliveries: &[Delivery]) -> Vec<Result<(), TransportError>> {
        (**self).ack_batch(deliveries).await
    }

    async fn extend(&self, delivery: &Delivery, lease: Duration) -> Result<(), TransportError> {
        (**self).extend(delivery, lease).await
    }

    async fn retry(
        &self,
        delivery: &Delivery,
        delay: Duration,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        (**self).retry(delivery, delay, failure).await
    }

    async fn dead_letter(
        &self,
        delivery: &Delivery,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        (**self).dead_letter(delivery, failure).await
    }

    async fn release(&self, delivery: &Delivery) -> Result<(), TransportError> {
        (**self).release(delivery).await
    }

    async fn settings(&self) -> Result<QueueSettings, TransportError> {
        (**self).settings().await
    }

    fn carries_groups(&self) -> bool {
        (**self).carries_groups()
    }
}
