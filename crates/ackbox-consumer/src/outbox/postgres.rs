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

/// Creates the table unless it is there (see `schema.rs`).
async fn migrate(pool: &PgPool) -> Result<(), sqlx::Error> {
    crate::schema::ensure_postgres(
        pool,
        "ackbox_outbox_pending_groups",
        &[
            include_str!("../../migrations/postgres/0002_outbox.sql"),
            include_str!("../../migrations/postgres/0004_outbox_order.sql"),
        ],
    )
    .await
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
    position = "position",
    // A group another relay is publishing is left to it: its lock is held
    // until that pass commits its marks.
    group_lock = "
       AND (candidate.group_id IS NULL
            OR pg_try_advisory_xact_lock(hashtext(candidate.destination), hashtext(candidate.group_id)))",
    lock = "\n FOR UPDATE SKIP LOCKED"
);
