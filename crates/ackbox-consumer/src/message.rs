//! Messages as handlers see them, whatever the broker.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use crate::error::HandlerError;

/// The message attribute that marks a replayed message (set by replay and
/// redrive tools): only replay-safe handlers run it.
pub const REPLAY_ATTRIBUTE: &str = "ackbox.replay";

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

    /// Whether the message is a replay ([`REPLAY_ATTRIBUTE`] is `true`).
    pub fn is_replay(&self) -> bool {
        self.attribute(REPLAY_ATTRIBUTE)
            .is_some_and(|value| value.eq_ignore_ascii_case("true"))
    }

    /// A string message attribute.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
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
