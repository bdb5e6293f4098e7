//! The queues behind a [`RabbitMqTransport`](super::RabbitMqTransport):
//! the work queue, its retry tiers and its dead-letter queue, declared as
//! quorum queues with their delivery limit, retention and dead-letter
//! routes.

use std::time::Duration;

use lapin::Channel;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable, LongString};

use crate::error::TransportError;

/// The retry tier of the shortest delays: up to 128 ms.
const SHORTEST_RETRY_TIER_MS: u64 = 1 << 7;
/// The retry tier of the longest delays: about 18.6 hours and beyond.
const LONGEST_RETRY_TIER_MS: u64 = 1 << 26;
const FOUR_DAYS: Duration = Duration::from_secs(4 * 24 * 3_600);

/// How the queue is declared and leased.
#[derive(Debug, Clone)]
pub struct RabbitMqQueue {
    pub(super) name: String,
    pub(super) lease: Duration,
    pub(super) max_deliveries: u32,
    pub(super) retention: Duration,
    pub(super) prefetch: u16,
    pub(super) expires: Option<Duration>,
}

impl RabbitMqQueue {
    /// Queue `name` with a 30 s lease, 10 deliveries before dead-lettering,
    /// four days' retention (as SQS) and a prefetch of 16.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            lease: Duration::from_secs(30),
            max_deliveries: 10,
            retention: FOUR_DAYS,
            prefetch: 16,
            expires: None,
        }
    }

    /// How long a delivery may go unsettled and unextended.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Deliveries before a message is dead-lettered (at least 1).
    pub fn max_deliveries(mut self, max_deliveries: u32) -> Self {
        self.max_deliveries = max_deliveries.max(1);
        self
    }

    /// How long a message may wait in the queue or its dead-letter queue.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Deliveries the broker pushes ahead of the consumer: its concurrency.
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch.max(1);
        self
    }

    /// Lets the broker delete the queues once unused (no consumer, no
    /// declaration) for `expires`: for temporary queues, such as a test's.
    pub fn expires(mut self, expires: Duration) -> Self {
        self.expires = Some(expires);
        self
    }

    /// The work queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The queue a transient failure retried after `delay` waits in.
    pub fn retry_queue(&self, delay: Duration) -> String {
        self.retry_queue_of_tier(retry_tier_ms(delay))
    }

    /// Every queue [`retry_queue`](Self::retry_queue) may name, shortest
    /// delays first; only those used so far exist on the broker.
    pub fn retry_queues(&self) -> impl Iterator<Item = String> + '_ {
        (SHORTEST_RETRY_TIER_MS.trailing_zeros()..=LONGEST_RETRY_TIER_MS.trailing_zeros())
            .map(|power| self.retry_queue_of_tier(1 << power))
    }

    pub(super) fn retry_queue_of_tier(&self, tier_ms: u64) -> String {
        format!("{}.retry.{tier_ms}ms", self.name)
    }

    /// The dead-letter queue.
    pub fn dead_letter_queue(&self) -> String {
        format!("{}.dlq", self.name)
    }

    fn retention_ms(&self) -> AMQPValue {
        AMQPValue::LongLongInt(i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX))
    }

    /// Declares the work and dead-letter queues (idempotent; a queue
    /// declared before with other arguments is an error from the broker).
    /// Retry queues are declared by the transport as it first needs each.
    pub async fn declare(&self, channel: &Channel) -> Result<(), TransportError> {
        let mut dead_letter = self.quorum();
        dead_letter.insert("x-message-ttl".into(), self.retention_ms());
        declare(channel, &self.dead_letter_queue(), dead_letter).await?;

        let mut work = self.quorum();
        work.insert("x-message-ttl".into(), self.retention_ms());
        // Quorum queues count only deliveries given back, not the first.
        work.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongInt(i32::try_from(self.max_deliveries - 1).unwrap_or(i32::MAX)),
        );
        route_dead_letters(&mut work, &self.dead_letter_queue());
        declare(channel, &self.name, work).await
    }

    /// Declares retry queue `name`, whose expired messages go back to the
    /// work queue.
    pub(super) async fn declare_retry_queue(
        &self,
        channel: &Channel,
        name: &str,
    ) -> Result<(), TransportError> {
        let mut retry = self.quorum();
        route_dead_letters(&mut retry, &self.name);
        declare(channel, name, retry).await
    }

    fn quorum(&self) -> FieldTable {
        let mut arguments = FieldTable::default();
        arguments.insert("x-queue-type".into(), string_value("quorum"));
        if let Some(expires) = self.expires {
            arguments.insert(
                "x-expires".into(),
                AMQPValue::LongLongInt(i64::try_from(expires.as_millis()).unwrap_or(i64::MAX)),
            );
        }
        arguments
    }
}

/// The power of two (in milliseconds) at or above `delay`, within the
/// shortest and longest tiers.
pub(super) fn retry_tier_ms(delay: Duration) -> u64 {
    u64::try_from(delay.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(SHORTEST_RETRY_TIER_MS, LONGEST_RETRY_TIER_MS)
        .next_power_of_two()
}

/// Expired and rejected messages go to `target` through the default
/// exchange, at least once (the broker keeps them until `target` confirms).
fn route_dead_letters(arguments: &mut FieldTable, target: &str) {
    arguments.insert("x-dead-letter-exchange".into(), string_value(""));
    arguments.insert("x-dead-letter-routing-key".into(), string_value(target));
    arguments.insert(
        "x-dead-letter-strategy".into(),
        string_value("at-least-once"),
    );
    arguments.insert("x-overflow".into(), string_value("reject-publish"));
}

async fn declare(
    channel: &Channel,
    name: &str,
    arguments: FieldTable,
) -> Result<(), TransportError> {
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            arguments,
        )
        .await
        .map(drop)
        .map_err(|error| TransportError::new("queue.declare", format!("{name}: {error}")))
}

pub(super) fn string_value(text: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_waits_in_the_tier_of_the_power_of_two_at_or_above_its_delay() {
        let queue = RabbitMqQueue::new("work");
        let tier = |delay| queue.retry_queue(delay);
        assert_eq!(tier(Duration::from_millis(1)), "work.retry.128ms");
        assert_eq!(tier(Duration::from_millis(128)), "work.retry.128ms");
        assert_eq!(tier(Duration::from_millis(129)), "work.retry.256ms");
        assert_eq!(tier(Duration::from_secs(5)), "work.retry.8192ms");
        assert_eq!(tier(Duration::from_secs(300)), "work.retry.524288ms");
        assert_eq!(tier(Duration::MAX), "work.retry.67108864ms");
        let listed: Vec<String> = queue.retry_queues().collect();
        assert_eq!(listed.len(), 20);
        assert_eq!(listed[0], "work.retry.128ms");
        for millis in [1, 200, 5_000, 300_000, 43_200_000, u64::MAX] {
            assert!(
                listed.contains(&tier(Duration::from_millis(millis))),
                "the tier of {millis} ms is not listed"
            );
        }
    }
}
