//! `AckBox.SummarizeQueue` (extension): a queue's messages counted by last
//! failure class, without touching them; see `docs/protocol-extensions.md`.

use ackbox_engine::store::FailureClassCount;
use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// SummarizeQueue request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// Only messages whose last failure class is this (as a move task's
    /// `AckBoxFailureClass`).
    #[serde(default, rename = "AckBoxFailureClass")]
    pub failure_class: Option<String>,
    /// Only messages sent at least this many seconds ago (as a move task's
    /// `AckBoxOlderThanSeconds`).
    #[serde(default, rename = "AckBoxOlderThanSeconds")]
    pub older_than_seconds: Option<u32>,
}

/// Messages of one failure class.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ClassEntry {
    /// The last failure class; empty when no reason was recorded.
    pub class: String,
    /// How many messages.
    pub count: i64,
    /// When the oldest was sent, epoch milliseconds.
    pub oldest_sent_timestamp: i64,
    /// When the newest was sent, epoch milliseconds.
    pub newest_sent_timestamp: i64,
    /// The oldest one's failure message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example_message: Option<String>,
}

impl From<FailureClassCount> for ClassEntry {
    fn from(count: FailureClassCount) -> Self {
        Self {
            class: count.class,
            count: count.count,
            oldest_sent_timestamp: count.oldest_sent_at,
            newest_sent_timestamp: count.newest_sent_at,
            example_message: count.example,
        }
    }
}

/// SummarizeQueue response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// All messages of the queue, whatever their state.
    pub total: i64,
    /// By class, largest first.
    pub classes: Vec<ClassEntry>,
}

/// Runs SummarizeQueue.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let sent_before = request
        .older_than_seconds
        .map(|seconds| context.engine.now() - i64::from(seconds) * 1_000);
    let classes = context
        .engine
        .failure_classes(&name, request.failure_class.as_deref(), sent_before)
        .await?;
    Ok(Response {
        total: classes.iter().map(|class| class.count).sum(),
        classes: classes.into_iter().map(ClassEntry::from).collect(),
    })
}
