//! The inbox on SQLite.

use sqlx::SqlitePool;

use super::sql_inbox;

/// Forgets expired records, at most 10,000 per call.
const PURGE_EXPIRED: &str = "DELETE FROM ackbox_inbox WHERE rowid IN (
    SELECT rowid FROM ackbox_inbox WHERE expires_at <= $1 LIMIT 10000)";

/// Creates the table (SQLite serializes schema changes itself).
async fn migrate(pool: &SqlitePool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(include_str!("../../migrations/sqlite/0001_inbox.sql"))
        .execute(pool)
        .await
        .map(drop)
}

sql_inbox!(
    SqliteInbox,
    sqlx::Sqlite,
    SqlitePool,
    "SQLite",
    " SQLite has one writer at a time: the claim takes the write lock, so concurrent handlers on one database run their transactions one by one."
);
