//! Effect records and projection versions in the application's own
//! PostgreSQL or SQLite database: one macro holds the SQL both share (each
//! takes `$n` parameters in order of first use, and `ON CONFLICT`).

use async_trait::async_trait;

use super::{EffectRecord, EffectState, EffectStore, Transition};

/// The stored version of an aggregate whose version row exists but that has
/// no version applied yet (versions start at 1): the row exists so that it
/// can be locked before the first event is judged.
const NO_VERSION: i64 = 0;

/// Implements [`EffectStore`] and the projection guard for one database.
/// The SQL is shared: both databases take `$n` parameters (in order of
/// first use) and `ON CONFLICT`.
macro_rules! sql_effect_store {
    ($store:ident, $database:ty, $pool:ty, $name:literal, $lock:literal) => {
        #[doc = concat!("Effect records and projection versions in the application's ", $name, " database.")]
        #[derive(Debug, Clone)]
        pub struct $store {
            pool: $pool,
        }

        impl $store {
            /// A store on `pool`, the pool the application writes with.
            pub fn new(pool: $pool) -> Self {
                Self { pool }
            }
        }

        type RecordRow = (String, String, String, Option<String>, i64, i64);

        fn record_from(
            (effect_key, idempotency_key, state, result, attempts, updated_at_ms): RecordRow,
        ) -> EffectRecord {
            EffectRecord {
                effect_key,
                idempotency_key,
                state: EffectState::parse(&state),
                result,
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                updated_at_ms,
            }
        }

        #[async_trait]
        impl EffectStore for $store {
            async fn migrate(&self) -> Result<(), sqlx::Error> {
                migrate(&self.pool).await
            }

            async fn begin(&self, key: &str, idempotency_key: &str, now_ms: i64) -> Result<bool, sqlx::Error> {
                Ok(sqlx::query(
                    "INSERT INTO ackbox_effects
                         (effect_key, idempotency_key, state, attempts, created_at, updated_at)
                     VALUES ($1, $2, 'PENDING', 1, $3, $3)
                     ON CONFLICT (effect_key) DO NOTHING",
                )
                .bind(key)
                .bind(idempotency_key)
                .bind(now_ms)
                .execute(&self.pool)
                .await?
                .rows_affected()
                    == 1)
            }

            async fn get(&self, key: &str) -> Result<Option<EffectRecord>, sqlx::Error> {
                let row: Option<RecordRow> = sqlx::query_as(
                    "SELECT effect_key, idempotency_key, state, result, CAST(attempts AS BIGINT), updated_at
                     FROM ackbox_effects WHERE effect_key = $1",
                )
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(record_from))
            }

            async fn transition(&self, transition: Transition<'_>) -> Result<bool, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE ackbox_effects
                     SET state = $1, result = COALESCE($2, result), last_error = COALESCE($3, last_error),
                         attempts = attempts + $4, updated_at = $5
                     WHERE effect_key = $6 AND state = $7 AND updated_at <= $8",
                )
                .bind(transition.to.as_str())
                .bind(transition.result)
                .bind(transition.error)
                .bind(i64::from(transition.counts_attempt))
                .bind(transition.now_ms)
                .bind(transition.key)
                .bind(transition.from.as_str())
                .bind(transition.unchanged_since.unwrap_or(i64::MAX))
                .execute(&self.pool)
                .await?
                .rows_affected()
                    == 1)
            }

            async fn in_state(&self, state: EffectState, limit: u32) -> Result<Vec<EffectRecord>, sqlx::Error> {
                let rows: Vec<RecordRow> = sqlx::query_as(
                    "SELECT effect_key, idempotency_key, state, result, CAST(attempts AS BIGINT), updated_at
                     FROM ackbox_effects WHERE state = $1 ORDER BY updated_at LIMIT $2",
                )
                .bind(state.as_str())
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                Ok(rows.into_iter().map(record_from).collect())
            }

            async fn census(&self) -> Result<(Vec<(EffectState, u64)>, Option<i64>), sqlx::Error> {
                let rows: Vec<(String, i64)> =
                    sqlx::query_as("SELECT state, COUNT(*) FROM ackbox_effects GROUP BY state")
                        .fetch_all(&self.pool)
                        .await?;
                let oldest: Option<i64> = sqlx::query_scalar(
                    "SELECT MIN(updated_at) FROM ackbox_effects WHERE state = 'UNKNOWN'",
                )
                .fetch_one(&self.pool)
                .await?;
                Ok((
                    rows.into_iter()
                        .map(|(state, count)| (EffectState::parse(&state), count.unsigned_abs()))
                        .collect(),
                    oldest,
                ))
            }
        }

        #[async_trait]
        impl crate::projection::VersionStore for $store {
            type Database = $database;

            async fn current_version(
                &self,
                transaction: &mut sqlx::Transaction<'static, $database>,
                projection: &str,
                aggregate_id: &str,
            ) -> Result<Option<i64>, sqlx::Error> {
                // A lock needs a row: without one, two first events of an
                // aggregate would both find nothing and both be applied. A
                // concurrent insert of the same row waits (PostgreSQL) for
                // this transaction to end and then finds the row; on SQLite
                // the insert takes the write lock, so the read below sees the
                // newest commit even in a transaction begun as a reader.
                sqlx::query(
                    "INSERT INTO ackbox_projection_versions (projection, aggregate_id, version)
                     VALUES ($1, $2, $3)
                     ON CONFLICT (projection, aggregate_id) DO NOTHING",
                )
                .bind(projection)
                .bind(aggregate_id)
                .bind(NO_VERSION)
                .execute(&mut **transaction)
                .await?;
                let version: i64 = sqlx::query_scalar(concat!(
                    "SELECT version FROM ackbox_projection_versions
                     WHERE projection = $1 AND aggregate_id = $2",
                    $lock
                ))
                .bind(projection)
                .bind(aggregate_id)
                .fetch_one(&mut **transaction)
                .await?;
                Ok((version > NO_VERSION).then_some(version))
            }

            async fn set_version(
                &self,
                transaction: &mut sqlx::Transaction<'static, $database>,
                projection: &str,
                aggregate_id: &str,
                version: i64,
            ) -> Result<(), sqlx::Error> {
                // Guarded even though the row is locked: a caller that never
                // took the lock must still not move a version backwards.
                sqlx::query(
                    "INSERT INTO ackbox_projection_versions (projection, aggregate_id, version)
                     VALUES ($1, $2, $3)
                     ON CONFLICT (projection, aggregate_id) DO UPDATE SET version = excluded.version
                     WHERE ackbox_projection_versions.version < excluded.version",
                )
                .bind(projection)
                .bind(aggregate_id)
                .bind(version)
                .execute(&mut **transaction)
                .await
                .map(drop)
            }
        }
    };
}

mod postgres_store {
    use super::*;
    /// Creates the tables unless they are there (see `schema.rs`).
    async fn migrate(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
        crate::schema::ensure_postgres(
            pool,
            "ackbox_projection_versions",
            &[include_str!("../../migrations/postgres/0003_effects.sql")],
        )
        .await
    }

    sql_effect_store!(
        PgEffectStore,
        sqlx::Postgres,
        sqlx::PgPool,
        "PostgreSQL",
        " FOR UPDATE"
    );
}

mod sqlite_store {
    use super::*;
    async fn migrate(pool: &sqlx::SqlitePool) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(include_str!("../../migrations/sqlite/0003_effects.sql"))
            .execute(pool)
            .await
            .map(drop)
    }

    sql_effect_store!(
        SqliteEffectStore,
        sqlx::Sqlite,
        sqlx::SqlitePool,
        "SQLite",
        ""
    );
}

pub use postgres_store::PgEffectStore;
pub use sqlite_store::SqliteEffectStore;
