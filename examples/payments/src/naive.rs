//! The run without ackbox-consumer: the consumer most code starts as. It
//! receives a message, calls the gateway (a fresh idempotency key per call,
//! and a retry with another one when the answer is late), writes to the
//! database, and deletes the message. No inbox, no effect record, no
//! replay check, no version guard — under the same faults as the run with
//! ackbox-consumer, through the same kind of broker and transport.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ackbox_consumer::effects::CallError;
use ackbox_consumer::outbox::{EVENT_ID_ATTRIBUTE, Outbox};
use ackbox_consumer::testing::{CrashPoint, UnreliableTransport};
use ackbox_consumer::{CancellationToken, Delivery, Message, SqsTransport, Transport, async_trait};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::app::AppDb;
use crate::faults::Crashes;
use crate::report::{Charges, ConsumerKind, Tally};
use crate::stage::{
    CALL_TIMEOUT, CONCURRENCY, OrderPlaced, RECEIVE_WAIT, Stage, StatusChanged, status_event,
};

/// Calls a naive client makes for one charge before it gives up and lets
/// the message come back.
const CALL_ATTEMPTS: u32 = 3;

/// The most messages one receive asks for (the SQS limit).
const MAX_BATCH: usize = 10;

/// What a naive consumer did.
#[derive(Debug, Default)]
struct Counters {
    /// Handler calls running now.
    in_flight: AtomicU64,
    /// Charges re-made with a new idempotency key after a late answer.
    late_answers_recharged: AtomicU64,
    /// Replayed messages handled (a replayed payment is charged).
    replays_handled: AtomicU64,
    /// Distinct outbox events applied, so the run can tell when every
    /// event has been applied at least once.
    events_applied: Mutex<HashSet<String>>,
}

impl Counters {
    fn events_applied(&self) -> u64 {
        let applied = self
            .events_applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        u64::try_from(applied).unwrap_or(u64::MAX)
    }
}

/// How a naive handler ended.
enum Outcome {
    /// The work is committed; the message may be deleted.
    Done,
    /// The consumer died (simulated) partway: the message comes back when
    /// its lease ends.
    Crashed,
}

#[async_trait]
trait NaiveHandler: Send + Sync + 'static {
    /// Does the message's work, dying at `BeforeCommit` when `crashes` says.
    async fn handle(&self, message: &Message, crashes: &Crashes) -> anyhow::Result<Outcome>;
}

/// Receive, handle, delete: nothing more.
struct NaiveConsumer {
    name: &'static str,
    transport: Arc<UnreliableTransport<SqsTransport>>,
    crashes: Arc<Crashes>,
    counters: Arc<Counters>,
}

impl NaiveConsumer {
    async fn run<H: NaiveHandler>(&self, handler: H, shutdown: CancellationToken) {
        let handler = Arc::new(handler);
        let permits = Arc::new(Semaphore::new(CONCURRENCY));
        let mut tasks = JoinSet::new();
        while !shutdown.is_cancelled() {
            while tasks.try_join_next().is_some() {}
            let free = permits.available_permits().min(MAX_BATCH);
            if free == 0 {
                tasks.join_next().await;
                continue;
            }
            let deliveries = match self.transport.receive(free, RECEIVE_WAIT).await {
                Ok(deliveries) => deliveries,
                Err(error) => {
                    tracing::warn!(consumer = self.name, %error, "receive failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            for delivery in deliveries {
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    break;
                };
                self.counters.in_flight.fetch_add(1, Ordering::SeqCst);
                let (handler, transport, crashes, counters, name) = (
                    Arc::clone(&handler),
                    Arc::clone(&self.transport),
                    Arc::clone(&self.crashes),
                    Arc::clone(&self.counters),
                    self.name,
                );
                tasks.spawn(async move {
                    process(&*handler, &delivery, &transport, &crashes, name).await;
                    counters.in_flight.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                });
            }
        }
        while tasks.join_next().await.is_some() {}
    }
}

async fn process<H: NaiveHandler>(
    handler: &H,
    delivery: &Delivery,
    transport: &UnreliableTransport<SqsTransport>,
    crashes: &Crashes,
    name: &str,
) {
    if crashes.fire(CrashPoint::DuringHandler) {
        return;
    }
    match handler.handle(&delivery.message, crashes).await {
        Ok(Outcome::Done) => {
            if crashes.fire(CrashPoint::AfterCommitBeforeAck) {
                return;
            }
            if let Err(error) = transport.ack(delivery).await {
                // A duplicated delivery's second delete finds the message
                // gone; a naive consumer shrugs.
                tracing::debug!(consumer = name, %error, "delete failed");
            }
        }
        Ok(Outcome::Crashed) => {}
        Err(error) => {
            // No nack, no backoff: the message comes back when its lease ends.
            tracing::debug!(consumer = name, %error, "handling failed");
        }
    }
}

/// Charges the order the message names, every time the message arrives.
struct NaivePayments<A: AppDb> {
    stage: Arc<Stage<A>>,
    counters: Arc<Counters>,
}

impl<A: AppDb> NaivePayments<A> {
    /// Charges `order`, retrying a late answer the way a client without
    /// effect records does: with a new idempotency key, since nothing
    /// durable remembers the old one.
    async fn charge(&self, order: &OrderPlaced) -> anyhow::Result<String> {
        for attempt in 1..=CALL_ATTEMPTS {
            let idempotency_key = format!("naive-{:032x}", rand::random::<u128>());
            let call = self
                .stage
                .gateway
                .charge(idempotency_key, order.order_id, order.cents);
            match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(charge_id)) => return Ok(charge_id),
                Ok(Err(CallError::Rejected(reason))) => {
                    anyhow::bail!("the gateway refused the charge: {reason}")
                }
                Ok(Err(CallError::Ambiguous(_))) | Err(_) if attempt < CALL_ATTEMPTS => {
                    self.counters
                        .late_answers_recharged
                        .fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(CallError::Ambiguous(_))) | Err(_) => {}
            }
        }
        anyhow::bail!("the gateway did not answer in time, {CALL_ATTEMPTS} times")
    }
}

#[async_trait]
impl<A: AppDb> NaiveHandler for NaivePayments<A> {
    async fn handle(&self, message: &Message, crashes: &Crashes) -> anyhow::Result<Outcome> {
        let order: OrderPlaced = serde_json::from_str(&message.body)?;
        let charge_id = self.charge(&order).await?;
        if message.is_replay() {
            self.counters
                .replays_handled
                .fetch_add(1, Ordering::Relaxed);
        }
        if crashes.fire(CrashPoint::BeforeCommit) {
            return Ok(Outcome::Crashed);
        }
        let mut transaction = self.stage.app.begin().await?;
        A::record_payment(&mut transaction, order.order_id, &charge_id).await?;
        self.stage
            .outbox
            .enqueue(
                &mut transaction,
                status_event(&self.stage.status_queue, order.order_id, "PAID", 2),
            )
            .await?;
        transaction.commit().await?;
        Ok(Outcome::Done)
    }
}

/// Sets the status an event names: the last event handled wins.
struct NaiveStatuses<A: AppDb> {
    stage: Arc<Stage<A>>,
    counters: Arc<Counters>,
}

#[async_trait]
impl<A: AppDb> NaiveHandler for NaiveStatuses<A> {
    async fn handle(&self, message: &Message, crashes: &Crashes) -> anyhow::Result<Outcome> {
        let event: StatusChanged = serde_json::from_str(&message.body)?;
        let mut transaction = self.stage.app.begin().await?;
        A::set_status(
            &mut transaction,
            event.order_id,
            &event.status,
            event.version,
        )
        .await?;
        if crashes.fire(CrashPoint::BeforeCommit) {
            transaction.rollback().await?;
            return Ok(Outcome::Crashed);
        }
        transaction.commit().await?;
        if message.is_replay() {
            self.counters
                .replays_handled
                .fetch_add(1, Ordering::Relaxed);
        }
        if let Some(event_id) = message.attribute(EVENT_ID_ATTRIBUTE) {
            self.counters
                .events_applied
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(event_id.to_owned());
        }
        Ok(Outcome::Done)
    }
}

/// Runs the workload with naive consumers on `stage` until every order is
/// paid, every status event applied, and the replay has come and gone.
pub(crate) async fn run<A: AppDb>(
    stage: Stage<A>,
    orders: u64,
    deadline: Duration,
) -> anyhow::Result<Tally> {
    let started = Instant::now();
    let stage = Arc::new(stage);
    let shutdown = CancellationToken::new();
    let (relay_task, relay_faults) = stage.start_relay(shutdown.clone());
    let crashes = stage.plan.naive_crashes();
    let payments = Arc::new(NaiveConsumer {
        name: "naive-payments",
        transport: stage.transport(&stage.payments_queue, false),
        crashes: Arc::clone(&crashes),
        counters: Arc::default(),
    });
    let statuses = Arc::new(NaiveConsumer {
        name: "naive-order-status",
        transport: stage.transport(&stage.status_queue, stage.plan.reorder_status_events),
        crashes: Arc::clone(&crashes),
        counters: Arc::default(),
    });
    let payments_task = {
        let handler = NaivePayments {
            stage: Arc::clone(&stage),
            counters: Arc::clone(&payments.counters),
        };
        let (consumer, shutdown) = (Arc::clone(&payments), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    let statuses_task = {
        let handler = NaiveStatuses {
            stage: Arc::clone(&stage),
            counters: Arc::clone(&statuses.counters),
        };
        let (consumer, shutdown) = (Arc::clone(&statuses), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };

    // Without an inbox nothing records what was applied, so "done" is:
    // every order has a payment, every status event (a PLACED and a PAID
    // per order, at least) was applied, nothing is left to publish or
    // deliver, and no handler is running — twice in a row, since these are
    // read one after another, not at one instant.
    let idle = || {
        payments.counters.in_flight.load(Ordering::SeqCst) == 0
            && statuses.counters.in_flight.load(Ordering::SeqCst) == 0
    };
    let settled = || async {
        anyhow::Ok(
            idle()
                && stage.app.orders_with_a_payment().await? == orders
                && statuses.counters.events_applied() >= 2 * orders
                && stage.quiet().await?
                && idle(),
        )
    };
    let deadline = started + deadline;
    let settle = |what: &'static str| {
        let settled = &settled;
        async move {
            let mut in_a_row = 0;
            while in_a_row < 2 {
                anyhow::ensure!(Instant::now() < deadline, "{what} did not settle in time");
                in_a_row = if settled().await? { in_a_row + 1 } else { 0 };
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok(())
        }
    };
    settle("the run without ackbox-consumer").await?;
    let replayed = stage.replay().await?;
    while payments.counters.replays_handled.load(Ordering::Relaxed) < replayed
        || statuses.counters.replays_handled.load(Ordering::Relaxed) < replayed
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the replay did not settle in time without ackbox-consumer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    settle("the replay without ackbox-consumer").await?;

    shutdown.cancel();
    payments_task.await?;
    statuses_task.await?;
    relay_task.await?;

    let tally = Tally {
        consumer: ConsumerKind::Naive,
        orders,
        charges: Charges::count(&stage.ledger, orders),
        payment_rows: stage.app.payments().await?,
        projected_paid: stage.app.paid().await?,
        duplicates_absorbed: 0,
        late_answers_reconciled: 0,
        recalls_after_not_found: 0,
        late_answers_recharged: payments
            .counters
            .late_answers_recharged
            .load(Ordering::Relaxed),
        replays_skipped: 0,
        replays_charged: payments.counters.replays_handled.load(Ordering::Relaxed),
        worker_crashes: crashes.count(),
        relay_crashes: relay_faults.crashes(),
        duplicates_injected: payments.transport.duplicated() + statuses.transport.duplicated(),
        slow_answers: stage.ledger.slow_answers(),
        replayed_orders: replayed,
        seconds: started.elapsed().as_secs_f64(),
    };
    drop((payments, statuses));
    let stage = Arc::into_inner(stage)
        .ok_or_else(|| anyhow::anyhow!("a naive consumer outlived its run"))?;
    stage.stop().await?;
    Ok(tally)
}
