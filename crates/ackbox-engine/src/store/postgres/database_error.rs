//! PostgreSQL's failures as the store reports them: a server that cannot
//! serve now (unreachable, shutting down, a standby) apart, so that a
//! caller can retry elsewhere or later.

use crate::store::StoreError;

pub(crate) fn postgres_error(operation: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| match unavailable(&source) {
        Some(reason) => {
            tracing::warn!(operation, error = %source, "{reason}");
            StoreError::Unavailable { reason }
        }
        None => StoreError::Postgres { operation, source },
    }
}

/// Why PostgreSQL cannot serve the operation now, when that is the failure:
/// whether it was applied is unknown only for a failed commit, and a retry
/// of a send may then store it twice, as at-least-once delivery allows.
fn unavailable(error: &sqlx::Error) -> Option<&'static str> {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            Some("PostgreSQL is unreachable")
        }
        sqlx::Error::Database(database) => match database.code().as_deref() {
            // Class 08: the connection failed.
            Some(code) if code.starts_with("08") => Some("the connection to PostgreSQL failed"),
            // Shut down, crashed, terminated by an administrator, or
            // starting up.
            Some("57P01" | "57P02" | "57P03") => Some("PostgreSQL is shutting down or starting"),
            // A standby: the primary failed over and this connection
            // has not moved yet.
            Some("25006") => Some("PostgreSQL is read-only here (a standby)"),
            Some("53300") => Some("PostgreSQL has no connection to spare"),
            _ => None,
        },
        _ => None,
    }
}
