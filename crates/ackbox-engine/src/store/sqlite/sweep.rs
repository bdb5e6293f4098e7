//! Dropping what is past retention and what deleted queues and deep purges
//! left behind, a bounded chunk per call.

use rusqlite::{Connection, OptionalExtension, params};

use super::database_error::database_error;
use super::fifo::{self, TouchedGroups};
use super::queue::drop_purged;
use crate::store::{
    DELETED_QUEUE_WITH_MESSAGES_SQL, LeftBehind, MessageExpireParams, StoreError,
    UNFINISHED_PURGE_SQL,
};

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
