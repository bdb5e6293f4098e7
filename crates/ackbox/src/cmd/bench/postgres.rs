//! A PostgreSQL queue table as a benchmark target, in the common `SKIP
//! LOCKED` shape: a batch is one INSERT; a receive deletes up to 10 rows
//! with `FOR UPDATE SKIP LOCKED` and returns them, in the transaction that
//! would process them (empty here, so one statement). Every statement
//! commits with `synchronous_commit` on (the server's default), so an
//! acknowledged insert is on disk, as ackbox's are.

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::target::{Consumer, Producer, Target};

/// What the numbers promise.
pub(super) const DURABILITY: &str = "synchronous_commit on, one transaction per batch";

/// One queue table. Its name, spliced into the statements, is the bench's
/// own (`bench_<pid>_<time>_<round>`), never input.
#[derive(Debug)]
pub(super) struct PostgresTarget {
    pool: PgPool,
    table: String,
}

impl PostgresTarget {
    /// Creates table `table` in the database at `url`, with a connection for
    /// every worker.
    pub(super) async fn create(url: &str, table: &str, workers: u32) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(workers + 2)
            .connect(url)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {url}"))?;
        sqlx::query(AssertSqlSafe(format!(
            "CREATE TABLE {table} (
                 id bigserial PRIMARY KEY,
                 body bytea NOT NULL
             )"
        )))
        .execute(&pool)
        .await
        .with_context(|| format!("creating table {table}"))?;
        Ok(Self {
            pool,
            table: table.to_owned(),
        })
    }
}

impl Target for PostgresTarget {
    type Producer = PostgresProducer;
    type Consumer = PostgresConsumer;

    async fn producer(&self) -> anyhow::Result<PostgresProducer> {
        Ok(PostgresProducer {
            pool: self.pool.clone(),
            insert: format!(
                "INSERT INTO {} (body) SELECT unnest($1::bytea[])",
                self.table
            ),
        })
    }

    async fn consumer(&self) -> anyhow::Result<PostgresConsumer> {
        let table = &self.table;
        Ok(PostgresConsumer {
            pool: self.pool.clone(),
            take: format!(
                "DELETE FROM {table}
                 WHERE id IN (SELECT id FROM {table} ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 10)
                 RETURNING body"
            ),
        })
    }

    async fn remove(&self) -> anyhow::Result<()> {
        sqlx::query(AssertSqlSafe(format!("DROP TABLE {}", self.table)))
            .execute(&self.pool)
            .await?;
        self.pool.close().await;
        Ok(())
    }
}

/// Inserts a batch in one statement.
#[derive(Debug, Clone)]
pub(super) struct PostgresProducer {
    pool: PgPool,
    insert: String,
}

impl Producer for PostgresProducer {
    async fn send(&self, bodies: &[Bytes]) -> anyhow::Result<u64> {
        let bodies: Vec<&[u8]> = bodies.iter().map(Bytes::as_ref).collect();
        let done = sqlx::query(AssertSqlSafe(self.insert.as_str()))
            .bind(bodies)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

/// Takes up to 10 rows.
#[derive(Debug)]
pub(super) struct PostgresConsumer {
    pool: PgPool,
    take: String,
}

/// How often an empty queue is polled (PostgreSQL queues without
/// LISTEN/NOTIFY poll; this keeps the added delivery latency ~1 ms).
const POLL: Duration = Duration::from_millis(1);

impl Consumer for PostgresConsumer {
    async fn receive(&mut self, wait: Duration) -> anyhow::Result<Vec<Bytes>> {
        let deadline = Instant::now() + wait;
        loop {
            let bodies: Vec<Vec<u8>> = sqlx::query_scalar(AssertSqlSafe(self.take.as_str()))
                .fetch_all(&self.pool)
                .await?;
            if !bodies.is_empty() {
                return Ok(bodies.into_iter().map(Bytes::from).collect());
            }
            if Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
