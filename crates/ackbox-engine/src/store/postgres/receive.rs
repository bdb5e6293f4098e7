//! ReceiveMessage: each visible message met is expired, dead-lettered or
//! leased by the receive policy (`ackbox_core::receive_policy`) — in one
//! statement when nothing is due for the dead-letter queue — and on FIFO
//! queues whole runs from the heads of available groups, with receive
//! attempts replayed. On standard queues, quiet tenants first
//! (`ackbox_core::fair_queue`).

use std::collections::HashSet;
use std::ops::ControlFlow;

use ackbox_core::fair_queue::{FairOrder, NOISY_MIN_IN_FLIGHT, NOISY_SHARE_DIVISOR, Pass};
use ackbox_core::receive_policy::{Fate, ReceivePolicy};
use sqlx::{PgConnection, PgPool, Row};

use super::database_error::postgres_error;
use super::fifo::{self, TouchedGroups, refresh_group};
use super::relocate::move_to_dead_letter_queue;
use super::rows::{MessageRow, message_columns, message_from_row, queue_exists, queue_kind};
use crate::store::ReceiveAttempt;
use crate::store::{
    DeadLetterTarget, MessageReceiveParams, ReceiveOutcome, StoreError, StoredMessage, from_json,
    to_json,
};

/// A standard queue's receive without an attempt id, in one statement: it
/// picks the oldest visible rows no other receive holds, drops the expired
/// ones and leases the rest. Alone it is a whole transaction. Noisy
/// tenants' rows (fair queues) are left to the full pass, as are rows due
/// for the dead-letter queue.
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
    let mut noisy = false;
    // Expired rows fill a round without filling the receive; a few more
    // rounds reach past them (the sweeper removes the rest).
    for _ in 0..4 {
        let rows = sqlx::query(concat!(
            // `fair_queue::is_noisy` in SQL; the count of the queue's
            // in-flight messages runs only once a tenant has enough.
            "WITH noisy AS (
                 SELECT group_id FROM messages
                 WHERE queue_id = $1 AND visible_at > $2 AND group_id IS NOT NULL
                   AND receive_count > 0
                 GROUP BY group_id
                 HAVING COUNT(*) >= $8 AND COUNT(*) * $9 > (
                     SELECT COUNT(*) FROM messages
                     WHERE queue_id = $1 AND visible_at > $2 AND receive_count > 0)),
             picked AS (
                 SELECT seq AS picked_seq, sent_at AS picked_sent_at, visible_at AS was_visible_at,
                        receive_count AS was_received
                 FROM messages
                 WHERE queue_id = $1 AND visible_at <= $2 AND seq <> ALL($6)
                   AND (group_id IS NULL OR group_id NOT IN (SELECT group_id FROM noisy))
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
                     WHERE picked_sent_at > $4 AND was_received >= $7) AS poisoned,
                    (SELECT COUNT(*) FROM noisy) AS noisy
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
        .bind(NOISY_MIN_IN_FLIGHT.cast_signed())
        .bind(NOISY_SHARE_DIVISOR.cast_signed())
        .fetch_all(pool)
        .await
        .map_err(postgres_error("message_receive: lease"))?;
        let mut expired = 0;
        for row in &rows {
            let decode = |error| postgres_error("message_receive: decode")(error);
            expired = row.try_get::<i64, _>("expired").map_err(decode)?;
            poisoned |= row.try_get::<i64, _>("poisoned").map_err(decode)? > 0;
            noisy |= row.try_get::<i64, _>("noisy").map_err(decode)? > 0;
            if row.try_get::<Option<i64>, _>(0).map_err(decode)?.is_some() {
                outcome.messages.push(message_from_row(row)?.message);
            }
        }
        outcome.expired += expired.unsigned_abs();
        if poisoned || noisy || expired == 0 || outcome.messages.len() >= wanted {
            break;
        }
    }
    if outcome.messages.is_empty() && !poisoned && !noisy {
        outcome.next_visible_at = sqlx::query_scalar(
            "SELECT MIN(visible_at) FROM messages WHERE queue_id = $1 AND visible_at > $2",
        )
        .bind(params.queue_id)
        .bind(params.now)
        .fetch_one(pool)
        .await
        .map_err(postgres_error("message_receive: next visible"))?;
    }
    Ok(AtOnce {
        outcome,
        poisoned,
        noisy,
    })
}

/// What [`receive_standard_at_once`] did.
pub(super) struct AtOnce {
    pub(super) outcome: ReceiveOutcome,
    /// It met messages due for the dead-letter queue and left them.
    pub(super) poisoned: bool,
    /// The queue has noisy tenants, whose messages it left.
    pub(super) noisy: bool,
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
                self.outcome.dead_lettered.push(message.failures.last_class);
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
        return fifo_receive(connection, pass).await;
    }
    receive_standard(connection, pass).await
}

/// The oldest visible messages no other receive holds: a row another node
/// is leasing right now is skipped, never waited for and never leased twice.
pub(super) async fn receive_standard(
    connection: &mut PgConnection,
    mut pass: ReceivePass<'_>,
) -> Result<ReceiveOutcome, StoreError> {
    let params = pass.params();
    let order = fair_order(connection, params).await?;
    // Rows met once (a zero lease leaves them visible) are not met again.
    let mut met: Vec<i64> = Vec::new();
    for fair_pass in order.passes() {
        if pass.leased() >= params.max_messages as usize
            || receive_in_order(connection, &mut pass, &mut met, fair_pass)
                .await?
                .is_break()
        {
            break;
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

/// The queue's tenants as fair queues judge them
/// (`ackbox_core::fair_queue`): a tenant's in-flight messages are its
/// received ones not yet visible again.
async fn fair_order(
    connection: &mut PgConnection,
    params: &MessageReceiveParams,
) -> Result<FairOrder<String>, StoreError> {
    let candidates: Vec<(String, i64)> = sqlx::query_as(
        "SELECT group_id, COUNT(*) FROM messages
         WHERE queue_id = $1 AND visible_at > $2 AND group_id IS NOT NULL AND receive_count > 0
         GROUP BY group_id HAVING COUNT(*) >= $3",
    )
    .bind(params.queue_id)
    .bind(params.now)
    .bind(NOISY_MIN_IN_FLIGHT.cast_signed())
    .fetch_all(&mut *connection)
    .await
    .map_err(postgres_error("message_receive: tenants in flight"))?;
    if candidates.is_empty() {
        return Ok(FairOrder::default());
    }
    let in_flight: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM messages
         WHERE queue_id = $1 AND visible_at > $2 AND receive_count > 0",
    )
    .bind(params.queue_id)
    .bind(params.now)
    .fetch_one(&mut *connection)
    .await
    .map_err(postgres_error("message_receive: in flight"))?;
    Ok(FairOrder::judge(
        candidates
            .into_iter()
            .map(|(tenant, count)| (tenant, count.unsigned_abs())),
        in_flight.unsigned_abs(),
    ))
}

/// Takes, in receive order, the visible rows no other receive holds of
/// the tenants `fair_pass` takes, until the receive has what it wants;
/// breaks when the receive has dropped all it may.
async fn receive_in_order(
    connection: &mut PgConnection,
    pass: &mut ReceivePass<'_>,
    met: &mut Vec<i64>,
    fair_pass: Pass<'_, String>,
) -> Result<ControlFlow<()>, StoreError> {
    let params = pass.params();
    let wanted = params.max_messages as usize;
    let (excluding, only): (&[String], Option<&String>) = match fair_pass {
        Pass::Quiet { excluding } => (excluding, None),
        Pass::Noisy(tenant) => (&[], Some(tenant)),
    };
    while pass.leased() < wanted {
        let rows = sqlx::query(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages
             WHERE queue_id = $1 AND visible_at <= $2 AND seq <> ALL($3)
               AND (group_id IS NULL OR group_id <> ALL($5))
               AND ($6::text IS NULL OR group_id = $6)
             ORDER BY visible_at, receive_count, seq
             LIMIT $4
             FOR UPDATE SKIP LOCKED"
        ))
        .bind(params.queue_id)
        .bind(params.now)
        .bind(&*met)
        .bind((wanted - pass.leased()) as i64)
        .bind(excluding)
        .bind(only)
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
                return Ok(ControlFlow::Break(()));
            }
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// One leased message of a recorded attempt: `[seq, receive_count, visible_at]`.
pub(super) type AttemptLease = (i64, i64, i64);

/// ReceiveMessage on a FIFO queue: whole runs from the heads of available
/// groups, oldest-available group first.
pub(super) async fn fifo_receive(
    connection: &mut PgConnection,
    mut pass: ReceivePass<'_>,
) -> Result<ReceiveOutcome, StoreError> {
    let params = pass.params();
    if let Some(attempt) = &params.attempt
        && let Some(messages) = replay(connection, params, attempt).await?
    {
        return Ok(ReceiveOutcome {
            messages,
            ..ReceiveOutcome::default()
        });
    }
    let wanted = params.max_messages as usize;
    let mut visited = HashSet::new();
    'receive: while pass.leased() < wanted && !pass.out_of_budget() {
        let limit = (visited.len() + wanted - pass.leased()) as i64;
        let groups: Vec<String> = sqlx::query_scalar(
            "SELECT group_id FROM fifo_groups WHERE queue_id = $1 AND available_at <= $2
             ORDER BY available_at, head_seq LIMIT $3",
        )
        .bind(params.queue_id)
        .bind(params.now)
        .bind(limit)
        .fetch_all(&mut *connection)
        .await
        .map_err(postgres_error("fifo receive: groups"))?;
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
                let rows = sqlx::query(concat!(
                    "SELECT ",
                    message_columns!(),
                    " FROM messages WHERE queue_id = $1 AND group_id = $2 AND seq > $3
                     ORDER BY seq LIMIT $4"
                ))
                .bind(params.queue_id)
                .bind(&group)
                .bind(cursor)
                .bind((wanted - pass.leased()) as i64)
                .fetch_all(&mut *connection)
                .await
                .map_err(postgres_error("fifo receive: run"))?;
                if rows.is_empty() {
                    break;
                }
                for row in &rows {
                    let row = message_from_row(row)?;
                    cursor = row.message.seq;
                    // Nothing may overtake a message not yet deliverable.
                    if row.visible_at > params.now {
                        break 'run;
                    }
                    if let Met::OutOfBudget = pass.meet(connection, row).await? {
                        pass.flush(connection).await?;
                        refresh_group(connection, params.queue_id, &group).await?;
                        break 'receive;
                    }
                }
            }
            pass.flush(connection).await?;
            refresh_group(connection, params.queue_id, &group).await?;
            visited.insert(group);
        }
    }
    let mut outcome = pass.finish(connection).await?;
    if let Some(attempt) = &params.attempt
        && !outcome.messages.is_empty()
    {
        record_attempt(connection, params, attempt, &outcome.messages).await?;
    }
    if outcome.messages.is_empty() {
        outcome.next_visible_at = sqlx::query_scalar(
            "SELECT MIN(available_at) FROM fifo_groups WHERE queue_id = $1 AND available_at > $2",
        )
        .bind(params.queue_id)
        .bind(params.now)
        .fetch_one(&mut *connection)
        .await
        .map_err(postgres_error("fifo receive: next available"))?;
    }
    Ok(outcome)
}

pub(super) async fn record_attempt(
    connection: &mut PgConnection,
    params: &MessageReceiveParams,
    attempt: &ReceiveAttempt,
    messages: &[StoredMessage],
) -> Result<(), StoreError> {
    let leases: Vec<AttemptLease> = messages
        .iter()
        .map(|message| (message.seq, message.receive_count, params.visible_at))
        .collect();
    sqlx::query(
        "INSERT INTO receive_attempts (queue_id, attempt_id, created_at, leases)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (queue_id, attempt_id)
         DO UPDATE SET created_at = excluded.created_at, leases = excluded.leases",
    )
    .bind(params.queue_id)
    .bind(&attempt.id)
    .bind(params.now)
    .bind(to_json(&leases))
    .execute(connection)
    .await
    .map(drop)
    .map_err(postgres_error("fifo receive: record attempt"))
}

/// A retried attempt gets the same messages under the same leases, if none
/// of them changed since; otherwise the retry is an ordinary receive.
pub(super) async fn replay(
    connection: &mut PgConnection,
    params: &MessageReceiveParams,
    attempt: &ReceiveAttempt,
) -> Result<Option<Vec<StoredMessage>>, StoreError> {
    let leases: Option<String> = sqlx::query_scalar(
        "SELECT leases FROM receive_attempts
         WHERE queue_id = $1 AND attempt_id = $2 AND created_at > $3",
    )
    .bind(params.queue_id)
    .bind(&attempt.id)
    .bind(attempt.valid_after)
    .fetch_optional(&mut *connection)
    .await
    .map_err(postgres_error("fifo replay: attempt"))?;
    let Some(leases) = leases else {
        return Ok(None);
    };
    let leases: Vec<AttemptLease> = from_json(&leases, "receive attempt leases")?;
    let mut messages = Vec::with_capacity(leases.len());
    for &(seq, receive_count, visible_at) in &leases {
        let found = sqlx::query(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages WHERE seq = $1 AND queue_id = $2"
        ))
        .bind(seq)
        .bind(params.queue_id)
        .fetch_optional(&mut *connection)
        .await
        .map_err(postgres_error("fifo replay: message"))?;
        match found.as_ref().map(message_from_row).transpose()? {
            Some(row)
                if row.visible_at == visible_at && row.message.receive_count == receive_count =>
            {
                messages.push(row.message);
            }
            _ => return Ok(None),
        }
    }
    let mut touched = TouchedGroups::default();
    for message in &messages {
        sqlx::query("UPDATE messages SET visible_at = $2 WHERE seq = $1")
            .bind(message.seq)
            .bind(params.visible_at)
            .execute(&mut *connection)
            .await
            .map_err(postgres_error("fifo replay: lease again"))?;
        touched.touch(params.queue_id, message.group_id.as_deref());
    }
    touched.refresh(connection).await?;
    record_attempt(connection, params, attempt, &messages).await?;
    Ok(Some(messages))
}
