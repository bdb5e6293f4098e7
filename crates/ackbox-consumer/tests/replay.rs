//! Replay (invariant 9, ARCHITECTURE.md): rebuilding a read model from history re-applies
//! every event, even those the inbox says were applied, while no
//! irreversible effect happens again — and a replay only catches up (applies
//! what never was) unless the handler asks to rebuild. Against ackbox over
//! the SQS API, with the inbox in SQLite and in PostgreSQL.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ackbox_consumer::effects::{EffectError, EffectStore, Effects};
use ackbox_consumer::projection::{Projection, Verdict, VersionStore};
use ackbox_consumer::{
    CancellationToken, Consumer, Handler, HandlerError, Message, OnReplay, REPLAY_ATTRIBUTE,
    async_trait,
};
use aws_sdk_sqs::types::MessageAttributeValue;
use sqlx::Transaction;
use support::{Backend, Broker, PostgresBackend, SqliteBackend, SqsBroker, eventually};

const PROJECTION: &str = "order_status";

/// The read model's SQL, the same text on both databases.
#[async_trait]
trait ReadModelSql: Backend {
    async fn create_read_model(&self);
    async fn project(
        transaction: &mut Transaction<'static, Self::Db>,
        order: &str,
        status: &str,
        version: i64,
    ) -> Result<(), sqlx::Error>;
    /// Every order's status and version, by order.
    async fn read_model(&self) -> Vec<(String, String, i64)>;
    /// Forgets the read model and its versions, to rebuild it.
    async fn wipe_read_model(&self);
    /// Where effect records go: written outside the handler's transaction,
    /// they need a database that transaction does not lock (SQLite has one
    /// writer at a time).
    async fn effect_records(&self) -> Self::Effects;
}

macro_rules! read_model_sql {
    ($backend:ty, $db:ty, |$self:ident| $effect_records:expr) => {
        #[async_trait]
        impl ReadModelSql for $backend {
            async fn effect_records(&$self) -> Self::Effects {
                let store = $effect_records;
                store.migrate().await.unwrap();
                store
            }

            async fn create_read_model(&self) {
                sqlx::query(
                    "CREATE TABLE order_status (
                         order_id TEXT PRIMARY KEY, status TEXT NOT NULL, version BIGINT NOT NULL)",
                )
                .execute(self.inbox().pool())
                .await
                .unwrap();
            }

            async fn project(
                transaction: &mut Transaction<'static, $db>,
                order: &str,
                status: &str,
                version: i64,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "INSERT INTO order_status (order_id, status, version) VALUES ($1, $2, $3)
                     ON CONFLICT (order_id) DO UPDATE SET status = excluded.status, version = excluded.version",
                )
                .bind(order)
                .bind(status)
                .bind(version)
                .execute(&mut **transaction)
                .await
                .map(drop)
            }

            async fn read_model(&self) -> Vec<(String, String, i64)> {
                sqlx::query_as("SELECT order_id, status, version FROM order_status ORDER BY order_id")
                    .fetch_all(self.inbox().pool())
                    .await
                    .unwrap()
            }

            async fn wipe_read_model(&self) {
                let inbox = self.inbox();
                sqlx::query("DELETE FROM order_status").execute(inbox.pool()).await.unwrap();
                sqlx::query("DELETE FROM ackbox_projection_versions WHERE projection = $1")
                    .bind(PROJECTION)
                    .execute(inbox.pool())
                    .await
                    .unwrap();
            }
        }
    };
}

read_model_sql!(SqliteBackend, sqlx::Sqlite, |self| {
    ackbox_consumer::effects::SqliteEffectStore::new(
        sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap(),
    )
});
read_model_sql!(PostgresBackend, sqlx::Postgres, |self| self.effect_store());

#[derive(serde::Deserialize)]
struct OrderEvent {
    order: String,
    status: String,
    version: i64,
}

fn event(order: &str, status: &str, version: i64) -> String {
    format!(r#"{{"order":"{order}","status":"{status}","version":{version}}}"#)
}

/// Projects order statuses — and, as the seed's bad example does, sends a
/// notification from the same handler, through an effect record. The
/// notification must never go out again on a replay.
struct StatusProjector<B: Backend> {
    projection: Projection<B::Effects>,
    effects: Effects<B::Effects>,
    notifications: Arc<AtomicU32>,
    on_replay: OnReplay,
}

#[async_trait]
impl<B: ReadModelSql> Handler<B::Db> for StatusProjector<B>
where
    B::Effects: VersionStore<Database = B::Db>,
{
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, B::Db>,
    ) -> Result<(), HandlerError> {
        let event: OrderEvent = message.json()?;
        let verdict = self
            .projection
            .apply_if_newer(transaction, &event.order, event.version)
            .await?;
        if verdict == Verdict::Apply {
            B::project(transaction, &event.order, &event.status, event.version).await?;
        }
        let notifications = Arc::clone(&self.notifications);
        let notified = self
            .effects
            .run(
                &format!("notify:{}:v{}", event.order, event.version),
                |_| async move {
                    notifications.fetch_add(1, Ordering::SeqCst);
                    Ok("sent".to_owned())
                },
            )
            .await;
        match notified {
            // Rebuilding the read model is the point; the notification of
            // an event never handled before is left out, not sent late.
            Ok(_) | Err(EffectError::SuppressedInReplay(_)) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    fn on_replay(&self, _: &Message) -> OnReplay {
        self.on_replay
    }
}

async fn send(broker: &SqsBroker, body: &str, replay: bool) {
    let mut request = broker
        .client
        .send_message()
        .queue_url(&broker.url)
        .message_body(body);
    if replay {
        request = request.message_attributes(
            REPLAY_ATTRIBUTE,
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("true")
                .build()
                .unwrap(),
        );
    }
    request.send().await.unwrap();
}

/// Runs a projector consumer until the queue is drained.
async fn project_all<B: ReadModelSql>(
    backend: &B,
    broker: &SqsBroker,
    effects: &Effects<B::Effects>,
    notifications: &Arc<AtomicU32>,
    on_replay: OnReplay,
) -> Arc<Consumer<ackbox_consumer::SqsTransport, B::Inbox>>
where
    B::Effects: VersionStore<Database = B::Db>,
{
    let consumer = Arc::new(
        Consumer::builder("projector")
            .transport(broker.transport().await)
            .inbox(backend.inbox())
            .effect_key(|message| {
                message.json::<OrderEvent>().map_or_else(
                    |_| message.id.clone(),
                    |event| format!("{}:v{}", event.order, event.version),
                )
            })
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let handler = StatusProjector::<B> {
        projection: Projection::new(backend.effect_store(), PROJECTION),
        effects: effects.clone(),
        notifications: Arc::clone(notifications),
        on_replay,
    };
    let shutdown = CancellationToken::new();
    let task = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    eventually(Duration::from_secs(20), "the queue is drained", || async {
        broker.depth().await == (0, 0)
    })
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    consumer
}

async fn a_rebuild_reapplies_history_and_sends_nothing_again<B: ReadModelSql>(backend: B)
where
    B::Effects: VersionStore<Database = B::Db>,
{
    let broker = SqsBroker::start(5, 10).await;
    backend.create_read_model().await;
    backend.effect_store().migrate().await.unwrap();
    let effects = Effects::new(backend.effect_records().await);
    let history = [
        event("o1", "PLACED", 1),
        event("o1", "PAID", 2),
        event("o2", "PLACED", 1),
        event("o1", "SHIPPED", 3),
    ];
    let notifications = Arc::new(AtomicU32::new(0));
    for body in &history {
        send(&broker, body, false).await;
    }
    project_all(
        &backend,
        &broker,
        &effects,
        &notifications,
        OnReplay::Rebuild,
    )
    .await;
    let built = backend.read_model().await;
    assert_eq!(
        built,
        [
            ("o1".to_owned(), "SHIPPED".to_owned(), 3),
            ("o2".to_owned(), "PLACED".to_owned(), 1)
        ]
    );
    assert_eq!(notifications.load(Ordering::SeqCst), 4, "one per event");

    // A catch-up replay does not rebuild: every event is a duplicate.
    backend.wipe_read_model().await;
    for body in &history {
        send(&broker, body, true).await;
    }
    let caught_up = project_all(
        &backend,
        &broker,
        &effects,
        &notifications,
        OnReplay::ApplyOnce,
    )
    .await;
    assert_eq!(caught_up.stats().duplicates(), 4);
    assert_eq!(backend.read_model().await, [], "nothing re-applied");

    // A rebuild re-applies them, plus an event never handled before whose
    // notification is left out.
    for body in history.iter().chain([&event("o3", "PLACED", 1)]) {
        send(&broker, body, true).await;
    }
    let rebuilt = project_all(
        &backend,
        &broker,
        &effects,
        &notifications,
        OnReplay::Rebuild,
    )
    .await;
    assert_eq!(rebuilt.stats().applied(), 5);
    assert_eq!(
        backend.read_model().await,
        [
            ("o1".to_owned(), "SHIPPED".to_owned(), 3),
            ("o2".to_owned(), "PLACED".to_owned(), 1),
            ("o3".to_owned(), "PLACED".to_owned(), 1)
        ],
        "rebuilt from history"
    );
    assert_eq!(
        notifications.load(Ordering::SeqCst),
        4,
        "no notification sent again, none sent for the replayed newcomer"
    );
}

async fn a_replay_that_needs_an_irreversible_effect_is_dead_lettered_with_the_reason<
    B: ReadModelSql,
>(
    backend: B,
) {
    // A handler that does not leave the refused effect out: its replayed
    // message goes to the dead-letter queue saying why, not silently on.
    struct Charges<B: Backend> {
        effects: Effects<B::Effects>,
        calls: Arc<AtomicU32>,
    }

    #[async_trait]
    impl<B: Backend> Handler<B::Db> for Charges<B> {
        async fn handle(
            &self,
            message: &Message,
            _: &mut Transaction<'static, B::Db>,
        ) -> Result<(), HandlerError> {
            let calls = Arc::clone(&self.calls);
            self.effects
                .run(&format!("charge:{}", message.body), |_| async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok("ch_1".to_owned())
                })
                .await?;
            Ok(())
        }

        fn on_replay(&self, _: &Message) -> OnReplay {
            OnReplay::ApplyOnce
        }
    }

    let broker = SqsBroker::start(5, 10).await;
    backend.effect_store().migrate().await.unwrap();
    send(&broker, "order-1", true).await;
    let calls = Arc::new(AtomicU32::new(0));
    let consumer = Arc::new(
        Consumer::builder("charges")
            .transport(broker.transport().await)
            .inbox(backend.inbox())
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let handler = Charges::<B> {
        effects: Effects::new(backend.effect_records().await),
        calls: Arc::clone(&calls),
    };
    let shutdown = CancellationToken::new();
    let task = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    eventually(
        Duration::from_secs(10),
        "the replay is dead-lettered",
        || async { consumer.stats().quarantined() == 1 },
    )
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no charge on a replay");
    assert_eq!(
        broker.dead_letters().await,
        [("order-1".to_owned(), "SuppressedInReplay".to_owned())]
    );
}

/// The matrix row "event replay for projection" end to end: the history is
/// published to a topic that archives it, the projection is wiped, and the
/// topic replays its archive to the subscription (SNS's `ReplayPolicy`):
/// the read model comes back whole, and no notification goes out again.
async fn a_topic_replay_rebuilds_the_projection_and_sends_nothing_again<B: ReadModelSql>(backend: B)
where
    B::Effects: VersionStore<Database = B::Db>,
{
    let broker = SqsBroker::start(5, 10).await;
    let sns = broker
        .server
        .sns_client_with_key("CONSUMER", "consumer-secret-0123456789");
    backend.create_read_model().await;
    backend.effect_store().migrate().await.unwrap();
    let effects = Effects::new(backend.effect_records().await);
    let topic = ackbox_testkit::client::archived_topic(&sns, "order-events", 14, &[]).await;
    let subscription = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:work")
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    let history = [
        event("o1", "PLACED", 1),
        event("o1", "PAID", 2),
        event("o2", "PLACED", 1),
        event("o1", "SHIPPED", 3),
    ];
    for body in &history {
        sns.publish()
            .topic_arn(&topic)
            .message(body)
            .send()
            .await
            .unwrap();
    }
    let notifications = Arc::new(AtomicU32::new(0));
    project_all(
        &backend,
        &broker,
        &effects,
        &notifications,
        OnReplay::Rebuild,
    )
    .await;
    let built = backend.read_model().await;
    assert_eq!(built.len(), 2);
    assert_eq!(notifications.load(Ordering::SeqCst), 4, "one per event");

    backend.wipe_read_model().await;
    sns.set_subscription_attributes()
        .subscription_arn(&subscription)
        .attribute_name("ReplayPolicy")
        .attribute_value(r#"{"PointType":"Timestamp","StartingPoint":"2000-01-01T00:00:00Z"}"#)
        .send()
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the replay completes", || async {
        sns.get_subscription_attributes()
            .subscription_arn(&subscription)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap()
            .get("ReplayStatus")
            .is_some_and(|status| status == "Completed")
    })
    .await;
    let rebuilt = project_all(
        &backend,
        &broker,
        &effects,
        &notifications,
        OnReplay::Rebuild,
    )
    .await;
    assert_eq!(
        rebuilt.stats().applied(),
        4,
        "every archived event re-applied"
    );
    assert_eq!(
        backend.read_model().await,
        built,
        "rebuilt from the archive"
    );
    assert_eq!(
        notifications.load(Ordering::SeqCst),
        4,
        "no notification sent again"
    );
}

support::for_each_backend!(
    a_topic_replay_rebuilds_the_projection_and_sends_nothing_again,
    a_rebuild_reapplies_history_and_sends_nothing_again,
    a_replay_that_needs_an_irreversible_effect_is_dead_lettered_with_the_reason,
);
