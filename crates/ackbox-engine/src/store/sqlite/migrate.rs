//! Versioned schema migrations for the embedded store.
//!
//! Migrations are numbered files under `migrations/sqlite/`, applied in order
//! inside one transaction each and recorded in `schema_migrations`; running
//! them again is a no-op. A released migration is never edited.

use rusqlite::Connection;

use crate::store::StoreError;

/// Every migration, in order: (version, name, SQL).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "dead_letter",
        include_str!("../../../migrations/sqlite/0002_dead_letter.sql"),
    ),
    (
        3,
        "move_tasks",
        include_str!("../../../migrations/sqlite/0003_move_tasks.sql"),
    ),
    (
        4,
        "fifo",
        include_str!("../../../migrations/sqlite/0004_fifo.sql"),
    ),
    (
        5,
        "purge_mark",
        include_str!("../../../migrations/sqlite/0005_purge_mark.sql"),
    ),
    (
        6,
        "log_written",
        include_str!("../../../migrations/sqlite/0006_log_written.sql"),
    ),
    (
        7,
        "fair_queues",
        include_str!("../../../migrations/sqlite/0007_fair_queues.sql"),
    ),
    (
        8,
        "topics",
        include_str!("../../../migrations/sqlite/0008_topics.sql"),
    ),
];

fn database_error(operation: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Database { operation, source }
}

/// Brings the schema up to the newest version.
pub(crate) fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
    connection
        .execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version    INTEGER PRIMARY KEY,
                 name       TEXT    NOT NULL,
                 applied_at TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP
             )",
        )
        .map_err(database_error("create schema_migrations"))?;
    let applied: i64 = connection
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |row| row.get(0),
        )
        .map_err(database_error("read schema version"))?;
    if let Some((newest, _, _)) = MIGRATIONS.last() {
        crate::store::refuse_newer_schema(applied, *newest)?;
    }
    for (version, name, sql) in MIGRATIONS.iter().filter(|(version, ..)| *version > applied) {
        let transaction = connection
            .transaction()
            .map_err(database_error("begin migration"))?;
        transaction
            .execute_batch(sql)
            .map_err(database_error("apply migration"))?;
        transaction
            .execute(
                "INSERT INTO schema_migrations (version, name) VALUES (?1, ?2)",
                rusqlite::params![version, name],
            )
            .map_err(database_error("record migration"))?;
        transaction
            .commit()
            .map_err(database_error("commit migration"))?;
        tracing::info!(version, name, "applied store migration");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrating_twice_is_a_no_op() {
        let mut connection = Connection::open_in_memory().unwrap();
        migrate(&mut connection).unwrap();
        migrate(&mut connection).unwrap();
        let versions: i64 = connection
            .query_row("SELECT COUNT(*) FROM schema_migrations", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(versions, i64::try_from(MIGRATIONS.len()).unwrap());
    }
}
