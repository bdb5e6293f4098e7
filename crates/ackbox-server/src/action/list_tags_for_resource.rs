//! ListTagsForResource (SNS): a topic's tags.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::tag_resource::Tag;
use crate::error::ApiError;

/// ListTagsForResource request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub resource_arn: String,
}

/// ListTagsForResource response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The topic's tags, by key.
    pub tags: Vec<Tag>,
}

/// Runs ListTagsForResource.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let tags = context.engine.topic_tags(&request.resource_arn).await?;
    Ok(Response {
        tags: tags
            .into_iter()
            .map(|(key, value)| Tag { key, value })
            .collect(),
    })
}
