//! Unsubscribe (SNS); a subscription already gone is not an error.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// Unsubscribe request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The subscription.
    pub subscription_arn: String,
}

/// Unsubscribe response: nothing but the request id.
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs Unsubscribe.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    context
        .engine
        .unsubscribe(&request.subscription_arn)
        .await?;
    Ok(Response {})
}
