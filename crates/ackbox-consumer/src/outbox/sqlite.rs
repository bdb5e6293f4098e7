//! The outbox on SQLite.

use async_trait::async_trait;
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::{
    Backlog, Outbox, OutboxEvent, PendingEvent, Publisher, RelayPass, new_event_id,
    next_attempt_at, publish,
};
use crate::consumer::now_ms;
use crate::retry::RetryPolicy;
use crate::testing::Faults;

/// An outbox in the application's SQLite database (table `ackbox_outbox`).
/// Run one relay per database: SQLite has one writer at a time.
#[derive(Debug, Clone)]
pub struct SqliteOutbox {
    pool: SqlitePool,
}

impl SqliteOutbox {
    /// An outbox on `pool`, the pool the application writes with.
    pub fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }
}

type Row = (String, String, String, String, Option<String>, i64);

fn pending((event_id, destination, body, attributes, group_id, attempts): Row) -> PendingEvent {
    PendingEvent {
        event_id,
        event: OutboxEvent {
            destination,
            body,
            group_id,
            // Written by `enqueue` from a map of strings; unreadable JSON
            // would be a foreign write, published without attributes.
            attributes: serde_json::from_str(&attributes).unwrap_or_default(),
        },
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
    }
}

#[async_trait]
impl Outbox for SqliteOutbox {
    type Database = Sqlite;

    async fn migrate(&self) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(include_str!("../../migrations/sqlite/0002_outbox.sql"))
            .execute(&self.pool)
            .await
            .map(drop)
    }

    async fn enqueue(
        &self,
        transaction: &mut Transaction<'static, Sqlite>,
        event: OutboxEvent,
    ) -> Result<String, sqlx::Error> {
        let event_id = new_event_id();
        let now = now_ms();
        sqlx::query(
            "INSERT INTO ackbox_outbox
                 (event_id, destination, body, attributes, group_id, created_at, next_attempt_at)
             VALUES ($1, $2, $3, $4, $5, $6, $6)",
        )
        .bind(&event_id)
        .bind(&event.destination)
        .bind(&event.body)
        .bind(serde_json::to_string(&event.attributes).expect("a map of strings serializes"))
        .bind(&event.group_id)
        .bind(now)
        .execute(&mut **transaction)
        .await?;
        Ok(event_id)
    }

    async fn relay_pass(
        &self,
        publisher: &dyn Publisher,
        limit: u32,
        retry: &RetryPolicy,
        faults: Option<&Faults>,
    ) -> Result<RelayPass, sqlx::Error> {
        let now = now_ms();
        let mut transaction = // One writer at a time: take the write lock up front, so the marks
        // never fail to upgrade a read.
        self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT event_id, destination, body, attributes, group_id, CAST(attempts AS BIGINT)
             FROM ackbox_outbox
             WHERE published_at IS NULL AND next_attempt_at <= $1
             ORDER BY created_at, event_id LIMIT $2",
        )
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut *transaction)
        .await?;
        if rows.is_empty() {
            transaction.rollback().await?;
            return Ok(RelayPass::default());
        }
        let events: Vec<PendingEvent> = rows.into_iter().map(pending).collect();
        let Some(results) = publish(publisher, &events, faults).await else {
            transaction.rollback().await?;
            return Ok(RelayPass {
                crashed: true,
                ..RelayPass::default()
            });
        };
        let mut pass = RelayPass::default();
        for (event, result) in events.iter().zip(results) {
            match result {
                Ok(()) => {
                    sqlx::query(
                        "UPDATE ackbox_outbox SET published_at = $1, attempts = attempts + 1
                         WHERE event_id = $2",
                    )
                    .bind(now)
                    .bind(&event.event_id)
                    .execute(&mut *transaction)
                    .await?;
                    pass.published += 1;
                }
                Err(error) => {
                    tracing::warn!(event_id = %event.event_id, %error, "outbox publication failed; will retry");
                    sqlx::query(
                        "UPDATE ackbox_outbox
                         SET attempts = attempts + 1, next_attempt_at = $1, last_error = $2
                         WHERE event_id = $3",
                    )
                    .bind(next_attempt_at(now, event.attempts + 1, retry))
                    .bind(&error)
                    .bind(&event.event_id)
                    .execute(&mut *transaction)
                    .await?;
                    pass.failed += 1;
                }
            }
        }
        transaction.commit().await?;
        Ok(pass)
    }

    async fn backlog(&self) -> Result<Backlog, sqlx::Error> {
        let (unpublished, oldest): (i64, Option<i64>) = sqlx::query_as(
            "SELECT COUNT(*), MIN(created_at) FROM ackbox_outbox WHERE published_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(Backlog {
            unpublished: unpublished.unsigned_abs(),
            oldest_created_at_ms: oldest,
        })
    }
}
