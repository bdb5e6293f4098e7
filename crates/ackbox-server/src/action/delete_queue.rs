//! DeleteQueue.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// DeleteQueue request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
}

/// DeleteQueue response (empty).
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs DeleteQueue.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    context.engine.delete_queue(&name).await?;
    Ok(Response {})
}
