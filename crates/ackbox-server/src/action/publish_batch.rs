//! PublishBatch (SNS): up to 10 messages, every valid one stored for every
//! subscribed queue in one transaction.

use ackbox_core::message::MessageAttributes;
use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::batch::{ErrorEntry, validate_entries};
use super::publish::entry;
use crate::error::ApiError;

/// PublishBatch request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub topic_arn: String,
    /// The messages; absent means empty (EmptyBatchRequest).
    #[serde(default)]
    pub publish_batch_request_entries: Vec<RequestEntry>,
}

/// One message of the batch.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RequestEntry {
    /// Entry id, unique in the batch.
    pub id: String,
    /// The message.
    pub message: String,
    /// The subject.
    #[serde(default)]
    pub subject: Option<String>,
    /// `json` when `message` holds one text per protocol.
    #[serde(default)]
    pub message_structure: Option<String>,
    /// Message attributes.
    #[serde(default)]
    pub message_attributes: MessageAttributes,
    /// The message group (a tenant of a fair queue).
    #[serde(default)]
    pub message_group_id: Option<String>,
    /// FIFO topics only.
    #[serde(default)]
    pub message_deduplication_id: Option<String>,
}

/// One published entry.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResultEntry {
    /// Entry id from the request.
    pub id: String,
    /// The notification's id.
    pub message_id: String,
    /// FIFO topics: the message's sequence number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<String>,
}

/// PublishBatch response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// Published entries.
    pub successful: Vec<ResultEntry>,
    /// Refused entries.
    pub failed: Vec<ErrorEntry>,
}

/// Runs PublishBatch.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    validate_entries(
        "PublishBatchRequestEntry",
        request
            .publish_batch_request_entries
            .iter()
            .map(|entry| entry.id.as_str()),
    )?;
    let (ids, entries): (Vec<_>, Vec<_>) = request
        .publish_batch_request_entries
        .into_iter()
        .map(|request_entry| {
            let published = entry(
                request_entry.message,
                request_entry.subject,
                request_entry.message_structure,
                request_entry.message_attributes,
                request_entry.message_group_id,
                request_entry.message_deduplication_id,
            );
            (request_entry.id, published)
        })
        .unzip();
    let outcomes = context
        .engine
        .publish(
            &request.topic_arn,
            entries,
            &context.sender_id,
            &context.base_url,
        )
        .await?;
    let mut successful = Vec::new();
    let mut failed = Vec::new();
    for (id, outcome) in ids.into_iter().zip(outcomes) {
        match outcome {
            Ok(published) => successful.push(ResultEntry {
                id,
                message_id: published.message_id,
                sequence_number: published.sequence_number,
            }),
            Err(error) => failed.push(ErrorEntry::new(id, &error)),
        }
    }
    Ok(Response { successful, failed })
}
