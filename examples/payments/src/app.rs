//! The application's database — its tables, and the ackbox stores on it —
//! on SQLite or PostgreSQL, with the same SQL text on both.

use std::path::PathBuf;
use std::time::Duration;

use ackbox_consumer::effects::{EffectStore, PgEffectStore, SqliteEffectStore};
use ackbox_consumer::outbox::{Outbox, PgOutbox, SqliteOutbox};
use ackbox_consumer::projection::VersionStore;
use ackbox_consumer::{Inbox, PgInbox, SqliteInbox, async_trait};
use anyhow::Context;
use sqlx::{Postgres, Sqlite, Transaction};

/// The application's own SQL, the same text on both databases.
#[async_trait]
pub trait AppSql: Send + Sync + Sized + 'static {
    /// The sqlx database.
    type Db: sqlx::Database;
    /// A transaction on the application's database.
    async fn begin(&self) -> Result<Transaction<'static, Self::Db>, sqlx::Error>;
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
    /// Sets an order's projected status, whatever it was.
    async fn set_status(
        transaction: &mut Transaction<'static, Self::Db>,
        order_id: u64,
        status: &str,
        version: i64,
    ) -> Result<(), sqlx::Error>;
    /// Payments recorded (rows, so an order paid twice counts twice).
    async fn payments(&self) -> anyhow::Result<u64>;
    /// Orders with at least one payment recorded.
    async fn orders_with_a_payment(&self) -> anyhow::Result<u64>;
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
    /// Creates the application's tables and the outbox, which both runs
    /// publish through.
    async fn migrate(&self) -> anyhow::Result<()>;
    /// Creates what only consumers built on ackbox-consumer use: the inbox,
    /// the effect records and the projection versions.
    async fn migrate_consumer_stores(&self) -> anyhow::Result<()>;
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

        async fn begin(&self) -> Result<Transaction<'static, $db>, sqlx::Error> {
            self.pool.begin().await
        }

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

        async fn orders_with_a_payment(&self) -> anyhow::Result<u64> {
            let count: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT order_id) FROM payments").fetch_one(&self.pool).await?;
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
        self.outbox().migrate().await?;
        Ok(())
    }

    async fn migrate_consumer_stores(&self) -> anyhow::Result<()> {
        self.inbox().migrate().await?;
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
        self.outbox().migrate().await?;
        Ok(())
    }

    async fn migrate_consumer_stores(&self) -> anyhow::Result<()> {
        self.inbox().migrate().await?;
        // One store holds both the effect records and the projection
        // versions on PostgreSQL.
        self.effect_store().migrate().await?;
        Ok(())
    }
}

app_sql!(PostgresApp, Postgres);
