//! The embedded store: one SQLite database file in WAL mode.
//!
//! Mutations go through the single writer thread (group commit); reads use
//! a separate read-only connection so statistics and listings never wait for
//! a commit. See `docs/storage.md` for the schema and the crash argument.
//!
//! Long because it implements the whole `Store` trait, each method a few
//! lines handing its SQL (in the files by resource beside it) to the writer
//! or the reader; the tests of opening and refusing a data directory follow.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ackbox_core::clock::Timestamp;
use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::store::{
    ChangeVisibilityOutcome, DeleteOutcome, FailureClassCount, InsertedMessage,
    MessageChangeVisibilityParams, MessageDeleteParams, MessageExpireParams, MessageInsertParams,
    MessageNackParams, MessagePeekParams, MessageReceiveParams, MoveTaskCreateOutcome,
    MoveTaskCreateParams, MoveTaskFilter, MoveTaskRecord, MoveTaskStepOutcome, MoveTaskStepParams,
    NackOutcome, QueueCreateOutcome, QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome,
    QueuePurgeParams, QueueRecord, QueueStats, QueueStatsParams, QueueUpdateParams, ReceiveOutcome,
    Store, StoreError, StoredMessage, TopicRecord,
};

mod checkpoint;
pub(crate) mod damage;
mod database_error;
mod fifo;
mod later_file;
mod message;
mod migrate;
mod move_task;
mod queue;
mod receive;
mod relocate;
mod rows;
mod sweep;
mod topic;
mod writer;

pub use writer::Durability;

use super::data_dir::{DataDirLock, DiskReserve};

use checkpoint::Checkpointer;
use database_error::database_error;
pub(crate) use database_error::database_error as mutation_error;
pub(crate) use move_task::{StepProgress, TaskPosition};
use rows::{QUEUE_COLUMNS, queue_from_row, queue_record};
use writer::{Commit, Writer};

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "ackbox.sqlite";

/// The embedded SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Holds the data directory for this store; let go at close.
    lock: Mutex<Option<DataDirLock>>,
    writer: Writer,
    /// Space held back so that a full disk refuses only sends.
    reserve: Arc<DiskReserve>,
    /// Copies the WAL into the database off the writer thread.
    checkpointer: Checkpointer,
    /// Read-only connection for listings and statistics; never used by the writer.
    reader: Mutex<Connection>,
}

fn open_connection(path: &Path, flags: OpenFlags) -> Result<Connection, StoreError> {
    let connection =
        Connection::open_with_flags(path, flags).map_err(database_error("open database"))?;
    // The writer holds the only write lock; readers never block it in WAL mode,
    // but a checkpoint may briefly, so wait rather than fail.
    connection
        .busy_timeout(std::time::Duration::from_secs(5))
        .map_err(database_error("set busy timeout"))?;
    // Every statement of the hot path is cached; the default 16 slots are
    // fewer than the writer uses (some fifty, and a standard send's insert
    // for each batch size from 1 to 10), and an evicted statement is parsed
    // again.
    connection.set_prepared_statement_cache_capacity(96);
    // A stable plan: without it, a statement with a bound parameter in a
    // range on an indexed column is re-planned on every execution.
    connection
        .set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )
        .map_err(database_error("enable query planner stability"))?;
    Ok(connection)
}

/// `PRAGMA auto_vacuum`'s value for INCREMENTAL.
const AUTO_VACUUM_INCREMENTAL: i64 = 2;

/// A store file at most this large that predates incremental vacuum is
/// rebuilt with it at start; a larger one is left alone (a rebuild needs
/// its size again in free disk and holds the start up) and a warning says how.
const CONVERT_AT_START_MAX_BYTES: u64 = 256 * 1_048_576;

/// Makes pages that drained messages free up returnable to the file system.
///
/// Without it a store that filled and drained keeps its size, and the next
/// fill writes into free pages scattered over the file instead of appending:
/// measured 15 % fewer sends and receives per second on a refilled file. The
/// writer returns free pages while idle (see `writer/`). `auto_vacuum` can
/// only be chosen before the first table exists, so an older store is rebuilt
/// once with `VACUUM`.
fn keep_free_pages_reclaimable(connection: &Connection, path: &Path) -> Result<(), StoreError> {
    connection
        .execute_batch("PRAGMA auto_vacuum = INCREMENTAL;")
        .map_err(database_error("enable incremental vacuum"))?;
    let mode: i64 = connection
        .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
        .map_err(database_error("read auto_vacuum"))?;
    // A new file takes the setting at once.
    if mode == AUTO_VACUUM_INCREMENTAL {
        return Ok(());
    }
    let bytes = std::fs::metadata(path).map_or(0, |meta| meta.len());
    if bytes > CONVERT_AT_START_MAX_BYTES {
        tracing::warn!(
            path = %path.display(),
            bytes,
            "this store predates incremental vacuum and is too large to rebuild at start; \
             stop ackbox and run `sqlite3 <file> 'PRAGMA auto_vacuum = INCREMENTAL; VACUUM;'` \
             to let it shrink after drains"
        );
        return Ok(());
    }
    let started = std::time::Instant::now();
    connection
        .execute_batch("VACUUM;")
        .map_err(database_error("rebuild the store for incremental vacuum"))?;
    tracing::info!(
        bytes,
        elapsed_ms = started.elapsed().as_millis(),
        "rebuilt the store once so that free pages can be returned"
    );
    Ok(())
}

/// After a store stopped short: SQLite's quick check of the whole file, and
/// a refusal naming the file and where the damage is, rather than serving
/// queues that fail one by one.
fn refuse_damage(connection: &Connection, path: &Path, data_dir: &Path) -> Result<(), StoreError> {
    let problems = damage::problems(connection, damage::Thoroughness::Quick)?;
    if problems.is_empty() {
        return Ok(());
    }
    Err(StoreError::Corrupt {
        detail: format!(
            "{} is damaged: {}; the store will not open over it (`ackbox store check --data-dir {}` \
             reports it whole)",
            path.display(),
            problems.join("; "),
            data_dir.display()
        ),
    })
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`, migrates it and
    /// starts its writer. The directory is held until [`Store::close`]: a
    /// second store on it is refused ([`StoreError::DataDirInUse`]).
    pub fn open(data_dir: &Path, durability: Durability) -> Result<Self, StoreError> {
        let lock = DataDirLock::acquire(data_dir)?;
        let reserve = Arc::new(DiskReserve::new(data_dir));
        let path = data_dir.join(DATABASE_FILE);
        // The last connection of a clean close checkpoints the WAL and
        // removes it: one left behind means the store stopped short (a
        // crash, a power cut), the one time damage is worth looking for.
        let stopped_short = std::fs::metadata(PathBuf::from(format!("{}-wal", path.display())))
            .is_ok_and(|wal| wal.len() > 0);
        let mut writer_connection = open_connection(&path, OpenFlags::default())?;
        if stopped_short {
            refuse_damage(&writer_connection, &path, data_dir)?;
        }
        keep_free_pages_reclaimable(&writer_connection, &path)?;
        // synchronous=NORMAL: COMMIT does not fsync; the writer fsyncs the
        // WAL itself for groups that need it (see writer/). Checkpoints
        // still sync the WAL before copying it and the database after. The
        // writer replaces SQLite's auto-checkpoint with its own (writer/).
        writer_connection
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = NORMAL;
                 PRAGMA foreign_keys = OFF;
                 PRAGMA temp_store = MEMORY;
                 PRAGMA cache_size = -8192;",
            )
            .map_err(database_error("configure writer connection"))?;
        migrate::migrate(&mut writer_connection)?;
        let reader = open_connection(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let wal_path = PathBuf::from(format!("{}-wal", path.display()));
        let checkpoint_connection = open_connection(&path, OpenFlags::default())?;
        let shm_path = PathBuf::from(format!("{}-shm", path.display()));
        let checkpointer =
            Checkpointer::start(checkpoint_connection, shm_path).map_err(|source| {
                StoreError::Io {
                    path: "ackbox-sqlite-checkpoint thread".to_owned(),
                    source,
                }
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                lock: Mutex::new(Some(lock)),
                checkpointer,
                writer: Writer::start(
                    writer_connection,
                    wal_path,
                    durability,
                    Arc::clone(&reserve),
                )?,
                reserve,
                reader: Mutex::new(reader),
            }),
        })
    }

    /// Holds `bytes` of the disk back, so that a full disk refuses sends
    /// but lets receives, deletes and visibility changes go on (see
    /// [`DiskReserve`]). Fails when there is not that much room.
    pub fn reserve_disk(&self, bytes: u64) -> Result<(), StoreError> {
        self.inner.reserve.hold(bytes)
    }

    /// For a send: the refusal while the disk is full (the reserve given
    /// away and not yet taken back).
    pub(crate) fn refuse_send_while_full(&self) -> Result<(), StoreError> {
        if self.inner.reserve.admit_send() {
            return Ok(());
        }
        Err(StoreError::DiskFull {
            detail: "sends wait for room (the disk reserve is released so that receives and \
                     deletes go on)"
                .to_owned(),
        })
    }

    /// Gives the disk reserve to the store: a write found the disk full.
    pub(crate) fn release_reserve(&self) {
        self.inner.reserve.release();
    }

    /// Forgets messages `seqs` of the standard queue `queue_id`, durably:
    /// adoption moved them into the log.
    pub(crate) async fn messages_forget(
        &self,
        queue_id: i64,
        seqs: Vec<i64>,
    ) -> Result<(), StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                let mut forget = connection
                    .prepare_cached("DELETE FROM messages WHERE queue_id = ?1 AND seq = ?2")
                    .map_err(database_error("messages_forget"))?;
                for seq in &seqs {
                    forget
                        .execute([queue_id, *seq])
                        .map_err(database_error("messages_forget"))?;
                }
                Ok(())
            })
            .await
    }

    /// Forgets that the log took messages: adoption moved them all here.
    pub(crate) async fn clear_log_written(&self) -> Result<(), StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, |connection| {
                connection
                    .execute("DELETE FROM log_written", [])
                    .map(drop)
                    .map_err(database_error("clear_log_written"))
            })
            .await
    }

    /// Whether the log beside this database has ever taken a message.
    pub(crate) async fn log_written(&self) -> Result<bool, StoreError> {
        self.read(|connection| {
            connection
                .query_row("SELECT EXISTS (SELECT 1 FROM log_written)", [], |row| {
                    row.get::<_, bool>(0)
                })
                .map_err(database_error("log_written"))
        })
        .await
    }

    /// Records, durably, that the log beside this database takes messages
    /// from now on.
    pub(crate) async fn mark_log_written(&self, now: i64) -> Result<(), StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                connection
                    .execute(
                        "INSERT OR IGNORE INTO log_written (id, first_sent_at) VALUES (1, ?1)",
                        [now],
                    )
                    .map(drop)
                    .map_err(database_error("mark_log_written"))
            })
            .await
    }

    /// How many messages standard queues hold here: the log store keeps
    /// those in its log, so it must not open a directory where SQLite holds
    /// some.
    pub(crate) async fn standard_message_count(&self) -> Result<u64, StoreError> {
        self.read(|connection| {
            connection
                .query_row(
                    "SELECT COUNT(*) FROM messages m JOIN queues q ON q.id = m.queue_id \
                     WHERE q.fifo = 0",
                    [],
                    |row| row.get::<_, i64>(0),
                )
                .map(|count| u64::try_from(count).unwrap_or_default())
                .map_err(database_error("standard_message_count"))
        })
        .await
    }

    /// Every queue's id and whether it is FIFO.
    pub(crate) async fn queue_kinds(&self) -> Result<Vec<(i64, bool)>, StoreError> {
        self.read(|connection| {
            connection
                .prepare_cached("SELECT id, fifo FROM queues")
                .and_then(|mut select| {
                    select
                        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                        .collect()
                })
                .map_err(database_error("queue_kinds"))
        })
        .await
    }

    /// Starts a move task over a source whose messages live in the log
    /// store; `snapshot` is the log's `(newest seq, matching messages)`.
    pub(crate) async fn move_task_create_over(
        &self,
        params: MoveTaskCreateParams,
        snapshot: (i64, i64),
    ) -> Result<MoveTaskCreateOutcome, StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                move_task::move_task_insert(connection, &params, |_| Ok(snapshot))
            })
            .await
    }

    /// Where a running task stands; `None` when it is not running.
    pub(crate) async fn move_task_position(
        &self,
        handle: &str,
    ) -> Result<Option<TaskPosition>, StoreError> {
        let handle = handle.to_owned();
        self.read(move |connection| move_task::move_task_position(connection, &handle))
            .await
    }

    /// Records the progress of a step whose moves happened in the log store
    /// (and are durable there).
    pub(crate) async fn move_task_record_step(
        &self,
        handle: &str,
        progress: StepProgress,
    ) -> Result<(), StoreError> {
        let handle = handle.to_owned();
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                move_task::move_task_record_step(connection, &handle, &progress)
            })
            .await
    }

    /// Resumes a paused task over the log store, whose source holds
    /// `relapsed` of the task's messages now.
    pub(crate) async fn move_task_resume_with(
        &self,
        handle: &str,
        relapsed: i64,
    ) -> Result<Option<MoveTaskRecord>, StoreError> {
        let handle = handle.to_owned();
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                move_task::move_task_resume(connection, &handle, Some(relapsed))
            })
            .await
    }

    async fn read<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let reader = inner.reader.lock().expect("reader lock poisoned");
            work(&reader)
        })
        .await
        .map_err(|_| StoreError::Unavailable {
            reason: "a read task was cancelled",
        })?
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn queue_create(
        &self,
        params: QueueCreateParams,
    ) -> Result<QueueCreateOutcome, StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                queue::queue_create(connection, &params)
            })
            .await
    }

    async fn queue_list(&self) -> Result<Vec<QueueRecord>, StoreError> {
        self.read(|connection| {
            let mut select = connection
                .prepare_cached(&format!("SELECT {QUEUE_COLUMNS} FROM queues ORDER BY name"))
                .map_err(database_error("queue_list: prepare"))?;
            let rows = select
                .query_map([], queue_from_row)
                .map_err(database_error("queue_list: select"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(database_error("queue_list: read row"))?;
            rows.into_iter().map(queue_record).collect()
        })
        .await
    }

    async fn queue_get(&self, name: &str) -> Result<Option<QueueRecord>, StoreError> {
        let name = name.to_owned();
        self.read(move |connection| {
            connection
                .query_row(
                    &format!("SELECT {QUEUE_COLUMNS} FROM queues WHERE name = ?1"),
                    [&name],
                    queue_from_row,
                )
                .optional()
                .map_err(database_error("queue_get"))?
                .map(queue_record)
                .transpose()
        })
        .await
    }

    async fn queue_update(&self, params: QueueUpdateParams) -> Result<(), StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                queue::queue_update(connection, &params)
            })
            .await
    }

    async fn queue_delete(&self, params: QueueDeleteParams) -> Result<bool, StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                queue::queue_delete(connection, &params)
            })
            .await
    }

    async fn queue_purge(&self, params: QueuePurgeParams) -> Result<QueuePurgeOutcome, StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                queue::queue_purge(connection, &params)
            })
            .await
    }

    async fn queue_stats(&self, params: QueueStatsParams) -> Result<QueueStats, StoreError> {
        self.read(move |connection| {
            connection
                .prepare_cached(
                    "SELECT COALESCE(SUM(visible_at <= ?2), 0),
                            COALESCE(SUM(visible_at > ?2 AND receive_count > 0), 0),
                            COALESCE(SUM(visible_at > ?2 AND receive_count = 0), 0),
                            (SELECT MIN(sent_at) FROM messages WHERE queue_id = ?1)
                     FROM messages WHERE queue_id = ?1",
                )
                .and_then(|mut select| {
                    select.query_row(params![params.queue_id, params.now], |row| {
                        Ok(QueueStats {
                            visible: row.get::<_, i64>(0)?.unsigned_abs(),
                            in_flight: row.get::<_, i64>(1)?.unsigned_abs(),
                            delayed: row.get::<_, i64>(2)?.unsigned_abs(),
                            oldest_sent_at: row.get(3)?,
                        })
                    })
                })
                .map_err(database_error("queue_stats"))
        })
        .await
    }

    async fn message_insert_batch(
        &self,
        params: MessageInsertParams,
    ) -> Result<Vec<InsertedMessage>, StoreError> {
        self.refuse_send_while_full()?;
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                message::message_insert_batch(connection, &params)
            })
            .await
    }

    async fn message_insert_atomic(
        &self,
        batches: Vec<MessageInsertParams>,
    ) -> Result<Vec<Vec<InsertedMessage>>, StoreError> {
        self.refuse_send_while_full()?;
        // One job: its savepoint undoes every queue's rows if one fails.
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                batches
                    .iter()
                    .map(|params| message::message_insert_batch(connection, params))
                    .collect()
            })
            .await
    }

    async fn message_receive(
        &self,
        params: MessageReceiveParams,
    ) -> Result<ReceiveOutcome, StoreError> {
        self.inner
            .writer
            .submit(Commit::Lazy, move |connection| {
                receive::message_receive(connection, &params)
            })
            .await
    }

    async fn message_delete_batch(
        &self,
        params: MessageDeleteParams,
    ) -> Result<Vec<DeleteOutcome>, StoreError> {
        self.inner
            .writer
            .submit(Commit::Lazy, move |connection| {
                message::message_delete_batch(connection, &params)
            })
            .await
    }

    async fn message_change_visibility_batch(
        &self,
        params: MessageChangeVisibilityParams,
    ) -> Result<Vec<ChangeVisibilityOutcome>, StoreError> {
        self.inner
            .writer
            .submit(Commit::Lazy, move |connection| {
                message::message_change_visibility_batch(connection, &params)
            })
            .await
    }

    async fn message_nack(&self, params: MessageNackParams) -> Result<NackOutcome, StoreError> {
        // Durable: a recorded failure reason is what an operator reads in
        // the dead-letter queue, and a move to it must not be undone.
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                message::message_nack(connection, &params)
            })
            .await
    }

    async fn message_failure_classes(
        &self,
        queue_id: i64,
        sent_before: Option<Timestamp>,
    ) -> Result<Vec<FailureClassCount>, StoreError> {
        let sent_before = sent_before.unwrap_or(Timestamp::MAX);
        self.read(move |connection| {
            connection
                .prepare_cached(
                    "SELECT COALESCE(last_failure_class, ''), COUNT(*), MIN(sent_at), MAX(sent_at),
                            (SELECT last_failure_message FROM messages AS oldest
                             WHERE oldest.queue_id = ?1 AND oldest.sent_at <= ?2
                               AND COALESCE(oldest.last_failure_class, '') = COALESCE(grouped.last_failure_class, '')
                             ORDER BY seq LIMIT 1)
                     FROM messages AS grouped WHERE queue_id = ?1 AND sent_at <= ?2
                     GROUP BY COALESCE(last_failure_class, '') ORDER BY COUNT(*) DESC",
                )
                .and_then(|mut select| {
                    select
                        .query_map([queue_id, sent_before], |row| {
                            Ok(FailureClassCount {
                                class: row.get(0)?,
                                count: row.get(1)?,
                                oldest_sent_at: row.get(2)?,
                                newest_sent_at: row.get(3)?,
                                example: row.get(4)?,
                            })
                        })?
                        .collect::<Result<Vec<_>, _>>()
                })
                .map_err(database_error("message_failure_classes"))
        })
        .await
    }

    async fn message_peek(
        &self,
        params: MessagePeekParams,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.read(move |connection| message::message_peek(connection, &params))
            .await
    }

    async fn move_task_create(
        &self,
        params: MoveTaskCreateParams,
    ) -> Result<MoveTaskCreateOutcome, StoreError> {
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                move_task::move_task_create(connection, &params)
            })
            .await
    }

    async fn move_task_step(
        &self,
        params: MoveTaskStepParams,
    ) -> Result<MoveTaskStepOutcome, StoreError> {
        // Durable: a moved message must not move back on a power loss, or a
        // redriven message could be processed and then redriven again.
        self.inner
            .writer
            .submit_in_background(Commit::Durable, move |connection| {
                move_task::move_task_step(connection, &params)
            })
            .await
    }

    async fn move_task_resume(&self, handle: &str) -> Result<Option<MoveTaskRecord>, StoreError> {
        let handle = handle.to_owned();
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                move_task::move_task_resume(connection, &handle, None)
            })
            .await
    }

    async fn move_task_cancel(
        &self,
        handle: &str,
        now: Timestamp,
    ) -> Result<Option<MoveTaskRecord>, StoreError> {
        let handle = handle.to_owned();
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                move_task::move_task_cancel(connection, &handle, now)
            })
            .await
    }

    async fn move_task_list(
        &self,
        filter: MoveTaskFilter,
        limit: u32,
    ) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.read(move |connection| {
            let columns = move_task::MOVE_TASK_COLUMNS;
            let order = "ORDER BY started_at DESC, rowid DESC";
            let query = |sql: String, values: &[&dyn rusqlite::ToSql]| {
                connection
                    .prepare_cached(&sql)
                    .and_then(|mut select| {
                        select
                            .query_map(values, move_task::move_task_row)?
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .map_err(database_error("move_task_list"))
            };
            match filter {
                MoveTaskFilter::Running => query(
                    format!(
                        "SELECT {columns} FROM move_tasks WHERE status = 'RUNNING' {order} LIMIT ?1"
                    ),
                    &[&limit],
                ),
                MoveTaskFilter::Source(arn) => query(
                    format!(
                        "SELECT {columns} FROM move_tasks WHERE source_arn = ?1 {order} LIMIT ?2"
                    ),
                    &[&arn, &limit],
                ),
                MoveTaskFilter::All => query(
                    format!("SELECT {columns} FROM move_tasks {order} LIMIT ?1"),
                    &[&limit],
                ),
                MoveTaskFilter::Handle(handle) => query(
                    format!("SELECT {columns} FROM move_tasks WHERE handle = ?1 {order} LIMIT ?2"),
                    &[&handle, &limit],
                ),
            }
        })
        .await
    }

    async fn message_expire(&self, params: MessageExpireParams) -> Result<u64, StoreError> {
        self.inner
            .writer
            .submit_in_background(Commit::Lazy, move |connection| {
                sweep::message_expire(connection, &params)
            })
            .await
    }

    async fn fifo_window_expire(&self, before: Timestamp) -> Result<u64, StoreError> {
        // Forgetting late is harmless: a lookup checks the entry's age itself.
        self.inner
            .writer
            .submit_in_background(Commit::Lazy, move |connection| {
                fifo::window_expire(connection, before)
            })
            .await
    }

    async fn message_sweep_left_behind(&self, limit: u32) -> Result<u64, StoreError> {
        let Some(left_behind) = self.read(sweep::left_behind).await? else {
            return Ok(0);
        };
        // Dropping late is harmless: a power loss brings back only messages
        // that the sweeper drops again.
        self.inner
            .writer
            .submit_in_background(Commit::Lazy, move |connection| {
                sweep::message_sweep_left_behind(connection, left_behind, limit)
            })
            .await
    }

    fn disk_full(&self) -> bool {
        self.inner.writer.disk_full() || self.inner.reserve.refusing_sends()
    }

    async fn topic_list(&self) -> Result<Vec<TopicRecord>, StoreError> {
        self.read(topic::topic_list).await
    }

    async fn topic_get(&self, name: &str) -> Result<Option<TopicRecord>, StoreError> {
        let name = name.to_owned();
        self.read(move |connection| topic::topic_get(connection, &name))
            .await
    }

    async fn topic_write(
        &self,
        name: &str,
        definition: String,
        revision: Option<i64>,
    ) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                topic::topic_write(connection, &name, &definition, revision)
            })
            .await
    }

    async fn topic_delete(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.inner
            .writer
            .submit(Commit::Durable, move |connection| {
                topic::topic_delete(connection, &name)
            })
            .await
    }

    async fn close(&self) -> Result<(), StoreError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            inner.checkpointer.stop();
            inner.writer.close();
            // Written and closed: the directory is free for the next store.
            drop(inner.lock.lock().expect("lock slot poisoned").take());
        })
        .await
        .map_err(|_| StoreError::Unavailable {
            reason: "closing the writer was cancelled",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn damage_found_after_stopping_short_stops_the_open_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), Durability::Fsync).unwrap();
        let QueueCreateOutcome::Created(queue) = store
            .queue_create(QueueCreateParams {
                name: "damaged".to_owned(),
                attributes: Default::default(),
                tags: Default::default(),
                now: 1_700_000_000_000,
                deleted_after: 0,
                fifo: false,
            })
            .await
            .unwrap()
        else {
            panic!("not created");
        };
        let messages = (0..300)
            .map(|index| crate::store::NewMessage {
                message_id: format!("m{index}"),
                body: "x".repeat(200),
                attributes: Default::default(),
                md5_of_body: "md5".to_owned(),
                md5_of_attributes: None,
                trace_header: None,
                group_id: None,
                sender_id: "me".to_owned(),
                sent_at: 1_700_000_000_000,
                visible_at: 1_700_000_000_000,
                deduplication: None,
            })
            .collect();
        store
            .message_insert_batch(MessageInsertParams {
                queue_id: queue.id,
                messages,
                deduplication_window_start: 0,
            })
            .await
            .unwrap();
        store.close().await.unwrap();
        drop(store);
        let database = dir.path().join(DATABASE_FILE);
        let wal = PathBuf::from(format!("{}-wal", database.display()));
        assert!(
            std::fs::metadata(&wal).map_or(true, |wal| wal.len() == 0),
            "a clean close leaves no WAL"
        );
        // The last page (messages' rows) has its cells overwritten.
        let mut bytes = std::fs::read(&database).unwrap();
        let page_size = 4096;
        let last_page = bytes.len() / page_size - 1;
        bytes[(last_page + 1) * page_size - 300..(last_page + 1) * page_size].fill(0xFF);
        std::fs::write(&database, &bytes).unwrap();

        // Left behind by a crash: a WAL (whose frames are garbage here).
        std::fs::write(&wal, [7u8; 64]).unwrap();
        let refused = SqliteStore::open(dir.path(), Durability::Fsync).err();
        let Some(StoreError::Corrupt { detail }) = refused else {
            panic!("opened over a damaged database: {refused:?}");
        };
        assert!(detail.contains(&database.display().to_string()), "{detail}");
        assert!(detail.contains("starts at byte"), "{detail}");
        assert!(detail.contains("ackbox store check"), "{detail}");
    }

    fn auto_vacuum(data_dir: &Path) -> i64 {
        Connection::open(data_dir.join(DATABASE_FILE))
            .unwrap()
            .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
            .unwrap()
    }

    async fn open_and_close(data_dir: &Path) {
        SqliteStore::open(data_dir, Durability::Fsync)
            .unwrap()
            .close()
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_deleted_fifo_queues_group_rows_go_with_the_messages_the_sweeper_drops() {
        use crate::store::NewMessage;
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), Durability::Fsync).unwrap();
        let now = 1_700_000_000_000;
        let QueueCreateOutcome::Created(queue) = store
            .queue_create(QueueCreateParams {
                name: "gone.fifo".to_owned(),
                attributes: std::collections::BTreeMap::new(),
                tags: std::collections::BTreeMap::new(),
                now,
                deleted_after: now - 60_000,
                fifo: true,
            })
            .await
            .unwrap()
        else {
            panic!("a new queue is created");
        };
        let messages = (0..12)
            .map(|n| NewMessage {
                message_id: format!("m{n}"),
                body: format!("m{n}"),
                attributes: Default::default(),
                md5_of_body: "md5".to_owned(),
                md5_of_attributes: None,
                trace_header: None,
                group_id: Some(format!("g{}", n % 3)),
                sender_id: "sender".to_owned(),
                sent_at: now,
                visible_at: now,
                deduplication: None,
            })
            .collect();
        store
            .message_insert_batch(MessageInsertParams {
                queue_id: queue.id,
                messages,
                deduplication_window_start: now - 300_000,
            })
            .await
            .unwrap();
        store
            .queue_delete(QueueDeleteParams {
                queue_id: queue.id,
                now,
            })
            .await
            .unwrap();
        let group_rows = || -> i64 {
            Connection::open(dir.path().join(DATABASE_FILE))
                .unwrap()
                .query_row(
                    "SELECT COUNT(*) FROM fifo_groups WHERE queue_id = ?1",
                    [queue.id],
                    |row| row.get(0),
                )
                .unwrap()
        };
        assert_eq!(group_rows(), 3, "DeleteQueue leaves them to the sweep");
        while store.message_sweep_left_behind(5).await.unwrap() > 0 {}
        assert_eq!(group_rows(), 0, "no group row outlives its messages");
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn new_and_older_stores_return_free_pages() {
        let new = tempfile::tempdir().unwrap();
        open_and_close(new.path()).await;
        assert_eq!(
            auto_vacuum(new.path()),
            AUTO_VACUUM_INCREMENTAL,
            "a new store is INCREMENTAL"
        );

        let older = tempfile::tempdir().unwrap();
        Connection::open(older.path().join(DATABASE_FILE))
            .unwrap()
            .execute_batch(
                "PRAGMA auto_vacuum = NONE; PRAGMA journal_mode = WAL;
                 CREATE TABLE kept (v TEXT); INSERT INTO kept VALUES ('still here');",
            )
            .unwrap();
        assert_eq!(auto_vacuum(older.path()), 0);
        open_and_close(older.path()).await;
        assert_eq!(
            auto_vacuum(older.path()),
            AUTO_VACUUM_INCREMENTAL,
            "an older store is rebuilt"
        );
        let kept: String = Connection::open(older.path().join(DATABASE_FILE))
            .unwrap()
            .query_row("SELECT v FROM kept", [], |row| row.get(0))
            .unwrap();
        assert_eq!(kept, "still here");
    }
}
