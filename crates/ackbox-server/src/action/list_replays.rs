//! `AckBox.ListReplays` (extension): the replay audit log — running replays
//! and the latest ended ones of each archive; see `docs/topics.md`.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::start_replay::ReplayEntry;
use crate::error::ApiError;

/// ListReplays request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// Only the replays of this topic's or queue's archive; all when
    /// absent.
    #[serde(default, alias = "TopicArn")]
    pub source_arn: Option<String>,
}

/// ListReplays response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The replays, newest first.
    pub replays: Vec<ReplayEntry>,
}

/// Runs ListReplays.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let replays = context
        .engine
        .list_replays(request.source_arn.as_deref())
        .await?;
    Ok(Response {
        replays: replays
            .into_iter()
            .filter(|replay| context.may_use_archive_of(&replay.source_arn))
            .map(ReplayEntry::from)
            .collect(),
    })
}
