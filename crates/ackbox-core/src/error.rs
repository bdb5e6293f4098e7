//! SQS error codes and the client-facing error type.
//!
//! Code strings are part of the wire contract: a client branches on them, so a
//! code is never renamed or reused. Each [`ErrorCode`] knows its JSON `__type`
//! short name, its query-protocol code and its HTTP status, so the protocol
//! layers map an error in exactly one place.

use std::fmt;

/// An SQS error code, as the JSON 1.0 protocol names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The queue named in the request does not exist.
    QueueDoesNotExist,
    /// CreateQueue named an existing queue with different attributes.
    QueueNameExists,
    /// A queue of this name was deleted less than 60 seconds ago.
    QueueDeletedRecently,
    /// A parameter has a value outside its allowed range or shape.
    InvalidParameterValue,
    /// A required parameter is absent.
    MissingParameter,
    /// The receipt handle is malformed, forged or belongs to another queue.
    ReceiptHandleIsInvalid,
    /// The message is not in flight.
    MessageNotInflight,
    /// Two batch entries share an `Id`.
    BatchEntryIdsNotDistinct,
    /// More than 10 batch entries.
    TooManyEntriesInBatchRequest,
    /// A batch request without entries.
    EmptyBatchRequest,
    /// A batch entry `Id` with forbidden characters or over 80 characters.
    InvalidBatchEntryId,
    /// A batch whose payload exceeds the 1 MiB limit.
    BatchRequestTooLong,
    /// PurgeQueue called again within 60 seconds.
    PurgeQueueInProgress,
    /// The operation is not supported in this state.
    UnsupportedOperation,
    /// A limit on the number of in-flight messages or similar was reached.
    OverLimit,
    /// An unknown or misplaced attribute name.
    InvalidAttributeName,
    /// An attribute value that cannot be used.
    InvalidAttributeValue,
    /// A message body with characters outside the allowed set.
    InvalidMessageContents,
    /// The `X-Amz-Target` names no known action.
    UnknownOperation,
    /// The request body is not valid JSON of the expected shape.
    SerializationException,
    /// A resource named by ARN or handle (move tasks) does not exist.
    ResourceNotFoundException,
    /// The server failed; details are in its log.
    InternalError,
    /// The server is overloaded or shutting down; retry later.
    ServiceUnavailable,
    /// A request without any signature, to a broker that requires one.
    MissingAuthenticationToken,
    /// The access key id of the signature is not known.
    InvalidClientTokenId,
    /// The signature does not verify, or its scope or time is wrong.
    SignatureDoesNotMatch,
    /// The signature is malformed or lacks a required part.
    IncompleteSignature,
    /// A presigned request used after its expiry.
    RequestExpired,
    /// The key may not perform this action on this queue.
    AccessDenied,
    /// The request body is larger than the server accepts.
    RequestEntityTooLarge,
    /// The client sent its request body too slowly.
    RequestTimeout,
    /// SNS: the topic or subscription named does not exist.
    NotFound,
    /// SNS: a parameter is missing, malformed or out of range.
    InvalidParameter,
}

impl ErrorCode {
    /// The short name used in the JSON protocol's `__type` field.
    pub fn shape_name(self) -> &'static str {
        match self {
            Self::QueueDoesNotExist => "QueueDoesNotExist",
            Self::QueueNameExists => "QueueNameExists",
            Self::QueueDeletedRecently => "QueueDeletedRecently",
            Self::InvalidParameterValue => "InvalidParameterValueException",
            Self::MissingParameter => "MissingRequiredParameterException",
            Self::ReceiptHandleIsInvalid => "ReceiptHandleIsInvalid",
            Self::MessageNotInflight => "MessageNotInflight",
            Self::BatchEntryIdsNotDistinct => "BatchEntryIdsNotDistinct",
            Self::TooManyEntriesInBatchRequest => "TooManyEntriesInBatchRequest",
            Self::EmptyBatchRequest => "EmptyBatchRequest",
            Self::InvalidBatchEntryId => "InvalidBatchEntryId",
            Self::BatchRequestTooLong => "BatchRequestTooLong",
            Self::PurgeQueueInProgress => "PurgeQueueInProgress",
            Self::UnsupportedOperation => "UnsupportedOperation",
            Self::OverLimit => "OverLimit",
            Self::InvalidAttributeName => "InvalidAttributeName",
            Self::InvalidAttributeValue => "InvalidAttributeValue",
            Self::InvalidMessageContents => "InvalidMessageContents",
            Self::UnknownOperation => "UnknownOperationException",
            Self::SerializationException => "SerializationException",
            Self::ResourceNotFoundException => "ResourceNotFoundException",
            Self::InternalError => "InternalError",
            Self::ServiceUnavailable => "ServiceUnavailable",
            Self::MissingAuthenticationToken => "MissingAuthenticationTokenException",
            Self::InvalidClientTokenId => "InvalidClientTokenId",
            Self::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            Self::IncompleteSignature => "IncompleteSignatureException",
            Self::RequestExpired => "RequestExpired",
            Self::AccessDenied => "AccessDeniedException",
            Self::RequestEntityTooLarge => "RequestEntityTooLargeException",
            Self::RequestTimeout => "RequestTimeoutException",
            Self::NotFound => "NotFoundException",
            Self::InvalidParameter => "InvalidParameterException",
        }
    }

    /// The namespace prefix of the JSON `__type`: SQS's own shapes live in
    /// `com.amazonaws.sqs`, protocol-level failures (parsing, authentication,
    /// transport limits) in the service framework's.
    pub fn shape_namespace(self) -> &'static str {
        match self {
            Self::UnknownOperation
            | Self::SerializationException
            | Self::MissingAuthenticationToken
            | Self::InvalidClientTokenId
            | Self::SignatureDoesNotMatch
            | Self::IncompleteSignature
            | Self::RequestExpired
            | Self::AccessDenied
            | Self::RequestEntityTooLarge
            | Self::RequestTimeout => "com.amazon.coral.service",
            _ => "com.amazonaws.sqs",
        }
    }

    /// The query-protocol code, also sent in the `x-amzn-query-error` header.
    pub fn query_code(self) -> &'static str {
        match self {
            Self::QueueDoesNotExist => "AWS.SimpleQueueService.NonExistentQueue",
            Self::QueueNameExists => "QueueAlreadyExists",
            Self::QueueDeletedRecently => "AWS.SimpleQueueService.QueueDeletedRecently",
            Self::InvalidParameterValue => "InvalidParameterValue",
            Self::MissingParameter => "MissingParameter",
            Self::ReceiptHandleIsInvalid => "ReceiptHandleIsInvalid",
            Self::MessageNotInflight => "AWS.SimpleQueueService.MessageNotInflight",
            Self::BatchEntryIdsNotDistinct => "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            Self::TooManyEntriesInBatchRequest => {
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
            }
            Self::EmptyBatchRequest => "AWS.SimpleQueueService.EmptyBatchRequest",
            Self::InvalidBatchEntryId => "AWS.SimpleQueueService.InvalidBatchEntryId",
            Self::BatchRequestTooLong => "AWS.SimpleQueueService.BatchRequestTooLong",
            Self::PurgeQueueInProgress => "AWS.SimpleQueueService.PurgeQueueInProgress",
            Self::UnsupportedOperation => "AWS.SimpleQueueService.UnsupportedOperation",
            Self::OverLimit => "OverLimit",
            Self::InvalidAttributeName => "InvalidAttributeName",
            Self::InvalidAttributeValue => "InvalidAttributeValue",
            Self::InvalidMessageContents => "InvalidMessageContents",
            Self::UnknownOperation => "InvalidAction",
            Self::SerializationException => "MalformedInput",
            Self::ResourceNotFoundException => "ResourceNotFoundException",
            Self::InternalError => "InternalError",
            Self::ServiceUnavailable => "ServiceUnavailable",
            Self::MissingAuthenticationToken => "MissingAuthenticationToken",
            Self::InvalidClientTokenId => "InvalidClientTokenId",
            Self::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            Self::IncompleteSignature => "IncompleteSignature",
            Self::RequestExpired => "RequestExpired",
            Self::AccessDenied => "AccessDenied",
            Self::RequestEntityTooLarge => "RequestEntityTooLarge",
            Self::RequestTimeout => "RequestTimeout",
            Self::NotFound => "NotFound",
            Self::InvalidParameter => "InvalidParameter",
        }
    }

    /// The HTTP status SQS answers with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::PurgeQueueInProgress
            | Self::OverLimit
            | Self::MissingAuthenticationToken
            | Self::InvalidClientTokenId
            | Self::SignatureDoesNotMatch
            | Self::AccessDenied => 403,
            Self::RequestTimeout => 408,
            Self::RequestEntityTooLarge => 413,
            Self::ResourceNotFoundException | Self::NotFound => 404,
            Self::InternalError => 500,
            Self::ServiceUnavailable => 503,
            _ => 400,
        }
    }

    /// Whether the fault lies with the caller (`Sender`) or the server (`Receiver`).
    pub fn is_sender_fault(self) -> bool {
        !matches!(self, Self::InternalError | Self::ServiceUnavailable)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.shape_name())
    }
}

/// An error a client sees: one SQS code and a message a person can act on.
///
/// The message texts follow AWS's own wording where AWS has one, and otherwise
/// name the field, the value and the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SqsError {
    /// The wire code.
    pub code: ErrorCode,
    /// The human-readable message.
    pub message: String,
}

impl SqsError {
    /// An error with an explicit code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `InvalidParameterValue` in AWS's "Value X for parameter Y is invalid. Reason: Z" form.
    pub fn invalid_parameter(parameter: &str, value: impl fmt::Display, reason: &str) -> Self {
        Self::new(
            ErrorCode::InvalidParameterValue,
            format!("Value {value} for parameter {parameter} is invalid. Reason: {reason}"),
        )
    }

    /// `InvalidParameterValue` with a free-form message.
    pub fn invalid_value(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidParameterValue, message)
    }

    /// `MissingParameter` for a required parameter.
    pub fn missing_parameter(parameter: &str) -> Self {
        Self::new(
            ErrorCode::MissingParameter,
            format!("The request must contain the parameter {parameter}."),
        )
    }

    /// SNS's `InvalidParameter`, naming the parameter and why (its value
    /// and the limit in `reason`).
    pub fn sns_invalid_parameter(parameter: &str, reason: impl fmt::Display) -> Self {
        Self::new(
            ErrorCode::InvalidParameter,
            format!("Invalid parameter: {parameter} Reason: {reason}"),
        )
    }

    /// SNS's `NotFound` for a topic or subscription (`what`) that does not exist.
    pub fn sns_not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} does not exist"))
    }

    /// `QueueDoesNotExist` with AWS's message.
    pub fn queue_does_not_exist() -> Self {
        Self::new(
            ErrorCode::QueueDoesNotExist,
            "The specified queue does not exist.",
        )
    }

    /// `ReceiptHandleIsInvalid` for a handle that does not decode or verify.
    pub fn receipt_handle_invalid(handle: &str) -> Self {
        Self::new(
            ErrorCode::ReceiptHandleIsInvalid,
            format!("The input receipt handle \"{handle}\" is not a valid receipt handle."),
        )
    }

    /// `InvalidAttributeValue` naming the attribute, the value and the rule.
    pub fn invalid_attribute_value(name: &str, value: &str, reason: &str) -> Self {
        Self::new(
            ErrorCode::InvalidAttributeValue,
            format!("Invalid value for the parameter {name}. Reason: {reason} Got: {value:?}."),
        )
    }

    /// `InternalError` with a generic text; the detail belongs in the log.
    pub fn internal() -> Self {
        Self::new(
            ErrorCode::InternalError,
            "We encountered an internal error. Please try again.",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renamed_codes_follow_the_query_protocol_table() {
        assert_eq!(
            ErrorCode::QueueDoesNotExist.query_code(),
            "AWS.SimpleQueueService.NonExistentQueue"
        );
        assert_eq!(
            ErrorCode::InvalidParameterValue.shape_name(),
            "InvalidParameterValueException"
        );
        assert_eq!(
            ErrorCode::QueueNameExists.query_code(),
            "QueueAlreadyExists"
        );
        assert_eq!(ErrorCode::PurgeQueueInProgress.http_status(), 403);
    }

    #[test]
    fn invalid_parameter_names_value_and_reason() {
        let error = SqsError::invalid_parameter(
            "WaitTimeSeconds",
            21,
            "Must be >= 0 and <= 20, if provided.",
        );
        assert_eq!(
            error.message,
            "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
        );
    }
}
