//! ListSubscriptions (SNS): every topic's subscriptions, 100 a page.

use ackbox_engine::topic::{LIST_PAGE_SIZE, SubscriptionSummary};
use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::list_topics::page;
use crate::error::ApiError;

/// ListSubscriptions request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// Where the previous page ended.
    #[serde(default)]
    pub next_token: Option<String>,
}

/// One subscription of a listing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SubscriptionEntry {
    /// Its ARN.
    pub subscription_arn: String,
    /// The account that owns it.
    pub owner: String,
    /// `sqs`, …
    pub protocol: String,
    /// Where it delivers.
    pub endpoint: String,
    /// Its topic.
    pub topic_arn: String,
}

impl From<SubscriptionSummary> for SubscriptionEntry {
    fn from(summary: SubscriptionSummary) -> Self {
        Self {
            subscription_arn: summary.subscription_arn,
            owner: summary.owner,
            protocol: summary.protocol,
            endpoint: summary.endpoint,
            topic_arn: summary.topic_arn,
        }
    }
}

/// ListSubscriptions (and ListSubscriptionsByTopic) response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// This page's subscriptions.
    pub subscriptions: Vec<SubscriptionEntry>,
    /// Where the next page starts, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

impl Response {
    /// The page of `subscriptions` from `next_token` the caller may see.
    pub fn page(
        context: &RequestContext,
        subscriptions: Vec<SubscriptionSummary>,
        next_token: Option<&str>,
    ) -> Result<Self, ApiError> {
        let visible: Vec<SubscriptionSummary> = subscriptions
            .into_iter()
            .filter(|summary| context.may_use_topic(&summary.topic_arn))
            .collect();
        let (page, next_token) = page(visible, next_token, LIST_PAGE_SIZE)?;
        Ok(Self {
            subscriptions: page.into_iter().map(SubscriptionEntry::from).collect(),
            next_token,
        })
    }
}

/// Runs ListSubscriptions.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let subscriptions = context.engine.list_subscriptions(None).await?;
    Response::page(context, subscriptions, request.next_token.as_deref())
}
