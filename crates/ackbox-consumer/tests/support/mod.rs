//! The consumer suite's fixtures: a real ackbox broker with a dead-letter
//! queue, an application database (SQLite or PostgreSQL) with a ledger table
//! that counts business effects, and a scriptable handler.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackbox_consumer::effects::{EffectStore, PgEffectStore, SqliteEffectStore};
use ackbox_consumer::outbox::{Outbox, PgOutbox, SqliteOutbox};
use ackbox_consumer::projection::VersionStore;
use ackbox_consumer::{
    Handler, HandlerError, Inbox, Message, PgInbox, SqliteInbox, SqsTransport, async_trait,
};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;
use sqlx::{Database, Postgres, Sqlite, Transaction};

/// A broker with `work` (lease `lease_seconds`, dead-lettering after
/// `max_receive` receives) and its dead-letter queue `work-dlq`.
pub struct Broker {
    pub server: TestServer,
    pub client: Client,
    pub url: String,
    pub dlq_url: String,
}

impl Broker {
    pub async fn start(lease_seconds: u32, max_receive: u32) -> Self {
        let server = TestServer::builder().start().await;
        let client = server.client();
        let dlq_url = create(&client, "work-dlq", &[]).await;
        let dlq_arn = attribute(&client, &dlq_url, QueueAttributeName::QueueArn).await;
        let policy =
            format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":{max_receive}}}"#);
        let url = create(
            &client,
            "work",
            &[
                (
                    QueueAttributeName::VisibilityTimeout,
                    lease_seconds.to_string(),
                ),
                (QueueAttributeName::RedrivePolicy, policy),
            ],
        )
        .await;
        Self {
            server,
            client,
            url,
            dlq_url,
        }
    }

    pub fn transport(&self) -> SqsTransport {
        SqsTransport::new(self.client.clone(), &self.url).with_ackbox_extensions(&self.server.url())
    }

    /// The transport as it would run against AWS: plain SQS calls only.
    pub fn aws_transport(&self) -> SqsTransport {
        SqsTransport::new(self.client.clone(), &self.url)
    }

    pub async fn send(&self, body: &str) -> String {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .unwrap()
            .message_id
            .unwrap()
    }

    pub async fn send_batch(&self, bodies: &[String]) {
        for chunk in bodies.chunks(10) {
            let mut request = self.client.send_message_batch().queue_url(&self.url);
            for (index, body) in chunk.iter().enumerate() {
                request = request.entries(
                    aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .message_body(body)
                        .build()
                        .unwrap(),
                );
            }
            let output = request.send().await.unwrap();
            assert!(output.failed().is_empty());
        }
    }

    /// Visible + in flight + delayed messages of a queue.
    pub async fn depth(&self, url: &str) -> (u64, u64) {
        let attributes = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap();
        let count = |name| attributes[&name].parse::<u64>().unwrap();
        (
            count(QueueAttributeName::ApproximateNumberOfMessages),
            count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    /// The dead-letter queue's messages with the failure class a copy
    /// carries as a message attribute (plain SQS dead-lettering).
    pub async fn dead_letter_copies(&self) -> Vec<(String, String)> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        output
            .messages()
            .iter()
            .map(|message| {
                let class = message
                    .message_attributes()
                    .and_then(|attributes| attributes.get("ackbox.failure.class"))
                    .and_then(|value| value.string_value())
                    .unwrap_or_default()
                    .to_owned();
                (message.body().unwrap_or_default().to_owned(), class)
            })
            .collect()
    }

    /// The dead-letter queue's messages with their failure classes.
    pub async fn dead_letters(&self) -> Vec<(String, String)> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        output
            .messages()
            .iter()
            .map(|message| {
                let class = message
                    .attributes()
                    .and_then(|attributes| {
                        attributes.get(&aws_sdk_sqs::types::MessageSystemAttributeName::from(
                            "AckBoxFailureClass",
                        ))
                    })
                    .cloned()
                    .unwrap_or_default();
                (message.body().unwrap_or_default().to_owned(), class)
            })
            .collect()
    }
}

async fn create(
    client: &Client,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> String {
    let mut request = client.create_queue().queue_name(name);
    for (attribute, value) in attributes {
        request = request.attributes(attribute.clone(), value);
    }
    request.send().await.unwrap().queue_url.unwrap()
}

async fn attribute(client: &Client, url: &str, name: QueueAttributeName) -> String {
    client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(name.clone())
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&name]
        .clone()
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
}

/// Each test gets its own schema in the test database.
pub struct PostgresBackend {
    pool: sqlx::PgPool,
}

static SCHEMAS: AtomicU64 = AtomicU64::new(0);

#[async_trait]
impl Backend for PostgresBackend {
    type Inbox = PgInbox;
    type Outbox = PgOutbox;
    type Effects = PgEffectStore;

    async fn start() -> Option<Self> {
        let Ok(url) = std::env::var("ACKBOX_TEST_POSTGRES_URL") else {
            eprintln!(
                "skipped: ACKBOX_TEST_POSTGRES_URL is not set, so the PostgreSQL inbox is not tested here"
            );
            return None;
        };
        let schema = format!(
            "consumer_{}_{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::Relaxed),
            rand_suffix()
        );
        let admin = sqlx::PgPool::connect(&url)
            .await
            .expect("PostgreSQL is reachable");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let search_path = schema.clone();
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
        Some(Self { pool })
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

/// Instantiates the listed cases (`async fn case<B: Backend>(backend: B)` in
/// the test file's root) once per database: `sqlite::case` always,
/// `postgres::case` when PostgreSQL is configured (STYLE T2).
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
