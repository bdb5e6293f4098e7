//! The business workloads the consumer processes run: what is sent, the
//! tables the effects land in, the handlers, and the checks that decide
//! whether every effect happened exactly once and in the right order.
//!
//! Each workload is one module; this one dispatches between them, so a
//! trial (driver side) and a consumer process (child side) name a workload
//! by [`Workload`] alone.

pub(crate) mod orders;
pub(crate) mod projection;
pub(crate) mod steps;

use std::time::Duration;

use ackbox_consumer::{Consumer, PgInbox, Transport};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::verdict::Findings;

/// One workload: its queue, consumer and tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Workload {
    /// Orders on a standard queue, sent twice now and then by the producer.
    Orders,
    /// Numbered steps per message group on a FIFO queue.
    Steps,
    /// Versioned events, shuffled and duplicated, into a read model.
    Projection,
}

impl Workload {
    /// The consumer's name, which is also its inbox partition and the
    /// base of its queue's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Orders => "orders",
            Self::Steps => "steps",
            Self::Projection => "projection",
        }
    }

    /// Whether its queue keeps per-group order.
    pub(crate) fn fifo(self) -> bool {
        matches!(self, Self::Steps)
    }
}

/// A message as the producer sends it, whatever the broker.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    pub(crate) body: String,
    /// The message group (FIFO queues only).
    pub(crate) group_id: Option<String>,
    /// The FIFO deduplication id: unique, since every send here is meant.
    pub(crate) deduplication_id: Option<String>,
}

impl Outgoing {
    pub(crate) fn standard(body: String) -> Self {
        Self {
            body,
            group_id: None,
            deduplication_id: None,
        }
    }
}

/// How handlers spend their time: a little work in every transaction (so
/// transactions overlap, as in an application), and now and then far
/// longer than the lease, so the broker hands the message to someone else
/// while the first holder still works on it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Pace {
    /// Each handler call works a random 0..=`work_ms` milliseconds.
    pub(crate) work_ms: u64,
    /// Calls in a thousand that overrun the lease.
    pub(crate) slow_per_mille: u32,
    /// How long an overrunning call takes.
    pub(crate) slow_ms: u64,
    /// Which consumer process runs the handler, recorded with effects so a
    /// doubled effect names who applied it.
    pub(crate) process: i32,
}

impl Pace {
    /// Sleeps as one handler call of this pace does.
    pub(crate) async fn work(&self) {
        let (slow, work) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..1_000) < self.slow_per_mille,
                rng.random_range(0..=self.work_ms),
            )
        };
        let pause = if slow { self.slow_ms } else { work };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// What a trial sends for one workload, and what must come of it.
#[derive(Debug)]
pub(crate) enum Plan {
    Orders(orders::Plan),
    Steps(steps::Plan),
    Projection(projection::Plan),
}

impl Plan {
    pub(crate) fn workload(&self) -> Workload {
        match self {
            Self::Orders(_) => Workload::Orders,
            Self::Steps(_) => Workload::Steps,
            Self::Projection(_) => Workload::Projection,
        }
    }

    /// Every message, producer duplicates included, in sending order.
    pub(crate) fn messages(&self) -> &[Outgoing] {
        match self {
            Self::Orders(plan) => &plan.messages,
            Self::Steps(plan) => &plan.messages,
            Self::Projection(plan) => &plan.messages,
        }
    }

    /// Distinct effect keys: inbox records once everything is consumed.
    pub(crate) fn distinct_effects(&self) -> u64 {
        match self {
            Self::Orders(plan) => plan.distinct_effects(),
            Self::Steps(plan) => plan.distinct_effects(),
            Self::Projection(plan) => plan.distinct_effects(),
        }
    }

    /// Messages sent again by the producer, which the inbox must absorb.
    pub(crate) fn producer_duplicates(&self) -> u64 {
        match self {
            Self::Orders(plan) => plan.producer_duplicates(),
            Self::Steps(_) => 0,
            Self::Projection(plan) => plan.producer_duplicates(),
        }
    }

    /// Creates the workload's tables in the trial's schema.
    pub(crate) async fn create_tables(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        match self {
            Self::Orders(_) => orders::create_tables(pool).await,
            Self::Steps(plan) => plan.create_tables(pool).await,
            Self::Projection(_) => projection::create_tables(pool).await,
        }
    }

    /// The workload's assertions and figures, from its tables.
    pub(crate) async fn verify(&self, pool: &PgPool) -> Findings {
        let findings = match self {
            Self::Orders(plan) => plan.verify(pool).await,
            Self::Steps(plan) => plan.verify(pool).await,
            Self::Projection(plan) => plan.verify(pool).await,
        };
        findings.unwrap_or_else(|error| {
            Findings::failed(format!(
                "{}: the tables could not be read: {error}",
                self.workload().name()
            ))
        })
    }
}

/// Runs `workload`'s handler on `consumer` until `shutdown`; the consumer
/// was built with the workload's effect key (see [`effect_key`]).
pub(crate) async fn run<T: Transport>(
    workload: Workload,
    consumer: &Consumer<T, PgInbox>,
    pool: PgPool,
    pace: Pace,
    shutdown: ackbox_consumer::CancellationToken,
) -> Result<(), ackbox_consumer::ConsumerError> {
    match workload {
        Workload::Orders => consumer.run(orders::Ledger { pace }, shutdown).await,
        Workload::Steps => consumer.run(steps::Heads { pace }, shutdown).await,
        Workload::Projection => {
            consumer
                .run(projection::Projector::new(pool, pace), shutdown)
                .await
        }
    }
}

/// The effect key of a `workload` message: its business identity, so that
/// a message the producer sent twice is one effect.
pub(crate) fn effect_key(workload: Workload) -> fn(&ackbox_consumer::Message) -> String {
    match workload {
        Workload::Orders => orders::effect_key,
        Workload::Steps => steps::effect_key,
        Workload::Projection => projection::effect_key,
    }
}
