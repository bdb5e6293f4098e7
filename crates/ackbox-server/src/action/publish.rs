//! Publish (SNS): one message to every queue subscribed to a topic, stored
//! for all of them in one transaction.

use ackbox_core::error::SqsError;
use ackbox_core::message::MessageAttributes;
use ackbox_engine::topic::PublishEntry;
use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// Publish request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The topic.
    #[serde(default)]
    pub topic_arn: Option<String>,
    /// The topic, as SNS also accepts it.
    #[serde(default)]
    pub target_arn: Option<String>,
    /// SMS: not something ackbox delivers.
    #[serde(default)]
    pub phone_number: Option<String>,
    /// The message.
    pub message: String,
    /// The subject, carried in the envelope.
    #[serde(default)]
    pub subject: Option<String>,
    /// `json` when `message` holds one text per protocol.
    #[serde(default)]
    pub message_structure: Option<String>,
    /// Message attributes.
    #[serde(default)]
    pub message_attributes: MessageAttributes,
    /// The message group: FIFO topics keep its order; on a standard topic,
    /// a tenant of a fair queue.
    #[serde(default)]
    pub message_group_id: Option<String>,
    /// FIFO topics only.
    #[serde(default)]
    pub message_deduplication_id: Option<String>,
}

/// Publish response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The notification's id.
    pub message_id: String,
    /// FIFO topics: the message's sequence number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<String>,
}

/// The topic a publish names, by `TopicArn` or `TargetArn`.
pub fn topic_arn<'a>(
    topic_arn: Option<&'a str>,
    target_arn: Option<&'a str>,
    phone_number: Option<&str>,
) -> Result<&'a str, SqsError> {
    if phone_number.is_some() {
        return Err(SqsError::sns_invalid_parameter(
            "PhoneNumber",
            "ackbox delivers to topics' subscribers only, not SMS; publish to a TopicArn.",
        ));
    }
    topic_arn.or(target_arn).ok_or_else(|| {
        SqsError::sns_invalid_parameter("TopicArn or TargetArn", "a publish must name its topic.")
    })
}

/// The entry a publish (or a batch entry) describes.
pub fn entry(
    message: String,
    subject: Option<String>,
    message_structure: Option<String>,
    attributes: MessageAttributes,
    group_id: Option<String>,
    deduplication_id: Option<String>,
) -> PublishEntry {
    PublishEntry {
        message,
        subject,
        message_structure,
        attributes,
        group_id,
        deduplication_id,
    }
}

/// Runs Publish.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let topic = topic_arn(
        request.topic_arn.as_deref(),
        request.target_arn.as_deref(),
        request.phone_number.as_deref(),
    )?;
    let entry = entry(
        request.message,
        request.subject,
        request.message_structure,
        request.message_attributes,
        request.message_group_id,
        request.message_deduplication_id,
    );
    let outcome = context
        .engine
        .publish(topic, vec![entry], &context.sender_id, &context.base_url)
        .await?
        .pop()
        .expect("one outcome for one entry")?;
    Ok(Response {
        message_id: outcome.message_id,
        sequence_number: outcome.sequence_number,
    })
}
