//! Keeping the hot tables free of dead rows, whatever the server's
//! autovacuum does.
//!
//! Every message leaves PostgreSQL two dead row versions: its lease
//! rewrites the row and its delete ends it. Receives walk the queue's index
//! in order and step over every dead version still there, so a queue that
//! has moved millions of messages slows down unless something vacuums it.
//! That is autovacuum's job, but a server may run without it (this
//! project's CI server does), or with settings tuned for tables that churn
//! less: at 1,000 messages a second for 30 minutes with autovacuum off,
//! `messages` ended with 3.5 million dead rows and 192 MB for a few hundred
//! live ones (`docs/benchmarks.md`). So each node looks at the statistics of
//! its hot tables every few seconds and vacuums one that holds more dead
//! rows than [`MIN_DEAD_ROWS`] and than a fifth of its live ones — when
//! autovacuum keeps up, that never happens. Nodes take turns by an advisory
//! lock, so one table is vacuumed by one node at a time.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::database_error::postgres_error;
use crate::store::StoreError;

/// The tables every message passes through.
const HOT_TABLES: &[&str] = &["messages", "fifo_groups", "fifo_dedup", "receive_attempts"];
/// How often a node looks at the tables' dead rows.
const CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// Dead rows below which a table is left alone, however few its live ones.
pub(super) const MIN_DEAD_ROWS: i64 = 10_000;

/// Whether a table with `dead` and `live` rows needs a vacuum.
fn needs_vacuum(dead: i64, live: i64) -> bool {
    dead >= MIN_DEAD_ROWS && dead >= live / 5
}

/// Vacuums the hot tables as they need it until `stop`.
pub(super) async fn keep_vacuumed(pool: PgPool, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(CHECK_INTERVAL) => {}
        }
        if let Err(error) = vacuum_what_needs_it(&pool).await {
            // The next round tries again; a lost connection is the
            // primary watcher's to report.
            tracing::debug!(%error, "could not vacuum the hot tables");
        }
    }
}

/// One round: every hot table over the threshold, vacuumed; how many.
pub(super) async fn vacuum_what_needs_it(pool: &PgPool) -> Result<usize, StoreError> {
    let tables: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_dead_tup, n_live_tup FROM pg_stat_user_tables
         WHERE schemaname = current_schema() AND relname = ANY($1)",
    )
    .bind(HOT_TABLES)
    .fetch_all(pool)
    .await
    .map_err(postgres_error("vacuum: statistics"))?;
    let mut vacuumed = 0;
    for (table, dead, live) in tables {
        if !needs_vacuum(dead, live) {
            continue;
        }
        let Some(table) = HOT_TABLES.iter().find(|hot| **hot == table) else {
            continue;
        };
        // One connection for the lock and the vacuum: the lock is the
        // session's, and VACUUM cannot run in a transaction.
        let mut connection = pool
            .acquire()
            .await
            .map_err(postgres_error("vacuum: connect"))?;
        let key = format!("ackbox_vacuum:{table}");
        let locked: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext(current_schema() || $1))")
                .bind(&key)
                .fetch_one(&mut *connection)
                .await
                .map_err(postgres_error("vacuum: lock"))?;
        if !locked {
            continue;
        }
        let started = std::time::Instant::now();
        let outcome = sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM {table}")))
            .execute(&mut *connection)
            .await
            .map_err(postgres_error("vacuum"));
        // Whatever the vacuum did; a lost connection releases it anyway.
        let _ = sqlx::query("SELECT pg_advisory_unlock(hashtext(current_schema() || $1))")
            .bind(&key)
            .execute(&mut *connection)
            .await;
        outcome?;
        metrics::counter!("ackbox_postgres_vacuums_total", "table" => *table).increment(1);
        tracing::debug!(
            table,
            dead,
            live,
            took_ms = started.elapsed().as_millis() as u64,
            "vacuumed"
        );
        vacuumed += 1;
    }
    Ok(vacuumed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_vacuumed_once_its_dead_rows_pass_both_thresholds() {
        assert!(!needs_vacuum(MIN_DEAD_ROWS - 1, 0), "few dead rows");
        assert!(needs_vacuum(MIN_DEAD_ROWS, 0));
        assert!(needs_vacuum(MIN_DEAD_ROWS, 5 * MIN_DEAD_ROWS));
        assert!(
            !needs_vacuum(MIN_DEAD_ROWS, 5 * MIN_DEAD_ROWS + 5),
            "a fifth of the live rows"
        );
    }
}
