//! Creating the SDK's tables in the application's PostgreSQL database
//! without holding up the consumers that already use them.
//!
//! Every consumer, relay and effect store creates its tables when it starts,
//! so that nothing has to be run by hand. On PostgreSQL that must not be
//! DDL run at every start: `CREATE INDEX IF NOT EXISTS` locks its table
//! against writes *before* it finds the index there, so a consumer starting
//! (after a deploy, or a crash) would stall every consumer writing to that
//! table for as long as the longest transaction open on it. The tables'
//! newest object is looked up first, and the DDL runs only when it is
//! missing — under an advisory lock, because concurrent `CREATE … IF NOT
//! EXISTS` statements can still collide in the catalog.

use sqlx::PgPool;

/// Runs `migrations` in order unless `newest` — the object the last of them
/// creates — exists already (in the connection's search path).
pub(crate) async fn ensure_postgres(
    pool: &PgPool,
    newest: &str,
    migrations: &[&'static str],
) -> Result<(), sqlx::Error> {
    let exists = |pool| async move {
        sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
            .bind(newest)
            .fetch_one(pool)
            .await
    };
    if exists(pool).await? {
        return Ok(());
    }
    let mut transaction = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(newest)
        .execute(&mut *transaction)
        .await?;
    for migration in migrations {
        sqlx::raw_sql(*migration).execute(&mut *transaction).await?;
    }
    transaction.commit().await
}
