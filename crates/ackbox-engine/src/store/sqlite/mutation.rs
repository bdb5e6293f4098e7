//! The SQL of every mutation, run by the writer inside a group commit.
//!
//! Each function sees a connection whose transaction the writer owns; it must
//! not begin or commit one itself. A function that returns `Err` has its
//! savepoint rolled back, so a failed job leaves no partial change behind.

use std::collections::BTreeMap;

use ackbox_core::receive_policy::{Fate, ReceivePolicy, nack_dead_letters};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::fifo::{self, TouchedGroups};
use crate::store::move_step::{self, StepEnd};
use crate::store::{
    ChangeVisibilityOutcome, DELETED_QUEUE_WITH_MESSAGES_SQL, DeadLetterTarget, DeleteOutcome,
    FailureRecord, InsertedMessage, LeftBehind, MessageChangeVisibilityParams, MessageDeleteParams,
    MessageExpireParams, MessageInsertParams, MessageNackParams, MessagePeekParams,
    MessageReceiveParams, MoveFilter, MoveTaskCreateOutcome, MoveTaskCreateParams, MoveTaskRecord,
    MoveTaskStepOutcome, MoveTaskStepParams, NackOutcome, NewMessage, PurgeStep,
    QueueCreateOutcome, QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome, QueuePurgeParams,
    QueueRecord, QueueUpdateParams, ReceiveOutcome, StoreError, StoredMessage,
    UNFINISHED_PURGE_SQL, from_json, to_json,
};

pub(crate) fn database_error(
    operation: &'static str,
) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| {
        if is_disk_full(&source) {
            StoreError::DiskFull {
                detail: format!("{operation}: {source}"),
            }
        } else {
            StoreError::Database { operation, source }
        }
    }
}

/// Whether SQLite failed for want of space (`SQLITE_FULL`).
pub(crate) fn is_disk_full(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

pub(crate) const QUEUE_COLUMNS: &str = "id, name, attributes, tags, created_at, last_modified_at";

/// Decodes a row selected with [`QUEUE_COLUMNS`].
pub(crate) fn queue_from_row(
    row: &Row<'_>,
) -> rusqlite::Result<(i64, String, String, String, i64, i64)> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

pub(crate) fn queue_record(
    (id, name, attributes, tags, created_at, last_modified_at): (
        i64,
        String,
        String,
        String,
        i64,
        i64,
    ),
) -> Result<QueueRecord, StoreError> {
    Ok(QueueRecord {
        id,
        attributes: from_json(&attributes, "queue attributes")?,
        tags: from_json(&tags, "queue tags")?,
        name,
        created_at,
        last_modified_at,
    })
}

pub(crate) fn queue_create(
    connection: &Connection,
    params: &QueueCreateParams,
) -> Result<QueueCreateOutcome, StoreError> {
    let existing = connection
        .query_row(
            &format!("SELECT {QUEUE_COLUMNS} FROM queues WHERE name = ?1"),
            [&params.name],
            queue_from_row,
        )
        .optional()
        .map_err(database_error("queue_create: lookup"))?;
    if let Some(row) = existing {
        return Ok(QueueCreateOutcome::Exists(queue_record(row)?));
    }
    let deleted_recently = connection
        .query_row(
            "SELECT 1 FROM deleted_queues WHERE name = ?1 AND deleted_at >= ?2",
            params![params.name, params.deleted_after],
            |_| Ok(()),
        )
        .optional()
        .map_err(database_error("queue_create: tombstone"))?
        .is_some();
    if deleted_recently {
        return Ok(QueueCreateOutcome::DeletedRecently);
    }
    connection
        .execute(
            "INSERT INTO queues (name, attributes, tags, created_at, last_modified_at, fifo)
             VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
            params![
                params.name,
                to_json(&params.attributes),
                to_json(&params.tags),
                params.now,
                params.fifo
            ],
        )
        .map_err(database_error("queue_create: insert"))?;
    Ok(QueueCreateOutcome::Created(QueueRecord {
        id: connection.last_insert_rowid(),
        name: params.name.clone(),
        attributes: params.attributes.clone(),
        tags: params.tags.clone(),
        created_at: params.now,
        last_modified_at: params.now,
    }))
}

pub(crate) fn queue_update(
    connection: &Connection,
    params: &QueueUpdateParams,
) -> Result<(), StoreError> {
    if let Some(attributes) = &params.attributes {
        connection
            .execute(
                "UPDATE queues SET attributes = ?2, last_modified_at = ?3 WHERE id = ?1",
                params![params.queue_id, to_json(attributes), params.now],
            )
            .map_err(database_error("queue_update: attributes"))?;
    }
    if let Some(tags) = &params.tags {
        connection
            .execute(
                "UPDATE queues SET tags = ?2 WHERE id = ?1",
                params![params.queue_id, to_json::<BTreeMap<String, String>>(tags)],
            )
            .map_err(database_error("queue_update: tags"))?;
    }
    Ok(())
}

pub(crate) fn queue_delete(
    connection: &Connection,
    params: &QueueDeleteParams,
) -> Result<bool, StoreError> {
    let name: Option<String> = connection
        .query_row(
            "SELECT name FROM queues WHERE id = ?1",
            [params.queue_id],
            |row| row.get(0),
        )
        .optional()
        .map_err(database_error("queue_delete: lookup"))?;
    let Some(name) = name else {
        return Ok(false);
    };
    // The messages, and a FIFO queue's groups, deduplication ids and receive
    // attempts, stay for the sweepers (`message_sweep_left_behind`,
    // `window_expire`): deleting millions here would hold every other
    // queue's writes behind this one. Ids are never reused, so nothing
    // reaches them meanwhile.
    connection
        .execute("DELETE FROM queues WHERE id = ?1", [params.queue_id])
        .map_err(database_error("queue_delete: queue"))?;
    connection
        .execute(
            "INSERT INTO deleted_queues (name, deleted_at) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET deleted_at = excluded.deleted_at",
            params![name, params.now],
        )
        .map_err(database_error("queue_delete: tombstone"))?;
    Ok(true)
}

pub(crate) fn queue_purge(
    connection: &Connection,
    params: &QueuePurgeParams,
) -> Result<QueuePurgeOutcome, StoreError> {
    let (last_purged_at, fifo): (Option<i64>, bool) = connection
        .query_row(
            "SELECT last_purged_at, fifo FROM queues WHERE id = ?1",
            [params.queue_id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(database_error("queue_purge: lookup"))?
        .ok_or(StoreError::QueueNotFound {
            queue_id: params.queue_id,
        })?;
    if last_purged_at.is_some_and(|at| at >= params.purged_after) {
        return Ok(QueuePurgeOutcome::InProgress);
    }
    let through_seq: i64 = connection
        .query_row("SELECT COALESCE(MAX(seq), 0) FROM messages", [], |row| {
            row.get(0)
        })
        .map_err(database_error("queue_purge: newest message"))?;
    if fifo {
        fifo::forget_attempts(connection, params.queue_id)?;
    }
    let step = drop_purged(
        connection,
        params.queue_id,
        through_seq,
        fifo,
        params.delete_at_once,
    )?;
    let more: bool = connection
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE queue_id = ?1 AND seq <= ?2)
                 OR EXISTS (SELECT 1 FROM fifo_dedup WHERE queue_id = ?1 AND seq <= ?2)",
        )
        .and_then(|mut left| {
            left.query_row(params![params.queue_id, through_seq], |row| row.get(0))
        })
        .map_err(database_error("queue_purge: what is left"))?;
    mark_purged(connection, params, more.then_some(through_seq))?;
    Ok(QueuePurgeOutcome::Purged {
        deleted: step.messages,
        more,
    })
}

/// Drops up to `limit` rows that a purge through `through_seq` covers in
/// `queue_id`: its messages first, refreshing the FIFO groups they leave (a
/// group's row must agree with its messages after every transaction), then
/// the deduplication ids first sent before it.
fn drop_purged(
    connection: &Connection,
    queue_id: i64,
    through_seq: i64,
    fifo: bool,
    limit: u32,
) -> Result<PurgeStep, StoreError> {
    const PURGED_MESSAGES: &str = "DELETE FROM messages WHERE seq IN (
         SELECT seq FROM messages WHERE queue_id = ?1 AND seq <= ?2 LIMIT ?3)";
    let bind = params![queue_id, through_seq, limit];
    if !fifo {
        let messages = connection
            .prepare_cached(PURGED_MESSAGES)
            .and_then(|mut delete| delete.execute(bind))
            .map_err(database_error("purge: messages"))?;
        return Ok(PurgeStep {
            messages: messages as u64,
            window_entries: 0,
        });
    }
    let groups: Vec<Option<String>> = connection
        .prepare_cached(&format!("{PURGED_MESSAGES} RETURNING group_id"))
        .and_then(|mut delete| delete.query_map(bind, |row| row.get(0))?.collect())
        .map_err(database_error("purge: fifo messages"))?;
    let mut touched = TouchedGroups::default();
    for group_id in &groups {
        touched.touch(queue_id, group_id.as_deref());
    }
    touched.refresh(connection)?;
    let messages = groups.len() as u32;
    let window_entries = if messages < limit {
        fifo::forget_window_through(connection, queue_id, through_seq, limit - messages)?
    } else {
        0
    };
    Ok(PurgeStep {
        messages: u64::from(messages),
        window_entries,
    })
}

/// Starts the purge cooldown and sets (or, when nothing is left, clears)
/// the mark the sweeper drops messages up to.
fn mark_purged(
    connection: &Connection,
    params: &QueuePurgeParams,
    through_seq: Option<i64>,
) -> Result<(), StoreError> {
    connection
        .execute(
            "UPDATE queues SET last_purged_at = ?2, purged_through_seq = ?3 WHERE id = ?1",
            params![params.queue_id, params.now, through_seq],
        )
        .map(drop)
        .map_err(database_error("queue_purge: mark"))
}

/// Fails with `QueueNotFound` when the queue was deleted after the engine
/// looked it up, so no write lands in a queue that no longer exists.
fn ensure_queue_exists(connection: &Connection, queue_id: i64) -> Result<(), StoreError> {
    if queue_exists(connection, queue_id)? {
        Ok(())
    } else {
        Err(StoreError::QueueNotFound { queue_id })
    }
}

fn queue_exists(connection: &Connection, queue_id: i64) -> Result<bool, StoreError> {
    connection
        .prepare_cached("SELECT 1 FROM queues WHERE id = ?1")
        .and_then(|mut select| select.exists([queue_id]))
        .map_err(database_error("queue exists"))
}

/// Where [`relocate`] puts a message.
struct Relocation<'a> {
    queue_id: i64,
    visible_at: i64,
    /// Recorded as `DeadLetterQueueSourceArn`; `None` clears it.
    dead_letter_source_arn: Option<&'a str>,
    /// A redriven message starts its receives over.
    reset_receives: bool,
    /// The move task redriving it; `None` keeps what the message had.
    redriven_by_task: Option<&'a str>,
    /// Restarts its retention clock (a FIFO dead-letter queue does, as on SQS).
    sent_at: Option<i64>,
}

/// Moves a message to another queue under a new sequence number, in the
/// caller's transaction: it is in exactly one queue at every instant, and
/// no receipt handle issued before the move can ever act on it again (a
/// handle names the sequence number, and sequence numbers are never reused).
fn relocate(connection: &Connection, seq: i64, to: &Relocation<'_>) -> Result<(), StoreError> {
    let (from_queue, group_id): (i64, Option<String>) = connection
        .prepare_cached("SELECT queue_id, group_id FROM messages WHERE seq = ?1")
        .and_then(|mut select| select.query_row([seq], |row| Ok((row.get(0)?, row.get(1)?))))
        .map_err(database_error("relocate: source"))?;
    connection
        .prepare_cached(
            "INSERT INTO messages (queue_id, message_id, body, attributes, md5_of_body,
                 md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at,
                 receive_count, first_received_at, last_received_at, dead_letter_source_arn,
                 failure_count, first_failure_at, last_failure_at, last_failure_class,
                 last_failure_message, redriven_by_task, dedup_id)
             SELECT ?2, message_id, body, attributes, md5_of_body, md5_of_attributes,
                 trace_header, group_id, sender_id, COALESCE(?7, sent_at), ?3,
                 CASE WHEN ?5 THEN 0 ELSE receive_count END,
                 CASE WHEN ?5 THEN NULL ELSE first_received_at END,
                 CASE WHEN ?5 THEN NULL ELSE last_received_at END,
                 ?4, failure_count, first_failure_at, last_failure_at, last_failure_class,
                 last_failure_message, COALESCE(?6, redriven_by_task), dedup_id
             FROM messages WHERE seq = ?1",
        )
        .and_then(|mut insert| {
            insert.execute(params![
                seq,
                to.queue_id,
                to.visible_at,
                to.dead_letter_source_arn,
                to.reset_receives,
                to.redriven_by_task,
                to.sent_at
            ])
        })
        .map_err(database_error("relocate: copy"))?;
    connection
        .prepare_cached("DELETE FROM messages WHERE seq = ?1")
        .and_then(|mut delete| delete.execute([seq]))
        .map_err(database_error("relocate: remove"))?;
    let mut touched = TouchedGroups::default();
    touched.touch(from_queue, group_id.as_deref());
    touched.touch(to.queue_id, group_id.as_deref());
    touched.refresh(connection)
}

/// Moves a message to its dead-letter queue, visible at once, keeping its id,
/// body, attributes, original SentTimestamp, receive count and failure
/// history, and recording where it came from.
fn move_to_dead_letter_queue(
    connection: &Connection,
    seq: i64,
    target: &DeadLetterTarget,
    now: i64,
) -> Result<(), StoreError> {
    let fifo_target = fifo::queue_kind(connection, target.queue_id)? == Some(true);
    relocate(
        connection,
        seq,
        &Relocation {
            queue_id: target.queue_id,
            visible_at: now,
            dead_letter_source_arn: Some(&target.source_arn),
            reset_receives: false,
            redriven_by_task: None,
            sent_at: fifo_target.then_some(now),
        },
    )
}

pub(crate) fn message_insert_batch(
    connection: &Connection,
    params: &MessageInsertParams,
) -> Result<Vec<InsertedMessage>, StoreError> {
    let fifo = fifo::queue_kind(connection, params.queue_id)?.ok_or(StoreError::QueueNotFound {
        queue_id: params.queue_id,
    })?;
    if fifo {
        insert_fifo_batch(connection, params)
    } else {
        insert_standard_batch(connection, params)
    }
}

/// The columns a send fills, but for `dedup_id` (FIFO only); in the order of
/// [`row_values`].
const INSERTED_COLUMNS: &str = "queue_id, message_id, body, attributes, md5_of_body,
     md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at";

/// A message's attributes as stored: JSON, or NULL when it has none.
fn attributes_json(message: &NewMessage) -> Option<String> {
    (!message.attributes.is_empty()).then(|| to_json(&message.attributes))
}

/// The values of [`INSERTED_COLUMNS`] for one message.
fn row_values<'a>(
    queue_id: &'a i64,
    message: &'a NewMessage,
    attributes_json: &'a Option<String>,
) -> [&'a dyn rusqlite::ToSql; 11] {
    [
        queue_id,
        &message.message_id,
        &message.body,
        attributes_json,
        &message.md5_of_body,
        &message.md5_of_attributes,
        &message.trace_header,
        &message.group_id,
        &message.sender_id,
        &message.sent_at,
        &message.visible_at,
    ]
}

/// A FIFO queue's batch, a statement per message: each one's deduplication
/// and group change between the rows.
fn insert_fifo_batch(
    connection: &Connection,
    params: &MessageInsertParams,
) -> Result<Vec<InsertedMessage>, StoreError> {
    let mut insert = connection
        .prepare_cached(&format!(
            "INSERT INTO messages ({INSERTED_COLUMNS}, dedup_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
        ))
        .map_err(database_error("message_insert_batch: prepare"))?;
    let mut inserted = Vec::with_capacity(params.messages.len());
    for message in &params.messages {
        let deduplication = message.deduplication.as_ref();
        if let Some(deduplication) = deduplication
            && let Some((seq, message_id)) = fifo::remembered(
                connection,
                params.queue_id,
                deduplication,
                params.deduplication_window_start,
            )?
        {
            inserted.push(InsertedMessage {
                seq,
                message_id,
                duplicate: true,
            });
            continue;
        }
        let attributes = attributes_json(message);
        let dedup_id = deduplication.map(|deduplication| &deduplication.id);
        let mut values = row_values(&params.queue_id, message, &attributes).to_vec();
        values.push(&dedup_id);
        insert
            .execute(values.as_slice())
            .map_err(database_error("message_insert_batch: insert"))?;
        let seq = connection.last_insert_rowid();
        if let Some(deduplication) = deduplication {
            fifo::remember(
                connection,
                params.queue_id,
                deduplication,
                seq,
                &message.message_id,
                message.sent_at,
            )?;
        }
        if let Some(group_id) = &message.group_id {
            fifo::group_arrival(
                connection,
                params.queue_id,
                group_id,
                seq,
                message.visible_at,
            )?;
        }
        inserted.push(InsertedMessage {
            seq,
            message_id: message.message_id.clone(),
            duplicate: false,
        });
    }
    Ok(inserted)
}

/// Rows one `INSERT` of [`insert_standard_batch`] carries: an SQS batch.
const ROWS_PER_INSERT: usize = 10;

/// A standard queue's batch as one multi-row `INSERT` per ten messages:
/// `AUTOINCREMENT` reads and writes `sqlite_sequence` once per statement, not
/// once per message. SQLite inserts the rows in the order of `VALUES`, each
/// under the largest sequence number so far plus one, so a statement's
/// numbers are its last one's and the ones consecutively below it.
fn insert_standard_batch(
    connection: &Connection,
    params: &MessageInsertParams,
) -> Result<Vec<InsertedMessage>, StoreError> {
    let mut inserted = Vec::with_capacity(params.messages.len());
    for chunk in params.messages.chunks(ROWS_PER_INSERT) {
        let mut insert = connection
            .prepare_cached(&format!(
                "INSERT INTO messages ({INSERTED_COLUMNS}) VALUES {}",
                vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ")
            ))
            .map_err(database_error("message_insert_batch: prepare rows"))?;
        let attributes: Vec<Option<String>> = chunk.iter().map(attributes_json).collect();
        let values: Vec<&dyn rusqlite::ToSql> = chunk
            .iter()
            .zip(&attributes)
            .flat_map(|(message, attributes)| row_values(&params.queue_id, message, attributes))
            .collect();
        insert
            .execute(values.as_slice())
            .map_err(database_error("message_insert_batch: insert rows"))?;
        let first = connection.last_insert_rowid() - (chunk.len() as i64 - 1);
        inserted.extend(
            chunk
                .iter()
                .zip(first..)
                .map(|(message, seq)| InsertedMessage {
                    seq,
                    message_id: message.message_id.clone(),
                    duplicate: false,
                }),
        );
    }
    Ok(inserted)
}

/// Columns [`message_row`] decodes, in its order.
pub(crate) const MESSAGE_COLUMNS: &str =
    "seq, message_id, body, attributes, md5_of_body, md5_of_attributes,
     trace_header, group_id, sender_id, sent_at, receive_count, first_received_at,
     dead_letter_source_arn, failure_count, first_failure_at, last_failure_at,
     last_failure_class, last_failure_message, last_received_at, dedup_id";

pub(crate) struct MessageRow {
    message: StoredMessage,
    attributes_json: Option<String>,
}

pub(crate) fn message_row(row: &Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        attributes_json: row.get(3)?,
        message: StoredMessage {
            seq: row.get(0)?,
            message_id: row.get(1)?,
            body: row.get(2)?,
            attributes: Default::default(),
            md5_of_body: row.get(4)?,
            md5_of_attributes: row.get(5)?,
            trace_header: row.get(6)?,
            group_id: row.get(7)?,
            sender_id: row.get(8)?,
            sent_at: row.get(9)?,
            receive_count: row.get(10)?,
            first_received_at: row.get(11)?,
            dead_letter_source_arn: row.get(12)?,
            failures: FailureRecord {
                count: row.get(13)?,
                first_at: row.get(14)?,
                last_at: row.get(15)?,
                last_class: row.get(16)?,
                last_message: row.get(17)?,
            },
            last_received_at: row.get(18)?,
            deduplication_id: row.get(19)?,
        },
    })
}

impl MessageRow {
    pub(crate) fn seq(&self) -> i64 {
        self.message.seq
    }

    pub(crate) fn receive_count(&self) -> i64 {
        self.message.receive_count
    }
}

/// The stored message of a row, with its attributes decoded.
pub(crate) fn decode_attributes(row: MessageRow) -> Result<StoredMessage, StoreError> {
    let MessageRow {
        mut message,
        attributes_json,
    } = row;
    if let Some(json) = attributes_json {
        message.attributes = from_json(&json, "message attributes")?;
    }
    Ok(message)
}

/// What a receive did with a message it met.
pub(crate) enum Met {
    /// Leased it.
    Leased,
    /// Dropped it (expired) or moved it to the dead-letter queue.
    Dropped,
    /// Left it: this receive has dropped as many as one may.
    OutOfBudget,
}

/// One receive's progress: what it leased, and the expired or dead-lettered
/// messages it dropped on the way.
pub(crate) struct ReceivePass<'a> {
    params: &'a MessageReceiveParams,
    policy: ReceivePolicy<'a, DeadLetterTarget>,
    outcome: ReceiveOutcome,
}

impl<'a> ReceivePass<'a> {
    pub(crate) fn start(
        connection: &Connection,
        params: &'a MessageReceiveParams,
    ) -> Result<Self, StoreError> {
        let dead_letter = match &params.dead_letter {
            Some(target) if queue_exists(connection, target.queue_id)? => {
                Some((target, target.max_receive_count))
            }
            _ => None,
        };
        Ok(Self {
            params,
            policy: ReceivePolicy::new(Some(params.expired_at_or_before), dead_letter),
            outcome: ReceiveOutcome::default(),
        })
    }

    pub(crate) fn leased(&self) -> usize {
        self.outcome.messages.len()
    }

    pub(crate) fn out_of_budget(&self) -> bool {
        self.policy.out_of_budget()
    }

    /// Expires, dead-letters or leases one visible message.
    pub(crate) fn meet(
        &mut self,
        connection: &Connection,
        row: MessageRow,
    ) -> Result<Met, StoreError> {
        let params = self.params;
        let seq = row.message.seq;
        match self
            .policy
            .fate(row.message.sent_at, row.message.receive_count)
        {
            Fate::OutOfBudget => return Ok(Met::OutOfBudget),
            Fate::Expire => {
                connection
                    .prepare_cached("DELETE FROM messages WHERE seq = ?1")
                    .and_then(|mut expire| expire.execute([seq]))
                    .map_err(database_error("message_receive: expire"))?;
                self.outcome.expired += 1;
                return Ok(Met::Dropped);
            }
            Fate::DeadLetter(target) => {
                move_to_dead_letter_queue(connection, seq, target, params.now)?;
                self.outcome.dead_lettered += 1;
                return Ok(Met::Dropped);
            }
            Fate::Lease => {}
        }
        connection
            .prepare_cached(
                "UPDATE messages
                 SET visible_at = ?2, receive_count = receive_count + 1,
                     first_received_at = COALESCE(first_received_at, ?3), last_received_at = ?3
                 WHERE seq = ?1",
            )
            .and_then(|mut lease| lease.execute(params![seq, params.visible_at, params.now]))
            .map_err(database_error("message_receive: lease"))?;
        let mut message = decode_attributes(row)?;
        message.receive_count += 1;
        message.first_received_at.get_or_insert(params.now);
        message.last_received_at = Some(params.now);
        self.outcome.messages.push(message);
        Ok(Met::Leased)
    }

    pub(crate) fn finish(self) -> ReceiveOutcome {
        self.outcome
    }
}

pub(crate) fn message_receive(
    connection: &Connection,
    params: &MessageReceiveParams,
) -> Result<ReceiveOutcome, StoreError> {
    let mut pass = ReceivePass::start(connection, params)?;
    if fifo::queue_kind(connection, params.queue_id)? == Some(true) {
        return fifo::receive(connection, params, pass);
    }
    let mut select = connection
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS}
             FROM messages
             WHERE queue_id = ?1 AND visible_at <= ?2
             ORDER BY visible_at, receive_count, seq
             LIMIT ?3"
        ))
        .map_err(database_error("message_receive: prepare select"))?;
    let wanted = params.max_messages as usize;
    // A lease of zero seconds leaves a message visible, so a later round of
    // this loop could meet it again: `met` keeps one receive from returning
    // a message twice. Expired messages are dropped as they are met, which is
    // why a queue full of them needs several rounds to fill a receive.
    let mut met = std::collections::HashSet::new();
    'receive: while pass.leased() < wanted {
        // Rows leased with a zero lease can come back in this select, so the
        // limit leaves room for them next to the messages still wanted;
        // expired rows are deleted as they are met and cannot come back.
        let rows = select
            .query_map(
                params![params.queue_id, params.now, wanted as i64],
                message_row,
            )
            .map_err(database_error("message_receive: select"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(database_error("message_receive: read row"))?;
        let mut progressed = false;
        for row in rows {
            if pass.leased() >= wanted || !met.insert(row.seq()) {
                continue;
            }
            progressed = true;
            if let Met::OutOfBudget = pass.meet(connection, row)? {
                break 'receive;
            }
        }
        if !progressed {
            break;
        }
    }
    let mut outcome = pass.finish();
    if outcome.messages.is_empty() {
        outcome.next_visible_at = connection
            .prepare_cached(
                "SELECT MIN(visible_at) FROM messages WHERE queue_id = ?1 AND visible_at > ?2",
            )
            .and_then(|mut next| {
                next.query_row(params![params.queue_id, params.now], |row| row.get(0))
            })
            .map_err(database_error("message_receive: next visible"))?;
    }
    Ok(outcome)
}

pub(crate) fn message_delete_batch(
    connection: &Connection,
    params: &MessageDeleteParams,
) -> Result<Vec<DeleteOutcome>, StoreError> {
    if fifo::queue_kind(connection, params.queue_id)? == Some(true) {
        return fifo_delete_batch(connection, params);
    }
    // A handle deletes its own lease's message, or a message nobody holds
    // now; never a message another consumer received after it.
    let mut delete = connection
        .prepare_cached(
            "DELETE FROM messages
             WHERE seq = ?1 AND queue_id = ?2 AND (receive_count = ?3 OR visible_at <= ?4)",
        )
        .map_err(database_error("message_delete_batch: prepare"))?;
    let mut exists = connection
        .prepare_cached("SELECT 1 FROM messages WHERE seq = ?1 AND queue_id = ?2")
        .map_err(database_error("message_delete_batch: prepare exists"))?;
    params
        .leases
        .iter()
        .map(|lease| {
            let deleted = delete
                .execute(params![lease.seq, params.queue_id, lease.lease, params.now])
                .map_err(database_error("message_delete_batch: delete"))?;
            if deleted > 0 {
                return Ok(DeleteOutcome::Deleted);
            }
            let held = exists
                .exists(params![lease.seq, params.queue_id])
                .map_err(database_error("message_delete_batch: exists"))?;
            Ok(if held {
                DeleteOutcome::LeasedToAnother
            } else {
                DeleteOutcome::AlreadyGone
            })
        })
        .collect()
}

/// On a FIFO queue only a running lease deletes: an ended one has let the
/// message go back to its group's head, to be delivered again in order.
fn fifo_delete_batch(
    connection: &Connection,
    params: &MessageDeleteParams,
) -> Result<Vec<DeleteOutcome>, StoreError> {
    let mut delete = connection
        .prepare_cached(
            "DELETE FROM messages
             WHERE seq = ?1 AND queue_id = ?2 AND receive_count = ?3 AND visible_at > ?4
             RETURNING group_id",
        )
        .map_err(database_error("fifo delete: prepare"))?;
    let mut exists = connection
        .prepare_cached("SELECT 1 FROM messages WHERE seq = ?1 AND queue_id = ?2")
        .map_err(database_error("fifo delete: prepare exists"))?;
    let mut touched = TouchedGroups::default();
    let outcomes = params
        .leases
        .iter()
        .map(|lease| {
            let deleted: Option<Option<String>> = delete
                .query_row(
                    params![lease.seq, params.queue_id, lease.lease, params.now],
                    |row| row.get(0),
                )
                .optional()
                .map_err(database_error("fifo delete: delete"))?;
            if let Some(group_id) = deleted {
                touched.touch(params.queue_id, group_id.as_deref());
                return Ok(DeleteOutcome::Deleted);
            }
            let held = exists
                .exists(params![lease.seq, params.queue_id])
                .map_err(database_error("fifo delete: exists"))?;
            Ok(if held {
                DeleteOutcome::Expired
            } else {
                DeleteOutcome::AlreadyGone
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    touched.refresh(connection)?;
    Ok(outcomes)
}

pub(crate) fn message_change_visibility_batch(
    connection: &Connection,
    params: &MessageChangeVisibilityParams,
) -> Result<Vec<ChangeVisibilityOutcome>, StoreError> {
    let mut lookup = connection
        .prepare_cached(
            "SELECT receive_count, visible_at, group_id FROM messages WHERE seq = ?1 AND queue_id = ?2",
        )
        .map_err(database_error(
            "message_change_visibility_batch: prepare lookup",
        ))?;
    let mut touched = TouchedGroups::default();
    let mut update = connection
        .prepare_cached("UPDATE messages SET visible_at = ?2 WHERE seq = ?1")
        .map_err(database_error(
            "message_change_visibility_batch: prepare update",
        ))?;
    let outcomes = params
        .changes
        .iter()
        .map(|change| {
            let current: Option<(i64, i64, Option<String>)> = lookup
                .query_row(params![change.lease.seq, params.queue_id], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()
                .map_err(database_error("message_change_visibility_batch: lookup"))?;
            Ok(match current {
                Some((receive_count, _, _)) if receive_count != change.lease.lease => {
                    ChangeVisibilityOutcome::NotAvailable
                }
                Some((_, visible_at, _)) if visible_at <= params.now => {
                    ChangeVisibilityOutcome::NotInFlight
                }
                Some((_, _, group_id)) => {
                    update
                        .execute(params![change.lease.seq, change.visible_at])
                        .map_err(database_error("message_change_visibility_batch: update"))?;
                    touched.touch(params.queue_id, group_id.as_deref());
                    ChangeVisibilityOutcome::Changed
                }
                None => ChangeVisibilityOutcome::NotAvailable,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    touched.refresh(connection)?;
    Ok(outcomes)
}

pub(crate) fn message_nack(
    connection: &Connection,
    params: &MessageNackParams,
) -> Result<NackOutcome, StoreError> {
    let current: Option<(i64, i64, Option<String>)> = connection
        .prepare_cached(
            "SELECT receive_count, visible_at, group_id FROM messages WHERE seq = ?1 AND queue_id = ?2",
        )
        .and_then(|mut select| {
            select
                .query_row(params![params.lease.seq, params.queue_id], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()
        })
        .map_err(database_error("message_nack: lookup"))?;
    let (receive_count, group_id) = match current {
        None => return Ok(NackOutcome::NotAvailable),
        Some((receive_count, _, _)) if receive_count != params.lease.lease => {
            return Ok(NackOutcome::NotAvailable);
        }
        Some((_, visible_at, _)) if visible_at <= params.now => {
            return Ok(NackOutcome::NotInFlight);
        }
        Some((receive_count, _, group_id)) => (receive_count, group_id),
    };
    if let Some(failure) = &params.failure {
        connection
            .prepare_cached(
                "UPDATE messages
                 SET failure_count = failure_count + 1,
                     first_failure_at = COALESCE(first_failure_at, ?2),
                     last_failure_at = ?2, last_failure_class = ?3, last_failure_message = ?4
                 WHERE seq = ?1",
            )
            .and_then(|mut update| {
                update.execute(params![
                    params.lease.seq,
                    params.now,
                    failure.class,
                    failure.message
                ])
            })
            .map_err(database_error("message_nack: record failure"))?;
    }
    let dead_letter = match &params.dead_letter {
        Some(target) if queue_exists(connection, target.queue_id)? => Some(target),
        _ => None,
    };
    match dead_letter {
        Some(target)
            if nack_dead_letters(params.permanent, receive_count, target.max_receive_count) =>
        {
            move_to_dead_letter_queue(connection, params.lease.seq, target, params.now)?;
            Ok(NackOutcome::DeadLettered)
        }
        _ => {
            connection
                .prepare_cached("UPDATE messages SET visible_at = ?2 WHERE seq = ?1")
                .and_then(|mut update| update.execute(params![params.lease.seq, params.visible_at]))
                .map_err(database_error("message_nack: retry"))?;
            let mut touched = TouchedGroups::default();
            touched.touch(params.queue_id, group_id.as_deref());
            touched.refresh(connection)?;
            Ok(NackOutcome::Retried)
        }
    }
}

pub(crate) fn message_peek(
    connection: &Connection,
    params: &MessagePeekParams,
) -> Result<Vec<StoredMessage>, StoreError> {
    let rows = connection
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE queue_id = ?1 ORDER BY seq LIMIT ?2"
        ))
        .and_then(|mut select| {
            select
                .query_map(params![params.queue_id, params.limit], message_row)?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(database_error("message_peek"))?;
    rows.into_iter().map(decode_attributes).collect()
}

pub(crate) const MOVE_TASK_COLUMNS: &str =
    "handle, source_queue_id, source_arn, destination_arn, rate, status,
     started_at, finished_at, to_move, moved, failure_reason, requested_by, filter_class,
     sent_before, max_messages, skipped, sample";

pub(crate) fn move_task_row(row: &Row<'_>) -> rusqlite::Result<MoveTaskRecord> {
    Ok(MoveTaskRecord {
        handle: row.get(0)?,
        source_queue_id: row.get(1)?,
        source_arn: row.get(2)?,
        destination_arn: row.get(3)?,
        rate: row.get(4)?,
        status: row.get(5)?,
        started_at: row.get(6)?,
        finished_at: row.get(7)?,
        to_move: row.get(8)?,
        moved: row.get(9)?,
        failure_reason: row.get(10)?,
        requested_by: row.get(11)?,
        filter: MoveFilter {
            class: row.get(12)?,
            sent_before: row.get(13)?,
            max_messages: row.get(14)?,
            sample: row.get(16)?,
        },
        skipped: row.get(15)?,
    })
}

fn move_task_get(
    connection: &Connection,
    handle: &str,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    connection
        .prepare_cached(&format!(
            "SELECT {MOVE_TASK_COLUMNS} FROM move_tasks WHERE handle = ?1"
        ))
        .and_then(|mut select| select.query_row([handle], move_task_row).optional())
        .map_err(database_error("move_task: get"))
}

pub(crate) fn move_task_create(
    connection: &Connection,
    params: &MoveTaskCreateParams,
) -> Result<MoveTaskCreateOutcome, StoreError> {
    move_task_insert(connection, params, |connection| {
        connection
            .query_row(
                "SELECT COALESCE(MAX(seq), 0),
                        COALESCE(SUM((?2 IS NULL OR last_failure_class = ?2) AND (?3 IS NULL OR sent_at <= ?3)), 0)
                 FROM messages WHERE queue_id = ?1",
                params![params.source_queue_id, params.filter.class, params.filter.sent_before],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(database_error("move_task_create: snapshot"))
    })
}

/// Starts a move task unless one runs on its source, taking the source's
/// `(newest seq, matching messages)` from `snapshot` (the messages may
/// live in this database or in the log store's).
pub(crate) fn move_task_insert(
    connection: &Connection,
    params: &MoveTaskCreateParams,
    snapshot: impl FnOnce(&Connection) -> Result<(i64, i64), StoreError>,
) -> Result<MoveTaskCreateOutcome, StoreError> {
    ensure_queue_exists(connection, params.source_queue_id)?;
    let running = connection
        .prepare_cached(
            "SELECT 1 FROM move_tasks WHERE source_queue_id = ?1 AND status IN ('RUNNING', 'PAUSED')",
        )
        .and_then(|mut select| select.exists([params.source_queue_id]))
        .map_err(database_error("move_task_create: running"))?;
    if running {
        return Ok(MoveTaskCreateOutcome::AlreadyRunning);
    }
    let (until_seq, matching) = snapshot(connection)?;
    let to_move = params
        .filter
        .max_messages
        .map_or(matching, |max| matching.min(max));
    connection
        .execute(
            "INSERT INTO move_tasks (handle, source_queue_id, source_arn, destination_arn, rate,
                 status, started_at, until_seq, to_move, requested_by, filter_class, sent_before,
                 max_messages, sample)
             VALUES (?1, ?2, ?3, ?4, ?5, 'RUNNING', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                params.handle,
                params.source_queue_id,
                params.source_arn,
                params.destination_arn,
                params.rate,
                params.now,
                until_seq,
                to_move,
                params.requested_by,
                params.filter.class,
                params.filter.sent_before,
                params.filter.max_messages,
                params.filter.sample
            ],
        )
        .map_err(database_error("move_task_create: insert"))?;
    move_task_get(connection, &params.handle)?
        .map(|record| MoveTaskCreateOutcome::Created(Box::new(record)))
        .ok_or_else(|| StoreError::Corrupt {
            detail: "a move task vanished as it was created".into(),
        })
}

pub(crate) fn move_task_step(
    connection: &Connection,
    params: &MoveTaskStepParams,
) -> Result<MoveTaskStepOutcome, StoreError> {
    let Some(TaskPosition {
        record,
        until_seq,
        cursor,
        relapse_base_moved,
        relapse_base_count,
    }) = move_task_position(connection, &params.handle)?
    else {
        return Ok(MoveTaskStepOutcome {
            finished: true,
            ..MoveTaskStepOutcome::default()
        });
    };
    let source_queue_id = record.source_queue_id;
    let filter = &record.filter;
    let candidates: Vec<Candidate> = connection
        .prepare_cached(
            "SELECT seq, dead_letter_source_arn, visible_at, last_failure_class, sent_at FROM messages
             WHERE queue_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4",
        )
        .and_then(|mut select| {
            select
                .query_map(params![source_queue_id, cursor, until_seq, params.limit], |row| {
                    Ok(Candidate {
                        seq: row.get(0)?,
                        source_arn: row.get(1)?,
                        visible_at: row.get(2)?,
                        failure_class: row.get(3)?,
                        sent_at: row.get(4)?,
                    })
                })?
                .collect()
        })
        .map_err(database_error("move_task_step: candidates"))?;
    let mut skipped = 0i64;
    let mut outcome = MoveTaskStepOutcome::default();
    let mut last_seq = cursor;
    // Judged before moving more: a relapsing task must not feed the loop.
    let relapsed = redriven_count(connection, source_queue_id, &params.handle)?;
    let brake = move_step::relapse_brake(
        record.moved - relapse_base_moved,
        relapsed - relapse_base_count,
    );
    let mut end = StepEnd {
        brake,
        candidates: candidates.len(),
        limit: params.limit,
        ..StepEnd::default()
    };
    for candidate in &candidates {
        if end.stops_before_next(filter, record.moved + outcome.moved as i64) {
            break;
        }
        if !filter.admits(candidate.failure_class.as_ref(), candidate.sent_at) {
            skipped += 1;
            last_seq = candidate.seq;
            continue;
        }
        // A message someone is working on in the dead-letter queue stays
        // theirs: the task waits at it until the lease ends or it is deleted.
        if candidate.visible_at > params.now {
            end.held = true;
            break;
        }
        let destination = match params.destination.queue_for(candidate.source_arn.as_ref()) {
            Some(queue_id) if queue_exists(connection, queue_id)? => queue_id,
            _ => {
                end.failure = Some(move_step::destination_gone(
                    &params.destination,
                    candidate.source_arn.as_deref(),
                ));
                break;
            }
        };
        // A redriven message starts over: fresh lease history, visible now.
        relocate(
            connection,
            candidate.seq,
            &Relocation {
                queue_id: destination,
                visible_at: params.now,
                dead_letter_source_arn: None,
                reset_receives: true,
                redriven_by_task: Some(&params.handle),
                sent_at: None,
            },
        )?;
        outcome.moved += 1;
        if !outcome.destinations.contains(&destination) {
            outcome.destinations.push(destination);
        }
        last_seq = candidate.seq;
    }
    end.moved_total = record.moved + outcome.moved as i64;
    let (status, failure) = end.conclude();
    move_task_record_step(
        connection,
        &params.handle,
        &StepProgress {
            cursor: last_seq,
            moved: outcome.moved as i64,
            skipped,
            status,
            failure,
            now: params.now,
        },
    )?;
    outcome.finished = status != "RUNNING";
    Ok(outcome)
}

/// A running move task and where its walk of the source stands.
#[derive(Debug)]
pub(crate) struct TaskPosition {
    pub(crate) record: MoveTaskRecord,
    /// The newest sequence number of the source when the task started.
    pub(crate) until_seq: i64,
    /// The last sequence number it judged.
    pub(crate) cursor: i64,
    /// `moved`, and the task's messages back in the source, at its last
    /// resume: the relapse brake judges what happened since.
    pub(crate) relapse_base_moved: i64,
    pub(crate) relapse_base_count: i64,
}

/// Where a running task stands; `None` when no task has the handle or it
/// is not running.
pub(crate) fn move_task_position(
    connection: &Connection,
    handle: &str,
) -> Result<Option<TaskPosition>, StoreError> {
    let position: Option<(i64, i64, i64, i64, String)> = connection
        .prepare_cached(
            "SELECT until_seq, cursor_seq, relapse_base_moved, relapse_base_count, status
             FROM move_tasks WHERE handle = ?1",
        )
        .and_then(|mut select| {
            select
                .query_row([handle], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                    ))
                })
                .optional()
        })
        .map_err(database_error("move_task_position"))?;
    let Some((until_seq, cursor, relapse_base_moved, relapse_base_count, status)) = position else {
        return Ok(None);
    };
    if status != "RUNNING" {
        return Ok(None);
    }
    let record = move_task_get(connection, handle)?.ok_or_else(|| StoreError::Corrupt {
        detail: "a running move task vanished".into(),
    })?;
    Ok(Some(TaskPosition {
        record,
        until_seq,
        cursor,
        relapse_base_moved,
        relapse_base_count,
    }))
}

/// What one step of a move task did, to record.
#[derive(Debug)]
pub(crate) struct StepProgress {
    /// The last sequence number judged.
    pub(crate) cursor: i64,
    pub(crate) moved: i64,
    pub(crate) skipped: i64,
    /// The task's status after the step, and the reason it records.
    pub(crate) status: &'static str,
    pub(crate) failure: Option<String>,
    pub(crate) now: i64,
}

/// Records a step's progress on its task. A task cancelled while the step
/// ran (possible when its moves happened outside this database) stays
/// cancelled, with the messages the step moved counted.
pub(crate) fn move_task_record_step(
    connection: &Connection,
    handle: &str,
    progress: &StepProgress,
) -> Result<(), StoreError> {
    connection
        .prepare_cached(
            "UPDATE move_tasks SET cursor_seq = ?2, moved = moved + ?3, skipped = skipped + ?7,
                 status = CASE WHEN status = 'RUNNING' THEN ?4 ELSE status END,
                 failure_reason = CASE WHEN status = 'RUNNING' THEN ?5 ELSE failure_reason END,
                 finished_at = CASE WHEN status <> 'RUNNING' THEN finished_at
                                    WHEN ?4 IN ('RUNNING', 'PAUSED') THEN NULL ELSE ?6 END
             WHERE handle = ?1",
        )
        .and_then(|mut update| {
            update.execute(params![
                handle,
                progress.cursor,
                progress.moved,
                progress.status,
                progress.failure,
                progress.now,
                progress.skipped
            ])
        })
        .map_err(database_error("move_task_step: progress"))?;
    Ok(())
}

/// A message a move task considers.
struct Candidate {
    seq: i64,
    source_arn: Option<String>,
    visible_at: i64,
    failure_class: Option<String>,
    sent_at: i64,
}

/// How many of the source's messages the task redrove: they came back.
fn redriven_count(
    connection: &Connection,
    source_queue_id: i64,
    handle: &str,
) -> Result<i64, StoreError> {
    connection
        .prepare_cached(
            "SELECT COUNT(*) FROM messages WHERE queue_id = ?1 AND redriven_by_task = ?2",
        )
        .and_then(|mut select| select.query_row(params![source_queue_id, handle], |row| row.get(0)))
        .map_err(database_error("relapse_brake: relapsed"))
}

/// Resumes a paused task. The relapse brake starts counting again from
/// here: `relapsed` is how many of the task's messages are back in its
/// source now, or `None` to count them in this database.
pub(crate) fn move_task_resume(
    connection: &Connection,
    handle: &str,
    relapsed: Option<i64>,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    let resumed = connection
        .execute(
            "UPDATE move_tasks SET status = 'RUNNING', sample = NULL, failure_reason = NULL,
                 relapse_base_moved = moved,
                 relapse_base_count = COALESCE(?2, (SELECT COUNT(*) FROM messages
                     WHERE messages.queue_id = move_tasks.source_queue_id
                       AND messages.redriven_by_task = move_tasks.handle))
             WHERE handle = ?1 AND status = 'PAUSED'",
            params![handle, relapsed],
        )
        .map_err(database_error("move_task_resume"))?;
    if resumed == 0 {
        return Ok(None);
    }
    move_task_get(connection, handle)
}

pub(crate) fn move_task_cancel(
    connection: &Connection,
    handle: &str,
    now: i64,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    let cancelled = connection
        .execute(
            "UPDATE move_tasks SET status = 'CANCELLED', finished_at = ?2
             WHERE handle = ?1 AND status IN ('RUNNING', 'PAUSED')",
            params![handle, now],
        )
        .map_err(database_error("move_task_cancel"))?;
    if cancelled == 0 {
        return Ok(None);
    }
    move_task_get(connection, handle)
}

/// What the sweeper drops next: a deleted queue's messages first, then an
/// unfinished purge's.
pub(crate) fn left_behind(connection: &Connection) -> Result<Option<LeftBehind>, StoreError> {
    let deleted: Option<i64> = connection
        .prepare_cached(DELETED_QUEUE_WITH_MESSAGES_SQL)
        .and_then(|mut select| select.query_row([], |row| row.get(0)).optional())
        .map_err(database_error("left_behind: deleted queues"))?;
    if let Some(queue_id) = deleted {
        return Ok(Some(LeftBehind::DeletedQueue(queue_id)));
    }
    connection
        .prepare_cached(UNFINISHED_PURGE_SQL)
        .and_then(|mut select| {
            select
                .query_row([], |row| {
                    Ok(LeftBehind::Purged {
                        queue_id: row.get(0)?,
                        through_seq: row.get(1)?,
                    })
                })
                .optional()
        })
        .map_err(database_error("left_behind: purges"))
}

/// Drops up to `limit` of what [`left_behind`] found; a purge whose last
/// messages and deduplication ids go loses its mark. A deleted FIFO queue's
/// group rows go with the messages swept from them (every row names a
/// non-empty group); its deduplication ids and receive attempts run out
/// with their window.
pub(crate) fn message_sweep_left_behind(
    connection: &Connection,
    left_behind: LeftBehind,
    limit: u32,
) -> Result<u64, StoreError> {
    match left_behind {
        LeftBehind::DeletedQueue(queue_id) => {
            let groups: Vec<Option<String>> = connection
                .prepare_cached(
                    "DELETE FROM messages WHERE seq IN (
                         SELECT seq FROM messages WHERE queue_id = ?1 LIMIT ?2)
                     AND NOT EXISTS (SELECT 1 FROM queues WHERE id = ?1)
                     RETURNING group_id",
                )
                .and_then(|mut delete| {
                    delete
                        .query_map(params![queue_id, limit], |row| row.get(0))?
                        .collect()
                })
                .map_err(database_error("sweep: deleted queue"))?;
            let deleted = groups.len() as u64;
            fifo::forget_groups(connection, queue_id, groups.into_iter().flatten())?;
            Ok(deleted)
        }
        LeftBehind::Purged {
            queue_id,
            through_seq,
        } => {
            let fifo = fifo::queue_kind(connection, queue_id)? == Some(true);
            let step = drop_purged(connection, queue_id, through_seq, fifo, limit)?;
            if step.rows() < u64::from(limit) {
                // Only this purge's mark: a later purge's stays for its rest.
                connection
                    .prepare_cached(
                        "UPDATE queues SET purged_through_seq = NULL
                         WHERE id = ?1 AND purged_through_seq = ?2",
                    )
                    .and_then(|mut update| update.execute(params![queue_id, through_seq]))
                    .map_err(database_error("sweep: purge mark"))?;
            }
            Ok(step.rows())
        }
    }
}

pub(crate) fn message_expire(
    connection: &Connection,
    params: &MessageExpireParams,
) -> Result<u64, StoreError> {
    let groups: Vec<Option<String>> = connection
        .prepare_cached(
            "DELETE FROM messages WHERE seq IN (
                 SELECT seq FROM messages WHERE queue_id = ?1 AND sent_at <= ?2 LIMIT ?3)
             RETURNING group_id",
        )
        .and_then(|mut delete| {
            delete
                .query_map(
                    params![params.queue_id, params.expired_at_or_before, params.limit],
                    |row| row.get(0),
                )?
                .collect()
        })
        .map_err(database_error("message_expire"))?;
    let expired = groups.len() as u64;
    let mut touched = TouchedGroups::default();
    for group_id in &groups {
        touched.touch(params.queue_id, group_id.as_deref());
    }
    touched.refresh(connection)?;
    Ok(expired)
}
