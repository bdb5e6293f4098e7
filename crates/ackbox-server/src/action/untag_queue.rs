//! UntagQueue.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// UntagQueue request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// Tag keys to remove.
    pub tag_keys: Vec<String>,
}

/// UntagQueue response (empty).
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs UntagQueue.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    context.engine.untag_queue(&name, &request.tag_keys).await?;
    Ok(Response {})
}
