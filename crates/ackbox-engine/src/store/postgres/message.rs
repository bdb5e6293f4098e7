//! Messages: send, delete, change visibility, nack, failure classes and
//! peek.

use ackbox_core::clock::Timestamp;
use ackbox_core::receive_policy::nack_dead_letters;
use ackbox_core::visibility_change::{self, VisibilityChange};
use sqlx::{PgConnection, PgPool};

use super::database_error::postgres_error;
use super::fifo::{self, TouchedGroups};
use super::notify::announce_messages;
use super::relocate::move_to_dead_letter_queue;
use super::rows::{
    message_columns, message_from_row, queue_exists, queue_kind, queue_kind_for_arrival,
};
use super::send_group::insert_standard;
use crate::store::{
    ChangeVisibilityOutcome, DeleteOutcome, FailureClassCount, InsertedMessage,
    MessageChangeVisibilityParams, MessageDeleteParams, MessageInsertParams, MessageNackParams,
    MessagePeekParams, NackOutcome, StoreError, StoredMessage,
};

pub(super) async fn message_insert_batch(
    connection: &mut PgConnection,
    params: &MessageInsertParams,
) -> Result<Vec<InsertedMessage>, StoreError> {
    let fifo = queue_kind_for_arrival(connection, params.queue_id)
        .await?
        .ok_or(StoreError::QueueNotFound {
            queue_id: params.queue_id,
        })?;
    if !fifo {
        return insert_standard(connection, params).await;
    }
    fifo::insert_batch(connection, params).await
}

pub(super) async fn message_delete_batch(
    connection: &mut PgConnection,
    params: &MessageDeleteParams,
) -> Result<Vec<DeleteOutcome>, StoreError> {
    if queue_kind(connection, params.queue_id).await? == Some(true) {
        fifo::lock_queue(connection, params.queue_id).await?;
        return fifo::delete_batch(connection, params).await;
    }
    // Standard queues go through [`delete_standard`]; a queue that is gone
    // took its messages with it.
    Ok(vec![DeleteOutcome::AlreadyGone; params.leases.len()])
}

/// DeleteMessageBatch on a standard queue: a handle deletes its own lease's
/// message, or a message nobody holds now; never a message another consumer
/// received after it. One statement, taking rows in sequence order, so two
/// overlapping batches cannot deadlock; a second read only classifies the
/// handles that deleted nothing.
pub(super) async fn delete_standard(
    pool: &PgPool,
    params: &MessageDeleteParams,
) -> Result<Vec<DeleteOutcome>, StoreError> {
    let seqs: Vec<i64> = params.leases.iter().map(|lease| lease.seq).collect();
    let generations: Vec<i64> = params.leases.iter().map(|lease| lease.lease).collect();
    let deleted: Vec<i64> = sqlx::query_scalar(
        "DELETE FROM messages AS message
         USING (SELECT * FROM UNNEST($2::bigint[], $3::bigint[]) AS lease(seq, generation)
                ORDER BY seq) AS lease
         WHERE message.seq = lease.seq AND message.queue_id = $1
           AND (message.receive_count = lease.generation OR message.visible_at <= $4)
         RETURNING message.seq",
    )
    .bind(params.queue_id)
    .bind(&seqs)
    .bind(&generations)
    .bind(params.now)
    .fetch_all(pool)
    .await
    .map_err(postgres_error("message_delete_batch: delete"))?;
    let remaining: Vec<i64> = seqs
        .iter()
        .copied()
        .filter(|seq| !deleted.contains(seq))
        .collect();
    let held: Vec<i64> = if remaining.is_empty() {
        Vec::new()
    } else {
        sqlx::query_scalar("SELECT seq FROM messages WHERE seq = ANY($1) AND queue_id = $2")
            .bind(&remaining)
            .bind(params.queue_id)
            .fetch_all(pool)
            .await
            .map_err(postgres_error("message_delete_batch: exists"))?
    };
    let mut already_deleted = std::collections::HashSet::new();
    Ok(params
        .leases
        .iter()
        .map(|lease| {
            // A batch naming one message twice deletes it once; the second
            // entry finds it gone, as on the embedded store.
            if deleted.contains(&lease.seq) && already_deleted.insert(lease.seq) {
                DeleteOutcome::Deleted
            } else if held.contains(&lease.seq) {
                DeleteOutcome::LeasedToAnother
            } else {
                DeleteOutcome::AlreadyGone
            }
        })
        .collect())
}

/// Locks a message of a queue and reads its lease: (receive count, deadline, group).
pub(super) async fn lock_lease(
    connection: &mut PgConnection,
    queue_id: i64,
    seq: i64,
) -> Result<Option<(i64, i64, Option<String>)>, StoreError> {
    sqlx::query_as(
        "SELECT receive_count, visible_at, group_id FROM messages
         WHERE seq = $1 AND queue_id = $2 FOR UPDATE",
    )
    .bind(seq)
    .bind(queue_id)
    .fetch_optional(connection)
    .await
    .map_err(postgres_error("lease lookup"))
}

pub(super) async fn message_change_visibility_batch(
    connection: &mut PgConnection,
    params: &MessageChangeVisibilityParams,
) -> Result<Vec<ChangeVisibilityOutcome>, StoreError> {
    let fifo = queue_kind(connection, params.queue_id).await? == Some(true);
    if fifo {
        fifo::lock_queue(connection, params.queue_id).await?;
    }
    let mut touched = TouchedGroups::default();
    let mut outcomes = Vec::with_capacity(params.changes.len());
    let mut made_visible = false;
    for change in &params.changes {
        let Some((receive_count, visible_at, group_id)) =
            lock_lease(connection, params.queue_id, change.lease.seq).await?
        else {
            outcomes.push(ChangeVisibilityOutcome::NotAvailable);
            continue;
        };
        let outcome = match visibility_change::judge(
            change.lease.lease,
            receive_count,
            visible_at,
            params.now,
            fifo,
        ) {
            VisibilityChange::Stale => ChangeVisibilityOutcome::NotAvailable,
            VisibilityChange::LeaseEnded => ChangeVisibilityOutcome::NotInFlight,
            VisibilityChange::Apply => {
                sqlx::query("UPDATE messages SET visible_at = $2 WHERE seq = $1")
                    .bind(change.lease.seq)
                    .bind(change.visible_at)
                    .execute(&mut *connection)
                    .await
                    .map_err(postgres_error("message_change_visibility_batch: update"))?;
                touched.touch(params.queue_id, group_id.as_deref());
                made_visible |= change.visible_at <= params.now;
                ChangeVisibilityOutcome::Changed
            }
        };
        outcomes.push(outcome);
    }
    touched.refresh(connection).await?;
    if made_visible {
        announce_messages(connection, params.queue_id).await?;
    }
    Ok(outcomes)
}

pub(super) async fn message_nack(
    connection: &mut PgConnection,
    params: &MessageNackParams,
) -> Result<NackOutcome, StoreError> {
    if queue_kind(connection, params.queue_id).await? == Some(true) {
        fifo::lock_queue(connection, params.queue_id).await?;
    }
    let (receive_count, group_id) =
        match lock_lease(connection, params.queue_id, params.lease.seq).await? {
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
        sqlx::query(
            "UPDATE messages
             SET failure_count = failure_count + 1,
                 first_failure_at = COALESCE(first_failure_at, $2),
                 last_failure_at = $2, last_failure_class = $3, last_failure_message = $4
             WHERE seq = $1",
        )
        .bind(params.lease.seq)
        .bind(params.now)
        .bind(&failure.class)
        .bind(&failure.message)
        .execute(&mut *connection)
        .await
        .map_err(postgres_error("message_nack: record failure"))?;
    }
    let dead_letter = match &params.dead_letter {
        Some(target) if queue_exists(connection, target.queue_id).await? => Some(target),
        _ => None,
    };
    match dead_letter {
        Some(target)
            if nack_dead_letters(params.permanent, receive_count, target.max_receive_count) =>
        {
            move_to_dead_letter_queue(connection, params.lease.seq, target, params.now).await?;
            Ok(NackOutcome::DeadLettered)
        }
        _ => {
            sqlx::query("UPDATE messages SET visible_at = $2 WHERE seq = $1")
                .bind(params.lease.seq)
                .bind(params.visible_at)
                .execute(&mut *connection)
                .await
                .map_err(postgres_error("message_nack: retry"))?;
            let mut touched = TouchedGroups::default();
            touched.touch(params.queue_id, group_id.as_deref());
            touched.refresh(connection).await?;
            announce_messages(connection, params.queue_id).await?;
            Ok(NackOutcome::Retried)
        }
    }
}

pub(super) async fn message_failure_classes(
    pool: &PgPool,
    queue_id: i64,
    sent_before: Option<Timestamp>,
) -> Result<Vec<FailureClassCount>, StoreError> {
    let rows: Vec<(String, i64, i64, i64, Option<String>)> = sqlx::query_as(
        "SELECT COALESCE(last_failure_class, ''), COUNT(*), MIN(sent_at), MAX(sent_at),
                (ARRAY_AGG(last_failure_message ORDER BY seq))[1]
         FROM messages WHERE queue_id = $1 AND sent_at <= $2
         GROUP BY COALESCE(last_failure_class, '')
         ORDER BY COUNT(*) DESC, COALESCE(last_failure_class, '')",
    )
    .bind(queue_id)
    .bind(sent_before.unwrap_or(Timestamp::MAX))
    .fetch_all(pool)
    .await
    .map_err(postgres_error("message_failure_classes"))?;
    Ok(rows
        .into_iter()
        .map(
            |(class, count, oldest_sent_at, newest_sent_at, example)| FailureClassCount {
                class,
                count,
                oldest_sent_at,
                newest_sent_at,
                example,
            },
        )
        .collect())
}

pub(super) async fn message_peek(
    pool: &PgPool,
    params: MessagePeekParams,
) -> Result<Vec<StoredMessage>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        message_columns!(),
        " FROM messages WHERE queue_id = $1 AND seq > $3 ORDER BY seq LIMIT $2"
    ))
    .bind(params.queue_id)
    .bind(i64::from(params.limit))
    .bind(params.after_seq)
    .fetch_all(pool)
    .await
    .map_err(postgres_error("message_peek"))?
    .iter()
    .map(|row| message_from_row(row).map(|row| row.message))
    .collect()
}
