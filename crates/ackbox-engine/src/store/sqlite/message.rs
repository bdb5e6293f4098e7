//! Messages: send, delete, change visibility, nack and peek, run by the
//! writer inside a group commit (never beginning or committing itself).

use ackbox_core::receive_policy::nack_dead_letters;
use ackbox_core::visibility_change::{self, VisibilityChange};
use rusqlite::{Connection, OptionalExtension, params};

use super::database_error::database_error;
use super::fifo::{self, TouchedGroups};
use super::relocate::move_to_dead_letter_queue;
use super::rows::{MESSAGE_COLUMNS, decode_attributes, message_row, queue_exists};
use crate::store::{
    ChangeVisibilityOutcome, DeleteOutcome, InsertedMessage, MessageChangeVisibilityParams,
    MessageDeleteParams, MessageInsertParams, MessageNackParams, MessagePeekParams, NackOutcome,
    NewMessage, StoreError, StoredMessage, to_json,
};

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
pub(super) const INSERTED_COLUMNS: &str = "queue_id, message_id, body, attributes, md5_of_body,
     md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at";

/// A message's attributes as stored: JSON, or NULL when it has none.
pub(super) fn attributes_json(message: &NewMessage) -> Option<String> {
    (!message.attributes.is_empty()).then(|| to_json(&message.attributes))
}

/// The values of [`INSERTED_COLUMNS`] for one message.
pub(super) fn row_values<'a>(
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
pub(super) fn insert_fifo_batch(
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
pub(super) const ROWS_PER_INSERT: usize = 10;

/// A standard queue's batch as one multi-row `INSERT` per ten messages:
/// `AUTOINCREMENT` reads and writes `sqlite_sequence` once per statement, not
/// once per message. SQLite inserts the rows in the order of `VALUES`, each
/// under the largest sequence number so far plus one, so a statement's
/// numbers are its last one's and the ones consecutively below it.
pub(super) fn insert_standard_batch(
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
pub(super) fn fifo_delete_batch(
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
    let fifo = fifo::queue_kind(connection, params.queue_id)? == Some(true);
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
            let Some((receive_count, visible_at, group_id)) = current else {
                return Ok(ChangeVisibilityOutcome::NotAvailable);
            };
            Ok(
                match visibility_change::judge(
                    change.lease.lease,
                    receive_count,
                    visible_at,
                    params.now,
                    fifo,
                ) {
                    VisibilityChange::Stale => ChangeVisibilityOutcome::NotAvailable,
                    VisibilityChange::LeaseEnded => ChangeVisibilityOutcome::NotInFlight,
                    VisibilityChange::Apply => {
                        update
                            .execute(params![change.lease.seq, change.visible_at])
                            .map_err(database_error("message_change_visibility_batch: update"))?;
                        touched.touch(params.queue_id, group_id.as_deref());
                        ChangeVisibilityOutcome::Changed
                    }
                },
            )
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
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE queue_id = ?1 AND seq > ?3 ORDER BY seq \
             LIMIT ?2"
        ))
        .and_then(|mut select| {
            select
                .query_map(
                    params![params.queue_id, params.limit, params.after_seq],
                    message_row,
                )?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(database_error("message_peek"))?;
    rows.into_iter().map(decode_attributes).collect()
}
