//! CreateQueue: idempotent with identical attributes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// CreateQueue request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue name.
    pub queue_name: String,
    /// Initial attributes.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// Initial tags (lowercase `tags` on the wire, as SQS spells it).
    #[serde(default, rename = "tags")]
    pub tags: BTreeMap<String, String>,
}

/// CreateQueue response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The new queue's URL.
    pub queue_url: String,
}

/// Runs CreateQueue.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context
        .engine
        .create_queue(&request.queue_name, &request.attributes, &request.tags)
        .await?;
    Ok(Response {
        queue_url: context.queue_url(&name),
    })
}
