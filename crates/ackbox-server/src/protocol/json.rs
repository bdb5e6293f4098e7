//! The AWS JSON 1.0 protocol: `POST /` with `X-Amz-Target: AmazonSQS.<Action>`
//! and a JSON body.
//!
//! Parsing failures become SQS errors that name the offending field: a missing
//! member is `MissingParameter`, a member of the wrong type is
//! `InvalidParameterValue`, and a body that is not JSON at all is a
//! `SerializationException`.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use ackbox_core::error::{ErrorCode, SqsError};

use crate::error::{ApiError, QUERY_ERROR_HEADER};
use crate::protocol::{Protocol, error_fault, error_status};

/// The content type of JSON 1.0 requests and responses.
pub const CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// The header naming the action.
pub const TARGET_HEADER: &str = "x-amz-target";

/// Whether a request speaks JSON 1.0 (by content type or target header).
pub fn is_json_request(headers: &HeaderMap) -> bool {
    let content_type_is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim().starts_with("application/x-amz-json"));
    content_type_is_json || headers.contains_key(TARGET_HEADER)
}

/// The `X-Amz-Target` value, which names the action with its namespace.
pub fn target(headers: &HeaderMap) -> Result<&str, SqsError> {
    headers
        .get(TARGET_HEADER)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| {
            SqsError::new(
                ErrorCode::UnknownOperation,
                "The request must carry an X-Amz-Target header naming the action.",
            )
        })
}

/// Decodes a request body, naming the field at fault.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    // Tracking the path costs an allocation per member name, so a body is
    // decoded plainly first. Only a body that fails is decoded again, with
    // the path, to name the field at fault.
    if let Ok(decoded) = serde_json::from_slice(body) {
        return Ok(decoded);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let decoded = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_data() {
            ApiError::Sqs(super::field_error(&path, &inner.to_string()))
        } else {
            not_json(&inner)
        }
    })?;
    // A value followed by more than whitespace is not one JSON document.
    deserializer.end().map_err(|error| not_json(&error))?;
    Ok(decoded)
}

fn not_json(error: &serde_json::Error) -> ApiError {
    ApiError::Sqs(SqsError::new(
        ErrorCode::SerializationException,
        format!("The request body is not valid JSON: {error}."),
    ))
}

/// Encodes a successful response.
pub fn respond<T: Serialize>(response: &T) -> Response {
    match serde_json::to_vec(response) {
        Ok(body) => {
            let mut response = (StatusCode::OK, body).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            response
        }
        Err(error) => {
            tracing::error!(%error, "response serialization failed");
            ApiError::Sqs(SqsError::internal()).into_response()
        }
    }
}

/// JSON 1.0, whose errors carry their request id in a header only.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.render(Protocol::Json, "")
    }
}

/// An SQS error as JSON 1.0 answers it: the status, `x-amzn-query-error:
/// <QueryCode>;<Sender|Receiver>` and `{"__type": "<namespace>#<Shape>",
/// "message": …}`.
pub fn render_error(error: &SqsError) -> Response {
    let code = error.code;
    let body = serde_json::json!({
        "__type": format!("{}#{}", code.shape_namespace(), code.shape_name()),
        "message": error.message,
    });
    let fault = error_fault(code);
    let mut response = (error_status(code), body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    if let Ok(value) = HeaderValue::from_str(&format!("{};{fault}", code.query_code())) {
        headers.insert(QUERY_ERROR_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    #[allow(dead_code)]
    struct Probe {
        queue_url: String,
        max_number_of_messages: Option<i32>,
    }

    fn sqs(error: ApiError) -> SqsError {
        error.client_error()
    }

    #[test]
    fn missing_member_is_missing_parameter() {
        let error = sqs(parse::<Probe>(b"{}").unwrap_err());
        assert_eq!(error.code, ErrorCode::MissingParameter);
        assert_eq!(
            error.message,
            "The request must contain the parameter QueueUrl."
        );
    }

    #[test]
    fn wrong_type_names_the_field() {
        let error =
            sqs(parse::<Probe>(br#"{"QueueUrl":"q","MaxNumberOfMessages":"ten"}"#).unwrap_err());
        assert_eq!(error.code, ErrorCode::InvalidParameterValue);
        assert!(
            error.message.contains("MaxNumberOfMessages"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_reason_ending_in_a_period_gets_one_period() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Binary {
            #[serde(rename = "BinaryValue")]
            value: Base64,
        }
        #[derive(Debug)]
        struct Base64;
        impl<'de> serde::Deserialize<'de> for Base64 {
            fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
                Err(serde::de::Error::custom("Invalid padding."))
            }
        }
        let error = sqs(parse::<Binary>(br#"{"BinaryValue":"x"}"#).unwrap_err());
        assert_eq!(
            error.message,
            "Value for parameter BinaryValue is invalid. Reason: Invalid padding."
        );
    }

    #[test]
    fn broken_json_is_a_serialization_error() {
        let error = sqs(parse::<Probe>(b"{\"QueueUrl\":").unwrap_err());
        assert_eq!(error.code, ErrorCode::SerializationException);
    }

    #[test]
    fn bytes_after_the_value_are_a_serialization_error() {
        let error = sqs(parse::<Probe>(b"{\"QueueUrl\":\"q\"} {}").unwrap_err());
        assert_eq!(error.code, ErrorCode::SerializationException);
        assert!(
            error.message.contains("trailing characters"),
            "{}",
            error.message
        );
        let padded = parse::<Probe>(b"{\"QueueUrl\":\"q\"}\r\n").expect("whitespace after");
        assert_eq!(padded.queue_url, "q");
    }
}
