//! Moving a message to another queue (dead-letter moves and redrive): a new
//! sequence number, so no receipt handle from before the move acts on it.

use rusqlite::{Connection, params};

use super::database_error::database_error;
use super::fifo::{self, TouchedGroups};
use crate::store::relocation::Relocation;
use crate::store::{DeadLetterTarget, StoreError};

/// Moves a message to another queue under a new sequence number, in the
/// caller's transaction: it is in exactly one queue at every instant, and
/// no receipt handle issued before the move can ever act on it again (a
/// handle names the sequence number, and sequence numbers are never reused).
pub(super) fn relocate(
    connection: &Connection,
    seq: i64,
    to: &Relocation<'_>,
) -> Result<(), StoreError> {
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
pub(super) fn move_to_dead_letter_queue(
    connection: &Connection,
    seq: i64,
    target: &DeadLetterTarget,
    now: i64,
) -> Result<(), StoreError> {
    let fifo_target = fifo::queue_kind(connection, target.queue_id)? == Some(true);
    relocate(
        connection,
        seq,
        &Relocation::dead_letter(target, fifo_target, now),
    )
}
