//! Messages as handlers see them, whatever the broker.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use crate::error::HandlerError;

/// The message attribute that marks a replayed message (set by replay and
/// redrive tools): what a handler does with it is its
/// [`on_replay`](crate::Handler::on_replay).
pub const REPLAY_ATTRIBUTE: &str = "ackbox.replay";
/// The message attribute that carries an outbox event's id: the same on every
/// publication of the event, so it is the default effect key.
pub const EVENT_ID_ATTRIBUTE: &str = "ackbox.event_id";
/// The message attribute naming the conversation a message belongs to;
/// events published while handling a message inherit it.
pub const CORRELATION_ID_ATTRIBUTE: &str = "correlation_id";
/// The message attribute naming the event that caused a message; events
/// published while handling a message name that message's event id.
pub const CAUSATION_ID_ATTRIBUTE: &str = "causation_id";
/// The message attribute with the event type that labels a consumer's
/// metrics and logs, unless the consumer is told another
/// ([`ConsumerBuilder::event_type_attribute`](crate::ConsumerBuilder::event_type_attribute)).
pub const EVENT_TYPE_ATTRIBUTE: &str = "event_type";
/// The message attribute naming the aggregate an event is about (logged).
pub const AGGREGATE_ID_ATTRIBUTE: &str = "aggregate_id";
/// The message attribute with the aggregate's version after the event (logged).
pub const AGGREGATE_VERSION_ATTRIBUTE: &str = "aggregate_version";
/// The message attribute naming the SNS topic a message was published to,
/// set when its SNS envelope is unwrapped ([`Message::unwrap_sns_envelope`]).
pub const TOPIC_ARN_ATTRIBUTE: &str = "ackbox.topic_arn";

/// One delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The broker's message id (stable across redeliveries).
    pub id: String,
    /// The body.
    pub body: String,
    /// String message attributes by name.
    pub attributes: BTreeMap<String, String>,
    /// Deliveries so far, this one included: 1 on the first attempt.
    pub receive_count: u32,
    /// The message group, on FIFO queues and fair queues.
    pub group_id: Option<String>,
}

impl Message {
    /// The body decoded from JSON. A body that does not decode is a
    /// permanent failure: no retry will make it decode.
    ///
    /// ```
    /// # use ackbox_consumer::Message;
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64 }
    /// let message = Message { id: "m".into(), body: r#"{"id":7}"#.into(),
    ///     attributes: Default::default(), receive_count: 1, group_id: None };
    /// assert_eq!(message.json::<Order>().unwrap().id, 7);
    /// let poison = Message { body: "not json".into(), ..message };
    /// assert!(matches!(poison.json::<Order>(), Err(ackbox_consumer::HandlerError::Permanent { .. })));
    /// ```
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        serde_json::from_str(&self.body)
            .map_err(|error| HandlerError::permanent("Deserialize", error))
    }

    /// The message inside an SNS notification, as a queue subscribed to a
    /// topic without raw delivery receives it (from SNS or from ackbox's
    /// topics): the envelope's `Message` becomes the body, its string and
    /// number `MessageAttributes` the attributes, its `TopicArn` the
    /// [`TOPIC_ARN_ATTRIBUTE`], and its `MessageId` the event id
    /// ([`EVENT_ID_ATTRIBUTE`], unless the publisher set one) — the same in
    /// every delivery of one publish, however many times SNS delivers it,
    /// so the default effect key makes a duplicate delivery a no-op. Any
    /// other body is left as it is.
    ///
    /// ```
    /// # use ackbox_consumer::{Message, EVENT_ID_ATTRIBUTE};
    /// let delivered = Message { id: "sqs-1".into(), attributes: Default::default(),
    ///     receive_count: 1, group_id: None,
    ///     body: r#"{"Type":"Notification","MessageId":"pub-7","TopicArn":"arn:aws:sns:us-east-1:000000000000:orders","Message":"{\"id\":7}"}"#.into() };
    /// let inner = delivered.unwrap_sns_envelope();
    /// assert_eq!(inner.body, r#"{"id":7}"#);
    /// assert_eq!(inner.event_id(), "pub-7");
    /// ```
    #[must_use]
    pub fn unwrap_sns_envelope(mut self) -> Self {
        use serde_json::Value;
        // Most bodies are not envelopes; only these can be.
        if !self.body.contains("\"Notification\"") {
            return self;
        }
        let Ok(Value::Object(envelope)) = serde_json::from_str::<Value>(&self.body) else {
            return self;
        };
        let text = |member: &str| envelope.get(member).and_then(Value::as_str);
        let (Some("Notification"), Some(message_id), Some(topic_arn), Some(message)) = (
            text("Type"),
            text("MessageId"),
            text("TopicArn"),
            text("Message"),
        ) else {
            return self;
        };
        if let Some(Value::Object(attributes)) = envelope.get("MessageAttributes") {
            for (name, attribute) in attributes {
                let kind = attribute
                    .get("Type")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if let (false, Some(value)) = (
                    kind.starts_with("Binary"),
                    attribute.get("Value").and_then(Value::as_str),
                ) {
                    self.attributes.insert(name.clone(), value.to_owned());
                }
            }
        }
        self.attributes
            .entry(EVENT_ID_ATTRIBUTE.to_owned())
            .or_insert_with(|| message_id.to_owned());
        self.attributes
            .insert(TOPIC_ARN_ATTRIBUTE.to_owned(), topic_arn.to_owned());
        self.body = message.to_owned();
        self
    }

    /// Whether the message is a replay ([`REPLAY_ATTRIBUTE`] is `true`).
    pub fn is_replay(&self) -> bool {
        self.attribute(REPLAY_ATTRIBUTE)
            .is_some_and(|value| value.eq_ignore_ascii_case("true"))
    }

    /// A string message attribute.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
    }

    /// The event id: the outbox's [`EVENT_ID_ATTRIBUTE`], else the message id.
    pub fn event_id(&self) -> &str {
        self.attribute(EVENT_ID_ATTRIBUTE).unwrap_or(&self.id)
    }

    /// The conversation the message belongs to ([`CORRELATION_ID_ATTRIBUTE`]).
    pub fn correlation_id(&self) -> Option<&str> {
        self.attribute(CORRELATION_ID_ATTRIBUTE)
    }

    /// The event that caused the message ([`CAUSATION_ID_ATTRIBUTE`]).
    pub fn causation_id(&self) -> Option<&str> {
        self.attribute(CAUSATION_ID_ATTRIBUTE)
    }
}

/// A message with the transport's token for acting on this delivery of it
/// (an SQS receipt handle, for instance).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The message.
    pub message: Message,
    /// Names this delivery to the transport; never part of an effect key.
    pub token: String,
}
