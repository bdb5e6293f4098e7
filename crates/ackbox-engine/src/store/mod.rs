//! The storage seam: everything the engine persists goes through [`Store`].
//!
//! The trait is internal and **not semver-stable**; it exists so that the
//! embedded SQLite store and the PostgreSQL store answer the same conformance
//! suite. Each method takes one `…Params` struct carrying `now`, because stores
//! never read the clock: the engine decides what time it is.
//!
//! A store applies every mutation atomically and durably before it returns:
//! when `message_insert_batch` returns `Ok`, the messages survive a crash
//! (in the default durability mode).
//!
//! One file though it is long: the trait and every parameter and outcome
//! type it names are the seam, read and changed together; the stores'
//! code is split by resource behind it.

use std::collections::BTreeMap;

use ackbox_core::clock::Timestamp;
use ackbox_core::message::MessageAttributes;
use async_trait::async_trait;

pub mod adopt;
pub mod check;
pub mod data_dir;
pub mod log;
mod move_step;
mod open;
pub mod postgres;
mod relocation;
pub mod sqlite;

pub use open::{EmbeddedStore, OpenedStore, StoreConfig, open};
pub use postgres::PostgresOptions;
pub use sqlite::Durability;

/// Why a store operation failed, and whether retrying can help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store is shutting down or its writer is gone; retry elsewhere or later.
    #[error("the store is unavailable: {reason}")]
    Unavailable {
        /// What made it unavailable.
        reason: &'static str,
    },
    /// The database reported a failure; the operation was not applied.
    #[error("database operation {operation} failed")]
    Database {
        /// The operation that failed.
        operation: &'static str,
        /// The database's error.
        #[source]
        source: rusqlite::Error,
    },
    /// PostgreSQL reported a failure; the operation was not applied.
    #[error("PostgreSQL operation {operation} failed")]
    Postgres {
        /// The operation that failed.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The log store failed to append, sync or read back; the operation was
    /// not applied (a failed write or sync stops every later write).
    #[error("log store operation {operation} failed")]
    Log {
        /// The operation that failed.
        operation: &'static str,
        /// The log's error.
        #[source]
        source: ackbox_log::queues::QueuesError,
    },
    /// Stored data could not be decoded; this needs a person.
    #[error("stored data is corrupt: {detail}")]
    Corrupt {
        /// What could not be decoded.
        detail: String,
    },
    /// The store cannot make these writes one atomic write; nothing changed.
    #[error("the store cannot write this atomically: {what}")]
    NotAtomic {
        /// What it was asked to write.
        what: &'static str,
    },
    /// The queue was deleted while the operation was on its way; nothing changed.
    #[error("queue {queue_id} does not exist")]
    QueueNotFound {
        /// The queue's store id.
        queue_id: i64,
    },
    /// The data directory holds standard-queue messages that another
    /// embedded store wrote and this one cannot see: serving it would hide
    /// them (and their queues would look empty).
    #[error(
        "{data_dir} holds {messages} standard-queue message(s) written by `--store {written_by}`, \
         which this store cannot see; serve it with `--store {written_by}`, or move them here \
         with `ackbox store adopt --into {adopt_into} --data-dir {data_dir}`"
    )]
    WrittenByOtherStore {
        /// The data directory.
        data_dir: String,
        /// How many messages the other store holds there.
        messages: u64,
        /// The `--store` that wrote them.
        written_by: &'static str,
        /// The `--store` that refused them, which can adopt them.
        adopt_into: &'static str,
    },
    /// The log store's log is empty or gone, though its database says the
    /// log held messages: serving its queues as empty would hide the loss.
    #[error(
        "{log_dir} is empty or missing, but the database beside it says the log held messages: \
         refusing to serve its standard queues as empty. Restore {log_dir} (from a backup, or \
         the disk it was on); if its messages are known to be lost, `DELETE FROM log_written` \
         in {data_dir}/ackbox.sqlite lets the store start with those queues empty"
    )]
    LogLost {
        /// The data directory.
        data_dir: String,
        /// The log's directory.
        log_dir: String,
    },
    /// Another process holds the data directory: one server per directory.
    #[error(
        "{data_dir} is in use by another ackbox (pid {}); one server per data directory — \
         stop that one, or give this one another --data-dir",
        holder.map_or_else(|| "unknown".to_owned(), |pid| pid.to_string())
    )]
    DataDirInUse {
        /// The data directory.
        data_dir: String,
        /// The pid the lock file names, if it names one.
        holder: Option<u32>,
    },
    /// The disk is full: nothing was written. Retry once space is freed;
    /// the store takes writes again then, without a restart.
    #[error("the disk is full: {detail}")]
    DiskFull {
        /// What could not be written.
        detail: String,
    },
    /// The store's files could not be opened or synced.
    #[error("store I/O on {path} failed")]
    Io {
        /// The file involved.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// Whether the same call may succeed if retried later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::DiskFull { .. })
    }
}

/// A stored JSON column (attributes, tags, attempt leases).
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("maps of strings and tuples of integers always serialize")
}

/// Decodes a stored JSON column; `what` names it in the corruption report.
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|error| StoreError::Corrupt {
        detail: format!("{what}: {error}"),
    })
}

/// The id of a deleted queue whose messages are still stored, if any. A
/// loose index scan, one index seek per queue id that has messages, so it
/// costs the same beside five messages or five million. Queue ids are never
/// reused, so an id without a queue row stays without one.
pub(crate) const DELETED_QUEUE_WITH_MESSAGES_SQL: &str = "
    WITH RECURSIVE present(queue_id) AS (
        SELECT MIN(queue_id) FROM messages
        UNION ALL
        SELECT (SELECT MIN(later.queue_id) FROM messages later
                WHERE later.queue_id > present.queue_id)
        FROM present WHERE present.queue_id IS NOT NULL
    )
    SELECT queue_id FROM present
    WHERE queue_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.id = present.queue_id)
    LIMIT 1";

/// A purged queue whose purge left messages to the sweeper, if any, and the
/// newest sequence number the purge covers.
pub(crate) const UNFINISHED_PURGE_SQL: &str =
    "SELECT id, purged_through_seq FROM queues WHERE purged_through_seq IS NOT NULL LIMIT 1";

/// What one step of a purge dropped: the purge's own transaction, or one
/// of the sweeper's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PurgeStep {
    /// Messages sent before the purge.
    pub(crate) messages: u64,
    /// Deduplication ids of a FIFO queue first sent before the purge.
    pub(crate) window_entries: u64,
}

impl PurgeStep {
    pub(crate) fn rows(self) -> u64 {
        self.messages + self.window_entries
    }
}

/// What the sweeper drops next.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeftBehind {
    /// Every message of this deleted queue.
    DeletedQueue(i64),
    /// This queue's messages up to this sequence number (and, on a FIFO
    /// queue, the deduplication ids first sent up to it).
    Purged { queue_id: i64, through_seq: i64 },
}

/// Refuses a database migrated by a newer ackbox than this one.
pub(crate) fn refuse_newer_schema(applied: i64, newest: i64) -> Result<(), StoreError> {
    if applied > newest {
        return Err(StoreError::Corrupt {
            detail: format!(
                "the database schema is version {applied}, newer than this binary's {newest}; \
                 upgrade ackbox instead of downgrading"
            ),
        });
    }
    Ok(())
}

/// A FIFO group's row, from its first messages `(seq, visible_at,
/// receive_count)` in order: its head, and when it may deliver next (the
/// later of its head's visibility and every lease on its messages); `None`
/// when the group is empty.
///
/// Only the first [`MAX_RECEIVE_MESSAGES`](ackbox_core::limits::MAX_RECEIVE_MESSAGES)
/// messages can hold a lease: a receive leases a run from the head of an
/// available group, and a group with a running lease is not available.
pub(crate) fn group_availability(front: &[(i64, i64, i64)]) -> Option<(i64, i64)> {
    let &(head_seq, head_visible_at, _) = front.first()?;
    let available_at = front
        .iter()
        .filter(|(_, _, receive_count)| *receive_count > 0)
        .map(|(_, visible_at, _)| *visible_at)
        .fold(head_visible_at, i64::max);
    Some((head_seq, available_at))
}

/// A queue as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRecord {
    /// Store-assigned id, never reused.
    pub id: i64,
    /// The queue name.
    pub name: String,
    /// Settable attributes as wire strings.
    pub attributes: BTreeMap<String, String>,
    /// Queue tags.
    pub tags: BTreeMap<String, String>,
    /// When the queue was created.
    pub created_at: Timestamp,
    /// When its attributes last changed.
    pub last_modified_at: Timestamp,
}

/// Parameters of [`Store::queue_create`].
#[derive(Debug, Clone)]
pub struct QueueCreateParams {
    /// The queue name.
    pub name: String,
    /// Settable attributes as wire strings.
    pub attributes: BTreeMap<String, String>,
    /// Initial tags.
    pub tags: BTreeMap<String, String>,
    /// The current time.
    pub now: Timestamp,
    /// A name deleted at or after this instant may not be created yet.
    pub deleted_after: Timestamp,
    /// A FIFO queue: the store keeps its message groups in order.
    pub fifo: bool,
}

/// What [`Store::queue_create`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueCreateOutcome {
    /// The queue was created.
    Created(QueueRecord),
    /// A queue of that name already exists; nothing changed.
    Exists(QueueRecord),
    /// The name was deleted too recently to be created again.
    DeletedRecently,
}

/// Parameters of [`Store::queue_update`].
#[derive(Debug, Clone)]
pub struct QueueUpdateParams {
    /// The queue.
    pub queue_id: i64,
    /// New attributes, when they change.
    pub attributes: Option<BTreeMap<String, String>>,
    /// New tags, when they change.
    pub tags: Option<BTreeMap<String, String>>,
    /// The current time, recorded as last-modified when attributes change.
    pub now: Timestamp,
}

/// Parameters of [`Store::queue_delete`].
#[derive(Debug, Clone)]
pub struct QueueDeleteParams {
    /// The queue.
    pub queue_id: i64,
    /// The current time, remembered to enforce the recreate cooldown.
    pub now: Timestamp,
}

/// Parameters of [`Store::queue_purge`].
#[derive(Debug, Clone)]
pub struct QueuePurgeParams {
    /// The queue.
    pub queue_id: i64,
    /// The current time.
    pub now: Timestamp,
    /// A purge at or after this instant means a purge is still in progress.
    pub purged_after: Timestamp,
    /// Most rows deleted in the purge's own transaction (messages, then a
    /// FIFO queue's deduplication ids); the rest are marked and left to the
    /// sweeper ([`Store::message_sweep_left_behind`]).
    pub delete_at_once: u32,
}

/// What [`Store::queue_purge`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuePurgeOutcome {
    /// The purge deleted this many messages at once; `more`: the queue held
    /// more, and the sweeper drops them.
    Purged {
        /// Messages deleted in the purge's transaction.
        deleted: u64,
        /// Messages sent before the purge are left for the sweeper.
        more: bool,
    },
    /// Another purge happened within the cooldown; nothing changed.
    InProgress,
}

/// Parameters of [`Store::queue_stats`].
#[derive(Debug, Clone, Copy)]
pub struct QueueStatsParams {
    /// The queue.
    pub queue_id: i64,
    /// The current time, which splits visible from invisible messages.
    pub now: Timestamp,
}

/// Message counts of one queue at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages receivable now.
    pub visible: u64,
    /// Messages leased to a consumer.
    pub in_flight: u64,
    /// Messages not yet delivered because of a delay.
    pub delayed: u64,
    /// When the oldest message was sent, if any.
    pub oldest_sent_at: Option<Timestamp>,
}

/// A message to store.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// The message id returned to the sender.
    pub message_id: String,
    /// The body.
    pub body: String,
    /// User message attributes.
    pub attributes: MessageAttributes,
    /// `MD5OfMessageBody`.
    pub md5_of_body: String,
    /// `MD5OfMessageAttributes`, when there are attributes.
    pub md5_of_attributes: Option<String>,
    /// The `AWSTraceHeader` system attribute, if sent.
    pub trace_header: Option<String>,
    /// `MessageGroupId` (fair queues on standard queues).
    pub group_id: Option<String>,
    /// Who sent it.
    pub sender_id: String,
    /// When it was sent.
    pub sent_at: Timestamp,
    /// When it first becomes receivable (after any delay).
    pub visible_at: Timestamp,
    /// On a FIFO queue: the deduplication id and its scope.
    pub deduplication: Option<Deduplication>,
}

/// A FIFO send's deduplication key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deduplication {
    /// Empty for queue-wide deduplication, else the message group.
    pub scope: String,
    /// `MessageDeduplicationId`, or the body's SHA-256 with content-based deduplication.
    pub id: String,
}

/// Parameters of [`Store::message_insert_batch`].
#[derive(Debug, Clone)]
pub struct MessageInsertParams {
    /// The queue.
    pub queue_id: i64,
    /// The messages, stored in this order.
    pub messages: Vec<NewMessage>,
    /// A deduplication id first sent after this instant is still remembered:
    /// a message repeating it is not stored again.
    pub deduplication_window_start: Timestamp,
}

/// What [`Store::message_insert_batch`] did with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertedMessage {
    /// The message's sequence number (its first send's, for a duplicate).
    pub seq: i64,
    /// The message id (its first send's, for a duplicate).
    pub message_id: String,
    /// The deduplication window already held this message; nothing was stored.
    pub duplicate: bool,
}

/// Where a receive sends messages that have been received too often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterTarget {
    /// The dead-letter queue.
    pub queue_id: i64,
    /// A message already received this many times moves instead of being delivered.
    pub max_receive_count: i64,
    /// ARN of the source queue, recorded on the moved message.
    pub source_arn: String,
}

/// Parameters of [`Store::message_receive`].
#[derive(Debug, Clone)]
pub struct MessageReceiveParams {
    /// The queue.
    pub queue_id: i64,
    /// The current time.
    pub now: Timestamp,
    /// Most messages to lease.
    pub max_messages: u32,
    /// The new lease deadline of each received message.
    pub visible_at: Timestamp,
    /// Messages sent at or before this instant have outlived retention and are dropped.
    pub expired_at_or_before: Timestamp,
    /// The queue's dead-letter queue, if it has one.
    pub dead_letter: Option<DeadLetterTarget>,
    /// On a FIFO queue: the `ReceiveRequestAttemptId` that makes a retried
    /// receive return what the first attempt returned.
    pub attempt: Option<ReceiveAttempt>,
}

/// A FIFO receive's retry token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveAttempt {
    /// `ReceiveRequestAttemptId`.
    pub id: String,
    /// An earlier attempt made after this instant may be replayed.
    pub valid_after: Timestamp,
}

/// A message as stored, returned by a receive with its new lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Store sequence number.
    pub seq: i64,
    /// The message id.
    pub message_id: String,
    /// The body.
    pub body: String,
    /// User message attributes.
    pub attributes: MessageAttributes,
    /// `MD5OfMessageBody`.
    pub md5_of_body: String,
    /// `MD5OfMessageAttributes`.
    pub md5_of_attributes: Option<String>,
    /// The `AWSTraceHeader` system attribute.
    pub trace_header: Option<String>,
    /// `MessageGroupId`.
    pub group_id: Option<String>,
    /// Who sent it.
    pub sender_id: String,
    /// When it was sent.
    pub sent_at: Timestamp,
    /// Receives so far, this one included; also the lease generation.
    pub receive_count: i64,
    /// When it was first received.
    pub first_received_at: Option<Timestamp>,
    /// When it was last received.
    pub last_received_at: Option<Timestamp>,
    /// In a dead-letter queue: the ARN of the queue it was moved from.
    pub dead_letter_source_arn: Option<String>,
    /// Failures consumers reported with NackMessage.
    pub failures: FailureRecord,
    /// On a FIFO queue: the deduplication id it was sent with.
    pub deduplication_id: Option<String>,
}

/// What consumers reported about a message's failures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailureRecord {
    /// How many failures were reported.
    pub count: i64,
    /// When the first was reported.
    pub first_at: Option<Timestamp>,
    /// When the last was reported.
    pub last_at: Option<Timestamp>,
    /// The last failure's class (an error type name, say).
    pub last_class: Option<String>,
    /// The last failure's message.
    pub last_message: Option<String>,
}

/// A failure reported by a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureReport {
    /// The failure's class.
    pub class: String,
    /// What went wrong.
    pub message: String,
}

/// Parameters of [`Store::message_nack`].
#[derive(Debug, Clone)]
pub struct MessageNackParams {
    /// The queue.
    pub queue_id: i64,
    /// The current time: only a running lease may be nacked.
    pub now: Timestamp,
    /// The lease being given up.
    pub lease: LeaseRef,
    /// When the message becomes visible again, if it stays.
    pub visible_at: Timestamp,
    /// The reason, if the consumer gave one.
    pub failure: Option<FailureReport>,
    /// Move to the dead-letter queue now, whatever the receive count.
    pub permanent: bool,
    /// The queue's dead-letter queue, if it has one.
    pub dead_letter: Option<DeadLetterTarget>,
}

/// What [`Store::message_nack`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackOutcome {
    /// The message stays and becomes visible at the requested time.
    Retried,
    /// The message moved to the dead-letter queue.
    DeadLettered,
    /// The message is gone, or was received again under a newer lease.
    NotAvailable,
    /// The lease had already ended.
    NotInFlight,
}

/// Parameters of [`Store::message_peek`].
#[derive(Debug, Clone, Copy)]
pub struct MessagePeekParams {
    /// The queue.
    pub queue_id: i64,
    /// Most messages to return, oldest first.
    pub limit: u32,
    /// Only messages stored after this sequence number: a reader pages
    /// through a queue without leasing anything (0: from the start).
    pub after_seq: i64,
}

/// What [`Store::message_receive`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReceiveOutcome {
    /// The leased messages, oldest visibility first.
    pub messages: Vec<StoredMessage>,
    /// Messages dropped because retention had expired.
    pub expired: u64,
    /// Messages moved to the dead-letter queue instead of being delivered:
    /// each one's last failure class, if a consumer ever reported one.
    pub dead_lettered: Vec<Option<String>>,
    /// When nothing was receivable: the next instant a message becomes visible.
    pub next_visible_at: Option<Timestamp>,
}

/// A reference to one lease of one message, from a receipt handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRef {
    /// Store sequence number.
    pub seq: i64,
    /// Lease generation (receive count when the handle was issued).
    pub lease: i64,
}

/// Parameters of [`Store::message_delete_batch`].
#[derive(Debug, Clone)]
pub struct MessageDeleteParams {
    /// The queue.
    pub queue_id: i64,
    /// The current time: a stale lease may delete only a message no one holds.
    pub now: Timestamp,
    /// The leases whose messages to delete.
    pub leases: Vec<LeaseRef>,
}

/// What happened to one message of a delete batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The message was deleted.
    Deleted,
    /// The message was already gone.
    AlreadyGone,
    /// The handle's lease is stale and a newer lease is running: the holder
    /// of that lease decides, so the message stays.
    LeasedToAnother,
    /// FIFO: the handle's lease has ended, so it may no longer delete; the
    /// message stays, to be delivered again in its group's order.
    Expired,
}

/// One change of [`Store::message_change_visibility_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisibilityChange {
    /// The lease to change.
    pub lease: LeaseRef,
    /// The new deadline.
    pub visible_at: Timestamp,
}

/// Parameters of [`Store::message_change_visibility_batch`].
#[derive(Debug, Clone)]
pub struct MessageChangeVisibilityParams {
    /// The queue.
    pub queue_id: i64,
    /// The current time: only leases still running may change.
    pub now: Timestamp,
    /// The changes, applied in order.
    pub changes: Vec<VisibilityChange>,
}

/// What happened to one visibility change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeVisibilityOutcome {
    /// The lease now ends at the requested time.
    Changed,
    /// The message is gone, or was received again under a newer lease.
    NotAvailable,
    /// The lease had already ended; the message is not in flight.
    NotInFlight,
}

/// Parameters of [`Store::message_expire`].
#[derive(Debug, Clone, Copy)]
pub struct MessageExpireParams {
    /// The queue.
    pub queue_id: i64,
    /// Messages sent at or before this instant are dropped.
    pub expired_at_or_before: Timestamp,
    /// Most messages to drop in one call, to keep write transactions short.
    pub limit: u32,
}

/// A message move task as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveTaskRecord {
    /// Opaque handle.
    pub handle: String,
    /// The dead-letter queue messages move out of.
    pub source_queue_id: i64,
    /// Its ARN.
    pub source_arn: String,
    /// Where messages go; `None`: each message's original source queue.
    pub destination_arn: Option<String>,
    /// Messages per second, if the caller chose.
    pub rate: Option<i64>,
    /// `RUNNING`, `PAUSED`, `COMPLETED`, `CANCELLED` or `FAILED`.
    pub status: String,
    /// When it started.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
    /// Messages in the source when it started.
    pub to_move: i64,
    /// Messages moved so far.
    pub moved: i64,
    /// Why it failed.
    pub failure_reason: Option<String>,
    /// Who started it: an access key, or `anonymous`.
    pub requested_by: String,
    /// Which messages it moves.
    pub filter: MoveFilter,
    /// Messages it passed over because they did not match the filter.
    pub skipped: i64,
}

/// Which messages of the dead-letter queue a move task takes (an ackbox
/// extension; an empty filter takes them all, as SQS does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveFilter {
    /// Only messages whose last failure class is this.
    pub class: Option<String>,
    /// Only messages sent at or before this instant.
    pub sent_before: Option<Timestamp>,
    /// Stop after moving this many.
    pub max_messages: Option<i64>,
    /// Pause after moving this many, for review; resuming clears it.
    pub sample: Option<i64>,
}

/// Which move tasks [`Store::move_task_list`] returns, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveTaskFilter {
    /// Every running task (to resume them at start).
    Running,
    /// Every task of one source queue.
    Source(String),
    /// Every task ever started (the audit log).
    All,
    /// The one task with this handle, whatever its status.
    Handle(String),
}

/// Parameters of [`Store::move_task_create`].
#[derive(Debug, Clone)]
pub struct MoveTaskCreateParams {
    /// Opaque handle for the new task.
    pub handle: String,
    /// The dead-letter queue.
    pub source_queue_id: i64,
    /// Its ARN.
    pub source_arn: String,
    /// Where messages go; `None`: each message's original source.
    pub destination_arn: Option<String>,
    /// Messages per second, if the caller chose.
    pub rate: Option<i64>,
    /// Who starts it, for the audit log.
    pub requested_by: String,
    /// Which messages it moves.
    pub filter: MoveFilter,
    /// The current time.
    pub now: Timestamp,
}

/// What [`Store::move_task_create`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveTaskCreateOutcome {
    /// The task exists and is running.
    Created(Box<MoveTaskRecord>),
    /// Another task on the same source is running; nothing changed.
    AlreadyRunning,
}

/// Where one step of a move task sends messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveDestination {
    /// Every message to this queue.
    Queue(i64),
    /// Each message back to the queue it was dead-lettered from, found by ARN;
    /// a message whose source is gone stays and fails the task.
    OriginalSource(std::collections::HashMap<String, i64>),
    /// The named destination no longer exists: the task fails, moving nothing.
    Gone,
}

/// Parameters of [`Store::move_task_step`].
#[derive(Debug, Clone)]
pub struct MoveTaskStepParams {
    /// The task.
    pub handle: String,
    /// The current time.
    pub now: Timestamp,
    /// Most messages this step moves.
    pub limit: u32,
    /// Where they go.
    pub destination: MoveDestination,
}

/// What one step of a move task did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveTaskStepOutcome {
    /// Messages moved by this step.
    pub moved: u64,
    /// Queues that received messages (to wake their pollers).
    pub destinations: Vec<i64>,
    /// The task is no longer running (completed, cancelled or failed).
    pub finished: bool,
}

/// Messages of one failure class in a queue (empty class: no reason recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureClassCount {
    /// The last failure class, or empty.
    pub class: String,
    /// How many messages.
    pub count: i64,
    /// When the oldest of them was sent.
    pub oldest_sent_at: Timestamp,
    /// When the newest of them was sent.
    pub newest_sent_at: Timestamp,
    /// The failure message of the oldest, as an example.
    pub example: Option<String>,
}

/// A topic as stored: the engine's definition of it (subscriptions
/// included), which the store keeps as it is, and a revision every write
/// bumps, so that two nodes changing one topic cannot lose a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    /// The topic's name.
    pub name: String,
    /// The engine's definition, as it wrote it.
    pub definition: String,
    /// 1 when created, one more at every write.
    pub revision: i64,
}

/// Durable storage of queues and messages. Not semver-stable; do not implement
/// outside this workspace.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Creates a queue, or reports that it exists or was deleted too recently.
    async fn queue_create(
        &self,
        params: QueueCreateParams,
    ) -> Result<QueueCreateOutcome, StoreError>;
    /// Every queue, in name order.
    async fn queue_list(&self) -> Result<Vec<QueueRecord>, StoreError>;
    /// One queue by name.
    async fn queue_get(&self, name: &str) -> Result<Option<QueueRecord>, StoreError>;
    /// Replaces a queue's attributes and/or tags.
    async fn queue_update(&self, params: QueueUpdateParams) -> Result<(), StoreError>;
    /// Deletes a queue and its messages; `false` if it was already gone.
    async fn queue_delete(&self, params: QueueDeleteParams) -> Result<bool, StoreError>;
    /// Deletes every message of a queue, at most once per cooldown.
    async fn queue_purge(&self, params: QueuePurgeParams) -> Result<QueuePurgeOutcome, StoreError>;
    /// Counts a queue's messages by state.
    async fn queue_stats(&self, params: QueueStatsParams) -> Result<QueueStats, StoreError>;
    /// Stores messages, skipping FIFO duplicates; one outcome per message, in order.
    async fn message_insert_batch(
        &self,
        params: MessageInsertParams,
    ) -> Result<Vec<InsertedMessage>, StoreError>;
    /// Stores several queues' batches in one transaction, fsync'd once: all
    /// of them or none (a topic's fan-out). One outcome list per batch, in
    /// order. `QueueNotFound` naming a queue that is gone, and nothing
    /// stored, when one is.
    async fn message_insert_atomic(
        &self,
        batches: Vec<MessageInsertParams>,
    ) -> Result<Vec<Vec<InsertedMessage>>, StoreError>;
    /// Leases up to `max_messages` visible messages.
    async fn message_receive(
        &self,
        params: MessageReceiveParams,
    ) -> Result<ReceiveOutcome, StoreError>;
    /// Deletes messages by lease.
    async fn message_delete_batch(
        &self,
        params: MessageDeleteParams,
    ) -> Result<Vec<DeleteOutcome>, StoreError>;
    /// Moves lease deadlines.
    async fn message_change_visibility_batch(
        &self,
        params: MessageChangeVisibilityParams,
    ) -> Result<Vec<ChangeVisibilityOutcome>, StoreError>;
    /// Gives up a lease with a failure: retry later, or dead-letter now.
    async fn message_nack(&self, params: MessageNackParams) -> Result<NackOutcome, StoreError>;
    /// Counts a queue's messages by last failure class; with `sent_before`,
    /// only those sent at or before it.
    async fn message_failure_classes(
        &self,
        queue_id: i64,
        sent_before: Option<Timestamp>,
    ) -> Result<Vec<FailureClassCount>, StoreError>;
    /// Reads messages without leasing them, oldest first.
    async fn message_peek(
        &self,
        params: MessagePeekParams,
    ) -> Result<Vec<StoredMessage>, StoreError>;
    /// Starts a move task, unless one is running on the same source.
    async fn move_task_create(
        &self,
        params: MoveTaskCreateParams,
    ) -> Result<MoveTaskCreateOutcome, StoreError>;
    /// Moves the next messages of a running task and records its progress, atomically.
    async fn move_task_step(
        &self,
        params: MoveTaskStepParams,
    ) -> Result<MoveTaskStepOutcome, StoreError>;
    /// Resumes a paused task; `None` if no paused task has that handle.
    async fn move_task_resume(&self, handle: &str) -> Result<Option<MoveTaskRecord>, StoreError>;
    /// Cancels a running or paused task; `None` if none has that handle.
    async fn move_task_cancel(
        &self,
        handle: &str,
        now: Timestamp,
    ) -> Result<Option<MoveTaskRecord>, StoreError>;
    /// Move tasks matching `filter`, newest first, at most `limit`.
    async fn move_task_list(
        &self,
        filter: MoveTaskFilter,
        limit: u32,
    ) -> Result<Vec<MoveTaskRecord>, StoreError>;
    /// Drops messages that outlived retention; returns how many.
    async fn message_expire(&self, params: MessageExpireParams) -> Result<u64, StoreError>;
    /// Forgets FIFO deduplication ids and receive attempts recorded at or
    /// before `before`; returns how many.
    async fn fifo_window_expire(&self, before: Timestamp) -> Result<u64, StoreError>;
    /// Drops up to `limit` rows that deleted queues, or purges of deep
    /// queues, left behind (messages, and the deduplication ids a FIFO
    /// queue's purge voided); returns how many. `queue_delete` and
    /// `queue_purge` leave them so that emptying a queue of millions does
    /// not hold every other queue's writes behind it.
    async fn message_sweep_left_behind(&self, limit: u32) -> Result<u64, StoreError>;
    /// Every topic, in name order.
    async fn topic_list(&self) -> Result<Vec<TopicRecord>, StoreError>;
    /// One topic by name.
    async fn topic_get(&self, name: &str) -> Result<Option<TopicRecord>, StoreError>;
    /// Writes topic `name`'s definition, durably: a new topic when
    /// `revision` is `None`, else only over that revision. `false`, and
    /// nothing written, when the topic exists (create) or has moved on
    /// from `revision` or is gone (update).
    async fn topic_write(
        &self,
        name: &str,
        definition: String,
        revision: Option<i64>,
    ) -> Result<bool, StoreError>;
    /// Deletes a topic; `false` if it was already gone.
    async fn topic_delete(&self, name: &str) -> Result<bool, StoreError>;
    /// Flushes pending writes and stops background work. Idempotent.
    async fn close(&self) -> Result<(), StoreError>;

    /// Whether writes are failing for want of disk space: set by the write
    /// that found the disk full, cleared by the next durable write that
    /// passes. A store without a local disk is never full.
    fn disk_full(&self) -> bool {
        false
    }
    /// What other broker nodes sharing this store change, for a store that
    /// can be shared; `None` for a store only this process uses.
    fn events(&self) -> Option<tokio::sync::broadcast::Receiver<StoreEvent>> {
        None
    }
}

/// A change another broker node made to a shared store, which this node's
/// caches and long pollers must hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreEvent {
    /// Messages of this queue may have become receivable.
    MessagesAvailable {
        /// The queue.
        queue_id: i64,
    },
    /// This queue was created, changed or deleted.
    QueueChanged {
        /// Its name.
        name: String,
    },
    /// The topic definition (or a queue's archive record) stored under
    /// this key was written or deleted.
    TopicChanged {
        /// Its key.
        key: String,
    },
    /// Events may have been lost (the store reconnected): reload everything.
    Missed,
}
