//! GetQueueAttributes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// GetQueueAttributes request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// Which attributes; `All` for every one. None requested, none returned.
    #[serde(default)]
    pub attribute_names: Vec<String>,
}

/// GetQueueAttributes response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The attributes by name.
    pub attributes: BTreeMap<String, String>,
}

/// Runs GetQueueAttributes.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let attributes = context
        .engine
        .get_queue_attributes(&name, &request.attribute_names)
        .await?;
    Ok(Response { attributes })
}
