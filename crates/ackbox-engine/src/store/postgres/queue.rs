//! Queues: list, get, create, update, delete, purge and stats. Functions
//! taking a `PgConnection` run inside the caller's transaction and never
//! commit; functions taking the pool are single-statement reads.

use std::collections::BTreeMap;

use sqlx::{PgConnection, PgPool, Row};

use super::QUEUES_CHANNEL;
use super::database_error::postgres_error;
use super::fifo::{self, TouchedGroups};
use super::notify::announce;
use super::rows::{queue_columns, queue_record};
use crate::store::{
    PurgeStep, QueueCreateOutcome, QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome,
    QueuePurgeParams, QueueRecord, QueueStats, QueueStatsParams, QueueUpdateParams, StoreError,
    to_json,
};

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
pub(super) async fn drop_purged(
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
pub(super) async fn purge_left(
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
