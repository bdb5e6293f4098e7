//! The consumer: receive, claim, handle, commit, acknowledge — in that order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, field};

use crate::error::{ConsumerError, Failure, HandlerError};
use crate::handler::{Handler, Plain, ResultHandler};
use crate::inbox::{Claim, ClaimRequest, Inbox};
use crate::message::{Delivery, Message};
use crate::retry::{RetryBudget, RetryPolicy};
use crate::testing::{CrashPoint, Faults};
use crate::transport::{QueueSettings, Transport};

/// Most messages one receive asks for (the SQS limit).
const MAX_BATCH: usize = 10;
/// Extra time the inbox remembers past the queue's redelivery horizon.
const TTL_MARGIN: Duration = Duration::from_secs(3_600);
/// How long cut-off handlers get to roll back and give their messages back.
const CUT_OFF_GRACE: Duration = Duration::from_secs(5);
/// How often expired inbox records are purged.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);

/// Derives a message's effect key: what makes two deliveries the same effect.
pub type EffectKey = Arc<dyn Fn(&Message) -> String + Send + Sync>;

/// What the consumer decided about one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The effect committed and the message was acknowledged.
    Applied,
    /// The effect had been applied before; the message was acknowledged.
    Duplicate,
    /// The handler failed transiently; the message comes back after a backoff.
    Failed,
    /// The message went to the dead-letter queue with its reason.
    Quarantined,
    /// A simulated crash stopped the work ([`Faults`]).
    Crashed,
    /// The shutdown deadline cut the handler off: rolled back, given back.
    Released,
    /// A replayed message for a handler that is not replay-safe: acknowledged
    /// without running it.
    Skipped,
}

impl Decision {
    fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Duplicate => "duplicate",
            Self::Failed => "failed",
            Self::Quarantined => "quarantined",
            Self::Crashed => "crashed",
            Self::Released => "released",
            Self::Skipped => "skipped",
        }
    }
}

/// Counts of decisions since the consumer was built.
#[derive(Debug, Default)]
pub struct ConsumerStats {
    applied: AtomicU64,
    duplicates: AtomicU64,
    failed: AtomicU64,
    quarantined: AtomicU64,
    crashed: AtomicU64,
    released: AtomicU64,
    skipped: AtomicU64,
    extensions: AtomicU64,
}

impl ConsumerStats {
    fn count(&self, decision: Decision) {
        let counter = match decision {
            Decision::Applied => &self.applied,
            Decision::Duplicate => &self.duplicates,
            Decision::Failed => &self.failed,
            Decision::Quarantined => &self.quarantined,
            Decision::Crashed => &self.crashed,
            Decision::Released => &self.released,
            Decision::Skipped => &self.skipped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Effects committed and acknowledged.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Deliveries found in the inbox and acknowledged without a handler call.
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Transient failures sent back for a retry.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Messages sent to the dead-letter queue.
    pub fn quarantined(&self) -> u64 {
        self.quarantined.load(Ordering::Relaxed)
    }

    /// Simulated crashes.
    pub fn crashed(&self) -> u64 {
        self.crashed.load(Ordering::Relaxed)
    }

    /// Messages given back when the shutdown deadline cut their handler off.
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }

    /// Replayed messages skipped because their handler is not replay-safe.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Lease extensions made by heartbeats.
    pub fn extensions(&self) -> u64 {
        self.extensions.load(Ordering::Relaxed)
    }
}

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
    /// payment id. Without it, the message id is the key — which makes a
    /// message *sent* twice two effects. Never use receipt handles or
    /// receive times.
    pub fn effect_key(mut self, key: impl Fn(&Message) -> String + Send + Sync + 'static) -> Self {
        self.settings.effect_key = Some(Arc::new(key));
        self
    }

    /// Messages handled at once (default 16).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.settings.concurrency = concurrency.max(1);
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

    /// Extend the lease at half its length while a handler runs (default on).
    pub fn heartbeat(mut self, heartbeat: bool) -> Self {
        self.settings.heartbeat = heartbeat;
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
    /// The consumer.
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
        } = self.settings;
        if name.is_empty() {
            return Err(ConsumerError::Missing("a name"));
        }
        Ok(Consumer {
            inner: Arc::new(Shared {
                name,
                transport: self.transport,
                inbox: self.inbox,
                effect_key: effect_key
                    .unwrap_or_else(|| Arc::new(|message: &Message| message.id.clone())),
                retry,
                budget,
                heartbeat,
                faults,
                stats: ConsumerStats::default(),
            }),
            concurrency,
            wait,
            shutdown_deadline,
            inbox_ttl,
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
}

impl<T, I> std::fmt::Debug for Consumer<T, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("name", &self.inner.name)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

/// Rolls back now. Dropping a transaction only queues its rollback until the
/// connection is used again, and until then its locks — the inbox claim among
/// them — hold up every concurrent duplicate of the message.
async fn roll_back<DB: sqlx::Database>(transaction: sqlx::Transaction<'static, DB>) {
    if let Err(error) = transaction.rollback().await {
        tracing::debug!(%error, "rollback failed; the database ends the transaction with the connection");
    }
}

/// What one `run` gives each of its message tasks.
struct RunContext {
    /// The queue's lease, which heartbeats renew.
    lease: Duration,
    /// How long inbox records are kept.
    ttl: Duration,
    /// Committed deliveries to acknowledge.
    acks: mpsc::UnboundedSender<Delivery>,
    /// Cancelled when the shutdown deadline passes: running handlers stop,
    /// roll back and give their messages back.
    cut_off: CancellationToken,
}

/// What every message task shares.
struct Shared<T, I> {
    name: String,
    transport: T,
    inbox: I,
    effect_key: EffectKey,
    retry: RetryPolicy,
    budget: RetryBudget,
    heartbeat: bool,
    faults: Option<Arc<Faults>>,
    stats: ConsumerStats,
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

fn millis(duration: Duration) -> i64 {
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
        let ttl = self.inbox_ttl(&settings)?;
        self.inner.inbox.migrate().await?;
        let handler = Arc::new(handler);
        let (acks, acker) = self.spawn_acker();
        let cut_off = CancellationToken::new();
        let context = Arc::new(RunContext {
            lease: settings.lease,
            ttl,
            acks,
            cut_off: cut_off.clone(),
        });
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let running: Arc<Mutex<HashMap<u64, Delivery>>> = Arc::default();
        let mut tasks = JoinSet::new();
        let purger = self.spawn_purger(shutdown.clone());
        let mut next_task = 0u64;
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
                    self.release(&delivery).await;
                    continue;
                }
                let permit = match batch.pop() {
                    Some(permit) => permit,
                    None => Arc::clone(&permits)
                        .acquire_owned()
                        .await
                        .expect("the semaphore is never closed"),
                };
                next_task += 1;
                running
                    .lock()
                    .expect("running lock poisoned")
                    .insert(next_task, delivery.clone());
                let (shared, handler, running, context) = (
                    Arc::clone(&self.inner),
                    Arc::clone(&handler),
                    Arc::clone(&running),
                    Arc::clone(&context),
                );
                let task = next_task;
                tasks.spawn(async move {
                    shared
                        .process(handler.as_ref(), &delivery, &context, permit)
                        .await;
                    running.lock().expect("running lock poisoned").remove(&task);
                });
            }
        }
        let drained = tokio::time::timeout(self.shutdown_deadline, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            // Handlers stop, roll back and give their messages back; a task
            // that does not notice in time (stuck outside the handler) is
            // aborted, and its message given back here.
            cut_off.cancel();
            let stopped = tokio::time::timeout(CUT_OFF_GRACE, async {
                while tasks.join_next().await.is_some() {}
            })
            .await;
            if stopped.is_err() {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
            }
            let cut_off: Vec<Delivery> = running
                .lock()
                .expect("running lock poisoned")
                .drain()
                .map(|(_, delivery)| delivery)
                .collect();
            tracing::warn!(consumer = %self.inner.name, cut_off = cut_off.len(), "shutdown deadline passed; giving running messages back");
            for delivery in &cut_off {
                self.release(delivery).await;
            }
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

    async fn release(&self, delivery: &Delivery) {
        if let Err(error) = self.inner.transport.release(delivery).await {
            tracing::warn!(consumer = %self.inner.name, message_id = %delivery.message.id, %error, "could not give a message back; it returns when its lease ends");
        }
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

impl<T: Transport, I: Inbox> Shared<T, I> {
    async fn process<H: ResultHandler<I::Database>>(
        self: &Arc<Self>,
        handler: &H,
        delivery: &Delivery,
        context: &RunContext,
        _permit: OwnedSemaphorePermit,
    ) {
        let lease = context.lease;
        let message = &delivery.message;
        let effect_key = (self.effect_key)(message);
        let span = tracing::info_span!(
            "ackbox.consume",
            consumer = %self.name,
            message_id = %message.id,
            effect_key = %effect_key,
            event_type = message.attribute("event_type").unwrap_or_default(),
            aggregate_id = message.attribute("aggregate_id").unwrap_or_default(),
            attempt = message.receive_count,
            receive_count = message.receive_count,
            decision = field::Empty,
            failure_reason = field::Empty,
        );
        async {
            let started = std::time::Instant::now();
            let lease_lost = Arc::new(AtomicBool::new(false));
            let heartbeat = (self.heartbeat && !lease.is_zero())
                .then(|| self.spawn_heartbeat(delivery.clone(), lease, Arc::clone(&lease_lost)));
            let decision = self
                .decide(handler, delivery, &effect_key, context, &lease_lost)
                .await;
            if let Some(heartbeat) = heartbeat {
                heartbeat.abort();
            }
            self.stats.count(decision);
            self.measure(decision, started.elapsed());
            tracing::Span::current().record("decision", decision.as_str());
            tracing::info!(decision = decision.as_str(), "message handled");
        }
        .instrument(span)
        .await;
    }

    fn measure(&self, decision: Decision, elapsed: Duration) {
        let consumer = self.name.clone();
        match decision {
            Decision::Applied => {
                metrics::counter!("consumer_success_total", "consumer" => consumer.clone())
                    .increment(1);
            }
            Decision::Duplicate => {
                metrics::counter!("consumer_duplicate_total", "consumer" => consumer.clone())
                    .increment(1);
            }
            // Counted with their reason where they are decided.
            Decision::Skipped => {
                metrics::counter!("consumer_skipped_total", "consumer" => consumer.clone())
                    .increment(1);
            }
            Decision::Failed | Decision::Quarantined | Decision::Crashed | Decision::Released => {}
        }
        metrics::histogram!(
            "consumer_processing_seconds",
            "consumer" => consumer,
            "decision" => decision.as_str()
        )
        .record(elapsed.as_secs_f64());
    }

    fn spawn_heartbeat(
        self: &Arc<Self>,
        delivery: Delivery,
        lease: Duration,
        lease_lost: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 2).await;
                match shared.transport.extend(&delivery, lease).await {
                    Ok(()) => {
                        shared.stats.extensions.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!(
                            "consumer_visibility_extension_total",
                            "consumer" => shared.name.clone()
                        )
                        .increment(1);
                    }
                    Err(error) => {
                        // Someone else may hold the message now: the outcome
                        // of this delivery is uncertain, so it must not be
                        // acknowledged (the inbox makes the other holder's
                        // attempt a duplicate if ours commits).
                        tracing::warn!(message_id = %delivery.message.id, %error, "lease extension failed; the lease may be lost");
                        lease_lost.store(true, Ordering::Release);
                        break;
                    }
                }
            }
        })
    }

    fn crashes_at(&self, point: CrashPoint, message: &Message) -> bool {
        self.faults
            .as_ref()
            .is_some_and(|faults| faults.fires(point, &message.id))
    }

    async fn decide<H: ResultHandler<I::Database>>(
        &self,
        handler: &H,
        delivery: &Delivery,
        effect_key: &str,
        context: &RunContext,
        lease_lost: &AtomicBool,
    ) -> Decision {
        let message = &delivery.message;
        if message.is_replay() && !handler.replay_safe() {
            self.acknowledge(delivery, lease_lost, context);
            return Decision::Skipped;
        }
        let fingerprint = hex::encode(Sha256::digest(message.body.as_bytes()));
        let now = now_ms();
        let mut transaction = match self.inbox.begin().await {
            Ok(transaction) => transaction,
            Err(error) => return self.failed(delivery, HandlerError::from(error)).await,
        };
        let claim = self
            .inbox
            .claim(
                &mut transaction,
                ClaimRequest {
                    consumer: &self.name,
                    effect_key,
                    fingerprint: &fingerprint,
                    message_id: &message.id,
                    now_ms: now,
                    expires_at_ms: now.saturating_add(millis(context.ttl)),
                },
            )
            .await;
        match claim {
            Err(error) => {
                roll_back(transaction).await;
                self.failed(delivery, HandlerError::from(error)).await
            }
            Ok(Claim::Duplicate { result }) => {
                roll_back(transaction).await;
                if let Err(error) = handler.replay(message, result).await {
                    return self.failed(delivery, error).await;
                }
                self.acknowledge(delivery, lease_lost, context);
                Decision::Duplicate
            }
            Ok(Claim::PayloadMismatch) => {
                roll_back(transaction).await;
                let error = HandlerError::permanent(
                    "PayloadMismatch",
                    format!("effect key {effect_key} was applied before with a different payload"),
                );
                self.failed(delivery, error).await
            }
            Ok(Claim::Fresh) => {
                // A crashed process's connection closes and its database
                // rolls the transaction back at once; so do we.
                if self.crashes_at(CrashPoint::DuringHandler, message) {
                    roll_back(transaction).await;
                    return Decision::Crashed;
                }
                let handled = tokio::select! {
                    handled = handler.handle(message, &mut transaction) => Some(handled),
                    () = context.cut_off.cancelled() => None,
                };
                let result = match handled {
                    None => {
                        roll_back(transaction).await;
                        self.give_back(delivery).await;
                        return Decision::Released;
                    }
                    Some(Err(error)) => {
                        roll_back(transaction).await;
                        return self.failed(delivery, error).await;
                    }
                    Some(Ok(result)) => result,
                };
                if let Some(result) = result {
                    let stored = self
                        .inbox
                        .store_result(&mut transaction, &self.name, effect_key, &result)
                        .await;
                    if let Err(error) = stored {
                        roll_back(transaction).await;
                        return self.failed(delivery, HandlerError::from(error)).await;
                    }
                }
                if self.crashes_at(CrashPoint::BeforeCommit, message) {
                    roll_back(transaction).await;
                    return Decision::Crashed;
                }
                // An ambiguous commit error is safe: if it did commit, the
                // next delivery finds the claim and is a duplicate.
                if let Err(error) = transaction.commit().await {
                    return self.failed(delivery, HandlerError::from(error)).await;
                }
                if self.crashes_at(CrashPoint::AfterCommitBeforeAck, message) {
                    return Decision::Crashed;
                }
                self.acknowledge(delivery, lease_lost, context);
                Decision::Applied
            }
        }
    }

    async fn give_back(&self, delivery: &Delivery) {
        if let Err(error) = self.transport.release(delivery).await {
            tracing::warn!(%error, "could not give a message back; it returns when its lease ends");
        }
    }

    fn acknowledge(&self, delivery: &Delivery, lease_lost: &AtomicBool, context: &RunContext) {
        if lease_lost.load(Ordering::Acquire) {
            tracing::warn!("not acknowledging: the lease may belong to another consumer now");
            return;
        }
        // The acker lives as long as any run context; this cannot fail
        // while `context` is borrowed.
        let _ = context.acks.send(delivery.clone());
    }

    /// A failure: transient ones come back after a backoff until the attempts
    /// run out; permanent ones, and transient ones out of attempts, go to the
    /// dead-letter queue with their reason.
    async fn failed(&self, delivery: &Delivery, error: HandlerError) -> Decision {
        let failure: Failure = error.failure();
        tracing::Span::current().record(
            "failure_reason",
            format!("{}: {}", failure.class, failure.message),
        );
        metrics::counter!(
            "consumer_failure_total",
            "consumer" => self.name.clone(),
            "reason" => failure.class.clone()
        )
        .increment(1);
        let attempt = delivery.message.receive_count;
        let exhausted = attempt >= self.retry.max_attempts;
        if matches!(error, HandlerError::Permanent { .. }) || exhausted {
            match self.transport.dead_letter(delivery, &failure).await {
                Ok(()) => return Decision::Quarantined,
                Err(transport_error) => {
                    tracing::error!(%transport_error, "could not dead-letter; retrying after the longest backoff instead");
                    self.retry_later(delivery, self.retry.cap, &failure).await;
                    return Decision::Failed;
                }
            }
        }
        let delay = if self.budget.try_spend() {
            self.retry.backoff(attempt)
        } else {
            tracing::warn!("retry budget exhausted; backing off to the cap");
            self.retry.cap
        };
        self.retry_later(delivery, delay, &failure).await;
        Decision::Failed
    }

    async fn retry_later(&self, delivery: &Delivery, delay: Duration, failure: &Failure) {
        if let Err(error) = self.transport.retry(delivery, delay, failure).await {
            tracing::warn!(%error, "could not schedule the retry; the message returns when its lease ends");
        }
    }
}
