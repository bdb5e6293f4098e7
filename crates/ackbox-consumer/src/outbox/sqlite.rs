//! The outbox on SQLite: one relay per database, since SQLite has one
//! writer at a time.

use async_trait::async_trait;
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::{
    Backlog, OutboxEvent, PendingEvent, Publisher, RelayPass, new_event_id, next_attempt_at,
    publish, sql_outbox,
};
use crate::consumer::now_ms;
use crate::retry::RetryPolicy;
use crate::testing::Faults;

async fn migrate(pool: &SqlitePool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(include_str!("../../migrations/sqlite/0002_outbox.sql"))
        .execute(pool)
        .await?;
    sqlx::raw_sql(include_str!(
        "../../migrations/sqlite/0004_outbox_order.sql"
    ))
    .execute(pool)
    .await
    .map(drop)
}

/// Takes the write lock up front, so the pass's marks never fail to
/// upgrade a read.
async fn begin_relay(pool: &SqlitePool) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
    pool.begin_with("BEGIN IMMEDIATE").await
}

sql_outbox!(
    SqliteOutbox,
    Sqlite,
    SqlitePool,
    "SQLite",
    " Run one relay per database: SQLite has one writer at a time.",
    // A rowid table numbers rows as they are inserted (above every row it
    // still holds), which is the order events were enqueued.
    position = "rowid",
    group_lock = "",
    lock = ""
);
