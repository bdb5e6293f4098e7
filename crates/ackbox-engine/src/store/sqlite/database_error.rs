//! SQLite's failures as the store reports them: a full disk apart, so
//! that it can be answered as a condition that passes.

use crate::store::StoreError;

pub(crate) fn database_error(
    operation: &'static str,
) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| {
        if is_disk_full(&source) {
            StoreError::DiskFull {
                detail: format!("{operation}: {source}"),
            }
        } else {
            StoreError::Database { operation, source }
        }
    }
}

/// Whether SQLite failed for want of space (`SQLITE_FULL`).
pub(crate) fn is_disk_full(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}
