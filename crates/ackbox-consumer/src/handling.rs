//! One message, from its claim in the inbox to its acknowledgement, and what
//! happens when that fails.
//!
//! An attempt opens a transaction on the application's database, claims the
//! message's effect key in the inbox as its first statement, runs the
//! handler (under the handler timeout), commits, and only then acknowledges.
//! A transient failure is retried after a backoff with full jitter — by the
//! broker for a message nothing waits on, in place for a message its group
//! waits on (so nothing of the group overtakes it, and the messages behind
//! it are not received again and again) — until the attempts run out; a
//! permanent one goes to the dead-letter queue at once, with its reason.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use opentelemetry::context::FutureExt;
use sha2::{Digest, Sha256};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::consumer::{RunContext, Shared, millis, now_ms};
use crate::context::{Handling, handling};
use crate::decision::Decision;
use crate::error::{Failure, HandlerError};
use crate::group::Lanes;
use crate::handler::{OnReplay, ResultHandler};
use crate::held::Held;
use crate::inbox::{Claim, ClaimRequest, Inbox};
use crate::message::{Delivery, Message};
use crate::telemetry::Attempt;
use crate::testing::CrashPoint;
use crate::trace::AttemptSpan;
use crate::transport::Transport;

/// Who retries a message that failed transiently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// The broker, after the backoff (`ChangeMessageVisibility`, a nack).
    ByBroker,
    /// The consumer, holding the message through the backoff: its group
    /// waits behind it.
    InPlace,
}

/// How one attempt ended.
enum Outcome {
    /// Nothing more to do for this attempt.
    Settled(Decision),
    /// The attempt failed; the caller decides between retry and dead letter.
    Failed(HandlerError),
}

/// Rolls back now. Dropping a transaction only queues its rollback until the
/// connection is used again, and until then its locks — the inbox claim among
/// them — hold up every concurrent duplicate of the message.
async fn roll_back<DB: sqlx::Database>(transaction: sqlx::Transaction<'static, DB>) {
    if let Err(error) = transaction.rollback().await {
        tracing::debug!(%error, "rollback failed; the database ends the transaction with the connection");
    }
}

impl<T: Transport, I: Inbox> Shared<T, I> {
    /// Holds a delivery just received: its permit, its heartbeat.
    pub(crate) fn hold(
        self: &Arc<Self>,
        delivery: Delivery,
        permit: OwnedSemaphorePermit,
        context: &RunContext,
    ) -> Held {
        let lease_lost = Arc::new(AtomicBool::new(false));
        let heartbeat = (self.heartbeat && !context.lease.is_zero()).then(|| {
            self.spawn_heartbeat(delivery.clone(), context.lease, Arc::clone(&lease_lost))
        });
        Held::new(delivery, permit, &context.unsettled, heartbeat, lease_lost)
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
                        shared.stats.count_extension();
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

    /// A message nothing waits on: a transient failure goes back to the
    /// broker, to come again after its backoff.
    pub(crate) async fn handle_alone<H: ResultHandler<I::Database>>(
        &self,
        handler: &H,
        held: Held,
        context: &RunContext,
    ) {
        self.settle(handler, &held, context, Retry::ByBroker).await;
        held.settle();
    }

    /// A group's lane, starting with `first`: its messages one at a time, in
    /// the order they were delivered. The lane stops at a message it cannot
    /// settle (shutdown, a lost lease, a failure only the broker can retry)
    /// and gives back, unstarted, everything behind it.
    pub(crate) async fn handle_lane<H: ResultHandler<I::Database>>(
        &self,
        handler: &H,
        group: &str,
        first: Held,
        lanes: &Lanes<Held>,
        context: &RunContext,
    ) {
        let mut next = Some(first);
        while let Some(held) = next.take() {
            if context.shutdown.is_cancelled() || held.lease_lost() {
                self.give_back_unstarted(std::iter::once(held).chain(lanes.close(group)))
                    .await;
                return;
            }
            let decision = self.settle(handler, &held, context, Retry::InPlace).await;
            held.settle();
            if !decision.settles() {
                self.give_back_unstarted(lanes.close(group)).await;
                return;
            }
            next = lanes.next(group);
        }
    }

    async fn give_back_unstarted(&self, held: impl IntoIterator<Item = Held>) {
        for held in held {
            self.give_back(&held.delivery).await;
            held.settle();
        }
    }

    /// Gives a message back at once, to be delivered again.
    pub(crate) async fn give_back(&self, delivery: &Delivery) {
        if let Err(error) = self.transport.release(delivery).await {
            tracing::warn!(consumer = %self.name, message_id = %delivery.message.id, %error, "could not give a message back; it returns when its lease ends");
        }
    }

    /// Attempts `held` until it is settled or handed back, logging and
    /// counting each attempt; returns the last decision.
    async fn settle<H: ResultHandler<I::Database>>(
        &self,
        handler: &H,
        held: &Held,
        context: &RunContext,
        retry: Retry,
    ) -> Decision {
        let message = &held.delivery.message;
        let effect_key = (self.effect_key)(message);
        let event_type = self.event_types.label(message);
        let mut number = message.receive_count.max(1);
        loop {
            let trace = AttemptSpan::start(&self.name, &context.queue, message, number);
            let trace_id = trace.trace_id();
            let attempt = Attempt {
                consumer: &self.name,
                queue: &context.queue,
                message,
                effect_key: &effect_key,
                event_type: &event_type,
                number,
                trace_id: trace_id.as_deref(),
            };
            let (decision, failure, wait) = async {
                let started = Instant::now();
                let (decision, failure, wait) =
                    match self.attempt(handler, held, &attempt, context).await {
                        Outcome::Settled(decision) => (decision, None, None),
                        Outcome::Failed(error) => {
                            let (decision, wait) = self
                                .after_failure(&held.delivery, &error, number, retry)
                                .await;
                            (decision, Some(error.failure()), wait)
                        }
                    };
                self.stats.count(decision);
                attempt.record(decision, started.elapsed(), failure.as_ref());
                (decision, failure, wait)
            }
            .instrument(attempt.span())
            .with_context(trace.context())
            .await;
            trace.end(decision, failure.as_ref());
            let wait = wait.zip(failure);
            let Some((delay, failure)) = wait else {
                return decision;
            };
            let waited_out = tokio::select! {
                () = tokio::time::sleep(delay) => true,
                () = context.shutdown.cancelled() => false,
                () = context.cut_off.cancelled() => false,
            };
            if !waited_out {
                // The broker keeps the rest of the backoff.
                self.retry_later(&held.delivery, delay, &failure).await;
                return Decision::Failed;
            }
            if held.lease_lost() {
                self.stats.count(Decision::Released);
                return Decision::Released;
            }
            number = number.saturating_add(1);
        }
    }

    /// What follows a failed attempt number `number`: the dead-letter queue
    /// for a permanent failure or the last attempt; otherwise a retry after
    /// a backoff — handed to the broker, or returned to wait out in place.
    async fn after_failure(
        &self,
        delivery: &Delivery,
        error: &HandlerError,
        number: u32,
        retry: Retry,
    ) -> (Decision, Option<Duration>) {
        let failure = error.failure();
        if matches!(error, HandlerError::Permanent { .. }) || number >= self.retry.max_attempts {
            return match self.transport.dead_letter(delivery, &failure).await {
                Ok(()) => (Decision::Quarantined, None),
                Err(transport_error) => {
                    tracing::error!(consumer = %self.name, message_id = %delivery.message.id, %transport_error, "could not dead-letter; retrying after the longest backoff instead");
                    self.retry_later(delivery, self.retry.cap, &failure).await;
                    (Decision::Failed, None)
                }
            };
        }
        let delay = if self.budget.try_spend() {
            self.retry.backoff(number)
        } else {
            tracing::warn!(consumer = %self.name, "retry budget exhausted; backing off to the cap");
            self.retry.cap
        };
        match retry {
            Retry::ByBroker => {
                self.retry_later(delivery, delay, &failure).await;
                (Decision::Failed, None)
            }
            Retry::InPlace => (Decision::Failed, Some(delay)),
        }
    }

    async fn retry_later(&self, delivery: &Delivery, delay: Duration, failure: &Failure) {
        if let Err(error) = self.transport.retry(delivery, delay, failure).await {
            tracing::warn!(consumer = %self.name, message_id = %delivery.message.id, %error, "could not schedule the retry; the message returns when its lease ends");
        }
    }

    fn crashes_at(&self, point: CrashPoint, message: &Message) -> bool {
        self.faults
            .as_ref()
            .is_some_and(|faults| faults.fires(point, &message.id))
    }

    /// One attempt: claim, handle, commit, acknowledge.
    async fn attempt<H: ResultHandler<I::Database>>(
        &self,
        handler: &H,
        held: &Held,
        attempt: &Attempt<'_>,
        context: &RunContext,
    ) -> Outcome {
        let message = attempt.message;
        if context.routing.refuses(message) {
            return Outcome::Failed(HandlerError::permanent(
                "MissingGroupId",
                "the consumer keeps message groups in order and this message has no group",
            ));
        }
        let on_replay = message.is_replay().then(|| handler.on_replay(message));
        if on_replay == Some(OnReplay::Skip) {
            self.acknowledge(held, context);
            return Outcome::Settled(Decision::Skipped);
        }
        let fingerprint = hex::encode(Sha256::digest(message.body.as_bytes()));
        let now = now_ms();
        let mut transaction = match self.inbox.begin().await {
            Ok(transaction) => transaction,
            Err(error) => return Outcome::Failed(error.into()),
        };
        let claim = self
            .inbox
            .claim(
                &mut transaction,
                ClaimRequest {
                    consumer: &self.name,
                    effect_key: attempt.effect_key,
                    fingerprint: &fingerprint,
                    message_id: &message.id,
                    now_ms: now,
                    expires_at_ms: now.saturating_add(millis(context.ttl)),
                },
            )
            .await;
        let rebuilding = on_replay == Some(OnReplay::Rebuild);
        match claim {
            Err(error) => {
                roll_back(transaction).await;
                Outcome::Failed(error.into())
            }
            Ok(Claim::PayloadMismatch) => {
                roll_back(transaction).await;
                Outcome::Failed(HandlerError::permanent(
                    "PayloadMismatch",
                    format!(
                        "effect key {} was applied before with a different payload",
                        attempt.effect_key
                    ),
                ))
            }
            Ok(Claim::Duplicate { result }) if !rebuilding => {
                roll_back(transaction).await;
                if let Err(error) = handler.replay(message, result).await {
                    return Outcome::Failed(error);
                }
                self.acknowledge(held, context);
                Outcome::Settled(Decision::Duplicate)
            }
            // A rebuild applies a replayed message again over its claim.
            Ok(Claim::Fresh | Claim::Duplicate { .. }) => {
                self.apply(handler, held, attempt, context, transaction)
                    .await
            }
        }
    }

    /// Runs the handler in the claiming transaction and commits it.
    async fn apply<H: ResultHandler<I::Database>>(
        &self,
        handler: &H,
        held: &Held,
        attempt: &Attempt<'_>,
        context: &RunContext,
        mut transaction: sqlx::Transaction<'static, I::Database>,
    ) -> Outcome {
        let message = attempt.message;
        // A crashed process's connection closes and its database rolls the
        // transaction back at once; so do we.
        if self.crashes_at(CrashPoint::DuringHandler, message) {
            roll_back(transaction).await;
            return Outcome::Settled(Decision::Crashed);
        }
        let call = handling(
            Handling::of(message),
            handler.handle(message, &mut transaction),
        );
        let handled = tokio::select! {
            handled = tokio::time::timeout(context.handler_timeout, call) => Some(handled),
            () = context.cut_off.cancelled() => None,
        };
        let result = match handled {
            None => {
                roll_back(transaction).await;
                self.give_back(&held.delivery).await;
                return Outcome::Settled(Decision::Released);
            }
            Some(Err(_elapsed)) => {
                roll_back(transaction).await;
                self.stats.count_timeout();
                attempt.record_timeout();
                return Outcome::Failed(HandlerError::transient(
                    "HandlerTimeout",
                    format!(
                        "the handler ran longer than its timeout of {:?}; it was cancelled and its transaction rolled back",
                        context.handler_timeout
                    ),
                ));
            }
            Some(Ok(Err(error))) => {
                roll_back(transaction).await;
                return Outcome::Failed(error);
            }
            Some(Ok(Ok(result))) => result,
        };
        if let Some(result) = result {
            let stored = self
                .inbox
                .store_result(&mut transaction, &self.name, attempt.effect_key, &result)
                .await;
            if let Err(error) = stored {
                roll_back(transaction).await;
                return Outcome::Failed(error.into());
            }
        }
        if self.crashes_at(CrashPoint::BeforeCommit, message) {
            roll_back(transaction).await;
            return Outcome::Settled(Decision::Crashed);
        }
        // An ambiguous commit error is safe: if it did commit, the next
        // delivery finds the claim and is a duplicate.
        if let Err(error) = transaction.commit().await {
            return Outcome::Failed(error.into());
        }
        if self.crashes_at(CrashPoint::AfterCommitBeforeAck, message) {
            return Outcome::Settled(Decision::Crashed);
        }
        self.acknowledge(held, context);
        Outcome::Settled(Decision::Applied)
    }

    fn acknowledge(&self, held: &Held, context: &RunContext) {
        if held.lease_lost() {
            tracing::warn!("not acknowledging: the lease may belong to another consumer now");
            return;
        }
        // The acker lives as long as any run context; this cannot fail
        // while `context` is borrowed.
        let _ = context.acks.send(held.delivery.clone());
    }
}
