//! `ackbox store adopt`: one embedded store takes over the standard-queue
//! messages the other left in a data directory.
//!
//! Before a data directory was locked to one server, two servers — one on
//! each embedded store — could share it, each keeping part of what it
//! acknowledged where the other cannot see it; each store then refuses the
//! directory, naming the other. Adoption moves the other store's messages
//! into the chosen one, a chunk at a time: a chunk is written to the
//! adopting store durably first and only then forgotten by the other, so a
//! crash in between leaves a chunk in both (delivered twice, never lost),
//! and running adoption again finishes the move. Leases and delays are not
//! carried over: adopted messages are visible at once.

use std::path::Path;

use ackbox_core::clock::{Clock, SystemClock};
use ackbox_log::group_commit::GroupCommitOptions;
use ackbox_log::log::LogOptions;
use ackbox_log::queues::StandardQueues;

use super::log::{LOG_DIR, outgoing, stored};
use super::sqlite::{Durability, SqliteStore};
use super::{MessageInsertParams, MessagePeekParams, NewMessage, Store, StoreError, StoredMessage};

/// Messages moved per chunk.
const CHUNK: u32 = 500;

/// Which embedded store adopts the other's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopter {
    /// The log store (`--store log`) takes SQLite's standard-queue messages.
    Log,
    /// The default store (`--store sqlite`) takes the log's messages; the
    /// log is set aside as `log.adopted-<epoch ms>`.
    Sqlite,
}

/// What adoption moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Adopted {
    /// Messages moved.
    pub messages: u64,
    /// Standard queues that had some.
    pub queues: u64,
}

/// Moves the other store's standard-queue messages in `data_dir` into
/// `adopter` (the server must be stopped: the directory is held meanwhile).
pub async fn adopt(data_dir: &Path, adopter: Adopter) -> Result<Adopted, StoreError> {
    let sqlite = SqliteStore::open(data_dir, Durability::Fsync)?;
    let result = match adopter {
        Adopter::Log => into_log(&sqlite, data_dir).await,
        Adopter::Sqlite => into_sqlite(&sqlite, data_dir).await,
    };
    let closed = sqlite.close().await;
    let adopted = result?;
    closed?;
    Ok(adopted)
}

fn log_error(source: ackbox_log::queues::QueuesError) -> StoreError {
    StoreError::Log {
        operation: "adopt",
        source,
    }
}

async fn open_log(data_dir: &Path) -> Result<StandardQueues, StoreError> {
    let log_dir = data_dir.join(LOG_DIR);
    tokio::task::spawn_blocking(move || {
        StandardQueues::open(
            &log_dir,
            LogOptions::default(),
            GroupCommitOptions::default(),
        )
    })
    .await
    .map_err(|_| StoreError::Unavailable {
        reason: "opening the log was cancelled",
    })?
    .map(|(queues, _)| queues)
    .map_err(log_error)
}

/// The log's queue number of a store queue id, as the log store numbers it.
fn log_queue(queue_id: i64) -> u64 {
    queue_id.unsigned_abs()
}

async fn standard_queues(sqlite: &SqliteStore) -> Result<Vec<i64>, StoreError> {
    Ok(sqlite
        .queue_kinds()
        .await?
        .into_iter()
        .filter(|(_, fifo)| !fifo)
        .map(|(id, _)| id)
        .collect())
}

fn as_new(message: StoredMessage, visible_at: ackbox_core::clock::Timestamp) -> NewMessage {
    NewMessage {
        message_id: message.message_id,
        body: message.body,
        attributes: message.attributes,
        md5_of_body: message.md5_of_body,
        md5_of_attributes: message.md5_of_attributes,
        trace_header: message.trace_header,
        group_id: message.group_id,
        sender_id: message.sender_id,
        sent_at: message.sent_at,
        visible_at,
        deduplication: None,
    }
}

async fn into_log(sqlite: &SqliteStore, data_dir: &Path) -> Result<Adopted, StoreError> {
    let queues = open_log(data_dir).await?;
    let now = SystemClock.now();
    sqlite.mark_log_written(now).await?;
    let mut adopted = Adopted::default();
    for queue_id in standard_queues(sqlite).await? {
        let mut moved_any = false;
        loop {
            let chunk = sqlite
                .message_peek(MessagePeekParams {
                    queue_id,
                    limit: CHUNK,
                    after_seq: 0,
                })
                .await?;
            if chunk.is_empty() {
                break;
            }
            let seqs: Vec<i64> = chunk.iter().map(|message| message.seq).collect();
            let count = chunk.len() as u64;
            let sent: Vec<_> = chunk
                .into_iter()
                .map(|message| outgoing(as_new(message, now)))
                .collect();
            let (_, lsn) = queues.send(log_queue(queue_id), sent).map_err(log_error)?;
            queues
                .commit()
                .wait_durable(lsn)
                .map_err(|error| log_error(error.into()))?;
            // In the log, durably, before SQLite forgets them.
            sqlite.messages_forget(queue_id, seqs).await?;
            adopted.messages += count;
            moved_any = true;
        }
        adopted.queues += u64::from(moved_any);
    }
    drop(queues.close());
    Ok(adopted)
}

async fn into_sqlite(sqlite: &SqliteStore, data_dir: &Path) -> Result<Adopted, StoreError> {
    let log_dir = data_dir.join(LOG_DIR);
    if !log_dir.is_dir() {
        return Ok(Adopted::default());
    }
    let queues = open_log(data_dir).await?;
    let now = SystemClock.now();
    let mut adopted = Adopted::default();
    for queue_id in standard_queues(sqlite).await? {
        let messages = queues
            .peek(log_queue(queue_id), 0, usize::MAX)
            .map_err(log_error)?;
        if messages.is_empty() {
            continue;
        }
        adopted.queues += 1;
        let mut messages = messages.into_iter().peekable();
        while messages.peek().is_some() {
            let chunk = messages
                .by_ref()
                .take(CHUNK as usize)
                .map(|message| stored(message).map(|message| as_new(message, now)))
                .collect::<Result<Vec<_>, _>>()?;
            adopted.messages += chunk.len() as u64;
            sqlite
                .message_insert_batch(MessageInsertParams {
                    queue_id,
                    messages: chunk,
                    deduplication_window_start: now,
                })
                .await?;
        }
    }
    drop(queues.close());
    // Every message is in SQLite, durably: the log is set aside (kept, for
    // a person to remove), and the database forgets it had one.
    let aside = data_dir.join(format!("{LOG_DIR}.adopted-{now}"));
    let io_error = |source| StoreError::Io {
        path: log_dir.display().to_string(),
        source,
    };
    std::fs::rename(&log_dir, &aside).map_err(io_error)?;
    std::fs::File::open(data_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io_error)?;
    sqlite.clear_log_written().await?;
    Ok(adopted)
}
