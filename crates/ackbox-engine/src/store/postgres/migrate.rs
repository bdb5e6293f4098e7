//! Versioned schema migrations for the PostgreSQL store, numbered as the
//! embedded store's are (`migrations/postgres/`).
//!
//! Nodes starting together take turns under a session advisory lock, so each
//! migration is applied once, inside one transaction, and recorded in
//! `schema_migrations`; running them again is a no-op.

use sqlx::PgPool;

use super::database_error::postgres_error;
use crate::store::StoreError;

/// Every migration, in order: (version, name, SQL).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "dead_letter",
        include_str!("../../../migrations/postgres/0002_dead_letter.sql"),
    ),
    (
        3,
        "move_tasks",
        include_str!("../../../migrations/postgres/0003_move_tasks.sql"),
    ),
    (
        4,
        "fifo",
        include_str!("../../../migrations/postgres/0004_fifo.sql"),
    ),
    (
        5,
        "purge_mark",
        include_str!("../../../migrations/postgres/0005_purge_mark.sql"),
    ),
    (
        6,
        "log_written",
        include_str!("../../../migrations/postgres/0006_log_written.sql"),
    ),
    (
        7,
        "fair_queues",
        include_str!("../../../migrations/postgres/0007_fair_queues.sql"),
    ),
    (
        8,
        "topics",
        include_str!("../../../migrations/postgres/0008_topics.sql"),
    ),
];

/// Scopes the migration lock to the schema being migrated.
const LOCK_KEY: &str = "hashtext('ackbox_migrations:' || current_schema())";

/// Brings the schema up to the newest version.
pub(super) async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let mut connection = pool
        .acquire()
        .await
        .map_err(postgres_error("migrate: connect"))?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT pg_advisory_lock({LOCK_KEY})"
    )))
    .execute(&mut *connection)
    .await
    .map_err(postgres_error("migrate: lock"))?;
    let outcome = apply(&mut connection).await;
    // Unlocked whatever happened; a lost connection releases it anyway.
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT pg_advisory_unlock({LOCK_KEY})"
    )))
    .execute(&mut *connection)
    .await;
    outcome
}

async fn apply(connection: &mut sqlx::PgConnection) -> Result<(), StoreError> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    BIGINT      PRIMARY KEY,
             name       TEXT        NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .execute(&mut *connection)
    .await
    .map_err(postgres_error("create schema_migrations"))?;
    let applied: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
            .fetch_one(&mut *connection)
            .await
            .map_err(postgres_error("read schema version"))?;
    if let Some((newest, _, _)) = MIGRATIONS.last() {
        crate::store::refuse_newer_schema(applied, *newest)?;
    }
    for (version, name, sql) in MIGRATIONS.iter().filter(|(version, ..)| *version > applied) {
        let mut transaction = sqlx::Connection::begin(&mut *connection)
            .await
            .map_err(postgres_error("begin migration"))?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
            .execute(&mut *transaction)
            .await
            .map_err(postgres_error("apply migration"))?;
        sqlx::query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)")
            .bind(version)
            .bind(name)
            .execute(&mut *transaction)
            .await
            .map_err(postgres_error("record migration"))?;
        transaction
            .commit()
            .await
            .map_err(postgres_error("commit migration"))?;
        tracing::info!(version, name, "applied store migration");
    }
    Ok(())
}
