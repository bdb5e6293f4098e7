//! ConfirmSubscription (SNS): a push endpoint returns the token of its
//! subscription's confirmation request. It needs no signature — the token
//! is the proof — so that a `GET` of the request's `SubscribeURL` works,
//! as it does on SNS.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ConfirmSubscription request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    pub topic_arn: String,
    /// The token of the confirmation request.
    pub token: String,
    /// SNS's flag that only signed requests may unsubscribe; ackbox always
    /// asks Unsubscribe for the caller's permission.
    #[serde(default)]
    pub authenticate_on_unsubscribe: Option<String>,
}

/// ConfirmSubscription response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The confirmed subscription's ARN.
    pub subscription_arn: String,
}

/// Runs ConfirmSubscription.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let subscription_arn = context
        .engine
        .confirm_subscription(&request.topic_arn, &request.token)
        .await?;
    Ok(Response { subscription_arn })
}
