//! TagResource (SNS): tags on a topic.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// One tag, as SNS carries tags: a list of key–value pairs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Tag {
    /// The key.
    pub key: String,
    /// The value.
    #[serde(default)]
    pub value: String,
}

impl Tag {
    /// The tags as a map (a key given twice keeps its last value).
    pub fn into_map(tags: Vec<Tag>) -> BTreeMap<String, String> {
        tags.into_iter().map(|tag| (tag.key, tag.value)).collect()
    }
}

/// TagResource request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub resource_arn: String,
    /// The tags to add or overwrite.
    #[serde(default)]
    pub tags: Vec<Tag>,
}

/// TagResource response: nothing but the request id.
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs TagResource.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    context
        .engine
        .tag_topic(&request.resource_arn, &Tag::into_map(request.tags))
        .await?;
    Ok(Response {})
}
