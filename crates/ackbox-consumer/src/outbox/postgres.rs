//! The outbox on PostgreSQL: several relays share the work, each pass
//! locking the rows it publishes (`FOR UPDATE SKIP LOCKED`).

use async_trait::async_trait;
use sqlx::{PgPool, Postgres, Transaction};

use super::{
    Backlog, OutboxEvent, PendingEvent, Publisher, RelayPass, new_event_id, next_attempt_at,
    publish, sql_outbox,
};
use crate::consumer::now_ms;
use crate::retry::RetryPolicy;
use crate::testing::Faults;

/// Creates the table; relays and applications starting together take turns.
async fn migrate(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut transaction = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('ackbox_outbox'))")
        .execute(&mut *transaction)
        .await?;
    sqlx::raw_sql(include_str!("../../migrations/postgres/0002_outbox.sql"))
        .execute(&mut *transaction)
        .await?;
    transaction.commit().await
}

async fn begin_relay(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    pool.begin().await
}

sql_outbox!(
    PgOutbox,
    Postgres,
    PgPool,
    "PostgreSQL",
    "",
    "\n FOR UPDATE SKIP LOCKED"
);
