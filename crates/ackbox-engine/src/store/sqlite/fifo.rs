//! FIFO queues: message groups, the deduplication window and receive attempts.
//!
//! A group's messages are delivered in sequence order, and nothing of a group
//! is delivered while any of its messages is leased. `fifo_groups` keeps one
//! row per non-empty group with the instant it may deliver next, so a receive
//! finds deliverable groups with one index range however many groups are
//! blocked. Every mutation that touches a group's messages refreshes its row
//! in the same transaction; the row is derived data, recomputed from the
//! messages, never incremented.

use std::collections::{BTreeSet, HashMap};

use ackbox_core::limits::MAX_RECEIVE_MESSAGES;
use rusqlite::{Connection, OptionalExtension, params};

use super::database_error::database_error;
use crate::store::{Deduplication, StoreError};

/// Whether a queue is FIFO; `None` when it does not exist.
pub(crate) fn queue_kind(
    connection: &Connection,
    queue_id: i64,
) -> Result<Option<bool>, StoreError> {
    connection
        .prepare_cached("SELECT fifo FROM queues WHERE id = ?1")
        .and_then(|mut select| select.query_row([queue_id], |row| row.get(0)).optional())
        .map_err(database_error("queue kind"))
}

/// Recomputes a group's row from its messages: gone when the group is empty,
/// else available at the later of its head's visibility and every lease on
/// its messages.
///
/// Only the first [`MAX_RECEIVE_MESSAGES`] messages can hold a lease: a
/// receive leases a run from the head of an available group, and a group
/// with a running lease is not available, so every running lease belongs to
/// the run one receive took, and every message before that run is gone.
pub(crate) fn refresh_group(
    connection: &Connection,
    queue_id: i64,
    group_id: &str,
) -> Result<(), StoreError> {
    let front: Vec<(i64, i64, i64)> = connection
        .prepare_cached(
            "SELECT seq, visible_at, receive_count FROM messages
             WHERE queue_id = ?1 AND group_id = ?2 ORDER BY seq LIMIT ?3",
        )
        .and_then(|mut select| {
            select
                .query_map(params![queue_id, group_id, MAX_RECEIVE_MESSAGES], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })?
                .collect()
        })
        .map_err(database_error("fifo group: front"))?;
    let Some((head_seq, available_at)) = crate::store::group_availability(&front) else {
        return connection
            .prepare_cached("DELETE FROM fifo_groups WHERE queue_id = ?1 AND group_id = ?2")
            .and_then(|mut delete| delete.execute(params![queue_id, group_id]))
            .map(drop)
            .map_err(database_error("fifo group: drop"));
    };
    connection
        .prepare_cached(
            "INSERT INTO fifo_groups (queue_id, group_id, available_at, head_seq)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (queue_id, group_id)
             DO UPDATE SET available_at = excluded.available_at, head_seq = excluded.head_seq",
        )
        .and_then(|mut upsert| upsert.execute(params![queue_id, group_id, available_at, head_seq]))
        .map(drop)
        .map_err(database_error("fifo group: store"))
}

/// Groups whose messages a mutation changed; [`TouchedGroups::refresh`]
/// brings the rows of those in FIFO queues up to date.
#[derive(Debug, Default)]
pub(crate) struct TouchedGroups(BTreeSet<(i64, String)>);

impl TouchedGroups {
    pub(crate) fn touch(&mut self, queue_id: i64, group_id: Option<&str>) {
        if let Some(group_id) = group_id {
            self.0.insert((queue_id, group_id.to_owned()));
        }
    }

    pub(crate) fn refresh(self, connection: &Connection) -> Result<(), StoreError> {
        let mut fifo_queues = HashMap::new();
        for (queue_id, group_id) in self.0 {
            let fifo = match fifo_queues.get(&queue_id) {
                Some(&fifo) => fifo,
                None => {
                    let fifo = queue_kind(connection, queue_id)?.unwrap_or(false);
                    fifo_queues.insert(queue_id, fifo);
                    fifo
                }
            };
            if fifo {
                refresh_group(connection, queue_id, &group_id)?;
            }
        }
        Ok(())
    }
}

/// A message arrived at the tail of its group: the group exists from now on,
/// and an existing group's head and leases are unchanged.
pub(crate) fn group_arrival(
    connection: &Connection,
    queue_id: i64,
    group_id: &str,
    seq: i64,
    visible_at: i64,
) -> Result<(), StoreError> {
    connection
        .prepare_cached(
            "INSERT INTO fifo_groups (queue_id, group_id, available_at, head_seq)
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (queue_id, group_id) DO NOTHING",
        )
        .and_then(|mut insert| insert.execute(params![queue_id, group_id, visible_at, seq]))
        .map(drop)
        .map_err(database_error("fifo group: arrival"))
}

/// The first send of `deduplication` inside the window, if any: its sequence
/// number and message id. A send before an unfinished purge does not count:
/// the purge cleared the window, though the sweeper may not have dropped
/// that entry yet.
pub(crate) fn remembered(
    connection: &Connection,
    queue_id: i64,
    deduplication: &Deduplication,
    window_start: i64,
) -> Result<Option<(i64, String)>, StoreError> {
    connection
        .prepare_cached(
            "SELECT seq, message_id FROM fifo_dedup
             WHERE queue_id = ?1 AND scope = ?2 AND dedup_id = ?3 AND sent_at > ?4
               AND seq > COALESCE((SELECT purged_through_seq FROM queues WHERE id = ?1), 0)",
        )
        .and_then(|mut select| {
            select
                .query_row(
                    params![
                        queue_id,
                        deduplication.scope,
                        deduplication.id,
                        window_start
                    ],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
        })
        .map_err(database_error("fifo dedup: lookup"))
}

/// Opens the window for a first send (replacing an expired entry).
pub(crate) fn remember(
    connection: &Connection,
    queue_id: i64,
    deduplication: &Deduplication,
    seq: i64,
    message_id: &str,
    sent_at: i64,
) -> Result<(), StoreError> {
    connection
        .prepare_cached(
            "INSERT INTO fifo_dedup (queue_id, scope, dedup_id, message_id, seq, sent_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (queue_id, scope, dedup_id) DO UPDATE
             SET message_id = excluded.message_id, seq = excluded.seq, sent_at = excluded.sent_at",
        )
        .and_then(|mut upsert| {
            upsert.execute(params![
                queue_id,
                deduplication.scope,
                deduplication.id,
                message_id,
                seq,
                sent_at
            ])
        })
        .map(drop)
        .map_err(database_error("fifo dedup: remember"))
}

/// Forgets the rows of a deleted queue's groups.
pub(crate) fn forget_groups(
    connection: &Connection,
    queue_id: i64,
    groups: impl IntoIterator<Item = String>,
) -> Result<(), StoreError> {
    let mut forget = connection
        .prepare_cached("DELETE FROM fifo_groups WHERE queue_id = ?1 AND group_id = ?2")
        .map_err(database_error("fifo: prepare forget group"))?;
    for group_id in groups.into_iter().collect::<BTreeSet<_>>() {
        forget
            .execute(params![queue_id, group_id])
            .map_err(database_error("fifo: forget group"))?;
    }
    Ok(())
}

/// Forgets what a purged queue's receives with a `ReceiveRequestAttemptId`
/// returned: their messages are gone.
pub(crate) fn forget_attempts(connection: &Connection, queue_id: i64) -> Result<(), StoreError> {
    connection
        .prepare_cached("DELETE FROM receive_attempts WHERE queue_id = ?1")
        .and_then(|mut delete| delete.execute([queue_id]))
        .map(drop)
        .map_err(database_error("fifo: forget attempts"))
}

/// Forgets up to `limit` deduplication ids of `queue_id` first sent at or
/// before a purge's `through_seq` (SQS clears the window on purge; a deep
/// queue's window goes in chunks, as its messages do).
pub(crate) fn forget_window_through(
    connection: &Connection,
    queue_id: i64,
    through_seq: i64,
    limit: u32,
) -> Result<u64, StoreError> {
    connection
        .prepare_cached(
            "DELETE FROM fifo_dedup WHERE (queue_id, scope, dedup_id) IN (
                 SELECT queue_id, scope, dedup_id FROM fifo_dedup
                 WHERE queue_id = ?1 AND seq <= ?2 LIMIT ?3)",
        )
        .and_then(|mut delete| delete.execute(params![queue_id, through_seq, limit]))
        .map(|forgotten| forgotten as u64)
        .map_err(database_error("fifo: forget purged window"))
}

/// Most window entries one sweep forgets, to keep write transactions short.
const WINDOW_SWEEP_CHUNK: u32 = 10_000;

/// Forgets deduplication ids and receive attempts recorded at or before `before`.
pub(crate) fn window_expire(connection: &Connection, before: i64) -> Result<u64, StoreError> {
    let forgotten_dedup = connection
        .prepare_cached(
            "DELETE FROM fifo_dedup WHERE (queue_id, scope, dedup_id) IN (
                 SELECT queue_id, scope, dedup_id FROM fifo_dedup WHERE sent_at <= ?1 LIMIT ?2)",
        )
        .and_then(|mut delete| delete.execute(params![before, WINDOW_SWEEP_CHUNK]))
        .map_err(database_error("fifo window: dedup"))?;
    let forgotten_attempts = connection
        .prepare_cached(
            "DELETE FROM receive_attempts WHERE (queue_id, attempt_id) IN (
                 SELECT queue_id, attempt_id FROM receive_attempts WHERE created_at <= ?1 LIMIT ?2)",
        )
        .and_then(|mut delete| delete.execute(params![before, WINDOW_SWEEP_CHUNK]))
        .map_err(database_error("fifo window: attempts"))?;
    Ok((forgotten_dedup + forgotten_attempts) as u64)
}
