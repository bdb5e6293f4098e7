//! ListQueues: by prefix, paginated with MaxResults and NextToken.

use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ListQueues request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// Only queues whose names start with this.
    #[serde(default)]
    pub queue_name_prefix: Option<String>,
    /// Page size, 1..=1000.
    #[serde(default)]
    pub max_results: Option<i32>,
    /// The token from the previous page.
    #[serde(default)]
    pub next_token: Option<String>,
}

/// ListQueues response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The queue URLs of this page.
    pub queue_urls: Vec<String>,
    /// The next page's token, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// Runs ListQueues.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let (names, next_token) = context.engine.list_queues(
        request.queue_name_prefix.as_deref().unwrap_or_default(),
        request.max_results,
        request.next_token.as_deref(),
    )?;
    Ok(Response {
        // A key sees only the queues it may use; a page may come out short.
        queue_urls: names
            .iter()
            .filter(|name| context.may_use_queue(name.as_str()))
            .map(|name| context.queue_url(name))
            .collect(),
        next_token,
    })
}
