//! The inbox on PostgreSQL.

use sqlx::PgPool;

use super::sql_inbox;

/// Forgets expired records, at most 10,000 per call.
const PURGE_EXPIRED: &str = "DELETE FROM ackbox_inbox WHERE ctid IN (
    SELECT ctid FROM ackbox_inbox WHERE expires_at <= $1 LIMIT 10000)";

/// Creates the table. Concurrent `CREATE TABLE IF NOT EXISTS` can collide in
/// the catalog, so consumers starting together take turns.
async fn migrate(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut transaction = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('ackbox_inbox'))")
        .execute(&mut *transaction)
        .await?;
    sqlx::raw_sql(include_str!("../../migrations/postgres/0001_inbox.sql"))
        .execute(&mut *transaction)
        .await?;
    transaction.commit().await
}

sql_inbox!(PgInbox, sqlx::Postgres, PgPool, "PostgreSQL", "");
