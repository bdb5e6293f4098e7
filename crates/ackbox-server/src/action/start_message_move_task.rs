//! StartMessageMoveTask: redrive a dead-letter queue.

use ackbox_engine::store::MoveFilter;
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
    /// Extension: only messages whose last failure class is this.
    #[serde(default, rename = "AckBoxFailureClass")]
    pub failure_class: Option<String>,
    /// Extension: only messages sent at least this many seconds before the task starts.
    #[serde(default, rename = "AckBoxOlderThanSeconds")]
    pub older_than_seconds: Option<u32>,
    /// Extension: stop after moving this many.
    #[serde(default, rename = "AckBoxMaxMessages")]
    pub max_messages: Option<i64>,
    /// Extension: pause after moving this many, for review (`AckBox.ResumeMessageMoveTask`).
    #[serde(default, rename = "AckBoxSample")]
    pub sample: Option<i64>,
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
            MoveFilter {
                class: request.failure_class,
                sent_before: request
                    .older_than_seconds
                    .map(|seconds| context.engine.now() - i64::from(seconds) * 1_000),
                max_messages: request.max_messages,
                sample: request.sample,
            },
            context.principal(),
        )
        .await?;
    Ok(Response { task_handle })
}
