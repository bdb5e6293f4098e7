//! `AckBox.ListMoveTaskHistory` (extension): the redrive audit log, every
//! move task ever started; see `docs/protocol-extensions.md`.

use ackbox_engine::redrive::MoveTask;
use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::list_message_move_tasks::ResultEntry;
use crate::error::ApiError;

/// ListMoveTaskHistory request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// Only the tasks of this dead-letter queue; every task when absent.
    #[serde(default)]
    pub source_arn: Option<String>,
    /// 1..=1000; 100 when absent.
    #[serde(default)]
    pub max_results: Option<i32>,
}

/// One audit record: a ListMessageMoveTasks entry plus who and when it ended.
#[derive(Debug, Serialize)]
pub struct AuditEntry {
    /// The task as ListMessageMoveTasks shows it.
    #[serde(flatten)]
    pub task: ResultEntry,
    /// When it ended, epoch milliseconds.
    #[serde(rename = "FinishedTimestamp", skip_serializing_if = "Option::is_none")]
    pub finished_timestamp: Option<i64>,
    /// Who started it: an access key, or `anonymous`.
    #[serde(rename = "RequestedBy")]
    pub requested_by: String,
    /// The failure-class filter, if any.
    #[serde(rename = "AckBoxFailureClass", skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<String>,
    /// Only messages sent at or before this instant, if set.
    #[serde(
        rename = "AckBoxSentBeforeTimestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub sent_before: Option<i64>,
    /// The sample size a paused task waits at, if any.
    #[serde(rename = "AckBoxSample", skip_serializing_if = "Option::is_none")]
    pub sample: Option<i64>,
    /// The cap on moved messages, if any.
    #[serde(rename = "AckBoxMaxMessages", skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<i64>,
    /// Messages passed over because they did not match the filter.
    #[serde(rename = "ApproximateNumberOfMessagesSkipped")]
    pub skipped: i64,
}

impl From<MoveTask> for AuditEntry {
    fn from(task: MoveTask) -> Self {
        Self {
            finished_timestamp: task.finished_at,
            requested_by: task.requested_by.clone(),
            failure_class: task.filter.class.clone(),
            sent_before: task.filter.sent_before,
            max_messages: task.filter.max_messages,
            sample: task.filter.sample,
            skipped: task.skipped,
            task: task.into(),
        }
    }
}

/// ListMoveTaskHistory response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The tasks, newest first.
    pub tasks: Vec<AuditEntry>,
}

/// Runs ListMoveTaskHistory.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let tasks = context
        .engine
        .move_task_history(request.source_arn.as_deref(), request.max_results)
        .await?;
    Ok(Response {
        tasks: tasks
            .into_iter()
            .filter(|task| {
                context
                    .engine
                    .realm()
                    .queue_name_from_arn(&task.source_arn)
                    .is_some_and(|name| context.may_use_queue(name.as_str()))
            })
            .map(AuditEntry::from)
            .collect(),
    })
}
