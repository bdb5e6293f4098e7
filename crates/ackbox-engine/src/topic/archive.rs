//! Topic archives (`ArchivePolicy`): every publish kept for a retention
//! period, to be replayed later (`replay.rs`).
//!
//! SNS archives FIFO topics for up to 365 days. An ackbox archive is an
//! ordinary queue, `ackbox-archive-<id>`, whose retention is the policy's:
//! each publish stores its archived record there **in the same transaction
//! as its subscribers' copies**, so the archive holds exactly the publishes
//! that were acknowledged, and the reaper drops what is past retention as
//! it does for any queue — a queue that holds an archive keeps a message
//! up to SNS's 365 days, where any other keeps one 14 days at most.
//! Standard topics can keep an archive too (SNS: FIFO only).
//!
//! Nothing receives from an archive: replays read it in sequence order
//! without leasing (`Store::message_peek` after a cursor), so any number
//! of replays can run over one archive, and ReceiveMessage on it is
//! refused.

use std::collections::BTreeMap;

use ackbox_core::archive_policy;
use ackbox_core::attributes::ARCHIVE_POLICY as QUEUE_ARCHIVE_POLICY;
use ackbox_core::clock::Timestamp;
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::{MAX_MESSAGE_SIZE, MAX_RETENTION_SECONDS};
use ackbox_core::message::MessageAttributes;
use ackbox_core::queue_name::{QueueName, Realm};
use ackbox_core::topic_name::TopicName;
use serde::{Deserialize, Serialize};

use super::publish::PublishEntry;
use crate::engine::Engine;
use crate::error::EngineError;

/// The topic attribute that turns archiving on: `{"MessageRetentionPeriod":
/// "<days>"}`; empty (or `{}`) turns it off and drops the archive.
pub const ARCHIVE_POLICY: &str = "ArchivePolicy";
/// The read-only topic attribute saying since when the archive holds
/// publishes.
pub const BEGINNING_ARCHIVE_TIME: &str = "BeginningArchiveTime";
/// What an archive queue's name starts with; the archive's id follows.
pub const ARCHIVE_QUEUE_PREFIX: &str = "ackbox-archive-";

/// What a queue's archive record is stored under in the topics' table,
/// before the queue's name. No topic name has a colon, so none is read as
/// one of these, nor one of these as a topic.
const QUEUE_RECORD_PREFIX: &str = "queue:";

/// Who keeps an archive, and the replays of it: a topic, in its
/// definition; or a queue, in a record of the same shape (no attributes,
/// no subscriptions) stored beside the topics' under `queue:<name>`, so
/// that replays of both are one code, read and written by revision alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ArchiveOwner {
    Topic(TopicName),
    Queue(QueueName),
}

impl ArchiveOwner {
    /// The key of its definition in the topics' table.
    pub(crate) fn key(&self) -> String {
        match self {
            Self::Topic(name) => name.to_string(),
            Self::Queue(name) => format!("{QUEUE_RECORD_PREFIX}{name}"),
        }
    }

    /// What a missing definition of this owner is called in a `NotFound`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Topic(_) => "Topic",
            Self::Queue(_) => "Archive",
        }
    }

    /// The owner a stored definition's key names.
    pub(crate) fn from_key(key: &str) -> Option<Self> {
        match key.strip_prefix(QUEUE_RECORD_PREFIX) {
            Some(queue) => queue.parse().ok().map(Self::Queue),
            None => key.parse().ok().map(Self::Topic),
        }
    }

    pub(crate) fn arn(&self, realm: &Realm) -> String {
        match self {
            Self::Topic(name) => realm.topic_arn(name),
            Self::Queue(name) => realm.queue_arn(name),
        }
    }

    /// The topic or queue an ARN names, for the request parameter
    /// `parameter`.
    pub(crate) fn from_arn(realm: &Realm, parameter: &str, arn: &str) -> Result<Self, SqsError> {
        if arn.starts_with("arn:aws:sqs:") {
            return realm
                .queue_name_from_arn(arn)
                .map(Self::Queue)
                .ok_or_else(|| {
                    SqsError::sns_invalid_parameter(
                        parameter,
                        format_args!("{arn:?} is not the ARN of a queue of this server."),
                    )
                });
        }
        realm.topic_name_from_arn(parameter, arn).map(Self::Topic)
    }

    /// What is said when it keeps no archive.
    pub(crate) fn without_archive(&self, realm: &Realm) -> SqsError {
        let (arn, attribute) = match self {
            Self::Topic(_) => (self.arn(realm), ARCHIVE_POLICY),
            Self::Queue(_) => (self.arn(realm), QUEUE_ARCHIVE_POLICY),
        };
        SqsError::sns_invalid_parameter(
            "SourceArn",
            format_args!("{arn} keeps no archive to replay; set its {attribute} first."),
        )
    }
}

impl std::fmt::Display for ArchiveOwner {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Topic(name) => write!(formatter, "topic {name}"),
            Self::Queue(name) => write!(formatter, "queue {name}"),
        }
    }
}

/// A topic's archive, as its definition keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ArchiveDefinition {
    /// Names the archive queue.
    pub(crate) id: String,
    /// When archiving began.
    pub(crate) since: Timestamp,
    pub(crate) retention_days: i64,
    /// A FIFO topic's archive is a FIFO queue: it keeps each group's order
    /// and drops a repeated publish as the subscribed queues do, and on the
    /// log store it lives beside them in SQLite, so a publish still writes
    /// every copy in one transaction.
    #[serde(default)]
    pub(crate) fifo: bool,
}

impl ArchiveDefinition {
    pub(crate) fn queue(&self) -> QueueName {
        archive_queue(&self.id, self.fifo)
    }

    pub(crate) fn view(&self) -> ArchiveView {
        ArchiveView {
            queue: self.queue(),
            retention_days: self.retention_days,
            since: self.since,
        }
    }
}

fn archive_queue(id: &str, fifo: bool) -> QueueName {
    let suffix = if fifo { ".fifo" } else { "" };
    format!("{ARCHIVE_QUEUE_PREFIX}{id}{suffix}")
        .parse()
        .expect("an archive id is a UUID, which makes a queue name")
}

/// Whether `queue` is a topic's archive, which only replays read.
pub fn is_archive_queue(queue: &QueueName) -> bool {
    queue.as_str().starts_with(ARCHIVE_QUEUE_PREFIX)
}

/// The retention an `ArchivePolicy` asks for, in days; `None` when it
/// turns archiving off.
pub(crate) fn parse_archive_policy(value: &str) -> Result<Option<i64>, SqsError> {
    archive_policy::parse(value).map_err(|reason| {
        SqsError::sns_invalid_parameter(&format!("Attributes.{ARCHIVE_POLICY}"), reason)
    })
}

/// One publish as its topic's archive keeps it: everything a replay needs
/// to deliver it again as it was first delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ArchivedPublish {
    pub(crate) message_id: String,
    /// When it was published, epoch milliseconds.
    pub(crate) timestamp: Timestamp,
    pub(crate) message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) subject: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message_structure: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) message_attributes: MessageAttributes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message_group_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message_deduplication_id: Option<String>,
}

impl ArchivedPublish {
    pub(crate) fn new(
        entry: &PublishEntry,
        message_id: &str,
        timestamp: Timestamp,
        deduplication_id: Option<&String>,
    ) -> Self {
        Self {
            message_id: message_id.to_owned(),
            timestamp,
            message: entry.message.clone(),
            subject: entry.subject.clone(),
            message_structure: entry.message_structure.clone(),
            message_attributes: entry.attributes.clone(),
            message_group_id: entry.group_id.clone(),
            message_deduplication_id: deduplication_id.cloned(),
        }
    }

    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(self).expect("an archived publish always encodes")
    }

    /// The record an archive message holds; `None` for a body that is not
    /// one (something sent to the archive queue by hand).
    pub(crate) fn decode(body: &str) -> Option<Self> {
        serde_json::from_str(body).ok()
    }

    /// The publish again, to fan out to a replay's destination.
    pub(crate) fn entry(&self) -> PublishEntry {
        PublishEntry {
            message: self.message.clone(),
            subject: self.subject.clone(),
            message_structure: self.message_structure.clone(),
            attributes: self.message_attributes.clone(),
            group_id: self.message_group_id.clone(),
            deduplication_id: self.message_deduplication_id.clone(),
        }
    }
}

/// A topic's archive as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveView {
    /// The queue holding it.
    pub queue: QueueName,
    /// How long it keeps a publish.
    pub retention_days: i64,
    /// Since when it holds publishes.
    pub since: Timestamp,
}

impl Engine {
    /// Topic `name`'s archive, if it keeps one.
    pub async fn topic_archive(
        &self,
        name: &TopicName,
    ) -> Result<Option<ArchiveView>, EngineError> {
        let (definition, _) = self.topic_definition(name).await?;
        Ok(definition.archive.as_ref().map(ArchiveDefinition::view))
    }

    /// The archive a new topic's `ArchivePolicy` asks for, its queue
    /// created: a topic is never stored with an archive that has no queue.
    pub(crate) async fn prepare_archive(
        &self,
        policy: Option<&String>,
        fifo: bool,
    ) -> Result<Option<ArchiveDefinition>, EngineError> {
        let Some(retention_days) = policy
            .map(|policy| parse_archive_policy(policy))
            .transpose()?
            .flatten()
        else {
            return Ok(None);
        };
        let archive = ArchiveDefinition {
            id: uuid::Uuid::new_v4().to_string(),
            since: self.now(),
            retention_days,
            fifo,
        };
        self.ensure_archive_queue(&archive).await?;
        Ok(Some(archive))
    }

    /// SetTopicAttributes `ArchivePolicy`: starts archiving (the queue
    /// first, then the topic that writes to it), changes the retention, or
    /// stops archiving and drops what the archive held.
    pub(crate) async fn set_archive_policy(
        &self,
        name: &TopicName,
        policy: &str,
    ) -> Result<(), EngineError> {
        let retention_days = parse_archive_policy(policy)?;
        let (definition, _) = self.topic_definition(name).await?;
        let fifo = definition.is_fifo();
        let existing = definition.archive;
        let wanted = match (&existing, retention_days) {
            (_, None) => None,
            (Some(existing), Some(retention_days)) => {
                let archive = ArchiveDefinition {
                    retention_days,
                    ..existing.clone()
                };
                self.ensure_archive_queue(&archive).await?;
                Some(archive)
            }
            (None, Some(_)) => self.prepare_archive(Some(&policy.to_owned()), fifo).await?,
        };
        let previous = self
            .change_topic(name, |definition| {
                if wanted.is_some() {
                    definition
                        .attributes
                        .insert(ARCHIVE_POLICY.to_owned(), policy.to_owned());
                } else {
                    definition.attributes.remove(ARCHIVE_POLICY);
                }
                Ok(std::mem::replace(&mut definition.archive, wanted.clone()))
            })
            .await;
        match previous {
            Ok(previous) => {
                // An archive no longer named (turned off, or replaced by a
                // change that raced this one) goes with what it held.
                let kept = wanted.as_ref().map(|archive| &archive.id);
                if let Some(previous) = previous.filter(|previous| Some(&previous.id) != kept) {
                    self.drop_archive_queue(&previous).await?;
                }
                Ok(())
            }
            Err(error) => {
                // The change did not happen: an archive prepared for it is
                // nobody's.
                if let (None, Some(fresh)) = (&existing, &wanted) {
                    self.drop_archive_queue(fresh).await?;
                }
                Err(error)
            }
        }
    }

    /// Creates (or brings up to date) an archive's queue: retention the
    /// policy's, the largest messages a queue takes (a record is the
    /// message and its metadata).
    pub(crate) async fn ensure_archive_queue(
        &self,
        archive: &ArchiveDefinition,
    ) -> Result<QueueName, EngineError> {
        let queue = archive.queue();
        let kind = if archive.fifo {
            BTreeMap::from([("FifoQueue".to_owned(), "true".to_owned())])
        } else {
            BTreeMap::new()
        };
        self.create_queue(queue.as_str(), &kind, &BTreeMap::new())
            .await?;
        let retention = archive_policy::retention_seconds(archive.retention_days);
        let attributes = BTreeMap::from([
            (
                "MessageRetentionPeriod".to_owned(),
                retention.min(MAX_RETENTION_SECONDS).to_string(),
            ),
            (
                "MaximumMessageSize".to_owned(),
                MAX_MESSAGE_SIZE.to_string(),
            ),
        ]);
        self.set_queue_attributes(&queue, &attributes).await?;
        self.keep_as_archive(&queue, retention).await?;
        Ok(queue)
    }

    /// Removes an archive's queue and what it held.
    pub(crate) async fn drop_archive_queue(
        &self,
        archive: &ArchiveDefinition,
    ) -> Result<(), EngineError> {
        match self.delete_queue(&archive.queue()).await {
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_policy_refused_names_the_topic_attribute() {
        let error = parse_archive_policy(r#"{"MessageRetentionPeriod":"366"}"#).unwrap_err();
        assert!(
            error.message.contains("Attributes.ArchivePolicy"),
            "{error:?}"
        );
        assert!(error.message.contains("from 1 to 365"), "{error:?}");
    }

    #[test]
    fn an_archived_publish_reads_back_as_it_was_published() {
        let entry = PublishEntry {
            message: "{\"order\":7}".to_owned(),
            subject: Some("orders".to_owned()),
            message_structure: None,
            attributes: MessageAttributes::from([(
                "kind".to_owned(),
                ackbox_core::message::MessageAttributeValue::string("placed"),
            )]),
            group_id: Some("customer-1".to_owned()),
            deduplication_id: None,
        };
        let record = ArchivedPublish::new(&entry, "id-1", 1_700_000_000_000, Some(&"d".into()));
        let read = ArchivedPublish::decode(&record.encode()).unwrap();
        assert_eq!(read, record);
        let again = read.entry();
        assert_eq!(again.message, entry.message);
        assert_eq!(again.attributes, entry.attributes);
        assert_eq!(again.deduplication_id.as_deref(), Some("d"));
        assert_eq!(ArchivedPublish::decode("not a record"), None);
    }
}
