//! ListTopics (SNS): 100 topics a page.

use ackbox_engine::topic::LIST_PAGE_SIZE;
use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ListTopics request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// Where the previous page ended.
    #[serde(default)]
    pub next_token: Option<String>,
}

/// One topic of the listing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TopicEntry {
    /// The topic's ARN.
    pub topic_arn: String,
}

/// ListTopics response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// This page's topics.
    pub topics: Vec<TopicEntry>,
    /// Where the next page starts, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// Runs ListTopics.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let arns: Vec<String> = context
        .engine
        .list_topics()
        .await?
        .into_iter()
        .filter(|arn| context.may_use_topic(arn))
        .collect();
    let (page, next_token) = page(arns, request.next_token.as_deref(), LIST_PAGE_SIZE)?;
    Ok(Response {
        topics: page
            .into_iter()
            .map(|topic_arn| TopicEntry { topic_arn })
            .collect(),
        next_token,
    })
}

/// One page of `items` from `next_token` (an offset into the listing, as
/// the previous page handed it out), and the next page's token.
pub fn page<T>(
    items: Vec<T>,
    next_token: Option<&str>,
    page_size: usize,
) -> Result<(Vec<T>, Option<String>), ackbox_core::error::SqsError> {
    let start = match next_token {
        None | Some("") => 0,
        Some(token) => token.parse::<usize>().map_err(|_| {
            ackbox_core::error::SqsError::sns_invalid_parameter(
                "NextToken",
                format_args!("{token:?} is not a token a previous page handed out."),
            )
        })?,
    };
    let end = start.saturating_add(page_size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((
        items
            .into_iter()
            .skip(start)
            .take(end.saturating_sub(start))
            .collect(),
        next,
    ))
}
