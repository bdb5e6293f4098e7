//! A payments system on ackbox, run under the faults that production brings:
//! orders are placed through the transactional outbox; a payments consumer
//! charges a flaky HTTP gateway through side-effect records; a projection
//! keeps each order's status from events that arrive late, twice and out of
//! order. The run crashes workers, duplicates deliveries, makes the gateway
//! answer too late, replays history, and then reports what happened — above
//! all, how many times each order was charged (exactly once, or it failed).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackbox_consumer::effects::{
    EffectState, EffectStore, Effects, PgEffectStore, SqliteEffectStore,
};
use ackbox_consumer::outbox::{
    EVENT_ID_ATTRIBUTE, Outbox, OutboxEvent, OutboxRelay, PgOutbox, SqliteOutbox,
};
use ackbox_consumer::projection::{Projection, Verdict, VersionStore};
use ackbox_consumer::testing::{CrashPoint, Faults, UnreliableTransport};
use ackbox_consumer::{
    CancellationToken, Consumer, Handler, HandlerError, Inbox, Message, PgInbox, REPLAY_ATTRIBUTE,
    RetryPolicy, SqliteInbox, SqsPublisher, SqsTransport, async_trait,
};
use ackbox_core::clock::SystemClock;
use ackbox_server::broker::{BrokerConfig, RunningBroker};
use anyhow::Context;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, Sqlite, Transaction};

pub mod gateway;

use gateway::GatewayClient;

/// How to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Orders to place.
    pub orders: u64,
    /// PostgreSQL instead of SQLite (the run uses a fresh schema).
    pub postgres: Option<String>,
    /// Inject crashes, duplicates, reordering and slow gateway answers.
    pub faults: bool,
    /// Give up after this long.
    pub deadline: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            orders: 200,
            postgres: None,
            faults: true,
            deadline: Duration::from_secs(180),
        }
    }
}

/// What happened.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The application database.
    pub database: &'static str,
    /// Orders placed.
    pub orders: u64,
    /// Payment deliveries decided (applied, duplicate, failed, crashed, skipped).
    pub payment_deliveries: u64,
    /// Duplicate deliveries absorbed by the inboxes (both consumers).
    pub duplicates_absorbed: u64,
    /// Simulated worker crashes (both consumers).
    pub worker_crashes: u64,
    /// Outbox relay crashes after publishing, before marking.
    pub relay_crashes: u64,
    /// Charge requests the gateway received.
    pub gateway_requests: u64,
    /// Gateway answers that came too late on purpose.
    pub gateway_timeouts: u64,
    /// UNKNOWN charges settled by reconciliation.
    pub unknown_reconciled: u64,
    /// Replayed payment messages skipped (charging is not replay-safe).
    pub replays_skipped: u64,
    /// Orders charged exactly once, by the gateway's own ledger.
    pub charged_exactly_once: u64,
    /// Orders charged more than once (must be 0).
    pub charged_more_than_once: u64,
    /// Orders never charged (must be 0).
    pub not_charged: u64,
    /// Every order's projected status is PAID at version 2.
    pub projection_correct: bool,
    /// How long the run took.
    pub seconds: f64,
}

impl Report {
    /// Every order charged exactly once and projected correctly.
    pub fn passed(&self) -> bool {
        self.charged_exactly_once == self.orders
            && self.charged_more_than_once == 0
            && self.not_charged == 0
            && self.projection_correct
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "payments example on {} ({:.1} s)",
            self.database, self.seconds
        )?;
        writeln!(f, "  orders placed                 {}", self.orders)?;
        writeln!(
            f,
            "  payment deliveries            {}",
            self.payment_deliveries
        )?;
        writeln!(
            f,
            "  duplicates absorbed           {}",
            self.duplicates_absorbed
        )?;
        writeln!(f, "  worker crashes injected       {}", self.worker_crashes)?;
        writeln!(f, "  relay crashes injected        {}", self.relay_crashes)?;
        writeln!(
            f,
            "  gateway requests              {}",
            self.gateway_requests
        )?;
        writeln!(
            f,
            "  gateway timeouts injected     {}",
            self.gateway_timeouts
        )?;
        writeln!(
            f,
            "  UNKNOWN charges reconciled    {}",
            self.unknown_reconciled
        )?;
        writeln!(
            f,
            "  replayed payments skipped     {}",
            self.replays_skipped
        )?;
        writeln!(
            f,
            "  charges per order: exactly 1  {}",
            self.charged_exactly_once
        )?;
        writeln!(
            f,
            "                     more       {}",
            self.charged_more_than_once
        )?;
        writeln!(f, "                     none       {}", self.not_charged)?;
        writeln!(
            f,
            "  projection correct            {}",
            self.projection_correct
        )?;
        write!(
            f,
            "  result                        {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

/// An order was placed (published to the payments queue).
#[derive(Debug, Serialize, Deserialize)]
struct OrderPlaced {
    order_id: u64,
    cents: i64,
}

/// An order's status changed (published to the status queue).
#[derive(Debug, Serialize, Deserialize)]
struct StatusChanged {
    order_id: u64,
    status: String,
    version: i64,
}

/// The application's own SQL, the same text on both databases.
#[async_trait]
pub trait AppSql: Send + Sync + Sized + 'static {
    /// The sqlx database.
    type Db: sqlx::Database;
    /// Places an order.
    async fn place_order(
        transaction: &mut Transaction<'static, Self::Db>,
        order_id: u64,
        cents: i64,
    ) -> Result<(), sqlx::Error>;
    /// Records a payment.
    async fn record_payment(
        transaction: &mut Transaction<'static, Self::Db>,
        order_id: u64,
        charge_id: &str,
    ) -> Result<(), sqlx::Error>;
    /// Sets an order's projected status.
    async fn set_status(
        transaction: &mut Transaction<'static, Self::Db>,
        order_id: u64,
        status: &str,
        version: i64,
    ) -> Result<(), sqlx::Error>;
    /// Payments recorded.
    async fn payments(&self) -> anyhow::Result<u64>;
    /// Orders whose projected status is PAID at version 2.
    async fn paid(&self) -> anyhow::Result<u64>;
}

/// The application's database: its tables and the ackbox stores on it.
#[async_trait]
pub trait AppDb: AppSql {
    /// The inbox.
    type Inbox: Inbox<Database = Self::Db> + Clone;
    /// The outbox.
    type Outbox: Outbox<Database = Self::Db> + Clone;
    /// Effect records and projection versions.
    type Effects: EffectStore + VersionStore<Database = Self::Db> + Clone;
    /// The database's name, for the report.
    const NAME: &'static str;
    /// The inbox.
    fn inbox(&self) -> Self::Inbox;
    /// The outbox.
    fn outbox(&self) -> Self::Outbox;
    /// Where effect records are kept.
    fn effect_store(&self) -> Self::Effects;
    /// The projection's version store (on the application database).
    fn version_store(&self) -> Self::Effects;
    /// Creates the application's tables and the ackbox ones.
    async fn migrate(&self) -> anyhow::Result<()>;
}

const APP_TABLES: &str = "
    CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY, cents BIGINT NOT NULL);
    CREATE TABLE IF NOT EXISTS payments (order_id BIGINT NOT NULL, charge_id TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS order_status (order_id BIGINT PRIMARY KEY, status TEXT NOT NULL, version BIGINT NOT NULL);
";

/// Writes the same SQL for both databases (`$n` parameters, `ON CONFLICT`).
macro_rules! app_sql {
    ($app:ty, $db:ty) => {
        #[async_trait]
        impl AppSql for $app {
        type Db = $db;

        async fn place_order(transaction: &mut Transaction<'static, $db>, order_id: u64, cents: i64) -> Result<(), sqlx::Error> {
            sqlx::query("INSERT INTO orders (id, cents) VALUES ($1, $2)")
                .bind(i64::try_from(order_id).unwrap_or(i64::MAX))
                .bind(cents)
                .execute(&mut **transaction)
                .await
                .map(drop)
        }

        async fn record_payment(transaction: &mut Transaction<'static, $db>, order_id: u64, charge_id: &str) -> Result<(), sqlx::Error> {
            sqlx::query("INSERT INTO payments (order_id, charge_id) VALUES ($1, $2)")
                .bind(i64::try_from(order_id).unwrap_or(i64::MAX))
                .bind(charge_id)
                .execute(&mut **transaction)
                .await
                .map(drop)
        }

        async fn set_status(transaction: &mut Transaction<'static, $db>, order_id: u64, status: &str, version: i64) -> Result<(), sqlx::Error> {
            sqlx::query(
                "INSERT INTO order_status (order_id, status, version) VALUES ($1, $2, $3)
                 ON CONFLICT (order_id) DO UPDATE SET status = excluded.status, version = excluded.version",
            )
            .bind(i64::try_from(order_id).unwrap_or(i64::MAX))
            .bind(status)
            .bind(version)
            .execute(&mut **transaction)
            .await
            .map(drop)
        }

        async fn payments(&self) -> anyhow::Result<u64> {
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM payments").fetch_one(&self.pool).await?;
            Ok(count.unsigned_abs())
        }

        async fn paid(&self) -> anyhow::Result<u64> {
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM order_status WHERE status = 'PAID' AND version = 2")
                .fetch_one(&self.pool)
                .await?;
            Ok(count.unsigned_abs())
        }
        }
    };
}

/// SQLite: the application database, and the effect records in a database
/// of their own — a payment handler holds SQLite's one write lock while it
/// calls the gateway, so its PENDING record must be written elsewhere.
pub struct SqliteApp {
    pool: sqlx::SqlitePool,
    effects: sqlx::SqlitePool,
    _dir: tempfile::TempDir,
}

async fn sqlite_pool(path: PathBuf) -> Result<sqlx::SqlitePool, sqlx::Error> {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
}

impl SqliteApp {
    /// Fresh databases in a temporary directory.
    pub async fn open() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        Ok(Self {
            pool: sqlite_pool(dir.path().join("app.sqlite")).await?,
            effects: sqlite_pool(dir.path().join("effects.sqlite")).await?,
            _dir: dir,
        })
    }
}

#[async_trait]
impl AppDb for SqliteApp {
    type Inbox = SqliteInbox;
    type Outbox = SqliteOutbox;
    type Effects = SqliteEffectStore;
    const NAME: &'static str = "SQLite";

    fn inbox(&self) -> SqliteInbox {
        SqliteInbox::new(self.pool.clone())
    }

    fn outbox(&self) -> SqliteOutbox {
        SqliteOutbox::new(self.pool.clone())
    }

    fn effect_store(&self) -> SqliteEffectStore {
        SqliteEffectStore::new(self.effects.clone())
    }

    fn version_store(&self) -> SqliteEffectStore {
        SqliteEffectStore::new(self.pool.clone())
    }

    async fn migrate(&self) -> anyhow::Result<()> {
        sqlx::raw_sql(APP_TABLES).execute(&self.pool).await?;
        self.inbox().migrate().await?;
        self.outbox().migrate().await?;
        self.version_store().migrate().await?;
        self.effect_store().migrate().await?;
        Ok(())
    }
}

app_sql!(SqliteApp, Sqlite);

/// The prefix of the schemas [`PostgresApp`] creates, each followed by the
/// process id and a random number.
pub const POSTGRES_SCHEMA_PREFIX: &str = "payments_example_";

/// PostgreSQL: everything in one fresh schema of the given database.
pub struct PostgresApp {
    pool: sqlx::PgPool,
}

impl PostgresApp {
    /// A fresh schema in the database at `url`, and its name.
    pub async fn open(url: &str) -> anyhow::Result<(Self, String)> {
        let schema = format!(
            "{POSTGRES_SCHEMA_PREFIX}{}_{}",
            std::process::id(),
            rand::random::<u32>()
        );
        let admin = sqlx::PgPool::connect(url)
            .await
            .context("connecting to PostgreSQL")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&admin)
            .await?;
        admin.close().await;
        let search_path = format!("SET search_path TO {schema}");
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(24)
            .after_connect(move |connection, _| {
                let statement = search_path.clone();
                Box::pin(async move {
                    sqlx::query(sqlx::AssertSqlSafe(statement))
                        .execute(connection)
                        .await
                        .map(drop)
                })
            })
            .connect(url)
            .await?;
        Ok((Self { pool }, schema))
    }

    /// Drops a schema [`PostgresApp::open`] made, and everything in it.
    pub async fn drop_schema(url: &str, schema: &str) -> anyhow::Result<()> {
        let admin = sqlx::PgPool::connect(url)
            .await
            .context("connecting to PostgreSQL")?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE"
        )))
        .execute(&admin)
        .await
        .with_context(|| format!("dropping the example's schema {schema}"))?;
        admin.close().await;
        Ok(())
    }
}

#[async_trait]
impl AppDb for PostgresApp {
    type Inbox = PgInbox;
    type Outbox = PgOutbox;
    type Effects = PgEffectStore;
    const NAME: &'static str = "PostgreSQL";

    fn inbox(&self) -> PgInbox {
        PgInbox::new(self.pool.clone())
    }

    fn outbox(&self) -> PgOutbox {
        PgOutbox::new(self.pool.clone())
    }

    fn effect_store(&self) -> PgEffectStore {
        PgEffectStore::new(self.pool.clone())
    }

    fn version_store(&self) -> PgEffectStore {
        PgEffectStore::new(self.pool.clone())
    }

    async fn migrate(&self) -> anyhow::Result<()> {
        sqlx::raw_sql(APP_TABLES).execute(&self.pool).await?;
        self.inbox().migrate().await?;
        self.outbox().migrate().await?;
        self.effect_store().migrate().await?;
        Ok(())
    }
}

app_sql!(PostgresApp, Postgres);

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
    fn replay_safe(&self) -> bool {
        true
    }
}

fn status_event(queue: &str, order_id: u64, status: &str, version: i64) -> OutboxEvent {
    let body = serde_json::to_string(&StatusChanged {
        order_id,
        status: status.to_owned(),
        version,
    })
    .expect("a status event serializes");
    OutboxEvent::new(queue, body)
        .attribute("event_type", "OrderStatusChanged")
        .attribute("aggregate_id", order_id.to_string())
}

async fn create_queue(
    client: &Client,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> anyhow::Result<String> {
    let mut request = client.create_queue().queue_name(name);
    for (attribute, value) in attributes {
        request = request.attributes(attribute.clone(), value);
    }
    request
        .send()
        .await?
        .queue_url
        .context("CreateQueue returned no URL")
}

async fn drained(client: &Client, url: &str) -> anyhow::Result<bool> {
    let attributes = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await?
        .attributes
        .unwrap_or_default();
    Ok([
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ]
    .iter()
    .all(|name| attributes.get(name).is_some_and(|count| count == "0")))
}

fn consumer_faults(enabled: bool) -> Arc<Faults> {
    let faults = Faults::new();
    if enabled {
        faults
            .crash_randomly(CrashPoint::DuringHandler, 0.02)
            .crash_randomly(CrashPoint::BeforeCommit, 0.02)
            .crash_randomly(CrashPoint::AfterCommitBeforeAck, 0.02);
    }
    Arc::new(faults)
}

/// A consumer keyed on outbox event ids (so a republished event is a
/// duplicate), crashing at random when `faults` says so.
fn flaky_consumer<A: AppDb>(
    name: &str,
    transport: UnreliableTransport<SqsTransport>,
    app: &A,
    faults: bool,
) -> anyhow::Result<Consumer<UnreliableTransport<SqsTransport>, A::Inbox>> {
    Ok(Consumer::builder(name)
        .transport(transport)
        .inbox(app.inbox())
        .effect_key(|message: &Message| {
            message
                .attribute(EVENT_ID_ATTRIBUTE)
                .unwrap_or(&message.id)
                .to_owned()
        })
        .concurrency(8)
        .retry(RetryPolicy::exponential(
            1_000,
            Duration::from_millis(100),
            Duration::from_secs(1),
        ))
        .wait(Duration::from_millis(200))
        .faults(consumer_faults(faults))
        .build()?)
}

/// Runs the example with SQLite or PostgreSQL, as `config` says.
pub async fn run(config: Config) -> anyhow::Result<Report> {
    match &config.postgres {
        Some(url) => {
            let (app, schema) = PostgresApp::open(url).await?;
            let url = url.clone();
            // The run's tables are its own: a run leaves the database as it
            // found it, whatever the outcome.
            let report = run_on(app, config).await;
            let dropped = PostgresApp::drop_schema(&url, &schema).await;
            let report = report?;
            dropped?;
            Ok(report)
        }
        None => run_on(SqliteApp::open().await?, config).await,
    }
}

async fn run_on<A: AppDb>(app: A, config: Config) -> anyhow::Result<Report> {
    let started = Instant::now();
    let data_dir = tempfile::tempdir()?;
    let broker = RunningBroker::start(
        BrokerConfig::new(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir.path().to_path_buf(),
        ),
        Arc::new(SystemClock),
    )
    .await?;
    let endpoint = broker.url();
    let client = Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "key", "secret", None, None, "example",
            ))
            .endpoint_url(&endpoint)
            .build(),
    );
    let dlq = create_queue(&client, "payments-dlq", &[]).await?;
    let dlq_arn = client
        .get_queue_attributes()
        .queue_url(&dlq)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await?
        .attributes
        .unwrap_or_default()
        .remove(&QueueAttributeName::QueueArn)
        .context("no QueueArn")?;
    let lease = [(QueueAttributeName::VisibilityTimeout, "2".to_owned())];
    let payments_queue = create_queue(
        &client,
        "payments",
        &[
            lease[0].clone(),
            (
                QueueAttributeName::RedrivePolicy,
                format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":100}}"#),
            ),
        ],
    )
    .await?;
    let status_queue = create_queue(&client, "order-status", &lease).await?;
    let (gateway_address, gateway_ledger) = gateway::start(
        if config.faults { 0.1 } else { 0.0 },
        Duration::from_secs(1),
    )
    .await?;
    let gateway = GatewayClient::new(gateway_address);
    app.migrate().await?;

    // Orders, each with its two events, in one transaction each.
    let outbox = app.outbox();
    for order_id in 1..=config.orders {
        let mut transaction = app.inbox().begin().await?;
        let cents = i64::try_from(order_id * 100).unwrap_or(i64::MAX);
        A::place_order(&mut transaction, order_id, cents).await?;
        let placed = serde_json::to_string(&OrderPlaced { order_id, cents })?;
        outbox
            .enqueue(
                &mut transaction,
                OutboxEvent::new(&payments_queue, placed)
                    .attribute("event_type", "OrderPlaced")
                    .attribute("aggregate_id", order_id.to_string()),
            )
            .await?;
        outbox
            .enqueue(
                &mut transaction,
                status_event(&status_queue, order_id, "PLACED", 1),
            )
            .await?;
        transaction.commit().await?;
    }

    let shutdown = CancellationToken::new();
    let relay_faults = Arc::new(Faults::new());
    if config.faults {
        relay_faults.crash_randomly(CrashPoint::AfterPublishBeforeMark, 0.2);
    }
    let relay = Arc::new(
        OutboxRelay::new(outbox.clone(), SqsPublisher::new(client.clone()))
            .batch(20)
            .idle(Duration::from_millis(50))
            .retry(RetryPolicy::exponential(
                u32::MAX,
                Duration::from_millis(100),
                Duration::from_secs(1),
            ))
            .faults(Arc::clone(&relay_faults)),
    );
    let relay_task = {
        let (relay, shutdown) = (Arc::clone(&relay), shutdown.clone());
        tokio::spawn(async move { relay.run(shutdown).await })
    };

    let effects = Effects::new(app.effect_store())
        .timeout(Duration::from_millis(300))
        .retry_budget(5);
    let duplicate_rate = if config.faults { 0.1 } else { 0.0 };
    let unreliable = |queue: &str| {
        UnreliableTransport::new(SqsTransport::new(client.clone(), queue).with_ackbox_extensions())
            .duplicating(duplicate_rate)
    };
    let payment_consumer = Arc::new(flaky_consumer(
        "payments",
        unreliable(&payments_queue),
        &app,
        config.faults,
    )?);
    let statuses_transport = if config.faults {
        unreliable(&status_queue).reordering()
    } else {
        unreliable(&status_queue)
    };
    let status_consumer = Arc::new(flaky_consumer(
        "order-status",
        statuses_transport,
        &app,
        config.faults,
    )?);
    let payments_task = {
        let handler = Payments::<A> {
            effects: effects.clone(),
            gateway: gateway.clone(),
            outbox: outbox.clone(),
            status_queue: status_queue.clone(),
        };
        let (consumer, shutdown) = (Arc::clone(&payment_consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    let statuses_task = {
        let handler = Statuses::<A> {
            projection: Projection::new(app.version_store(), "order-status"),
        };
        let (consumer, shutdown) = (Arc::clone(&status_consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(handler, shutdown).await })
    };
    let reconciler_task = {
        let (effects, gateway, shutdown) = (effects.clone(), gateway.clone(), shutdown.clone());
        tokio::spawn(async move {
            let mut reconciled = 0;
            while !shutdown.is_cancelled() {
                if let Ok(pass) = effects
                    .reconcile(|record| {
                        let gateway = gateway.clone();
                        async move { gateway.lookup(&record.idempotency_key).await }
                    })
                    .await
                {
                    reconciled += pass.succeeded;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            reconciled
        })
    };

    let deadline = started + config.deadline;
    let settled = || async {
        anyhow::Ok(
            app.payments().await? == config.orders
                && app.paid().await? == config.orders
                && outbox.backlog().await?.unpublished == 0
                && drained(&client, &payments_queue).await?
                && drained(&client, &status_queue).await?,
        )
    };
    while !settled().await? {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the run did not settle within {:?}",
            config.deadline
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Replay history: the first ten orders' events, marked as a replay.
    let replay = MessageAttributeValue::builder()
        .data_type("String")
        .string_value("true")
        .build()?;
    let replayed = config.orders.min(10);
    for order_id in 1..=replayed {
        let cents = i64::try_from(order_id * 100).unwrap_or(i64::MAX);
        client
            .send_message()
            .queue_url(&payments_queue)
            .message_body(serde_json::to_string(&OrderPlaced { order_id, cents })?)
            .message_attributes(REPLAY_ATTRIBUTE, replay.clone())
            .send()
            .await?;
        let old = StatusChanged {
            order_id,
            status: "PLACED".into(),
            version: 1,
        };
        client
            .send_message()
            .queue_url(&status_queue)
            .message_body(serde_json::to_string(&old)?)
            .message_attributes(REPLAY_ATTRIBUTE, replay.clone())
            .send()
            .await?;
    }
    while payment_consumer.stats().skipped() < replayed || !settled().await? {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the replay did not settle within {:?}",
            config.deadline
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    shutdown.cancel();
    payments_task.await??;
    statuses_task.await??;
    relay_task.await?;
    let unknown_reconciled = reconciler_task.await?;
    broker.stop().await?;
    let census = effects.report().await?;
    let lingering = census
        .iter()
        .filter(|(state, count)| *state != EffectState::Succeeded && *count > 0)
        .count();
    anyhow::ensure!(lingering == 0, "effects left unsettled: {census:?}");

    let per_order = gateway_ledger.charges_per_order();
    let mut histogram: BTreeMap<u64, u64> = BTreeMap::new();
    for order_id in 1..=config.orders {
        *histogram
            .entry(per_order.get(&order_id).copied().unwrap_or(0))
            .or_default() += 1;
    }
    let (payments, statuses) = (payment_consumer.stats(), status_consumer.stats());
    Ok(Report {
        database: A::NAME,
        orders: config.orders,
        payment_deliveries: payments.applied()
            + payments.duplicates()
            + payments.failed()
            + payments.crashed()
            + payments.skipped(),
        duplicates_absorbed: payments.duplicates() + statuses.duplicates(),
        worker_crashes: payments.crashed() + statuses.crashed(),
        relay_crashes: relay_faults.crashes(),
        gateway_requests: gateway_ledger
            .requests
            .load(std::sync::atomic::Ordering::SeqCst),
        gateway_timeouts: gateway_ledger
            .slow_answers
            .load(std::sync::atomic::Ordering::SeqCst),
        unknown_reconciled,
        replays_skipped: payments.skipped(),
        charged_exactly_once: histogram.get(&1).copied().unwrap_or(0),
        charged_more_than_once: histogram.range(2..).map(|(_, orders)| orders).sum(),
        not_charged: histogram.get(&0).copied().unwrap_or(0),
        projection_correct: app.paid().await? == config.orders,
        seconds: started.elapsed().as_secs_f64(),
    })
}
