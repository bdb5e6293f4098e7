//! TagQueue.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// TagQueue request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// Tags to add or overwrite.
    pub tags: BTreeMap<String, String>,
}

/// TagQueue response (empty).
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs TagQueue.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    context.engine.tag_queue(&name, &request.tags).await?;
    Ok(Response {})
}
