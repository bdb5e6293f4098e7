//! SendMessage: answered only once the message is durable.

use std::collections::BTreeMap;

use ackbox_core::error::SqsError;
use ackbox_core::message::{MessageAttributeValue, MessageAttributes};
use ackbox_engine::send::{SendEntry, SentMessage, TRACE_HEADER_ATTRIBUTE};
use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// SendMessage request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// The body.
    pub message_body: Option<String>,
    /// Per-message delay, seconds.
    #[serde(default)]
    pub delay_seconds: Option<i32>,
    /// User message attributes.
    #[serde(default)]
    pub message_attributes: MessageAttributes,
    /// System attributes (only `AWSTraceHeader`).
    #[serde(default)]
    pub message_system_attributes: BTreeMap<String, MessageAttributeValue>,
    /// FIFO deduplication id.
    #[serde(default)]
    pub message_deduplication_id: Option<String>,
    /// Message group id.
    #[serde(default)]
    pub message_group_id: Option<String>,
}

/// SendMessage response.
#[derive(Debug, Serialize)]
pub struct Response {
    /// The new message's id.
    #[serde(rename = "MessageId")]
    pub message_id: String,
    /// MD5 of the body.
    #[serde(rename = "MD5OfMessageBody")]
    pub md5_of_message_body: String,
    /// MD5 of the message attributes, when any were sent.
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_attributes: Option<String>,
    /// MD5 of the system attributes, when any were sent.
    #[serde(
        rename = "MD5OfMessageSystemAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_system_attributes: Option<String>,
    /// FIFO queues: the message's sequence number.
    #[serde(rename = "SequenceNumber", skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<String>,
}

impl From<SentMessage> for Response {
    fn from(sent: SentMessage) -> Self {
        Self {
            message_id: sent.message_id,
            md5_of_message_body: sent.md5_of_body,
            md5_of_message_attributes: sent.md5_of_attributes,
            md5_of_message_system_attributes: sent.md5_of_system_attributes,
            sequence_number: sent.sequence_number,
        }
    }
}

/// The `AWSTraceHeader` value from a system attribute map; no other system
/// attribute may be sent.
pub fn trace_header(
    system: BTreeMap<String, MessageAttributeValue>,
) -> Result<Option<String>, SqsError> {
    let mut trace_header = None;
    for (name, value) in system {
        if name != TRACE_HEADER_ATTRIBUTE {
            return Err(SqsError::invalid_value(format!(
                "Message system attribute name '{name}' is invalid; only {TRACE_HEADER_ATTRIBUTE} can be sent."
            )));
        }
        if value.data_type != "String" {
            return Err(SqsError::invalid_value(format!(
                "Message system attribute '{name}' must have DataType String; got {:?}.",
                value.data_type
            )));
        }
        trace_header = value.string_value;
    }
    Ok(trace_header)
}

/// Builds the engine's entry from the wire fields shared by single and batch sends.
pub fn entry(
    body: Option<String>,
    delay_seconds: Option<i32>,
    attributes: MessageAttributes,
    system: BTreeMap<String, MessageAttributeValue>,
    group_id: Option<String>,
    deduplication_id: Option<String>,
) -> Result<SendEntry, SqsError> {
    Ok(SendEntry {
        body: body.ok_or_else(|| SqsError::missing_parameter("MessageBody"))?,
        delay_seconds,
        attributes,
        trace_header: trace_header(system)?,
        group_id,
        deduplication_id,
    })
}

/// Runs SendMessage.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let entry = entry(
        request.message_body,
        request.delay_seconds,
        request.message_attributes,
        request.message_system_attributes,
        request.message_group_id,
        request.message_deduplication_id,
    )?;
    let sent = context
        .engine
        .send_message(&name, entry, &context.sender_id)
        .await?;
    Ok(sent.into())
}
