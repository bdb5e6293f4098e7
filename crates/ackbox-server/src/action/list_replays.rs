//! `AckBox.ListReplays` (extension): the replay audit log — running replays
//! and each topic's latest ended ones; see `docs/topics.md`.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::start_replay::ReplayEntry;
use crate::error::ApiError;

/// ListReplays request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// Only this topic's replays; every topic's when absent.
    #[serde(default)]
    pub topic_arn: Option<String>,
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
        .list_replays(request.topic_arn.as_deref())
        .await?;
    Ok(Response {
        replays: replays
            .into_iter()
            .filter(|replay| context.may_use_topic(&replay.topic_arn))
            .map(ReplayEntry::from)
            .collect(),
    })
}
