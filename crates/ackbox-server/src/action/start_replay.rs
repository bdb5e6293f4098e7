//! `AckBox.StartReplay` (extension): delivers a topic's archived publishes
//! or a queue's archived sends from a time range again, to a queue (or one
//! of the topic's subscriptions); see `docs/topics.md`.

use ackbox_engine::topic::{Replay, ReplayRequest};
use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// StartReplay request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic or queue whose archive is replayed (`TopicArn` too, as
    /// before queues kept archives).
    #[serde(alias = "TopicArn")]
    pub source_arn: String,
    /// A queue's ARN, or the ARN of one of the topic's subscriptions.
    pub destination_arn: String,
    /// Publishes from this time, epoch milliseconds…
    pub start_timestamp: i64,
    /// …to this one (now when absent), both included.
    #[serde(default)]
    pub end_timestamp: Option<i64>,
    /// For a queue: only publishes whose attributes this SNS filter policy
    /// lets through.
    #[serde(default)]
    pub filter_policy: Option<String>,
    /// For a queue: the message alone instead of the SNS envelope.
    #[serde(default)]
    pub raw_message_delivery: bool,
    /// Copies per second, 1..=500 (500 when absent).
    #[serde(default)]
    pub max_number_of_messages_per_second: Option<i64>,
}

/// One replay as StartReplay and ListReplays report it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ReplayEntry {
    /// Its handle, for CancelReplay.
    pub task_handle: String,
    /// The topic or queue whose archive is replayed.
    pub source_arn: String,
    /// The same, when it is a topic (as before queues kept archives).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_arn: Option<String>,
    /// The queue or subscription it delivers to.
    pub destination_arn: String,
    /// The filter policy it applies, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_policy: Option<String>,
    /// The range, epoch milliseconds, both ends included.
    pub start_timestamp: i64,
    /// The end of the range.
    pub end_timestamp: i64,
    /// The rate, when one was named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_number_of_messages_per_second: Option<i64>,
    /// `RUNNING`, `COMPLETED`, `CANCELLED` or `FAILED`.
    pub status: String,
    /// Publishes delivered again so far.
    pub approximate_number_of_messages_replayed: i64,
    /// Publishes in range that the filter passed over.
    pub approximate_number_of_messages_skipped: i64,
    /// Who started it: an access key, or `anonymous`.
    pub requested_by: String,
    /// When it started, epoch milliseconds.
    pub started_timestamp: i64,
    /// When it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_timestamp: Option<i64>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

impl From<Replay> for ReplayEntry {
    fn from(replay: Replay) -> Self {
        Self {
            task_handle: replay.handle,
            topic_arn: replay
                .source_arn
                .starts_with("arn:aws:sns:")
                .then(|| replay.source_arn.clone()),
            source_arn: replay.source_arn,
            destination_arn: replay.destination_arn,
            filter_policy: replay.filter_policy,
            start_timestamp: replay.start,
            end_timestamp: replay.end,
            max_number_of_messages_per_second: replay.rate,
            status: replay.status,
            approximate_number_of_messages_replayed: replay.replayed,
            approximate_number_of_messages_skipped: replay.skipped,
            requested_by: replay.requested_by,
            started_timestamp: replay.started_at,
            finished_timestamp: replay.finished_at,
            failure_reason: replay.failure_reason,
        }
    }
}

/// StartReplay response: the replay as it starts.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The new replay.
    pub replay: ReplayEntry,
}

/// Runs StartReplay.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let replay = context
        .engine
        .start_replay(ReplayRequest {
            source_arn: request.source_arn,
            destination_arn: request.destination_arn,
            start: request.start_timestamp,
            end: request.end_timestamp,
            filter_policy: request.filter_policy,
            raw_message_delivery: request.raw_message_delivery,
            rate: request.max_number_of_messages_per_second,
            requested_by: context.principal().to_owned(),
            endpoint: context.base_url.clone(),
        })
        .await?;
    Ok(Response {
        replay: replay.into(),
    })
}
