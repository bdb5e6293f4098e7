//! GetQueueUrl.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// GetQueueUrl request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue name.
    pub queue_name: String,
    /// The owner account; only this server's account holds queues here.
    #[serde(default, rename = "QueueOwnerAWSAccountId")]
    pub queue_owner_aws_account_id: Option<String>,
}

/// GetQueueUrl response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The queue's URL.
    pub queue_url: String,
}

/// Runs GetQueueUrl.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    if request
        .queue_owner_aws_account_id
        .as_deref()
        .is_some_and(|account| account != context.engine.realm().account_id)
    {
        return Err(ackbox_core::error::SqsError::queue_does_not_exist().into());
    }
    let name = context.engine.get_queue(&request.queue_name).await?;
    Ok(Response {
        queue_url: context.queue_url(&name),
    })
}
