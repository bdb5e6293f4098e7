//! Moving a message to another queue (dead-letter moves and redrive): a new
//! sequence number, so no receipt handle from before the move acts on it.

use sqlx::{PgConnection, Row};

use super::database_error::postgres_error;
use super::fifo::{self, TouchedGroups};
use super::notify::announce_messages;
use super::rows::{queue_kind, queue_kind_for_arrival};
use crate::store::relocation::Relocation;
use crate::store::{DeadLetterTarget, StoreError};

/// Moves a message to another queue under a new sequence number, so no
/// receipt handle issued before the move can act on it again. The caller
/// announces the arrival.
pub(super) async fn relocate(
    connection: &mut PgConnection,
    seq: i64,
    to: &Relocation<'_>,
) -> Result<(), StoreError> {
    let destination_fifo = queue_kind_for_arrival(connection, to.queue_id)
        .await?
        .ok_or(StoreError::QueueNotFound {
            queue_id: to.queue_id,
        })?;
    if destination_fifo {
        fifo::lock_queue(connection, to.queue_id).await?;
    }
    let moved = sqlx::query(
        "WITH gone AS (DELETE FROM messages WHERE seq = $1 RETURNING *)
         INSERT INTO messages (queue_id, message_id, body, attributes, md5_of_body,
             md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at,
             receive_count, first_received_at, last_received_at, dead_letter_source_arn,
             failure_count, first_failure_at, last_failure_at, last_failure_class,
             last_failure_message, redriven_by_task, dedup_id)
         SELECT $2, message_id, body, attributes, md5_of_body, md5_of_attributes,
             trace_header, group_id, sender_id, COALESCE($7, sent_at), $3,
             CASE WHEN $5 THEN 0 ELSE receive_count END,
             CASE WHEN $5 THEN NULL ELSE first_received_at END,
             CASE WHEN $5 THEN NULL ELSE last_received_at END,
             $4, failure_count, first_failure_at, last_failure_at, last_failure_class,
             last_failure_message, COALESCE($6, redriven_by_task), dedup_id
         FROM gone
         RETURNING (SELECT queue_id FROM gone), group_id",
    )
    .bind(seq)
    .bind(to.queue_id)
    .bind(to.visible_at)
    .bind(to.dead_letter_source_arn)
    .bind(to.reset_receives)
    .bind(to.redriven_by_task)
    .bind(to.sent_at)
    .fetch_one(&mut *connection)
    .await
    .map_err(postgres_error("relocate"))?;
    let from_queue: i64 = moved
        .try_get(0)
        .map_err(postgres_error("relocate: decode"))?;
    let group_id: Option<String> = moved
        .try_get(1)
        .map_err(postgres_error("relocate: decode"))?;
    let mut touched = TouchedGroups::default();
    touched.touch(from_queue, group_id.as_deref());
    touched.touch(to.queue_id, group_id.as_deref());
    touched.refresh(connection).await
}

pub(super) async fn move_to_dead_letter_queue(
    connection: &mut PgConnection,
    seq: i64,
    target: &DeadLetterTarget,
    now: i64,
) -> Result<(), StoreError> {
    let fifo_target = queue_kind(connection, target.queue_id).await? == Some(true);
    relocate(
        connection,
        seq,
        &Relocation::dead_letter(target, fifo_target, now),
    )
    .await?;
    // Inside the transaction: it commits on the lease pool, which does not
    // wait for the disk, so the lock a notifying commit holds is brief.
    announce_messages(connection, target.queue_id).await
}
