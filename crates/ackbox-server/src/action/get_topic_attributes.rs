//! GetTopicAttributes (SNS).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// GetTopicAttributes request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub topic_arn: String,
}

/// GetTopicAttributes response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// Every attribute, set or default.
    pub attributes: BTreeMap<String, String>,
}

/// Runs GetTopicAttributes.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let attributes = context.engine.topic_attributes(&request.topic_arn).await?;
    Ok(Response { attributes })
}
