//! The transactional outbox: publish events from a transaction without
//! losing them and without publishing what rolled back.
//!
//! [`Outbox::enqueue`] writes the event in the application's transaction.
//! An [`OutboxRelay`] then publishes due events in batches and marks them
//! published; on PostgreSQL several relays share the work (`FOR UPDATE SKIP
//! LOCKED`). A relay that dies after publishing and before marking publishes
//! the event again later: every copy carries the same event id (the
//! `ackbox.event_id` attribute, and the `MessageDeduplicationId` on FIFO
//! queues), so consumers keyed on it apply it once — it is their default
//! effect key.
//!
//! Events are published in the order they were enqueued, and the events of
//! one group (`OutboxEvent::group`) wait behind an earlier one of the group
//! that failed to publish and waits for its retry; on PostgreSQL one relay
//! at a time publishes a group. So a FIFO queue receives each group in the
//! order its events were written.
//!
//! An event enqueued by a handler inherits the handled message's lineage:
//! its `correlation_id` attribute (or, when it has none, its event id) and,
//! as `causation_id`, its event id — unless the event sets its own. Any
//! event takes the current OpenTelemetry span as its `traceparent`
//! ([`crate::trace`]), so its consumer continues the trace.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::{Database, Transaction};
use tokio_util::sync::CancellationToken;

use crate::retry::RetryPolicy;
use crate::testing::{CrashPoint, Faults};

mod postgres;
mod sqlite;

pub use postgres::PgOutbox;
pub use sqlite::SqliteOutbox;

pub use crate::message::EVENT_ID_ATTRIBUTE;
use crate::message::{CAUSATION_ID_ATTRIBUTE, CORRELATION_ID_ATTRIBUTE};

/// An event to publish once the transaction commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// The queue URL to publish to.
    pub destination: String,
    /// The message body.
    pub body: String,
    /// The message group (required by FIFO queues).
    pub group_id: Option<String>,
    /// String message attributes.
    pub attributes: BTreeMap<String, String>,
}

impl OutboxEvent {
    /// An event with `body` for the queue at `destination`.
    pub fn new(destination: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            destination: destination.into(),
            body: body.into(),
            group_id: None,
            attributes: BTreeMap::new(),
        }
    }

    /// Sets the message group.
    pub fn group(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }

    /// Adds a string message attribute.
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(name.into(), value.into());
        self
    }

    /// The event with the lineage of the message being handled, when it is
    /// enqueued from a handler: the same correlation id, and that message's
    /// event id as its cause — unless the event names its own; and the
    /// current span (OpenTelemetry's) as its producer.
    fn with_lineage(mut self) -> Self {
        if let Some(handling) = crate::context::current() {
            self.attributes
                .entry(CORRELATION_ID_ATTRIBUTE.to_owned())
                .or_insert(handling.correlation_id);
            self.attributes
                .entry(CAUSATION_ID_ATTRIBUTE.to_owned())
                .or_insert(handling.event_id);
        }
        crate::trace::stamp_current_span(&mut self.attributes);
        self
    }
}

/// A stored event waiting to be published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEvent {
    /// Stable id: the same on every publication of this event.
    pub event_id: String,
    /// The event.
    pub event: OutboxEvent,
    /// Publications tried so far.
    pub attempts: u32,
}

/// Sends outbox events to a broker.
#[async_trait]
pub trait Publisher: Send + Sync + 'static {
    /// Publishes `events`; one result per event, in order (`Err` with why).
    async fn publish(&self, events: &[PendingEvent]) -> Vec<Result<(), String>>;
}

/// How many events wait, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Events not yet published.
    pub unpublished: u64,
    /// When the oldest of them was enqueued, epoch milliseconds.
    pub oldest_created_at_ms: Option<i64>,
}

/// What one relay pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RelayPass {
    /// Events published and marked.
    pub published: u64,
    /// Events whose publication failed, rescheduled with backoff.
    pub failed: u64,
    /// The pass stopped after publishing, before marking (a simulated crash).
    pub crashed: bool,
}

/// An outbox table in the application's database.
#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// The application's database.
    type Database: Database;

    /// Creates the outbox table if it does not exist (idempotent).
    async fn migrate(&self) -> Result<(), sqlx::Error>;

    /// Writes `event` in `transaction`; returns its event id. It is
    /// published only if the transaction commits.
    async fn enqueue(
        &self,
        transaction: &mut Transaction<'static, Self::Database>,
        event: OutboxEvent,
    ) -> Result<String, sqlx::Error>;

    /// Publishes up to `limit` due events with `publisher` and marks them:
    /// published, or failed and due again after `retry`'s backoff. Events
    /// stay locked to this pass while it publishes.
    async fn relay_pass(
        &self,
        publisher: &dyn Publisher,
        limit: u32,
        retry: &RetryPolicy,
        faults: Option<&Faults>,
    ) -> Result<RelayPass, sqlx::Error>;

    /// Unpublished events and the age of the oldest.
    async fn backlog(&self) -> Result<Backlog, sqlx::Error>;

    /// Deletes events published at or before `published_before_ms` (at
    /// most 10,000 per call); returns how many.
    async fn purge_published(&self, published_before_ms: i64) -> Result<u64, sqlx::Error>;
}

/// A new event id: 128 random bits as hex, unique without coordination.
pub(crate) fn new_event_id() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Publishes `events`, unless a simulated crash strikes after publishing
/// (then nothing is marked and the caller abandons its transaction).
pub(crate) async fn publish(
    publisher: &dyn Publisher,
    events: &[PendingEvent],
    faults: Option<&Faults>,
) -> Option<Vec<Result<(), String>>> {
    let results = publisher.publish(events).await;
    // A crash strikes a pass, not an event: it is judged once, by the
    // pass's first event.
    let crashed = faults.is_some_and(|faults| {
        events
            .first()
            .is_some_and(|first| faults.fires(CrashPoint::AfterPublishBeforeMark, &first.event_id))
    });
    (!crashed).then_some(results)
}

/// When a failed publication is tried again.
pub(crate) fn next_attempt_at(now_ms: i64, attempts: u32, retry: &RetryPolicy) -> i64 {
    now_ms.saturating_add(i64::try_from(retry.backoff(attempts).as_millis()).unwrap_or(i64::MAX))
}

/// How often a relay deletes old published events.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);

/// Runs relay passes until shut down, and reports the backlog as metrics
/// (`outbox_unpublished_count`, `outbox_oldest_unpublished_age_seconds`).
pub struct OutboxRelay<O, P> {
    outbox: O,
    publisher: P,
    batch: u32,
    idle: Duration,
    retry: RetryPolicy,
    faults: Option<Arc<Faults>>,
    keep_published: Duration,
    last_purge: std::sync::Mutex<Option<std::time::Instant>>,
}

impl<O, P> std::fmt::Debug for OutboxRelay<O, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxRelay")
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl<O: Outbox, P: Publisher> OutboxRelay<O, P> {
    /// A relay from `outbox` to `publisher`: batches of 100, a 200 ms nap
    /// when nothing is due, retries after 1 s doubling to 1 min.
    pub fn new(outbox: O, publisher: P) -> Self {
        Self {
            outbox,
            publisher,
            batch: 100,
            idle: Duration::from_millis(200),
            retry: RetryPolicy::exponential(
                u32::MAX,
                Duration::from_secs(1),
                Duration::from_secs(60),
            ),
            faults: None,
            keep_published: Duration::from_secs(3_600),
            last_purge: std::sync::Mutex::new(None),
        }
    }

    /// How long published events stay in the table before the relay
    /// deletes them (default an hour); it purges at most once a minute.
    pub fn keep_published(mut self, keep: Duration) -> Self {
        self.keep_published = keep;
        self
    }

    /// Events per pass.
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// How long to wait when nothing is due.
    pub fn idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// Backoff of failed publications (attempts are not bounded: an event
    /// is never dropped).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Simulated crashes, for tests ([`CrashPoint::AfterPublishBeforeMark`]).
    pub fn faults(mut self, faults: Arc<Faults>) -> Self {
        self.faults = Some(faults);
        self
    }

    /// One pass: publish what is due, mark it, report the backlog.
    pub async fn run_once(&self) -> Result<RelayPass, sqlx::Error> {
        let pass = self
            .outbox
            .relay_pass(
                &self.publisher,
                self.batch,
                &self.retry,
                self.faults.as_deref(),
            )
            .await?;
        let purge_due = {
            let mut last = self.last_purge.lock().expect("relay purge lock poisoned");
            let due = last.is_none_or(|at| at.elapsed() >= PURGE_INTERVAL);
            if due {
                *last = Some(std::time::Instant::now());
            }
            due
        };
        if purge_due {
            let keep = i64::try_from(self.keep_published.as_millis()).unwrap_or(i64::MAX);
            self.outbox
                .purge_published(crate::consumer::now_ms().saturating_sub(keep))
                .await?;
        }
        let backlog = self.outbox.backlog().await?;
        metrics::gauge!("outbox_unpublished_count").set(backlog.unpublished as f64);
        let age = backlog.oldest_created_at_ms.map_or(0.0, |oldest| {
            (crate::consumer::now_ms() - oldest).max(0) as f64 / 1_000.0
        });
        metrics::gauge!("outbox_oldest_unpublished_age_seconds").set(age);
        Ok(pass)
    }

    /// Passes until `shutdown`; a database error is logged and retried.
    pub async fn run(&self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let nap = match self.run_once().await {
                Ok(pass) if pass.published + pass.failed > 0 || pass.crashed => Duration::ZERO,
                Ok(_) => self.idle,
                Err(error) => {
                    tracing::warn!(%error, "outbox relay pass failed; retrying");
                    self.idle
                }
            };
            tokio::select! {
                () = tokio::time::sleep(nap) => {}
                () = shutdown.cancelled() => {}
            }
        }
    }
}

/// Implements [`Outbox`] for one database: the same SQL text on both, with
/// the invoking module's `migrate`, `begin_relay` (how a relay pass takes
/// its transaction), the column that orders events as they were enqueued,
/// the clause that keeps a group to one relay at a time, and the row-lock
/// clause of the pass's select.
macro_rules! sql_outbox {
    (
        $outbox:ident,
        $database:ty,
        $pool:ty,
        $name:literal,
        $note:literal,
        position = $position:literal,
        group_lock = $group_lock:literal,
        lock = $lock:literal
    ) => {
        #[doc = concat!("An outbox in the application's ", $name, " database (table `ackbox_outbox`).", $note)]
        #[derive(Debug, Clone)]
        pub struct $outbox {
            pool: $pool,
        }

        impl $outbox {
            /// An outbox on `pool`, the pool the application writes with.
            pub fn new(pool: $pool) -> Self {
                Self { pool }
            }
        }

        type Row = (String, String, String, String, Option<String>, i64);

        fn pending((event_id, destination, body, attributes, group_id, attempts): Row) -> PendingEvent {
            PendingEvent {
                event_id,
                event: OutboxEvent {
                    destination,
                    body,
                    group_id,
                    // Written by `enqueue` from a map of strings; unreadable JSON
                    // would be a foreign write, published without attributes.
                    attributes: serde_json::from_str(&attributes).unwrap_or_default(),
                },
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            }
        }

        #[async_trait]
        impl $crate::outbox::Outbox for $outbox {
            type Database = $database;

            async fn migrate(&self) -> Result<(), sqlx::Error> {
                migrate(&self.pool).await
            }

            async fn enqueue(
                &self,
                transaction: &mut Transaction<'static, $database>,
                event: OutboxEvent,
            ) -> Result<String, sqlx::Error> {
                let event = event.with_lineage();
                let event_id = new_event_id();
                let now = now_ms();
                sqlx::query(
                    "INSERT INTO ackbox_outbox
                         (event_id, destination, body, attributes, group_id, created_at, next_attempt_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $6)",
                )
                .bind(&event_id)
                .bind(&event.destination)
                .bind(&event.body)
                .bind(serde_json::to_string(&event.attributes).expect("a map of strings serializes"))
                .bind(&event.group_id)
                .bind(now)
                .execute(&mut **transaction)
                .await?;
                Ok(event_id)
            }

            async fn relay_pass(
                &self,
                publisher: &dyn Publisher,
                limit: u32,
                retry: &RetryPolicy,
                faults: Option<&Faults>,
            ) -> Result<RelayPass, sqlx::Error> {
                let now = now_ms();
                let mut transaction = begin_relay(&self.pool).await?;
                // Events go out in the order they were enqueued. A group's
                // events wait behind an earlier one of the group that waits
                // for its retry, and a group is published by one relay at a
                // time: a FIFO queue receives each group in order.
                let rows: Vec<Row> = sqlx::query_as(concat!(
                    "SELECT event_id, destination, body, attributes, group_id, CAST(attempts AS BIGINT)
                     FROM ackbox_outbox AS candidate
                     WHERE published_at IS NULL AND next_attempt_at <= $1
                       AND NOT EXISTS (
                           SELECT 1 FROM ackbox_outbox AS earlier
                           WHERE earlier.published_at IS NULL
                             AND earlier.destination = candidate.destination
                             AND earlier.group_id = candidate.group_id
                             AND earlier.next_attempt_at > $1
                             AND earlier.", $position, " < candidate.", $position, ")",
                    $group_lock,
                    "
                     ORDER BY candidate.", $position, " LIMIT $2",
                    $lock
                ))
                .bind(now)
                .bind(i64::from(limit))
                .fetch_all(&mut *transaction)
                .await?;
                if rows.is_empty() {
                    transaction.rollback().await?;
                    return Ok(RelayPass::default());
                }
                let events: Vec<PendingEvent> = rows.into_iter().map(pending).collect();
                let Some(results) = publish(publisher, &events, faults).await else {
                    transaction.rollback().await?;
                    return Ok(RelayPass {
                        crashed: true,
                        ..RelayPass::default()
                    });
                };
                let mut pass = RelayPass::default();
                for (event, result) in events.iter().zip(results) {
                    match result {
                        Ok(()) => {
                            sqlx::query(
                                "UPDATE ackbox_outbox SET published_at = $1, attempts = attempts + 1
                                 WHERE event_id = $2",
                            )
                            .bind(now)
                            .bind(&event.event_id)
                            .execute(&mut *transaction)
                            .await?;
                            pass.published += 1;
                        }
                        Err(error) => {
                            tracing::warn!(event_id = %event.event_id, %error, "outbox publication failed; will retry");
                            sqlx::query(
                                "UPDATE ackbox_outbox
                                 SET attempts = attempts + 1, next_attempt_at = $1, last_error = $2
                                 WHERE event_id = $3",
                            )
                            .bind(next_attempt_at(now, event.attempts + 1, retry))
                            .bind(&error)
                            .bind(&event.event_id)
                            .execute(&mut *transaction)
                            .await?;
                            pass.failed += 1;
                        }
                    }
                }
                transaction.commit().await?;
                Ok(pass)
            }

            async fn backlog(&self) -> Result<Backlog, sqlx::Error> {
                let (unpublished, oldest): (i64, Option<i64>) = sqlx::query_as(
                    "SELECT COUNT(*), MIN(created_at) FROM ackbox_outbox WHERE published_at IS NULL",
                )
                .fetch_one(&self.pool)
                .await?;
                Ok(Backlog {
                    unpublished: unpublished.unsigned_abs(),
                    oldest_created_at_ms: oldest,
                })
            }

            async fn purge_published(&self, published_before_ms: i64) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "DELETE FROM ackbox_outbox WHERE event_id IN (
                         SELECT event_id FROM ackbox_outbox
                         WHERE published_at IS NOT NULL AND published_at <= $1 LIMIT 10000)",
                )
                .bind(published_before_ms)
                .execute(&self.pool)
                .await?
                .rows_affected())
            }
        }
    };
}

use sql_outbox;
