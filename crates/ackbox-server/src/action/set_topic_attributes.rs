//! SetTopicAttributes (SNS): one attribute.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// SetTopicAttributes request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub topic_arn: String,
    /// The attribute.
    pub attribute_name: String,
    /// Its new value.
    #[serde(default)]
    pub attribute_value: String,
}

/// SetTopicAttributes response: nothing but the request id.
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs SetTopicAttributes.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    context
        .engine
        .set_topic_attribute(
            &request.topic_arn,
            &request.attribute_name,
            &request.attribute_value,
        )
        .await?;
    Ok(Response {})
}
