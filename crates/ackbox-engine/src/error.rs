//! The engine's error: either the client's fault (an [`SqsError`]) or the store's.

use ackbox_core::error::SqsError;

use crate::store::StoreError;

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The request was refused with an SQS error code.
    #[error(transparent)]
    Sqs(#[from] SqsError),
    /// The store failed; the request was not applied.
    #[error("store failure")]
    Store(#[source] StoreError),
}

impl From<StoreError> for EngineError {
    fn from(error: StoreError) -> Self {
        match error {
            // The queue vanished between lookup and write: to the client that
            // is the same as having named a queue that does not exist.
            StoreError::QueueNotFound { .. } => Self::Sqs(SqsError::queue_does_not_exist()),
            other => Self::Store(other),
        }
    }
}
