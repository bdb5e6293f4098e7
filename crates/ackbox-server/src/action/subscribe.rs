//! Subscribe (SNS): an ackbox queue (`sqs`) to a topic.

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
    /// `sqs`.
    pub protocol: String,
    /// The queue's ARN.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `RawMessageDelivery`, …
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// Always honoured: an ackbox subscription is confirmed at once.
    #[serde(default)]
    pub return_subscription_arn: Option<bool>,
}

/// Subscribe response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The subscription's ARN.
    pub subscription_arn: String,
}

/// Runs Subscribe.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let subscription_arn = context
        .engine
        .subscribe(
            &request.topic_arn,
            &request.protocol,
            request.endpoint.as_deref(),
            &request.attributes,
        )
        .await?;
    Ok(Response { subscription_arn })
}
