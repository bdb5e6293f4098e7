//! The log store: standard queues' messages in an append-only log
//! (`ackbox-log`), everything else — queues, FIFO queues and their
//! messages, move tasks — in the embedded SQLite store beside it, in the
//! same data directory.
//!
//! A standard queue's send, lease or delete is a record of a few dozen bytes
//! appended to the log and an update of the in-memory ledger, where SQLite
//! rewrites B-tree pages; FIFO queues keep SQLite, whose indexes serve their
//! groups and deduplication window. `docs/storage.md` has the crash argument.
//!
//! What spans both stores:
//! - a queue's kind comes from SQLite, loaded at open and kept current here;
//! - a deleted standard queue's messages stay in the log until the sweep
//!   drops them, as the SQLite store leaves its rows (SQLite's queue row is
//!   the authority on which queues live, so a crash in between only leaves
//!   work for the sweep);
//! - a move task's record is in SQLite and its moves are in the log: each
//!   step makes its moves durable first, then records its progress, so a
//!   crash between the two moves nothing twice (the moved messages are no
//!   longer in the dead-letter queue) and only the task's count falls short.
//!
//! Long because it implements the whole `Store` trait over two stores, each
//! method a few lines choosing the log or SQLite by the queue's kind.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use ackbox_core::clock::Timestamp;
use ackbox_log::compaction::CompactionPolicy;
use ackbox_log::group_commit::{GroupCommitOptions, Lsn};
use ackbox_log::ledger::Ledger;
use ackbox_log::log::LogOptions;
use ackbox_log::queues::{
    DeadLetter, Deleted, MoveChoice, Nack, NackOutcome as LogNack, Outgoing, QueuesError,
    ReceiveRequest, StandardQueues, VisibilityChanged,
};
use ackbox_log::record::{Content, SentMessage};
use async_trait::async_trait;

use super::move_step::{self, StepEnd};
use super::sqlite::{Durability, SqliteStore, StepProgress};
use super::{
    ChangeVisibilityOutcome, DeadLetterTarget, DeleteOutcome, FailureClassCount, FailureRecord,
    InsertedMessage, MessageChangeVisibilityParams, MessageDeleteParams, MessageExpireParams,
    MessageInsertParams, MessageNackParams, MessagePeekParams, MessageReceiveParams,
    MoveTaskCreateOutcome, MoveTaskCreateParams, MoveTaskFilter, MoveTaskRecord,
    MoveTaskStepOutcome, MoveTaskStepParams, NackOutcome, NewMessage, QueueCreateOutcome,
    QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome, QueuePurgeParams, QueueRecord,
    QueueStats, QueueStatsParams, QueueUpdateParams, ReceiveOutcome, Store, StoreError,
    StoredMessage, TopicRecord, from_json, to_json,
};

/// The log's directory inside the data directory.
pub const LOG_DIR: &str = "log";

/// How often the compaction thread looks for segments to reclaim.
const COMPACTION_INTERVAL: Duration = Duration::from_secs(5);

/// What the store knows of a queue that SQLite holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kind {
    fifo: bool,
    /// Deleted queues stay known until restart, so that their messages are
    /// still found (and counted) until the sweep drops them.
    live: bool,
}

/// Standard queues in the log, the rest in SQLite.
#[derive(Debug)]
pub struct LogStore {
    sqlite: SqliteStore,
    queues: Arc<StandardQueues>,
    kinds: RwLock<HashMap<i64, Kind>>,
    /// Whether acknowledged writes wait for their fsync.
    wait_for_sync: bool,
    /// Set when a send to the log failed for want of space, cleared by the
    /// next send that is durable.
    log_full: AtomicBool,
    /// The database records that the log takes messages: set once, before
    /// the first send is appended, so that any acknowledged send implies it.
    log_written: AtomicBool,
}

impl LogStore {
    /// Opens (creating if needed) both stores in `data_dir`: replays the log
    /// into its ledger and starts the log's flusher and compaction threads.
    pub async fn open(data_dir: &Path, durability: Durability) -> Result<Self, StoreError> {
        let sqlite = SqliteStore::open(data_dir, durability)?;
        let in_sqlite = sqlite.standard_message_count().await?;
        if in_sqlite > 0 {
            return Err(StoreError::WrittenByOtherStore {
                data_dir: data_dir.display().to_string(),
                messages: in_sqlite,
                written_by: "sqlite",
                adopt_into: "log",
            });
        }
        let log_dir = data_dir.join(LOG_DIR);
        let log_written = sqlite.log_written().await?;
        if log_written && !holds_segments(&log_dir) {
            // Closing lets the data directory go for whoever restores it.
            let _ = sqlite.close().await;
            return Err(StoreError::LogLost {
                data_dir: data_dir.display().to_string(),
                log_dir: log_dir.display().to_string(),
            });
        }
        let commit_options = match durability {
            Durability::Fsync => GroupCommitOptions::default(),
            Durability::Relaxed { sync_interval } => GroupCommitOptions { sync_interval },
        };
        let opened = {
            let log_dir = log_dir.clone();
            off_the_runtime(move || {
                StandardQueues::open(&log_dir, LogOptions::default(), commit_options)
            })
            .await
        };
        let (queues, recovery) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                let _ = sqlite.close().await;
                return Err(name_the_damage(error, data_dir, &log_dir));
            }
        };
        tracing::info!(
            dir = %log_dir.display(),
            messages = queues.inspect(|ledger| ledger.len()),
            ?recovery,
            "log store opened"
        );
        let kinds = sqlite
            .queue_kinds()
            .await?
            .into_iter()
            .map(|(id, fifo)| (id, Kind { fifo, live: true }))
            .collect();
        let queues = Arc::new(queues);
        spawn_compaction(Arc::downgrade(&queues))?;
        Ok(Self {
            sqlite,
            queues,
            kinds: RwLock::new(kinds),
            wait_for_sync: matches!(durability, Durability::Fsync),
            log_full: AtomicBool::new(false),
            log_written: AtomicBool::new(log_written),
        })
    }

    /// As [`SqliteStore::reserve_disk`]: the reserve is shared by both
    /// halves, which live on one filesystem.
    pub fn reserve_disk(&self, bytes: u64) -> Result<(), StoreError> {
        self.sqlite.reserve_disk(bytes)
    }

    /// How a failed log write is reported; a full disk, whichever write met
    /// it first, also gives the reserve up, so that receives and deletes
    /// (a few dozen bytes each) go on while sends are refused.
    fn write_error(&self, operation: &'static str) -> impl Fn(QueuesError) -> StoreError + '_ {
        move |source| {
            let error = log_error(operation)(source);
            if matches!(error, StoreError::DiskFull { .. }) {
                self.log_full.store(true, Ordering::Release);
                self.sqlite.release_reserve();
            }
            error
        }
    }

    /// Sends standard queues' batches to the log in one append and answers
    /// once it is durable.
    async fn send_to_log(
        &self,
        batches: Vec<MessageInsertParams>,
    ) -> Result<Vec<Vec<InsertedMessage>>, StoreError> {
        if let Some(gone) = batches
            .iter()
            .find(|params| !self.is_live_standard(params.queue_id))
        {
            return Err(StoreError::QueueNotFound {
                queue_id: gone.queue_id,
            });
        }
        self.sqlite.refuse_send_while_full()?;
        if !self.log_written.load(Ordering::Acquire) {
            let now = batches
                .iter()
                .find_map(|params| params.messages.first())
                .map_or(0, |message| message.sent_at);
            self.sqlite.mark_log_written(now).await?;
            self.log_written.store(true, Ordering::Release);
        }
        let mut message_ids = Vec::with_capacity(batches.len());
        let sends = batches
            .into_iter()
            .map(|params| {
                let (ids, outgoing): (Vec<String>, Vec<Outgoing>) = params
                    .messages
                    .into_iter()
                    .map(|message| (message.message_id.clone(), outgoing(message)))
                    .unzip();
                message_ids.push(ids);
                (log_queue(params.queue_id), outgoing)
            })
            .collect();
        let (seqs, lsn) = self
            .queues
            .send_to_each(sends)
            .map_err(self.write_error("message_insert_batch"))?;
        let inserted = message_ids
            .into_iter()
            .zip(seqs)
            .map(|(ids, seqs)| {
                ids.into_iter()
                    .zip(seqs)
                    .map(|(message_id, seq)| InsertedMessage {
                        seq: store_seq(seq),
                        message_id,
                        duplicate: false,
                    })
                    .collect()
            })
            .collect();
        self.durable(lsn).await?;
        // A send is what a full disk refuses first; one that passed says
        // there is room again.
        self.log_full.store(false, Ordering::Release);
        Ok(inserted)
    }

    /// Refuses a data directory whose log still holds messages, before the
    /// SQLite store is opened there alone (`--store sqlite`): it would not
    /// see them. The ledger is rebuilt from the log as the log store's start
    /// rebuilds it, without a flusher: nothing is appended.
    pub async fn ensure_no_messages_left(data_dir: &Path) -> Result<(), StoreError> {
        let log_dir = data_dir.join(LOG_DIR);
        if !log_dir.exists() {
            return Ok(());
        }
        let left = off_the_runtime(move || {
            Ledger::recover(&log_dir, LogOptions::default())
                .map(|(_, ledger, _)| ledger.len())
                .map_err(QueuesError::from)
        })
        .await?;
        if left > 0 {
            return Err(StoreError::WrittenByOtherStore {
                data_dir: data_dir.display().to_string(),
                messages: left as u64,
                written_by: "log",
                adopt_into: "sqlite",
            });
        }
        Ok(())
    }

    fn kinds(&self) -> std::sync::RwLockReadGuard<'_, HashMap<i64, Kind>> {
        self.kinds
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_kind(&self, queue_id: i64, kind: Kind) {
        self.kinds
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(queue_id, kind);
    }

    /// Whether the queue's messages are in the log: a standard queue, live
    /// or deleted; or one this process does not know that the log holds
    /// messages of (deleted before a restart).
    fn in_log(&self, queue_id: i64) -> bool {
        match self.kinds().get(&queue_id) {
            Some(kind) => !kind.fifo,
            None => self
                .queues
                .inspect(|ledger| ledger.queue_len(log_queue(queue_id)) > 0),
        }
    }

    fn is_live_standard(&self, queue_id: i64) -> bool {
        self.kinds()
            .get(&queue_id)
            .is_some_and(|kind| kind.live && !kind.fifo)
    }

    /// Waits until the records before `lsn` are durable, when this store's
    /// durability asks for it.
    async fn durable(&self, lsn: Lsn) -> Result<(), StoreError> {
        if !self.wait_for_sync {
            return Ok(());
        }
        self.synced(lsn).await
    }

    async fn synced(&self, lsn: Lsn) -> Result<(), StoreError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.queues.commit().when_durable(
            lsn,
            Box::new(move |result| {
                let _ = answer.send(result);
            }),
        );
        answered
            .await
            .map_err(|_| StoreError::Unavailable {
                reason: "the log's flusher stopped",
            })?
            .map_err(|error| log_error("sync")(QueuesError::Commit(error)))
    }

    /// A receive's or nack's dead-letter queue, if it is a live standard
    /// queue (a queue deleted since the engine looked moves nothing).
    fn dead_letter(&self, target: Option<&DeadLetterTarget>) -> Option<DeadLetter> {
        let target = target.filter(|target| self.is_live_standard(target.queue_id))?;
        Some(DeadLetter {
            queue: log_queue(target.queue_id),
            max_receive_count: u32::try_from(target.max_receive_count).unwrap_or(u32::MAX),
            source_arn: target.source_arn.clone(),
        })
    }

    async fn move_task_step_in_log(
        &self,
        params: &MoveTaskStepParams,
    ) -> Result<Option<MoveTaskStepOutcome>, StoreError> {
        let Some(position) = self.sqlite.move_task_position(&params.handle).await? else {
            return Ok(Some(MoveTaskStepOutcome {
                finished: true,
                ..MoveTaskStepOutcome::default()
            }));
        };
        let record = position.record;
        if !self.in_log(record.source_queue_id) {
            return Ok(None);
        }
        let source = log_queue(record.source_queue_id);
        let relapsed =
            self.queues
                .inspect(|ledger| ledger.redriven_by(source, &params.handle)) as i64;
        let mut end = StepEnd {
            brake: move_step::relapse_brake(
                record.moved - position.relapse_base_moved,
                relapsed - position.relapse_base_count,
            ),
            limit: params.limit,
            ..StepEnd::default()
        };
        let live: HashMap<i64, Kind> = self.kinds().clone();
        let mut chosen = 0i64;
        let step = self
            .queues
            .move_step(
                source,
                (log_seq(position.cursor), log_seq(position.until_seq)),
                params.limit as usize,
                params.now,
                &params.handle,
                |message| {
                    if end.stops_before_next(&record.filter, record.moved + chosen) {
                        return MoveChoice::Stop;
                    }
                    let class = message.failures.as_ref().map(|f| &f.last_class);
                    if !record.filter.admits(class, message.sent_at) {
                        return MoveChoice::Skip;
                    }
                    // Someone is working on it in the dead-letter queue: the
                    // task waits at it until the lease ends or it is deleted.
                    if message.visible_at > params.now {
                        end.held = true;
                        return MoveChoice::Stop;
                    }
                    let source_arn = message.dead_letter_source_arn.as_ref();
                    match params.destination.queue_for(source_arn) {
                        Some(queue_id)
                            if live
                                .get(&queue_id)
                                .is_some_and(|kind| kind.live && !kind.fifo) =>
                        {
                            chosen += 1;
                            MoveChoice::MoveTo(log_queue(queue_id))
                        }
                        _ => {
                            end.failure = Some(move_step::destination_gone(
                                &params.destination,
                                source_arn.map(String::as_str),
                            ));
                            MoveChoice::Stop
                        }
                    }
                },
            )
            .map_err(self.write_error("move_task_step"))?;
        // Moves first, progress second: see the module's documentation.
        self.durable(step.lsn).await?;
        let moved = step.moved.len() as i64;
        end.candidates = step.candidates;
        end.held |= step.held;
        end.moved_total = record.moved + moved;
        let (status, failure) = end.conclude();
        self.sqlite
            .move_task_record_step(
                &params.handle,
                StepProgress {
                    cursor: store_seq(step.cursor),
                    moved,
                    skipped: step.skipped as i64,
                    status,
                    failure,
                    now: params.now,
                },
            )
            .await?;
        let mut destinations: Vec<i64> = Vec::new();
        for &(_, to, _) in &step.moved {
            let to = store_seq(to);
            if !destinations.contains(&to) {
                destinations.push(to);
            }
        }
        Ok(Some(MoveTaskStepOutcome {
            moved: moved as u64,
            destinations,
            finished: status != "RUNNING",
        }))
    }
}

/// Reclaims log segments every [`COMPACTION_INTERVAL`] until the store is
/// dropped.
fn spawn_compaction(queues: Weak<StandardQueues>) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("ackbox-log-compaction".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(COMPACTION_INTERVAL);
                let Some(queues) = queues.upgrade() else {
                    return;
                };
                match queues.compact(CompactionPolicy::default()) {
                    Ok(report) if report.removed > 0 || report.copied > 0 => {
                        tracing::debug!(?report, "log compacted");
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::error!(%error, "log compaction failed; the log is kept whole");
                    }
                }
            }
        })
        .map(drop)
        .map_err(|source| StoreError::Io {
            path: "ackbox-log-compaction thread".to_owned(),
            source,
        })
}

/// A damaged log, said with the file, the byte and the command that
/// reports what is readable.
fn name_the_damage(error: StoreError, data_dir: &Path, log_dir: &Path) -> StoreError {
    match error {
        StoreError::Log {
            source:
                QueuesError::Log(ackbox_log::log::LogError::Damaged {
                    segment,
                    offset,
                    reason,
                }),
            ..
        } => StoreError::Corrupt {
            detail: format!(
                "{} is damaged at byte {offset}: {reason}; the store will not open over it \
                 (`ackbox store check --data-dir {}` reports what is readable)",
                ackbox_log::log::segment_path(log_dir, segment).display(),
                data_dir.display()
            ),
        },
        other => other,
    }
}

/// Whether `log_dir` holds any segment file.
fn holds_segments(log_dir: &Path) -> bool {
    std::fs::read_dir(log_dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.ends_with(".log"))
        })
    })
}

/// Store ids are positive `i64`s; the log numbers queues and messages in `u64`.
fn log_queue(queue_id: i64) -> u64 {
    queue_id.unsigned_abs()
}

fn log_seq(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

fn store_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// Opens or replays the log on a blocking thread: recovery reads every
/// segment.
async fn off_the_runtime<T: Send + 'static>(
    open: impl FnOnce() -> Result<T, QueuesError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(open)
        .await
        .map_err(|_| StoreError::Unavailable {
            reason: "opening the log was cancelled",
        })?
        .map_err(log_error("open"))
}

fn log_error(operation: &'static str) -> impl Fn(QueuesError) -> StoreError {
    move |source| {
        if source.is_no_space() {
            StoreError::DiskFull {
                detail: format!("{operation}: {source}"),
            }
        } else {
            StoreError::Log { operation, source }
        }
    }
}

/// A message the engine sends, as the log keeps it.
pub(super) fn outgoing(message: NewMessage) -> Outgoing {
    Outgoing {
        content: Content {
            message_id: message.message_id,
            body: message.body,
            attributes: (!message.attributes.is_empty()).then(|| to_json(&message.attributes)),
            md5_of_body: message.md5_of_body,
            md5_of_attributes: message.md5_of_attributes,
            trace_header: message.trace_header,
            sender_id: message.sender_id,
            group_id: message.group_id,
        },
        sent_at: message.sent_at,
        visible_at: message.visible_at,
    }
}

/// A message from the log as the engine sees it.
pub(super) fn stored(message: SentMessage) -> Result<StoredMessage, StoreError> {
    let content = message.content;
    let attributes = match &content.attributes {
        Some(json) => from_json(json, "message attributes")?,
        None => Default::default(),
    };
    let failures = message
        .failures
        .map(|failures| FailureRecord {
            count: i64::from(failures.count),
            first_at: Some(failures.first_at),
            last_at: Some(failures.last_at),
            last_class: Some(failures.last_class),
            last_message: Some(failures.last_message),
        })
        .unwrap_or_default();
    Ok(StoredMessage {
        seq: store_seq(message.seq),
        message_id: content.message_id,
        body: content.body,
        attributes,
        md5_of_body: content.md5_of_body,
        md5_of_attributes: content.md5_of_attributes,
        trace_header: content.trace_header,
        group_id: content.group_id,
        sender_id: content.sender_id,
        sent_at: message.sent_at,
        receive_count: i64::from(message.receive_count),
        first_received_at: message.first_received_at,
        last_received_at: message.last_received_at,
        dead_letter_source_arn: message.dead_letter_source_arn,
        failures,
        deduplication_id: None,
    })
}

fn lease_of(lease: &super::LeaseRef) -> (u64, u32) {
    (
        log_seq(lease.seq),
        u32::try_from(lease.lease).unwrap_or(u32::MAX),
    )
}

#[async_trait]
impl Store for LogStore {
    async fn queue_create(
        &self,
        params: QueueCreateParams,
    ) -> Result<QueueCreateOutcome, StoreError> {
        let fifo = params.fifo;
        let outcome = self.sqlite.queue_create(params).await?;
        if let QueueCreateOutcome::Created(record) = &outcome {
            self.set_kind(record.id, Kind { fifo, live: true });
        }
        Ok(outcome)
    }

    async fn queue_list(&self) -> Result<Vec<QueueRecord>, StoreError> {
        self.sqlite.queue_list().await
    }

    async fn queue_get(&self, name: &str) -> Result<Option<QueueRecord>, StoreError> {
        self.sqlite.queue_get(name).await
    }

    async fn queue_update(&self, params: QueueUpdateParams) -> Result<(), StoreError> {
        self.sqlite.queue_update(params).await
    }

    async fn queue_delete(&self, params: QueueDeleteParams) -> Result<bool, StoreError> {
        let queue_id = params.queue_id;
        let deleted = self.sqlite.queue_delete(params).await?;
        if deleted {
            let fifo = self.kinds().get(&queue_id).is_some_and(|kind| kind.fifo);
            self.set_kind(queue_id, Kind { fifo, live: false });
        }
        Ok(deleted)
    }

    async fn queue_purge(&self, params: QueuePurgeParams) -> Result<QueuePurgeOutcome, StoreError> {
        let queue_id = params.queue_id;
        let at_once = params.delete_at_once as usize;
        // SQLite keeps the cooldown (and refuses a deleted queue) first.
        let outcome = self.sqlite.queue_purge(params).await?;
        if outcome == QueuePurgeOutcome::InProgress || !self.in_log(queue_id) {
            return Ok(outcome);
        }
        let purge = self
            .queues
            .purge(log_queue(queue_id), at_once)
            .map_err(self.write_error("queue_purge"))?;
        self.durable(purge.lsn).await?;
        Ok(QueuePurgeOutcome::Purged {
            deleted: purge.deleted,
            more: purge.more,
        })
    }

    async fn queue_stats(&self, params: QueueStatsParams) -> Result<QueueStats, StoreError> {
        if !self.in_log(params.queue_id) {
            return self.sqlite.queue_stats(params).await;
        }
        let queue = log_queue(params.queue_id);
        let (counts, oldest_sent_at) = self.queues.inspect(|ledger| {
            (
                ledger.counts(queue, params.now),
                ledger.oldest_sent_at(queue),
            )
        });
        Ok(QueueStats {
            visible: counts.visible,
            in_flight: counts.in_flight,
            delayed: counts.delayed,
            oldest_sent_at,
        })
    }

    async fn message_insert_batch(
        &self,
        params: MessageInsertParams,
    ) -> Result<Vec<InsertedMessage>, StoreError> {
        if !self.in_log(params.queue_id) {
            return self.sqlite.message_insert_batch(params).await;
        }
        let mut inserted = self.send_to_log(vec![params]).await?;
        Ok(inserted.pop().unwrap_or_default())
    }

    async fn message_insert_atomic(
        &self,
        batches: Vec<MessageInsertParams>,
    ) -> Result<Vec<Vec<InsertedMessage>>, StoreError> {
        let in_log = batches
            .iter()
            .filter(|params| self.in_log(params.queue_id))
            .count();
        if in_log == 0 {
            self.sqlite.message_insert_atomic(batches).await
        } else if in_log == batches.len() {
            self.send_to_log(batches).await
        } else {
            Err(StoreError::NotAtomic {
                what: "messages for standard queues (in the log) and FIFO queues (in SQLite) at once",
            })
        }
    }

    async fn message_receive(
        &self,
        params: MessageReceiveParams,
    ) -> Result<ReceiveOutcome, StoreError> {
        if !self.in_log(params.queue_id) {
            return self.sqlite.message_receive(params).await;
        }
        let queue = log_queue(params.queue_id);
        let request = ReceiveRequest {
            max: params.max_messages as usize,
            visibility_ms: params.visible_at - params.now,
            dead_letter: self.dead_letter(params.dead_letter.as_ref()),
            expire_sent_at_or_before: Some(params.expired_at_or_before),
        };
        let received = self
            .queues
            .receive(queue, params.now, &request)
            .map_err(self.write_error("message_receive"))?;
        let next_visible_at = if received.deliveries.is_empty() {
            self.queues
                .inspect(|ledger| ledger.next_visible_at(queue, params.now))
        } else {
            None
        };
        Ok(ReceiveOutcome {
            messages: received
                .deliveries
                .into_iter()
                .map(|delivery| stored(delivery.message))
                .collect::<Result<_, _>>()?,
            expired: received.expired,
            dead_lettered: received.dead_lettered,
            next_visible_at,
        })
    }

    async fn message_delete_batch(
        &self,
        params: MessageDeleteParams,
    ) -> Result<Vec<DeleteOutcome>, StoreError> {
        if !self.in_log(params.queue_id) {
            return self.sqlite.message_delete_batch(params).await;
        }
        let leases: Vec<(u64, u32)> = params.leases.iter().map(lease_of).collect();
        let outcomes = self
            .queues
            .delete(log_queue(params.queue_id), &leases, params.now)
            .map_err(self.write_error("message_delete_batch"))?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| match outcome {
                Deleted::Deleted => DeleteOutcome::Deleted,
                Deleted::AlreadyGone => DeleteOutcome::AlreadyGone,
                Deleted::LeasedToAnother => DeleteOutcome::LeasedToAnother,
            })
            .collect())
    }

    async fn message_change_visibility_batch(
        &self,
        params: MessageChangeVisibilityParams,
    ) -> Result<Vec<ChangeVisibilityOutcome>, StoreError> {
        if !self.in_log(params.queue_id) {
            return self.sqlite.message_change_visibility_batch(params).await;
        }
        let queue = log_queue(params.queue_id);
        params
            .changes
            .iter()
            .map(|change| {
                let outcome = self
                    .queues
                    .change_visibility(
                        queue,
                        lease_of(&change.lease),
                        change.visible_at,
                        params.now,
                    )
                    .map_err(self.write_error("message_change_visibility_batch"))?;
                Ok(match outcome {
                    VisibilityChanged::Changed => ChangeVisibilityOutcome::Changed,
                    VisibilityChanged::NotAvailable => ChangeVisibilityOutcome::NotAvailable,
                })
            })
            .collect()
    }

    async fn message_nack(&self, params: MessageNackParams) -> Result<NackOutcome, StoreError> {
        if !self.in_log(params.queue_id) {
            return self.sqlite.message_nack(params).await;
        }
        let nack = Nack {
            visible_at: params.visible_at,
            failure: params
                .failure
                .clone()
                .map(|failure| (failure.class, failure.message)),
            permanent: params.permanent,
            dead_letter: self.dead_letter(params.dead_letter.as_ref()),
        };
        let queue = log_queue(params.queue_id);
        let outcome = self
            .queues
            .nack(queue, lease_of(&params.lease), params.now, &nack)
            .map_err(self.write_error("message_nack"))?;
        // Durable: a recorded failure reason is what an operator reads in
        // the dead-letter queue, and a move to it must not be undone.
        self.durable(self.queues.commit().appended()).await?;
        Ok(match outcome {
            LogNack::Retried => NackOutcome::Retried,
            LogNack::DeadLettered => NackOutcome::DeadLettered,
            LogNack::NotAvailable => NackOutcome::NotAvailable,
            LogNack::NotInFlight => NackOutcome::NotInFlight,
        })
    }

    async fn message_failure_classes(
        &self,
        queue_id: i64,
        sent_before: Option<Timestamp>,
    ) -> Result<Vec<FailureClassCount>, StoreError> {
        if !self.in_log(queue_id) {
            return self
                .sqlite
                .message_failure_classes(queue_id, sent_before)
                .await;
        }
        let sent_before = sent_before.unwrap_or(Timestamp::MAX);
        let queue = log_queue(queue_id);
        let classes: BTreeMap<String, FailureClassCount> = self.queues.inspect(|ledger| {
            let mut classes = BTreeMap::new();
            for (seq, state) in ledger.in_order(queue, 0) {
                if state.sent_at > sent_before {
                    continue;
                }
                let failures = ledger.failures(queue, seq);
                let class = failures.map_or("", |f| f.last_class.as_str());
                if let Some(count) = classes.get_mut(class) {
                    let count: &mut FailureClassCount = count;
                    count.count += 1;
                    count.oldest_sent_at = count.oldest_sent_at.min(state.sent_at);
                    count.newest_sent_at = count.newest_sent_at.max(state.sent_at);
                } else {
                    classes.insert(
                        class.to_owned(),
                        FailureClassCount {
                            class: class.to_owned(),
                            count: 1,
                            oldest_sent_at: state.sent_at,
                            newest_sent_at: state.sent_at,
                            // The first in sequence order is the example.
                            example: failures.map(|f| f.last_message.clone()),
                        },
                    );
                }
            }
            classes
        });
        let mut counts: Vec<FailureClassCount> = classes.into_values().collect();
        counts.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.class.cmp(&b.class)));
        Ok(counts)
    }

    async fn message_peek(
        &self,
        params: MessagePeekParams,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        if !self.in_log(params.queue_id) {
            return self.sqlite.message_peek(params).await;
        }
        self.queues
            .peek(
                log_queue(params.queue_id),
                u64::try_from(params.after_seq).unwrap_or(0),
                params.limit as usize,
            )
            .map_err(self.write_error("message_peek"))?
            .into_iter()
            .map(stored)
            .collect()
    }

    async fn move_task_create(
        &self,
        params: MoveTaskCreateParams,
    ) -> Result<MoveTaskCreateOutcome, StoreError> {
        if !self.in_log(params.source_queue_id) {
            return self.sqlite.move_task_create(params).await;
        }
        let source = log_queue(params.source_queue_id);
        let filter = &params.filter;
        let snapshot = self.queues.inspect(|ledger| {
            let matching = ledger
                .in_order(source, 0)
                .filter(|&(seq, state)| {
                    let class = ledger.failures(source, seq).map(|f| &f.last_class);
                    filter.admits(class, state.sent_at)
                })
                .count();
            let until_seq = ledger.newest_seq(source).unwrap_or(0);
            (store_seq(until_seq), matching as i64)
        });
        self.sqlite.move_task_create_over(params, snapshot).await
    }

    async fn move_task_step(
        &self,
        params: MoveTaskStepParams,
    ) -> Result<MoveTaskStepOutcome, StoreError> {
        match self.move_task_step_in_log(&params).await? {
            Some(outcome) => Ok(outcome),
            None => self.sqlite.move_task_step(params).await,
        }
    }

    async fn move_task_resume(&self, handle: &str) -> Result<Option<MoveTaskRecord>, StoreError> {
        let task = self
            .sqlite
            .move_task_list(MoveTaskFilter::Handle(handle.to_owned()), 1)
            .await?;
        match task.first() {
            Some(task) if self.in_log(task.source_queue_id) => {
                let source = log_queue(task.source_queue_id);
                let relapsed = self
                    .queues
                    .inspect(|ledger| ledger.redriven_by(source, handle));
                self.sqlite
                    .move_task_resume_with(handle, relapsed as i64)
                    .await
            }
            _ => self.sqlite.move_task_resume(handle).await,
        }
    }

    async fn move_task_cancel(
        &self,
        handle: &str,
        now: Timestamp,
    ) -> Result<Option<MoveTaskRecord>, StoreError> {
        self.sqlite.move_task_cancel(handle, now).await
    }

    async fn move_task_list(
        &self,
        filter: MoveTaskFilter,
        limit: u32,
    ) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.sqlite.move_task_list(filter, limit).await
    }

    async fn message_expire(&self, params: MessageExpireParams) -> Result<u64, StoreError> {
        if !self.in_log(params.queue_id) {
            return self.sqlite.message_expire(params).await;
        }
        let (expired, _) = self
            .queues
            .expire(
                log_queue(params.queue_id),
                params.expired_at_or_before,
                params.limit as usize,
            )
            .map_err(self.write_error("message_expire"))?;
        Ok(expired)
    }

    async fn fifo_window_expire(&self, before: Timestamp) -> Result<u64, StoreError> {
        self.sqlite.fifo_window_expire(before).await
    }

    async fn message_sweep_left_behind(&self, limit: u32) -> Result<u64, StoreError> {
        let live: HashMap<i64, Kind> = self.kinds().clone();
        // Dropping late is harmless: a power loss brings back only messages
        // that the sweep drops again.
        let (swept, _) = self
            .queues
            .sweep(limit as usize, |queue| {
                i64::try_from(queue)
                    .ok()
                    .and_then(|id| live.get(&id))
                    .is_some_and(|kind| kind.live)
            })
            .map_err(self.write_error("message_sweep_left_behind"))?;
        if swept > 0 {
            return Ok(swept);
        }
        self.sqlite.message_sweep_left_behind(limit).await
    }

    fn disk_full(&self) -> bool {
        self.log_full.load(Ordering::Acquire) || self.sqlite.disk_full()
    }

    async fn topic_list(&self) -> Result<Vec<TopicRecord>, StoreError> {
        self.sqlite.topic_list().await
    }

    async fn topic_get(&self, name: &str) -> Result<Option<TopicRecord>, StoreError> {
        self.sqlite.topic_get(name).await
    }

    async fn topic_write(
        &self,
        name: &str,
        definition: String,
        revision: Option<i64>,
    ) -> Result<bool, StoreError> {
        self.sqlite.topic_write(name, definition, revision).await
    }

    async fn topic_delete(&self, name: &str) -> Result<bool, StoreError> {
        self.sqlite.topic_delete(name).await
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.synced(self.queues.commit().appended()).await?;
        self.sqlite.close().await
    }
}
