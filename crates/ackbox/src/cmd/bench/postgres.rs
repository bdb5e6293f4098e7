//! A PostgreSQL queue table as a benchmark target, the way job queues on
//! PostgreSQL work (River, PGMQ, Oban): a batch is one INSERT; a receive
//! leases up to 10 rows with `FOR UPDATE SKIP LOCKED`, and their delete is a
//! second statement, as ackbox's receive and delete are two requests. Every
//! statement commits with `synchronous_commit` on (the server's default),
//! so an acknowledged insert is on disk, as ackbox's are.

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
                 body bytea NOT NULL,
                 leased_until timestamptz
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
            lease: format!(
                "UPDATE {table} SET leased_until = now() + interval '60 seconds'
                 WHERE id IN (
                     SELECT id FROM {table}
                     WHERE leased_until IS NULL OR leased_until < now()
                     ORDER BY id
                     FOR UPDATE SKIP LOCKED
                     LIMIT 10)
                 RETURNING id, body"
            ),
            delete: format!("DELETE FROM {table} WHERE id = ANY($1)"),
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

/// Leases up to 10 rows, then deletes them.
#[derive(Debug)]
pub(super) struct PostgresConsumer {
    pool: PgPool,
    lease: String,
    delete: String,
}

/// How often an empty queue is polled (PostgreSQL queues without
/// LISTEN/NOTIFY poll; this keeps the added delivery latency ~1 ms).
const POLL: Duration = Duration::from_millis(1);

impl Consumer for PostgresConsumer {
    async fn receive(&mut self, wait: Duration) -> anyhow::Result<Vec<Bytes>> {
        let deadline = Instant::now() + wait;
        loop {
            let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(AssertSqlSafe(self.lease.as_str()))
                .fetch_all(&self.pool)
                .await?;
            if !rows.is_empty() {
                let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
                sqlx::query(AssertSqlSafe(self.delete.as_str()))
                    .bind(ids)
                    .execute(&self.pool)
                    .await?;
                return Ok(rows
                    .into_iter()
                    .map(|(_, body)| Bytes::from(body))
                    .collect());
            }
            if Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
