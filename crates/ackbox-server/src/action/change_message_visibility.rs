//! ChangeMessageVisibility: extend, shorten or end a lease.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ChangeMessageVisibility request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// The handle from ReceiveMessage.
    pub receipt_handle: String,
    /// New lease length from now, seconds (0 makes the message visible).
    pub visibility_timeout: i32,
}

/// ChangeMessageVisibility response (empty).
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs ChangeMessageVisibility.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    context
        .engine
        .change_message_visibility(&name, &request.receipt_handle, request.visibility_timeout)
        .await?;
    Ok(Response {})
}
