//! ListSubscriptionsByTopic (SNS): one topic's subscriptions, 100 a page.

use serde::Deserialize;

use super::RequestContext;
use super::list_subscriptions::Response;
use crate::error::ApiError;

/// ListSubscriptionsByTopic request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub topic_arn: String,
    /// Where the previous page ended.
    #[serde(default)]
    pub next_token: Option<String>,
}

/// Runs ListSubscriptionsByTopic.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let subscriptions = context
        .engine
        .list_subscriptions(Some(&request.topic_arn))
        .await?;
    Response::page(context, subscriptions, request.next_token.as_deref())
}
