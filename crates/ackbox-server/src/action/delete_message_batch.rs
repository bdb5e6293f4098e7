//! DeleteMessageBatch.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::batch::{ErrorEntry, ResultEntry, split_outcomes, validate_entries};
use crate::error::ApiError;

/// DeleteMessageBatch request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// The messages to delete; absent means empty (EmptyBatchRequest).
    #[serde(default)]
    pub entries: Vec<RequestEntry>,
}

/// One delete of the batch.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RequestEntry {
    /// Entry id, unique in the batch.
    pub id: String,
    /// The handle from ReceiveMessage.
    pub receipt_handle: String,
}

/// DeleteMessageBatch response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// Deleted entries.
    pub successful: Vec<ResultEntry>,
    /// Refused entries.
    pub failed: Vec<ErrorEntry>,
}

/// Runs DeleteMessageBatch.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    validate_entries(
        "DeleteMessageBatchRequestEntry",
        request.entries.iter().map(|entry| entry.id.as_str()),
    )?;
    let name = context.queue_name(&request.queue_url)?;
    let handles: Vec<&str> = request
        .entries
        .iter()
        .map(|entry| entry.receipt_handle.as_str())
        .collect();
    let results = context.engine.delete_message_batch(&name, &handles).await?;
    let (successful, failed) =
        split_outcomes(request.entries.into_iter().map(|entry| entry.id), results);
    Ok(Response { successful, failed })
}
