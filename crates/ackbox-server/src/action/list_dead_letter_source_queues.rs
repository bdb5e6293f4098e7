//! ListDeadLetterSourceQueues: the queues whose redrive policy names this one.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ListDeadLetterSourceQueues request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The dead-letter queue.
    pub queue_url: String,
    /// Page size, 1..=1000.
    #[serde(default)]
    pub max_results: Option<i32>,
    /// The token from the previous page.
    #[serde(default)]
    pub next_token: Option<String>,
}

/// ListDeadLetterSourceQueues response.
#[derive(Debug, Serialize)]
pub struct Response {
    /// Source queue URLs (SQS spells this member in lower camel case).
    #[serde(rename = "queueUrls")]
    pub queue_urls: Vec<String>,
    /// The next page's token, when there is one.
    #[serde(rename = "NextToken", skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// Runs ListDeadLetterSourceQueues.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let (sources, next_token) = context
        .engine
        .list_dead_letter_source_queues(&name, request.max_results, request.next_token.as_deref())
        .await?;
    Ok(Response {
        queue_urls: sources
            .iter()
            .filter(|source| context.may_use_queue(source.as_str()))
            .map(|source| context.queue_url(source))
            .collect(),
        next_token,
    })
}
