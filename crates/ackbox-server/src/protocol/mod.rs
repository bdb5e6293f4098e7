//! Wire protocols. A request is routed on its `Content-Type` and
//! `X-Amz-Target`: AWS JSON 1.0, or the query protocol every other request
//! speaks. Both decode into the same action request types and answer with
//! the same engine, so the two cannot disagree on what a request means.

use ackbox_core::error::{ErrorCode, SqsError};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::operation::{Action, Service};

pub mod json;
pub mod query;

/// The protocol a request speaks; its response and errors answer in kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0.
    Json,
    /// The AWS query protocol (form-encoded, XML responses), in the XML
    /// namespace and error codes of the service the action belongs to
    /// (SQS's until the action is known).
    Query(Service),
}

impl Protocol {
    /// JSON 1.0 by content type or target header; any other request is a
    /// query-protocol one, as AWS treats it.
    pub fn of(headers: &HeaderMap) -> Self {
        if json::is_json_request(headers) {
            Self::Json
        } else {
            Self::Query(Service::Sqs)
        }
    }

    /// The protocol answering an action of `service`.
    pub fn for_service(self, service: Service) -> Self {
        match self {
            Self::Json => Self::Json,
            Self::Query(_) => Self::Query(service),
        }
    }

    /// Encodes `action`'s successful response.
    pub fn encode<T: Serialize>(self, action: Action, response: &T, request_id: &str) -> Response {
        match self {
            Self::Json => json::respond(response),
            Self::Query(_) => query::respond(action, response, request_id),
        }
    }

    /// The error response a client of this protocol parses.
    pub fn render_error(self, error: &SqsError, request_id: &str) -> Response {
        match self {
            Self::Json => json::render_error(error),
            Self::Query(service) => query::render_error(service, error, request_id),
        }
    }
}

impl ApiError {
    /// Logs the failure and answers it in `protocol`'s error shape.
    pub fn render(self, protocol: Protocol, request_id: &str) -> Response {
        self.log();
        protocol.render_error(&self.client_error(), request_id)
    }
}

/// A request's parameters, as its protocol carries them.
#[derive(Debug, Clone)]
pub enum Parameters {
    /// A JSON 1.0 body.
    Json(Bytes),
    /// A query-protocol form.
    Query(query::Form),
}

impl Parameters {
    /// The protocol the parameters came in.
    pub fn protocol(&self) -> Protocol {
        match self {
            Self::Json(_) => Protocol::Json,
            Self::Query(_) => Protocol::Query(Service::Sqs),
        }
    }

    /// Decodes the parameters as `action`'s request, naming the field at fault.
    pub fn decode<T: DeserializeOwned>(self, action: Action) -> Result<T, ApiError> {
        match self {
            Self::Json(body) => json::parse(&body),
            Self::Query(form) => form.decode(action),
        }
    }
}

/// The HTTP status of an error, in either protocol.
pub(crate) fn error_status(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::BAD_REQUEST)
}

/// Whose fault an error is, as both protocols name it (`x-amzn-query-error`
/// in JSON, `<Type>` in XML).
pub(crate) fn error_fault(code: ErrorCode) -> &'static str {
    if code.is_sender_fault() {
        "Sender"
    } else {
        "Receiver"
    }
}

/// The error for a parameter that failed to decode into its field at
/// `path`: a missing member is `MissingParameter`, anything else
/// `InvalidParameterValue`, both naming the field.
pub(crate) fn field_error(path: &str, message: &str) -> SqsError {
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        return SqsError::missing_parameter(field);
    }
    let reason = message.split(" at line").next().unwrap_or(message);
    SqsError::invalid_value(format!(
        "Value for parameter {path} is invalid. Reason: {}.",
        reason.trim_end_matches('.')
    ))
}
