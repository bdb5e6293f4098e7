//! Subscribe (SNS): an ackbox queue (`sqs`) or an HTTP endpoint (`http`,
//! `https`) to a topic.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// Subscribe request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub topic_arn: String,
    /// `sqs`, `http` or `https`.
    pub protocol: String,
    /// The queue's ARN, or the URL.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `RawMessageDelivery`, …
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// Answer with the ARN even while the subscription awaits its
    /// endpoint's confirmation (else `pending confirmation`, as SNS says).
    #[serde(default)]
    pub return_subscription_arn: Option<bool>,
}

/// Subscribe response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The subscription's ARN, or `pending confirmation`.
    pub subscription_arn: String,
}

/// What SNS answers for a subscription its endpoint has yet to confirm.
const PENDING_CONFIRMATION: &str = "pending confirmation";

/// Runs Subscribe.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let subscribed = context
        .engine
        .subscribe(
            &request.topic_arn,
            &request.protocol,
            request.endpoint.as_deref(),
            &request.attributes,
            &context.base_url,
        )
        .await?;
    let subscription_arn =
        if subscribed.pending_confirmation && request.return_subscription_arn != Some(true) {
            PENDING_CONFIRMATION.to_owned()
        } else {
            subscribed.subscription_arn
        };
    Ok(Response { subscription_arn })
}
