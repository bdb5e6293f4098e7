//! Every client-visible failure becomes one SQS error response, here.
//!
//! [`ApiError`] wraps what went wrong and says which SQS error the client
//! sees ([`ApiError::client_error`]); each wire protocol encodes it in its
//! own shape (`protocol/`, which depends on this module, never the other
//! way round). Internal failures are logged with their cause and answered
//! with a generic `InternalError`, never with the cause itself.

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_engine::EngineError;
use ackbox_engine::store::StoreError;

/// Header carrying the request id on every response.
pub const REQUEST_ID_HEADER: &str = "x-amzn-RequestId";
/// Header carrying the query-protocol error code on JSON errors.
pub const QUERY_ERROR_HEADER: &str = "x-amzn-query-error";

/// A failed API call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// Refused with an SQS error code.
    #[error(transparent)]
    Sqs(#[from] SqsError),
    /// The store failed.
    #[error("store failure")]
    Store(#[source] StoreError),
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::Sqs(error) => Self::Sqs(error),
            EngineError::Store(error) => Self::Store(error),
            other => Self::Sqs(SqsError::new(ErrorCode::InternalError, other.to_string())),
        }
    }
}

impl ApiError {
    /// The SQS error the client sees.
    pub fn client_error(&self) -> SqsError {
        match self {
            Self::Sqs(error) => error.clone(),
            Self::Store(error) if error.is_retryable() => SqsError::new(
                ErrorCode::ServiceUnavailable,
                "The service is unavailable. Please retry the request.",
            ),
            Self::Store(_) => SqsError::internal(),
        }
    }

    /// Logs the failure as its kind deserves: an internal one as an error
    /// with its cause, a retryable store condition as a warning, a refusal
    /// of the request at debug level.
    pub fn log(&self) {
        match self {
            // A full disk or a store shutting down answers every request the
            // same way for a while: warned, not an error per request.
            Self::Store(source) if source.is_retryable() => {
                tracing::warn!(error = %source, "store unavailable; the client retries");
            }
            Self::Store(source) => {
                tracing::error!(error = %source, cause = ?std::error::Error::source(source), "store failure");
            }
            Self::Sqs(sqs) if !sqs.code.is_sender_fault() => {
                tracing::error!(code = %sqs.code, message = %sqs.message, "internal error");
            }
            Self::Sqs(sqs) => {
                tracing::debug!(code = %sqs.code, message = %sqs.message, "request refused");
            }
        }
    }
}
