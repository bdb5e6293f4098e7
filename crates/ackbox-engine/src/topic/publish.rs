//! Publish and PublishBatch: one message to every subscribed queue, all in
//! one store transaction.
//!
//! SNS delivers to each subscriber on its own, so a subscriber may get a
//! message another never does. ackbox stores a publish's copies for every
//! subscribed queue in one transaction, fsync'd before the answer
//! ([`Store::message_insert_atomic`](crate::store::Store::message_insert_atomic)):
//! every queue has the message or none has. A copy a queue would refuse
//! (too large for its `MaximumMessageSize`, say) fails the whole entry
//! before anything is stored. A subscription's filter policy decides
//! which entries it takes (`ackbox_core::filter_policy`).

use ackbox_core::clock::Timestamp;
use ackbox_core::digest::content_deduplication_id;
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::filter_policy::{FilterPolicy, FilterScope};
use ackbox_core::limits::{FIFO_DEDUPLICATION_WINDOW_SECONDS, MAX_FIFO_TOKEN_LEN};
use ackbox_core::message::{MessageAttributes, message_size, validate_message_attributes};
use ackbox_core::topic_name::TopicName;

use super::archive::ArchivedPublish;
use super::envelope::Notification;
use super::push::{NOTIFICATION, delivery_attributes, delivery_queue, is_push};
use super::{SQS_PROTOCOL, SubscriptionDefinition, TopicDefinition};
use crate::counters;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::queue::Queue;
use crate::send::{SendEntry, is_fifo_token, sequence_number};
use crate::store::{InsertedMessage, MessageInsertParams, NewMessage, StoreError};

/// The longest `Subject` SNS takes.
const MAX_SUBJECT_LEN: usize = 100;

/// One message to publish.
#[derive(Debug, Clone, Default)]
pub struct PublishEntry {
    /// `Message`.
    pub message: String,
    /// `Subject`, carried in the envelope.
    pub subject: Option<String>,
    /// `MessageStructure`: `json` when `message` holds one text per protocol.
    pub message_structure: Option<String>,
    /// `MessageAttributes`.
    pub attributes: MessageAttributes,
    /// `MessageGroupId`: each copy's group — on a FIFO topic the group
    /// whose order every subscribed queue keeps, on a standard one a tenant
    /// of a fair queue.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId` (FIFO topics only).
    pub deduplication_id: Option<String>,
}

/// What a successful publish returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The notification's id, the same in every subscriber's envelope.
    pub message_id: String,
    /// On a FIFO topic: the `SequenceNumber` the first subscribed queue
    /// that took the message gave it (its first publish's, for a
    /// duplicate).
    pub sequence_number: Option<String>,
}

/// What a target queue is for, which says how a message is written to it.
pub(crate) enum TargetKind<'a> {
    /// A subscription's queue, or a push subscription's delivery queue: the
    /// envelope or the raw message, as the subscription asks.
    Subscription(&'a SubscriptionDefinition),
    /// The topic's archive: the publish as [`ArchivedPublish`] records it.
    Archive,
    /// A replay's destination queue that no subscription names.
    Queue { raw_message_delivery: bool },
}

/// A queue a publish (or a replay) writes to, and how it wants the message.
pub(crate) struct Target<'a> {
    pub(crate) kind: TargetKind<'a>,
    pub(crate) filter: Option<(FilterPolicy, FilterScope)>,
    pub(crate) queue: std::sync::Arc<Queue>,
}

/// What makes one copy of a publish the copy it is: the notification's id
/// and time, its deduplication id, and, on a replay, the replay's marks.
pub(crate) struct Stamp<'a> {
    pub(crate) message_id: &'a str,
    pub(crate) timestamp: Timestamp,
    pub(crate) deduplication_id: Option<String>,
    /// Attributes every copy carries besides its own (a replay's).
    pub(crate) marks: &'a MessageAttributes,
}

impl Target<'_> {
    /// Whether the subscription's filter policy lets `entry` through.
    pub(crate) fn takes(&self, entry: &PublishEntry, message: &str) -> bool {
        match &self.filter {
            None => true,
            Some((policy, FilterScope::MessageAttributes)) => {
                policy.matches_attributes(&entry.attributes)
            }
            Some((policy, FilterScope::MessageBody)) => policy.matches_body(message),
        }
    }
}

impl Engine {
    /// Publishes each entry to every queue subscribed to `topic_arn`: each
    /// entry succeeds or fails on its own; the copies of every valid entry,
    /// for every queue, are stored in one transaction. `endpoint` is the
    /// server's URL as the client reached it (for `UnsubscribeURL`).
    pub async fn publish(
        &self,
        topic_arn: &str,
        entries: Vec<PublishEntry>,
        sender_id: &str,
        endpoint: &str,
    ) -> Result<Vec<Result<Published, SqsError>>, EngineError> {
        let name = self.realm().topic_name_from_arn("TopicArn", topic_arn)?;
        let (definition, _) = self.topic_definition(&name).await?;
        let topic_arn = self.realm().topic_arn(&name);
        let targets = self.targets(&name, &definition).await?;
        let archive = targets
            .iter()
            .position(|target| matches!(target.kind, TargetKind::Archive));
        let mut copies: Vec<Vec<NewMessage>> = targets.iter().map(|_| Vec::new()).collect();
        // Per published entry: the target and position of its first copy,
        // whose sequence number a FIFO topic answers with.
        let mut first_copies = Vec::with_capacity(entries.len());
        let mut outcomes = Vec::with_capacity(entries.len());
        for entry in entries {
            let outcome = self
                .fan_out(
                    &definition,
                    &topic_arn,
                    &targets,
                    entry,
                    sender_id,
                    endpoint,
                )
                .map(|(message_id, entry_copies)| {
                    let mut first_copy = None;
                    for (index, (queue_copies, copy)) in
                        copies.iter_mut().zip(entry_copies).enumerate()
                    {
                        if let Some(copy) = copy {
                            if Some(index) != archive {
                                first_copy.get_or_insert((index, queue_copies.len()));
                            }
                            queue_copies.push(copy);
                        }
                    }
                    first_copies.push(first_copy);
                    Published {
                        message_id,
                        sequence_number: None,
                    }
                });
            outcomes.push(outcome);
        }
        let published = outcomes.iter().filter(|outcome| outcome.is_ok()).count() as u64;
        // Each subscribed queue's share, counted once stored (a push
        // subscription's posts are counted by the push worker).
        let queue_subscriptions: Vec<Option<(&SubscriptionDefinition, u64)>> = targets
            .iter()
            .zip(&copies)
            .map(|(target, offered)| match &target.kind {
                TargetKind::Subscription(subscription) if !is_push(&subscription.protocol) => {
                    Some((*subscription, offered.len() as u64))
                }
                _ => None,
            })
            .collect();
        let stored = self.store_copies(&name, targets, copies).await?;
        let fresh = |copies: &Option<Vec<InsertedMessage>>| {
            copies
                .iter()
                .flatten()
                .filter(|copy| !copy.duplicate)
                .count() as u64
        };
        let delivered = stored
            .iter()
            .enumerate()
            .filter(|(index, _)| Some(*index) != archive)
            .map(|(_, copies)| fresh(copies))
            .sum();
        counters::published(&name, published, delivered);
        for (subscription, copies) in queue_subscriptions.iter().zip(&stored) {
            if let Some((subscription, offered)) = subscription {
                counters::subscription_deliveries(
                    &name,
                    &subscription.id,
                    fresh(copies),
                    published - offered,
                );
            }
        }
        if definition.is_fifo() {
            let mut first_copies = first_copies.into_iter();
            for published in outcomes.iter_mut().flatten() {
                published.sequence_number = first_copies
                    .next()
                    .flatten()
                    .and_then(|(target, position)| stored[target].as_ref()?.get(position))
                    .map(|copy| sequence_number(copy.seq));
            }
        }
        Ok(outcomes)
    }

    /// The live queues subscribed to the topic, the delivery queues of its
    /// confirmed push subscriptions, and last its archive, if it keeps one.
    async fn targets<'a>(
        &self,
        topic: &TopicName,
        definition: &'a TopicDefinition,
    ) -> Result<Vec<Target<'a>>, EngineError> {
        let mut targets = Vec::with_capacity(definition.subscriptions.len());
        for subscription in &definition.subscriptions {
            let queue_name = if is_push(&subscription.protocol) {
                if subscription.pending_confirmation {
                    continue;
                }
                delivery_queue(&subscription.id)
            } else {
                let Some(queue_name) = self.realm().queue_name_from_arn(&subscription.endpoint)
                else {
                    continue;
                };
                queue_name
            };
            match self.queue(&queue_name).await {
                Ok(queue) => targets.push(Target {
                    kind: TargetKind::Subscription(subscription),
                    filter: subscription.filter()?,
                    queue,
                }),
                Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => {
                    tracing::warn!(
                        topic = %topic,
                        queue = %queue_name,
                        "a subscribed queue does not exist; the topic delivers nothing to it"
                    );
                    counters::undeliverable(topic, 1);
                }
                Err(other) => return Err(other),
            }
        }
        if let Some(archive) = &definition.archive {
            // Looked up like any queue: an archive dropped since the
            // definition was read is one a publish no longer writes to.
            match self.queue(&archive.queue()).await {
                Ok(queue) => targets.push(Target {
                    kind: TargetKind::Archive,
                    filter: None,
                    queue,
                }),
                Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => {}
                Err(other) => return Err(other),
            }
        }
        Ok(targets)
    }

    /// One entry's id and its copy for each target its filter lets it
    /// through to, in target order; an error when the entry, or any copy
    /// of it, is refused.
    fn fan_out(
        &self,
        definition: &TopicDefinition,
        topic_arn: &str,
        targets: &[Target<'_>],
        entry: PublishEntry,
        sender_id: &str,
        endpoint: &str,
    ) -> Result<(String, Vec<Option<NewMessage>>), SqsError> {
        validate_entry(definition, &entry)?;
        let message_id = uuid::Uuid::new_v4().to_string();
        let message = protocol_text(&entry, SQS_PROTOCOL)?;
        // A FIFO topic's copies carry the publish's deduplication id (or
        // the message's digest), never one derived from the envelope,
        // which differs for every publish.
        let deduplication_id = match &entry.deduplication_id {
            Some(id) => Some(id.clone()),
            None if definition.is_fifo() => Some(content_deduplication_id(&message)),
            None => None,
        };
        let stamp = Stamp {
            message_id: &message_id,
            timestamp: self.now(),
            deduplication_id,
            marks: &MessageAttributes::new(),
        };
        let mut copies = Vec::with_capacity(targets.len());
        for target in targets {
            let copy = target
                .takes(&entry, &message)
                .then(|| self.copy(target, &entry, &stamp, topic_arn, sender_id, endpoint))
                .transpose()?;
            copies.push(copy);
        }
        Ok((message_id, copies))
    }

    /// `entry`'s copy for `target`, ready to store; refused when the
    /// target's queue would refuse it.
    pub(crate) fn copy(
        &self,
        target: &Target<'_>,
        entry: &PublishEntry,
        stamp: &Stamp<'_>,
        topic_arn: &str,
        sender_id: &str,
        endpoint: &str,
    ) -> Result<NewMessage, SqsError> {
        let (subscription, raw, protocol) = match &target.kind {
            TargetKind::Archive => {
                let record = ArchivedPublish::new(
                    entry,
                    stamp.message_id,
                    stamp.timestamp,
                    stamp.deduplication_id.as_ref(),
                );
                // A FIFO archive keeps the publish's group and drops a
                // repeat as the subscribed queues do.
                let fifo = target.queue.name.is_fifo();
                let send = SendEntry {
                    body: record.encode(),
                    group_id: entry.group_id.clone().filter(|_| fifo),
                    deduplication_id: stamp.deduplication_id.clone().filter(|_| fifo),
                    ..SendEntry::default()
                };
                return self
                    .prepare(&target.queue, send, sender_id)
                    .map_err(|refusal| {
                        SqsError::sns_invalid_parameter(
                            "Message",
                            format_args!(
                                "the topic's archive {} refuses the message: {}",
                                target.queue.name, refusal.message
                            ),
                        )
                    });
            }
            TargetKind::Subscription(subscription) => (
                Some(*subscription),
                subscription.raw_message_delivery(),
                subscription.protocol.as_str(),
            ),
            TargetKind::Queue {
                raw_message_delivery,
            } => (None, *raw_message_delivery, SQS_PROTOCOL),
        };
        let subscription_arn =
            subscription.map(|subscription| format!("{topic_arn}:{}", subscription.id));
        let text = protocol_text(entry, protocol)?;
        let push = is_push(protocol);
        let (body, mut attributes) = if raw {
            let attributes = if push {
                delivery_attributes(NOTIFICATION, stamp.message_id)
            } else {
                entry.attributes.clone()
            };
            (text, attributes)
        } else {
            let notification = Notification {
                message_id: stamp.message_id,
                topic_arn,
                subject: entry.subject.as_deref(),
                message: &text,
                timestamp: stamp.timestamp,
                attributes: &entry.attributes,
                unsubscribe_url: subscription_arn
                    .as_ref()
                    .map(|arn| format!("{endpoint}/?Action=Unsubscribe&SubscriptionArn={arn}")),
            };
            let attributes = if push {
                delivery_attributes(NOTIFICATION, stamp.message_id)
            } else {
                MessageAttributes::new()
            };
            (notification.envelope(), attributes)
        };
        attributes.extend(stamp.marks.clone());
        let send = SendEntry {
            body,
            attributes,
            group_id: entry.group_id.clone(),
            deduplication_id: stamp.deduplication_id.clone(),
            ..SendEntry::default()
        };
        self.prepare(&target.queue, send, sender_id)
            .map_err(|refusal| {
                let whose = subscription_arn.map_or_else(
                    || "the replay's".to_owned(),
                    |arn| format!("subscription {arn}'s"),
                );
                SqsError::sns_invalid_parameter(
                    "Message",
                    format_args!(
                        "{whose} queue {} refuses the message: {}",
                        target.queue.name, refusal.message
                    ),
                )
            })
    }

    /// Stores every target's copies in one transaction; what the store did
    /// with each target's copies, in target order (`None` for a target that
    /// took nothing or whose queue was deleted since it was looked up: the
    /// others are stored without it).
    async fn store_copies(
        &self,
        topic: &TopicName,
        targets: Vec<Target<'_>>,
        copies: Vec<Vec<NewMessage>>,
    ) -> Result<Vec<Option<Vec<InsertedMessage>>>, EngineError> {
        let window_start = self.now() - FIFO_DEDUPLICATION_WINDOW_SECONDS * 1_000;
        let mut stored = vec![None; targets.len()];
        let mut pending: Vec<(usize, std::sync::Arc<Queue>, Vec<NewMessage>)> = targets
            .into_iter()
            .zip(copies)
            .enumerate()
            .filter(|(_, (_, messages))| !messages.is_empty())
            .map(|(index, (target, messages))| (index, target.queue, messages))
            .collect();
        loop {
            if pending.is_empty() {
                return Ok(stored);
            }
            let batches = pending
                .iter()
                .map(|(_, queue, messages)| MessageInsertParams {
                    queue_id: queue.id,
                    messages: messages.clone(),
                    deduplication_window_start: window_start,
                })
                .collect();
            match self.inner.store.message_insert_atomic(batches).await {
                Ok(inserted) => {
                    for ((index, queue, _), inserted) in pending.iter().zip(inserted) {
                        let fresh = inserted.iter().filter(|message| !message.duplicate).count();
                        counters::sent(&queue.name, fresh as u64, 0);
                        for _ in 0..fresh {
                            queue.arrivals.notify_one();
                        }
                        stored[*index] = Some(inserted);
                    }
                    return Ok(stored);
                }
                Err(StoreError::QueueNotFound { queue_id }) => {
                    let before = pending.len();
                    pending.retain(|(_, queue, _)| queue.id != queue_id);
                    if pending.len() == before {
                        return Err(StoreError::QueueNotFound { queue_id }.into());
                    }
                    counters::undeliverable(topic, 1);
                }
                Err(other) => return Err(other.into()),
            }
        }
    }
}

/// SNS's checks of one entry: a message, a subject SNS would take, the
/// topic's size limit, attributes SQS could carry, FIFO keys where the
/// topic is FIFO.
fn validate_entry(definition: &TopicDefinition, entry: &PublishEntry) -> Result<(), SqsError> {
    validate_fifo_keys(definition, entry)?;
    if entry.message.is_empty() {
        return Err(SqsError::sns_invalid_parameter(
            "Message",
            "Empty message: a message must hold at least one character.",
        ));
    }
    if let Some(subject) = &entry.subject {
        let printable = subject
            .chars()
            .all(|c| c.is_ascii() && !c.is_ascii_control());
        let starts_well = subject
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation());
        if !printable || !starts_well || subject.chars().count() > MAX_SUBJECT_LEN {
            return Err(SqsError::sns_invalid_parameter(
                "Subject",
                format_args!(
                    "{subject:?} must be 1 to {MAX_SUBJECT_LEN} ASCII characters without line \
                     breaks or control characters, beginning with a letter, number or \
                     punctuation mark."
                ),
            ));
        }
    }
    validate_message_attributes(&entry.attributes)
        .map_err(|refusal| SqsError::sns_invalid_parameter("MessageAttributes", refusal.message))?;
    let size = message_size(&entry.message, &entry.attributes);
    let limit = definition.maximum_message_size();
    if size > limit {
        return Err(SqsError::sns_invalid_parameter(
            "Message",
            format_args!(
                "Message too long: the message and its attributes are {size} bytes; the topic's \
                 MaximumMessageSize is {limit}."
            ),
        ));
    }
    Ok(())
}

/// A FIFO topic's publish needs a group and a deduplication id (or a topic
/// that derives one); a standard topic's takes no deduplication id.
fn validate_fifo_keys(definition: &TopicDefinition, entry: &PublishEntry) -> Result<(), SqsError> {
    for (parameter, token) in [
        ("MessageGroupId", &entry.group_id),
        ("MessageDeduplicationId", &entry.deduplication_id),
    ] {
        if let Some(token) = token.as_deref().filter(|token| !is_fifo_token(token)) {
            return Err(SqsError::sns_invalid_parameter(
                parameter,
                format_args!(
                    "{token:?} must be 1 to {MAX_FIFO_TOKEN_LEN} letters, digits and punctuation \
                     marks."
                ),
            ));
        }
    }
    if !definition.is_fifo() {
        return match &entry.deduplication_id {
            Some(id) => Err(SqsError::sns_invalid_parameter(
                "MessageDeduplicationId",
                format_args!(
                    "{id:?}: the request includes MessageDeduplicationId parameter that is not \
                     valid for this topic type (a standard topic)."
                ),
            )),
            None => Ok(()),
        };
    }
    if entry.group_id.is_none() {
        return Err(SqsError::sns_invalid_parameter(
            "MessageGroupId",
            "The MessageGroupId parameter is required for FIFO topics.",
        ));
    }
    if entry.deduplication_id.is_none() && !definition.content_based_deduplication() {
        return Err(SqsError::sns_invalid_parameter(
            "MessageDeduplicationId",
            "The topic should either have ContentBasedDeduplication enabled or \
             MessageDeduplicationId provided explicitly.",
        ));
    }
    Ok(())
}

/// The text a subscriber of `protocol` gets: the message, or with
/// `MessageStructure` `json` its member for the protocol, else its
/// `default` one.
fn protocol_text(entry: &PublishEntry, protocol: &str) -> Result<String, SqsError> {
    match entry.message_structure.as_deref() {
        None => Ok(entry.message.clone()),
        Some("json") => {
            let structure: serde_json::Value =
                serde_json::from_str(&entry.message).map_err(|_| {
                    SqsError::sns_invalid_parameter(
                        "Message Structure",
                        "JSON message body failed to parse.",
                    )
                })?;
            if structure
                .get("default")
                .and_then(serde_json::Value::as_str)
                .is_none()
            {
                return Err(SqsError::sns_invalid_parameter(
                    "Message Structure",
                    "No default entry in JSON message body: a structured message needs a \
                     \"default\" text.",
                ));
            }
            let text = structure
                .get(protocol)
                .and_then(serde_json::Value::as_str)
                .or_else(|| structure.get("default").and_then(serde_json::Value::as_str))
                .unwrap_or_default();
            Ok(text.to_owned())
        }
        Some(other) => Err(SqsError::sns_invalid_parameter(
            "MessageStructure",
            format_args!("{other:?} is not a message structure; the only one is json."),
        )),
    }
}
