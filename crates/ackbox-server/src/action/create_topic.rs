//! CreateTopic (SNS): idempotent with identical attributes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::tag_resource::Tag;
use crate::error::ApiError;

/// CreateTopic request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic's name.
    pub name: String,
    /// Initial attributes.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// Initial tags.
    #[serde(default)]
    pub tags: Vec<Tag>,
}

/// CreateTopic response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The topic's ARN.
    pub topic_arn: String,
}

/// Runs CreateTopic.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let tags = Tag::into_map(request.tags);
    let topic_arn = context
        .engine
        .create_topic(&request.name, &request.attributes, &tags)
        .await?;
    Ok(Response { topic_arn })
}
