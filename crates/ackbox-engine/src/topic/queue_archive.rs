//! Queue archives (`AckBoxArchivePolicy`, ackbox's own attribute): every
//! message sent to a queue kept for a retention period, replayed as a
//! topic's archive is (`replay.rs`, with the queue's ARN as the source).
//!
//! A queue's archive is a queue, `ackbox-archive-q<queue id>[.fifo]`,
//! written **in the send's transaction** (`Store::message_insert_atomic`):
//! it holds exactly the sends that were acknowledged, and a FIFO send
//! dropped as a duplicate is dropped from both with the same deduplication
//! key. The archive and its replays are recorded beside the topics' under
//! `queue:<name>` ([`ArchiveOwner`]).
//!
//! Turning the policy off stops archiving; what the archive holds stays
//! until its retention ends and can still be replayed, and turning it on
//! again goes on with the same archive. Deleting the queue deletes its
//! archive and its replays.

use std::collections::BTreeMap;
use std::sync::Arc;

use ackbox_core::archive_policy;
use ackbox_core::attributes::{ARCHIVE_POLICY, QueueAttributes};
use ackbox_core::digest::md5_of_body;
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::message::MessageAttributes;
use ackbox_core::queue_name::QueueName;

use super::TopicDefinition;
use super::archive::{ArchiveDefinition, ArchiveOwner, ArchivedPublish, is_archive_queue};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::queue::Queue;
use crate::store::NewMessage;

/// Queue `queue`'s archive, kept `retention_days` days from `since`.
fn definition_of(queue: &Queue, retention_days: i64, since: i64) -> ArchiveDefinition {
    ArchiveDefinition {
        id: format!("q{}", queue.id),
        since,
        retention_days,
        fifo: queue.name.is_fifo(),
    }
}

/// What a send's archive copy holds: the message as it was sent.
fn archived_send(message: &NewMessage) -> ArchivedPublish {
    ArchivedPublish {
        message_id: message.message_id.clone(),
        timestamp: message.sent_at,
        message: message.body.clone(),
        subject: None,
        message_structure: None,
        message_attributes: message.attributes.clone(),
        message_group_id: message.group_id.clone(),
        message_deduplication_id: message
            .deduplication
            .as_ref()
            .map(|deduplication| deduplication.id.clone()),
    }
}

/// How long `settings` has queue `name`'s archive keep a message, if it
/// archives; an archive's own queue is refused one.
pub(crate) fn archive_retention(
    name: &QueueName,
    settings: &QueueAttributes,
) -> Result<Option<i64>, SqsError> {
    match settings.archive_retention_days {
        Some(days) if is_archive_queue(name) => Err(SqsError::invalid_attribute_value(
            ARCHIVE_POLICY,
            &archive_policy::render(days),
            &format!("{name} is an archive; only the queue it archives keeps one."),
        )),
        days => Ok(days),
    }
}

impl Engine {
    /// Starts (or goes on with) queue `queue`'s archive, kept
    /// `retention_days` days: its queue, then its record. Not under the
    /// admin lock, which creating the archive's queue takes.
    pub(crate) async fn ensure_queue_archive(
        &self,
        queue: &Queue,
        retention_days: i64,
    ) -> Result<Arc<Queue>, EngineError> {
        let owner = ArchiveOwner::Queue(queue.name.clone());
        let now = self.now();
        let archive = definition_of(queue, retention_days, now);
        let archive_queue = self.ensure_archive_queue(&archive).await?;
        let fresh = TopicDefinition {
            created_at: now,
            attributes: BTreeMap::new(),
            tags: BTreeMap::new(),
            subscriptions: Vec::new(),
            archive: Some(archive.clone()),
            replays: Vec::new(),
        };
        let created = self.write_definition(&owner.key(), &fresh, None).await?;
        if !created {
            self.change_owner(&owner, |definition| {
                match &mut definition.archive {
                    Some(kept) if kept.id == archive.id => kept.retention_days = retention_days,
                    // A record a queue of the same name left (its delete
                    // stopped before the record went): this queue's own.
                    _ => definition.archive = Some(archive.clone()),
                }
                Ok(())
            })
            .await?;
        }
        self.queue(&archive_queue).await
    }

    /// The archive copies of `messages`, about to be sent to `queue`, and
    /// the archive's queue; `None` when the queue keeps no archive.
    pub(crate) async fn archive_copies(
        &self,
        queue: &Queue,
        messages: &[NewMessage],
    ) -> Result<Option<(Arc<Queue>, Vec<NewMessage>)>, EngineError> {
        let Some(retention_days) = queue.snapshot().attributes.archive_retention_days else {
            return Ok(None);
        };
        // Its since is the record's; only the name is needed here.
        let name = definition_of(queue, retention_days, 0).queue();
        let archive = match self.queue(&name).await {
            Ok(archive) => archive,
            // Created with the policy and sent to before its archive was
            // made, or made on another node: made now.
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => {
                self.ensure_queue_archive(queue, retention_days).await?
            }
            Err(other) => return Err(other),
        };
        let fifo = archive.name.is_fifo();
        let copies = messages
            .iter()
            .map(|message| {
                let body = archived_send(message).encode();
                NewMessage {
                    message_id: uuid::Uuid::new_v4().to_string(),
                    md5_of_body: md5_of_body(&body),
                    body,
                    attributes: MessageAttributes::new(),
                    md5_of_attributes: None,
                    trace_header: None,
                    group_id: message.group_id.clone().filter(|_| fifo),
                    sender_id: message.sender_id.clone(),
                    sent_at: message.sent_at,
                    visible_at: message.sent_at,
                    deduplication: message.deduplication.clone(),
                }
            })
            .collect();
        Ok(Some((archive, copies)))
    }

    /// Deletes a deleted queue's archive: its queue, its record and the
    /// replays in it. Not under the admin lock.
    pub(crate) async fn drop_queue_archive(&self, queue: &Queue) -> Result<(), EngineError> {
        let owner = ArchiveOwner::Queue(queue.name.clone());
        let Some((definition, _)) = self.stored_definition(&owner.key()).await? else {
            return Ok(());
        };
        if let Some(archive) = &definition.archive {
            self.drop_archive_queue(archive).await?;
        }
        self.delete_definition(&owner.key()).await?;
        Ok(())
    }

    /// Queue `name`'s archive, if it ever kept one (turned off, it is kept
    /// until its retention ends).
    pub async fn queue_archive(
        &self,
        name: &QueueName,
    ) -> Result<Option<super::ArchiveView>, EngineError> {
        let owner = ArchiveOwner::Queue(name.clone());
        Ok(self
            .definition(&owner.key())
            .await?
            .and_then(|(definition, _)| definition.archive)
            .map(|archive| archive.view()))
    }
}
