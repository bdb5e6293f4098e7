//! ListMessageMoveTasks: the move tasks of a dead-letter queue, newest first.

use ackbox_engine::redrive::MoveTask;
use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ListMessageMoveTasks request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// ARN of the dead-letter queue.
    pub source_arn: String,
    /// 1..=10; 1 when absent.
    #[serde(default)]
    pub max_results: Option<i32>,
}

/// One task.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResultEntry {
    /// Present while the task runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_handle: Option<String>,
    /// `RUNNING`, `COMPLETED`, `CANCELLED` or `FAILED`.
    pub status: String,
    /// The dead-letter queue.
    pub source_arn: String,
    /// The destination, when one was named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_arn: Option<String>,
    /// The rate, when one was named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_number_of_messages_per_second: Option<i64>,
    /// Messages moved so far.
    pub approximate_number_of_messages_moved: i64,
    /// Messages to move, counted when the task started.
    pub approximate_number_of_messages_to_move: i64,
    /// Why the task failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// When the task started, epoch milliseconds.
    pub started_timestamp: i64,
}

impl From<MoveTask> for ResultEntry {
    fn from(task: MoveTask) -> Self {
        Self {
            task_handle: task.handle,
            status: task.status,
            source_arn: task.source_arn,
            destination_arn: task.destination_arn,
            max_number_of_messages_per_second: task.max_messages_per_second,
            approximate_number_of_messages_moved: task.moved,
            approximate_number_of_messages_to_move: task.to_move,
            failure_reason: task.failure_reason,
            started_timestamp: task.started_at,
        }
    }
}

/// ListMessageMoveTasks response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The tasks, newest first.
    pub results: Vec<ResultEntry>,
}

/// Runs ListMessageMoveTasks.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let tasks = context
        .engine
        .list_message_move_tasks(&request.source_arn, request.max_results)
        .await?;
    Ok(Response {
        results: tasks.into_iter().map(ResultEntry::from).collect(),
    })
}
