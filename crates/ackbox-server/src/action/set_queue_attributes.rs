//! SetQueueAttributes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// SetQueueAttributes request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// The attributes to change.
    pub attributes: BTreeMap<String, String>,
}

/// SetQueueAttributes response (empty).
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs SetQueueAttributes.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    context
        .engine
        .set_queue_attributes(&name, &request.attributes)
        .await?;
    Ok(Response {})
}
