//! Queues: create, update, delete and purge, run by the writer inside a
//! group commit.
//!
//! Each function sees a connection whose transaction the writer owns; it must
//! not begin or commit one itself. A function that returns `Err` has its
//! savepoint rolled back, so a failed job leaves no partial change behind.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::database_error::database_error;
use super::fifo::{self, TouchedGroups};
use super::rows::{QUEUE_COLUMNS, queue_from_row, queue_record};
use crate::store::{
    PurgeStep, QueueCreateOutcome, QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome,
    QueuePurgeParams, QueueRecord, QueueUpdateParams, StoreError, to_json,
};

pub(crate) fn queue_create(
    connection: &Connection,
    params: &QueueCreateParams,
) -> Result<QueueCreateOutcome, StoreError> {
    let existing = connection
        .query_row(
            &format!("SELECT {QUEUE_COLUMNS} FROM queues WHERE name = ?1"),
            [&params.name],
            queue_from_row,
        )
        .optional()
        .map_err(database_error("queue_create: lookup"))?;
    if let Some(row) = existing {
        return Ok(QueueCreateOutcome::Exists(queue_record(row)?));
    }
    let deleted_recently = connection
        .query_row(
            "SELECT 1 FROM deleted_queues WHERE name = ?1 AND deleted_at >= ?2",
            params![params.name, params.deleted_after],
            |_| Ok(()),
        )
        .optional()
        .map_err(database_error("queue_create: tombstone"))?
        .is_some();
    if deleted_recently {
        return Ok(QueueCreateOutcome::DeletedRecently);
    }
    connection
        .execute(
            "INSERT INTO queues (name, attributes, tags, created_at, last_modified_at, fifo)
             VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
            params![
                params.name,
                to_json(&params.attributes),
                to_json(&params.tags),
                params.now,
                params.fifo
            ],
        )
        .map_err(database_error("queue_create: insert"))?;
    Ok(QueueCreateOutcome::Created(QueueRecord {
        id: connection.last_insert_rowid(),
        name: params.name.clone(),
        attributes: params.attributes.clone(),
        tags: params.tags.clone(),
        created_at: params.now,
        last_modified_at: params.now,
    }))
}

pub(crate) fn queue_update(
    connection: &Connection,
    params: &QueueUpdateParams,
) -> Result<(), StoreError> {
    if let Some(attributes) = &params.attributes {
        connection
            .execute(
                "UPDATE queues SET attributes = ?2, last_modified_at = ?3 WHERE id = ?1",
                params![params.queue_id, to_json(attributes), params.now],
            )
            .map_err(database_error("queue_update: attributes"))?;
    }
    if let Some(tags) = &params.tags {
        connection
            .execute(
                "UPDATE queues SET tags = ?2 WHERE id = ?1",
                params![params.queue_id, to_json::<BTreeMap<String, String>>(tags)],
            )
            .map_err(database_error("queue_update: tags"))?;
    }
    Ok(())
}

pub(crate) fn queue_delete(
    connection: &Connection,
    params: &QueueDeleteParams,
) -> Result<bool, StoreError> {
    let name: Option<String> = connection
        .query_row(
            "SELECT name FROM queues WHERE id = ?1",
            [params.queue_id],
            |row| row.get(0),
        )
        .optional()
        .map_err(database_error("queue_delete: lookup"))?;
    let Some(name) = name else {
        return Ok(false);
    };
    // The messages, and a FIFO queue's groups, deduplication ids and receive
    // attempts, stay for the sweepers (`message_sweep_left_behind`,
    // `window_expire`): deleting millions here would hold every other
    // queue's writes behind this one. Ids are never reused, so nothing
    // reaches them meanwhile.
    connection
        .execute("DELETE FROM queues WHERE id = ?1", [params.queue_id])
        .map_err(database_error("queue_delete: queue"))?;
    connection
        .execute(
            "INSERT INTO deleted_queues (name, deleted_at) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET deleted_at = excluded.deleted_at",
            params![name, params.now],
        )
        .map_err(database_error("queue_delete: tombstone"))?;
    Ok(true)
}

pub(crate) fn queue_purge(
    connection: &Connection,
    params: &QueuePurgeParams,
) -> Result<QueuePurgeOutcome, StoreError> {
    let (last_purged_at, fifo): (Option<i64>, bool) = connection
        .query_row(
            "SELECT last_purged_at, fifo FROM queues WHERE id = ?1",
            [params.queue_id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(database_error("queue_purge: lookup"))?
        .ok_or(StoreError::QueueNotFound {
            queue_id: params.queue_id,
        })?;
    if last_purged_at.is_some_and(|at| at >= params.purged_after) {
        return Ok(QueuePurgeOutcome::InProgress);
    }
    let through_seq: i64 = connection
        .query_row("SELECT COALESCE(MAX(seq), 0) FROM messages", [], |row| {
            row.get(0)
        })
        .map_err(database_error("queue_purge: newest message"))?;
    if fifo {
        fifo::forget_attempts(connection, params.queue_id)?;
    }
    let step = drop_purged(
        connection,
        params.queue_id,
        through_seq,
        fifo,
        params.delete_at_once,
    )?;
    let more: bool = connection
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE queue_id = ?1 AND seq <= ?2)
                 OR EXISTS (SELECT 1 FROM fifo_dedup WHERE queue_id = ?1 AND seq <= ?2)",
        )
        .and_then(|mut left| {
            left.query_row(params![params.queue_id, through_seq], |row| row.get(0))
        })
        .map_err(database_error("queue_purge: what is left"))?;
    mark_purged(connection, params, more.then_some(through_seq))?;
    Ok(QueuePurgeOutcome::Purged {
        deleted: step.messages,
        more,
    })
}

/// Drops up to `limit` rows that a purge through `through_seq` covers in
/// `queue_id`: its messages first, refreshing the FIFO groups they leave (a
/// group's row must agree with its messages after every transaction), then
/// the deduplication ids first sent before it.
pub(super) fn drop_purged(
    connection: &Connection,
    queue_id: i64,
    through_seq: i64,
    fifo: bool,
    limit: u32,
) -> Result<PurgeStep, StoreError> {
    const PURGED_MESSAGES: &str = "DELETE FROM messages WHERE seq IN (
         SELECT seq FROM messages WHERE queue_id = ?1 AND seq <= ?2 LIMIT ?3)";
    let bind = params![queue_id, through_seq, limit];
    if !fifo {
        let messages = connection
            .prepare_cached(PURGED_MESSAGES)
            .and_then(|mut delete| delete.execute(bind))
            .map_err(database_error("purge: messages"))?;
        return Ok(PurgeStep {
            messages: messages as u64,
            window_entries: 0,
        });
    }
    let groups: Vec<Option<String>> = connection
        .prepare_cached(&format!("{PURGED_MESSAGES} RETURNING group_id"))
        .and_then(|mut delete| delete.query_map(bind, |row| row.get(0))?.collect())
        .map_err(database_error("purge: fifo messages"))?;
    let mut touched = TouchedGroups::default();
    for group_id in &groups {
        touched.touch(queue_id, group_id.as_deref());
    }
    touched.refresh(connection)?;
    let messages = groups.len() as u32;
    let window_entries = if messages < limit {
        fifo::forget_window_through(connection, queue_id, through_seq, limit - messages)?
    } else {
        0
    };
    Ok(PurgeStep {
        messages: u64::from(messages),
        window_entries,
    })
}

/// Starts the purge cooldown and sets (or, when nothing is left, clears)
/// the mark the sweeper drops messages up to.
pub(super) fn mark_purged(
    connection: &Connection,
    params: &QueuePurgeParams,
    through_seq: Option<i64>,
) -> Result<(), StoreError> {
    connection
        .execute(
            "UPDATE queues SET last_purged_at = ?2, purged_through_seq = ?3 WHERE id = ?1",
            params![params.queue_id, params.now, through_seq],
        )
        .map(drop)
        .map_err(database_error("queue_purge: mark"))
}
