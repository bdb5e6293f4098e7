//! StartMessageMoveTask: redrive a dead-letter queue.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// StartMessageMoveTask request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// ARN of the dead-letter queue to move messages out of.
    pub source_arn: String,
    /// ARN of the destination; absent: each message's original source queue.
    #[serde(default)]
    pub destination_arn: Option<String>,
    /// Messages per second, 1..=500; absent: 500.
    #[serde(default)]
    pub max_number_of_messages_per_second: Option<i32>,
}

/// StartMessageMoveTask response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The task's handle, for CancelMessageMoveTask.
    pub task_handle: String,
}

/// Runs StartMessageMoveTask.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let task_handle = context
        .engine
        .start_message_move_task(
            &request.source_arn,
            request.destination_arn.as_deref(),
            request.max_number_of_messages_per_second,
            &context.principal,
        )
        .await?;
    Ok(Response { task_handle })
}
