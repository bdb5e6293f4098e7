//! CancelMessageMoveTask: stop a running move task.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// CancelMessageMoveTask request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The handle StartMessageMoveTask returned.
    pub task_handle: String,
}

/// CancelMessageMoveTask response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// Messages moved before the cancel.
    pub approximate_number_of_messages_moved: i64,
}

/// Runs CancelMessageMoveTask.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let moved = context
        .engine
        .cancel_message_move_task(&request.task_handle)
        .await?;
    Ok(Response {
        approximate_number_of_messages_moved: moved,
    })
}
