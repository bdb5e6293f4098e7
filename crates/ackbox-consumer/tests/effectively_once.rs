//! The failure matrix (ARCHITECTURE.md), as tests that count business rows: a
//! real broker (ackbox over SQS always; RabbitMQ and NATS JetStream when
//! `ACKBOX_TEST_AMQP_URL` and `ACKBOX_TEST_NATS_URL` are set), a real
//! application database (SQLite always, PostgreSQL when
//! `ACKBOX_TEST_POSTGRES_URL` is set), and the consumer in between. One
//! suite, instantiated per transport and inbox database (ARCHITECTURE.md, "Conventions the tests cite").

mod support;

use std::sync::Arc;
use std::time::Duration;

use ackbox_consumer::outbox::{Outbox, OutboxEvent, OutboxRelay};
use ackbox_consumer::testing::{CrashPoint, Faults, UnreliableTransport};
use ackbox_consumer::{
    CancellationToken, Claim, ClaimRequest, Consumer, ConsumerError, Delivery, Failure, GroupOrder,
    Inbox, ResultHandler, RetryBudget, RetryPolicy, Transport,
};
use support::{Backend, Broker, Ledger, Script, SqsBroker, body, business_key, eventually};
use tokio::task::JoinHandle;

/// Retries at once, up to 5 attempts: for tests that are not about backoff.
fn quick_retries() -> RetryPolicy {
    RetryPolicy::exponential(5, Duration::ZERO, Duration::ZERO)
}

/// Runs `consumer` with a ledger handler until the returned token is cancelled.
fn spawn<B: Backend, T: Transport>(
    consumer: Arc<Consumer<T, B::Inbox>>,
    script: Arc<Script>,
) -> (CancellationToken, JoinHandle<Result<(), ConsumerError>>) {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move { consumer.run(Ledger::<B>::new(script), token).await });
    (shutdown, task)
}

/// Runs `consumer` with a ledger handler until `check` holds (at most
/// `limit`), then shuts it down.
async fn run_until<B, T, F, Fut>(
    consumer: Arc<Consumer<T, B::Inbox>>,
    script: Arc<Script>,
    limit: Duration,
    what: &str,
    check: F,
) where
    B: Backend,
    T: Transport,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let (shutdown, task) = spawn::<B, _>(consumer, script);
    eventually(limit, what, check).await;
    stop(shutdown, task).await;
}

async fn stop(shutdown: CancellationToken, task: JoinHandle<Result<(), ConsumerError>>) {
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the consumer stops")
        .unwrap()
        .unwrap();
}

fn consumer<B: Backend, T: Transport>(
    backend: &B,
    transport: T,
) -> ackbox_consumer::ConsumerBuilder<T, B::Inbox> {
    Consumer::builder("ledger")
        .transport(transport)
        .inbox(backend.inbox())
        .effect_key(business_key)
        .retry(quick_retries())
        .wait(Duration::from_millis(200))
}

async fn drained<K: Broker>(broker: &K) -> bool {
    broker.depth().await == (0, 0)
}

async fn worker_crash_after_commit_before_ack_is_a_duplicate_no_op<K: Broker, B: Backend>(
    backend: B,
) {
    let broker = K::start(1, 10).await;
    let id = broker.send(&body("k1")).await;
    let faults = Arc::new(Faults::new());
    faults.crash_once(CrashPoint::AfterCommitBeforeAck, &id);
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .faults(Arc::clone(&faults))
            .build()
            .unwrap(),
    );
    let script = Arc::new(Script::default());
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(10),
        "the redelivery is acknowledged",
        || async { consumer.stats().duplicates() == 1 && drained(&broker).await },
    )
    .await;
    assert_eq!(faults.crashes(), 1);
    assert_eq!(backend.effects("k1").await, 1, "one effect");
    assert_eq!(
        script.calls("k1"),
        1,
        "the duplicate never reached the handler"
    );
}

async fn worker_crash_before_commit_applies_the_effect_once<K: Broker, B: Backend>(backend: B) {
    let broker = K::start(1, 10).await;
    let id = broker.send(&body("k1")).await;
    let faults = Arc::new(Faults::new());
    faults.crash_once(CrashPoint::BeforeCommit, &id);
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .faults(faults)
            .build()
            .unwrap(),
    );
    let script = Arc::new(Script::default());
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(10),
        "the retry applies",
        || async { consumer.stats().applied() == 1 && drained(&broker).await },
    )
    .await;
    assert_eq!(backend.effects("k1").await, 1);
    assert_eq!(
        script.calls("k1"),
        2,
        "the crashed attempt rolled back and ran again"
    );
}

async fn visibility_too_short_a_concurrent_duplicate_does_not_double_commit<
    K: Broker,
    B: Backend,
>(
    backend: B,
) {
    let broker = K::start(1, 10).await;
    broker.send(&body("slow")).await;
    let script = Arc::new(Script::default());
    *script.delay.lock().unwrap() = Duration::from_millis(2_500);
    // Two consumers, no heartbeat: the lease runs out while the first is
    // still inside its transaction, and the second receives the message.
    let first = Arc::new(
        consumer(&backend, broker.transport().await)
            .heartbeat(false)
            .build()
            .unwrap(),
    );
    let second = Arc::new(
        consumer(&backend, broker.transport().await)
            .heartbeat(false)
            .build()
            .unwrap(),
    );
    let (shutdown_first, first_task) = spawn::<B, _>(Arc::clone(&first), Arc::clone(&script));
    let (shutdown_second, second_task) = spawn::<B, _>(Arc::clone(&second), Arc::clone(&script));
    eventually(
        Duration::from_secs(20),
        "both deliveries are decided",
        || async {
            let decided = first.stats().applied()
                + first.stats().duplicates()
                + second.stats().applied()
                + second.stats().duplicates();
            decided >= 2 && drained(&broker).await
        },
    )
    .await;
    stop(shutdown_first, first_task).await;
    stop(shutdown_second, second_task).await;
    assert_eq!(backend.effects("slow").await, 1, "never two effects");
    assert_eq!(first.stats().applied() + second.stats().applied(), 1);
}

async fn duplicate_delivery_has_one_business_effect<K: Broker, B: Backend>(backend: B) {
    let broker = K::start(5, 10).await;
    // The producer sent it twice, and the broker delivers each copy twice.
    broker.send(&body("order-7")).await;
    broker.send(&body("order-7")).await;
    let transport = UnreliableTransport::new(broker.transport().await)
        .duplicating(1.0)
        .reordering();
    let consumer = Arc::new(consumer(&backend, transport).build().unwrap());
    let script = Arc::new(Script::default());
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(10),
        "all four deliveries are decided",
        || async {
            consumer.stats().applied() + consumer.stats().duplicates() == 4
                && drained(&broker).await
        },
    )
    .await;
    assert_eq!(backend.effects("order-7").await, 1);
    assert_eq!(consumer.stats().duplicates(), 3);
}

async fn schema_incompatible_message_goes_to_the_dead_letter_queue_with_its_reason<
    K: Broker,
    B: Backend,
>(
    backend: B,
) {
    let broker = K::start(5, 10).await;
    broker.send("this is not JSON").await;
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .build()
            .unwrap(),
    );
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::new(Script::default()),
        Duration::from_secs(10),
        "the poison message is quarantined",
        || async { consumer.stats().quarantined() == 1 },
    )
    .await;
    assert_eq!(
        consumer.stats().failed(),
        0,
        "no retry of a message that cannot decode"
    );
    assert_eq!(
        broker.dead_letters().await,
        [("this is not JSON".to_owned(), "Deserialize".to_owned())]
    );
    assert!(drained(&broker).await);
    assert_eq!(backend.total_effects().await, 0);
}

async fn dependency_down_retries_are_bounded_backed_off_and_visible<K: Broker, B: Backend>(
    backend: B,
) {
    let broker = K::start(10, 10).await;
    broker.send(&body("down")).await;
    let script = Arc::new(Script::default());
    script.always_down.lock().unwrap().push("down".into());
    // An empty retry budget: every retry waits the cap, two seconds.
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .retry(RetryPolicy::exponential(
                3,
                Duration::from_secs(1),
                Duration::from_secs(2),
            ))
            .retry_budget(RetryBudget::new(0, 0.0))
            .build()
            .unwrap(),
    );
    let (shutdown, task) = spawn::<B, _>(Arc::clone(&consumer), Arc::clone(&script));
    eventually(
        Duration::from_secs(5),
        "the first attempt fails",
        || async { consumer.stats().failed() == 1 },
    )
    .await;
    assert_eq!(
        broker.depth().await,
        (0, 1),
        "the backlog is visible as in flight"
    );
    eventually(Duration::from_secs(20), "the attempts run out", || async {
        consumer.stats().quarantined() == 1
    })
    .await;
    stop(shutdown, task).await;
    assert_eq!(script.calls("down"), 3, "bounded attempts");
    let times = script.call_times.lock().unwrap().clone();
    for pair in times.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(1_900),
            "backed off: {:?}",
            pair[1] - pair[0]
        );
    }
    assert_eq!(
        broker.dead_letters().await,
        [(body("down"), "DependencyDown".to_owned())]
    );
    assert_eq!(backend.total_effects().await, 0);
}

async fn batch_partial_failure_does_not_redo_the_others<K: Broker, B: Backend>(backend: B) {
    let broker = K::start(5, 10).await;
    let bodies: Vec<String> = (0..10).map(|index| body(&format!("b{index}"))).collect();
    broker.send_batch(&bodies).await;
    let script = Arc::new(Script::default());
    script
        .transient_failures
        .lock()
        .unwrap()
        .insert("b3".into(), 1);
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .build()
            .unwrap(),
    );
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(10),
        "all ten are applied",
        || async { consumer.stats().applied() == 10 && drained(&broker).await },
    )
    .await;
    for index in 0..10 {
        let key = format!("b{index}");
        assert_eq!(backend.effects(&key).await, 1, "{key}");
        assert_eq!(script.calls(&key), if index == 3 { 2 } else { 1 }, "{key}");
    }
}

async fn redrive_of_already_applied_messages_is_skipped<K: Broker, B: Backend>(backend: B) {
    let broker = K::start(1, 1).await;
    let id = broker.send(&body("applied")).await;
    let faults = Arc::new(Faults::new());
    faults.crash_once(CrashPoint::AfterCommitBeforeAck, &id);
    let first = Arc::new(
        consumer(&backend, broker.transport().await)
            .faults(faults)
            .build()
            .unwrap(),
    );
    let script = Arc::new(Script::default());
    run_until::<B, _, _, _>(
        Arc::clone(&first),
        Arc::clone(&script),
        Duration::from_secs(10),
        "the effect commits and the worker dies",
        || async { first.stats().crashed() == 1 },
    )
    .await;
    // The crashed worker is gone, with its connection.
    drop(first);
    // Its one delivery used, the message is dead-lettered.
    eventually(
        Duration::from_secs(10),
        "the message is dead-lettered",
        || async { broker.dead_letter_depth().await == 1 },
    )
    .await;
    broker.redrive().await;
    let second = Arc::new(
        consumer(&backend, broker.transport().await)
            .build()
            .unwrap(),
    );
    run_until::<B, _, _, _>(
        Arc::clone(&second),
        Arc::clone(&script),
        Duration::from_secs(10),
        "the redriven message is skipped",
        || async { second.stats().duplicates() == 1 && drained(&broker).await },
    )
    .await;
    assert_eq!(backend.effects("applied").await, 1);
    assert_eq!(script.calls("applied"), 1);
}

async fn a_heartbeat_keeps_a_long_handler_s_lease<K: Broker, B: Backend>(backend: B) {
    // The handler runs 2.5 leases; heartbeats every second keep the 2 s lease.
    let broker = K::start(2, 10).await;
    broker.send(&body("long")).await;
    let script = Arc::new(Script::default());
    *script.delay.lock().unwrap() = Duration::from_millis(5_000);
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .concurrency(4)
            .build()
            .unwrap(),
    );
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(10),
        "the long handler finishes",
        || async { consumer.stats().applied() == 1 && drained(&broker).await },
    )
    .await;
    assert_eq!(
        script.calls("long"),
        1,
        "no second delivery while the handler ran"
    );
    assert!(
        consumer.stats().extensions() >= 2,
        "{}",
        consumer.stats().extensions()
    );
    assert_eq!(consumer.stats().duplicates(), 0);
}

async fn shutdown_gives_back_what_it_could_not_finish<K: Broker, B: Backend>(backend: B) {
    let broker = K::start(30, 10).await;
    broker.send(&body("unfinished")).await;
    let script = Arc::new(Script::default());
    *script.delay.lock().unwrap() = Duration::from_secs(10);
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .shutdown_deadline(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let (shutdown, task) = spawn::<B, _>(Arc::clone(&consumer), Arc::clone(&script));
    eventually(Duration::from_secs(5), "the handler starts", || async {
        script.calls("unfinished") == 1
    })
    .await;
    let stopping = std::time::Instant::now();
    stop(shutdown, task).await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "the deadline cut the handler off"
    );
    assert_eq!(
        backend.total_effects().await,
        0,
        "the cut-off transaction rolled back"
    );
    assert_eq!(consumer.stats().released(), 1);
    drop(consumer);
    // Given back at once, not after its 30 s lease: another receiver gets it.
    let receiver = broker.transport().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let received = receiver
            .receive(1, Duration::from_millis(500))
            .await
            .unwrap();
        if let Some(delivery) = received.first() {
            assert_eq!(delivery.message.body, body("unfinished"));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the message was not given back"
        );
    }
}

async fn an_inbox_ttl_shorter_than_the_redelivery_horizon_is_refused<K: Broker, B: Backend>(
    backend: B,
) {
    let broker = K::start(30, 5).await;
    let consumer = consumer(&backend, broker.transport().await)
        .inbox_ttl(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let error = consumer
        .run(Ledger::<B>::new(Arc::default()), CancellationToken::new())
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, ConsumerError::InboxTtlTooShort { .. }),
        "{text}"
    );
    let settings = broker.transport().await.settings().await.unwrap();
    assert_eq!(settings.max_deliveries, Some(5));
    assert!(
        text.contains(&settings.horizon_explanation) && text.contains('5'),
        "the refusal shows the computation: {text}"
    );
}

async fn the_same_key_with_another_payload_is_quarantined<K: Broker, B: Backend>(backend: B) {
    let broker = K::start(5, 10).await;
    broker.send(r#"{"key":"pay-1","cents":100}"#).await;
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .concurrency(1)
            .build()
            .unwrap(),
    );
    let (shutdown, task) = spawn::<B, _>(Arc::clone(&consumer), Arc::new(Script::default()));
    eventually(Duration::from_secs(10), "the first is applied", || async {
        consumer.stats().applied() == 1
    })
    .await;
    broker.send(r#"{"key":"pay-1","cents":999}"#).await;
    eventually(
        Duration::from_secs(10),
        "the second is quarantined",
        || async { consumer.stats().quarantined() == 1 },
    )
    .await;
    stop(shutdown, task).await;
    assert_eq!(backend.effects("pay-1").await, 1);
    assert_eq!(
        broker.dead_letters().await,
        [(
            r#"{"key":"pay-1","cents":999}"#.to_owned(),
            "PayloadMismatch".to_owned()
        )]
    );
}

async fn soak_10000_messages_through_crashes_and_duplicates_make_10000_effects<
    K: Broker,
    B: Backend,
>(
    backend: B,
) {
    const MESSAGES: usize = 10_000;
    let broker = K::start(1, 1_000).await;
    let bodies: Vec<String> = (0..MESSAGES)
        .map(|index| body(&format!("s{index}")))
        .collect();
    broker.send_batch(&bodies).await;
    let faults = Arc::new(Faults::new());
    faults
        .crash_randomly(CrashPoint::BeforeCommit, 0.01)
        .crash_randomly(CrashPoint::AfterCommitBeforeAck, 0.01)
        .crash_randomly(CrashPoint::DuringHandler, 0.01);
    let transport = UnreliableTransport::new(broker.transport().await)
        .duplicating(0.05)
        .reordering();
    let consumer = Arc::new(
        consumer(&backend, transport)
            .concurrency(16)
            .retry(RetryPolicy::exponential(
                1_000,
                Duration::ZERO,
                Duration::ZERO,
            ))
            .faults(Arc::clone(&faults))
            .build()
            .unwrap(),
    );
    let script = Arc::new(Script::default());
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(240),
        "every message is done",
        || async { backend.total_effects().await >= MESSAGES as i64 && drained(&broker).await },
    )
    .await;
    assert!(
        faults.crashes() > 0 && consumer.stats().duplicates() > 0,
        "faults were injected"
    );
    assert_eq!(
        backend.total_effects().await,
        MESSAGES as i64,
        "exactly one effect per message"
    );
    assert_eq!(backend.distinct_effects().await, MESSAGES as i64);
}

async fn without_ackbox_extensions_failures_use_plain_sqs_calls<B: Backend>(backend: B) {
    let broker = SqsBroker::start(5, 10).await;
    broker.send("poison").await;
    broker.send(&body("flaky")).await;
    let script = Arc::new(Script::default());
    script
        .transient_failures
        .lock()
        .unwrap()
        .insert("flaky".into(), 1);
    let consumer = Arc::new(consumer(&backend, broker.aws_transport()).build().unwrap());
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(10),
        "both are decided",
        || async {
            consumer.stats().applied() == 1
                && consumer.stats().quarantined() == 1
                && drained(&broker).await
        },
    )
    .await;
    assert_eq!(
        script.calls("flaky"),
        2,
        "retried through the visibility timeout"
    );
    assert_eq!(backend.effects("flaky").await, 1);
    assert_eq!(
        broker.dead_letter_copies().await,
        [("poison".to_owned(), "Deserialize".to_owned())],
        "copied to the dead-letter queue with its reason, then deleted"
    );
}

async fn a_lost_lease_is_never_acknowledged_twice<K: Broker, B: Backend>(backend: B) {
    // A 2 s lease (heartbeat at 1 s) leaves a loaded machine time to
    // acknowledge a quick duplicate before its own heartbeat fails.
    let broker = K::start(2, 20).await;
    broker.send(&body("contested")).await;
    let script = Arc::new(Script::default());
    *script.delay.lock().unwrap() = Duration::from_millis(4_500);
    // Every extension fails: the first delivery's lease runs out while its
    // handler works, and the message is delivered again meanwhile.
    let transport = Arc::new(UnreliableTransport::new(broker.transport().await).losing_leases());
    let consumer = Arc::new(
        consumer(&backend, Arc::clone(&transport))
            .concurrency(4)
            .build()
            .unwrap(),
    );
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(40),
        "a redelivery is acknowledged",
        || async { consumer.stats().applied() == 1 && drained(&broker).await },
    )
    .await;
    assert_eq!(backend.effects("contested").await, 1);
    assert!(consumer.stats().duplicates() >= 1);
    // Deliveries whose leases were lost are never acknowledged: at most one
    // acknowledgement, from a duplicate that finished within its lease.
    assert!(
        transport.acks() <= 1,
        "acknowledged {} times",
        transport.acks()
    );
}

/// Receives until `count` deliveries came (a bounded number of waits).
async fn receive_exactly<T: Transport>(transport: &T, count: usize) -> Vec<Delivery> {
    let mut deliveries = Vec::new();
    for _ in 0..30 {
        if deliveries.len() >= count {
            break;
        }
        deliveries.extend(
            transport
                .receive(count - deliveries.len(), Duration::from_secs(1))
                .await
                .unwrap(),
        );
    }
    assert_eq!(deliveries.len(), count, "the deliveries did not all come");
    deliveries
}

/// A retry delay is a promise about this message alone: one retried after
/// 200 ms must not wait for one retried before it after 4 s (RabbitMQ's
/// per-message TTL expires only at a queue's head).
async fn a_short_retry_is_not_held_behind_a_long_one<K: Broker, B: Backend>(_backend: B) {
    let broker = K::start(30, 10).await;
    broker.send(&body("long")).await;
    broker.send(&body("short")).await;
    let transport = broker.transport().await;
    let deliveries = receive_exactly(&transport, 2).await;
    let keyed = |key: &str| {
        deliveries
            .iter()
            .find(|delivery| business_key(&delivery.message) == key)
            .unwrap()
    };
    let failure = Failure {
        class: "DependencyDown".into(),
        message: "try again later".into(),
    };
    transport
        .retry(keyed("long"), Duration::from_secs(4), &failure)
        .await
        .unwrap();
    transport
        .retry(keyed("short"), Duration::from_millis(200), &failure)
        .await
        .unwrap();
    let first = receive_exactly(&transport, 1).await;
    assert_eq!(
        business_key(&first[0].message),
        "short",
        "the 200 ms retry came back after the 4 s one"
    );
    transport.ack(&first[0]).await.unwrap();
    let second = receive_exactly(&transport, 1).await;
    assert_eq!(business_key(&second[0].message), "long");
    transport.ack(&second[0]).await.unwrap();
}

async fn expired_inbox_records_are_purged<B: Backend>(backend: B) {
    let inbox = backend.inbox();
    inbox.migrate().await.unwrap();
    let claim = |expires_at_ms| ClaimRequest {
        consumer: "ledger",
        effect_key: "old",
        fingerprint: "f",
        message_id: "m",
        now_ms: 1,
        expires_at_ms,
    };
    let mut transaction = inbox.begin().await.unwrap();
    assert_eq!(
        inbox.claim(&mut transaction, claim(1_000)).await.unwrap(),
        Claim::Fresh
    );
    transaction.commit().await.unwrap();
    let mut transaction = inbox.begin().await.unwrap();
    assert_eq!(
        inbox.claim(&mut transaction, claim(1_000)).await.unwrap(),
        Claim::Duplicate { result: None }
    );
    drop(transaction);
    assert_eq!(
        inbox.purge_expired(999).await.unwrap(),
        0,
        "not expired yet"
    );
    assert_eq!(inbox.purge_expired(1_000).await.unwrap(), 1);
    let mut transaction = inbox.begin().await.unwrap();
    assert_eq!(
        inbox.claim(&mut transaction, claim(5_000)).await.unwrap(),
        Claim::Fresh
    );
}

/// Records the effect and returns a receipt; remembers what replays got.
struct Receipts<B> {
    replays: Arc<std::sync::Mutex<Vec<Option<String>>>>,
    backend: std::marker::PhantomData<fn() -> B>,
}

#[ackbox_consumer::async_trait]
impl<B: Backend> ResultHandler<B::Db> for Receipts<B> {
    async fn handle(
        &self,
        message: &ackbox_consumer::Message,
        transaction: &mut sqlx::Transaction<'static, B::Db>,
    ) -> Result<Option<String>, ackbox_consumer::HandlerError> {
        let body: support::Body = message.json()?;
        B::record(transaction, &body.key).await?;
        Ok(Some(format!("receipt-{}", body.key)))
    }

    async fn replay(
        &self,
        _: &ackbox_consumer::Message,
        stored: Option<String>,
    ) -> Result<(), ackbox_consumer::HandlerError> {
        self.replays.lock().unwrap().push(stored);
        Ok(())
    }
}

async fn a_duplicate_gets_the_result_the_first_run_stored<K: Broker, B: Backend>(backend: B) {
    let broker = K::start(1, 10).await;
    let id = broker.send(&body("charge-9")).await;
    let faults = Arc::new(Faults::new());
    faults.crash_once(CrashPoint::AfterCommitBeforeAck, &id);
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .faults(faults)
            .build()
            .unwrap(),
    );
    let replays = Arc::default();
    let handler = Receipts::<B> {
        replays: Arc::clone(&replays),
        backend: std::marker::PhantomData,
    };
    let shutdown = CancellationToken::new();
    let task = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run_with_results(handler, shutdown).await })
    };
    eventually(
        Duration::from_secs(10),
        "the redelivery is replayed",
        || async { consumer.stats().duplicates() == 1 && drained(&broker).await },
    )
    .await;
    stop(shutdown, task).await;
    assert_eq!(backend.effects("charge-9").await, 1);
    assert_eq!(
        *replays.lock().unwrap(),
        [Some("receipt-charge-9".to_owned())]
    );
}

async fn a_handler_that_hangs_is_cut_off_rolled_back_and_dead_lettered<K: Broker, B: Backend>(
    backend: B,
) {
    // Heartbeats would keep a hung handler's lease forever; the handler
    // timeout cancels it, rolls its transaction back, and the message
    // leaves through the attempt limit like any transient failure.
    let broker = K::start(2, 10).await;
    broker.send(&body("hangs")).await;
    let script = Arc::new(Script::default());
    *script.delay.lock().unwrap() = Duration::from_secs(3_600);
    let consumer = Arc::new(
        consumer(&backend, broker.transport().await)
            .retry(RetryPolicy::exponential(2, Duration::ZERO, Duration::ZERO))
            .handler_timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
    );
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::clone(&script),
        Duration::from_secs(20),
        "the hung message is dead-lettered",
        || async { consumer.stats().quarantined() == 1 && drained(&broker).await },
    )
    .await;
    assert_eq!(consumer.stats().timeouts(), 2, "each attempt was cut off");
    assert_eq!(script.calls("hangs"), 2, "bounded attempts");
    assert_eq!(
        broker.dead_letters().await,
        [(body("hangs"), "HandlerTimeout".to_owned())]
    );
    assert_eq!(backend.total_effects().await, 0, "rolled back");
}

async fn the_outbox_event_id_is_the_default_effect_key<K: Broker, B: Backend>(backend: B) {
    // A relay that dies after publishing publishes the event again, as a
    // new message with the same event id: without an effect key of its
    // own, the consumer keys on that id, so the event is one effect.
    let broker = K::start(5, 10).await;
    let outbox = backend.outbox();
    outbox.migrate().await.unwrap();
    let mut transaction = backend.inbox().begin().await.unwrap();
    let event_id = outbox
        .enqueue(
            &mut transaction,
            OutboxEvent::new(broker.destination(), body("paid")),
        )
        .await
        .unwrap();
    transaction.commit().await.unwrap();
    let faults = Arc::new(Faults::new());
    faults.crash_once(CrashPoint::AfterPublishBeforeMark, &event_id);
    let relay = OutboxRelay::new(outbox, broker.publisher().await).faults(faults);
    assert!(relay.run_once().await.unwrap().crashed);
    assert_eq!(relay.run_once().await.unwrap().published, 1);
    let consumer = Arc::new(
        Consumer::builder("ledger")
            .transport(broker.transport().await)
            .inbox(backend.inbox())
            .retry(quick_retries())
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    run_until::<B, _, _, _>(
        Arc::clone(&consumer),
        Arc::new(Script::default()),
        Duration::from_secs(10),
        "every copy is decided",
        || async { drained(&broker).await && consumer.stats().applied() == 1 },
    )
    .await;
    assert_eq!(backend.total_effects().await, 1, "one effect per event");
}

/// Records the group and sequence number of `{"group":…,"seq":…}` bodies
/// in the ledger (key `group:seq`), after a random pause, failing each
/// third step once.
struct GroupSteps<B> {
    failed_once: std::sync::Mutex<std::collections::HashSet<String>>,
    backend: std::marker::PhantomData<fn() -> B>,
}

#[derive(serde::Deserialize)]
struct GroupStep {
    group: String,
    seq: u32,
}

#[ackbox_consumer::async_trait]
impl<B: Backend> ackbox_consumer::Handler<B::Db> for GroupSteps<B> {
    async fn handle(
        &self,
        message: &ackbox_consumer::Message,
        transaction: &mut sqlx::Transaction<'static, B::Db>,
    ) -> Result<(), ackbox_consumer::HandlerError> {
        use rand::Rng;
        let step: GroupStep = message.json()?;
        let key = format!("{}:{}", step.group, step.seq);
        let pause = rand::rng().random_range(0..=8);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if step.seq.is_multiple_of(3) && self.failed_once.lock().unwrap().insert(key.clone()) {
            return Err(ackbox_consumer::HandlerError::transient("Flaky", "once"));
        }
        B::record(transaction, &key).await?;
        Ok(())
    }
}

async fn groups_required_over_any_transport_commit_in_publish_order<K: Broker, B: Backend>(
    backend: B,
) {
    // Groups published through the outbox (the group travels with each
    // message on every transport); one consumer process keeps them in order
    // at full concurrency, a transient failure included: it is retried in
    // place, so a retry copy never lands behind the group's later steps.
    const GROUPS: u32 = 4;
    const STEPS: u32 = 12;
    let broker = K::start(10, 10).await;
    let outbox = backend.outbox();
    outbox.migrate().await.unwrap();
    let mut transaction = backend.inbox().begin().await.unwrap();
    for seq in 1..=STEPS {
        for group in 0..GROUPS {
            let group = format!("g{group}");
            outbox
                .enqueue(
                    &mut transaction,
                    OutboxEvent::new(
                        broker.destination(),
                        format!(r#"{{"group":"{group}","seq":{seq}}}"#),
                    )
                    .group(group),
                )
                .await
                .unwrap();
        }
    }
    transaction.commit().await.unwrap();
    let relay = OutboxRelay::new(outbox.clone(), broker.publisher().await);
    while outbox.backlog().await.unwrap().unpublished > 0 {
        relay.run_once().await.unwrap();
    }
    let consumer = Arc::new(
        Consumer::builder("ledger")
            .transport(broker.transport().await)
            .inbox(backend.inbox())
            .group_order(GroupOrder::Required)
            .retry(quick_retries())
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let shutdown = CancellationToken::new();
    let task = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move {
            consumer
                .run(
                    GroupSteps::<B> {
                        failed_once: Default::default(),
                        backend: std::marker::PhantomData,
                    },
                    shutdown,
                )
                .await
        })
    };
    eventually(Duration::from_secs(30), "every step is applied", || async {
        backend.total_effects().await == i64::from(GROUPS * STEPS) && drained(&broker).await
    })
    .await;
    stop(shutdown, task).await;
    let keys = backend.ledger_keys().await;
    for group in 0..GROUPS {
        let prefix = format!("g{group}:");
        let steps: Vec<u32> = keys
            .iter()
            .filter_map(|key| key.strip_prefix(&prefix)?.parse().ok())
            .collect();
        assert_eq!(
            steps,
            (1..=STEPS).collect::<Vec<_>>(),
            "group g{group}, in commit order"
        );
    }
    assert_eq!(
        consumer.stats().failed(),
        u64::from(GROUPS * (STEPS / 3)),
        "each third step failed once"
    );
}

support::for_each_transport!([
    a_handler_that_hangs_is_cut_off_rolled_back_and_dead_lettered,
    the_outbox_event_id_is_the_default_effect_key,
    groups_required_over_any_transport_commit_in_publish_order,
    worker_crash_after_commit_before_ack_is_a_duplicate_no_op,
    worker_crash_before_commit_applies_the_effect_once,
    visibility_too_short_a_concurrent_duplicate_does_not_double_commit,
    duplicate_delivery_has_one_business_effect,
    schema_incompatible_message_goes_to_the_dead_letter_queue_with_its_reason,
    dependency_down_retries_are_bounded_backed_off_and_visible,
    batch_partial_failure_does_not_redo_the_others,
    redrive_of_already_applied_messages_is_skipped,
    a_heartbeat_keeps_a_long_handler_s_lease,
    shutdown_gives_back_what_it_could_not_finish,
    an_inbox_ttl_shorter_than_the_redelivery_horizon_is_refused,
    the_same_key_with_another_payload_is_quarantined,
    soak_10000_messages_through_crashes_and_duplicates_make_10000_effects,
    a_lost_lease_is_never_acknowledged_twice,
    a_duplicate_gets_the_result_the_first_run_stored,
    a_short_retry_is_not_held_behind_a_long_one,
]);

async fn a_starting_consumer_does_not_wait_for_the_inbox_s_open_transactions<B: Backend>(
    backend: B,
) {
    // A consumer creates its tables when it starts; with them there, that
    // must not lock them: a handler's transaction is open on the inbox (as
    // when other consumers run), and a restart must not stall behind it.
    let inbox = backend.inbox();
    inbox.migrate().await.unwrap();
    let mut open = inbox.begin().await.unwrap();
    let claim = ClaimRequest {
        consumer: "ledger",
        effect_key: "in-progress",
        fingerprint: "f",
        message_id: "m",
        now_ms: 1,
        expires_at_ms: i64::MAX,
    };
    assert_eq!(inbox.claim(&mut open, claim).await.unwrap(), Claim::Fresh);
    tokio::time::timeout(Duration::from_secs(5), inbox.migrate())
        .await
        .expect("the migration waited for a handler's transaction")
        .unwrap();
    open.rollback().await.unwrap();
}

support::for_each_backend!(
    without_ackbox_extensions_failures_use_plain_sqs_calls,
    expired_inbox_records_are_purged,
    a_starting_consumer_does_not_wait_for_the_inbox_s_open_transactions,
);
