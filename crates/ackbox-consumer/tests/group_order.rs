//! Order per message group: on a FIFO queue, at the default concurrency,
//! the messages of one group commit in the order they were sent, one at a
//! time, while groups run side by side; a failing message holds its group
//! (retried in place) until it succeeds or is dead-lettered; messages that
//! wait behind their group keep their lease. Against ackbox over the SQS
//! API, with the inbox in SQLite and in PostgreSQL.
//!
//! Order is checked in the database, inside each handler's transaction: a
//! group's row holds the last sequence number committed, and a message whose
//! number does not follow it writes a violation row, committed with it.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackbox_consumer::{
    CancellationToken, Consumer, ConsumerError, GroupOrder, Handler, HandlerError, Message,
    RetryPolicy, Router, SqsTransport, async_trait,
};
use rand::Rng;
use sqlx::Transaction;
use support::{Backend, Broker, PostgresBackend, SqliteBackend, SqsBroker, eventually};

/// The commit-order check's SQL, the same text on both databases.
#[async_trait]
trait StepsSql: Backend {
    /// Creates the tables, with a row at 0 for each group.
    async fn create_steps(&self, groups: &[String]);
    /// Commits step `seq` of `group`, recording a violation when it does
    /// not follow the last one committed.
    async fn step(
        transaction: &mut Transaction<'static, Self::Db>,
        group: &str,
        seq: i64,
    ) -> Result<(), sqlx::Error>;
    async fn violations(&self) -> i64;
    async fn last_steps(&self) -> HashMap<String, i64>;
    /// Each group's steps in the order they committed.
    async fn committed(&self) -> HashMap<String, Vec<i64>>;
}

macro_rules! steps_sql {
    ($backend:ty, $db:ty, $serial:literal) => {
        #[async_trait]
        impl StepsSql for $backend {
            async fn create_steps(&self, groups: &[String]) {
                let pool = self.inbox().pool().clone();
                for statement in [
                    "CREATE TABLE heads (group_id TEXT PRIMARY KEY, last_seq BIGINT NOT NULL)",
                    "CREATE TABLE violations (group_id TEXT NOT NULL, seq BIGINT NOT NULL)",
                    concat!(
                        "CREATE TABLE steps (id ",
                        $serial,
                        " PRIMARY KEY, group_id TEXT NOT NULL, seq BIGINT NOT NULL)"
                    ),
                ] {
                    sqlx::query(statement).execute(&pool).await.unwrap();
                }
                for group in groups {
                    sqlx::query("INSERT INTO heads (group_id, last_seq) VALUES ($1, 0)")
                        .bind(group)
                        .execute(&pool)
                        .await
                        .unwrap();
                }
            }

            async fn step(
                transaction: &mut Transaction<'static, $db>,
                group: &str,
                seq: i64,
            ) -> Result<(), sqlx::Error> {
                // The update waits for a concurrent step of the group to end
                // and then judges the row as that step left it.
                let followed = sqlx::query(
                    "UPDATE heads SET last_seq = $2 WHERE group_id = $1 AND last_seq = $2 - 1",
                )
                .bind(group)
                .bind(seq)
                .execute(&mut **transaction)
                .await?
                .rows_affected();
                if followed == 0 {
                    sqlx::query("INSERT INTO violations (group_id, seq) VALUES ($1, $2)")
                        .bind(group)
                        .bind(seq)
                        .execute(&mut **transaction)
                        .await?;
                    sqlx::query("UPDATE heads SET last_seq = $2 WHERE group_id = $1")
                        .bind(group)
                        .bind(seq)
                        .execute(&mut **transaction)
                        .await?;
                }
                sqlx::query("INSERT INTO steps (group_id, seq) VALUES ($1, $2)")
                    .bind(group)
                    .bind(seq)
                    .execute(&mut **transaction)
                    .await
                    .map(drop)
            }

            async fn violations(&self) -> i64 {
                sqlx::query_scalar("SELECT COUNT(*) FROM violations")
                    .fetch_one(self.inbox().pool())
                    .await
                    .unwrap()
            }

            async fn last_steps(&self) -> HashMap<String, i64> {
                sqlx::query_as::<_, (String, i64)>("SELECT group_id, last_seq FROM heads")
                    .fetch_all(self.inbox().pool())
                    .await
                    .unwrap()
                    .into_iter()
                    .collect()
            }

            async fn committed(&self) -> HashMap<String, Vec<i64>> {
                let rows: Vec<(String, i64)> =
                    sqlx::query_as("SELECT group_id, seq FROM steps ORDER BY id")
                        .fetch_all(self.inbox().pool())
                        .await
                        .unwrap();
                let mut committed: HashMap<String, Vec<i64>> = HashMap::new();
                for (group, seq) in rows {
                    committed.entry(group).or_default().push(seq);
                }
                committed
            }
        }
    };
}

steps_sql!(SqliteBackend, sqlx::Sqlite, "INTEGER");
steps_sql!(PostgresBackend, sqlx::Postgres, "BIGSERIAL");

#[derive(Debug, serde::Deserialize)]
struct Step {
    group: String,
    seq: i64,
}

fn step_body(group: &str, seq: i64) -> String {
    format!(r#"{{"group":"{group}","seq":{seq}}}"#)
}

/// What the step handler does, and what it saw.
#[derive(Debug, Default)]
struct StepScript {
    /// Transient failures left per step before it succeeds.
    transient: Mutex<HashMap<(String, i64), u32>>,
    /// Steps that fail for good.
    permanent: Mutex<HashSet<(String, i64)>>,
    /// The longest random pause of a handler call, in milliseconds: enough
    /// for concurrent steps of one group to finish out of order.
    jitter_ms: u64,
    /// How long every call of the group's first step takes.
    first_step_delay: Duration,
    /// Handler calls per step, with the delivery's receive count.
    calls: Mutex<Vec<(String, i64, u32)>>,
}

impl StepScript {
    fn calls_of(&self, group: &str, seq: i64) -> Vec<u32> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(called_group, called_seq, _)| called_group == group && *called_seq == seq)
            .map(|(_, _, receive_count)| *receive_count)
            .collect()
    }
}

struct Steps<B> {
    script: Arc<StepScript>,
    backend: std::marker::PhantomData<fn() -> B>,
}

impl<B> Steps<B> {
    fn new(script: &Arc<StepScript>) -> Self {
        Self {
            script: Arc::clone(script),
            backend: std::marker::PhantomData,
        }
    }
}

#[async_trait]
impl<B: StepsSql> Handler<B::Db> for Steps<B> {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, B::Db>,
    ) -> Result<(), HandlerError> {
        let step: Step = message.json()?;
        let key = (step.group.clone(), step.seq);
        self.script.calls.lock().unwrap().push((
            step.group.clone(),
            step.seq,
            message.receive_count,
        ));
        let pause = if step.seq == 1 {
            self.script.first_step_delay
        } else {
            Duration::from_millis(rand::rng().random_range(0..=self.script.jitter_ms))
        };
        tokio::time::sleep(pause).await;
        if self.script.permanent.lock().unwrap().contains(&key) {
            return Err(HandlerError::permanent(
                "Rejected",
                "a rule forbids this step",
            ));
        }
        if let Some(left) = self.script.transient.lock().unwrap().get_mut(&key)
            && *left > 0
        {
            *left -= 1;
            return Err(HandlerError::transient("Flaky", "try again"));
        }
        B::step(transaction, &step.group, step.seq).await?;
        Ok(())
    }
}

fn groups(count: usize) -> Vec<String> {
    (0..count).map(|index| format!("g{index}")).collect()
}

/// Sends `per_group` steps of every group, interleaved across groups.
async fn send_steps(broker: &SqsBroker, groups: &[String], per_group: i64) {
    for seq in 1..=per_group {
        for group in groups {
            broker
                .send_in_group(&step_body(group, seq), Some(group))
                .await;
        }
    }
}

fn fifo_consumer<B: Backend>(
    backend: &B,
    broker: &SqsBroker,
) -> ackbox_consumer::ConsumerBuilder<SqsTransport, B::Inbox> {
    Consumer::builder("steps")
        .transport(SqsTransport::new(broker.client.clone(), &broker.url).with_ackbox_extensions())
        .inbox(backend.inbox())
        .effect_key(|message| {
            message.json::<Step>().map_or_else(
                |_| message.id.clone(),
                |step| format!("{}:{}", step.group, step.seq),
            )
        })
        .retry(RetryPolicy::exponential(
            5,
            Duration::from_millis(20),
            Duration::from_millis(100),
        ))
        .wait(Duration::from_millis(200))
}

/// Runs `consumer` until `done` holds (at most `limit`), then stops it.
async fn run_until<B, F, Fut>(
    consumer: Arc<Consumer<SqsTransport, B::Inbox>>,
    handler: impl Handler<B::Db>,
    limit: Duration,
    what: &str,
    done: F,
) where
    B: StepsSql,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let shutdown = CancellationToken::new();
    let running = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    eventually(limit, what, done).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the consumer stops")
        .unwrap()
        .unwrap();
}

/// Runs a FIFO consumer with the default group order until `applied`
/// steps are applied and the queue is empty.
async fn consume_steps<B: StepsSql>(
    backend: &B,
    broker: &SqsBroker,
    script: &Arc<StepScript>,
    applied: u64,
) -> Arc<Consumer<SqsTransport, B::Inbox>> {
    let consumer = Arc::new(fifo_consumer(backend, broker).build().unwrap());
    run_until::<B, _, _>(
        Arc::clone(&consumer),
        Steps::<B>::new(script),
        Duration::from_secs(60),
        "every step is applied",
        || async { consumer.stats().applied() == applied && broker.depth().await == (0, 0) },
    )
    .await;
    consumer
}

async fn fifo_groups_commit_in_send_order_at_the_default_concurrency<B: StepsSql>(backend: B) {
    const PER_GROUP: i64 = 20;
    let broker = SqsBroker::start_fifo(5, 10).await;
    let groups = groups(8);
    backend.create_steps(&groups).await;
    let script = Arc::new(StepScript {
        jitter_ms: 8,
        ..StepScript::default()
    });
    // Every fifth step of every group fails twice before it succeeds.
    for group in &groups {
        for seq in (5..=PER_GROUP).step_by(5) {
            script
                .transient
                .lock()
                .unwrap()
                .insert((group.clone(), seq), 2);
        }
    }
    send_steps(&broker, &groups, PER_GROUP).await;
    let consumer = consume_steps(
        &backend,
        &broker,
        &script,
        groups.len() as u64 * PER_GROUP as u64,
    )
    .await;
    assert_eq!(
        backend.violations().await,
        0,
        "steps committed out of order"
    );
    for (group, committed) in backend.committed().await {
        assert_eq!(
            committed,
            (1..=PER_GROUP).collect::<Vec<_>>(),
            "group {group}: every step once, in send order"
        );
    }
    let flaky = groups.len() as u64 * (PER_GROUP as u64 / 5);
    assert_eq!(
        consumer.stats().failed(),
        2 * flaky,
        "each flaky step failed twice"
    );
    assert_eq!(
        consumer.stats().applied(),
        groups.len() as u64 * PER_GROUP as u64
    );
    // Retried in place: neither a flaky step nor the steps behind it were
    // received again.
    let calls = script.calls.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .all(|(_, _, receive_count)| *receive_count == 1),
        "a message was received again: {:?}",
        calls
            .iter()
            .filter(|(_, _, count)| *count > 1)
            .collect::<Vec<_>>()
    );
    assert_eq!(broker.dead_letter_depth().await, 0);
}

async fn without_group_order_the_same_batches_commit_out_of_order<B: StepsSql>(backend: B) {
    // The check above is only as good as its detector: with groups run
    // concurrently, steps of one group do commit out of order.
    const PER_GROUP: i64 = 20;
    let broker = SqsBroker::start_fifo(5, 10).await;
    let groups = groups(4);
    backend.create_steps(&groups).await;
    let script = Arc::new(StepScript {
        jitter_ms: 8,
        ..StepScript::default()
    });
    send_steps(&broker, &groups, PER_GROUP).await;
    let consumer = Arc::new(
        fifo_consumer(&backend, &broker)
            .group_order(GroupOrder::Off)
            .build()
            .unwrap(),
    );
    run_until::<B, _, _>(
        Arc::clone(&consumer),
        Steps::<B>::new(&script),
        Duration::from_secs(60),
        "every step is committed",
        || async { consumer.stats().applied() == groups.len() as u64 * PER_GROUP as u64 },
    )
    .await;
    assert!(
        backend.violations().await > 0,
        "four groups of twenty jittered steps all committed in order without group order"
    );
}

async fn a_message_that_fails_for_good_is_dead_lettered_and_its_group_goes_on<B: StepsSql>(
    backend: B,
) {
    let broker = SqsBroker::start_fifo(5, 10).await;
    let groups = groups(2);
    backend.create_steps(&groups).await;
    let script = Arc::new(StepScript::default());
    script
        .permanent
        .lock()
        .unwrap()
        .insert(("g0".to_owned(), 3));
    send_steps(&broker, &groups, 5).await;
    consume_steps(&backend, &broker, &script, 9).await;
    let committed = backend.committed().await;
    assert_eq!(
        committed["g0"],
        [1, 2, 4, 5],
        "the group went on past its dead letter"
    );
    assert_eq!(committed["g1"], [1, 2, 3, 4, 5]);
    assert_eq!(
        broker.dead_letters().await,
        [(step_body("g0", 3), "Rejected".to_owned())],
        "dead-lettered at once, with its reason"
    );
    assert_eq!(
        script.calls_of("g0", 3).len(),
        1,
        "a permanent failure is not retried"
    );
}

async fn a_transient_failure_holds_its_group_until_its_retry_succeeds<B: StepsSql>(backend: B) {
    let broker = SqsBroker::start_fifo(5, 10).await;
    let groups = groups(1);
    backend.create_steps(&groups).await;
    let script = Arc::new(StepScript::default());
    script
        .transient
        .lock()
        .unwrap()
        .insert(("g0".to_owned(), 2), 3);
    send_steps(&broker, &groups, 4).await;
    let consumer = consume_steps(&backend, &broker, &script, 4).await;
    assert_eq!(backend.committed().await["g0"], [1, 2, 3, 4]);
    assert_eq!(
        script.calls_of("g0", 2),
        [1, 1, 1, 1],
        "four calls of one delivery: retried in place"
    );
    assert_eq!(script.calls_of("g0", 3), [1], "step 3 waited and ran once");
    assert_eq!(consumer.stats().failed(), 3);
}

async fn messages_waiting_behind_their_group_keep_their_lease<B: StepsSql>(backend: B) {
    // A 2 s lease; the group's first step takes 3 s. The steps behind it
    // were received with it and wait: their heartbeats keep them, so none is
    // delivered a second time.
    let broker = SqsBroker::start_fifo(2, 10).await;
    let groups = groups(1);
    backend.create_steps(&groups).await;
    let script = Arc::new(StepScript {
        first_step_delay: Duration::from_secs(3),
        ..StepScript::default()
    });
    send_steps(&broker, &groups, 4).await;
    let consumer = consume_steps(&backend, &broker, &script, 4).await;
    assert_eq!(backend.committed().await["g0"], [1, 2, 3, 4]);
    assert_eq!(
        consumer.stats().duplicates(),
        0,
        "a waiting step was delivered again"
    );
    let calls = script.calls.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .all(|(_, _, receive_count)| *receive_count == 1),
        "{calls:?}"
    );
    assert!(
        consumer.stats().extensions() >= 4,
        "{}",
        consumer.stats().extensions()
    );
}

async fn a_message_without_a_group_is_dead_lettered_when_group_order_is_required<B: StepsSql>(
    backend: B,
) {
    // A standard queue, whose fair-queue groups the consumer is asked to
    // keep in order: a message without a group has no place in any order.
    let broker = SqsBroker::start(5, 10).await;
    let groups = groups(2);
    backend.create_steps(&groups).await;
    broker.send_in_group(&step_body("g0", 1), None).await;
    send_steps(&broker, &groups, 3).await;
    let script = Arc::new(StepScript::default());
    let consumer = Arc::new(
        fifo_consumer(&backend, &broker)
            .group_order(GroupOrder::Required)
            .build()
            .unwrap(),
    );
    run_until::<B, _, _>(
        Arc::clone(&consumer),
        Steps::<B>::new(&script),
        Duration::from_secs(30),
        "the grouped messages are done",
        || async { consumer.stats().applied() == 6 && consumer.stats().quarantined() == 1 },
    )
    .await;
    assert_eq!(
        broker.dead_letters().await,
        [(step_body("g0", 1), "MissingGroupId".to_owned())]
    );
    assert_eq!(
        backend.last_steps().await["g1"],
        3,
        "other groups were not blocked"
    );
}

async fn an_event_nobody_handles_is_dead_lettered_naming_its_type_and_its_group_goes_on<
    B: StepsSql,
>(
    backend: B,
) {
    let broker = SqsBroker::start_fifo(5, 10).await;
    let groups = groups(2);
    backend.create_steps(&groups).await;
    let step = [("event_type", "Step")];
    let shipped = r#"{"order":7}"#;
    let untyped = r#"{"order":8}"#;
    for seq in 1..=3 {
        for group in &groups {
            broker
                .send_in_group_with_attributes(&step_body(group, seq), Some(group), &step)
                .await;
        }
        if seq == 1 {
            broker
                .send_in_group_with_attributes(shipped, Some("g0"), &[("event_type", "Shipped")])
                .await;
            broker
                .send_in_group_with_attributes(untyped, Some("g1"), &[])
                .await;
        }
    }
    let script = Arc::new(StepScript::default());
    let consumer = Arc::new(fifo_consumer(&backend, &broker).build().unwrap());
    run_until::<B, _, _>(
        Arc::clone(&consumer),
        Router::new().route("Step", Steps::<B>::new(&script)),
        Duration::from_secs(30),
        "the steps are applied and the strangers dead-lettered",
        || async { consumer.stats().applied() == 6 && consumer.stats().quarantined() == 2 },
    )
    .await;
    let mut dead_letters = broker.dead_letters().await;
    dead_letters.sort();
    assert_eq!(
        dead_letters,
        [
            (shipped.to_owned(), "UnknownEventType".to_owned()),
            (untyped.to_owned(), "MissingEventType".to_owned()),
        ]
    );
    let committed = backend.committed().await;
    assert_eq!(committed["g0"], [1, 2, 3], "the group went on in order");
    assert_eq!(committed["g1"], [1, 2, 3], "the group went on in order");
    assert_eq!(script.calls.lock().unwrap().len(), 6, "no retries");
}

async fn a_queue_without_a_dead_letter_queue_is_refused_unless_accepted<B: StepsSql>(backend: B) {
    let broker = SqsBroker::start_without_dead_letter_queue(5).await;
    let groups = groups(1);
    backend.create_steps(&groups).await;
    let refused = fifo_consumer(&backend, &broker)
        .build()
        .unwrap()
        .run(Steps::<B>::new(&Arc::default()), CancellationToken::new())
        .await;
    let Err(ConsumerError::NoDeadLetterQueue { queue }) = refused else {
        panic!("started without a dead-letter queue: {refused:?}");
    };
    assert_eq!(queue, "work");
    assert!(
        ConsumerError::NoDeadLetterQueue { queue }
            .to_string()
            .contains("without_dead_letter_queue()"),
        "the refusal says how to accept it"
    );
    broker.send_in_group(&step_body("g0", 1), None).await;
    let consumer = Arc::new(
        fifo_consumer(&backend, &broker)
            .without_dead_letter_queue()
            .build()
            .unwrap(),
    );
    run_until::<B, _, _>(
        Arc::clone(&consumer),
        Steps::<B>::new(&Arc::default()),
        Duration::from_secs(30),
        "the message is applied",
        || async { consumer.stats().applied() == 1 },
    )
    .await;
}

support::for_each_backend!(
    fifo_groups_commit_in_send_order_at_the_default_concurrency,
    without_group_order_the_same_batches_commit_out_of_order,
    a_message_that_fails_for_good_is_dead_lettered_and_its_group_goes_on,
    a_transient_failure_holds_its_group_until_its_retry_succeeds,
    messages_waiting_behind_their_group_keep_their_lease,
    a_message_without_a_group_is_dead_lettered_when_group_order_is_required,
    an_event_nobody_handles_is_dead_lettered_naming_its_type_and_its_group_goes_on,
    a_queue_without_a_dead_letter_queue_is_refused_unless_accepted,
);
