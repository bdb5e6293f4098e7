//! ChangeMessageVisibilityBatch.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::batch::{ErrorEntry, ResultEntry, split_outcomes, validate_entries};
use crate::error::ApiError;

/// ChangeMessageVisibilityBatch request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// The changes; absent means empty (EmptyBatchRequest).
    #[serde(default)]
    pub entries: Vec<RequestEntry>,
}

/// One change of the batch.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RequestEntry {
    /// Entry id, unique in the batch.
    pub id: String,
    /// The handle from ReceiveMessage.
    pub receipt_handle: String,
    /// New lease length from now, seconds; 0 when absent.
    #[serde(default)]
    pub visibility_timeout: i32,
}

/// ChangeMessageVisibilityBatch response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// Changed entries.
    pub successful: Vec<ResultEntry>,
    /// Refused entries.
    pub failed: Vec<ErrorEntry>,
}

/// Runs ChangeMessageVisibilityBatch.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    validate_entries(
        "ChangeMessageVisibilityBatchRequestEntry",
        request.entries.iter().map(|entry| entry.id.as_str()),
    )?;
    let name = context.queue_name(&request.queue_url)?;
    let changes: Vec<(&str, i32)> = request
        .entries
        .iter()
        .map(|entry| (entry.receipt_handle.as_str(), entry.visibility_timeout))
        .collect();
    let results = context
        .engine
        .change_message_visibility_batch(&name, &changes)
        .await?;
    let (successful, failed) =
        split_outcomes(request.entries.into_iter().map(|entry| entry.id), results);
    Ok(Response { successful, failed })
}
