//! `AckBox.PeekMessages` (extension): read messages without leasing them;
//! see `docs/protocol-extensions.md`.

use std::collections::BTreeMap;

use ackbox_core::message::MessageAttributes;
use ackbox_engine::receive::{MessageView, ReceiveRequest};
use serde::{Deserialize, Serialize};

use super::RequestContext;
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

/// One message, as ReceiveMessage shapes it but without a receipt handle.
#[derive(Debug, Serialize)]
pub struct PeekedMessage {
    /// The message id.
    #[serde(rename = "MessageId")]
    pub message_id: String,
    /// MD5 of the body.
    #[serde(rename = "MD5OfBody")]
    pub md5_of_body: String,
    /// The body.
    #[serde(rename = "Body")]
    pub body: String,
    /// Requested system attributes.
    #[serde(rename = "Attributes", skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    /// MD5 of the returned message attributes.
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_attributes: Option<String>,
    /// Requested message attributes.
    #[serde(
        rename = "MessageAttributes",
        skip_serializing_if = "MessageAttributes::is_empty"
    )]
    pub message_attributes: MessageAttributes,
}

impl From<MessageView> for PeekedMessage {
    fn from(view: MessageView) -> Self {
        Self {
            message_id: view.message_id,
            md5_of_body: view.md5_of_body,
            body: view.body,
            attributes: view.attributes,
            md5_of_message_attributes: view.md5_of_message_attributes,
            message_attributes: view.message_attributes,
        }
    }
}

/// PeekMessages response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The messages, oldest first.
    pub messages: Vec<PeekedMessage>,
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
        .peek_messages(&name, request.max_number_of_messages, &view)
        .await?;
    Ok(Response {
        messages: messages.into_iter().map(PeekedMessage::from).collect(),
    })
}
