//! The rest of the failure matrix (ARCHITECTURE.md): an outbox relay that publishes an
//! event twice, an external call that times out, an event that arrives out
//! of order, and a replay — against a real broker and a real database
//! (SQLite always, PostgreSQL when `ACKBOX_TEST_POSTGRES_URL` is set).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackbox_consumer::effects::{CallError, EffectError, EffectState, EffectStore, Effects, Lookup};
use ackbox_consumer::outbox::{EVENT_ID_ATTRIBUTE, Outbox, OutboxEvent, OutboxRelay};
use ackbox_consumer::projection::{GapPolicy, Projection, Verdict, VersionStore};
use ackbox_consumer::testing::{CrashPoint, Faults};
use ackbox_consumer::{
    CancellationToken, Consumer, Handler, HandlerError, Inbox, Message, OnReplay, REPLAY_ATTRIBUTE,
    SqsPublisher, async_trait,
};
use aws_sdk_sqs::types::MessageAttributeValue;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::Transaction;
use support::{Backend, Broker, Ledger, Script, SqsBroker, body, eventually};

async fn outbox_relay_publishing_an_event_twice_is_absorbed_by_the_inbox<K: Broker, B: Backend>(
    backend: B,
) {
    let broker = K::start(5, 10).await;
    let outbox = backend.outbox();
    outbox.migrate().await.unwrap();
    // One event committed with its business change; one rolled back.
    let mut transaction = backend.inbox().begin().await.unwrap();
    let event_id = outbox
        .enqueue(
            &mut transaction,
            OutboxEvent::new(broker.destination(), body("order-1")),
        )
        .await
        .unwrap();
    transaction.commit().await.unwrap();
    let mut transaction = backend.inbox().begin().await.unwrap();
    outbox
        .enqueue(
            &mut transaction,
            OutboxEvent::new(broker.destination(), body("never")),
        )
        .await
        .unwrap();
    transaction.rollback().await.unwrap();
    assert_eq!(outbox.backlog().await.unwrap().unpublished, 1);

    // The relay dies after publishing, before marking: the next pass
    // publishes the same event again.
    let faults = Arc::new(Faults::new());
    faults.crash_once(CrashPoint::AfterPublishBeforeMark, &event_id);
    let relay = OutboxRelay::new(outbox.clone(), broker.publisher().await).faults(faults);
    assert!(relay.run_once().await.unwrap().crashed);
    assert_eq!(relay.run_once().await.unwrap().published, 1);
    assert_eq!(
        relay.run_once().await.unwrap().published,
        0,
        "marked: not published a third time"
    );
    assert_eq!(outbox.backlog().await.unwrap().unpublished, 0);
    // JetStream drops the second copy (the event id is its Nats-Msg-Id);
    // elsewhere the inbox absorbs it.
    let copies = if K::DROPS_REPUBLISHED_EVENTS { 1 } else { 2 };
    assert_eq!(broker.depth().await.0, copies, "copies on the queue");
    // Published rows are purged once they are old enough, and only then.
    assert_eq!(outbox.purge_published(0).await.unwrap(), 0);
    assert_eq!(outbox.purge_published(i64::MAX).await.unwrap(), 1);

    let consumer = Arc::new(
        Consumer::builder("orders")
            .transport(broker.transport().await)
            .inbox(backend.inbox())
            .effect_key(|message| {
                message
                    .attribute(EVENT_ID_ATTRIBUTE)
                    .unwrap_or(&message.id)
                    .to_owned()
            })
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let shutdown = CancellationToken::new();
    let task = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move {
            consumer
                .run(Ledger::<B>::new(Arc::default()), shutdown)
                .await
        })
    };
    eventually(
        Duration::from_secs(10),
        "both copies are decided",
        || async { consumer.stats().applied() + consumer.stats().duplicates() == copies },
    )
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        backend.effects("order-1").await,
        1,
        "the second copy was absorbed"
    );
    assert_eq!(
        backend.effects("never").await,
        0,
        "a rolled-back event is never published"
    );
}

/// A payment provider that honours idempotency keys; it can be told to act
/// and then hang past the caller's timeout, or to hang without acting.
#[derive(Default)]
struct Gateway {
    charges: Mutex<HashMap<String, String>>,
    calls: AtomicU32,
    /// Next calls: `Some(true)` acts then hangs; `Some(false)` hangs first.
    hang: Mutex<Vec<bool>>,
}

impl Gateway {
    async fn charge(&self, idempotency_key: String) -> Result<String, CallError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let hang = self.hang.lock().unwrap().pop();
        if hang == Some(false) {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let reference = self
            .charges
            .lock()
            .unwrap()
            .entry(idempotency_key)
            .or_insert_with(|| format!("ch_{}", self.calls.load(Ordering::SeqCst)))
            .clone();
        if hang == Some(true) {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        Ok(reference)
    }

    fn lookup(&self, idempotency_key: &str) -> Lookup {
        self.charges
            .lock()
            .unwrap()
            .get(idempotency_key)
            .map_or(Lookup::NotFound, |reference| {
                Lookup::Succeeded(reference.clone())
            })
    }
}

async fn external_api_timeout_is_unknown_then_reconciled_never_a_blind_second_charge<B: Backend>(
    backend: B,
) {
    let store = backend.effect_store();
    store.migrate().await.unwrap();
    let effects = Effects::new(store.clone())
        .timeout(Duration::from_millis(200))
        .retry_budget(2);
    let gateway = Arc::new(Gateway::default());

    // The gateway charges, then the answer never comes: UNKNOWN.
    gateway.hang.lock().unwrap().push(true);
    let outcome = effects
        .run("charge:order-1", |key| gateway.charge(key))
        .await;
    assert!(
        matches!(outcome, Err(EffectError::Unknown(_))),
        "{outcome:?}"
    );
    // Running again does not call the gateway: UNKNOWN waits for reconciliation.
    let again = effects
        .run("charge:order-1", |key| gateway.charge(key))
        .await;
    assert!(matches!(again, Err(EffectError::Unknown(_))), "{again:?}");
    assert_eq!(gateway.calls.load(Ordering::SeqCst), 1, "no blind retry");
    let reconciled = effects
        .reconcile(|record| {
            let gateway = Arc::clone(&gateway);
            async move { gateway.lookup(&record.idempotency_key) }
        })
        .await
        .unwrap();
    assert_eq!(reconciled.succeeded, 1);
    let reference = effects
        .run("charge:order-1", |key| gateway.charge(key))
        .await
        .unwrap();
    assert_eq!(reference, "ch_1", "the stored reference, without a call");
    assert_eq!(gateway.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        gateway.charges.lock().unwrap().len(),
        1,
        "charged exactly once"
    );

    // The gateway hangs before acting: reconciliation finds nothing, and the
    // next run calls again with the same idempotency key.
    gateway.hang.lock().unwrap().push(false);
    assert!(
        effects
            .run("charge:order-2", |key| gateway.charge(key))
            .await
            .is_err()
    );
    let reconciled = effects
        .reconcile(|record| {
            let gateway = Arc::clone(&gateway);
            async move { gateway.lookup(&record.idempotency_key) }
        })
        .await
        .unwrap();
    // The timed-out call was abandoned before it acted: nothing to find, so
    // the effect may be called again — with the same idempotency key.
    assert_eq!(reconciled.retried, 1);
    let retried = effects
        .run("charge:order-2", |key| gateway.charge(key))
        .await
        .unwrap();
    assert_eq!(
        gateway.calls.load(Ordering::SeqCst),
        3,
        "one retry, no more"
    );
    let settled = effects
        .run("charge:order-2", |key| gateway.charge(key))
        .await
        .unwrap();
    assert_eq!(settled, retried, "settled: the stored reference");
    assert_eq!(gateway.calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        gateway
            .charges
            .lock()
            .unwrap()
            .keys()
            .filter(|key| key.as_str() == "charge:order-2")
            .count(),
        1
    );

    // A provider that never heard of it, past the budget: FAILED, for a person.
    gateway.hang.lock().unwrap().push(false);
    let never = Effects::new(store.clone())
        .timeout(Duration::from_millis(50))
        .retry_budget(1);
    assert!(
        never
            .run("charge:order-3", |_| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<_, CallError>("late".to_owned())
            })
            .await
            .is_err()
    );
    let reconciled = never
        .reconcile(|_| async { Lookup::NotFound })
        .await
        .unwrap();
    assert_eq!(reconciled.failed, 1);
    assert!(matches!(
        never.run("charge:order-3", |key| gateway.charge(key)).await,
        Err(EffectError::Failed { .. })
    ));
    let counts = effects.report().await.unwrap();
    assert!(counts.contains(&(EffectState::Succeeded, 2)), "{counts:?}");
    assert!(counts.contains(&(EffectState::Failed, 1)), "{counts:?}");
}

async fn out_of_order_events_leave_the_projection_at_the_newest_version<B: Backend>(backend: B) {
    let store = backend.effect_store();
    store.migrate().await.unwrap();
    let projection = Projection::new(store.clone(), "order-status");
    let mut verdicts = Vec::new();
    for version in [1, 3, 2, 3, 4] {
        let mut transaction = backend.inbox().begin().await.unwrap();
        verdicts.push(
            projection
                .apply_if_newer(&mut transaction, "order-1", version)
                .await
                .unwrap(),
        );
        transaction.commit().await.unwrap();
    }
    assert_eq!(
        verdicts,
        [
            Verdict::Apply,
            Verdict::Apply,
            Verdict::Stale,
            Verdict::Duplicate,
            Verdict::Apply
        ]
    );
    // A verdict rolled back with its transaction leaves nothing behind.
    let mut transaction = backend.inbox().begin().await.unwrap();
    assert_eq!(
        projection
            .apply_if_newer(&mut transaction, "order-1", 9)
            .await
            .unwrap(),
        Verdict::Apply
    );
    transaction.rollback().await.unwrap();
    let strict = Projection::new(store, "ledger").gaps(GapPolicy::Quarantine);
    let mut transaction = backend.inbox().begin().await.unwrap();
    assert_eq!(
        strict
            .apply_if_newer(&mut transaction, "order-1", 1)
            .await
            .unwrap(),
        Verdict::Apply
    );
    assert_eq!(
        strict
            .apply_if_newer(&mut transaction, "order-1", 3)
            .await
            .unwrap(),
        Verdict::Gap {
            expected: 2,
            got: 3
        }
    );
    assert_eq!(
        projection
            .apply_if_newer(&mut transaction, "order-1", 5)
            .await
            .unwrap(),
        Verdict::Apply
    );
}

/// The race a missing lock lets through: T1 applies v2 of a fresh aggregate
/// and has not committed; T2 judges v1. T2 must wait for T1 and then see v2.
async fn a_first_event_judged_behind_an_uncommitted_newer_one_waits_and_is_stale<B: Backend>(
    backend: B,
) {
    let store = backend.effect_store();
    store.migrate().await.unwrap();
    let projection = Projection::new(store.clone(), "order-status");
    let mut first = backend.inbox().begin().await.unwrap();
    assert_eq!(
        projection
            .apply_if_newer(&mut first, "order-1", 2)
            .await
            .unwrap(),
        Verdict::Apply
    );
    let (session_sender, session) = tokio::sync::oneshot::channel();
    let second = tokio::spawn({
        let (inbox, projection) = (backend.inbox(), projection.clone());
        async move {
            let mut transaction = inbox.begin().await.unwrap();
            session_sender
                .send(B::session(&mut transaction).await)
                .unwrap();
            let verdict = projection
                .apply_if_newer(&mut transaction, "order-1", 1)
                .await
                .unwrap();
            transaction.commit().await.unwrap();
            verdict
        }
    });
    backend
        .until_waiting_for_a_lock(session.await.unwrap())
        .await;
    assert!(
        !second.is_finished(),
        "the second judgment waits for the first transaction"
    );
    first.commit().await.unwrap();
    assert_eq!(second.await.unwrap(), Verdict::Stale);
    assert_eq!(
        backend.stored_version("order-status", "order-1").await,
        Some(2),
        "the stored version never goes down"
    );
    // Nor by a write that skipped the judgment.
    let mut unjudged = backend.inbox().begin().await.unwrap();
    store
        .set_version(&mut unjudged, "order-status", "order-1", 1)
        .await
        .unwrap();
    unjudged.commit().await.unwrap();
    assert_eq!(
        backend.stored_version("order-status", "order-1").await,
        Some(2)
    );
}

/// Many first events of a few aggregates at once, each in its own
/// transaction that logs what it applied: per aggregate, what was applied
/// rises in commit order and ends at the newest version sent.
async fn concurrent_events_of_fresh_aggregates_are_applied_in_rising_order<B: Backend>(backend: B) {
    const TASKS: usize = 20;
    const AGGREGATES: [&str; 3] = ["order-1", "order-2", "order-3"];
    let store = backend.effect_store();
    store.migrate().await.unwrap();
    let projection = Projection::new(store, "order-status");
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let events: Vec<(&'static str, i64)> = (0..TASKS)
        .map(|index| {
            (
                AGGREGATES[index % AGGREGATES.len()],
                rng.random_range(1..=8),
            )
        })
        .collect();
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = events
        .iter()
        .map(|&(aggregate, version)| {
            let (inbox, projection, start) =
                (backend.inbox(), projection.clone(), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                let mut transaction = inbox.begin().await.unwrap();
                let verdict = projection
                    .apply_if_newer(&mut transaction, aggregate, version)
                    .await
                    .unwrap();
                if verdict == Verdict::Apply {
                    // Held open a moment, so that the others pile up behind it.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    B::record(&mut transaction, &format!("{aggregate}:{version}"))
                        .await
                        .unwrap();
                }
                transaction.commit().await.unwrap();
                verdict
            })
        })
        .collect();
    let mut applied_verdicts = 0;
    for task in tasks {
        if task.await.unwrap() == Verdict::Apply {
            applied_verdicts += 1;
        }
    }
    let mut applied: HashMap<String, Vec<i64>> = HashMap::new();
    let logged = backend.ledger_keys().await;
    assert_eq!(logged.len(), applied_verdicts, "seed {seed}");
    for key in logged {
        let (aggregate, version) = key.rsplit_once(':').unwrap();
        applied
            .entry(aggregate.to_owned())
            .or_default()
            .push(version.parse().unwrap());
    }
    for aggregate in AGGREGATES {
        let sent: Vec<i64> = events
            .iter()
            .filter(|(of, _)| *of == aggregate)
            .map(|(_, version)| *version)
            .collect();
        let newest = sent.iter().copied().max();
        let order = applied.get(aggregate).cloned().unwrap_or_default();
        assert!(
            order.windows(2).all(|pair| pair[0] < pair[1]),
            "seed {seed}: {aggregate} sent {sent:?}, applied {order:?} in commit order"
        );
        assert_eq!(order.last().copied(), newest, "seed {seed}: {aggregate}");
        assert_eq!(
            backend.stored_version("order-status", aggregate).await,
            newest,
            "seed {seed}: {aggregate} sent {sent:?}"
        );
    }
}

/// A provider that counts its calls and the idempotency keys they carried.
#[derive(Default)]
struct Provider {
    idempotency_keys: Mutex<Vec<String>>,
    started: tokio::sync::Notify,
}

impl Provider {
    fn calls(&self) -> usize {
        self.idempotency_keys.lock().unwrap().len()
    }

    fn keys_sent_for(&self, effect_key: &str) -> Vec<String> {
        self.idempotency_keys
            .lock()
            .unwrap()
            .iter()
            .filter(|key| key.as_str() == effect_key)
            .cloned()
            .collect()
    }

    async fn charge(&self, idempotency_key: String) -> Result<String, CallError> {
        let reference = format!("ch_{idempotency_key}");
        self.idempotency_keys.lock().unwrap().push(idempotency_key);
        Ok(reference)
    }

    /// A call that never answers.
    async fn hang(&self, idempotency_key: String) -> Result<String, CallError> {
        self.idempotency_keys.lock().unwrap().push(idempotency_key);
        self.started.notify_one();
        std::future::pending().await
    }
}

/// Leaves `key` the way a process dying mid-call does: PENDING, its call
/// made and never answered, the run gone.
async fn crash_mid_call<S: EffectStore + Clone>(
    effects: &Effects<S>,
    provider: &Arc<Provider>,
    key: &str,
) {
    let run = tokio::spawn({
        let (effects, provider, key) = (effects.clone(), Arc::clone(provider), key.to_owned());
        async move { effects.run(&key, |sent| provider.hang(sent)).await }
    });
    provider.started.notified().await;
    run.abort();
    assert!(
        run.await.unwrap_err().is_cancelled(),
        "the run dies before its call times out"
    );
    let record = effects.store().get(key).await.unwrap().unwrap();
    assert_eq!(record.state, EffectState::Pending);
}

async fn an_effect_left_pending_by_a_crash_is_reconciled_not_stuck_and_not_repeated<B: Backend>(
    backend: B,
) {
    let store = backend.effect_store();
    store.migrate().await.unwrap();
    // A bound not longer than twice the timeout is raised: a live call may
    // last the whole timeout.
    assert_eq!(
        Effects::new(store.clone())
            .timeout(Duration::from_secs(1))
            .stale_pending_after(Duration::from_millis(100))
            .stale_pending_bound(),
        Duration::from_secs(2)
    );
    assert_eq!(
        Effects::new(store.clone()).stale_pending_bound(),
        Duration::from_secs(60)
    );
    let bound = Duration::from_millis(300);
    let effects = Effects::new(store.clone())
        .timeout(Duration::from_millis(150))
        .stale_pending_after(bound);
    assert_eq!(effects.stale_pending_bound(), bound);
    let provider = Arc::new(Provider::default());
    let charge = |key: String| {
        let provider = Arc::clone(&provider);
        async move { provider.charge(key).await }
    };

    // A fresh PENDING may be a call in progress: no second call.
    crash_mid_call(&effects, &provider, "charge:order-1").await;
    let again = effects.run("charge:order-1", charge).await;
    assert!(matches!(again, Err(EffectError::Pending(_))), "{again:?}");
    assert_eq!(provider.calls(), 1);
    // Past the bound it is as ambiguous as a timeout: UNKNOWN, still no call.
    tokio::time::sleep(bound + Duration::from_millis(50)).await;
    let stale = effects.run("charge:order-1", charge).await;
    assert!(matches!(stale, Err(EffectError::Unknown(_))), "{stale:?}");
    assert_eq!(provider.calls(), 1, "never called blindly");
    let record = store.get("charge:order-1").await.unwrap().unwrap();
    assert_eq!(record.state, EffectState::Unknown);
    let reconciled = effects
        .reconcile(
            |record| async move { Lookup::Succeeded(format!("ch_{}", record.idempotency_key)) },
        )
        .await
        .unwrap();
    assert_eq!((reconciled.stale_pending, reconciled.succeeded), (0, 1));

    // Reconciliation leaves a fresh PENDING alone, and picks a stale one up:
    // found done at the provider, it is SUCCEEDED without a second call.
    crash_mid_call(&effects, &provider, "charge:order-2").await;
    let asked = Arc::new(AtomicU32::new(0));
    let found = |record: ackbox_consumer::effects::EffectRecord| {
        let asked = Arc::clone(&asked);
        async move {
            asked.fetch_add(1, Ordering::SeqCst);
            Lookup::Succeeded(format!("ch_{}", record.idempotency_key))
        }
    };
    assert_eq!(
        effects.reconcile(found).await.unwrap(),
        Default::default(),
        "a call possibly in progress is not reconciled"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    assert_eq!(
        store.get("charge:order-2").await.unwrap().unwrap().state,
        EffectState::Pending
    );
    tokio::time::sleep(bound + Duration::from_millis(50)).await;
    let reconciled = effects.reconcile(found).await.unwrap();
    assert_eq!((reconciled.stale_pending, reconciled.succeeded), (1, 1));
    assert_eq!(
        store.get("charge:order-2").await.unwrap().unwrap().state,
        EffectState::Succeeded
    );
    let calls = provider.calls();
    assert_eq!(
        effects.run("charge:order-2", charge).await.unwrap(),
        "ch_charge:order-2"
    );
    assert_eq!(provider.calls(), calls, "the stored reference, no call");

    // Not found at the provider: RETRY, and the next run calls again, once,
    // with the same idempotency key.
    crash_mid_call(&effects, &provider, "charge:order-3").await;
    tokio::time::sleep(bound + Duration::from_millis(50)).await;
    let reconciled = effects
        .reconcile(|_| async { Lookup::NotFound })
        .await
        .unwrap();
    assert_eq!((reconciled.stale_pending, reconciled.retried), (1, 1));
    let calls = provider.calls();
    assert_eq!(
        effects.run("charge:order-3", charge).await.unwrap(),
        "ch_charge:order-3"
    );
    assert_eq!(
        effects.run("charge:order-3", charge).await.unwrap(),
        "ch_charge:order-3"
    );
    assert_eq!(provider.calls(), calls + 1, "exactly one more call");
    assert_eq!(
        provider.keys_sent_for("charge:order-3").len(),
        2,
        "the crashed call and its retry, with the same idempotency key"
    );
    let record = store.get("charge:order-3").await.unwrap().unwrap();
    assert_eq!((record.state, record.attempts), (EffectState::Succeeded, 2));
}

/// The ledger, declared safe to replay (a pure database effect).
struct ReplaySafe<B>(Ledger<B>);

#[async_trait]
impl<B: Backend> Handler<B::Db> for ReplaySafe<B> {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, B::Db>,
    ) -> Result<(), HandlerError> {
        self.0.handle(message, transaction).await
    }

    fn on_replay(&self, _: &Message) -> OnReplay {
        OnReplay::ApplyOnce
    }
}

async fn a_replay_triggers_no_irreversible_effect<B: Backend>(backend: B) {
    let broker = SqsBroker::start(5, 10).await;
    let replayed = MessageAttributeValue::builder()
        .data_type("String")
        .string_value("true")
        .build()
        .unwrap();
    for key in ["replayed-1", "replayed-2"] {
        broker
            .client
            .send_message()
            .queue_url(&broker.url)
            .message_body(body(key))
            .message_attributes(REPLAY_ATTRIBUTE, replayed.clone())
            .send()
            .await
            .unwrap();
    }
    let consumer = Arc::new(
        Consumer::builder("charges")
            .transport(broker.transport().await)
            .inbox(backend.inbox())
            .effect_key(support::business_key)
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let script = Arc::new(Script::default());
    let shutdown = CancellationToken::new();
    let task = {
        let (consumer, shutdown, script) =
            (Arc::clone(&consumer), shutdown.clone(), Arc::clone(&script));
        tokio::spawn(async move { consumer.run(Ledger::<B>::new(script), shutdown).await })
    };
    eventually(
        Duration::from_secs(10),
        "the replays are skipped",
        || async { consumer.stats().skipped() == 2 && broker.depth().await == (0, 0) },
    )
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        backend.total_effects().await,
        0,
        "an irreversible handler never runs on a replay"
    );
    assert_eq!(script.calls("replayed-1"), 0);

    // A replay-safe handler (a projection) does run on replays.
    broker
        .client
        .send_message()
        .queue_url(&broker.url)
        .message_body(body("projected"))
        .message_attributes(REPLAY_ATTRIBUTE, replayed)
        .send()
        .await
        .unwrap();
    let projector = Arc::new(
        Consumer::builder("projector")
            .transport(broker.transport().await)
            .inbox(backend.inbox())
            .effect_key(support::business_key)
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let shutdown = CancellationToken::new();
    let task = {
        let (projector, shutdown) = (Arc::clone(&projector), shutdown.clone());
        tokio::spawn(async move {
            projector
                .run(ReplaySafe(Ledger::<B>::new(Arc::default())), shutdown)
                .await
        })
    };
    eventually(Duration::from_secs(10), "the replay is applied", || async {
        projector.stats().applied() == 1
    })
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(backend.effects("projected").await, 1);
}

async fn several_relays_publish_each_event_once_and_fifo_queues_drop_republished_copies<
    B: Backend,
>(
    backend: B,
) {
    let broker = SqsBroker::start(30, 10).await;
    let outbox = backend.outbox();
    outbox.migrate().await.unwrap();
    let mut transaction = backend.inbox().begin().await.unwrap();
    for index in 0..200 {
        outbox
            .enqueue(
                &mut transaction,
                OutboxEvent::new(&broker.url, body(&format!("e{index}"))),
            )
            .await
            .unwrap();
    }
    transaction.commit().await.unwrap();
    // Three relays at once, small batches: they must share the work, not repeat it.
    let relays: Vec<_> = (0..3)
        .map(|_| {
            let relay = OutboxRelay::new(outbox.clone(), SqsPublisher::new(broker.client.clone()))
                .batch(10);
            tokio::spawn(async move {
                let mut published = 0;
                loop {
                    let pass = relay.run_once().await.unwrap();
                    if pass.published == 0 {
                        return published;
                    }
                    published += pass.published;
                }
            })
        })
        .collect();
    let mut published = 0;
    for relay in relays {
        published += relay.await.unwrap();
    }
    assert_eq!(published, 200, "each event published by exactly one relay");
    assert_eq!(broker.depth().await.0, 200);

    // On a FIFO queue the event id is the deduplication id: a relay that
    // dies after publishing republishes into the broker's dedup window.
    let fifo = broker
        .client
        .create_queue()
        .queue_name("events.fifo")
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let mut transaction = backend.inbox().begin().await.unwrap();
    let event_id = outbox
        .enqueue(
            &mut transaction,
            OutboxEvent::new(&fifo, body("fifo")).group("order-1"),
        )
        .await
        .unwrap();
    transaction.commit().await.unwrap();
    let faults = Arc::new(Faults::new());
    faults.crash_once(CrashPoint::AfterPublishBeforeMark, &event_id);
    let relay =
        OutboxRelay::new(outbox.clone(), SqsPublisher::new(broker.client.clone())).faults(faults);
    assert!(relay.run_once().await.unwrap().crashed);
    assert_eq!(relay.run_once().await.unwrap().published, 1);
    assert_eq!(
        broker.depth_of(&fifo).await.0,
        1,
        "the broker dropped the second copy"
    );
}

/// A destination no queue answers for (a typo, a deleted queue) must fail
/// the publication, not swallow the event behind a positive answer.
async fn an_event_no_queue_takes_stays_in_the_outbox<K: Broker, B: Backend>(backend: B) {
    let broker = K::start(5, 10).await;
    let outbox = backend.outbox();
    outbox.migrate().await.unwrap();
    let mut transaction = backend.inbox().begin().await.unwrap();
    outbox
        .enqueue(
            &mut transaction,
            OutboxEvent::new(format!("{}_missing", broker.destination()), body("o-1")),
        )
        .await
        .unwrap();
    transaction.commit().await.unwrap();
    let relay = OutboxRelay::new(outbox.clone(), broker.publisher().await);
    let pass = relay.run_once().await.unwrap();
    assert_eq!((pass.published, pass.failed), (0, 1), "refused, not lost");
    assert_eq!(outbox.backlog().await.unwrap().unpublished, 1);
}

support::for_each_transport!([
    outbox_relay_publishing_an_event_twice_is_absorbed_by_the_inbox,
    an_event_no_queue_takes_stays_in_the_outbox,
]);

support::for_each_backend!(
    external_api_timeout_is_unknown_then_reconciled_never_a_blind_second_charge,
    out_of_order_events_leave_the_projection_at_the_newest_version,
    a_first_event_judged_behind_an_uncommitted_newer_one_waits_and_is_stale,
    concurrent_events_of_fresh_aggregates_are_applied_in_rising_order,
    an_effect_left_pending_by_a_crash_is_reconciled_not_stuck_and_not_repeated,
    a_replay_triggers_no_irreversible_effect,
    several_relays_publish_each_event_once_and_fifo_queues_drop_republished_copies,
);
