//! Group commit for standard queues' sends: the batches that concurrent
//! requests send — to any queues — are gathered into one `INSERT`, one
//! transaction and one WAL flush.
//!
//! PostgreSQL spends more on a statement and its commit than on the rows in
//! it: measured with pgbench on this project's `messages` table, 4 clients
//! inserting 10 rows per transaction stored 50–51k rows/s, 2 clients
//! inserting 40 stored 114k. So one task per node inserts: it takes every
//! send waiting when it becomes free (up to [`MAX_GROUP_ROWS`] rows),
//! inserts them in one statement and answers each send after the commit;
//! sends arriving meanwhile wait for the next group. An idle node's send
//! goes alone at once. Measured through the SQS API with 16 producers
//! (`ackbox bench -P 16`, one run, against a hand-written queue table on
//! the same database): one task sent 0.71× the table's rate at 10–13 µs of
//! server CPU per message, two tasks 0.63×, a task per send (no grouping)
//! 0.62× at 14–16 µs.
//!
//! A statement PostgreSQL rejects (nothing applied) is run again request by
//! request, so one request's bad row fails only that request; a lost
//! connection answers every request of the group as unavailable, since
//! whether the commit happened is unknown and running it again could store
//! the messages twice.

use std::collections::HashMap;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::database_error::postgres_error;
use crate::store::{InsertedMessage, MessageInsertParams, NewMessage, StoreError, to_json};

/// Rows one statement carries at most (a hundred SQS batches).
const MAX_GROUP_ROWS: usize = 1_000;
/// Sends waiting for the inserting task before a new one waits to be queued.
const WAITING_SENDS: usize = 4_096;

type Answer = Result<Vec<InsertedMessage>, StoreError>;

/// One request's batch, waiting for its group's commit.
struct Pending {
    params: MessageInsertParams,
    answer: oneshot::Sender<Answer>,
}

/// The sends of this node waiting to be grouped.
#[derive(Debug, Clone)]
pub(super) struct SendGroups {
    waiting: mpsc::Sender<Pending>,
}

impl SendGroups {
    /// Starts the inserting task, which inserts with `pool` until `stop`.
    pub(super) fn start(pool: PgPool, stop: CancellationToken) -> Self {
        let (waiting, receiver) = mpsc::channel(WAITING_SENDS);
        tokio::spawn(insert_groups(receiver, pool, stop));
        Self { waiting }
    }

    /// Stores a standard queue's batch, durably, with whatever other sends
    /// are waiting. `QueueNotFound` when the queue does not exist.
    pub(super) async fn insert(&self, params: MessageInsertParams) -> Answer {
        let (answer, answered) = oneshot::channel();
        self.waiting
            .send(Pending { params, answer })
            .await
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable {
        reason: "the PostgreSQL store is shutting down",
    }
}

async fn insert_groups(
    mut receiver: mpsc::Receiver<Pending>,
    pool: PgPool,
    stop: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            () = stop.cancelled() => return,
            first = receiver.recv() => match first {
                Some(first) => first,
                None => return,
            },
        };
        let mut rows = first.params.messages.len();
        let mut group = vec![first];
        while rows < MAX_GROUP_ROWS {
            let Ok(next) = receiver.try_recv() else { break };
            rows += next.params.messages.len();
            group.push(next);
        }
        commit(&pool, group).await;
    }
}

/// Inserts a group and answers each of its sends.
async fn commit(pool: &PgPool, group: Vec<Pending>) {
    metrics::histogram!("ackbox_postgres_sends_per_commit").record(group.len() as f64);
    let params: Vec<&MessageInsertParams> = group.iter().map(|pending| &pending.params).collect();
    match insert_group(pool, &params).await {
        Ok(answers) => {
            for (pending, answer) in group.into_iter().zip(answers) {
                // A sender that went away still had its messages stored.
                let _ = pending.answer.send(answer);
            }
        }
        Err(StoreError::Unavailable { reason }) => {
            for pending in group {
                let _ = pending.answer.send(Err(StoreError::Unavailable { reason }));
            }
        }
        Err(error) if group.len() == 1 => {
            let _ = group
                .into_iter()
                .next()
                .map(|pending| pending.answer.send(Err(error)));
        }
        Err(error) => {
            tracing::debug!(%error, sends = group.len(), "a grouped send was refused; sending each alone");
            for pending in group {
                let answer = insert_standard(pool, &pending.params).await;
                let _ = pending.answer.send(answer);
            }
        }
    }
}

/// A standard queue's batch alone, in one statement (alone, a whole
/// transaction) or in the caller's transaction. The caller announces the
/// arrival once it has committed.
pub(super) async fn insert_standard(
    executor: impl sqlx::PgExecutor<'_>,
    params: &MessageInsertParams,
) -> Answer {
    insert_group(executor, &[params])
        .await?
        .pop()
        .expect("one answer for one send")
}

/// One statement inserting every batch of `sends`, each only while its
/// queue exists; what each send got, in order.
///
/// Sequence numbers follow the rows' order (the insert follows `position`),
/// so within a queue the returned numbers, sorted, belong to that queue's
/// sends in order. The queues are read in one snapshot, so a queue's rows
/// are all stored or none are.
async fn insert_group(
    executor: impl sqlx::PgExecutor<'_>,
    sends: &[&MessageInsertParams],
) -> Result<Vec<Answer>, StoreError> {
    let messages = || {
        sends.iter().flat_map(|send| {
            send.messages
                .iter()
                .map(move |message| (send.queue_id, message))
        })
    };
    let text = |pick: fn(&NewMessage) -> Option<String>| -> Vec<Option<String>> {
        messages().map(|(_, message)| pick(message)).collect()
    };
    let stored: Vec<(i64, i64)> = sqlx::query_as(
        "INSERT INTO messages (queue_id, message_id, body, attributes, md5_of_body,
             md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at)
         SELECT queue_id, message_id, body, attributes, md5_of_body, md5_of_attributes,
             trace_header, group_id, sender_id, sent_at, visible_at
         FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::bigint[], $11::bigint[])
             WITH ORDINALITY AS batch(queue_id, message_id, body, attributes, md5_of_body,
                 md5_of_attributes, trace_header, group_id, sender_id, sent_at, visible_at,
                 position)
         WHERE EXISTS (SELECT 1 FROM queues WHERE queues.id = batch.queue_id)
         ORDER BY position
         RETURNING queue_id, seq",
    )
    .bind(messages().map(|(queue_id, _)| queue_id).collect::<Vec<_>>())
    .bind(text(|message| Some(message.message_id.clone())))
    .bind(text(|message| Some(message.body.clone())))
    .bind(text(|message| {
        (!message.attributes.is_empty()).then(|| to_json(&message.attributes))
    }))
    .bind(text(|message| Some(message.md5_of_body.clone())))
    .bind(text(|message| message.md5_of_attributes.clone()))
    .bind(text(|message| message.trace_header.clone()))
    .bind(text(|message| message.group_id.clone()))
    .bind(text(|message| Some(message.sender_id.clone())))
    .bind(
        messages()
            .map(|(_, message)| message.sent_at)
            .collect::<Vec<_>>(),
    )
    .bind(
        messages()
            .map(|(_, message)| message.visible_at)
            .collect::<Vec<_>>(),
    )
    .fetch_all(executor)
    .await
    .map_err(postgres_error("message_insert_batch: insert"))?;
    let mut by_queue: HashMap<i64, Vec<i64>> = HashMap::new();
    for (queue_id, seq) in stored {
        by_queue.entry(queue_id).or_default().push(seq);
    }
    let mut by_queue: HashMap<i64, std::vec::IntoIter<i64>> = by_queue
        .into_iter()
        .map(|(queue_id, mut seqs)| {
            seqs.sort_unstable();
            (queue_id, seqs.into_iter())
        })
        .collect();
    Ok(sends
        .iter()
        .map(|send| {
            let Some(seqs) = by_queue.get_mut(&send.queue_id) else {
                return Err(StoreError::QueueNotFound {
                    queue_id: send.queue_id,
                });
            };
            send.messages
                .iter()
                .map(|message| {
                    seqs.next()
                        .map(|seq| InsertedMessage {
                            seq,
                            message_id: message.message_id.clone(),
                            duplicate: false,
                        })
                        .ok_or(StoreError::Corrupt {
                            detail: format!(
                                "queue {} got fewer sequence numbers than it sent messages",
                                send.queue_id
                            ),
                        })
                })
                .collect()
        })
        .collect())
}
