//! UntagResource (SNS): tags off a topic.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// UntagResource request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub resource_arn: String,
    /// The keys to remove.
    #[serde(default)]
    pub tag_keys: Vec<String>,
}

/// UntagResource response: nothing but the request id.
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs UntagResource.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    context
        .engine
        .untag_topic(&request.resource_arn, &request.tag_keys)
        .await?;
    Ok(Response {})
}
