//! The JSON envelope SNS wraps a notification in for a subscriber that did
//! not ask for raw delivery, laid out as SNS lays it out.
//!
//! SNS also signs the envelope with a key whose certificate it serves from
//! `SigningCertURL`; ackbox has no such certificate, so it writes neither
//! the signature nor its fields, and a subscriber that verifies SNS
//! signatures must not be pointed at ackbox.

use ackbox_core::clock::Timestamp;
use ackbox_core::message::MessageAttributes;
use ackbox_core::utc::rfc3339_millis;
use serde_json::Value;

/// What one notification says, whatever the subscriber.
#[derive(Debug, Clone)]
pub(crate) struct Notification<'a> {
    pub(crate) message_id: &'a str,
    pub(crate) topic_arn: &'a str,
    pub(crate) subject: Option<&'a str>,
    pub(crate) message: &'a str,
    pub(crate) timestamp: Timestamp,
    pub(crate) attributes: &'a MessageAttributes,
    /// Where a subscriber can unsubscribe: this server's SNS endpoint
    /// (none for a replay into a queue that no subscription names).
    pub(crate) unsubscribe_url: Option<String>,
}

impl Notification<'_> {
    /// The envelope's text: SNS's member order and `"Name" : value` layout.
    pub(crate) fn envelope(&self) -> String {
        let mut members: Vec<(&str, Value)> = vec![
            ("Type", Value::from("Notification")),
            ("MessageId", Value::from(self.message_id)),
            ("TopicArn", Value::from(self.topic_arn)),
        ];
        if let Some(subject) = self.subject {
            members.push(("Subject", Value::from(subject)));
        }
        members.push(("Message", Value::from(self.message)));
        members.push(("Timestamp", Value::from(rfc3339_millis(self.timestamp))));
        if let Some(url) = &self.unsubscribe_url {
            members.push(("UnsubscribeURL", Value::from(url.as_str())));
        }
        if !self.attributes.is_empty() {
            let attributes = self
                .attributes
                .iter()
                .map(|(name, value)| {
                    let wire = serde_json::to_value(value).unwrap_or_default();
                    let text = wire
                        .get("StringValue")
                        .or_else(|| wire.get("BinaryValue"))
                        .cloned()
                        .unwrap_or_default();
                    (
                        name.clone(),
                        serde_json::json!({"Type": value.data_type, "Value": text}),
                    )
                })
                .collect::<serde_json::Map<_, _>>();
            members.push(("MessageAttributes", Value::Object(attributes)));
        }
        layout(members)
    }
}

/// A pending push subscription's request to its endpoint to confirm it.
#[derive(Debug, Clone)]
pub(crate) struct Confirmation<'a> {
    pub(crate) message_id: &'a str,
    pub(crate) topic_arn: &'a str,
    pub(crate) token: &'a str,
    /// Where a GET confirms the subscription: this server's
    /// `ConfirmSubscription` with the token.
    pub(crate) subscribe_url: String,
    pub(crate) timestamp: Timestamp,
}

impl Confirmation<'_> {
    /// The request's body, laid out as SNS lays it out.
    pub(crate) fn envelope(&self) -> String {
        let message = format!(
            "You have chosen to subscribe to the topic {}.\nTo confirm the subscription, visit \
             the SubscribeURL included in this message.",
            self.topic_arn
        );
        layout(vec![
            ("Type", Value::from("SubscriptionConfirmation")),
            ("MessageId", Value::from(self.message_id)),
            ("Token", Value::from(self.token)),
            ("TopicArn", Value::from(self.topic_arn)),
            ("Message", Value::from(message)),
            ("SubscribeURL", Value::from(self.subscribe_url.as_str())),
            ("Timestamp", Value::from(rfc3339_millis(self.timestamp))),
        ])
    }
}

/// SNS's layout: one `"Name" : value` member per line.
fn layout(members: Vec<(&str, Value)>) -> String {
    let lines: Vec<String> = members
        .into_iter()
        .map(|(name, value)| format!("  \"{name}\" : {value}"))
        .collect();
    format!("{{\n{}\n}}", lines.join(",\n"))
}

#[cfg(test)]
mod tests {
    use ackbox_core::message::MessageAttributeValue;

    use super::*;

    #[test]
    fn the_envelope_is_json_with_sns_members_in_sns_order() {
        let mut attributes = MessageAttributes::new();
        attributes.insert("kind".to_owned(), MessageAttributeValue::string("order"));
        attributes.insert(
            "blob".to_owned(),
            MessageAttributeValue {
                data_type: "Binary".to_owned(),
                string_value: None,
                binary_value: Some(vec![1, 2, 3]),
            },
        );
        let notification = Notification {
            message_id: "m-1",
            topic_arn: "arn:aws:sns:us-east-1:000000000000:orders",
            subject: Some("hello"),
            message: "{\"id\": 7}\nline two",
            timestamp: 1_700_000_000_042,
            attributes: &attributes,
            unsubscribe_url: Some("http://127.0.0.1:9324/?Action=Unsubscribe".to_owned()),
        };
        let text = notification.envelope();
        assert!(
            text.starts_with("{\n  \"Type\" : \"Notification\",\n"),
            "{text}"
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["MessageId"], "m-1");
        assert_eq!(parsed["Subject"], "hello");
        assert_eq!(parsed["Message"], "{\"id\": 7}\nline two");
        assert_eq!(parsed["Timestamp"], "2023-11-14T22:13:20.042Z");
        assert_eq!(parsed["MessageAttributes"]["kind"]["Type"], "String");
        assert_eq!(parsed["MessageAttributes"]["kind"]["Value"], "order");
        assert_eq!(parsed["MessageAttributes"]["blob"]["Value"], "AQID");
        let order: Vec<usize> = [
            "\"Type\"",
            "\"MessageId\"",
            "\"TopicArn\"",
            "\"Subject\"",
            "\"Message\"",
            "\"Timestamp\"",
        ]
        .iter()
        .map(|member| text.find(member).unwrap())
        .collect();
        assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{text}");

        let bare = Notification {
            subject: None,
            attributes: &MessageAttributes::new(),
            ..notification
        };
        let parsed: Value = serde_json::from_str(&bare.envelope()).unwrap();
        assert!(parsed.get("Subject").is_none());
        assert!(parsed.get("MessageAttributes").is_none());
    }
}
