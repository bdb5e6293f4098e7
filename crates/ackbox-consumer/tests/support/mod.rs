//! The consumer suite's fixtures: a real broker (ackbox over SQS, RabbitMQ,
//! NATS JetStream) with a dead-letter queue, an application database
//! (SQLite or PostgreSQL) with a ledger table that counts business effects,
//! and a scriptable handler.

#![allow(dead_code, unreachable_pub, unused_macros, unused_imports)]

pub mod nats;
pub mod rabbitmq;
pub mod sqs;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackbox_consumer::effects::{EffectStore, PgEffectStore, SqliteEffectStore};
use ackbox_consumer::outbox::{Outbox, PgOutbox, Publisher, SqliteOutbox};
use ackbox_consumer::projection::VersionStore;
use ackbox_consumer::{
    Handler, HandlerError, Inbox, Message, PgInbox, SqliteInbox, Transport, async_trait,
};
use ackbox_testkit::postgres::PostgresSchema;
use sqlx::{Database, Postgres, Sqlite, Transaction};

pub use sqs::SqsBroker;

/// A queue with a dead-letter queue on a real broker, and what a test needs
/// to look into them.
#[async_trait]
pub trait Broker: Send + Sync + Sized + 'static {
    type Transport: Transport;
    type Publisher: Publisher;
    /// Whether the broker drops a message published again with the same id
    /// (JetStream's `Nats-Msg-Id` window).
    const DROPS_REPUBLISHED_EVENTS: bool;
    /// Whether the broker is configured here (else the test is skipped).
    fn available() -> bool;
    /// A fresh queue leasing deliveries for `lease_seconds`, dead-lettering
    /// after `max_deliveries`.
    async fn start(lease_seconds: u32, max_deliveries: u32) -> Self;
    async fn transport(&self) -> Self::Transport;
    async fn publisher(&self) -> Self::Publisher;
    /// Where outbox events for the queue are published.
    fn destination(&self) -> String;
    /// Sends `body`; returns the message id consumers will see.
    async fn send(&self, body: &str) -> String;
    async fn send_batch(&self, bodies: &[String]);
    /// Messages ready for delivery, and those leased or waiting to be retried.
    async fn depth(&self) -> (u64, u64);
    /// Dead letters, after letting the broker move deliveries that ran out.
    async fn dead_letter_depth(&self) -> u64;
    /// The dead letters' bodies and failure classes.
    async fn dead_letters(&self) -> Vec<(String, String)>;
    /// Moves every dead letter back to the queue.
    async fn redrive(&self);
}

static NAMES: AtomicU64 = AtomicU64::new(0);

/// A name no other test (or earlier run) uses.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        NAMES.fetch_add(1, Ordering::Relaxed),
        rand_suffix()
    )
}

/// An application database with a ledger table that has no unique
/// constraint, so a doubled effect shows as a second row.
/// The ledger's SQL, the same text on both databases.
#[async_trait]
pub trait LedgerSql {
    type Db: Database;
    async fn record(
        transaction: &mut Transaction<'static, Self::Db>,
        key: &str,
    ) -> Result<(), sqlx::Error>;
    async fn effects(&self, key: &str) -> i64;
    async fn total_effects(&self) -> i64;
    async fn distinct_effects(&self) -> i64;
    /// Every ledger row's key, in the order the rows were written.
    async fn ledger_keys(&self) -> Vec<String>;
    /// The version row of `aggregate_id` in the projection guard's table,
    /// read as it is stored (0 stands for a row locked before any version).
    async fn stored_version(&self, projection: &str, aggregate_id: &str) -> Option<i64>;
}

macro_rules! ledger_sql {
    ($backend:ty, $db:ty) => {
        #[async_trait]
        impl LedgerSql for $backend {
            type Db = $db;

            async fn record(
                transaction: &mut Transaction<'static, $db>,
                key: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("INSERT INTO ledger (effect_key) VALUES ($1)")
                    .bind(key)
                    .execute(&mut **transaction)
                    .await
                    .map(drop)
            }

            async fn effects(&self, key: &str) -> i64 {
                sqlx::query_scalar("SELECT COUNT(*) FROM ledger WHERE effect_key = $1")
                    .bind(key)
                    .fetch_one(&self.pool)
                    .await
                    .unwrap()
            }

            async fn total_effects(&self) -> i64 {
                sqlx::query_scalar("SELECT COUNT(*) FROM ledger")
                    .fetch_one(&self.pool)
                    .await
                    .unwrap()
            }

            async fn distinct_effects(&self) -> i64 {
                sqlx::query_scalar("SELECT COUNT(DISTINCT effect_key) FROM ledger")
                    .fetch_one(&self.pool)
                    .await
                    .unwrap()
            }

            async fn ledger_keys(&self) -> Vec<String> {
                sqlx::query_scalar("SELECT effect_key FROM ledger ORDER BY id")
                    .fetch_all(&self.pool)
                    .await
                    .unwrap()
            }

            async fn stored_version(&self, projection: &str, aggregate_id: &str) -> Option<i64> {
                sqlx::query_scalar(
                    "SELECT version FROM ackbox_projection_versions
                     WHERE projection = $1 AND aggregate_id = $2",
                )
                .bind(projection)
                .bind(aggregate_id)
                .fetch_optional(&self.pool)
                .await
                .unwrap()
            }
        }
    };
}

ledger_sql!(SqliteBackend, Sqlite);
ledger_sql!(PostgresBackend, Postgres);

#[async_trait]
pub trait Backend: LedgerSql + Send + Sync + Sized + 'static {
    type Inbox: Inbox<Database = Self::Db> + Clone;
    type Outbox: Outbox<Database = Self::Db> + Clone;
    type Effects: EffectStore + VersionStore<Database = Self::Db> + Clone;
    /// `None` when the database is not available here (the test is skipped).
    async fn start() -> Option<Self>;
    fn inbox(&self) -> Self::Inbox;
    fn outbox(&self) -> Self::Outbox;
    fn effect_store(&self) -> Self::Effects;
    /// The database session `transaction` runs on, where the database can
    /// name it (PostgreSQL's backend pid).
    async fn session(transaction: &mut Transaction<'static, Self::Db>) -> Option<i32>;
    /// Returns once `session` waits for a lock another transaction holds.
    /// SQLite cannot say: it waits a moment, and the caller checks that the
    /// blocked work has not finished.
    async fn until_waiting_for_a_lock(&self, session: Option<i32>);
}

pub struct SqliteBackend {
    pool: sqlx::SqlitePool,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl Backend for SqliteBackend {
    type Inbox = SqliteInbox;
    type Outbox = SqliteOutbox;
    type Effects = SqliteEffectStore;

    async fn start() -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.path().join("app.sqlite"))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE ledger (id INTEGER PRIMARY KEY, effect_key TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        Some(Self { pool, _dir: dir })
    }

    fn inbox(&self) -> SqliteInbox {
        SqliteInbox::new(self.pool.clone())
    }

    fn outbox(&self) -> SqliteOutbox {
        SqliteOutbox::new(self.pool.clone())
    }

    fn effect_store(&self) -> SqliteEffectStore {
        SqliteEffectStore::new(self.pool.clone())
    }

    async fn session(_: &mut Transaction<'static, Sqlite>) -> Option<i32> {
        None
    }

    async fn until_waiting_for_a_lock(&self, _: Option<i32>) {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Each test gets its own schema in the test database, dropped when the
/// test ends.
pub struct PostgresBackend {
    pool: sqlx::PgPool,
    _schema: PostgresSchema,
}

#[async_trait]
impl Backend for PostgresBackend {
    type Inbox = PgInbox;
    type Outbox = PgOutbox;
    type Effects = PgEffectStore;

    async fn start() -> Option<Self> {
        let schema = PostgresSchema::new("the PostgreSQL inbox")?;
        let url = schema.url().to_owned();
        let admin = sqlx::PgPool::connect(&url)
            .await
            .expect("PostgreSQL is reachable");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA {}",
            schema.name()
        )))
        .execute(&admin)
        .await
        .unwrap();
        admin.close().await;
        let search_path = schema.name().to_owned();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(20)
            .after_connect(move |connection, _| {
                let statement = format!("SET search_path TO {search_path}");
                Box::pin(async move {
                    sqlx::query(sqlx::AssertSqlSafe(statement))
                        .execute(connection)
                        .await
                        .map(drop)
                })
            })
            .connect(&url)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, effect_key TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        Some(Self {
            pool,
            _schema: schema,
        })
    }

    fn inbox(&self) -> PgInbox {
        PgInbox::new(self.pool.clone())
    }

    fn outbox(&self) -> PgOutbox {
        PgOutbox::new(self.pool.clone())
    }

    fn effect_store(&self) -> PgEffectStore {
        PgEffectStore::new(self.pool.clone())
    }

    async fn session(transaction: &mut Transaction<'static, Postgres>) -> Option<i32> {
        Some(
            sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut **transaction)
                .await
                .unwrap(),
        )
    }

    async fn until_waiting_for_a_lock(&self, session: Option<i32>) {
        let pid = session.expect("a PostgreSQL session has a backend pid");
        eventually(
            Duration::from_secs(10),
            "the session waits for a lock",
            || async {
                let waiting = sqlx::query_scalar::<_, Option<String>>(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1",
                )
                .bind(pid)
                .fetch_optional(&self.pool)
                .await
                .unwrap()
                .flatten();
                waiting.as_deref() == Some("Lock")
            },
        )
        .await;
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| u64::from(elapsed.subsec_nanos()))
}

/// What the ledger handler does, per effect key.
#[derive(Debug, Default)]
pub struct Script {
    /// Transient failures left before a key succeeds.
    pub transient_failures: Mutex<HashMap<String, u32>>,
    /// Keys that always fail transiently (a dependency that is down).
    pub always_down: Mutex<Vec<String>>,
    /// How long each call takes.
    pub delay: Mutex<Duration>,
    /// Handler calls per key.
    pub calls: Mutex<HashMap<String, u32>>,
    /// When each call started.
    pub call_times: Mutex<Vec<std::time::Instant>>,
}

impl Script {
    pub fn calls(&self, key: &str) -> u32 {
        self.calls.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

/// The business handler: the body is JSON `{"key": "..."}`; the effect is a
/// ledger row for the key.
pub struct Ledger<B> {
    pub script: Arc<Script>,
    pub backend: std::marker::PhantomData<fn() -> B>,
}

impl<B> Ledger<B> {
    pub fn new(script: Arc<Script>) -> Self {
        Self {
            script,
            backend: std::marker::PhantomData,
        }
    }
}

#[derive(serde::Deserialize)]
pub struct Body {
    pub key: String,
}

pub fn body(key: &str) -> String {
    format!(r#"{{"key":"{key}"}}"#)
}

/// The effect key: the business key in the body, the message id otherwise.
pub fn business_key(message: &Message) -> String {
    message
        .json::<Body>()
        .map_or_else(|_| message.id.clone(), |body| body.key)
}

#[async_trait]
impl<B: Backend> Handler<B::Db> for Ledger<B> {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, B::Db>,
    ) -> Result<(), HandlerError> {
        let body: Body = message.json()?;
        *self
            .script
            .calls
            .lock()
            .unwrap()
            .entry(body.key.clone())
            .or_default() += 1;
        self.script
            .call_times
            .lock()
            .unwrap()
            .push(std::time::Instant::now());
        let delay = *self.script.delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if self.script.always_down.lock().unwrap().contains(&body.key) {
            return Err(HandlerError::transient(
                "DependencyDown",
                "the ledger service is down",
            ));
        }
        if let Some(left) = self
            .script
            .transient_failures
            .lock()
            .unwrap()
            .get_mut(&body.key)
            && *left > 0
        {
            *left -= 1;
            return Err(HandlerError::transient("Flaky", "try again"));
        }
        B::record(transaction, &body.key).await?;
        Ok(())
    }
}

/// Polls `check` every 50 ms until it holds, for at most `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Instantiates the listed cases (`async fn case<K: Broker, B: Backend>(backend: B)`
/// in the test file's root) for every broker and database:
/// `sqs::sqlite::case`, `rabbitmq::postgres::case`, … (ARCHITECTURE.md, "Conventions the tests cite"). A broker
/// or database that is not configured here is skipped, and says so.
macro_rules! for_each_transport {
    ($cases:tt) => {
        $crate::support::for_each_transport!(@broker sqs, $crate::support::sqs::SqsBroker, $cases);
        $crate::support::for_each_transport!(@broker rabbitmq, $crate::support::rabbitmq::RabbitMqBroker, $cases);
        $crate::support::for_each_transport!(@broker nats, $crate::support::nats::NatsBroker, $cases);
    };
    (@broker $module:ident, $broker:ty, [$($case:ident),* $(,)?]) => {
        mod $module {
            mod sqlite {
                $crate::support::for_each_transport!(@cases $broker, $crate::support::SqliteBackend; $($case),*);
            }
            mod postgres {
                $crate::support::for_each_transport!(@cases $broker, $crate::support::PostgresBackend; $($case),*);
            }
        }
    };
    (@cases $broker:ty, $backend:ty; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                if !<$broker as $crate::support::Broker>::available() {
                    return;
                }
                if let Some(backend) = <$backend as $crate::support::Backend>::start().await {
                    crate::$case::<$broker, $backend>(backend).await;
                }
            }
        )*
    };
}

pub(crate) use for_each_transport;

/// Instantiates the listed cases (`async fn case<B: Backend>(backend: B)` in
/// the test file's root) once per database: `sqlite::case` always,
/// `postgres::case` when PostgreSQL is configured (ARCHITECTURE.md, "Conventions the tests cite").
macro_rules! for_each_backend {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $crate::support::for_each_backend!(@cases $crate::support::SqliteBackend; $($case),*);
        }
        mod postgres {
            $crate::support::for_each_backend!(@cases $crate::support::PostgresBackend; $($case),*);
        }
    };
    (@cases $backend:ty; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                if let Some(backend) = <$backend as $crate::support::Backend>::start().await {
                    super::$case::<$backend>(backend).await;
                }
            }
        )*
    };
}

pub(crate) use for_each_backend;
