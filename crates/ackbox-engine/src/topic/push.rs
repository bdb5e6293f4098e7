//! Push subscriptions (`http`, `https`): what the engine keeps for them.
//!
//! Each push subscription owns a delivery queue, an ordinary ackbox queue
//! named `ackbox-push-<subscription id>`. A publish stores its copy for the
//! endpoint there, in the same transaction as every other subscriber's
//! copy, so a push delivery is as durable as a queue's and a publish is
//! never half fanned-out; the server's push worker takes the copies from
//! the queue, posts them and deletes them on a 2xx. A failed post goes back
//! to the queue for the delivery policy's next wait (`NackMessage`, with
//! the HTTP status as the reason) and, when the policy is spent, to the
//! subscription's dead-letter queue — whose messages name the failure — or
//! away. Operators see a subscription's backlog as the queue's depth.
//!
//! As in SNS, a new push subscription is pending until its endpoint
//! confirms it: its first delivery is a `SubscriptionConfirmation` with a
//! token and a `SubscribeURL`, and nothing is published to it before
//! `ConfirmSubscription` comes back with the token.

use std::collections::BTreeMap;

use ackbox_core::delivery_policy::{
    EffectivePolicy, SubscriptionDeliveryPolicy, parse_subscription_policy, parse_topic_policy,
};
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::MAX_MAX_RECEIVE_COUNT;
use ackbox_core::message::{MessageAttributeValue, MessageAttributes};
use ackbox_core::queue_name::{QueueName, Realm};
use ackbox_core::topic_name::TopicName;

use super::envelope::Confirmation;
use super::{SubscriptionDefinition, TopicDefinition};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::send::SendEntry;

/// The protocol of plain-HTTP push subscriptions.
pub const HTTP_PROTOCOL: &str = "http";
/// The protocol of HTTPS push subscriptions.
pub const HTTPS_PROTOCOL: &str = "https";
/// The subscription attribute with its delivery policy.
pub const DELIVERY_POLICY: &str = "DeliveryPolicy";
/// The subscription attribute naming its dead-letter queue.
pub const REDRIVE_POLICY: &str = "RedrivePolicy";
/// What a delivery queue's name starts with; the subscription id follows.
pub const DELIVERY_QUEUE_PREFIX: &str = "ackbox-push-";
/// The attribute of a delivery-queue message that says what it is
/// (`Notification` or `SubscriptionConfirmation`), for the
/// `x-amz-sns-message-type` header.
pub const MESSAGE_TYPE_ATTRIBUTE: &str = "ackbox.sns.message_type";
/// The attribute of a delivery-queue message with the notification's id,
/// for the `x-amz-sns-message-id` header (a raw body does not carry it).
pub const MESSAGE_ID_ATTRIBUTE: &str = "ackbox.sns.message_id";
/// A notification's message type.
pub const NOTIFICATION: &str = "Notification";
/// A confirmation request's message type.
pub const SUBSCRIPTION_CONFIRMATION: &str = "SubscriptionConfirmation";
/// How long a delivery queue keeps a copy nobody could deliver: SQS's
/// longest retention, as a policy can take at most an hour.
const DELIVERY_RETENTION_SECONDS: u32 = 1_209_600;

/// A push subscription as the push worker needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSubscription {
    /// Its ARN (the `x-amz-sns-subscription-arn` header).
    pub subscription_arn: String,
    /// Its topic's ARN.
    pub topic_arn: String,
    /// The URL posted to.
    pub endpoint: String,
    /// Its delivery queue.
    pub queue: QueueName,
    /// Whether bodies are the bare message (`x-amz-sns-rawdelivery`).
    pub raw_message_delivery: bool,
    /// Retries, pace and content type.
    pub policy: EffectivePolicy,
    /// Whether a delivery that spends the policy goes to a dead-letter queue
    /// (else it is dropped, as in SNS).
    pub dead_letter_queue: bool,
}

/// Whether `protocol` pushes over HTTP.
pub(crate) fn is_push(protocol: &str) -> bool {
    matches!(protocol, HTTP_PROTOCOL | HTTPS_PROTOCOL)
}

/// The delivery queue of subscription `id`.
pub(crate) fn delivery_queue(id: &str) -> QueueName {
    format!("{DELIVERY_QUEUE_PREFIX}{id}")
        .parse()
        .expect("a subscription id is a UUID, which makes a queue name")
}

/// Checks a push endpoint: an absolute URL of the subscription's scheme.
pub(crate) fn validate_endpoint(protocol: &str, endpoint: &str) -> Result<(), SqsError> {
    let host = endpoint
        .strip_prefix(protocol)
        .and_then(|rest| rest.strip_prefix("://"))
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    // RFC 3986's characters only: one that needs escaping cannot be posted to.
    let url_characters = endpoint.bytes().all(|byte| {
        byte.is_ascii_graphic()
            && !matches!(
                byte,
                b'<' | b'>' | b'"' | b'{' | b'}' | b'|' | b'\\' | b'^' | b'`'
            )
    });
    match host {
        Some(host) if !host.is_empty() && url_characters => Ok(()),
        _ => Err(SqsError::sns_invalid_parameter(
            "Endpoint",
            format_args!(
                "{endpoint:?} is not an {protocol}:// URL with a host (and no character a URL \
                 must escape)."
            ),
        )),
    }
}

/// The dead-letter queue an SNS subscription `RedrivePolicy` names.
pub(crate) fn dead_letter_target(realm: &Realm, policy: &str) -> Result<String, SqsError> {
    let invalid = |reason: String| SqsError::sns_invalid_parameter("RedrivePolicy", reason);
    let document: serde_json::Value = serde_json::from_str(policy)
        .map_err(|_| invalid(format!("{policy:?} is not a JSON object.")))?;
    let arn = document
        .get("deadLetterTargetArn")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| invalid("it must name its queue as deadLetterTargetArn.".to_owned()))?;
    if document.as_object().is_some_and(|map| map.len() > 1) {
        return Err(invalid(
            "deadLetterTargetArn is the only member a subscription's RedrivePolicy has.".to_owned(),
        ));
    }
    realm
        .queue_name_from_arn(arn)
        .ok_or_else(|| invalid(format!("{arn:?} is not the ARN of a queue of this server.")))?;
    Ok(arn.to_owned())
}

impl SubscriptionDefinition {
    fn delivery_policy(&self) -> Option<SubscriptionDeliveryPolicy> {
        // Checked when set; a policy that no longer parses is ignored
        // rather than stopping deliveries.
        self.attributes
            .get(DELIVERY_POLICY)
            .and_then(|policy| parse_subscription_policy(policy).ok())
    }
}

impl TopicDefinition {
    /// The policy a push subscription of this topic follows.
    pub(crate) fn push_policy(&self, subscription: &SubscriptionDefinition) -> EffectivePolicy {
        let topic = self
            .attributes
            .get(DELIVERY_POLICY)
            .and_then(|policy| parse_topic_policy(policy).ok().flatten());
        EffectivePolicy::merge(topic.as_ref(), subscription.delivery_policy().as_ref())
    }
}

/// The attributes a delivery-queue message carries beside its body.
pub(crate) fn delivery_attributes(message_type: &str, message_id: &str) -> MessageAttributes {
    MessageAttributes::from([
        (
            MESSAGE_TYPE_ATTRIBUTE.to_owned(),
            MessageAttributeValue::string(message_type),
        ),
        (
            MESSAGE_ID_ATTRIBUTE.to_owned(),
            MessageAttributeValue::string(message_id),
        ),
    ])
}

impl Engine {
    /// Every confirmed or pending push subscription of every topic.
    pub async fn push_subscriptions(&self) -> Result<Vec<PushSubscription>, EngineError> {
        let realm = self.realm();
        let mut subscriptions = Vec::new();
        for record in self.inner.store.topic_list().await? {
            let Ok(name) = record.name.parse::<TopicName>() else {
                continue;
            };
            let definition = TopicDefinition::decode(&record)?;
            for subscription in &definition.subscriptions {
                if !is_push(&subscription.protocol) {
                    continue;
                }
                subscriptions.push(PushSubscription {
                    subscription_arn: realm.subscription_arn(&name, &subscription.id),
                    topic_arn: realm.topic_arn(&name),
                    endpoint: subscription.endpoint.clone(),
                    queue: delivery_queue(&subscription.id),
                    raw_message_delivery: subscription.raw_message_delivery(),
                    policy: definition.push_policy(subscription),
                    dead_letter_queue: subscription.attributes.contains_key(REDRIVE_POLICY),
                });
            }
        }
        Ok(subscriptions)
    }

    /// Checks that the dead-letter queue a subscription's `RedrivePolicy`
    /// names exists, before the subscription is stored with it.
    pub(crate) async fn check_dead_letter_queue(&self, policy: &str) -> Result<(), EngineError> {
        if policy.is_empty() {
            return Ok(());
        }
        let arn = dead_letter_target(self.realm(), policy)?;
        let name = self
            .realm()
            .queue_name_from_arn(&arn)
            .expect("dead_letter_target checked the ARN");
        match self.queue(&name).await {
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => {
                Err(SqsError::sns_invalid_parameter(
                    "RedrivePolicy",
                    format_args!("the dead-letter queue {arn} does not exist."),
                )
                .into())
            }
            other => other.map(drop),
        }
    }

    /// Creates (or brings up to date) a push subscription's delivery queue:
    /// its dead-letter queue is the subscription's.
    pub(crate) async fn ensure_delivery_queue(
        &self,
        subscription: &SubscriptionDefinition,
    ) -> Result<QueueName, EngineError> {
        let queue = delivery_queue(&subscription.id);
        let mut attributes = BTreeMap::from([(
            "MessageRetentionPeriod".to_owned(),
            DELIVERY_RETENTION_SECONDS.to_string(),
        )]);
        if let Some(policy) = subscription.attributes.get(REDRIVE_POLICY) {
            let target = dead_letter_target(self.realm(), policy)?;
            // The worker dead-letters a delivery when its policy is spent;
            // the count only catches a message that crashes every worker.
            attributes.insert(
                "RedrivePolicy".to_owned(),
                serde_json::json!({
                    "deadLetterTargetArn": target,
                    "maxReceiveCount": MAX_MAX_RECEIVE_COUNT,
                })
                .to_string(),
            );
        }
        // Created bare, then set: an existing queue answers a create with
        // no attributes whatever its own are.
        self.create_queue(queue.as_str(), &BTreeMap::new(), &BTreeMap::new())
            .await?;
        if !attributes.contains_key("RedrivePolicy") {
            attributes.insert("RedrivePolicy".to_owned(), String::new());
        }
        self.set_queue_attributes(&queue, &attributes).await?;
        Ok(queue)
    }

    /// Removes a push subscription's delivery queue, with what it still
    /// held.
    pub(crate) async fn drop_delivery_queue(&self, id: &str) -> Result<(), EngineError> {
        match self.delete_queue(&delivery_queue(id)).await {
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => Ok(()),
            other => other,
        }
    }

    /// Queues a pending subscription's confirmation request for its
    /// endpoint. `endpoint` is this server's URL as the subscriber reached
    /// it, for the `SubscribeURL`.
    pub(crate) async fn request_confirmation(
        &self,
        topic: &TopicName,
        subscription: &SubscriptionDefinition,
        endpoint: &str,
    ) -> Result<(), EngineError> {
        let Some(token) = &subscription.confirmation_token else {
            return Ok(());
        };
        let topic_arn = self.realm().topic_arn(topic);
        let message_id = uuid::Uuid::new_v4().to_string();
        let confirmation = Confirmation {
            message_id: &message_id,
            topic_arn: &topic_arn,
            token,
            subscribe_url: format!(
                "{endpoint}/?Action=ConfirmSubscription&TopicArn={topic_arn}&Token={token}"
            ),
            timestamp: self.now(),
        };
        self.send_message(
            &delivery_queue(&subscription.id),
            SendEntry {
                body: confirmation.envelope(),
                attributes: delivery_attributes(SUBSCRIPTION_CONFIRMATION, &message_id),
                ..SendEntry::default()
            },
            &self.realm().account_id,
        )
        .await?;
        Ok(())
    }
}
