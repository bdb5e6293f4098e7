//! Every client-visible failure becomes one SQS error response, here.
//!
//! [`ApiError`] wraps what went wrong; [`ApiError::render`] answers in the
//! request's protocol. The AWS JSON 1.0 error shape is status,
//! `x-amzn-RequestId`, `x-amzn-query-error: <QueryCode>;Sender` and
//! `{"__type": "<namespace>#<Shape>", "message": …}`; the query protocol's is
//! XML ([`crate::protocol::query`]).
//! Internal failures are logged with their cause and answered with a generic
//! `InternalError`, never with the cause itself.

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_engine::EngineError;
use ackbox_engine::store::StoreError;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::protocol::Protocol;
use crate::protocol::json::CONTENT_TYPE;

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

    /// The error response in `protocol`'s shape, logged as its kind deserves.
    pub fn render(self, protocol: Protocol, request_id: &str) -> Response {
        match &self {
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
        protocol.render_error(&self.client_error(), request_id)
    }
}

/// JSON 1.0, whose errors carry their request id in a header only.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.render(Protocol::Json, "")
    }
}

/// The JSON 1.0 rendering of an SQS error.
pub fn render_json_error(error: &SqsError) -> Response {
    let code = error.code;
    let status = crate::protocol::error_status(code);
    let body = serde_json::json!({
        "__type": format!("{}#{}", code.shape_namespace(), code.shape_name()),
        "message": error.message,
    });
    let fault = crate::protocol::error_fault(code);
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    if let Ok(value) = HeaderValue::from_str(&format!("{};{fault}", code.query_code())) {
        headers.insert(QUERY_ERROR_HEADER, value);
    }
    response
}
