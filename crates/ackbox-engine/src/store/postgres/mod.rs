//! The shared store: PostgreSQL, for several `ackbox serve` nodes over one
//! database.
//!
//! Every operation is one transaction on a pooled connection, so PostgreSQL
//! (not a writer thread) serializes what must be serialized:
//!
//! - a standard receive leases rows with `FOR UPDATE SKIP LOCKED`, so two
//!   nodes never lease the same message and never wait for each other;
//! - deletes, visibility changes and nacks lock the one row they change and
//!   re-check its lease after any wait;
//! - every mutation of a FIFO queue holds a transaction-scoped advisory lock
//!   on that queue, so its groups change one transaction at a time, as the
//!   embedded store's single writer guarantees;
//! - a standard queue's send locks nothing but the rows it inserts, and
//!   shares its statement and commit with the other sends waiting on this
//!   node (`send_group.rs`): one that races a DeleteQueue may land after
//!   it, and the sweep of what deleted queues left
//!   (`message_sweep_left_behind`) drops it with the rest of that queue's
//!   messages. A row lock on the queue would be written to the WAL by every
//!   send and, with several sends at once, turned into a multixact.
//!
//! Sends, queue changes and move tasks commit with `synchronous_commit`
//! on: PostgreSQL has flushed them to disk before the client hears of them.
//! Leases, deletes, visibility changes and nacks commit on a second pool
//! whose sessions turn it off, as the embedded store commits them without
//! an fsync of their own: losing the last of them in a database crash only
//! delivers a message again, which at-least-once delivery allows, and the
//! next durable commit flushes them all (the WAL is one sequence).
//!
//! With a synchronous replica (`synchronous_standby_names`), a durable
//! commit is on two servers before the client hears of it. The store URL may
//! list the replicas after the primary; when the primary fails and one is
//! promoted, the store moves its connections there (`primary.rs`), and
//! requests fail as unavailable until it has.
//!
//! PostgreSQL may abort a transaction that conflicts with another (a
//! deadlock); the store runs it again. `LISTEN`/`NOTIFY` tells every node
//! when messages arrive and when queues change ([`Store::events`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackbox_core::clock::Timestamp;
use ackbox_core::receipt::{ReceiptKey, SECRET_LEN};
use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::store::{
    ChangeVisibilityOutcome, DeleteOutcome, FailureClassCount, InsertedMessage,
    MessageChangeVisibilityParams, MessageDeleteParams, MessageExpireParams, MessageInsertParams,
    MessageNackParams, MessagePeekParams, MessageReceiveParams, MoveTaskCreateOutcome,
    MoveTaskCreateParams, MoveTaskFilter, MoveTaskRecord, MoveTaskStepOutcome, MoveTaskStepParams,
    NackOutcome, QueueCreateOutcome, QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome,
    QueuePurgeParams, QueueRecord, QueueStats, QueueStatsParams, QueueUpdateParams, ReceiveOutcome,
    Store, StoreError, StoreEvent, StoredMessage, TopicRecord,
};

mod announce;
mod database_error;
mod fifo;
mod message;
mod migrate;
mod move_task;
mod notify;
mod primary;
mod queue;
mod receive;
mod relocate;
mod rows;
mod send_group;
mod sweep;
mod topic;
mod vacuum;

use announce::Announcer;
use database_error::postgres_error;
use primary::{Hosts, LastMove, Watched};
use receive::AtOnce;
use send_group::SendGroups;

/// The channel that carries "messages may be receivable in queue N".
const MESSAGES_CHANNEL: &str = "ackbox_messages";
/// The channel that carries "queue NAME was created, changed or deleted".
const QUEUES_CHANNEL: &str = "ackbox_queues";
/// The `NOTIFY` channel naming a topic definition that was written or
/// deleted.
const TOPICS_CHANNEL: &str = "ackbox_topics";
/// Events a slow follower may fall behind by before it is told to resync.
const EVENT_BACKLOG: usize = 4_096;
/// How often a conflicting transaction is run again before the caller hears of it.
const MAX_CONFLICT_RETRIES: u32 = 8;

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// `postgres://user@host:port/database` (any libpq-style URL sqlx
    /// accepts), or with several `host:port`s separated by commas: a primary
    /// and the replicas that may be promoted in its place. The store uses the
    /// one that takes writes and follows a failover.
    pub url: String,
    /// Most connections this node opens (at least 3): one listens for the
    /// other nodes' changes, half of the rest commit leases and deletes.
    pub max_connections: u32,
    /// Keep ackbox's tables in this schema (created if missing) instead of
    /// the connection's default search path.
    pub schema: Option<String>,
}

impl PostgresOptions {
    /// Options for `url` with the default pool size and search path.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 32,
            schema: None,
        }
    }
}

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    /// Commits that must be on disk before they are acknowledged.
    pool: PgPool,
    /// Commits that may be lost in a crash at the cost of a redelivery:
    /// leases, deletes, visibility changes, nacks.
    lease_pool: PgPool,
    /// Gathers concurrent sends to standard queues into shared commits.
    sends: SendGroups,
    /// Tells the other nodes which queues received messages.
    announcer: Arc<Announcer>,
    /// Identifies this node as a move task's lease holder.
    node: String,
    events: broadcast::Sender<StoreEvent>,
    stop: CancellationToken,
    /// Which queues are FIFO: a queue's type never changes and its id is
    /// never reused, so the answer may be kept.
    fifo_queues: Arc<Mutex<HashMap<i64, bool>>>,
}

impl PostgresStore {
    /// Connects, migrates the schema (one node at a time) and starts
    /// listening for other nodes' changes.
    pub async fn connect(options: &PostgresOptions) -> Result<Self, StoreError> {
        if let Some(schema) = &options.schema
            && !is_plain_identifier(schema)
        {
            return Err(StoreError::Corrupt {
                detail: format!(
                    "schema {schema:?} must be letters, digits and underscores, not starting with a digit"
                ),
            });
        }
        let hosts = Hosts::parse(&options.url)?;
        let primary = hosts.find_writable().await?;
        let last_move = LastMove::new();
        // One durable connection is the listener's for good; the rest are
        // shared out evenly.
        let connections = options.max_connections.max(3);
        let lease_connections = (connections - 1) / 2;
        let pool = pool_options(options, connections - lease_connections, &last_move)
            .connect_with(primary.clone())
            .await
            .map_err(postgres_error("connect"))?;
        let lease_pool = pool_options(options, lease_connections, &last_move)
            .connect_with(lease_session(primary.clone()))
            .await
            .map_err(postgres_error("connect"))?;
        let stop = CancellationToken::new();
        if hosts.several() {
            let pools = vec![
                Watched {
                    pool: pool.clone(),
                    configure: std::convert::identity,
                },
                Watched {
                    pool: lease_pool.clone(),
                    configure: lease_session,
                },
            ];
            tokio::spawn(primary::watch(
                hosts,
                primary,
                pools,
                last_move,
                stop.clone(),
            ));
        }
        if let Some(schema) = &options.schema {
            let created = sqlx::query(sqlx::AssertSqlSafe(format!(
                "CREATE SCHEMA IF NOT EXISTS {schema}"
            )))
            .execute(&pool)
            .await;
            match created {
                // Another node starting at the same instant created it.
                Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("23505") => {}
                other => other.map(drop).map_err(postgres_error("create schema"))?,
            }
        }
        migrate::migrate(&pool).await?;
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let mut listener = PgListener::connect_with(&pool)
            .await
            .map_err(postgres_error("listen: connect"))?;
        listener
            .listen_all([MESSAGES_CHANNEL, QUEUES_CHANNEL, TOPICS_CHANNEL])
            .await
            .map_err(postgres_error("listen"))?;
        tokio::spawn(follow(listener, events.clone(), stop.clone()));
        tokio::spawn(vacuum::keep_vacuumed(pool.clone(), stop.clone()));
        let announcer = Arc::new(Announcer::default());
        tokio::spawn({
            let (announcer, pool, stop) = (announcer.clone(), lease_pool.clone(), stop.clone());
            async move { announcer.run(pool, stop).await }
        });
        Ok(Self {
            sends: SendGroups::start(pool.clone(), stop.clone()),
            pool,
            lease_pool,
            announcer,
            node: uuid::Uuid::new_v4().to_string(),
            events,
            stop,
            fifo_queues: Arc::default(),
        })
    }

    /// The installation's receipt-handle key, created by the first node
    /// that asks and shared by all of them.
    pub async fn receipt_key(&self) -> Result<ReceiptKey, StoreError> {
        sqlx::query(
            "INSERT INTO installation (id, receipt_secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
        )
        .bind(ReceiptKey::generate_secret().to_vec())
        .execute(&self.pool)
        .await
        .map_err(postgres_error("receipt key: create"))?;
        let secret: Vec<u8> =
            sqlx::query_scalar("SELECT receipt_secret FROM installation WHERE id = 1")
                .fetch_one(&self.pool)
                .await
                .map_err(postgres_error("receipt key: read"))?;
        let secret: [u8; SECRET_LEN] =
            secret
                .as_slice()
                .try_into()
                .map_err(|_| StoreError::Corrupt {
                    detail: format!(
                        "the installation's receipt secret must hold exactly {SECRET_LEN} bytes; it holds {}",
                        secret.len()
                    ),
                })?;
        Ok(ReceiptKey::new(secret))
    }

    /// Whether the queue exists and is a standard queue.
    async fn is_standard(&self, queue_id: i64) -> Result<bool, StoreError> {
        let known = self
            .fifo_queues
            .lock()
            .expect("queue kind cache poisoned")
            .get(&queue_id)
            .copied();
        let fifo = match known {
            Some(fifo) => fifo,
            None => {
                let Some(fifo) = sqlx::query_scalar("SELECT fifo FROM queues WHERE id = $1")
                    .bind(queue_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(postgres_error("queue kind"))?
                else {
                    return Ok(false);
                };
                self.fifo_queues
                    .lock()
                    .expect("queue kind cache poisoned")
                    .insert(queue_id, fifo);
                fifo
            }
        };
        Ok(!fifo)
    }
}

/// The lease pool's sessions: commits that may be lost in a crash.
fn lease_session(options: PgConnectOptions) -> PgConnectOptions {
    options.options([("synchronous_commit", "off")])
}

/// A pool of `connections` whose sessions use the configured schema (a
/// plain identifier, checked by [`PostgresStore::connect`]) and lead to the
/// current primary.
fn pool_options(
    options: &PostgresOptions,
    connections: u32,
    last_move: &LastMove,
) -> PgPoolOptions {
    let last_move = last_move.clone();
    let pool_options = PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(10))
        .before_acquire(move |_, connection| {
            let current = last_move.is_current(connection.age);
            Box::pin(async move { Ok(current) })
        });
    let Some(schema) = &options.schema else {
        return pool_options;
    };
    let statement = format!("SET search_path TO {schema}");
    pool_options.after_connect(move |connection, _| {
        let statement = statement.clone();
        Box::pin(async move {
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(connection)
                .await
                .map(drop)
        })
    })
}

fn is_plain_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63
}

/// Whether PostgreSQL aborted the transaction for a conflict with another
/// one (deadlock, serialization failure, a unique key taken meanwhile), so
/// running it again may succeed.
fn is_conflict(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Postgres { source: sqlx::Error::Database(database), .. }
            if matches!(database.code().as_deref(), Some("40001" | "40P01" | "23505"))
    )
}

/// Runs `$body` (an expression using `$connection: &mut PgConnection`) in a
/// transaction on `$pool`, commits it, and runs it again when PostgreSQL
/// aborted it for a conflict. A failed attempt is rolled back before
/// anything else.
macro_rules! in_transaction {
    ($pool:expr, $operation:literal, |$connection:ident| $body:expr) => {{
        let mut conflicts = 0u32;
        loop {
            let mut transaction = $pool
                .begin()
                .await
                .map_err(postgres_error("begin transaction"))?;
            let outcome = {
                let $connection: &mut sqlx::PgConnection = &mut transaction;
                $body.await
            };
            let outcome = match outcome {
                Ok(value) => transaction
                    .commit()
                    .await
                    .map(|()| value)
                    .map_err(postgres_error(concat!($operation, ": commit"))),
                Err(error) => {
                    // Explicitly: a dropped transaction only queues its
                    // rollback, and its locks would outlive this call.
                    let _ = transaction.rollback().await;
                    Err(error)
                }
            };
            match outcome {
                Err(error) if is_conflict(&error) && conflicts < MAX_CONFLICT_RETRIES => {
                    conflicts += 1;
                    tracing::debug!(
                        operation = $operation,
                        conflicts,
                        "transaction conflicted; running it again"
                    );
                    tokio::time::sleep(Duration::from_millis(u64::from(conflicts) * 2)).await;
                }
                other => break other,
            }
        }
    }};
}

/// Forwards notifications to the node's followers until the store closes.
async fn follow(
    mut listener: PgListener,
    events: broadcast::Sender<StoreEvent>,
    stop: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return,
            next = listener.try_recv() => next,
        };
        let event = match next {
            Ok(Some(notification)) => match notification.channel() {
                MESSAGES_CHANNEL => match notification.payload().parse() {
                    Ok(queue_id) => StoreEvent::MessagesAvailable { queue_id },
                    Err(_) => continue,
                },
                QUEUES_CHANNEL => StoreEvent::QueueChanged {
                    name: notification.payload().to_owned(),
                },
                TOPICS_CHANNEL => StoreEvent::TopicChanged {
                    key: notification.payload().to_owned(),
                },
                _ => continue,
            },
            // The connection dropped and was made again: whatever was
            // said meanwhile is lost.
            Ok(None) => StoreEvent::Missed,
            Err(_) if stop.is_cancelled() => return,
            Err(error) => {
                tracing::warn!(%error, "lost the PostgreSQL notification connection; reconnecting");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                StoreEvent::Missed
            }
        };
        // No follower yet is fine: nobody has anything to refresh.
        let _ = events.send(event);
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn queue_create(
        &self,
        params: QueueCreateParams,
    ) -> Result<QueueCreateOutcome, StoreError> {
        in_transaction!(self.pool, "queue_create", |connection| {
            queue::queue_create(connection, &params)
        })
    }

    async fn queue_list(&self) -> Result<Vec<QueueRecord>, StoreError> {
        queue::queue_list(&self.pool).await
    }

    async fn queue_get(&self, name: &str) -> Result<Option<QueueRecord>, StoreError> {
        queue::queue_get(&self.pool, name).await
    }

    async fn queue_update(&self, params: QueueUpdateParams) -> Result<(), StoreError> {
        in_transaction!(self.pool, "queue_update", |connection| {
            queue::queue_update(connection, &params)
        })
    }

    async fn queue_delete(&self, params: QueueDeleteParams) -> Result<bool, StoreError> {
        in_transaction!(self.pool, "queue_delete", |connection| {
            queue::queue_delete(connection, &params)
        })
    }

    async fn queue_purge(&self, params: QueuePurgeParams) -> Result<QueuePurgeOutcome, StoreError> {
        in_transaction!(self.pool, "queue_purge", |connection| {
            queue::queue_purge(connection, &params)
        })
    }

    async fn queue_stats(&self, params: QueueStatsParams) -> Result<QueueStats, StoreError> {
        queue::queue_stats(&self.pool, params).await
    }

    async fn message_insert_batch(
        &self,
        params: MessageInsertParams,
    ) -> Result<Vec<InsertedMessage>, StoreError> {
        let queue_id = params.queue_id;
        // The common case: one statement, shared with other sends.
        let inserted = if self.is_standard(queue_id).await? {
            self.sends.insert(params).await?
        } else {
            in_transaction!(self.pool, "message_insert_batch", |connection| {
                message::message_insert_batch(connection, &params)
            })?
        };
        if inserted.iter().any(|message| !message.duplicate) {
            self.announcer.announce(queue_id);
        }
        Ok(inserted)
    }

    async fn message_insert_atomic(
        &self,
        batches: Vec<MessageInsertParams>,
    ) -> Result<Vec<Vec<InsertedMessage>>, StoreError> {
        let inserted = in_transaction!(self.pool, "message_insert_atomic", |connection| {
            async {
                let mut inserted = Vec::with_capacity(batches.len());
                for params in &batches {
                    inserted.push(message::message_insert_batch(&mut *connection, params).await?);
                }
                Ok::<_, StoreError>(inserted)
            }
        })?;
        for (params, messages) in batches.iter().zip(&inserted) {
            if messages.iter().any(|message| !message.duplicate) {
                self.announcer.announce(params.queue_id);
            }
        }
        Ok(inserted)
    }

    async fn message_receive(
        &self,
        params: MessageReceiveParams,
    ) -> Result<ReceiveOutcome, StoreError> {
        // With a zero lease, the messages the first statement leased would
        // still be visible to the full pass that follows it (for poisoned
        // messages or noisy tenants), and could be received twice.
        let at_once = params.attempt.is_none()
            && params.visible_at > params.now
            && self.is_standard(params.queue_id).await?;
        if !at_once {
            return in_transaction!(self.lease_pool, "message_receive", |connection| {
                receive::message_receive(connection, &params)
            });
        }
        let AtOnce {
            mut outcome,
            poisoned,
            noisy,
        } = receive::receive_standard_at_once(&self.lease_pool, &params).await?;
        let leased = outcome.messages.len() as u32;
        if !(poisoned || noisy) || leased >= params.max_messages {
            return Ok(outcome);
        }
        // Rare: a message received too often, or no quiet tenant's message
        // left. The full pass moves the first to the dead-letter queue, takes
        // noisy tenants' messages in their turn, and leases what is missing.
        let rest = MessageReceiveParams {
            max_messages: params.max_messages - leased,
            ..params
        };
        let more = in_transaction!(self.lease_pool, "message_receive", |connection| {
            receive::message_receive(connection, &rest)
        })?;
        if outcome.messages.is_empty() {
            outcome.next_visible_at = more.next_visible_at;
        }
        outcome.messages.extend(more.messages);
        outcome.expired += more.expired;
        outcome.dead_lettered.extend(more.dead_lettered);
        Ok(outcome)
    }

    async fn message_delete_batch(
        &self,
        params: MessageDeleteParams,
    ) -> Result<Vec<DeleteOutcome>, StoreError> {
        if self.is_standard(params.queue_id).await? {
            return message::delete_standard(&self.lease_pool, &params).await;
        }
        in_transaction!(self.lease_pool, "message_delete_batch", |connection| {
            message::message_delete_batch(connection, &params)
        })
    }

    async fn message_change_visibility_batch(
        &self,
        params: MessageChangeVisibilityParams,
    ) -> Result<Vec<ChangeVisibilityOutcome>, StoreError> {
        in_transaction!(
            self.lease_pool,
            "message_change_visibility_batch",
            |connection| { message::message_change_visibility_batch(connection, &params) }
        )
    }

    async fn message_nack(&self, params: MessageNackParams) -> Result<NackOutcome, StoreError> {
        in_transaction!(self.lease_pool, "message_nack", |connection| {
            message::message_nack(connection, &params)
        })
    }

    async fn message_failure_classes(
        &self,
        queue_id: i64,
        sent_before: Option<Timestamp>,
    ) -> Result<Vec<FailureClassCount>, StoreError> {
        message::message_failure_classes(&self.pool, queue_id, sent_before).await
    }

    async fn message_peek(
        &self,
        params: MessagePeekParams,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        message::message_peek(&self.pool, params).await
    }

    async fn move_task_create(
        &self,
        params: MoveTaskCreateParams,
    ) -> Result<MoveTaskCreateOutcome, StoreError> {
        in_transaction!(self.pool, "move_task_create", |connection| {
            move_task::move_task_create(connection, &params)
        })
    }

    async fn move_task_step(
        &self,
        params: MoveTaskStepParams,
    ) -> Result<MoveTaskStepOutcome, StoreError> {
        let outcome = in_transaction!(self.pool, "move_task_step", |connection| {
            move_task::move_task_step(connection, &params, &self.node)
        })?;
        // After the commit, as for sends: a step commits with an fsync, and a
        // `NOTIFY` inside it would hold every other node's sends behind it.
        for &destination in &outcome.destinations {
            self.announcer.announce(destination);
        }
        Ok(outcome)
    }

    async fn move_task_resume(&self, handle: &str) -> Result<Option<MoveTaskRecord>, StoreError> {
        in_transaction!(self.pool, "move_task_resume", |connection| {
            move_task::move_task_resume(connection, handle)
        })
    }

    async fn move_task_cancel(
        &self,
        handle: &str,
        now: Timestamp,
    ) -> Result<Option<MoveTaskRecord>, StoreError> {
        in_transaction!(self.pool, "move_task_cancel", |connection| {
            move_task::move_task_cancel(connection, handle, now)
        })
    }

    async fn move_task_list(
        &self,
        filter: MoveTaskFilter,
        limit: u32,
    ) -> Result<Vec<MoveTaskRecord>, StoreError> {
        move_task::move_task_list(&self.pool, filter, limit).await
    }

    async fn message_expire(&self, params: MessageExpireParams) -> Result<u64, StoreError> {
        in_transaction!(self.pool, "message_expire", |connection| {
            sweep::message_expire(connection, &params)
        })
    }

    async fn fifo_window_expire(&self, before: Timestamp) -> Result<u64, StoreError> {
        in_transaction!(self.pool, "fifo_window_expire", |connection| {
            fifo::window_expire(connection, before)
        })
    }

    async fn message_sweep_left_behind(&self, limit: u32) -> Result<u64, StoreError> {
        in_transaction!(self.pool, "message_sweep_left_behind", |connection| {
            sweep::message_sweep_left_behind(connection, limit)
        })
    }

    async fn topic_list(&self) -> Result<Vec<TopicRecord>, StoreError> {
        topic::topic_list(&self.pool).await
    }

    async fn topic_get(&self, name: &str) -> Result<Option<TopicRecord>, StoreError> {
        topic::topic_get(&self.pool, name).await
    }

    async fn topic_write(
        &self,
        name: &str,
        definition: String,
        revision: Option<i64>,
    ) -> Result<bool, StoreError> {
        topic::topic_write(&self.pool, name, &definition, revision).await
    }

    async fn topic_delete(&self, name: &str) -> Result<bool, StoreError> {
        topic::topic_delete(&self.pool, name).await
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.stop.cancel();
        tokio::join!(self.pool.close(), self.lease_pool.close());
        Ok(())
    }

    fn events(&self) -> Option<broadcast::Receiver<StoreEvent>> {
        Some(self.events.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn synchronous_commit(pool: &PgPool) -> String {
        sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// Sends must wait for the disk; leases and deletes need not. Were the
    /// pools swapped, or both relaxed, an acknowledged send could be lost.
    #[tokio::test]
    async fn only_the_lease_pool_commits_without_waiting_for_the_disk() {
        let Ok(url) = std::env::var("ACKBOX_TEST_POSTGRES_URL") else {
            eprintln!("skipped: ACKBOX_TEST_POSTGRES_URL is not set");
            return;
        };
        let schema = format!("pool_durability_{}", std::process::id());
        let mut options = PostgresOptions::new(url);
        options.max_connections = 3;
        options.schema = Some(schema.clone());
        let store = PostgresStore::connect(&options).await.unwrap();
        let durable = synchronous_commit(&store.pool).await;
        let leases = synchronous_commit(&store.lease_pool).await;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(&store.pool)
            .await
            .unwrap();
        store.close().await.unwrap();
        assert_eq!((durable.as_str(), leases.as_str()), ("on", "off"));
    }

    async fn dead_rows(pool: &PgPool) -> i64 {
        sqlx::query_scalar(
            "SELECT n_dead_tup FROM pg_stat_user_tables
             WHERE schemaname = current_schema() AND relname = 'messages'",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    }

    /// A queue that moved many messages holds their dead rows until a
    /// vacuum; the store vacuums it itself, autovacuum or not.
    #[tokio::test]
    async fn the_store_vacuums_a_table_full_of_dead_rows() {
        let Ok(url) = std::env::var("ACKBOX_TEST_POSTGRES_URL") else {
            eprintln!("skipped: ACKBOX_TEST_POSTGRES_URL is not set");
            return;
        };
        let schema = format!("vacuum_{}", std::process::id());
        let mut options = PostgresOptions::new(url);
        options.max_connections = 3;
        options.schema = Some(schema.clone());
        let store = PostgresStore::connect(&options).await.unwrap();
        // Autovacuum must not do the work this test is about.
        sqlx::query("ALTER TABLE messages SET (autovacuum_enabled = false)")
            .execute(&store.pool)
            .await
            .unwrap();
        let churned = 2 * vacuum::MIN_DEAD_ROWS;
        sqlx::query(
            "INSERT INTO messages (queue_id, message_id, body, md5_of_body, sender_id, sent_at, visible_at)
             SELECT 1, 'm' || n, 'body', 'md5', 'sender', 0, 0 FROM generate_series(1, $1) AS n",
        )
        .bind(churned)
        .execute(&store.pool)
        .await
        .unwrap();
        sqlx::query("DELETE FROM messages")
            .execute(&store.pool)
            .await
            .unwrap();
        // Statistics reach the shared counters within a second or so.
        let mut seen = 0;
        for _ in 0..100 {
            seen = dead_rows(&store.pool).await;
            if seen >= churned {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            seen >= churned,
            "the statistics never showed the dead rows: {seen}"
        );
        // This round vacuums it, or the node's own loop got there first.
        let mut left = i64::MAX;
        for _ in 0..100 {
            vacuum::vacuum_what_needs_it(&store.pool).await.unwrap();
            left = dead_rows(&store.pool).await;
            if left < vacuum::MIN_DEAD_ROWS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let again = vacuum::vacuum_what_needs_it(&store.pool).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(&store.pool)
            .await
            .unwrap();
        store.close().await.unwrap();
        assert!(
            left < vacuum::MIN_DEAD_ROWS,
            "{left} dead rows after the vacuum"
        );
        assert_eq!(again, 0, "a clean table is left alone");
    }
}
