//! PostgreSQL's failures as the store reports them: an unreachable
//! server apart, so that a caller can retry elsewhere or later.

use crate::store::StoreError;

pub(crate) fn postgres_error(operation: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| match source {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            tracing::warn!(operation, error = %source, "PostgreSQL is unreachable");
            StoreError::Unavailable {
                reason: "PostgreSQL is unreachable",
            }
        }
        source => StoreError::Postgres { operation, source },
    }
}
