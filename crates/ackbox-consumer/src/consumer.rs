//! The consumer: receive, claim, handle, commit, acknowledge — in that order.
//!
//! This module builds a consumer and runs its receive loop: it leases
//! messages up to the consumer's concurrency, hands each to a task — its
//! own, or its group's lane when groups are kept in order (`group.rs`) —
//! and at shutdown gives back what it could not finish. What happens to one
//! message is in `handling.rs`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::decision::ConsumerStats;
use crate::error::ConsumerError;
use crate::group::{GroupOrder, Lanes, Routing};
use crate::handler::{Handler, Plain, ResultHandler};
use crate::held::{Held, Unsettled};
use crate::inbox::Inbox;
use crate::message::{Delivery, EVENT_TYPE_ATTRIBUTE, Message};
use crate::retry::{RetryBudget, RetryPolicy};
use crate::telemetry::EventTypes;
use crate::testing::Faults;
use crate::transport::{QueueSettings, Transport};

/// Most messages one receive asks for (the SQS limit).
const MAX_BATCH: usize = 10;
/// Extra time the inbox remembers past the queue's redelivery horizon.
const TTL_MARGIN: Duration = Duration::from_secs(3_600);
/// How long cut-off handlers get to roll back and give their messages back.
const CUT_OFF_GRACE: Duration = Duration::from_secs(5);
/// How often expired inbox records are purged.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// The default handler timeout, in leases: heartbeats keep a slow handler's
/// lease, but a handler that hangs must not hold its message forever.
const HANDLER_TIMEOUT_IN_LEASES: u32 = 5;
/// The shortest default handler timeout, for queues with very short leases.
const SHORTEST_DEFAULT_HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

/// Derives a message's effect key: what makes two deliveries the same effect.
pub type EffectKey = Arc<dyn Fn(&Message) -> String + Send + Sync>;

/// Builds a [`Consumer`]; `transport` and `inbox` are required.
pub struct ConsumerBuilder<T = (), I = ()> {
    transport: T,
    inbox: I,
    settings: Settings,
}

/// Everything a builder holds besides the transport and the inbox.
struct Settings {
    name: String,
    effect_key: Option<EffectKey>,
    concurrency: usize,
    retry: RetryPolicy,
    budget: RetryBudget,
    heartbeat: bool,
    wait: Duration,
    shutdown_deadline: Duration,
    inbox_ttl: Option<Duration>,
    faults: Option<Arc<Faults>>,
    group_order: GroupOrder,
    handler_timeout: Option<Duration>,
    without_dead_letter_queue: bool,
    event_type_attribute: String,
}

impl<T, I> std::fmt::Debug for ConsumerBuilder<T, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("name", &self.settings.name)
            .field("concurrency", &self.settings.concurrency)
            .finish_non_exhaustive()
    }
}

impl<I> ConsumerBuilder<(), I> {
    /// Where messages come from.
    pub fn transport<T: Transport>(self, transport: T) -> ConsumerBuilder<T, I> {
        ConsumerBuilder {
            transport,
            inbox: self.inbox,
            settings: self.settings,
        }
    }
}

impl<T> ConsumerBuilder<T, ()> {
    /// The inbox in the application's database.
    pub fn inbox<I: Inbox>(self, inbox: I) -> ConsumerBuilder<T, I> {
        ConsumerBuilder {
            transport: self.transport,
            inbox,
            settings: self.settings,
        }
    }
}

impl<T, I> ConsumerBuilder<T, I> {
    /// The effect key of a message: a business key such as an order or
    /// payment id. Without it, the key is the message's event id (the
    /// `ackbox.event_id` attribute the outbox relay sets, the same on every
    /// publication of one event), else its message id — which makes a
    /// message *sent* twice two effects. Never use receipt handles or
    /// receive times.
    pub fn effect_key(mut self, key: impl Fn(&Message) -> String + Send + Sync + 'static) -> Self {
        self.settings.effect_key = Some(Arc::new(key));
        self
    }

    /// Messages held at once, running or waiting behind their group
    /// (default 16).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.settings.concurrency = concurrency.max(1);
        self
    }

    /// Whether messages that share a group are handled in order (default
    /// [`GroupOrder::Auto`]: on FIFO queues).
    pub fn group_order(mut self, order: GroupOrder) -> Self {
        self.settings.group_order = order;
        self
    }

    /// Attempts and backoff of transient failures.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.settings.retry = retry;
        self
    }

    /// The retry budget shared by this consumer's workers.
    pub fn retry_budget(mut self, budget: RetryBudget) -> Self {
        self.settings.budget = budget;
        self
    }

    /// Extend the lease at half its length while the consumer holds a
    /// message (default on).
    pub fn heartbeat(mut self, heartbeat: bool) -> Self {
        self.settings.heartbeat = heartbeat;
        self
    }

    /// How long one handler call may take before it is cancelled, its
    /// transaction rolled back and the message retried as a transient
    /// failure (`HandlerTimeout`). By default five times the queue's lease,
    /// and at least 30 s.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.settings.handler_timeout = Some(timeout);
        self
    }

    /// Consume a queue that has no dead-letter queue. Without this, such a
    /// consumer refuses to start: a message that fails for good would have
    /// nowhere to go. With it, such a message is retried after the longest
    /// backoff, again and again, and logged as an error each time.
    pub fn without_dead_letter_queue(mut self) -> Self {
        self.settings.without_dead_letter_queue = true;
        self
    }

    /// The message attribute with the event type that labels this
    /// consumer's metrics and logs (default `event_type`).
    pub fn event_type_attribute(mut self, attribute: impl Into<String>) -> Self {
        self.settings.event_type_attribute = attribute.into();
        self
    }

    /// How long one receive waits for messages (default 5 s; at shutdown the
    /// consumer waits for the receive in progress and releases what it got).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    /// How long shutdown waits for running handlers (default 30 s).
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.settings.shutdown_deadline = deadline;
        self
    }

    /// How long inbox records are kept. By default the queue's redelivery
    /// horizon plus an hour; a shorter TTL is refused at start.
    pub fn inbox_ttl(mut self, ttl: Duration) -> Self {
        self.settings.inbox_ttl = Some(ttl);
        self
    }

    /// Simulated crashes, for tests ([`crate::testing`]).
    pub fn faults(mut self, faults: Arc<Faults>) -> Self {
        self.settings.faults = Some(faults);
        self
    }
}

impl<T: Transport, I: Inbox> ConsumerBuilder<T, I> {
    /// The consumer. Refused when a setting cannot work: no name, or group
    /// order required over a transport that does not carry groups.
    pub fn build(self) -> Result<Consumer<T, I>, ConsumerError> {
        let Settings {
            name,
            effect_key,
            concurrency,
            retry,
            budget,
            heartbeat,
            wait,
            shutdown_deadline,
            inbox_ttl,
            faults,
            group_order,
            handler_timeout,
            without_dead_letter_queue,
            event_type_attribute,
        } = self.settings;
        if name.is_empty() {
            return Err(ConsumerError::Missing("a name"));
        }
        if group_order == GroupOrder::Required && !self.transport.carries_groups() {
            return Err(ConsumerError::GroupsNotCarried {
                transport: std::any::type_name::<T>(),
            });
        }
        Ok(Consumer {
            inner: Arc::new(Shared {
                name,
                transport: self.transport,
                inbox: self.inbox,
                effect_key: effect_key
                    .unwrap_or_else(|| Arc::new(|message: &Message| message.event_id().to_owned())),
                retry,
                budget,
                heartbeat,
                faults,
                stats: ConsumerStats::default(),
                event_types: EventTypes::new(event_type_attribute),
            }),
            concurrency,
            wait,
            shutdown_deadline,
            inbox_ttl,
            group_order,
            handler_timeout,
            without_dead_letter_queue,
        })
    }
}

/// An effectively-once consumer. See the crate documentation.
pub struct Consumer<T, I> {
    inner: Arc<Shared<T, I>>,
    concurrency: usize,
    wait: Duration,
    shutdown_deadline: Duration,
    inbox_ttl: Option<Duration>,
    group_order: GroupOrder,
    handler_timeout: Option<Duration>,
    without_dead_letter_queue: bool,
}

impl<T, I> std::fmt::Debug for Consumer<T, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("name", &self.inner.name)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

/// What one `run` gives each of its message tasks.
pub(crate) struct RunContext {
    /// The queue's name, for logs.
    pub(crate) queue: String,
    /// The queue's lease, which heartbeats renew.
    pub(crate) lease: Duration,
    /// How long inbox records are kept.
    pub(crate) ttl: Duration,
    /// How long one handler call may run.
    pub(crate) handler_timeout: Duration,
    /// Which messages wait in a group's lane, and which are refused.
    pub(crate) routing: Routing,
    /// Committed deliveries to acknowledge; read by the acker task.
    pub(crate) acks: mpsc::UnboundedSender<Delivery>,
    /// Deliveries held and not yet settled; read at shutdown.
    pub(crate) unsettled: Arc<Unsettled>,
    /// Cancelled when the run is asked to stop: lanes give back what waits
    /// in them, and retries waiting in place go back to the broker.
    pub(crate) shutdown: CancellationToken,
    /// Cancelled when the shutdown deadline passes: running handlers stop,
    /// roll back and give their messages back.
    pub(crate) cut_off: CancellationToken,
}

/// What every message task shares.
pub(crate) struct Shared<T, I> {
    pub(crate) name: String,
    pub(crate) transport: T,
    pub(crate) inbox: I,
    pub(crate) effect_key: EffectKey,
    pub(crate) retry: RetryPolicy,
    pub(crate) budget: RetryBudget,
    pub(crate) heartbeat: bool,
    pub(crate) faults: Option<Arc<Faults>>,
    pub(crate) stats: ConsumerStats,
    pub(crate) event_types: EventTypes,
}

impl Consumer<(), ()> {
    /// A builder for the consumer `name` (its inbox records carry the name,
    /// so consumers of one database keep separate inboxes).
    pub fn builder(name: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder {
            transport: (),
            inbox: (),
            settings: Settings {
                name: name.into(),
                effect_key: None,
                concurrency: 16,
                retry: RetryPolicy::default(),
                budget: RetryBudget::default(),
                heartbeat: true,
                wait: Duration::from_secs(5),
                shutdown_deadline: Duration::from_secs(30),
                inbox_ttl: None,
                faults: None,
                group_order: GroupOrder::default(),
                handler_timeout: None,
                without_dead_letter_queue: false,
                event_type_attribute: EVENT_TYPE_ATTRIBUTE.to_owned(),
            },
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl<T: Transport, I: Inbox> Consumer<T, I> {
    /// Decisions so far.
    pub fn stats(&self) -> &ConsumerStats {
        &self.inner.stats
    }

    /// Runs until `shutdown` is cancelled: then stops receiving, gives back
    /// what it received but did not start, and waits for running handlers up
    /// to the shutdown deadline (a handler still running then is cut off: its
    /// transaction rolls back and its message is given back).
    ///
    /// Refuses to start on a queue without a dead-letter queue (unless
    /// [`ConsumerBuilder::without_dead_letter_queue`]) and with an inbox TTL
    /// shorter than the queue's redelivery horizon.
    pub async fn run<H: Handler<I::Database>>(
        &self,
        handler: H,
        shutdown: CancellationToken,
    ) -> Result<(), ConsumerError> {
        self.run_with_results(Plain(handler), shutdown).await
    }

    /// [`Consumer::run`] for a handler whose results are stored with the
    /// inbox record and handed back to it when a duplicate arrives.
    pub async fn run_with_results<H: ResultHandler<I::Database>>(
        &self,
        handler: H,
        shutdown: CancellationToken,
    ) -> Result<(), ConsumerError> {
        let settings = self.inner.transport.settings().await?;
        self.refuse_without_dead_letter_queue(&settings)?;
        let ttl = self.inbox_ttl(&settings)?;
        self.inner.inbox.migrate().await?;
        let handler = Arc::new(handler);
        let (acks, acker) = self.spawn_acker();
        let cut_off = CancellationToken::new();
        let context = Arc::new(RunContext {
            queue: settings.queue_name.clone(),
            lease: settings.lease,
            ttl,
            handler_timeout: self.handler_timeout(&settings),
            routing: Routing::new(self.group_order, &settings),
            acks,
            unsettled: Arc::default(),
            shutdown: shutdown.clone(),
            cut_off: cut_off.clone(),
        });
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let lanes: Lanes<Held> = Lanes::default();
        let mut tasks = JoinSet::new();
        let purger = self.spawn_purger(shutdown.clone());
        while !shutdown.is_cancelled() {
            let first = tokio::select! {
                permit = Arc::clone(&permits).acquire_owned() => permit.expect("the semaphore is never closed"),
                () = shutdown.cancelled() => break,
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match Arc::clone(&permits).try_acquire_owned() {
                    Ok(permit) => batch.push(permit),
                    Err(_) => break,
                }
            }
            let deliveries = match self.inner.transport.receive(batch.len(), self.wait).await {
                Ok(deliveries) => deliveries,
                Err(error) => {
                    tracing::warn!(consumer = %self.inner.name, %error, "receive failed; retrying in a second");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        () = shutdown.cancelled() => {}
                    }
                    continue;
                }
            };
            while tasks.try_join_next().is_some() {}
            for delivery in deliveries {
                if shutdown.is_cancelled() {
                    self.inner.give_back(&delivery).await;
                    continue;
                }
                let permit = match batch.pop() {
                    Some(permit) => permit,
                    None => Arc::clone(&permits)
                        .acquire_owned()
                        .await
                        .expect("the semaphore is never closed"),
                };
                let held = self.inner.hold(delivery, permit, &context);
                let (shared, handler, context) = (
                    Arc::clone(&self.inner),
                    Arc::clone(&handler),
                    Arc::clone(&context),
                );
                match context.routing.lane(&held.delivery.message) {
                    None => {
                        tasks.spawn(async move {
                            shared.handle_alone(handler.as_ref(), held, &context).await;
                        });
                    }
                    Some(group) => {
                        let group = group.to_owned();
                        if let Some(first) = lanes.push(&group, held) {
                            let lanes = lanes.clone();
                            tasks.spawn(async move {
                                shared
                                    .handle_lane(handler.as_ref(), &group, first, &lanes, &context)
                                    .await;
                            });
                        }
                    }
                }
            }
        }
        let drained = tokio::time::timeout(self.shutdown_deadline, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            // Handlers stop, roll back and give their messages back; a task
            // that does not notice in time (stuck outside the handler) is
            // aborted, and its message given back below.
            cut_off.cancel();
            let stopped = tokio::time::timeout(CUT_OFF_GRACE, async {
                while tasks.join_next().await.is_some() {}
            })
            .await;
            if stopped.is_err() {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
            }
        }
        // What aborted lanes still held stops its heartbeats here; every
        // delivery left unsettled is given back.
        drop(lanes.close_all());
        let cut_off = context.unsettled.drain();
        if !cut_off.is_empty() {
            tracing::warn!(consumer = %self.inner.name, cut_off = cut_off.len(), "shutdown deadline passed; giving running messages back");
        }
        for delivery in &cut_off {
            self.inner.give_back(delivery).await;
        }
        // The last acknowledgements go out before run returns.
        drop(context);
        if acker.await.is_err() {
            tracing::warn!(consumer = %self.inner.name, "the acknowledgement task failed; unacknowledged messages come back as duplicates");
        }
        purger.abort();
        Ok(())
    }

    /// Acknowledgements leave through one task that sends whatever has
    /// gathered as one batch: under load, one DeleteMessageBatch per ten
    /// messages instead of ten DeleteMessage calls, and no added wait when
    /// idle. Batches go out concurrently (as many as handlers run), so
    /// acknowledgements never queue up behind each other past their lease.
    /// The task ends when every sender (the run context) is gone.
    fn spawn_acker(&self) -> (mpsc::UnboundedSender<Delivery>, tokio::task::JoinHandle<()>) {
        let (acks, mut pending) = mpsc::unbounded_channel::<Delivery>();
        let shared = Arc::clone(&self.inner);
        let most_in_flight = self.concurrency;
        let acker = tokio::spawn(async move {
            let mut in_flight = JoinSet::new();
            while let Some(first) = pending.recv().await {
                let mut batch = Vec::with_capacity(MAX_BATCH);
                batch.push(first);
                while batch.len() < MAX_BATCH {
                    match pending.try_recv() {
                        Ok(delivery) => batch.push(delivery),
                        Err(_) => break,
                    }
                }
                while in_flight.len() >= most_in_flight {
                    in_flight.join_next().await;
                }
                let shared = Arc::clone(&shared);
                in_flight.spawn(async move {
                    let results = shared.transport.ack_batch(&batch).await;
                    for (delivery, result) in batch.iter().zip(results) {
                        if let Err(error) = result {
                            // The effect is committed: a redelivery is a duplicate.
                            tracing::warn!(message_id = %delivery.message.id, %error, "acknowledgement failed; the message will come back as a duplicate");
                        }
                    }
                });
            }
            while in_flight.join_next().await.is_some() {}
        });
        (acks, acker)
    }

    /// A queue without a dead-letter queue is refused unless the builder
    /// said otherwise: a permanent failure there could only be retried
    /// forever.
    fn refuse_without_dead_letter_queue(
        &self,
        settings: &QueueSettings,
    ) -> Result<(), ConsumerError> {
        if settings.dead_letter_queue || self.without_dead_letter_queue {
            return Ok(());
        }
        Err(ConsumerError::NoDeadLetterQueue {
            queue: settings.queue_name.clone(),
        })
    }

    /// The inbox TTL: at least the queue's redelivery horizon, or a refusal
    /// that explains the computation.
    fn inbox_ttl(&self, settings: &QueueSettings) -> Result<Duration, ConsumerError> {
        let required = settings.redelivery_horizon;
        match self.inbox_ttl {
            Some(configured) if configured < required => Err(ConsumerError::InboxTtlTooShort {
                configured,
                required,
                explanation: settings.horizon_explanation.clone(),
            }),
            Some(configured) => Ok(configured),
            None => Ok(required + TTL_MARGIN),
        }
    }

    fn handler_timeout(&self, settings: &QueueSettings) -> Duration {
        self.handler_timeout.unwrap_or_else(|| {
            (settings.lease * HANDLER_TIMEOUT_IN_LEASES).max(SHORTEST_DEFAULT_HANDLER_TIMEOUT)
        })
    }

    fn spawn_purger(&self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let shared = Arc::clone(&self.inner);
        tokio::spawn(async move {
            loop {
                match shared.inbox.purge_expired(now_ms()).await {
                    Ok(0) => {}
                    Ok(purged) => {
                        tracing::debug!(consumer = %shared.name, purged, "forgot expired inbox records")
                    }
                    Err(error) => {
                        tracing::warn!(consumer = %shared.name, %error, "inbox purge failed; will retry")
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(PURGE_INTERVAL) => {}
                    () = shutdown.cancelled() => break,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;
    use crate::error::{Failure, TransportError};
    use crate::inbox::SqliteInbox;

    /// A transport whose deliveries say nothing of their group; it is only
    /// built into consumers here, never run.
    struct Groupless;

    fn never() -> TransportError {
        TransportError::new("groupless", "never called: the consumer is only built")
    }

    #[async_trait]
    impl Transport for Groupless {
        async fn receive(&self, _: usize, _: Duration) -> Result<Vec<Delivery>, TransportError> {
            Err(never())
        }
        async fn ack(&self, _: &Delivery) -> Result<(), TransportError> {
            Err(never())
        }
        async fn extend(&self, _: &Delivery, _: Duration) -> Result<(), TransportError> {
            Err(never())
        }
        async fn retry(
            &self,
            _: &Delivery,
            _: Duration,
            _: &Failure,
        ) -> Result<(), TransportError> {
            Err(never())
        }
        async fn dead_letter(&self, _: &Delivery, _: &Failure) -> Result<(), TransportError> {
            Err(never())
        }
        async fn release(&self, _: &Delivery) -> Result<(), TransportError> {
            Err(never())
        }
        async fn settings(&self) -> Result<QueueSettings, TransportError> {
            Err(never())
        }
    }

    #[tokio::test]
    async fn group_order_required_over_a_transport_without_groups_is_refused_at_build() {
        let inbox = SqliteInbox::new(
            sqlx::SqlitePool::connect_lazy("sqlite::memory:").expect("an in-memory database"),
        );
        let refused = Consumer::builder("steps")
            .transport(Groupless)
            .inbox(inbox.clone())
            .group_order(GroupOrder::Required)
            .build();
        let Err(error @ ConsumerError::GroupsNotCarried { .. }) = refused else {
            panic!("built: group order required over a transport without groups");
        };
        assert!(error.to_string().contains("Groupless"), "{error}");
        for order in [GroupOrder::Auto, GroupOrder::Off] {
            assert!(
                Consumer::builder("steps")
                    .transport(Groupless)
                    .inbox(inbox.clone())
                    .group_order(order)
                    .build()
                    .is_ok(),
                "{order:?} asks nothing the transport cannot give"
            );
        }
    }
}
