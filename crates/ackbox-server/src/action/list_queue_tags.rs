//! ListQueueTags.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ListQueueTags request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
}

/// ListQueueTags response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The queue's tags.
    pub tags: BTreeMap<String, String>,
}

/// Runs ListQueueTags.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let tags = context.engine.list_queue_tags(&name).await?;
    Ok(Response { tags })
}
