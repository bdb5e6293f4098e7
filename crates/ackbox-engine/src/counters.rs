//! The engine's counters, exported by the server as `ackbox_*` metrics.
//!
//! Labels stay low in cardinality: the queue name, never a message id.

use ackbox_core::queue_name::QueueName;
use ackbox_core::topic_name::TopicName;

/// Every per-queue counter.
const QUEUE_COUNTERS: [&str; 8] = [
    "ackbox_messages_sent_total",
    "ackbox_deduplicated_sends_total",
    "ackbox_messages_received_total",
    "ackbox_messages_redelivered_total",
    "ackbox_messages_deleted_total",
    "ackbox_messages_expired_total",
    "ackbox_messages_dead_lettered_total",
    "ackbox_move_task_messages_moved_total",
];

/// Makes each of `queue`'s counters exist at zero, so its series are there
/// from the moment the queue is: a rate over a series that never counted
/// is "no data" on a dashboard and never fires an alert, where zero is
/// zero.
pub(crate) fn queue_known(queue: &QueueName) {
    for name in QUEUE_COUNTERS {
        metrics::counter!(name, "queue" => queue.to_string()).increment(0);
    }
}

fn count(name: &'static str, queue: &QueueName, amount: u64) {
    if amount > 0 {
        metrics::counter!(name, "queue" => queue.to_string()).increment(amount);
    }
}

/// Messages stored by sends, and sends a FIFO queue recognised as duplicates.
pub(crate) fn sent(queue: &QueueName, stored: u64, duplicates: u64) {
    count("ackbox_messages_sent_total", queue, stored);
    count("ackbox_deduplicated_sends_total", queue, duplicates);
}

/// Messages leased by a receive; those received before are redeliveries.
pub(crate) fn received(queue: &QueueName, leased: u64, redelivered: u64) {
    count("ackbox_messages_received_total", queue, leased);
    count("ackbox_messages_redelivered_total", queue, redelivered);
}

/// Messages deleted by their consumers.
pub(crate) fn deleted(queue: &QueueName, deleted: u64) {
    count("ackbox_messages_deleted_total", queue, deleted);
}

/// Messages dropped because they outlived the queue's retention.
pub(crate) fn expired(queue: &QueueName, expired: u64) {
    count("ackbox_messages_expired_total", queue, expired);
}

/// The `class` label of a message dead-lettered without a failure report
/// (its consumer crashed or timed out, or never nacked).
pub(crate) const UNREPORTED_CLASS: &str = "unreported";

/// Messages moved from `queue` to its dead-letter queue, each with its last
/// failure class: counted in all and by class.
pub(crate) fn dead_lettered(queue: &QueueName, classes: &[Option<String>]) {
    count(
        "ackbox_messages_dead_lettered_total",
        queue,
        classes.len() as u64,
    );
    for class in classes {
        metrics::counter!(
            "ackbox_messages_dead_lettered_by_class_total",
            "queue" => queue.to_string(),
            "class" => class.clone().unwrap_or_else(|| UNREPORTED_CLASS.to_owned())
        )
        .increment(1);
    }
}

/// A message deleted `seconds` after the receive whose lease deleted it:
/// how long its consumer took.
pub(crate) fn processed(queue: &QueueName, seconds: f64) {
    metrics::histogram!("ackbox_message_processing_seconds", "queue" => queue.to_string())
        .record(seconds);
}

/// Messages a move task took out of the dead-letter queue `queue`.
pub(crate) fn redriven(queue: &QueueName, moved: u64) {
    count("ackbox_move_task_messages_moved_total", queue, moved);
}

/// Messages published to `topic`, and the copies it delivered to queues.
pub(crate) fn published(topic: &TopicName, published: u64, delivered: u64) {
    if published > 0 {
        metrics::counter!("ackbox_topic_messages_published_total", "topic" => topic.to_string())
            .increment(published);
    }
    if delivered > 0 {
        metrics::counter!("ackbox_topic_messages_delivered_total", "topic" => topic.to_string())
            .increment(delivered);
    }
}

/// What one publish did for subscription `subscription` (a queue's) of
/// `topic`: copies stored in its queue, and messages its filter policy
/// kept out.
pub(crate) fn subscription_deliveries(
    topic: &TopicName,
    subscription: &str,
    delivered: u64,
    filtered_out: u64,
) {
    for (name, amount) in [
        ("ackbox_subscription_messages_delivered_total", delivered),
        (
            "ackbox_subscription_messages_filtered_out_total",
            filtered_out,
        ),
    ] {
        if amount > 0 {
            metrics::counter!(
                name,
                "topic" => topic.to_string(),
                "subscription" => subscription.to_owned()
            )
            .increment(amount);
        }
    }
}

/// Deliveries `topic` could not make: its subscribed queue is gone.
pub(crate) fn undeliverable(topic: &TopicName, amount: u64) {
    if amount > 0 {
        metrics::counter!("ackbox_topic_deliveries_failed_total", "topic" => topic.to_string())
            .increment(amount);
    }
}
