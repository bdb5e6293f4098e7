//! Steps: numbered messages per FIFO message group. The handler locks its
//! group's head row and compares: a step committed while the previous one
//! is not is an order violation, recorded (and committed with the effect)
//! rather than failed, so a run counts every violation instead of
//! stopping at the first.

use std::collections::BTreeMap;

use ackbox_consumer::{Handler, HandlerError, Message, async_trait};
use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, Transaction};

use super::{Outgoing, Pace};
use crate::verdict::{Findings, examples};

#[derive(Debug, Serialize, Deserialize)]
struct Step {
    group: String,
    seq: i64,
}

/// `groups` message groups of `per_group` steps each, numbered from 1 and
/// sent in order within each group.
#[derive(Debug)]
pub(crate) struct Plan {
    groups: usize,
    per_group: usize,
    pub(super) messages: Vec<Outgoing>,
}

impl Plan {
    pub(crate) fn new(groups: usize, per_group: usize) -> Self {
        let mut messages = Vec::with_capacity(groups * per_group);
        // Round-robin over the groups: a sender keeps each group's order
        // whatever it interleaves.
        for seq in 1..=per_group {
            for group in 0..groups {
                let group = group_id(group);
                messages.push(Outgoing {
                    body: serde_json::to_string(&Step {
                        group: group.clone(),
                        seq: seq as i64,
                    })
                    .expect("a step serializes"),
                    deduplication_id: Some(format!("{group}-{seq}")),
                    group_id: Some(group),
                });
            }
        }
        Self {
            groups,
            per_group,
            messages,
        }
    }

    pub(super) fn distinct_effects(&self) -> u64 {
        (self.groups * self.per_group) as u64
    }

    /// The heads start at 0, so the handler always finds a row to lock.
    pub(super) async fn create_tables(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(
            "CREATE TABLE fifo_heads (
                 group_id TEXT   PRIMARY KEY,
                 last_seq BIGINT NOT NULL,
                 applied  BIGINT NOT NULL   -- effects: each step adds one
             );
             CREATE TABLE fifo_violations (
                 id       BIGSERIAL PRIMARY KEY,
                 group_id TEXT   NOT NULL,
                 seq      BIGINT NOT NULL,
                 last_seq BIGINT NOT NULL,  -- the head the step found
                 process  INT    NOT NULL
             )",
        )
        .execute(pool)
        .await?;
        for group in 0..self.groups {
            sqlx::query("INSERT INTO fifo_heads (group_id, last_seq, applied) VALUES ($1, 0, 0)")
                .bind(group_id(group))
                .execute(pool)
                .await?;
        }
        Ok(())
    }

    /// No violation, and every group's head at its last step with one
    /// effect per step: each group committed in send order, exactly once.
    pub(super) async fn verify(&self, pool: &PgPool) -> Result<Findings, sqlx::Error> {
        let violations: Vec<(String, i64, i64, i32)> = sqlx::query_as(
            "SELECT group_id, seq, last_seq, process FROM fifo_violations ORDER BY id",
        )
        .fetch_all(pool)
        .await?;
        let heads: BTreeMap<String, (i64, i64)> = sqlx::query_as::<_, (String, i64, i64)>(
            "SELECT group_id, last_seq, applied FROM fifo_heads",
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(group, last, applied)| (group, (last, applied)))
        .collect();
        let applied: i64 = heads.values().map(|(_, applied)| applied).sum();
        let groups_affected = violations
            .iter()
            .map(|(group, ..)| group)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let mut findings = Findings::default();
        findings.figure(format!(
            "steps.fifo: {} messages in {} groups -> {applied} effects, {} order violations in {groups_affected} groups",
            self.messages.len(),
            self.groups,
            violations.len()
        ));
        let described: Vec<String> = violations
            .iter()
            .map(|(group, seq, last, process)| {
                format!("{group}: step {seq} committed after step {last} (process {process})")
            })
            .collect();
        findings.check(violations.is_empty(), || {
            format!(
                "steps.fifo: {} steps committed out of their group's order: {}",
                violations.len(),
                examples(&described)
            )
        });
        let expected = self.per_group as i64;
        let wrong: Vec<String> = (0..self.groups)
            .map(group_id)
            .filter_map(|group| match heads.get(&group) {
                Some(&(last, applied)) if last == expected && applied == expected => None,
                Some(&(last, applied)) => Some(format!(
                    "{group}: head at {last}, {applied} effects (expected {expected} and {expected})"
                )),
                None => Some(format!("{group}: no head row")),
            })
            .collect();
        findings.check(wrong.is_empty(), || {
            format!(
                "steps.fifo: {} groups did not end at their last step with one effect per step: {}",
                wrong.len(),
                examples(&wrong)
            )
        });
        Ok(findings)
    }
}

fn group_id(index: usize) -> String {
    format!("group-{index:02}")
}

pub(super) fn effect_key(message: &Message) -> String {
    message.json::<Step>().map_or_else(
        |_| message.id.clone(),
        |step| format!("{}:{}", step.group, step.seq),
    )
}

/// Advances a group's head by one step.
pub(crate) struct Heads {
    pub(super) pace: Pace,
}

#[async_trait]
impl Handler<Postgres> for Heads {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, Postgres>,
    ) -> Result<(), HandlerError> {
        let step: Step = message.json()?;
        // The lock serializes the group's transactions, so `last_seq` is
        // what the previous committed step left: exactly the order of commits.
        let last: Option<i64> =
            sqlx::query_scalar("SELECT last_seq FROM fifo_heads WHERE group_id = $1 FOR UPDATE")
                .bind(&step.group)
                .fetch_optional(&mut **transaction)
                .await?;
        let Some(last) = last else {
            return Err(HandlerError::permanent(
                "UnknownGroup",
                format!("no head row for {}", step.group),
            ));
        };
        self.pace.work().await;
        if last != step.seq - 1 {
            sqlx::query(
                "INSERT INTO fifo_violations (group_id, seq, last_seq, process) VALUES ($1, $2, $3, $4)",
            )
            .bind(&step.group)
            .bind(step.seq)
            .bind(last)
            .bind(self.pace.process)
            .execute(&mut **transaction)
            .await?;
        }
        sqlx::query(
            "UPDATE fifo_heads SET last_seq = $2, applied = applied + 1 WHERE group_id = $1",
        )
        .bind(&step.group)
        .bind(step.seq)
        .execute(&mut **transaction)
        .await?;
        Ok(())
    }
}
