//! FIFO queues: message groups, the deduplication window and receive attempts.
//!
//! A group's messages are delivered in sequence order, and nothing of a group
//! is delivered while any of its messages is leased. `fifo_groups` keeps one
//! row per non-empty group with the instant it may deliver next, so a receive
//! finds deliverable groups with one index range however many groups are
//! blocked. Every mutation that touches a group's messages refreshes its row
//! in the same transaction; the row is derived data, recomputed from the
//! messages, never incremented.

use std::collections::{BTreeSet, HashMap, HashSet};

use ackbox_core::limits::MAX_RECEIVE_MESSAGES;
use rusqlite::{Connection, OptionalExtension, params};

use super::mutation::{
    MESSAGE_COLUMNS, Met, ReceivePass, database_error, decode_attributes, message_row,
};
use crate::store::{
    Deduplication, MessageReceiveParams, ReceiveAttempt, ReceiveOutcome, StoreError, StoredMessage,
    from_json,
};

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

/// One leased message of a recorded attempt: `[seq, receive_count, visible_at]`.
type AttemptLease = (i64, i64, i64);

/// ReceiveMessage on a FIFO queue: whole runs from the heads of available
/// groups, oldest-available group first.
pub(crate) fn receive(
    connection: &Connection,
    params: &MessageReceiveParams,
    mut pass: ReceivePass<'_>,
) -> Result<ReceiveOutcome, StoreError> {
    if let Some(attempt) = &params.attempt
        && let Some(messages) = replay(connection, params, attempt)?
    {
        return Ok(ReceiveOutcome {
            messages,
            ..ReceiveOutcome::default()
        });
    }
    let wanted = params.max_messages as usize;
    let mut visited = HashSet::new();
    let mut select_groups = connection
        .prepare_cached(
            "SELECT group_id FROM fifo_groups WHERE queue_id = ?1 AND available_at <= ?2
             ORDER BY available_at, head_seq LIMIT ?3",
        )
        .map_err(database_error("fifo receive: prepare groups"))?;
    let mut select_run = connection
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS}, visible_at FROM messages
             WHERE queue_id = ?1 AND group_id = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4"
        ))
        .map_err(database_error("fifo receive: prepare run"))?;
    'receive: while pass.leased() < wanted && !pass.out_of_budget() {
        // A group met before may still be available (a zero lease, or only
        // dropped messages), so ask for enough to find new ones past it.
        let limit = (visited.len() + wanted - pass.leased()) as i64;
        let groups: Vec<String> = select_groups
            .query_map(params![params.queue_id, params.now, limit], |row| {
                row.get(0)
            })
            .and_then(Iterator::collect)
            .map_err(database_error("fifo receive: groups"))?;
        let fresh: Vec<String> = groups
            .into_iter()
            .filter(|group| !visited.contains(group))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for group in fresh {
            let mut cursor = 0i64;
            'run: while pass.leased() < wanted {
                let rows = select_run
                    .query_map(
                        params![
                            params.queue_id,
                            group,
                            cursor,
                            (wanted - pass.leased()) as i64
                        ],
                        |row| Ok((message_row(row)?, row.get::<_, i64>(20)?)),
                    )
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(database_error("fifo receive: run"))?;
                if rows.is_empty() {
                    break;
                }
                for (row, visible_at) in rows {
                    cursor = row.seq();
                    // The run ends at the first message not yet deliverable
                    // (delayed): nothing may overtake it.
                    if visible_at > params.now {
                        break 'run;
                    }
                    if let Met::OutOfBudget = pass.meet(connection, row)? {
                        refresh_group(connection, params.queue_id, &group)?;
                        break 'receive;
                    }
                }
            }
            refresh_group(connection, params.queue_id, &group)?;
            visited.insert(group);
        }
    }
    let mut outcome = pass.finish();
    if let Some(attempt) = &params.attempt
        && !outcome.messages.is_empty()
    {
        record_attempt(connection, params, attempt, &outcome.messages)?;
    }
    if outcome.messages.is_empty() {
        outcome.next_visible_at = connection
            .prepare_cached(
                "SELECT MIN(available_at) FROM fifo_groups WHERE queue_id = ?1 AND available_at > ?2",
            )
            .and_then(|mut next| {
                next.query_row(params![params.queue_id, params.now], |row| row.get(0))
            })
            .map_err(database_error("fifo receive: next available"))?;
    }
    Ok(outcome)
}

fn record_attempt(
    connection: &Connection,
    params: &MessageReceiveParams,
    attempt: &ReceiveAttempt,
    messages: &[StoredMessage],
) -> Result<(), StoreError> {
    let leases: Vec<AttemptLease> = messages
        .iter()
        .map(|message| (message.seq, message.receive_count, params.visible_at))
        .collect();
    connection
        .prepare_cached(
            "INSERT INTO receive_attempts (queue_id, attempt_id, created_at, leases)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (queue_id, attempt_id)
             DO UPDATE SET created_at = excluded.created_at, leases = excluded.leases",
        )
        .and_then(|mut upsert| {
            upsert.execute(params![
                params.queue_id,
                attempt.id,
                params.now,
                serde_json::to_string(&leases).expect("tuples of integers always serialize")
            ])
        })
        .map(drop)
        .map_err(database_error("fifo receive: record attempt"))
}

/// A retried attempt gets the same messages under the same leases (so the
/// same receipt handles), with their visibility timeout started again — if
/// none of them was deleted, received again or had its visibility changed
/// since. Otherwise the retry is an ordinary receive.
fn replay(
    connection: &Connection,
    params: &MessageReceiveParams,
    attempt: &ReceiveAttempt,
) -> Result<Option<Vec<StoredMessage>>, StoreError> {
    let leases: Option<String> = connection
        .prepare_cached(
            "SELECT leases FROM receive_attempts
             WHERE queue_id = ?1 AND attempt_id = ?2 AND created_at > ?3",
        )
        .and_then(|mut select| {
            select
                .query_row(
                    params![params.queue_id, attempt.id, attempt.valid_after],
                    |row| row.get(0),
                )
                .optional()
        })
        .map_err(database_error("fifo replay: attempt"))?;
    let Some(leases) = leases else {
        return Ok(None);
    };
    let leases: Vec<AttemptLease> = from_json(&leases, "receive attempt leases")?;
    let mut select = connection
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS}, visible_at FROM messages WHERE seq = ?1 AND queue_id = ?2"
        ))
        .map_err(database_error("fifo replay: prepare"))?;
    let mut messages = Vec::with_capacity(leases.len());
    for &(seq, receive_count, visible_at) in &leases {
        let found = select
            .query_row(params![seq, params.queue_id], |row| {
                Ok((message_row(row)?, row.get::<_, i64>(20)?))
            })
            .optional()
            .map_err(database_error("fifo replay: message"))?;
        match found {
            Some((row, now_visible_at))
                if now_visible_at == visible_at && row.receive_count() == receive_count =>
            {
                messages.push(decode_attributes(row)?);
            }
            _ => return Ok(None),
        }
    }
    let mut touched = TouchedGroups::default();
    for message in &messages {
        connection
            .prepare_cached("UPDATE messages SET visible_at = ?2 WHERE seq = ?1")
            .and_then(|mut update| update.execute(params![message.seq, params.visible_at]))
            .map_err(database_error("fifo replay: lease again"))?;
        touched.touch(params.queue_id, message.group_id.as_deref());
    }
    touched.refresh(connection)?;
    record_attempt(connection, params, attempt, &messages)?;
    Ok(Some(messages))
}
