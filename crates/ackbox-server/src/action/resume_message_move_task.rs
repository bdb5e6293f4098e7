//! `AckBox.ResumeMessageMoveTask` (extension): continue a move task paused
//! after its sample; see `docs/protocol-extensions.md`.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ResumeMessageMoveTask request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The handle StartMessageMoveTask returned.
    pub task_handle: String,
}

/// ResumeMessageMoveTask response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The dead-letter queue, to follow the task with ListMessageMoveTasks.
    pub source_arn: String,
    /// Messages moved so far.
    pub approximate_number_of_messages_moved: i64,
}

/// Runs ResumeMessageMoveTask.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let task = context
        .engine
        .resume_message_move_task(&request.task_handle)
        .await?;
    Ok(Response {
        source_arn: task.source_arn,
        approximate_number_of_messages_moved: task.moved,
    })
}
