//! The SQL of every operation on PostgreSQL. Functions taking a
//! `PgConnection` run inside the caller's transaction and never commit;
//! functions taking the pool are single-statement reads.

use std::collections::BTreeMap;

use ackbox_core::receive_policy::{Fate, ReceivePolicy, nack_dead_letters};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use super::fifo::{self, TouchedGroups};
use super::{MESSAGES_CHANNEL, QUEUES_CHANNEL};
use crate::store::move_step::{self, StepEnd};
use crate::store::{
    ChangeVisibilityOutcome, DELETED_QUEUE_WITH_MESSAGES_SQL, DeadLetterTarget, DeleteOutcome,
    FailureClassCount, FailureRecord, InsertedMessage, MessageChangeVisibilityParams,
    MessageDeleteParams, MessageExpireParams, MessageInsertParams, MessageNackParams,
    MessagePeekParams, MessageReceiveParams, MoveFilter, MoveTaskCreateOutcome,
    MoveTaskCreateParams, MoveTaskFilter, MoveTaskRecord, MoveTaskStepOutcome, MoveTaskStepParams,
    NackOutcome, PurgeStep, QueueCreateOutcome, QueueCreateParams, QueueDeleteParams,
    QueuePurgeOutcome, QueuePurgeParams, QueueRecord, QueueStats, QueueStatsParams,
    QueueUpdateParams, ReceiveOutcome, StoreError, StoredMessage, UNFINISHED_PURGE_SQL, from_json,
    to_json,
};

/// How long a node's claim on a move task lasts without a step renewing it;
/// another node takes the task over once it runs out.
const MOVE_TASK_LEASE_MS: i64 = 5_000;

pub(crate) fn postgres_error(operation: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| match source {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            tracing::warn!(operation, error = %source, "PostgreSQL is unreachable");
            StoreError::Unavailable {
                reason: "PostgreSQL is unreachable",
            }
        }
        source => StoreError::Postgres { operation, source },
    }
}

/// Tells every node (this one included) that something changed, when the
/// surrounding transaction commits.
async fn announce(
    connection: &mut PgConnection,
    channel: &'static str,
    payload: &str,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(connection)
        .await
        .map(drop)
        .map_err(postgres_error("notify"))
}

pub(super) async fn announce_messages(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<(), StoreError> {
    announce(connection, MESSAGES_CHANNEL, &queue_id.to_string()).await
}

macro_rules! queue_columns {
    () => {
        "id, name, attributes, tags, created_at, last_modified_at"
    };
}

fn queue_record(row: &PgRow) -> Result<QueueRecord, StoreError> {
    let decode = |error| postgres_error("decode queue")(error);
    let attributes: String = row.try_get(2).map_err(decode)?;
    let tags: String = row.try_get(3).map_err(decode)?;
    Ok(QueueRecord {
        id: row.try_get(0).map_err(decode)?,
        name: row.try_get(1).map_err(decode)?,
        attributes: from_json(&attributes, "queue attributes")?,
        tags: from_json(&tags, "queue tags")?,
        created_at: row.try_get(4).map_err(decode)?,
        last_modified_at: row.try_get(5).map_err(decode)?,
    })
}

pub(super) async fn queue_list(pool: &PgPool) -> Result<Vec<QueueRecord>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        queue_columns!(),
        " FROM queues ORDER BY name"
    ))
    .fetch_all(pool)
    .await
    .map_err(postgres_error("queue_list"))?
    .iter()
    .map(queue_record)
    .collect()
}

pub(super) async fn queue_get(
    pool: &PgPool,
    name: &str,
) -> Result<Option<QueueRecord>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        queue_columns!(),
        " FROM queues WHERE name = $1"
    ))
    .bind(name)
    .fetch_optional(pool)
    .await
    .map_err(postgres_error("queue_get"))?
    .as_ref()
    .map(queue_record)
    .transpose()
}

pub(super) async fn queue_create(
    connection: &mut PgConnection,
    params: &QueueCreateParams,
) -> Result<QueueCreateOutcome, StoreError> {
    let deleted_recently =
        sqlx::query("SELECT 1 FROM deleted_queues WHERE name = $1 AND deleted_at >= $2")
            .bind(&params.name)
            .bind(params.deleted_after)
            .fetch_optional(&mut *connection)
            .await
            .map_err(postgres_error("queue_create: tombstone"))?
            .is_some();
    // Two nodes creating one name at once: the unique name decides, and
    // the loser reads the winner's queue.
    let created = sqlx::query(concat!(
        "INSERT INTO queues (name, attributes, tags, created_at, last_modified_at, fifo)
         SELECT $1, $2, $3, $4, $4, $5 WHERE NOT $6
         ON CONFLICT (name) DO NOTHING RETURNING ",
        queue_columns!()
    ))
    .bind(&params.name)
    .bind(to_json(&params.attributes))
    .bind(to_json(&params.tags))
    .bind(params.now)
    .bind(params.fifo)
    .bind(deleted_recently)
    .fetch_optional(&mut *connection)
    .await
    .map_err(postgres_error("queue_create: insert"))?;
    if let Some(row) = created {
        announce(connection, QUEUES_CHANNEL, &params.name).await?;
        return Ok(QueueCreateOutcome::Created(queue_record(&row)?));
    }
    let existing = sqlx::query(concat!(
        "SELECT ",
        queue_columns!(),
        " FROM queues WHERE name = $1"
    ))
    .bind(&params.name)
    .fetch_optional(&mut *connection)
    .await
    .map_err(postgres_error("queue_create: lookup"))?;
    match existing {
        Some(row) => Ok(QueueCreateOutcome::Exists(queue_record(&row)?)),
        None if deleted_recently => Ok(QueueCreateOutcome::DeletedRecently),
        // Created and deleted by others between our two statements.
        None => Err(StoreError::Unavailable {
            reason: "the queue was deleted while it was being created; retry",
        }),
    }
}

pub(super) async fn queue_update(
    connection: &mut PgConnection,
    params: &QueueUpdateParams,
) -> Result<(), StoreError> {
    let name: Option<String> = sqlx::query_scalar(
        "UPDATE queues SET attributes = COALESCE($2, attributes),
             last_modified_at = CASE WHEN $2 IS NULL THEN last_modified_at ELSE $3 END,
             tags = COALESCE($4, tags)
         WHERE id = $1 RETURNING name",
    )
    .bind(params.queue_id)
    .bind(params.attributes.as_ref().map(to_json))
    .bind(params.now)
    .bind(
        params
            .tags
            .as_ref()
            .map(to_json::<BTreeMap<String, String>>),
    )
    .fetch_optional(&mut *connection)
    .await
    .map_err(postgres_error("queue_update"))?;
    if let Some(name) = name {
        announce(connection, QUEUES_CHANNEL, &name).await?;
    }
    Ok(())
}

pub(super) async fn queue_delete(
    connection: &mut PgConnection,
    params: &QueueDeleteParams,
) -> Result<bool, StoreError> {
    // Locked first: a send holding the row waits to finish before this
    // deletes the messages, and a later send finds no queue.
    let name: Option<String> =
        sqlx::query_scalar("SELECT name FROM queues WHERE id = $1 FOR UPDATE")
            .bind(params.queue_id)
            .fetch_optional(&mut *connection)
            .await
            .map_err(postgres_error("queue_delete: lookup"))?;
    let Some(name) = name else {
        return Ok(false);
    };
    // The messages, and a FIFO queue's groups, deduplication ids and receive
    // attempts, stay for the sweepers (`message_sweep_left_behind`,
    // `window_expire`): one statement deleting millions would hold this call
    // for minutes. Ids are never reused, so nothing reaches them meanwhile.
    sqlx::query("DELETE FROM queues WHERE id = $1")
        .bind(params.queue_id)
        .execute(&mut *connection)
        .await
        .map_err(postgres_error("queue_delete: queue"))?;
    sqlx::query(
        "INSERT INTO deleted_queues (name, deleted_at) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET deleted_at = excluded.deleted_at",
    )
    .bind(&name)
    .bind(params.now)
    .execute(&mut *connection)
    .await
    .map_err(postgres_error("queue_delete: tombstone"))?;
    announce(connection, QUEUES_CHANNEL, &name).await?;
    Ok(true)
}

pub(super) async fn queue_purge(
    connection: &mut PgConnection,
    params: &QueuePurgeParams,
) -> Result<QueuePurgeOutcome, StoreError> {
    // The row lock makes the cooldown hold across nodes: a second purge
    // waits for the first and then sees its mark.
    let (last_purged_at, fifo): (Option<i64>, bool) =
        sqlx::query_as("SELECT last_purged_at, fifo FROM queues WHERE id = $1 FOR NO KEY UPDATE")
            .bind(params.queue_id)
            .fetch_optional(&mut *connection)
            .await
            .map_err(postgres_error("queue_purge: lookup"))?
            .ok_or(StoreError::QueueNotFound {
                queue_id: params.queue_id,
            })?;
    if last_purged_at.is_some_and(|at| at >= params.purged_after) {
        return Ok(QueuePurgeOutcome::InProgress);
    }
    if fifo {
        fifo::lock_queue(connection, params.queue_id).await?;
        fifo::forget_attempts(connection, params.queue_id).await?;
    }
    // A send not yet committed may hold a lower sequence number and be
    // swept with the rest; SQS allows that of sends during a purge. (Not on
    // a FIFO queue: its sends wait for the lock this purge holds.)
    let through_seq: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM messages")
        .fetch_one(&mut *connection)
        .await
        .map_err(postgres_error("queue_purge: newest message"))?;
    let step = drop_purged(
        connection,
        params.queue_id,
        through_seq,
        fifo,
        params.delete_at_once,
    )
    .await?;
    // Asked even after a short step: SKIP LOCKED may have left rows behind.
    let more = purge_left(connection, params.queue_id, through_seq).await?;
    sqlx::query("UPDATE queues SET last_purged_at = $2, purged_through_seq = $3 WHERE id = $1")
        .bind(params.queue_id)
        .bind(params.now)
        .bind(more.then_some(through_seq))
        .execute(&mut *connection)
        .await
        .map_err(postgres_error("queue_purge: mark"))?;
    Ok(QueuePurgeOutcome::Purged {
        deleted: step.messages,
        more,
    })
}

/// Drops up to `limit` rows that a purge through `through_seq` covers in
/// `queue_id`: its messages first, refreshing the FIFO groups they leave
/// (under the queue's lock), then the deduplication ids first sent before it.
async fn drop_purged(
    connection: &mut PgConnection,
    queue_id: i64,
    through_seq: i64,
    fifo: bool,
    limit: u32,
) -> Result<PurgeStep, StoreError> {
    // SKIP LOCKED: nodes sweeping at once take different rows, and a row a
    // receive holds is left for the next step.
    const PURGED_MESSAGES: &str = "DELETE FROM messages WHERE seq IN (
         SELECT seq FROM messages WHERE queue_id = $1 AND seq <= $2
         LIMIT $3 FOR UPDATE SKIP LOCKED)";
    if !fifo {
        let messages = sqlx::query(PURGED_MESSAGES)
            .bind(queue_id)
            .bind(through_seq)
            .bind(i64::from(limit))
            .execute(&mut *connection)
            .await
            .map_err(postgres_error("purge: messages"))?
            .rows_affected();
        return Ok(PurgeStep {
            messages,
            window_entries: 0,
        });
    }
    fifo::lock_queue(connection, queue_id).await?;
    let groups: Vec<Option<String>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "{PURGED_MESSAGES} RETURNING group_id"
    )))
    .bind(queue_id)
    .bind(through_seq)
    .bind(i64::from(limit))
    .fetch_all(&mut *connection)
    .await
    .map_err(postgres_error("purge: fifo messages"))?;
    let mut touched = TouchedGroups::default();
    for group_id in &groups {
        touched.touch(queue_id, group_id.as_deref());
    }
    touched.refresh(connection).await?;
    let messages = groups.len() as u32;
    let window_entries = if messages < limit {
        fifo::forget_window_through(connection, queue_id, through_seq, limit - messages).await?
    } else {
        0
    };
    Ok(PurgeStep {
        messages: u64::from(messages),
        window_entries,
    })
}

/// Whether a purge through `through_seq` left messages or deduplication ids
/// of `queue_id` behind.
async fn purge_left(
    connection: &mut PgConnection,
    queue_id: i64,
    through_seq: i64,
) -> Result<bool, StoreError> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM messages WHERE queue_id = $1 AND seq <= $2)
             OR EXISTS (SELECT 1 FROM fifo_dedup WHERE queue_id = $1 AND seq <= $2)",
    )
    .bind(queue_id)
    .bind(through_seq)
    .fetch_one(connection)
    .await
    .map_err(postgres_error("purge: what is left"))
}

pub(super) async fn queue_stats(
    pool: &PgPool,
    params: QueueStatsParams,
) -> Result<QueueStats, StoreError> {
    let row = sqlx::query(
        "SELECT COUNT(*) FILTER (WHERE visible_at <= $2),
                COUNT(*) FILTER (WHERE visible_at > $2 AND receive_count > 0),
                COUNT(*) FILTER (WHERE visible_at > $2 AND receive_count = 0),
                MIN(sent_at)
         FROM messages WHERE queue_id = $1",
    )
    .bind(params.queue_id)
    .bind(params.now)
    .fetch_one(pool)
    .await
    .map_err(postgres_error("queue_stats"))?;
    let decode = |error| postgres_error("queue_stats: decode")(error);
    Ok(QueueStats {
        visible: row.try_get::<i64, _>(0).map_err(decode)?.unsigned_abs(),
        in_flight: row.try_get::<i64, _>(1).map_err(decode)?.unsigned_abs(),
        delayed: row.try_get::<i64, _>(2).map_err(decode)?.unsigned_abs(),
        oldest_sent_at: row.try_get(3).map_err(decode)?,
    })
}

/// Whether a queue is FIFO; `None` when it does not exist.
pub(super) async fn queue_kind(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<Option<bool>, StoreError> {
    sqlx::query_scalar("SELECT fifo FROM queues WHERE id = $1")
        .bind(queue_id)
        .fetch_optional(connection)
        .await
        .map_err(postgres_error("queue kind"))
}

/// [`queue_kind`] for a transaction that adds messages to the queue: the
/// key-share lock makes a concurrent DeleteQueue wait until it commits.
async fn queue_kind_for_arrival(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<Option<bool>, StoreError> {
    sqlx::query_scalar("SELECT fifo FROM queues WHERE id = $1 FOR KEY SHARE")
        .bind(queue_id)
        .fetch_optional(connection)
        .await
        .map_err(postgres_error("queue kind"))
}

async fn queue_exists(connection: &mut PgConnection, queue_id: i64) -> Result<bool, StoreError> {
    Ok(queue_kind(connection, queue_id).await?.is_some())
}

/// Where [`relocate`] puts a message.
struct Relocation<'a> {
    queue_id: i64,
    visible_at: i64,
    dead_letter_source_arn: Option<&'a str>,
    reset_receives: bool,
    redriven_by_task: Option<&'a str>,
    sent_at: Option<i64>,
}

/// Moves a message to another queue under a new sequence number, so no
/// receipt handle issued before the move can act on it again. The caller
/// announces the arrival.
async fn relocate(
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

async fn move_to_dead_letter_queue(
    connection: &mut PgConnection,
    seq: i64,
    target: &DeadLetterTarget,
    now: i64,
) -> Result<(), StoreError> {
    let fifo_target = queue_kind(connection, target.queue_id).await? == Some(true);
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
    .await?;
    // Inside the transaction: it commits on the lease pool, which does not
    // wait for the disk, so the lock a notifying commit holds is brief.
    announce_messages(connection, target.queue_id).await
}

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

/// A standard queue's batch in one statement, which also holds the queue's
/// row against a concurrent DeleteQueue: alone it is a whole transaction
/// (one round trip). Sequence numbers follow the batch's order, as the
/// insert follows `position`. The caller announces the arrival once the
/// statement has committed.
pub(super) async fn insert_standard(
    executor: impl sqlx::PgExecutor<'_>,
    params: &MessageInsertParams,
) -> Result<Vec<InsertedMessage>, StoreError> {
    let messages = &params.messages;
    let column = |pick: fn(&crate::store::NewMessage) -> Option<String>| -> Vec<Option<String>> {
        messages.iter().map(pick).collect()
    };
    let mut seqs: Vec<i64> = sqlx::query_scalar(
        "WITH queue AS (SELECT id FROM queues WHERE id = $1 FOR KEY SHARE),
         inserted AS (
             INSERT INTO messages (queue_id, message_id, body, attributes, md5_of_body,
                 md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at)
             SELECT queue.id, message_id, body, attributes, md5_of_body, md5_of_attributes,
                 trace_header, group_id, sender_id, sent_at, visible_at
             FROM queue, UNNEST($2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                         $7::text[], $8::text[], $9::text[], $10::bigint[], $11::bigint[])
                 WITH ORDINALITY AS batch(message_id, body, attributes, md5_of_body,
                     md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at,
                     position)
             ORDER BY position
             RETURNING seq)
         SELECT seq FROM inserted",
    )
    .bind(params.queue_id)
    .bind(column(|message| Some(message.message_id.clone())))
    .bind(column(|message| Some(message.body.clone())))
    .bind(column(|message| {
        (!message.attributes.is_empty()).then(|| to_json(&message.attributes))
    }))
    .bind(column(|message| Some(message.md5_of_body.clone())))
    .bind(column(|message| message.md5_of_attributes.clone()))
    .bind(column(|message| message.trace_header.clone()))
    .bind(column(|message| message.group_id.clone()))
    .bind(column(|message| Some(message.sender_id.clone())))
    .bind(
        messages
            .iter()
            .map(|message| message.sent_at)
            .collect::<Vec<_>>(),
    )
    .bind(
        messages
            .iter()
            .map(|message| message.visible_at)
            .collect::<Vec<_>>(),
    )
    .fetch_all(executor)
    .await
    .map_err(postgres_error("message_insert_batch: insert"))?;
    if seqs.len() != messages.len() {
        return Err(StoreError::QueueNotFound {
            queue_id: params.queue_id,
        });
    }
    seqs.sort_unstable();
    Ok(messages
        .iter()
        .zip(seqs)
        .map(|(message, seq)| InsertedMessage {
            seq,
            message_id: message.message_id.clone(),
            duplicate: false,
        })
        .collect())
}

/// A standard queue's receive without an attempt id, in one statement: it
/// picks the oldest visible rows no other receive holds, drops the expired
/// ones and leases the rest. Alone it is a whole transaction.
///
/// The rules are [`ReceivePolicy`]'s, in SQL: a row past retention is
/// deleted, a row under its receive limit leased. A row due for the dead-letter queue is left alone (moving it takes the
/// dead-letter queue's checks and several statements): the answer's
/// `poisoned` says some were met, and the caller moves them in a
/// transaction of its own.
pub(super) async fn receive_standard_at_once(
    pool: &PgPool,
    params: &MessageReceiveParams,
) -> Result<AtOnce, StoreError> {
    let wanted = params.max_messages as usize;
    let max_receive_count = params
        .dead_letter
        .as_ref()
        .map(|target| target.max_receive_count);
    let mut outcome = ReceiveOutcome::default();
    let mut poisoned = false;
    // Expired rows fill a round without filling the receive; a few more
    // rounds reach past them (the sweeper removes the rest).
    for _ in 0..4 {
        let rows = sqlx::query(concat!(
            "WITH picked AS (
                 SELECT seq AS picked_seq, sent_at AS picked_sent_at, visible_at AS was_visible_at,
                        receive_count AS was_received
                 FROM messages
                 WHERE queue_id = $1 AND visible_at <= $2 AND seq <> ALL($6)
                 ORDER BY visible_at, receive_count, seq
                 LIMIT $3
                 FOR UPDATE SKIP LOCKED),
             expired AS (
                 DELETE FROM messages USING picked
                 WHERE messages.seq = picked.picked_seq AND picked.picked_sent_at <= $4
                 RETURNING messages.seq),
             leased AS (
                 UPDATE messages
                 SET visible_at = $5, receive_count = messages.receive_count + 1,
                     first_received_at = COALESCE(messages.first_received_at, $2),
                     last_received_at = $2
                 FROM picked
                 WHERE messages.seq = picked.picked_seq AND picked.picked_sent_at > $4
                   AND ($7::bigint IS NULL OR picked.was_received < $7)
                 RETURNING ",
            message_columns!(),
            ")
             -- One row even when nothing was leased, to carry the counts.
             SELECT leased.*, (SELECT COUNT(*) FROM expired) AS expired,
                    (SELECT COUNT(*) FROM picked
                     WHERE picked_sent_at > $4 AND was_received >= $7) AS poisoned
             FROM (SELECT 1) AS always
             LEFT JOIN (leased JOIN picked ON picked.picked_seq = leased.seq) ON TRUE
             ORDER BY picked.was_visible_at, picked.was_received, leased.seq"
        ))
        .bind(params.queue_id)
        .bind(params.now)
        .bind((wanted - outcome.messages.len()) as i64)
        .bind(params.expired_at_or_before)
        .bind(params.visible_at)
        // A zero lease leaves a message visible: a later round must not
        // return it again.
        .bind(
            outcome
                .messages
                .iter()
                .map(|message| message.seq)
                .collect::<Vec<_>>(),
        )
        .bind(max_receive_count)
        .fetch_all(pool)
        .await
        .map_err(postgres_error("message_receive: lease"))?;
        let mut expired = 0;
        for row in &rows {
            let decode = |error| postgres_error("message_receive: decode")(error);
            expired = row.try_get::<i64, _>("expired").map_err(decode)?;
            poisoned |= row.try_get::<i64, _>("poisoned").map_err(decode)? > 0;
            if row.try_get::<Option<i64>, _>(0).map_err(decode)?.is_some() {
                outcome.messages.push(message_from_row(row)?.message);
            }
        }
        outcome.expired += expired.unsigned_abs();
        if poisoned || expired == 0 || outcome.messages.len() >= wanted {
            break;
        }
    }
    if outcome.messages.is_empty() && !poisoned {
        outcome.next_visible_at = sqlx::query_scalar(
            "SELECT MIN(visible_at) FROM messages WHERE queue_id = $1 AND visible_at > $2",
        )
        .bind(params.queue_id)
        .bind(params.now)
        .fetch_one(pool)
        .await
        .map_err(postgres_error("message_receive: next visible"))?;
    }
    Ok(AtOnce { outcome, poisoned })
}

/// What [`receive_standard_at_once`] did.
pub(super) struct AtOnce {
    pub(super) outcome: ReceiveOutcome,
    /// It met messages due for the dead-letter queue and left them.
    pub(super) poisoned: bool,
}

/// Columns [`message_from_row`] decodes, in its order.
macro_rules! message_columns {
    () => {
        "seq, message_id, body, attributes, md5_of_body, md5_of_attributes,
         trace_header, group_id, sender_id, sent_at, receive_count, first_received_at,
         dead_letter_source_arn, failure_count, first_failure_at, last_failure_at,
         last_failure_class, last_failure_message, last_received_at, dedup_id, visible_at"
    };
}
pub(super) use message_columns;

/// A message row with its current deadline (column 20).
pub(super) struct MessageRow {
    pub(super) message: StoredMessage,
    pub(super) visible_at: i64,
}

pub(super) fn message_from_row(row: &PgRow) -> Result<MessageRow, StoreError> {
    let decode = |error| postgres_error("decode message")(error);
    let attributes: Option<String> = row.try_get(3).map_err(decode)?;
    Ok(MessageRow {
        visible_at: row.try_get(20).map_err(decode)?,
        message: StoredMessage {
            seq: row.try_get(0).map_err(decode)?,
            message_id: row.try_get(1).map_err(decode)?,
            body: row.try_get(2).map_err(decode)?,
            attributes: attributes
                .map(|json| from_json(&json, "message attributes"))
                .transpose()?
                .unwrap_or_default(),
            md5_of_body: row.try_get(4).map_err(decode)?,
            md5_of_attributes: row.try_get(5).map_err(decode)?,
            trace_header: row.try_get(6).map_err(decode)?,
            group_id: row.try_get(7).map_err(decode)?,
            sender_id: row.try_get(8).map_err(decode)?,
            sent_at: row.try_get(9).map_err(decode)?,
            receive_count: row.try_get(10).map_err(decode)?,
            first_received_at: row.try_get(11).map_err(decode)?,
            dead_letter_source_arn: row.try_get(12).map_err(decode)?,
            failures: FailureRecord {
                count: row.try_get(13).map_err(decode)?,
                first_at: row.try_get(14).map_err(decode)?,
                last_at: row.try_get(15).map_err(decode)?,
                last_class: row.try_get(16).map_err(decode)?,
                last_message: row.try_get(17).map_err(decode)?,
            },
            last_received_at: row.try_get(18).map_err(decode)?,
            deduplication_id: row.try_get(19).map_err(decode)?,
        },
    })
}

/// What a receive did with a message it met.
pub(super) enum Met {
    Leased,
    Dropped,
    OutOfBudget,
}

/// One receive's progress. Leases are taken in one statement per flush.
pub(super) struct ReceivePass<'a> {
    params: &'a MessageReceiveParams,
    policy: ReceivePolicy<'a, DeadLetterTarget>,
    pending_leases: Vec<i64>,
    outcome: ReceiveOutcome,
}

impl<'a> ReceivePass<'a> {
    async fn start(
        connection: &mut PgConnection,
        params: &'a MessageReceiveParams,
    ) -> Result<Self, StoreError> {
        let dead_letter = match &params.dead_letter {
            Some(target) if queue_exists(connection, target.queue_id).await? => {
                Some((target, target.max_receive_count))
            }
            _ => None,
        };
        Ok(Self {
            params,
            policy: ReceivePolicy::new(Some(params.expired_at_or_before), dead_letter),
            pending_leases: Vec::new(),
            outcome: ReceiveOutcome::default(),
        })
    }

    pub(super) fn params(&self) -> &'a MessageReceiveParams {
        self.params
    }

    pub(super) fn leased(&self) -> usize {
        self.outcome.messages.len()
    }

    pub(super) fn out_of_budget(&self) -> bool {
        self.policy.out_of_budget()
    }

    /// Expires, dead-letters or (at the next flush) leases one visible message.
    pub(super) async fn meet(
        &mut self,
        connection: &mut PgConnection,
        row: MessageRow,
    ) -> Result<Met, StoreError> {
        let params = self.params;
        let mut message = row.message;
        match self.policy.fate(message.sent_at, message.receive_count) {
            Fate::OutOfBudget => return Ok(Met::OutOfBudget),
            Fate::Expire => {
                sqlx::query("DELETE FROM messages WHERE seq = $1")
                    .bind(message.seq)
                    .execute(&mut *connection)
                    .await
                    .map_err(postgres_error("message_receive: expire"))?;
                self.outcome.expired += 1;
                return Ok(Met::Dropped);
            }
            Fate::DeadLetter(target) => {
                move_to_dead_letter_queue(connection, message.seq, target, params.now).await?;
                self.outcome.dead_lettered += 1;
                return Ok(Met::Dropped);
            }
            Fate::Lease => {}
        }
        self.pending_leases.push(message.seq);
        message.receive_count += 1;
        message.first_received_at.get_or_insert(params.now);
        message.last_received_at = Some(params.now);
        self.outcome.messages.push(message);
        Ok(Met::Leased)
    }

    /// Writes the leases met since the last flush.
    pub(super) async fn flush(&mut self, connection: &mut PgConnection) -> Result<(), StoreError> {
        if self.pending_leases.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "UPDATE messages
             SET visible_at = $2, receive_count = receive_count + 1,
                 first_received_at = COALESCE(first_received_at, $3), last_received_at = $3
             WHERE seq = ANY($1)",
        )
        .bind(&self.pending_leases)
        .bind(self.params.visible_at)
        .bind(self.params.now)
        .execute(&mut *connection)
        .await
        .map_err(postgres_error("message_receive: lease"))?;
        self.pending_leases.clear();
        Ok(())
    }

    pub(super) async fn finish(
        mut self,
        connection: &mut PgConnection,
    ) -> Result<ReceiveOutcome, StoreError> {
        self.flush(connection).await?;
        Ok(self.outcome)
    }
}

pub(super) async fn message_receive(
    connection: &mut PgConnection,
    params: &MessageReceiveParams,
) -> Result<ReceiveOutcome, StoreError> {
    let Some(fifo) = queue_kind(connection, params.queue_id).await? else {
        return Ok(ReceiveOutcome::default());
    };
    let pass = ReceivePass::start(connection, params).await?;
    if fifo {
        fifo::lock_queue(connection, params.queue_id).await?;
        return fifo::receive(connection, pass).await;
    }
    receive_standard(connection, pass).await
}

/// The oldest visible messages no other receive holds: a row another node
/// is leasing right now is skipped, never waited for and never leased twice.
async fn receive_standard(
    connection: &mut PgConnection,
    mut pass: ReceivePass<'_>,
) -> Result<ReceiveOutcome, StoreError> {
    let params = pass.params();
    let wanted = params.max_messages as usize;
    // Rows met once (a zero lease leaves them visible) are not met again.
    let mut met: Vec<i64> = Vec::new();
    'receive: while pass.leased() < wanted {
        let rows = sqlx::query(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages
             WHERE queue_id = $1 AND visible_at <= $2 AND seq <> ALL($3)
             ORDER BY visible_at, receive_count, seq
             LIMIT $4
             FOR UPDATE SKIP LOCKED"
        ))
        .bind(params.queue_id)
        .bind(params.now)
        .bind(&met)
        .bind((wanted - pass.leased()) as i64)
        .fetch_all(&mut *connection)
        .await
        .map_err(postgres_error("message_receive: select"))?;
        if rows.is_empty() {
            break;
        }
        for row in &rows {
            let row = message_from_row(row)?;
            met.push(row.message.seq);
            if let Met::OutOfBudget = pass.meet(connection, row).await? {
                break 'receive;
            }
        }
    }
    let mut outcome = pass.finish(connection).await?;
    if outcome.messages.is_empty() {
        outcome.next_visible_at = sqlx::query_scalar(
            "SELECT MIN(visible_at) FROM messages WHERE queue_id = $1 AND visible_at > $2",
        )
        .bind(params.queue_id)
        .bind(params.now)
        .fetch_one(&mut *connection)
        .await
        .map_err(postgres_error("message_receive: next visible"))?;
    }
    Ok(outcome)
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
async fn lock_lease(
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
    if queue_kind(connection, params.queue_id).await? == Some(true) {
        fifo::lock_queue(connection, params.queue_id).await?;
    }
    let mut touched = TouchedGroups::default();
    let mut outcomes = Vec::with_capacity(params.changes.len());
    let mut made_visible = false;
    for change in &params.changes {
        let outcome = match lock_lease(connection, params.queue_id, change.lease.seq).await? {
            Some((receive_count, _, _)) if receive_count != change.lease.lease => {
                ChangeVisibilityOutcome::NotAvailable
            }
            Some((_, visible_at, _)) if visible_at <= params.now => {
                ChangeVisibilityOutcome::NotInFlight
            }
            Some((_, _, group_id)) => {
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
            None => ChangeVisibilityOutcome::NotAvailable,
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
) -> Result<Vec<FailureClassCount>, StoreError> {
    let rows: Vec<(String, i64, i64, i64, Option<String>)> = sqlx::query_as(
        "SELECT COALESCE(last_failure_class, ''), COUNT(*), MIN(sent_at), MAX(sent_at),
                (ARRAY_AGG(last_failure_message ORDER BY seq))[1]
         FROM messages WHERE queue_id = $1
         GROUP BY COALESCE(last_failure_class, '')
         ORDER BY COUNT(*) DESC, COALESCE(last_failure_class, '')",
    )
    .bind(queue_id)
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
        " FROM messages WHERE queue_id = $1 ORDER BY seq LIMIT $2"
    ))
    .bind(params.queue_id)
    .bind(i64::from(params.limit))
    .fetch_all(pool)
    .await
    .map_err(postgres_error("message_peek"))?
    .iter()
    .map(|row| message_from_row(row).map(|row| row.message))
    .collect()
}

macro_rules! move_task_columns {
    () => {
        "handle, source_queue_id, source_arn, destination_arn, rate, status,
         started_at, finished_at, to_move, moved, failure_reason, requested_by, filter_class,
         sent_before, max_messages, skipped, sample"
    };
}

fn move_task_record(row: &PgRow) -> Result<MoveTaskRecord, StoreError> {
    let decode = |error| postgres_error("decode move task")(error);
    Ok(MoveTaskRecord {
        handle: row.try_get(0).map_err(decode)?,
        source_queue_id: row.try_get(1).map_err(decode)?,
        source_arn: row.try_get(2).map_err(decode)?,
        destination_arn: row.try_get(3).map_err(decode)?,
        rate: row.try_get(4).map_err(decode)?,
        status: row.try_get(5).map_err(decode)?,
        started_at: row.try_get(6).map_err(decode)?,
        finished_at: row.try_get(7).map_err(decode)?,
        to_move: row.try_get(8).map_err(decode)?,
        moved: row.try_get(9).map_err(decode)?,
        failure_reason: row.try_get(10).map_err(decode)?,
        requested_by: row.try_get(11).map_err(decode)?,
        filter: MoveFilter {
            class: row.try_get(12).map_err(decode)?,
            sent_before: row.try_get(13).map_err(decode)?,
            max_messages: row.try_get(14).map_err(decode)?,
            sample: row.try_get(16).map_err(decode)?,
        },
        skipped: row.try_get(15).map_err(decode)?,
    })
}

async fn move_task_get(
    connection: &mut PgConnection,
    handle: &str,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        move_task_columns!(),
        " FROM move_tasks WHERE handle = $1"
    ))
    .bind(handle)
    .fetch_optional(connection)
    .await
    .map_err(postgres_error("move_task: get"))?
    .as_ref()
    .map(move_task_record)
    .transpose()
}

pub(super) async fn move_task_list(
    pool: &PgPool,
    filter: MoveTaskFilter,
    limit: u32,
) -> Result<Vec<MoveTaskRecord>, StoreError> {
    // One statement for every filter: each names at most one column.
    let (status, source_arn, handle) = match filter {
        MoveTaskFilter::Running => (Some("RUNNING"), None, None),
        MoveTaskFilter::Source(arn) => (None, Some(arn), None),
        MoveTaskFilter::All => (None, None, None),
        MoveTaskFilter::Handle(handle) => (None, None, Some(handle)),
    };
    sqlx::query(concat!(
        "SELECT ",
        move_task_columns!(),
        " FROM move_tasks
         WHERE ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR source_arn = $3)
           AND ($4::text IS NULL OR handle = $4)
         ORDER BY started_at DESC, created_order DESC LIMIT $1"
    ))
    .bind(i64::from(limit))
    .bind(status)
    .bind(source_arn)
    .bind(handle)
    .fetch_all(pool)
    .await
    .map_err(postgres_error("move_task_list"))?
    .iter()
    .map(move_task_record)
    .collect()
}

pub(super) async fn move_task_create(
    connection: &mut PgConnection,
    params: &MoveTaskCreateParams,
) -> Result<MoveTaskCreateOutcome, StoreError> {
    // The source's row serializes task creation across nodes: one task per
    // source at a time.
    sqlx::query("SELECT 1 FROM queues WHERE id = $1 FOR NO KEY UPDATE")
        .bind(params.source_queue_id)
        .fetch_optional(&mut *connection)
        .await
        .map_err(postgres_error("move_task_create: source"))?
        .ok_or(StoreError::QueueNotFound {
            queue_id: params.source_queue_id,
        })?;
    let running = sqlx::query(
        "SELECT 1 FROM move_tasks WHERE source_queue_id = $1 AND status IN ('RUNNING', 'PAUSED')",
    )
    .bind(params.source_queue_id)
    .fetch_optional(&mut *connection)
    .await
    .map_err(postgres_error("move_task_create: running"))?
    .is_some();
    if running {
        return Ok(MoveTaskCreateOutcome::AlreadyRunning);
    }
    let (until_seq, matching): (i64, i64) = sqlx::query_as(
        "SELECT COALESCE(MAX(seq), 0),
                COUNT(*) FILTER (WHERE ($2::text IS NULL OR last_failure_class = $2)
                                   AND ($3::bigint IS NULL OR sent_at <= $3))
         FROM messages WHERE queue_id = $1",
    )
    .bind(params.source_queue_id)
    .bind(&params.filter.class)
    .bind(params.filter.sent_before)
    .fetch_one(&mut *connection)
    .await
    .map_err(postgres_error("move_task_create: snapshot"))?;
    let to_move = params
        .filter
        .max_messages
        .map_or(matching, |max| matching.min(max));
    sqlx::query(
        "INSERT INTO move_tasks (handle, source_queue_id, source_arn, destination_arn, rate,
             status, started_at, until_seq, to_move, requested_by, filter_class, sent_before,
             max_messages, sample)
         VALUES ($1, $2, $3, $4, $5, 'RUNNING', $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(&params.handle)
    .bind(params.source_queue_id)
    .bind(&params.source_arn)
    .bind(&params.destination_arn)
    .bind(params.rate)
    .bind(params.now)
    .bind(until_seq)
    .bind(to_move)
    .bind(&params.requested_by)
    .bind(&params.filter.class)
    .bind(params.filter.sent_before)
    .bind(params.filter.max_messages)
    .bind(params.filter.sample)
    .execute(&mut *connection)
    .await
    .map_err(postgres_error("move_task_create: insert"))?;
    move_task_get(connection, &params.handle)
        .await?
        .map(|record| MoveTaskCreateOutcome::Created(Box::new(record)))
        .ok_or_else(|| StoreError::Corrupt {
            detail: "a move task vanished as it was created".into(),
        })
}

/// A message a move task considers.
struct Candidate {
    seq: i64,
    source_arn: Option<String>,
    failure_class: Option<String>,
    sent_at: i64,
}

pub(super) async fn move_task_step(
    connection: &mut PgConnection,
    params: &MoveTaskStepParams,
    node: &str,
) -> Result<MoveTaskStepOutcome, StoreError> {
    // Only the node holding the task's lease moves messages; the others'
    // runners wait, ready to take over when the lease runs out.
    let claimed: Option<(i64, i64, i64)> = sqlx::query_as(
        "UPDATE move_tasks SET owner = $2, owned_until = $3 + $4
         WHERE handle = $1 AND status = 'RUNNING'
           AND (owner IS NULL OR owner = $2 OR owned_until < $3)
         RETURNING source_queue_id, until_seq, cursor_seq",
    )
    .bind(&params.handle)
    .bind(node)
    .bind(params.now)
    .bind(MOVE_TASK_LEASE_MS)
    .fetch_optional(&mut *connection)
    .await
    .map_err(postgres_error("move_task_step: claim"))?;
    let Some((source_queue_id, until_seq, cursor)) = claimed else {
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM move_tasks WHERE handle = $1")
                .bind(&params.handle)
                .fetch_optional(&mut *connection)
                .await
                .map_err(postgres_error("move_task_step: status"))?;
        return Ok(MoveTaskStepOutcome {
            finished: status.as_deref() != Some("RUNNING"),
            ..MoveTaskStepOutcome::default()
        });
    };
    let record = move_task_get(connection, &params.handle)
        .await?
        .ok_or_else(|| StoreError::Corrupt {
            detail: "a running move task vanished".into(),
        })?;
    let filter = &record.filter;
    let candidates: Vec<Candidate> =
        sqlx::query_as::<_, (i64, Option<String>, Option<String>, i64)>(
            "SELECT seq, dead_letter_source_arn, last_failure_class, sent_at FROM messages
         WHERE queue_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4",
        )
        .bind(source_queue_id)
        .bind(cursor)
        .bind(until_seq)
        .bind(i64::from(params.limit))
        .fetch_all(&mut *connection)
        .await
        .map_err(postgres_error("move_task_step: candidates"))?
        .into_iter()
        .map(|(seq, source_arn, failure_class, sent_at)| Candidate {
            seq,
            source_arn,
            failure_class,
            sent_at,
        })
        .collect();
    let mut skipped = 0i64;
    let mut outcome = MoveTaskStepOutcome::default();
    let mut last_seq = cursor;
    let brake = relapse_brake(connection, &params.handle, source_queue_id).await?;
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
        // Read again under a row lock: a consumer on another node may have
        // leased or deleted it since the candidates were read.
        let Some((_, visible_at, _)) =
            lock_lease(connection, source_queue_id, candidate.seq).await?
        else {
            last_seq = candidate.seq;
            continue;
        };
        if visible_at > params.now {
            end.held = true;
            break;
        }
        let destination = match params.destination.queue_for(candidate.source_arn.as_ref()) {
            Some(queue_id) if queue_exists(connection, queue_id).await? => queue_id,
            _ => {
                end.failure = Some(move_step::destination_gone(
                    &params.destination,
                    candidate.source_arn.as_deref(),
                ));
                break;
            }
        };
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
        )
        .await?;
        outcome.moved += 1;
        if !outcome.destinations.contains(&destination) {
            outcome.destinations.push(destination);
        }
        last_seq = candidate.seq;
    }
    end.moved_total = record.moved + outcome.moved as i64;
    let (status, failure) = end.conclude();
    sqlx::query(
        "UPDATE move_tasks SET cursor_seq = $2, moved = moved + $3, status = $4,
             failure_reason = $5,
             finished_at = CASE WHEN $4 IN ('RUNNING', 'PAUSED') THEN NULL ELSE $6 END,
             skipped = skipped + $7,
             owner = CASE WHEN $4 = 'RUNNING' THEN owner END,
             owned_until = CASE WHEN $4 = 'RUNNING' THEN owned_until END
         WHERE handle = $1",
    )
    .bind(&params.handle)
    .bind(last_seq)
    .bind(outcome.moved as i64)
    .bind(status)
    .bind(failure)
    .bind(params.now)
    .bind(skipped)
    .execute(&mut *connection)
    .await
    .map_err(postgres_error("move_task_step: progress"))?;
    outcome.finished = status != "RUNNING";
    Ok(outcome)
}

/// Judges the relapse brake ([`move_step::relapse_brake`]) from what the
/// task moved and what came back since its last resume.
async fn relapse_brake(
    connection: &mut PgConnection,
    handle: &str,
    source_queue_id: i64,
) -> Result<Option<String>, StoreError> {
    let (moved, base_moved, base_count): (i64, i64, i64) = sqlx::query_as(
        "SELECT moved, relapse_base_moved, relapse_base_count FROM move_tasks WHERE handle = $1",
    )
    .bind(handle)
    .fetch_one(&mut *connection)
    .await
    .map_err(postgres_error("relapse_brake: moved"))?;
    let relapsed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM messages WHERE queue_id = $1 AND redriven_by_task = $2",
    )
    .bind(source_queue_id)
    .bind(handle)
    .fetch_one(&mut *connection)
    .await
    .map_err(postgres_error("relapse_brake: relapsed"))?;
    Ok(move_step::relapse_brake(
        moved - base_moved,
        relapsed - base_count,
    ))
}

pub(super) async fn move_task_resume(
    connection: &mut PgConnection,
    handle: &str,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    let resumed = sqlx::query(
        "UPDATE move_tasks SET status = 'RUNNING', sample = NULL, failure_reason = NULL,
             relapse_base_moved = moved,
             relapse_base_count = (SELECT COUNT(*) FROM messages
                 WHERE messages.queue_id = move_tasks.source_queue_id
                   AND messages.redriven_by_task = move_tasks.handle)
         WHERE handle = $1 AND status = 'PAUSED'",
    )
    .bind(handle)
    .execute(&mut *connection)
    .await
    .map_err(postgres_error("move_task_resume"))?
    .rows_affected();
    if resumed == 0 {
        return Ok(None);
    }
    move_task_get(connection, handle).await
}

pub(super) async fn move_task_cancel(
    connection: &mut PgConnection,
    handle: &str,
    now: i64,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    let cancelled = sqlx::query(
        "UPDATE move_tasks SET status = 'CANCELLED', finished_at = $2, owner = NULL,
             owned_until = NULL
         WHERE handle = $1 AND status IN ('RUNNING', 'PAUSED')",
    )
    .bind(handle)
    .bind(now)
    .execute(&mut *connection)
    .await
    .map_err(postgres_error("move_task_cancel"))?
    .rows_affected();
    if cancelled == 0 {
        return Ok(None);
    }
    move_task_get(connection, handle).await
}

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
