//! The application database: a throwaway PostgreSQL schema per trial.
//! Every connection names the trial in `application_name`, and each
//! consumer process its own, so the driver can find the consumers'
//! sessions and end them under their feet.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use ackbox_consumer::{Inbox, PgInbox};
use ackbox_testkit::postgres::PostgresSchema;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// How a consumer process reaches the trial's schema.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DatabaseAddress {
    url: String,
    schema: String,
}

impl DatabaseAddress {
    /// What every session of the trial's consumer processes starts its
    /// `application_name` with.
    fn consumer_prefix(&self) -> String {
        format!("chaos-{}-p", self.schema)
    }

    /// The `application_name` of consumer process `process`.
    pub(crate) fn consumer_application(&self, process: usize) -> String {
        format!("{}{process}", self.consumer_prefix())
    }

    /// A pool on the schema: `search_path` is set at connection start, so a
    /// connection the pool replaces after a termination lands there too.
    /// It connects when first used, so an unreachable database is a failed
    /// transaction (retried), not a process that cannot start.
    pub(crate) fn pool(
        &self,
        application_name: &str,
        max_connections: u32,
    ) -> Result<PgPool, sqlx::Error> {
        let options = PgConnectOptions::from_str(&self.url)?
            .application_name(application_name)
            .options([("search_path", self.schema.as_str())]);
        Ok(PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options))
    }
}

/// Sessions waiting on a lock at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LockWaits {
    pub(crate) waiting: u64,
    /// Of those, sessions running DDL.
    pub(crate) ddl: u64,
}

/// The trial's schema, with the driver's own pool on it; dropped (with
/// everything in it) when this is.
pub(crate) struct TrialDatabase {
    address: DatabaseAddress,
    pool: PgPool,
    /// Declared last: the schema is dropped after the pool is closed.
    _schema: PostgresSchema,
}

impl TrialDatabase {
    /// A fresh schema with the SDK's inbox table; `None` (after a
    /// "skipped" line) when `ACKBOX_TEST_POSTGRES_URL` is unset.
    pub(crate) async fn create(what: &str) -> Option<Self> {
        let schema = PostgresSchema::new(what)?;
        let address = DatabaseAddress {
            url: schema.url().to_owned(),
            schema: schema.name().to_owned(),
        };
        let admin = sqlx::PgPool::connect(schema.url())
            .await
            .expect("PostgreSQL is reachable at ACKBOX_TEST_POSTGRES_URL");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA {}",
            schema.name()
        )))
        .execute(&admin)
        .await
        .expect("the trial's schema is created");
        admin.close().await;
        let pool = address
            .pool(&format!("chaos-{}-driver", schema.name()), 4)
            .expect("the database URL parses");
        // Consumers create the inbox themselves, under an advisory lock;
        // creating it first keeps four processes from queueing on it.
        PgInbox::new(pool.clone())
            .migrate()
            .await
            .expect("the inbox table is created");
        Some(Self {
            address,
            pool,
            _schema: schema,
        })
    }

    pub(crate) fn address(&self) -> &DatabaseAddress {
        &self.address
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Inbox records per consumer: effects committed so far, whatever the
    /// workload writes.
    pub(crate) async fn effects_committed(&self) -> Result<BTreeMap<String, u64>, sqlx::Error> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT consumer, COUNT(*) FROM ackbox_inbox GROUP BY consumer")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(consumer, count)| (consumer, count.unsigned_abs()))
            .collect())
    }

    /// Ends every session of the trial's consumer processes, idle or in the
    /// middle of a transaction; returns how many were ended.
    pub(crate) async fn terminate_consumer_connections(&self) -> Result<u64, sqlx::Error> {
        let ended: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FILTER (WHERE pg_terminate_backend(pid))
             FROM pg_stat_activity
             WHERE left(application_name, length($1)) = $1 AND pid <> pg_backend_pid()",
        )
        .bind(self.address.consumer_prefix())
        .fetch_one(&self.pool)
        .await?;
        Ok(ended.unsigned_abs())
    }

    /// The consumers' sessions waiting on a lock now, and how many of those
    /// run DDL (the inbox migration a consumer runs when it starts).
    pub(crate) async fn lock_waits(&self) -> Result<LockWaits, sqlx::Error> {
        let (waiting, ddl): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*) FILTER (WHERE wait_event_type = 'Lock'),
                    COUNT(*) FILTER (WHERE wait_event_type = 'Lock' AND query ILIKE '%CREATE %')
             FROM pg_stat_activity
             WHERE left(application_name, length($1)) = $1",
        )
        .bind(self.address.consumer_prefix())
        .fetch_one(&self.pool)
        .await?;
        Ok(LockWaits {
            waiting: waiting.unsigned_abs(),
            ddl: ddl.unsigned_abs(),
        })
    }

    /// Closes the driver's pool; the schema goes when this is dropped.
    pub(crate) async fn close(self) {
        self.pool.close().await;
    }
}
