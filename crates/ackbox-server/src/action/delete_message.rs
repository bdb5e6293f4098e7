//! DeleteMessage.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// DeleteMessage request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// The handle from ReceiveMessage.
    pub receipt_handle: String,
}

/// DeleteMessage response (empty).
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs DeleteMessage.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    context
        .engine
        .delete_message(&name, &request.receipt_handle)
        .await?;
    Ok(Response {})
}
