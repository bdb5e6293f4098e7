//! The run with ackbox-consumer: an inbox claim in every handler's
//! transaction, the charge behind a side-effect record, reconciliation of
//! late answers, replays skipped, and a version-guarded projection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ackbox_consumer::effects::{EffectState, Effects};
use ackbox_consumer::outbox::{EVENT_ID_ATTRIBUTE, Outbox};
use ackbox_consumer::projection::{Projection, Verdict};
use ackbox_consumer::testing::UnreliableTransport;
use ackbox_consumer::{
    CancellationToken, Consumer, Handler, HandlerError, Message, OnReplay, RetryPolicy,
    SqsTransport, async_trait,
};
use sqlx::Transaction;

use crate::app::AppDb;
use crate::gateway::GatewayClient;
use crate::report::{Charges, ConsumerKind, Tally};
use crate::stage::{
    CALL_TIMEOUT, CONCURRENCY, OrderPlaced, RECEIVE_WAIT, Stage, StatusChanged, status_event,
};

/// Charges an order once, however often its message arrives.
struct Payments<A: AppDb> {
    effects: Effects<A::Effects>,
    gateway: GatewayClient,
    outbox: A::Outbox,
    status_queue: String,
}

#[async_trait]
impl<A: AppDb> Handler<A::Db> for Payments<A> {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, A::Db>,
    ) -> Result<(), HandlerError> {
        let order: OrderPlaced = message.json()?;
        // The effect key is the order: a second OrderPlaced for it (however
        // it came about) returns the first charge instead of a new one.
        let charge_id = self
            .effects
            .run(
                &format!("charge-order-{}", order.order_id),
                |idempotency_key| {
                    self.gateway
                        .charge(idempotency_key, order.order_id, order.cents)
                },
            )
            .await?;
        A::record_payment(transaction, order.order_id, &charge_id).await?;
        self.outbox
            .enqueue(
                transaction,
                status_event(&self.status_queue, order.order_id, "PAID", 2),
            )
            .await?;
        Ok(())
    }
}

/// Keeps each order's status from its events, whatever their order.
struct Statuses<A: AppDb> {
    projection: Projection<A::Effects>,
}

#[async_trait]
impl<A: AppDb> Handler<A::Db> for Statuses<A> {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, A::Db>,
    ) -> Result<(), HandlerError> {
        let event: StatusChanged = message.json()?;
        let verdict = self
            .projection
            .apply_if_newer(transaction, &event.order_id.to_string(), event.version)
            .await?;
        if verdict == Verdict::Apply {
            A::set_status(transaction, event.order_id, &event.status, event.version).await?;
        }
        Ok(())
    }

    /// A read model: replaying history into it is harmless.
    fn on_replay(&self, _: &Message) -> OnReplay {
        OnReplay::ApplyOnce
    }
}

type FlakyConsumer<A> = Consumer<Arc<UnreliableTransport<SqsTransport>>, <A as AppDb>::Inbox>;

/// A consumer keyed on outbox event ids (so a republished event is a
/// duplicate), crashing at random as the plan says.
fn flaky_consumer<A: AppDb>(
    name: &str,
    transport: Arc<UnreliableTransport<SqsTransport>>,
    stage: &Stage<A>,
) -> anyhow::Result<FlakyConsumer<A>> {
    Ok(Consumer::builder(name)
        .transport(transport)
        .inbox(stage.app.inbox())
        .effect_key(|message: &Message| {
            message
                .attribute(EVENT_ID_ATTRIBUTE)
                .unwrap_or(&message.id)
                .to_owned()
        })
        .concurrency(CONCURRENCY)
        .retry(RetryPolicy::exponential(
            1_000,
            Duration::from_millis(100),
            Duration::from_secs(1),
        ))
        .wait(RECEIVE_WAIT)
        .faults(stage.plan.consumer_faults())
        .build()?)
}

/// What the reconciler settled.
#[derive(Debug, Default)]
struct Reconciliation {
    /// UNKNOWN charges found at the gateway.
    found: u64,
    /// UNKNOWN charges the gateway had no trace of, set to be made again.
    not_found: u64,
}

/// Runs the workload with ackbox-consumer on `stage` until every order is
/// paid and projected and the replay has come and gone.
pub(crate) async fn run<A: AppDb>(
    stage: Stage<A>,
    orders: u64,
    deadline: Duration,
) -> anyhow::Result<Tally> {
    let started = Instant::now();
    stage.app.migrate_consumer_stores().await?;
    let shutdown = CancellationToken::new();
    let (relay_task, relay_faults) = stage.start_relay(shutdown.clone());

    let effects = Effects::new(stage.app.effect_store())
        .timeout(CALL_TIMEOUT)
        .retry_budget(5);
    let payments_transport = stage.transport(&stage.payments_queue, false);
    let status_transport = stage.transport(&stage.status_queue, stage.plan.reorder_status_events);
    let payment_consumer = Arc::new(flaky_consumer(
        "payments",
        Arc::clone(&payments_transport),
        &stage,
    )?);
    let status_consumer = Arc::new(flaky_consumer(
        "order-status",
        Arc::clone(&status_transport),
        &stage,
    )?);
    let payments_task = {
        let handler = Payments::<A> {
            effects: effects.clone(),
            gateway: stage.gateway.clone(),
            outbox: stage.outbox.clone(),
            status_queue: stage.status_queue.clone(),
        };
        let (consumer, shutdown) = (Arc::clone(&payment_consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    let statuses_task = {
        let handler = Statuses::<A> {
            projection: Projection::new(stage.app.version_store(), "order-status"),
        };
        let (consumer, shutdown) = (Arc::clone(&status_consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    let reconciler_task = {
        let (effects, gateway, shutdown) =
            (effects.clone(), stage.gateway.clone(), shutdown.clone());
        tokio::spawn(async move {
            let mut reconciliation = Reconciliation::default();
            while !shutdown.is_cancelled() {
                if let Ok(pass) = effects
                    .reconcile(|record| {
                        let gateway = gateway.clone();
                        async move { gateway.lookup(&record.idempotency_key).await }
                    })
                    .await
                {
                    reconciliation.found += pass.succeeded;
                    reconciliation.not_found += pass.retried;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            reconciliation
        })
    };

    let deadline = started + deadline;
    let settled = || async {
        anyhow::Ok(
            stage.app.payments().await? == orders
                && stage.app.paid().await? == orders
                && stage.quiet().await?,
        )
    };
    while !settled().await? {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the run with ackbox-consumer did not settle in time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let replayed = stage.replay().await?;
    while payment_consumer.stats().skipped() < replayed || !settled().await? {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the replay did not settle in time with ackbox-consumer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    shutdown.cancel();
    payments_task.await??;
    statuses_task.await??;
    relay_task.await?;
    let reconciliation = reconciler_task.await?;
    let census = effects.report().await?;
    let lingering = census
        .iter()
        .filter(|(state, count)| *state != EffectState::Succeeded && *count > 0)
        .count();
    anyhow::ensure!(lingering == 0, "effects left unsettled: {census:?}");

    let (payments, statuses) = (payment_consumer.stats(), status_consumer.stats());
    let tally = Tally {
        consumer: ConsumerKind::WithSdk,
        orders,
        charges: Charges::count(&stage.ledger, orders),
        payment_rows: stage.app.payments().await?,
        projected_paid: stage.app.paid().await?,
        duplicates_absorbed: payments.duplicates() + statuses.duplicates(),
        late_answers_reconciled: reconciliation.found,
        recalls_after_not_found: reconciliation.not_found,
        late_answers_recharged: 0,
        replays_skipped: payments.skipped(),
        replays_charged: 0,
        worker_crashes: payments.crashed() + statuses.crashed(),
        relay_crashes: relay_faults.crashes(),
        duplicates_injected: payments_transport.duplicated() + status_transport.duplicated(),
        slow_answers: stage.ledger.slow_answers(),
        replayed_orders: replayed,
        seconds: started.elapsed().as_secs_f64(),
    };
    stage.stop().await?;
    Ok(tally)
}
