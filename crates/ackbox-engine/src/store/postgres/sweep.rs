//! Dropping what is past retention and what deleted queues and deep purges
//! left behind, a bounded chunk per call.

use sqlx::PgConnection;

use super::database_error::postgres_error;
use super::fifo::{self, TouchedGroups};
use super::queue::drop_purged;
use super::rows::queue_kind;
use crate::store::{
    DELETED_QUEUE_WITH_MESSAGES_SQL, MessageExpireParams, StoreError, UNFINISHED_PURGE_SQL,
};

/// Drops up to `limit` rows that a deleted queue, or else an unfinished
/// purge, left behind; a purge whose last messages and deduplication ids go
/// loses its mark. A deleted FIFO queue's group rows go with the messages
/// swept from them; its deduplication ids and receive attempts run out with
/// their window.
pub(super) async fn message_sweep_left_behind(
    connection: &mut PgConnection,
    limit: u32,
) -> Result<u64, StoreError> {
    let deleted_queue: Option<i64> = sqlx::query_scalar(DELETED_QUEUE_WITH_MESSAGES_SQL)
        .fetch_optional(&mut *connection)
        .await
        .map_err(postgres_error("left_behind: deleted queues"))?;
    if let Some(queue_id) = deleted_queue {
        // SKIP LOCKED: nodes sweeping at once take different rows.
        let groups: Vec<Option<String>> = sqlx::query_scalar(
            "DELETE FROM messages WHERE seq IN (
                 SELECT seq FROM messages WHERE queue_id = $1
                 LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING group_id",
        )
        .bind(queue_id)
        .bind(i64::from(limit))
        .fetch_all(&mut *connection)
        .await
        .map_err(postgres_error("sweep: deleted queue"))?;
        let deleted = groups.len() as u64;
        fifo::forget_groups(connection, queue_id, groups.into_iter().flatten()).await?;
        return Ok(deleted);
    }
    let purge: Option<(i64, i64)> = sqlx::query_as(UNFINISHED_PURGE_SQL)
        .fetch_optional(&mut *connection)
        .await
        .map_err(postgres_error("left_behind: purges"))?;
    let Some((queue_id, through_seq)) = purge else {
        return Ok(0);
    };
    let fifo = queue_kind(connection, queue_id).await? == Some(true);
    let step = drop_purged(connection, queue_id, through_seq, fifo, limit).await?;
    if step.rows() < u64::from(limit) {
        // Only this purge's mark (a later purge's stays for its rest), and
        // only when no row was skipped because a receive held it.
        sqlx::query(
            "UPDATE queues SET purged_through_seq = NULL
             WHERE id = $1 AND purged_through_seq = $2
               AND NOT EXISTS (SELECT 1 FROM messages WHERE queue_id = $1 AND seq <= $2)
               AND NOT EXISTS (SELECT 1 FROM fifo_dedup WHERE queue_id = $1 AND seq <= $2)",
        )
        .bind(queue_id)
        .bind(through_seq)
        .execute(&mut *connection)
        .await
        .map_err(postgres_error("sweep: purge mark"))?;
    }
    Ok(step.rows())
}

pub(super) async fn message_expire(
    connection: &mut PgConnection,
    params: &MessageExpireParams,
) -> Result<u64, StoreError> {
    if queue_kind(connection, params.queue_id).await? == Some(true) {
        fifo::lock_queue(connection, params.queue_id).await?;
    }
    // Rows a receive holds are left for the next sweep (or that receive).
    let groups: Vec<Option<String>> = sqlx::query_scalar(
        "DELETE FROM messages WHERE seq IN (
             SELECT seq FROM messages WHERE queue_id = $1 AND sent_at <= $2
             LIMIT $3 FOR UPDATE SKIP LOCKED)
         RETURNING group_id",
    )
    .bind(params.queue_id)
    .bind(params.expired_at_or_before)
    .bind(i64::from(params.limit))
    .fetch_all(&mut *connection)
    .await
    .map_err(postgres_error("message_expire"))?;
    let mut touched = TouchedGroups::default();
    for group_id in &groups {
        touched.touch(params.queue_id, group_id.as_deref());
    }
    touched.refresh(connection).await?;
    Ok(groups.len() as u64)
}
