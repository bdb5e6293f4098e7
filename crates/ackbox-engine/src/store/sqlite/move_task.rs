//! Message move tasks (redrive): create, step, record progress, resume and
//! cancel, run by the writer inside a group commit.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::database_error::database_error;
use super::relocate::relocate;
use super::rows::{ensure_queue_exists, queue_exists};
use crate::store::move_step::{self, StepEnd};
use crate::store::relocation::Relocation;
use crate::store::{
    MoveFilter, MoveTaskCreateOutcome, MoveTaskCreateParams, MoveTaskRecord, MoveTaskStepOutcome,
    MoveTaskStepParams, StoreError,
};

pub(crate) const MOVE_TASK_COLUMNS: &str =
    "handle, source_queue_id, source_arn, destination_arn, rate, status,
     started_at, finished_at, to_move, moved, failure_reason, requested_by, filter_class,
     sent_before, max_messages, skipped, sample";

pub(crate) fn move_task_row(row: &Row<'_>) -> rusqlite::Result<MoveTaskRecord> {
    Ok(MoveTaskRecord {
        handle: row.get(0)?,
        source_queue_id: row.get(1)?,
        source_arn: row.get(2)?,
        destination_arn: row.get(3)?,
        rate: row.get(4)?,
        status: row.get(5)?,
        started_at: row.get(6)?,
        finished_at: row.get(7)?,
        to_move: row.get(8)?,
        moved: row.get(9)?,
        failure_reason: row.get(10)?,
        requested_by: row.get(11)?,
        filter: MoveFilter {
            class: row.get(12)?,
            sent_before: row.get(13)?,
            max_messages: row.get(14)?,
            sample: row.get(16)?,
        },
        skipped: row.get(15)?,
    })
}

pub(super) fn move_task_get(
    connection: &Connection,
    handle: &str,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    connection
        .prepare_cached(&format!(
            "SELECT {MOVE_TASK_COLUMNS} FROM move_tasks WHERE handle = ?1"
        ))
        .and_then(|mut select| select.query_row([handle], move_task_row).optional())
        .map_err(database_error("move_task: get"))
}

pub(crate) fn move_task_create(
    connection: &Connection,
    params: &MoveTaskCreateParams,
) -> Result<MoveTaskCreateOutcome, StoreError> {
    move_task_insert(connection, params, |connection| {
        connection
            .query_row(
                "SELECT COALESCE(MAX(seq), 0),
                        COALESCE(SUM((?2 IS NULL OR last_failure_class = ?2) AND (?3 IS NULL OR sent_at <= ?3)), 0)
                 FROM messages WHERE queue_id = ?1",
                params![params.source_queue_id, params.filter.class, params.filter.sent_before],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(database_error("move_task_create: snapshot"))
    })
}

/// Starts a move task unless one runs on its source, taking the source's
/// `(newest seq, matching messages)` from `snapshot` (the messages may
/// live in this database or in the log store's).
pub(crate) fn move_task_insert(
    connection: &Connection,
    params: &MoveTaskCreateParams,
    snapshot: impl FnOnce(&Connection) -> Result<(i64, i64), StoreError>,
) -> Result<MoveTaskCreateOutcome, StoreError> {
    ensure_queue_exists(connection, params.source_queue_id)?;
    let running = connection
        .prepare_cached(
            "SELECT 1 FROM move_tasks WHERE source_queue_id = ?1 AND status IN ('RUNNING', 'PAUSED')",
        )
        .and_then(|mut select| select.exists([params.source_queue_id]))
        .map_err(database_error("move_task_create: running"))?;
    if running {
        return Ok(MoveTaskCreateOutcome::AlreadyRunning);
    }
    let (until_seq, matching) = snapshot(connection)?;
    let to_move = params
        .filter
        .max_messages
        .map_or(matching, |max| matching.min(max));
    connection
        .execute(
            "INSERT INTO move_tasks (handle, source_queue_id, source_arn, destination_arn, rate,
                 status, started_at, until_seq, to_move, requested_by, filter_class, sent_before,
                 max_messages, sample)
             VALUES (?1, ?2, ?3, ?4, ?5, 'RUNNING', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                params.handle,
                params.source_queue_id,
                params.source_arn,
                params.destination_arn,
                params.rate,
                params.now,
                until_seq,
                to_move,
                params.requested_by,
                params.filter.class,
                params.filter.sent_before,
                params.filter.max_messages,
                params.filter.sample
            ],
        )
        .map_err(database_error("move_task_create: insert"))?;
    move_task_get(connection, &params.handle)?
        .map(|record| MoveTaskCreateOutcome::Created(Box::new(record)))
        .ok_or_else(|| StoreError::Corrupt {
            detail: "a move task vanished as it was created".into(),
        })
}

pub(crate) fn move_task_step(
    connection: &Connection,
    params: &MoveTaskStepParams,
) -> Result<MoveTaskStepOutcome, StoreError> {
    let Some(TaskPosition {
        record,
        until_seq,
        cursor,
        relapse_base_moved,
        relapse_base_count,
    }) = move_task_position(connection, &params.handle)?
    else {
        return Ok(MoveTaskStepOutcome {
            finished: true,
            ..MoveTaskStepOutcome::default()
        });
    };
    let source_queue_id = record.source_queue_id;
    let filter = &record.filter;
    let candidates: Vec<Candidate> = connection
        .prepare_cached(
            "SELECT seq, dead_letter_source_arn, visible_at, last_failure_class, sent_at FROM messages
             WHERE queue_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4",
        )
        .and_then(|mut select| {
            select
                .query_map(params![source_queue_id, cursor, until_seq, params.limit], |row| {
                    Ok(Candidate {
                        seq: row.get(0)?,
                        source_arn: row.get(1)?,
                        visible_at: row.get(2)?,
                        failure_class: row.get(3)?,
                        sent_at: row.get(4)?,
                    })
                })?
                .collect()
        })
        .map_err(database_error("move_task_step: candidates"))?;
    let mut skipped = 0i64;
    let mut outcome = MoveTaskStepOutcome::default();
    let mut last_seq = cursor;
    // Judged before moving more: a relapsing task must not feed the loop.
    let relapsed = redriven_count(connection, source_queue_id, &params.handle)?;
    let brake = move_step::relapse_brake(
        record.moved - relapse_base_moved,
        relapsed - relapse_base_count,
    );
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
        // A message someone is working on in the dead-letter queue stays
        // theirs: the task waits at it until the lease ends or it is deleted.
        if candidate.visible_at > params.now {
            end.held = true;
            break;
        }
        let destination = match params.destination.queue_for(candidate.source_arn.as_ref()) {
            Some(queue_id) if queue_exists(connection, queue_id)? => queue_id,
            _ => {
                end.failure = Some(move_step::destination_gone(
                    &params.destination,
                    candidate.source_arn.as_deref(),
                ));
                break;
            }
        };
        // A redriven message starts over: fresh lease history, visible now.
        relocate(
            connection,
            candidate.seq,
            &Relocation::redrive(destination, &params.handle, params.now),
        )?;
        outcome.moved += 1;
        if !outcome.destinations.contains(&destination) {
            outcome.destinations.push(destination);
        }
        last_seq = candidate.seq;
    }
    end.moved_total = record.moved + outcome.moved as i64;
    let (status, failure) = end.conclude();
    move_task_record_step(
        connection,
        &params.handle,
        &StepProgress {
            cursor: last_seq,
            moved: outcome.moved as i64,
            skipped,
            status,
            failure,
            now: params.now,
        },
    )?;
    outcome.finished = status != "RUNNING";
    Ok(outcome)
}

/// A running move task and where its walk of the source stands.
#[derive(Debug)]
pub(crate) struct TaskPosition {
    pub(crate) record: MoveTaskRecord,
    /// The newest sequence number of the source when the task started.
    pub(crate) until_seq: i64,
    /// The last sequence number it judged.
    pub(crate) cursor: i64,
    /// `moved`, and the task's messages back in the source, at its last
    /// resume: the relapse brake judges what happened since.
    pub(crate) relapse_base_moved: i64,
    pub(crate) relapse_base_count: i64,
}

/// Where a running task stands; `None` when no task has the handle or it
/// is not running.
pub(crate) fn move_task_position(
    connection: &Connection,
    handle: &str,
) -> Result<Option<TaskPosition>, StoreError> {
    let position: Option<(i64, i64, i64, i64, String)> = connection
        .prepare_cached(
            "SELECT until_seq, cursor_seq, relapse_base_moved, relapse_base_count, status
             FROM move_tasks WHERE handle = ?1",
        )
        .and_then(|mut select| {
            select
                .query_row([handle], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                    ))
                })
                .optional()
        })
        .map_err(database_error("move_task_position"))?;
    let Some((until_seq, cursor, relapse_base_moved, relapse_base_count, status)) = position else {
        return Ok(None);
    };
    if status != "RUNNING" {
        return Ok(None);
    }
    let record = move_task_get(connection, handle)?.ok_or_else(|| StoreError::Corrupt {
        detail: "a running move task vanished".into(),
    })?;
    Ok(Some(TaskPosition {
        record,
        until_seq,
        cursor,
        relapse_base_moved,
        relapse_base_count,
    }))
}

/// What one step of a move task did, to record.
#[derive(Debug)]
pub(crate) struct StepProgress {
    /// The last sequence number judged.
    pub(crate) cursor: i64,
    pub(crate) moved: i64,
    pub(crate) skipped: i64,
    /// The task's status after the step, and the reason it records.
    pub(crate) status: &'static str,
    pub(crate) failure: Option<String>,
    pub(crate) now: i64,
}

/// Records a step's progress on its task. A task cancelled while the step
/// ran (possible when its moves happened outside this database) stays
/// cancelled, with the messages the step moved counted.
pub(crate) fn move_task_record_step(
    connection: &Connection,
    handle: &str,
    progress: &StepProgress,
) -> Result<(), StoreError> {
    connection
        .prepare_cached(
            "UPDATE move_tasks SET cursor_seq = ?2, moved = moved + ?3, skipped = skipped + ?7,
                 status = CASE WHEN status = 'RUNNING' THEN ?4 ELSE status END,
                 failure_reason = CASE WHEN status = 'RUNNING' THEN ?5 ELSE failure_reason END,
                 finished_at = CASE WHEN status <> 'RUNNING' THEN finished_at
                                    WHEN ?4 IN ('RUNNING', 'PAUSED') THEN NULL ELSE ?6 END
             WHERE handle = ?1",
        )
        .and_then(|mut update| {
            update.execute(params![
                handle,
                progress.cursor,
                progress.moved,
                progress.status,
                progress.failure,
                progress.now,
                progress.skipped
            ])
        })
        .map_err(database_error("move_task_step: progress"))?;
    Ok(())
}

/// A message a move task considers.
pub(super) struct Candidate {
    seq: i64,
    source_arn: Option<String>,
    visible_at: i64,
    failure_class: Option<String>,
    sent_at: i64,
}

/// How many of the source's messages the task redrove: they came back.
pub(super) fn redriven_count(
    connection: &Connection,
    source_queue_id: i64,
    handle: &str,
) -> Result<i64, StoreError> {
    connection
        .prepare_cached(
            "SELECT COUNT(*) FROM messages WHERE queue_id = ?1 AND redriven_by_task = ?2",
        )
        .and_then(|mut select| select.query_row(params![source_queue_id, handle], |row| row.get(0)))
        .map_err(database_error("relapse_brake: relapsed"))
}

/// Resumes a paused task. The relapse brake starts counting again from
/// here: `relapsed` is how many of the task's messages are back in its
/// source now, or `None` to count them in this database.
pub(crate) fn move_task_resume(
    connection: &Connection,
    handle: &str,
    relapsed: Option<i64>,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    let resumed = connection
        .execute(
            "UPDATE move_tasks SET status = 'RUNNING', sample = NULL, failure_reason = NULL,
                 relapse_base_moved = moved,
                 relapse_base_count = COALESCE(?2, (SELECT COUNT(*) FROM messages
                     WHERE messages.queue_id = move_tasks.source_queue_id
                       AND messages.redriven_by_task = move_tasks.handle))
             WHERE handle = ?1 AND status = 'PAUSED'",
            params![handle, relapsed],
        )
        .map_err(database_error("move_task_resume"))?;
    if resumed == 0 {
        return Ok(None);
    }
    move_task_get(connection, handle)
}

pub(crate) fn move_task_cancel(
    connection: &Connection,
    handle: &str,
    now: i64,
) -> Result<Option<MoveTaskRecord>, StoreError> {
    let cancelled = connection
        .execute(
            "UPDATE move_tasks SET status = 'CANCELLED', finished_at = ?2
             WHERE handle = ?1 AND status IN ('RUNNING', 'PAUSED')",
            params![handle, now],
        )
        .map_err(database_error("move_task_cancel"))?;
    if cancelled == 0 {
        return Ok(None);
    }
    move_task_get(connection, handle)
}
