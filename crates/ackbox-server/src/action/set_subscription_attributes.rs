//! SetSubscriptionAttributes (SNS): one attribute.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// SetSubscriptionAttributes request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The subscription.
    pub subscription_arn: String,
    /// The attribute.
    pub attribute_name: String,
    /// Its new value.
    #[serde(default)]
    pub attribute_value: String,
}

/// SetSubscriptionAttributes response: nothing but the request id.
#[derive(Debug, Serialize)]
pub struct Response {}

/// Runs SetSubscriptionAttributes.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    context
        .engine
        .set_subscription_attribute(
            &request.subscription_arn,
            &request.attribute_name,
            &request.attribute_value,
            context.principal(),
            &context.base_url,
        )
        .await?;
    Ok(Response {})
}
