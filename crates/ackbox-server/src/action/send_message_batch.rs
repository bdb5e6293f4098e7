//! SendMessageBatch: up to 10 messages in one durable commit.

use std::collections::BTreeMap;

use ackbox_core::message::{MessageAttributeValue, MessageAttributes};
use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::batch::{ErrorEntry, validate_entries};
use super::send_message::entry;
use crate::error::ApiError;

/// SendMessageBatch request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// The messages; absent means empty (EmptyBatchRequest).
    #[serde(default)]
    pub entries: Vec<RequestEntry>,
}

/// One message of the batch.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RequestEntry {
    /// Entry id, unique in the batch.
    pub id: String,
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

/// One stored message of the batch.
#[derive(Debug, Serialize)]
pub struct ResultEntry {
    /// Entry id from the request.
    #[serde(rename = "Id")]
    pub id: String,
    /// The send result.
    #[serde(flatten)]
    pub sent: super::send_message::Response,
}

/// SendMessageBatch response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// Stored entries.
    pub successful: Vec<ResultEntry>,
    /// Refused entries.
    pub failed: Vec<ErrorEntry>,
}

/// Runs SendMessageBatch.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    validate_entries(
        "SendMessageBatchRequestEntry",
        request.entries.iter().map(|entry| entry.id.as_str()),
    )?;
    let name = context.queue_name(&request.queue_url)?;
    // Failures are reported in request order, whether the wire decoding or
    // the engine refused the entry.
    let mut positions = Vec::with_capacity(request.entries.len());
    let mut entries = Vec::with_capacity(request.entries.len());
    let mut failed = Vec::new();
    for (position, wire) in request.entries.into_iter().enumerate() {
        match entry(
            wire.message_body,
            wire.delay_seconds,
            wire.message_attributes,
            wire.message_system_attributes,
            wire.message_group_id,
            wire.message_deduplication_id,
        ) {
            Ok(entry) => {
                positions.push((position, wire.id));
                entries.push(entry);
            }
            Err(error) => failed.push((position, ErrorEntry::new(wire.id, &error))),
        }
    }
    let results = context
        .engine
        .send_message_batch(&name, entries, &context.sender_id)
        .await?;
    let mut successful = Vec::with_capacity(results.len());
    for ((position, id), result) in positions.into_iter().zip(results) {
        match result {
            Ok(sent) => successful.push(ResultEntry {
                id,
                sent: sent.into(),
            }),
            Err(error) => failed.push((position, ErrorEntry::new(id, &error))),
        }
    }
    failed.sort_by_key(|(position, _)| *position);
    let failed = failed.into_iter().map(|(_, entry)| entry).collect();
    Ok(Response { successful, failed })
}
