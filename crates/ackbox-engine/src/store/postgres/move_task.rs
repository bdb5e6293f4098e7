//! Message move tasks (redrive): create, step (leased to one node at a
//! time), resume, cancel and list.

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use super::database_error::postgres_error;
use super::message::lock_lease;
use super::relocate::relocate;
use super::rows::queue_exists;
use crate::store::move_step::{self, StepEnd};
use crate::store::relocation::Relocation;
use crate::store::{
    MoveFilter, MoveTaskCreateOutcome, MoveTaskCreateParams, MoveTaskFilter, MoveTaskRecord,
    MoveTaskStepOutcome, MoveTaskStepParams, StoreError,
};

/// How long a node's claim on a move task lasts without a step renewing it;
/// another node takes the task over once it runs out.
pub(super) const MOVE_TASK_LEASE_MS: i64 = 5_000;

macro_rules! move_task_columns {
    () => {
        "handle, source_queue_id, source_arn, destination_arn, rate, status,
         started_at, finished_at, to_move, moved, failure_reason, requested_by, filter_class,
         sent_before, max_messages, skipped, sample"
    };
}

pub(super) fn move_task_record(row: &PgRow) -> Result<MoveTaskRecord, StoreError> {
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

pub(super) async fn move_task_get(
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
pub(super) struct Candidate {
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
            &Relocation::redrive(destination, &params.handle, params.now),
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
pub(super) async fn relapse_brake(
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
