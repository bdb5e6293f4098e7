//! `AckBox.PeekMessages` (extension): read messages without leasing them;
//! see `docs/protocol-extensions.md`.

use ackbox_engine::receive::ReceiveRequest;
use serde::{Deserialize, Serialize};

use super::RequestContext;
use super::receive_message::Message;
use crate::error::ApiError;

/// PeekMessages request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// 1..=100; 10 when absent.
    #[serde(default)]
    pub max_number_of_messages: Option<i32>,
    /// System attributes to return (`All` for every one, failure metadata included).
    #[serde(default)]
    pub message_system_attribute_names: Vec<String>,
    /// Message attributes to return.
    #[serde(default)]
    pub message_attribute_names: Vec<String>,
}

/// PeekMessages response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The messages, oldest first, shaped as ReceiveMessage shapes them
    /// but without receipt handles.
    pub messages: Vec<Message>,
}

/// Runs PeekMessages.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let view = ReceiveRequest {
        system_attribute_names: request.message_system_attribute_names,
        message_attribute_names: request.message_attribute_names,
        ..ReceiveRequest::default()
    };
    let messages = context
        .engine
        .peek_messages(&name, request.max_number_of_messages, 0, &view)
        .await?;
    Ok(Response {
        messages: messages.into_iter().map(Message::from).collect(),
    })
}
