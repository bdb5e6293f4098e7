//! `AckBox.CancelReplay` (extension): stops a running replay; what it
//! delivered stays delivered. See `docs/topics.md`.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::start_replay::ReplayEntry;
use crate::error::ApiError;

/// CancelReplay request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic or queue whose archive is replayed.
    #[serde(alias = "TopicArn")]
    pub source_arn: String,
    /// The replay's handle.
    pub task_handle: String,
}

/// CancelReplay response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The replay as it stopped.
    pub replay: ReplayEntry,
}

/// Runs CancelReplay.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let replay = context
        .engine
        .cancel_replay(&request.source_arn, &request.task_handle)
        .await?;
    Ok(Response {
        replay: replay.into(),
    })
}
