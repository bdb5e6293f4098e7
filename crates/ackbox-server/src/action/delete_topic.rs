//! DeleteTopic (SNS): the topic and its subscriptions; a topic already
//! gone is not an error.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// DeleteTopic request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub topic_arn: String,
}

/// DeleteTopic response: nothing but the request id.
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs DeleteTopic.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    context.engine.delete_topic(&request.topic_arn).await?;
    Ok(Response {})
}
