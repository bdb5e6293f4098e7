//! Topics, SNS-compatible: what a topic is, its subscriptions, and the
//! changes clients make to them. Publishing is `publish.rs`'s, the SNS
//! envelope `envelope.rs`'s.
//!
//! A topic is stored whole — attributes, tags and subscriptions — as one
//! definition with a revision ([`TopicRecord`]); every change reads it,
//! changes it and writes it back over the revision it read, so that two
//! changes at once (on two nodes, say) are applied one after the other and
//! neither is lost.

use std::collections::BTreeMap;

use ackbox_core::clock::Timestamp;
use ackbox_core::delivery_policy::parse_subscription_policy;
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::filter_policy::{FilterPolicy, FilterScope};
use ackbox_core::limits::{MAX_MESSAGE_SIZE, MIN_MESSAGE_SIZE_ATTRIBUTE};
use ackbox_core::queue_name::{QueueName, Realm};
use ackbox_core::topic_name::TopicName;
use serde::{Deserialize, Serialize};

use crate::engine::{Engine, validate_tags};
use crate::error::EngineError;
use crate::store::{StoreError, TopicRecord};

mod archive;
mod definitions;
mod envelope;
mod publish;
mod push;
mod queue_archive;
mod replay;

use archive::parse_archive_policy;
pub use archive::{
    ARCHIVE_POLICY, ARCHIVE_QUEUE_PREFIX, ArchiveView, BEGINNING_ARCHIVE_TIME, is_archive_queue,
};
pub(crate) use archive::{ArchiveDefinition, ArchiveOwner};
pub(crate) use definitions::DefinitionCache;
pub use publish::{PublishEntry, Published};
pub use push::{
    DELIVERY_POLICY, DELIVERY_QUEUE_PREFIX, HTTP_PROTOCOL, HTTPS_PROTOCOL, MESSAGE_ID_ATTRIBUTE,
    MESSAGE_TYPE_ATTRIBUTE, NOTIFICATION, PushSubscription, REDRIVE_POLICY,
    SUBSCRIPTION_CONFIRMATION,
};
use push::{dead_letter_target, is_push, validate_endpoint};
pub(crate) use queue_archive::archive_retention;
pub use replay::{
    REPLAY_ATTRIBUTE, REPLAY_MESSAGE_ID_ATTRIBUTE, REPLAY_POLICY, REPLAY_PUBLISHED_AT_ATTRIBUTE,
    REPLAY_STATUS, Replay, ReplayRequest,
};
use replay::{ReplayTask, parse_replay_policy};

/// The largest message a topic takes unless its `MaximumMessageSize` says
/// otherwise (SNS's default, 256 KiB).
pub const DEFAULT_TOPIC_MESSAGE_SIZE: u32 = 262_144;
/// Subscriptions one topic may have. A topic is stored and read whole, so
/// this bounds what every publish reads.
pub const MAX_SUBSCRIPTIONS_PER_TOPIC: usize = 1_000;
/// Topics or subscriptions one listing page holds (SNS's page size).
pub const LIST_PAGE_SIZE: usize = 100;
/// How often a change is tried again when another change to the same
/// topic came first.
const MAX_REVISION_RACES: u32 = 16;

/// The protocol of subscriptions that deliver to an ackbox queue.
pub const SQS_PROTOCOL: &str = "sqs";
/// The topic attribute that makes a topic FIFO (set at creation only).
pub const FIFO_TOPIC: &str = "FifoTopic";
/// The FIFO topic attribute that derives a deduplication id from the message.
pub const CONTENT_BASED_DEDUPLICATION: &str = "ContentBasedDeduplication";
/// The subscription attribute that delivers the message alone, not the envelope.
pub const RAW_MESSAGE_DELIVERY: &str = "RawMessageDelivery";
/// The subscription attribute that says which messages it takes.
pub const FILTER_POLICY: &str = "FilterPolicy";
/// Where the filter policy looks: `MessageAttributes` (default) or `MessageBody`.
pub const FILTER_POLICY_SCOPE: &str = "FilterPolicyScope";

/// A topic as the store keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TopicDefinition {
    pub(crate) created_at: Timestamp,
    #[serde(default)]
    pub(crate) attributes: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) tags: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) subscriptions: Vec<SubscriptionDefinition>,
    /// Where publishes are archived, if the topic keeps an archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) archive: Option<ArchiveDefinition>,
    /// Replays of the archive: those running, and the latest that ended
    /// (the audit log).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) replays: Vec<ReplayTask>,
}

/// One subscription of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SubscriptionDefinition {
    pub(crate) id: String,
    pub(crate) protocol: String,
    pub(crate) endpoint: String,
    #[serde(default)]
    pub(crate) attributes: BTreeMap<String, String>,
    /// A push subscription's secret, which its endpoint confirms it with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) confirmation_token: Option<String>,
    /// Whether the endpoint has yet to confirm: nothing is published to it.
    #[serde(default)]
    pub(crate) pending_confirmation: bool,
}

impl SubscriptionDefinition {
    /// The subscription's filter policy, if it has one. Policies are
    /// checked when set, so one that no longer parses is a stored
    /// definition gone bad.
    pub(crate) fn filter(&self) -> Result<Option<(FilterPolicy, FilterScope)>, StoreError> {
        let Some(policy) = self
            .attributes
            .get(FILTER_POLICY)
            .filter(|policy| !policy.is_empty())
        else {
            return Ok(None);
        };
        let corrupt = |reason: String| StoreError::Corrupt {
            detail: format!("subscription {}'s filter policy: {reason}", self.id),
        };
        let scope = filter_scope(&self.attributes).map_err(corrupt)?;
        let policy = FilterPolicy::parse(policy, scope).map_err(corrupt)?;
        Ok(Some((policy, scope)))
    }

    pub(crate) fn raw_message_delivery(&self) -> bool {
        self.attributes
            .get(RAW_MESSAGE_DELIVERY)
            .is_some_and(|raw| raw.eq_ignore_ascii_case("true"))
    }
}

impl TopicDefinition {
    fn decode(record: &TopicRecord) -> Result<Self, StoreError> {
        serde_json::from_str(&record.definition).map_err(|error| StoreError::Corrupt {
            detail: format!(
                "topic {}'s definition does not decode: {error}",
                record.name
            ),
        })
    }

    fn encode(&self) -> String {
        serde_json::to_string(self).expect("a topic definition always encodes")
    }

    /// Whether the topic is FIFO: created with `FifoTopic=true` (and a
    /// `.fifo` name).
    pub(crate) fn is_fifo(&self) -> bool {
        self.flag(FIFO_TOPIC)
    }

    /// Whether a FIFO topic derives a publish's deduplication id from its
    /// message when the publisher gives none.
    pub(crate) fn content_based_deduplication(&self) -> bool {
        self.flag(CONTENT_BASED_DEDUPLICATION)
    }

    fn flag(&self, attribute: &str) -> bool {
        self.attributes
            .get(attribute)
            .is_some_and(|value| value.eq_ignore_ascii_case("true"))
    }

    /// The largest message (body and attributes) the topic takes.
    pub(crate) fn maximum_message_size(&self) -> usize {
        self.attributes
            .get("MaximumMessageSize")
            .and_then(|size| size.parse().ok())
            .unwrap_or(DEFAULT_TOPIC_MESSAGE_SIZE) as usize
    }
}

/// A subscription as listings show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSummary {
    /// `SubscriptionArn`, or `PendingConfirmation` for a push subscription
    /// its endpoint has yet to confirm (as SNS lists them).
    pub subscription_arn: String,
    /// The account that owns it.
    pub owner: String,
    /// `sqs`, `http` or `https`.
    pub protocol: String,
    /// Where it delivers: a queue ARN for `sqs`, a URL for `http(s)`.
    pub endpoint: String,
    /// The topic it belongs to.
    pub topic_arn: String,
}

fn is_boolean(value: &str) -> bool {
    value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false")
}

/// Checks that a topic's FIFO attributes fit its kind: a `.fifo` name
/// with `FifoTopic=true`, deduplication settings on FIFO topics only.
fn validate_topic_kind(
    name: &TopicName,
    attributes: &BTreeMap<String, String>,
) -> Result<(), SqsError> {
    let fifo = attributes
        .get(FIFO_TOPIC)
        .is_some_and(|fifo| fifo.eq_ignore_ascii_case("true"));
    if name.is_fifo() != fifo {
        return Err(SqsError::sns_invalid_parameter(
            "Attributes.FifoTopic",
            format_args!(
                "{name}: Fifo Topic names must end with .fifo and they must be created with the \
                 FifoTopic attribute set to true; standard topic names must not end with .fifo."
            ),
        ));
    }
    if !fifo {
        for attribute in [CONTENT_BASED_DEDUPLICATION, "FifoThroughputScope"] {
            if attributes.contains_key(attribute) {
                return Err(SqsError::sns_invalid_parameter(
                    &format!("Attributes.{attribute}"),
                    format_args!(
                        "{name} is a standard topic; {attribute} is for FIFO topics only."
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Checks one topic attribute a client sets (at creation or later).
fn validate_topic_attribute(name: &str, value: &str, creating: bool) -> Result<(), SqsError> {
    let invalid =
        |reason: String| SqsError::sns_invalid_parameter(&format!("Attributes.{name}"), reason);
    match name {
        "DisplayName" if value.chars().count() > 100 => Err(invalid(format!(
            "a display name is at most 100 characters; got {}.",
            value.chars().count()
        ))),
        "DisplayName" | "KmsMasterKeyId" => Ok(()),
        "Policy" | "DeliveryPolicy" | "DataProtectionPolicy" => {
            match serde_json::from_str::<serde_json::Value>(value) {
                Ok(serde_json::Value::Object(_)) => Ok(()),
                _ => Err(invalid(format!("{value:?} is not a JSON object."))),
            }
        }
        "SignatureVersion" if matches!(value, "1" | "2") => Ok(()),
        "SignatureVersion" => Err(invalid(format!("{value:?} must be 1 or 2."))),
        "TracingConfig" if matches!(value, "PassThrough" | "Active") => Ok(()),
        "TracingConfig" => Err(invalid(format!("{value:?} must be PassThrough or Active."))),
        "MaximumMessageSize" => match value.parse::<u32>() {
            Ok(size) if (MIN_MESSAGE_SIZE_ATTRIBUTE..=MAX_MESSAGE_SIZE).contains(&size) => Ok(()),
            _ => Err(invalid(format!(
                "{value:?} must be a whole number of bytes from {MIN_MESSAGE_SIZE_ATTRIBUTE} to \
                 {MAX_MESSAGE_SIZE}."
            ))),
        },
        FIFO_TOPIC if !creating => Err(invalid(
            "a topic is FIFO or standard from its creation on; create another topic.".to_owned(),
        )),
        FIFO_TOPIC | CONTENT_BASED_DEDUPLICATION if is_boolean(value) => Ok(()),
        FIFO_TOPIC | CONTENT_BASED_DEDUPLICATION => {
            Err(invalid(format!("{value:?} must be true or false.")))
        }
        ARCHIVE_POLICY => parse_archive_policy(value).map(drop),
        "FifoThroughputScope" if matches!(value, "Topic" | "MessageGroup") => Ok(()),
        "FifoThroughputScope" => Err(invalid(format!("{value:?} must be Topic or MessageGroup."))),
        other => Err(SqsError::sns_invalid_parameter(
            "AttributeName",
            format_args!(
                "{other:?} is not a topic attribute ackbox sets (DisplayName, Policy, \
                 DeliveryPolicy, DataProtectionPolicy, KmsMasterKeyId, SignatureVersion, \
                 TracingConfig, MaximumMessageSize, FifoTopic, ContentBasedDeduplication, \
                 FifoThroughputScope, ArchivePolicy)."
            ),
        )),
    }
}

/// The scope a subscription's attributes give its filter policy
/// (`MessageAttributes` unless `FilterPolicyScope` says otherwise).
fn filter_scope(attributes: &BTreeMap<String, String>) -> Result<FilterScope, String> {
    attributes
        .get(FILTER_POLICY_SCOPE)
        .map_or(Ok(FilterScope::MessageAttributes), |scope| {
            FilterScope::parse(scope)
        })
}

/// Checks that an endpoint may subscribe to a topic: FIFO queues to FIFO
/// topics only, as in SNS; and — unlike SNS, which since 2023 also lets
/// standard queues subscribe to FIFO topics — standard queues to standard
/// topics only, because a FIFO topic's deduplication is done by its
/// subscribed queues' own deduplication windows and a standard queue has
/// none. A push endpoint (`queue` is `None`) to a standard topic only, as
/// in SNS.
fn validate_endpoint_kind(
    topic: &TopicDefinition,
    queue: Option<&QueueName>,
    endpoint: &str,
) -> Result<(), SqsError> {
    match (topic.is_fifo(), queue.map(QueueName::is_fifo)) {
        (false, Some(true)) => Err(SqsError::sns_invalid_parameter(
            "Endpoint",
            format_args!(
                "{endpoint} is a FIFO queue; FIFO SQS queues can not be subscribed to standard \
                 SNS topics."
            ),
        )),
        (true, Some(false)) => Err(SqsError::sns_invalid_parameter(
            "Endpoint",
            format_args!(
                "{endpoint} is a standard queue; a FIFO topic delivers to FIFO queues only in \
                 ackbox (it deduplicates through each queue's deduplication window)."
            ),
        )),
        (true, None) => Err(SqsError::sns_invalid_parameter(
            "Protocol",
            "a FIFO topic delivers to FIFO SQS queues only, not to http or https endpoints.",
        )),
        _ => Ok(()),
    }
}

/// A fresh secret for a push subscription's confirmation.
fn confirmation_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// A subscription as an operator sees it (the dashboard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionView {
    /// Its ARN, pending or not.
    pub subscription_arn: String,
    /// `sqs`, `http` or `https`.
    pub protocol: String,
    /// A queue ARN or a URL.
    pub endpoint: String,
    /// Whether its endpoint has yet to confirm it.
    pub pending_confirmation: bool,
    /// Whether it delivers the message alone, not the envelope.
    pub raw_message_delivery: bool,
    /// Its filter policy, if it has one.
    pub filter_policy: Option<String>,
    /// Its dead-letter queue (`RedrivePolicy`), if it has one.
    pub dead_letter_queue: Option<QueueName>,
    /// A push subscription's delivery queue: its backlog.
    pub delivery_queue: Option<QueueName>,
}

/// A new subscription, as [`Engine::subscribe`] made or found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribed {
    /// Its ARN.
    pub subscription_arn: String,
    /// Whether its endpoint has yet to confirm it (push subscriptions).
    pub pending_confirmation: bool,
}

/// Checks one attribute a client sets on a subscription of `protocol`,
/// against the others it will sit beside (a policy is checked in its
/// scope).
fn validate_subscription_attribute(
    realm: &Realm,
    protocol: &str,
    name: &str,
    value: &str,
    others: &BTreeMap<String, String>,
) -> Result<(), SqsError> {
    let invalid =
        |reason: String| SqsError::sns_invalid_parameter(&format!("Attributes.{name}"), reason);
    match name {
        FILTER_POLICY if value.is_empty() => Ok(()),
        FILTER_POLICY => {
            let scope = filter_scope(others).map_err(invalid)?;
            FilterPolicy::parse(value, scope).map(drop).map_err(invalid)
        }
        FILTER_POLICY_SCOPE => {
            let scope = FilterScope::parse(value).map_err(invalid)?;
            match others
                .get(FILTER_POLICY)
                .filter(|policy| !policy.is_empty())
            {
                Some(policy) => FilterPolicy::parse(policy, scope)
                    .map(drop)
                    .map_err(|reason| {
                        invalid(format!(
                            "the subscription's FilterPolicy does not fit this scope: {reason}"
                        ))
                    }),
                None => Ok(()),
            }
        }
        RAW_MESSAGE_DELIVERY if is_boolean(value) => Ok(()),
        DELIVERY_POLICY if !is_push(protocol) => Err(invalid(format!(
            "a DeliveryPolicy is for http and https subscriptions; this one is {protocol}."
        ))),
        DELIVERY_POLICY => parse_subscription_policy(value).map(drop).map_err(invalid),
        REDRIVE_POLICY if value.is_empty() => Ok(()),
        REDRIVE_POLICY => dead_letter_target(realm, value).map(drop),
        REPLAY_POLICY if value.is_empty() => Ok(()),
        REPLAY_POLICY => parse_replay_policy(value).map(drop),
        RAW_MESSAGE_DELIVERY => Err(SqsError::sns_invalid_parameter(
            "Attributes.RawMessageDelivery",
            format_args!("{value:?} must be true or false."),
        )),
        other => Err(SqsError::sns_invalid_parameter(
            "AttributeName",
            format_args!(
                "{other:?} is not a subscription attribute this version of ackbox sets \
                 (RawMessageDelivery, FilterPolicy, FilterPolicyScope, DeliveryPolicy, \
                 RedrivePolicy, ReplayPolicy)."
            ),
        )),
    }
}

impl Engine {
    fn topic_name(&self, topic_arn: &str) -> Result<TopicName, SqsError> {
        self.realm().topic_name_from_arn("TopicArn", topic_arn)
    }

    /// The topic `name` and the revision read, or `NotFound`.
    pub(crate) async fn topic_definition(
        &self,
        name: &TopicName,
    ) -> Result<(TopicDefinition, i64), EngineError> {
        self.owner_definition(&ArchiveOwner::Topic(name.clone()))
            .await
    }

    /// The definition of an archive's owner and the revision read, or
    /// `NotFound`.
    pub(crate) async fn owner_definition(
        &self,
        owner: &ArchiveOwner,
    ) -> Result<(TopicDefinition, i64), EngineError> {
        Ok(self
            .definition(&owner.key())
            .await?
            .ok_or_else(|| SqsError::sns_not_found(owner.kind()))?)
    }

    /// Applies `change` to topic `name` and stores the result over the
    /// revision it read, reading again when another change came first.
    async fn change_topic<T>(
        &self,
        name: &TopicName,
        change: impl FnMut(&mut TopicDefinition) -> Result<T, SqsError>,
    ) -> Result<T, EngineError> {
        self.change_owner(&ArchiveOwner::Topic(name.clone()), change)
            .await
    }

    /// [`Engine::change_topic`] for any archive's owner.
    pub(crate) async fn change_owner<T>(
        &self,
        owner: &ArchiveOwner,
        mut change: impl FnMut(&mut TopicDefinition) -> Result<T, SqsError>,
    ) -> Result<T, EngineError> {
        let key = owner.key();
        for _ in 0..MAX_REVISION_RACES {
            let (mut definition, revision) = self
                .stored_definition(&key)
                .await?
                .ok_or_else(|| SqsError::sns_not_found(owner.kind()))?;
            let answer = change(&mut definition)?;
            if self
                .write_definition(&key, &definition, Some(revision))
                .await?
            {
                return Ok(answer);
            }
        }
        Err(StoreError::Unavailable {
            reason: "a topic kept changing under this change; retry",
        }
        .into())
    }

    /// CreateTopic: the topic's ARN, new or existing (an existing topic
    /// asked for with other attributes is refused, as SNS does).
    pub async fn create_topic(
        &self,
        name: &str,
        attributes: &BTreeMap<String, String>,
        tags: &BTreeMap<String, String>,
    ) -> Result<String, EngineError> {
        let name: TopicName = name.parse()?;
        for (attribute, value) in attributes {
            validate_topic_attribute(attribute, value, true)?;
        }
        validate_topic_kind(&name, attributes)?;
        validate_tags(tags)?;
        let arn = self.realm().topic_arn(&name);
        let mut settings = attributes.clone();
        if name.is_fifo() {
            // Kept in one spelling, so that `is_fifo` and listings agree.
            settings.insert(FIFO_TOPIC.to_owned(), "true".to_owned());
            settings
                .entry(CONTENT_BASED_DEDUPLICATION.to_owned())
                .or_insert_with(|| "false".to_owned());
        } else {
            settings.remove(FIFO_TOPIC);
        }
        let archive = self
            .prepare_archive(settings.get(ARCHIVE_POLICY), name.is_fifo())
            .await?;
        let definition = TopicDefinition {
            created_at: self.now(),
            attributes: settings.clone(),
            tags: tags.clone(),
            archive: archive.clone(),
            ..TopicDefinition::default()
        };
        if self
            .write_definition(name.as_str(), &definition, None)
            .await?
        {
            return Ok(arn);
        }
        if let Some(archive) = &archive {
            // The topic exists: the archive prepared for a new one is nobody's.
            self.drop_archive_queue(archive).await?;
        }
        let (existing, _) = self.topic_definition(&name).await?;
        let differs = settings
            .iter()
            .any(|(attribute, value)| existing.attributes.get(attribute) != Some(value));
        if differs {
            return Err(SqsError::sns_invalid_parameter(
                "Attributes",
                "Topic already exists with different attributes",
            )
            .into());
        }
        Ok(arn)
    }

    /// DeleteTopic: the topic and its subscriptions. Deleting a topic that
    /// does not exist succeeds, as in SNS.
    pub async fn delete_topic(&self, topic_arn: &str) -> Result<(), EngineError> {
        let name = self.topic_name(topic_arn)?;
        let definition = match self.topic_definition(&name).await {
            Ok((definition, _)) => definition,
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::NotFound => {
                TopicDefinition::default()
            }
            Err(other) => return Err(other),
        };
        self.delete_definition(name.as_str()).await?;
        for subscription in definition.subscriptions {
            if is_push(&subscription.protocol) {
                self.drop_delivery_queue(&subscription.id).await?;
            }
        }
        if let Some(archive) = &definition.archive {
            self.drop_archive_queue(archive).await?;
        }
        Ok(())
    }

    /// ListTopics: every topic's ARN, in name order.
    pub async fn list_topics(&self) -> Result<Vec<String>, EngineError> {
        let realm = self.realm();
        let records = self.inner.store.topic_list().await?;
        Ok(records
            .into_iter()
            .filter_map(|record| record.name.parse::<TopicName>().ok())
            .map(|name| realm.topic_arn(&name))
            .collect())
    }

    /// GetTopicAttributes: what SNS reports, with the defaults of what was
    /// never set.
    pub async fn topic_attributes(
        &self,
        topic_arn: &str,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        let name = self.topic_name(topic_arn)?;
        let (definition, _) = self.topic_definition(&name).await?;
        let realm = self.realm();
        let arn = realm.topic_arn(&name);
        let mut attributes = definition.attributes.clone();
        attributes
            .entry("Policy".to_owned())
            .or_insert_with(|| default_policy(&arn, &realm.account_id));
        attributes.entry("DisplayName".to_owned()).or_default();
        attributes.insert(
            "EffectiveDeliveryPolicy".to_owned(),
            attributes
                .get("DeliveryPolicy")
                .cloned()
                .unwrap_or_else(|| DEFAULT_DELIVERY_POLICY.to_owned()),
        );
        attributes.insert(
            "SubscriptionsConfirmed".to_owned(),
            definition.subscriptions.len().to_string(),
        );
        attributes.insert("SubscriptionsPending".to_owned(), "0".to_owned());
        attributes.insert("SubscriptionsDeleted".to_owned(), "0".to_owned());
        attributes.insert("Owner".to_owned(), realm.account_id.clone());
        attributes.insert("TopicArn".to_owned(), arn);
        if let Some(archive) = &definition.archive {
            attributes.insert(
                BEGINNING_ARCHIVE_TIME.to_owned(),
                ackbox_core::utc::rfc3339_millis(archive.since),
            );
        }
        Ok(attributes)
    }

    /// SetTopicAttributes: one attribute.
    pub async fn set_topic_attribute(
        &self,
        topic_arn: &str,
        attribute: &str,
        value: &str,
    ) -> Result<(), EngineError> {
        let name = self.topic_name(topic_arn)?;
        validate_topic_attribute(attribute, value, false)?;
        if attribute == ARCHIVE_POLICY {
            return self.set_archive_policy(&name, value).await;
        }
        self.change_topic(&name, |definition| {
            let mut attributes = definition.attributes.clone();
            attributes.insert(attribute.to_owned(), value.to_owned());
            validate_topic_kind(&name, &attributes)?;
            definition.attributes = attributes;
            Ok(())
        })
        .await
    }

    /// TagResource on a topic.
    pub async fn tag_topic(
        &self,
        topic_arn: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), EngineError> {
        let name = self.realm().topic_name_from_arn("ResourceArn", topic_arn)?;
        self.change_topic(&name, |definition| {
            let mut merged = definition.tags.clone();
            merged.extend(tags.iter().map(|(key, value)| (key.clone(), value.clone())));
            validate_tags(&merged)?;
            definition.tags = merged;
            Ok(())
        })
        .await
    }

    /// UntagResource on a topic.
    pub async fn untag_topic(&self, topic_arn: &str, keys: &[String]) -> Result<(), EngineError> {
        let name = self.realm().topic_name_from_arn("ResourceArn", topic_arn)?;
        self.change_topic(&name, |definition| {
            for key in keys {
                definition.tags.remove(key);
            }
            Ok(())
        })
        .await
    }

    /// ListTagsForResource on a topic.
    pub async fn topic_tags(
        &self,
        topic_arn: &str,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        let name = self.realm().topic_name_from_arn("ResourceArn", topic_arn)?;
        Ok(self.topic_definition(&name).await?.0.tags)
    }

    /// Subscribe: the subscription, new or — for the same protocol, endpoint
    /// and attributes — existing. A push subscription (`http`, `https`) is
    /// pending until its endpoint confirms it; `server_url` is this server's
    /// URL as the client reached it, for the confirmation's `SubscribeURL`.
    pub async fn subscribe(
        &self,
        topic_arn: &str,
        protocol: &str,
        endpoint: Option<&str>,
        attributes: &BTreeMap<String, String>,
        server_url: &str,
    ) -> Result<Subscribed, EngineError> {
        let name = self.topic_name(topic_arn)?;
        let endpoint = endpoint.ok_or_else(|| {
            SqsError::sns_invalid_parameter(
                "Endpoint",
                format_args!("a {protocol} subscription needs an endpoint."),
            )
        })?;
        let queue = match protocol {
            SQS_PROTOCOL => Some(self.subscribed_queue(endpoint)?),
            HTTP_PROTOCOL | HTTPS_PROTOCOL => {
                validate_endpoint(protocol, endpoint)?;
                None
            }
            other => {
                return Err(SqsError::sns_invalid_parameter(
                    "Protocol",
                    format_args!(
                        "{other:?} is not a protocol this version of ackbox delivers to; it \
                         delivers to sqs (an ackbox queue's ARN), http and https (a URL)."
                    ),
                )
                .into());
            }
        };
        for (attribute, value) in attributes {
            validate_subscription_attribute(self.realm(), protocol, attribute, value, attributes)?;
        }
        if let Some(policy) = attributes.get(REDRIVE_POLICY) {
            self.check_dead_letter_queue(policy).await?;
        }
        let fresh = SubscriptionDefinition {
            id: uuid::Uuid::new_v4().to_string(),
            protocol: protocol.to_owned(),
            endpoint: endpoint.to_owned(),
            attributes: attributes.clone(),
            confirmation_token: is_push(protocol).then(confirmation_token),
            pending_confirmation: is_push(protocol),
        };
        let subscription = self
            .change_topic(&name, |definition| {
                validate_endpoint_kind(definition, queue.as_ref(), endpoint)?;
                if let Some(existing) = definition.subscriptions.iter().find(|subscription| {
                    subscription.protocol == protocol && subscription.endpoint == endpoint
                }) {
                    let differs = attributes.iter().any(|(attribute, value)| {
                        existing.attributes.get(attribute) != Some(value)
                    });
                    return if differs {
                        Err(SqsError::sns_invalid_parameter(
                            "Attributes",
                            "Subscription already exists with different attributes",
                        ))
                    } else {
                        Ok(existing.clone())
                    };
                }
                if definition.subscriptions.len() >= MAX_SUBSCRIPTIONS_PER_TOPIC {
                    return Err(SqsError::sns_invalid_parameter(
                        "TopicArn",
                        format_args!(
                            "the topic has {MAX_SUBSCRIPTIONS_PER_TOPIC} subscriptions, as many as \
                             one topic may have."
                        ),
                    ));
                }
                definition.subscriptions.push(fresh.clone());
                Ok(fresh.clone())
            })
            .await?;
        if is_push(protocol) {
            // After the subscription is stored: a retried Subscribe finds it
            // and finishes what a failure here left undone.
            self.ensure_delivery_queue(&subscription).await?;
            if subscription.pending_confirmation {
                self.request_confirmation(&name, &subscription, server_url)
                    .await?;
            }
        }
        Ok(Subscribed {
            subscription_arn: self.realm().subscription_arn(&name, &subscription.id),
            pending_confirmation: subscription.pending_confirmation,
        })
    }

    /// ConfirmSubscription: the endpoint of a pending push subscription
    /// proves it got the confirmation request by returning its token.
    /// Confirming again succeeds.
    pub async fn confirm_subscription(
        &self,
        topic_arn: &str,
        token: &str,
    ) -> Result<String, EngineError> {
        let name = self.topic_name(topic_arn)?;
        let id = self
            .change_topic(&name, |definition| {
                let subscription = definition
                    .subscriptions
                    .iter_mut()
                    .find(|subscription| subscription.confirmation_token.as_deref() == Some(token))
                    .ok_or_else(|| {
                        SqsError::sns_invalid_parameter(
                            "Token",
                            "Invalid token: it confirms no subscription of this topic.",
                        )
                    })?;
                subscription.pending_confirmation = false;
                Ok(subscription.id.clone())
            })
            .await?;
        Ok(self.realm().subscription_arn(&name, &id))
    }

    /// The queue an sqs subscription's endpoint names.
    fn subscribed_queue(&self, endpoint: &str) -> Result<QueueName, SqsError> {
        self.realm().queue_name_from_arn(endpoint).ok_or_else(|| {
            SqsError::sns_invalid_parameter(
                "Endpoint",
                format_args!(
                    "{endpoint:?} is not the ARN of a queue of this server (arn:aws:sqs:{}:{}:<name>).",
                    self.realm().region,
                    self.realm().account_id
                ),
            )
        })
    }

    /// Unsubscribe, with a push subscription's delivery queue and what it
    /// still held. A subscription already gone succeeds, as in SNS.
    pub async fn unsubscribe(&self, subscription_arn: &str) -> Result<(), EngineError> {
        let (name, id) = self.realm().subscription_from_arn(subscription_arn)?;
        let removed = self
            .change_topic(&name, |definition| {
                let removed = definition
                    .subscriptions
                    .iter()
                    .position(|subscription| subscription.id == id)
                    .map(|index| definition.subscriptions.remove(index));
                Ok(removed)
            })
            .await;
        match removed {
            Ok(Some(subscription)) if is_push(&subscription.protocol) => {
                self.drop_delivery_queue(&subscription.id).await
            }
            Ok(_) => Ok(()),
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::NotFound => Ok(()),
            Err(other) => Err(other),
        }
    }

    /// ListSubscriptions (every topic) or ListSubscriptionsByTopic.
    pub async fn list_subscriptions(
        &self,
        topic_arn: Option<&str>,
    ) -> Result<Vec<SubscriptionSummary>, EngineError> {
        let records = match topic_arn {
            Some(arn) => {
                let name = self.topic_name(arn)?;
                vec![
                    self.inner
                        .store
                        .topic_get(name.as_str())
                        .await?
                        .ok_or_else(|| SqsError::sns_not_found("Topic"))?,
                ]
            }
            None => self.inner.store.topic_list().await?,
        };
        let realm = self.realm();
        let mut summaries = Vec::new();
        for record in records {
            let Ok(name) = record.name.parse::<TopicName>() else {
                continue;
            };
            let definition = TopicDefinition::decode(&record)?;
            summaries.extend(definition.subscriptions.into_iter().map(|subscription| {
                SubscriptionSummary {
                    subscription_arn: if subscription.pending_confirmation {
                        "PendingConfirmation".to_owned()
                    } else {
                        realm.subscription_arn(&name, &subscription.id)
                    },
                    owner: realm.account_id.clone(),
                    protocol: subscription.protocol,
                    endpoint: subscription.endpoint,
                    topic_arn: realm.topic_arn(&name),
                }
            }));
        }
        Ok(summaries)
    }

    /// Every subscription of topic `name`, pending ones with their ARNs.
    pub async fn topic_subscriptions(
        &self,
        name: &TopicName,
    ) -> Result<Vec<SubscriptionView>, EngineError> {
        let (definition, _) = self.topic_definition(name).await?;
        Ok(definition
            .subscriptions
            .into_iter()
            .map(|subscription| SubscriptionView {
                subscription_arn: self.realm().subscription_arn(name, &subscription.id),
                delivery_queue: is_push(&subscription.protocol)
                    .then(|| push::delivery_queue(&subscription.id)),
                raw_message_delivery: subscription.raw_message_delivery(),
                filter_policy: subscription.attributes.get(FILTER_POLICY).cloned(),
                dead_letter_queue: subscription
                    .attributes
                    .get(REDRIVE_POLICY)
                    .and_then(|policy| dead_letter_target(self.realm(), policy).ok())
                    .and_then(|arn| self.realm().queue_name_from_arn(&arn)),
                protocol: subscription.protocol,
                endpoint: subscription.endpoint,
                pending_confirmation: subscription.pending_confirmation,
            })
            .collect())
    }

    /// GetSubscriptionAttributes.
    pub async fn subscription_attributes(
        &self,
        subscription_arn: &str,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        let (name, id) = self.realm().subscription_from_arn(subscription_arn)?;
        let (definition, _) = self
            .topic_definition(&name)
            .await
            .map_err(subscription_not_found)?;
        let subscription = definition
            .subscriptions
            .iter()
            .find(|subscription| subscription.id == id)
            .cloned()
            .ok_or_else(|| SqsError::sns_not_found("Subscription"))?;
        let realm = self.realm();
        let mut attributes = subscription.attributes.clone();
        attributes
            .entry(RAW_MESSAGE_DELIVERY.to_owned())
            .or_insert_with(|| "false".to_owned());
        if is_push(&subscription.protocol) {
            let policy = definition.push_policy(&subscription);
            attributes.insert(
                "EffectiveDeliveryPolicy".to_owned(),
                serde_json::json!({
                    "healthyRetryPolicy": policy.retry,
                    "throttlePolicy": {"maxReceivesPerSecond": policy.max_receives_per_second},
                    "requestPolicy": {"headerContentType": policy.content_type},
                })
                .to_string(),
            );
        }
        if let Some(status) = definition.replay_status(&id) {
            attributes.insert(REPLAY_STATUS.to_owned(), status.to_owned());
        }
        let pending = subscription.pending_confirmation.to_string();
        let authenticated = (!is_push(&subscription.protocol)).to_string();
        for (attribute, value) in [
            ("SubscriptionArn", realm.subscription_arn(&name, &id)),
            ("TopicArn", realm.topic_arn(&name)),
            ("Owner", realm.account_id.clone()),
            ("Protocol", subscription.protocol),
            ("Endpoint", subscription.endpoint),
            ("ConfirmationWasAuthenticated", authenticated),
            ("PendingConfirmation", pending),
        ] {
            attributes.insert(attribute.to_owned(), value);
        }
        Ok(attributes)
    }

    /// SetSubscriptionAttributes: one attribute. A `ReplayPolicy` starts a
    /// replay of the topic's archive to the subscription (for
    /// `requested_by`; `server_url` is this server's as the caller reached
    /// it), ending any it had running; an empty one only ends them.
    pub async fn set_subscription_attribute(
        &self,
        subscription_arn: &str,
        attribute: &str,
        value: &str,
        requested_by: &str,
        server_url: &str,
    ) -> Result<(), EngineError> {
        let (name, id) = self.realm().subscription_from_arn(subscription_arn)?;
        if attribute == REDRIVE_POLICY {
            self.check_dead_letter_queue(value).await?;
        }
        let subscription = self
            .change_topic(&name, |definition| {
                let subscription = definition
                    .subscriptions
                    .iter_mut()
                    .find(|subscription| subscription.id == id)
                    .ok_or_else(|| SqsError::sns_not_found("Subscription"))?;
                validate_subscription_attribute(
                    self.realm(),
                    &subscription.protocol,
                    attribute,
                    value,
                    &subscription.attributes,
                )?;
                if attribute == REDRIVE_POLICY && value.is_empty() {
                    subscription.attributes.remove(attribute);
                } else {
                    subscription
                        .attributes
                        .insert(attribute.to_owned(), value.to_owned());
                }
                Ok(subscription.clone())
            })
            .await
            .map_err(subscription_not_found)?;
        if is_push(&subscription.protocol) && attribute == REDRIVE_POLICY {
            self.ensure_delivery_queue(&subscription).await?;
        }
        if attribute == REPLAY_POLICY {
            self.cancel_subscription_replays(&name, &id).await?;
            if !value.is_empty() {
                let (start, end) = parse_replay_policy(value)?;
                self.start_replay(ReplayRequest {
                    source_arn: self.realm().topic_arn(&name),
                    destination_arn: subscription_arn.to_owned(),
                    start,
                    end,
                    filter_policy: None,
                    raw_message_delivery: false,
                    rate: None,
                    requested_by: requested_by.to_owned(),
                    endpoint: server_url.to_owned(),
                })
                .await?;
            }
        }
        Ok(())
    }
}

/// A subscription's topic that is gone is a subscription that is gone.
fn subscription_not_found(error: EngineError) -> EngineError {
    match error {
        EngineError::Sqs(error) if error.code == ErrorCode::NotFound => {
            SqsError::sns_not_found("Subscription").into()
        }
        other => other,
    }
}

/// SNS's delivery policy for topics that set none.
const DEFAULT_DELIVERY_POLICY: &str = r#"{"http":{"defaultHealthyRetryPolicy":{"minDelayTarget":20,"maxDelayTarget":20,"numRetries":3,"numMaxDelayRetries":0,"numNoDelayRetries":0,"numMinDelayRetries":0,"backoffFunction":"linear"},"disableSubscriptionOverrides":false,"defaultRequestPolicy":{"headerContentType":"text/plain; charset=UTF-8"}}}"#;

/// SNS's access policy for topics that set none: the owner may do anything.
fn default_policy(topic_arn: &str, account_id: &str) -> String {
    serde_json::json!({
        "Version": "2008-10-17",
        "Id": "__default_policy_ID",
        "Statement": [{
            "Sid": "__default_statement_ID",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": [
                "SNS:GetTopicAttributes", "SNS:SetTopicAttributes", "SNS:AddPermission",
                "SNS:RemovePermission", "SNS:DeleteTopic", "SNS:Subscribe",
                "SNS:ListSubscriptionsByTopic", "SNS:Publish"
            ],
            "Resource": topic_arn,
            "Condition": {"StringEquals": {"AWS:SourceOwner": account_id}}
        }]
    })
    .to_string()
}
