//! The inbox on PostgreSQL.

use sqlx::PgPool;

use super::sql_inbox;

/// Forgets expired records, at most 10,000 per call.
const PURGE_EXPIRED: &str = "DELETE FROM ackbox_inbox WHERE ctid IN (
    SELECT ctid FROM ackbox_inbox WHERE expires_at <= $1 LIMIT 10000)";

/// Creates the table unless it is there (see `schema.rs`).
async fn migrate(pool: &PgPool) -> Result<(), sqlx::Error> {
    crate::schema::ensure_postgres(
        pool,
        "ackbox_inbox_by_expiry",
        &[include_str!("../../migrations/postgres/0001_inbox.sql")],
    )
    .await
}

sql_inbox!(PgInbox, sqlx::Postgres, PgPool, "PostgreSQL", "");
