//! GetSubscriptionAttributes (SNS).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// GetSubscriptionAttributes request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The subscription.
    pub subscription_arn: String,
}

/// GetSubscriptionAttributes response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// Every attribute, set or default.
    pub attributes: BTreeMap<String, String>,
}

/// Runs GetSubscriptionAttributes.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let attributes = context
        .engine
        .subscription_attributes(&request.subscription_arn)
        .await?;
    Ok(Response { attributes })
}
