//! PurgeQueue: at most once per 60 seconds per queue.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// PurgeQueue request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
}

/// PurgeQueue response (empty).
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs PurgeQueue.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let purge = context.engine.purge_queue(&name).await?;
    tracing::info!(queue = %name, deleted = purge.deleted, rest_swept = purge.rest_swept, "queue purged");
    Ok(Response {})
}
