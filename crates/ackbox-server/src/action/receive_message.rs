//! ReceiveMessage, with long polling.

use std::collections::BTreeMap;

use ackbox_core::message::MessageAttributes;
use ackbox_engine::receive::{MessageView, ReceiveRequest, ReceivedMessage};
use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// ReceiveMessage request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// 1..=10.
    #[serde(default)]
    pub max_number_of_messages: Option<i32>,
    /// Lease length, seconds.
    #[serde(default)]
    pub visibility_timeout: Option<i32>,
    /// Long-poll wait, seconds.
    #[serde(default)]
    pub wait_time_seconds: Option<i32>,
    /// Deprecated spelling of `MessageSystemAttributeNames`.
    #[serde(default)]
    pub attribute_names: Vec<String>,
    /// System attributes to return.
    #[serde(default)]
    pub message_system_attribute_names: Vec<String>,
    /// Message attributes to return.
    #[serde(default)]
    pub message_attribute_names: Vec<String>,
    /// FIFO receive retry token; standard queues ignore it.
    #[serde(default)]
    pub receive_request_attempt_id: Option<String>,
}

/// One message on the wire (ReceiveMessage, and PeekMessages without a handle).
#[derive(Debug, Serialize)]
pub struct Message {
    /// The message id.
    #[serde(rename = "MessageId")]
    pub message_id: String,
    /// The handle of this lease; absent when the message was only peeked.
    #[serde(rename = "ReceiptHandle", skip_serializing_if = "Option::is_none")]
    pub receipt_handle: Option<String>,
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

impl From<ReceivedMessage> for Message {
    fn from(message: ReceivedMessage) -> Self {
        Self {
            message_id: message.message_id,
            receipt_handle: Some(message.receipt_handle),
            md5_of_body: message.md5_of_body,
            body: message.body,
            attributes: message.attributes,
            md5_of_message_attributes: message.md5_of_message_attributes,
            message_attributes: message.message_attributes,
        }
    }
}

impl From<MessageView> for Message {
    fn from(view: MessageView) -> Self {
        Self {
            message_id: view.message_id,
            receipt_handle: None,
            md5_of_body: view.md5_of_body,
            body: view.body,
            attributes: view.attributes,
            md5_of_message_attributes: view.md5_of_message_attributes,
            message_attributes: view.message_attributes,
        }
    }
}

/// ReceiveMessage response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The leased messages; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
}

/// Runs ReceiveMessage.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let mut system_attribute_names = request.attribute_names;
    system_attribute_names.extend(request.message_system_attribute_names);
    let received = context
        .engine
        .receive_messages(
            &name,
            &ReceiveRequest {
                max_number_of_messages: request.max_number_of_messages,
                visibility_timeout: request.visibility_timeout,
                wait_time_seconds: request.wait_time_seconds,
                system_attribute_names,
                message_attribute_names: request.message_attribute_names,
                receive_request_attempt_id: request.receive_request_attempt_id,
            },
        )
        .await?;
    Ok(Response {
        messages: received.into_iter().map(Message::from).collect(),
    })
}
