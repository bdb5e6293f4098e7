//! ReceiveMessage: each visible message met is expired, dead-lettered or
//! leased by the receive policy (`ackbox_core::receive_policy`); on FIFO
//! queues whole runs from the heads of available groups, and receive
//! attempts replayed. On standard queues, quiet tenants first
//! (`ackbox_core::fair_queue`).

use std::collections::HashSet;
use std::ops::ControlFlow;

use ackbox_core::fair_queue::{FairOrder, NOISY_MIN_IN_FLIGHT, Pass};
use ackbox_core::receive_policy::{Fate, ReceivePolicy};
use rusqlite::{Connection, OptionalExtension, params};

use super::database_error::database_error;
use super::fifo::{self, TouchedGroups, refresh_group};
use super::relocate::move_to_dead_letter_queue;
use super::rows::{MESSAGE_COLUMNS, MessageRow, decode_attributes, message_row, queue_exists};
use crate::store::{
    DeadLetterTarget, MessageReceiveParams, ReceiveAttempt, ReceiveOutcome, StoreError,
    StoredMessage, from_json, to_json,
};

/// What a receive did with a message it met.
pub(crate) enum Met {
    /// Leased it.
    Leased,
    /// Dropped it (expired) or moved it to the dead-letter queue.
    Dropped,
    /// Left it: this receive has dropped as many as one may.
    OutOfBudget,
}

/// One receive's progress: what it leased, and the expired or dead-lettered
/// messages it dropped on the way.
pub(crate) struct ReceivePass<'a> {
    params: &'a MessageReceiveParams,
    policy: ReceivePolicy<'a, DeadLetterTarget>,
    outcome: ReceiveOutcome,
}

impl<'a> ReceivePass<'a> {
    pub(crate) fn start(
        connection: &Connection,
        params: &'a MessageReceiveParams,
    ) -> Result<Self, StoreError> {
        let dead_letter = match &params.dead_letter {
            Some(target) if queue_exists(connection, target.queue_id)? => {
                Some((target, target.max_receive_count))
            }
            _ => None,
        };
        Ok(Self {
            params,
            policy: ReceivePolicy::new(Some(params.expired_at_or_before), dead_letter),
            outcome: ReceiveOutcome::default(),
        })
    }

    pub(crate) fn leased(&self) -> usize {
        self.outcome.messages.len()
    }

    pub(crate) fn out_of_budget(&self) -> bool {
        self.policy.out_of_budget()
    }

    /// Expires, dead-letters or leases one visible message.
    pub(crate) fn meet(
        &mut self,
        connection: &Connection,
        row: MessageRow,
    ) -> Result<Met, StoreError> {
        let params = self.params;
        let seq = row.message.seq;
        match self
            .policy
            .fate(row.message.sent_at, row.message.receive_count)
        {
            Fate::OutOfBudget => return Ok(Met::OutOfBudget),
            Fate::Expire => {
                connection
                    .prepare_cached("DELETE FROM messages WHERE seq = ?1")
                    .and_then(|mut expire| expire.execute([seq]))
                    .map_err(database_error("message_receive: expire"))?;
                self.outcome.expired += 1;
                return Ok(Met::Dropped);
            }
            Fate::DeadLetter(target) => {
                move_to_dead_letter_queue(connection, seq, target, params.now)?;
                self.outcome
                    .dead_lettered
                    .push(row.message.failures.last_class);
                return Ok(Met::Dropped);
            }
            Fate::Lease => {}
        }
        connection
            .prepare_cached(
                "UPDATE messages
                 SET visible_at = ?2, receive_count = receive_count + 1,
                     first_received_at = COALESCE(first_received_at, ?3), last_received_at = ?3
                 WHERE seq = ?1",
            )
            .and_then(|mut lease| lease.execute(params![seq, params.visible_at, params.now]))
            .map_err(database_error("message_receive: lease"))?;
        let mut message = decode_attributes(row)?;
        message.receive_count += 1;
        message.first_received_at.get_or_insert(params.now);
        message.last_received_at = Some(params.now);
        self.outcome.messages.push(message);
        Ok(Met::Leased)
    }

    pub(crate) fn finish(self) -> ReceiveOutcome {
        self.outcome
    }
}

pub(crate) fn message_receive(
    connection: &Connection,
    params: &MessageReceiveParams,
) -> Result<ReceiveOutcome, StoreError> {
    let mut pass = ReceivePass::start(connection, params)?;
    if fifo::queue_kind(connection, params.queue_id)? == Some(true) {
        return fifo_receive(connection, params, pass);
    }
    let order = fair_order(connection, params)?;
    // A lease of zero seconds leaves a message visible, so a later round
    // could meet it again: `met` keeps one receive from returning a message
    // twice.
    let mut met = HashSet::new();
    for fair_pass in order.passes() {
        if pass.leased() >= params.max_messages as usize
            || receive_in_order(connection, &mut pass, &mut met, fair_pass)?.is_break()
        {
            break;
        }
    }
    let mut outcome = pass.finish();
    if outcome.messages.is_empty() {
        outcome.next_visible_at = connection
            .prepare_cached(
                "SELECT MIN(visible_at) FROM messages WHERE queue_id = ?1 AND visible_at > ?2",
            )
            .and_then(|mut next| {
                next.query_row(params![params.queue_id, params.now], |row| row.get(0))
            })
            .map_err(database_error("message_receive: next visible"))?;
    }
    Ok(outcome)
}

/// The queue's tenants as fair queues judge them
/// (`ackbox_core::fair_queue`): a tenant's in-flight messages are its
/// received ones not yet visible again.
fn fair_order(
    connection: &Connection,
    params: &MessageReceiveParams,
) -> Result<FairOrder<String>, StoreError> {
    let candidates = connection
        .prepare_cached(
            "SELECT group_id, COUNT(*) FROM messages INDEXED BY messages_in_flight_by_group
             WHERE queue_id = ?1 AND visible_at > ?2 AND group_id IS NOT NULL
               AND receive_count > 0
             GROUP BY group_id HAVING COUNT(*) >= ?3",
        )
        .and_then(|mut count| {
            count
                .query_map(
                    params![
                        params.queue_id,
                        params.now,
                        NOISY_MIN_IN_FLIGHT.cast_signed()
                    ],
                    |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, i64>(1)?.unsigned_abs(),
                        ))
                    },
                )?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(database_error("message_receive: tenants in flight"))?;
    if candidates.is_empty() {
        return Ok(FairOrder::default());
    }
    let in_flight: i64 = connection
        .prepare_cached(
            "SELECT COUNT(*) FROM messages
             WHERE queue_id = ?1 AND visible_at > ?2 AND receive_count > 0",
        )
        .and_then(|mut count| {
            count.query_row(params![params.queue_id, params.now], |row| row.get(0))
        })
        .map_err(database_error("message_receive: in flight"))?;
    Ok(FairOrder::judge(candidates, in_flight.unsigned_abs()))
}

/// Leases, in receive order, the visible messages of the tenants
/// `fair_pass` takes until the receive has what it wants; breaks when the
/// receive has dropped all it may.
fn receive_in_order(
    connection: &Connection,
    pass: &mut ReceivePass<'_>,
    met: &mut HashSet<i64>,
    fair_pass: Pass<'_, String>,
) -> Result<ControlFlow<()>, StoreError> {
    let params = pass.params;
    let wanted = params.max_messages as usize;
    let (tenant_filter, sql) = match fair_pass {
        Pass::Quiet { excluding: [] } => (None, ""),
        Pass::Quiet { excluding } => (
            Some(to_json(&excluding)),
            "AND (group_id IS NULL OR group_id NOT IN (SELECT value FROM json_each(?4)))",
        ),
        Pass::Noisy(tenant) => (Some(tenant.clone()), "AND group_id = ?4"),
    };
    let mut select = connection
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS}
             FROM messages
             WHERE queue_id = ?1 AND visible_at <= ?2 {sql}
             ORDER BY visible_at, receive_count, seq
             LIMIT ?3"
        ))
        .map_err(database_error("message_receive: prepare select"))?;
    // Expired messages are dropped as they are met, which is why a queue
    // full of them needs several rounds to fill a receive.
    while pass.leased() < wanted {
        // Rows leased with a zero lease can come back in this select, so the
        // limit leaves room for them next to the messages still wanted;
        // expired rows are deleted as they are met and cannot come back.
        let query = match &tenant_filter {
            Some(filter) => select.query_map(
                params![params.queue_id, params.now, wanted as i64, filter],
                message_row,
            ),
            None => select.query_map(
                params![params.queue_id, params.now, wanted as i64],
                message_row,
            ),
        };
        let rows = query
            .map_err(database_error("message_receive: select"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(database_error("message_receive: read row"))?;
        let mut progressed = false;
        for row in rows {
            if pass.leased() >= wanted || !met.insert(row.seq()) {
                continue;
            }
            progressed = true;
            if let Met::OutOfBudget = pass.meet(connection, row)? {
                return Ok(ControlFlow::Break(()));
            }
        }
        if !progressed {
            break;
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// One leased message of a recorded attempt: `[seq, receive_count, visible_at]`.
pub(super) type AttemptLease = (i64, i64, i64);

/// ReceiveMessage on a FIFO queue: whole runs from the heads of available
/// groups, oldest-available group first.
pub(super) fn fifo_receive(
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

pub(super) fn record_attempt(
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
pub(super) fn replay(
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
