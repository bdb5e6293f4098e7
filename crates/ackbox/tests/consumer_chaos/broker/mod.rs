//! The brokers a trial runs over. The driver declares queues, publishes
//! and measures depths through [`Broker`]; a consumer process builds the
//! SDK transport from the [`Endpoint`] and [`QueueAddress`] it is handed.

pub(crate) mod nats;
pub(crate) mod rabbitmq;
pub(crate) mod sqs;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::workload::{Outgoing, Workload};

/// Every queue's lease: short, so that work killed mid-flight, and handlers
/// that overrun without a heartbeat, come back within the run.
pub(crate) const LEASE: Duration = Duration::from_secs(3);

/// Deliveries before a message is dead-lettered. Nothing here should get
/// there: a dead letter is a failure of the trial.
pub(crate) const MAX_DELIVERIES: u32 = 10;

/// The consumers' backoff after a transient failure (a terminated database
/// connection, say): short, so a trial drains in seconds.
pub(crate) const RETRY_BASE: Duration = Duration::from_millis(200);
/// The longest backoff.
pub(crate) const RETRY_CAP: Duration = Duration::from_secs(2);

/// Where consumer processes connect.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Endpoint {
    /// ackbox, over the SQS API at this URL.
    Sqs(String),
    /// RabbitMQ at this AMQP URL.
    RabbitMq(String),
    /// NATS JetStream at this URL.
    Nats(String),
}

/// One workload's queue as a consumer process names it: an SQS queue URL,
/// a RabbitMQ queue name, a JetStream stream name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct QueueAddress {
    pub(crate) workload: Workload,
    pub(crate) name: String,
}

/// Messages in one queue, as far as the broker tells.
#[derive(Debug, Clone)]
pub(crate) struct Depth {
    pub(crate) queue: String,
    /// Waiting to be delivered.
    pub(crate) ready: u64,
    /// Delivered and not settled, delayed, or waiting to be retried.
    pub(crate) held: u64,
}

impl Depth {
    pub(crate) fn is_empty(&self) -> bool {
        self.ready == 0 && self.held == 0
    }
}

impl std::fmt::Display for Depth {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{}: {} ready, {} held",
            self.queue, self.ready, self.held
        )
    }
}

/// A broker as the driver uses it.
pub(crate) trait Broker {
    /// What consumer processes connect to.
    fn endpoint(&self) -> Endpoint;

    /// Whether its queues can keep per-group order, so the FIFO workload
    /// can run over it.
    fn keeps_group_order(&self) -> bool;

    /// Creates `workload`'s queue with a dead-letter queue behind it.
    async fn declare(&mut self, workload: Workload) -> QueueAddress;

    /// Sends `messages`, each group's in order; returns once all are stored.
    async fn publish(&self, queue: &QueueAddress, messages: &[Outgoing]);

    /// Every queue's depth, dead-letter queues included.
    async fn depths(&self) -> Vec<Depth>;

    /// Whether the trial owns the broker and may kill it; a shared one
    /// (the machine's RabbitMQ, NATS) is never killed.
    fn can_crash(&self) -> bool;

    /// Kills the broker with SIGKILL and starts it again on its port and
    /// data (only when [`Broker::can_crash`]).
    async fn crash_and_restart(&mut self);

    /// Deletes what the trial declared.
    async fn remove(self);
}

/// A name no other run uses, for brokers shared between runs.
pub(crate) fn unique_name(prefix: &str, workload: Workload) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    format!(
        "{prefix}_{}_{}_{nanos}",
        workload.name(),
        std::process::id()
    )
}
