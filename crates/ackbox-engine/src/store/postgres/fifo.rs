//! FIFO queues on PostgreSQL: message groups, the deduplication window and
//! receive attempts, with the same rules as the embedded store (see
//! `store/sqlite/fifo.rs` for the argument). Every function here runs with
//! the queue's advisory lock held ([`lock_queue`]), so the group rows are
//! derived from the messages one transaction at a time across all nodes.

use std::collections::{BTreeSet, HashMap};

use ackbox_core::limits::MAX_RECEIVE_MESSAGES;
use sqlx::PgConnection;

use super::database_error::postgres_error;
use super::rows::queue_kind;
use crate::store::{
    DeleteOutcome, InsertedMessage, MessageDeleteParams, MessageInsertParams, StoreError, to_json,
};

/// Serializes every FIFO mutation of one queue, across nodes, until the
/// transaction ends. Taking it twice in one transaction is harmless.
pub(super) async fn lock_queue(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(queue_id)
        .execute(connection)
        .await
        .map(drop)
        .map_err(postgres_error("fifo: lock queue"))
}

/// Recomputes a group's row from its messages (see the embedded store).
pub(super) async fn refresh_group(
    connection: &mut PgConnection,
    queue_id: i64,
    group_id: &str,
) -> Result<(), StoreError> {
    let front: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT seq, visible_at, receive_count FROM messages
         WHERE queue_id = $1 AND group_id = $2 ORDER BY seq LIMIT $3",
    )
    .bind(queue_id)
    .bind(group_id)
    .bind(i64::from(MAX_RECEIVE_MESSAGES))
    .fetch_all(&mut *connection)
    .await
    .map_err(postgres_error("fifo group: front"))?;
    let Some((head_seq, available_at)) = crate::store::group_availability(&front) else {
        return sqlx::query("DELETE FROM fifo_groups WHERE queue_id = $1 AND group_id = $2")
            .bind(queue_id)
            .bind(group_id)
            .execute(connection)
            .await
            .map(drop)
            .map_err(postgres_error("fifo group: drop"));
    };
    sqlx::query(
        "INSERT INTO fifo_groups (queue_id, group_id, available_at, head_seq)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (queue_id, group_id)
         DO UPDATE SET available_at = excluded.available_at, head_seq = excluded.head_seq",
    )
    .bind(queue_id)
    .bind(group_id)
    .bind(available_at)
    .bind(head_seq)
    .execute(connection)
    .await
    .map(drop)
    .map_err(postgres_error("fifo group: store"))
}

/// Groups whose messages a mutation changed.
#[derive(Debug, Default)]
pub(super) struct TouchedGroups(BTreeSet<(i64, String)>);

impl TouchedGroups {
    pub(super) fn touch(&mut self, queue_id: i64, group_id: Option<&str>) {
        if let Some(group_id) = group_id {
            self.0.insert((queue_id, group_id.to_owned()));
        }
    }

    /// Brings the rows of the touched groups of FIFO queues up to date,
    /// under each queue's lock.
    pub(super) async fn refresh(self, connection: &mut PgConnection) -> Result<(), StoreError> {
        let mut fifo_queues = HashMap::new();
        for (queue_id, group_id) in self.0 {
            let fifo = match fifo_queues.get(&queue_id) {
                Some(&fifo) => fifo,
                None => {
                    let fifo = queue_kind(connection, queue_id).await?.unwrap_or(false);
                    if fifo {
                        lock_queue(connection, queue_id).await?;
                    }
                    fifo_queues.insert(queue_id, fifo);
                    fifo
                }
            };
            if fifo {
                refresh_group(connection, queue_id, &group_id).await?;
            }
        }
        Ok(())
    }
}

/// A FIFO send: duplicates within the window answer the first send's ids;
/// the others join the tail of their group.
pub(super) async fn insert_batch(
    connection: &mut PgConnection,
    params: &MessageInsertParams,
) -> Result<Vec<InsertedMessage>, StoreError> {
    lock_queue(connection, params.queue_id).await?;
    let mut inserted = Vec::with_capacity(params.messages.len());
    for message in &params.messages {
        if let Some(deduplication) = &message.deduplication {
            let remembered: Option<(i64, String)> = sqlx::query_as(
                "SELECT seq, message_id FROM fifo_dedup
                 WHERE queue_id = $1 AND scope = $2 AND dedup_id = $3 AND sent_at > $4
                   AND seq > COALESCE(
                       (SELECT purged_through_seq FROM queues WHERE id = $1), 0)",
            )
            .bind(params.queue_id)
            .bind(&deduplication.scope)
            .bind(&deduplication.id)
            .bind(params.deduplication_window_start)
            .fetch_optional(&mut *connection)
            .await
            .map_err(postgres_error("fifo dedup: lookup"))?;
            if let Some((seq, message_id)) = remembered {
                inserted.push(InsertedMessage {
                    seq,
                    message_id,
                    duplicate: true,
                });
                continue;
            }
        }
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO messages (queue_id, message_id, body, attributes, md5_of_body,
                 md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at,
                 dedup_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             RETURNING seq",
        )
        .bind(params.queue_id)
        .bind(&message.message_id)
        .bind(&message.body)
        .bind((!message.attributes.is_empty()).then(|| to_json(&message.attributes)))
        .bind(&message.md5_of_body)
        .bind(&message.md5_of_attributes)
        .bind(&message.trace_header)
        .bind(&message.group_id)
        .bind(&message.sender_id)
        .bind(message.sent_at)
        .bind(message.visible_at)
        .bind(
            message
                .deduplication
                .as_ref()
                .map(|deduplication| &deduplication.id),
        )
        .fetch_one(&mut *connection)
        .await
        .map_err(postgres_error("message_insert_batch: insert"))?;
        if let Some(deduplication) = &message.deduplication {
            sqlx::query(
                "INSERT INTO fifo_dedup (queue_id, scope, dedup_id, message_id, seq, sent_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (queue_id, scope, dedup_id) DO UPDATE
                 SET message_id = excluded.message_id, seq = excluded.seq, sent_at = excluded.sent_at",
            )
            .bind(params.queue_id)
            .bind(&deduplication.scope)
            .bind(&deduplication.id)
            .bind(&message.message_id)
            .bind(seq)
            .bind(message.sent_at)
            .execute(&mut *connection)
            .await
            .map_err(postgres_error("fifo dedup: remember"))?;
        }
        if let Some(group_id) = &message.group_id {
            sqlx::query(
                "INSERT INTO fifo_groups (queue_id, group_id, available_at, head_seq)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (queue_id, group_id) DO NOTHING",
            )
            .bind(params.queue_id)
            .bind(group_id)
            .bind(message.visible_at)
            .bind(seq)
            .execute(&mut *connection)
            .await
            .map_err(postgres_error("fifo group: arrival"))?;
        }
        inserted.push(InsertedMessage {
            seq,
            message_id: message.message_id.clone(),
            duplicate: false,
        });
    }
    Ok(inserted)
}

/// On a FIFO queue only a running lease deletes.
pub(super) async fn delete_batch(
    connection: &mut PgConnection,
    params: &MessageDeleteParams,
) -> Result<Vec<DeleteOutcome>, StoreError> {
    let mut touched = TouchedGroups::default();
    let mut outcomes = Vec::with_capacity(params.leases.len());
    for lease in &params.leases {
        let deleted: Option<Option<String>> = sqlx::query_scalar(
            "DELETE FROM messages
             WHERE seq = $1 AND queue_id = $2 AND receive_count = $3 AND visible_at > $4
             RETURNING group_id",
        )
        .bind(lease.seq)
        .bind(params.queue_id)
        .bind(lease.lease)
        .bind(params.now)
        .fetch_optional(&mut *connection)
        .await
        .map_err(postgres_error("fifo delete: delete"))?;
        if let Some(group_id) = deleted {
            touched.touch(params.queue_id, group_id.as_deref());
            outcomes.push(DeleteOutcome::Deleted);
            continue;
        }
        let held = sqlx::query("SELECT 1 FROM messages WHERE seq = $1 AND queue_id = $2")
            .bind(lease.seq)
            .bind(params.queue_id)
            .fetch_optional(&mut *connection)
            .await
            .map_err(postgres_error("fifo delete: exists"))?
            .is_some();
        outcomes.push(if held {
            DeleteOutcome::Expired
        } else {
            DeleteOutcome::AlreadyGone
        });
    }
    touched.refresh(connection).await?;
    Ok(outcomes)
}

/// Most window entries one sweep forgets.
const WINDOW_SWEEP_CHUNK: i64 = 10_000;

/// Forgets deduplication ids and receive attempts recorded at or before `before`.
pub(super) async fn window_expire(
    connection: &mut PgConnection,
    before: i64,
) -> Result<u64, StoreError> {
    let mut forgotten = 0;
    for (sql, operation) in [
        (
            "DELETE FROM fifo_dedup WHERE ctid IN (
                 SELECT ctid FROM fifo_dedup WHERE sent_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            "fifo window: dedup",
        ),
        (
            "DELETE FROM receive_attempts WHERE ctid IN (
                 SELECT ctid FROM receive_attempts WHERE created_at <= $1 LIMIT $2
                 FOR UPDATE SKIP LOCKED)",
            "fifo window: attempts",
        ),
    ] {
        forgotten += sqlx::query(sql)
            .bind(before)
            .bind(WINDOW_SWEEP_CHUNK)
            .execute(&mut *connection)
            .await
            .map_err(postgres_error(operation))?
            .rows_affected();
    }
    Ok(forgotten)
}

/// Forgets the rows of a deleted queue's groups.
pub(super) async fn forget_groups(
    connection: &mut PgConnection,
    queue_id: i64,
    groups: impl IntoIterator<Item = String>,
) -> Result<(), StoreError> {
    let groups: Vec<String> = groups
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if groups.is_empty() {
        return Ok(());
    }
    sqlx::query("DELETE FROM fifo_groups WHERE queue_id = $1 AND group_id = ANY($2)")
        .bind(queue_id)
        .bind(&groups)
        .execute(connection)
        .await
        .map(drop)
        .map_err(postgres_error("fifo: forget groups"))
}

/// Forgets what a purged queue's receives with a `ReceiveRequestAttemptId`
/// returned: their messages are gone.
pub(super) async fn forget_attempts(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM receive_attempts WHERE queue_id = $1")
        .bind(queue_id)
        .execute(connection)
        .await
        .map(drop)
        .map_err(postgres_error("fifo: forget attempts"))
}

/// Forgets up to `limit` deduplication ids of `queue_id` first sent at or
/// before a purge's `through_seq` (see the embedded store).
pub(super) async fn forget_window_through(
    connection: &mut PgConnection,
    queue_id: i64,
    through_seq: i64,
    limit: u32,
) -> Result<u64, StoreError> {
    sqlx::query(
        "DELETE FROM fifo_dedup WHERE (queue_id, scope, dedup_id) IN (
             SELECT queue_id, scope, dedup_id FROM fifo_dedup
             WHERE queue_id = $1 AND seq <= $2 LIMIT $3)",
    )
    .bind(queue_id)
    .bind(through_seq)
    .bind(i64::from(limit))
    .execute(connection)
    .await
    .map(|done| done.rows_affected())
    .map_err(postgres_error("fifo: forget purged window"))
}
