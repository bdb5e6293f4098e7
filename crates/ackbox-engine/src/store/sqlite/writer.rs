//! The single SQLite writer: group commit, one committer at a time.
//!
//! Every mutation is a [`Job`] pushed onto a bounded queue. Whoever holds the
//! committer role takes all queued jobs (up to [`MAX_JOBS_PER_COMMIT`]), runs
//! them in one transaction and commits. A job that fails must leave no trace
//! while its group mates' changes stay: a job that fails before changing a
//! row leaves none, and when one fails after changing rows the transaction
//! is rolled back and the group runs again with a savepoint per job (which
//! costs a copy of every page each job touches, so it is not the rule). In
//! [`Durability::Fsync`] mode it then hands the group to the flusher thread,
//! which fsyncs the WAL and only then completes every job of every group
//! committed before that fsync began. A caller is therefore never told "done"
//! before its change is durable, concurrent callers share one fsync, and the
//! next group is built and committed while the disk is still busy with the
//! previous one.
//!
//! The role goes to a submitting task when nobody holds it: that task yields
//! once, so the requests ready on its thread queue their jobs too, and then
//! commits the group on its own thread. Handing every job to a writer thread
//! and the answer back costs two thread wake-ups per request, which on a
//! small machine cost more than committing a small group. The writer thread
//! takes the role when a submitter leaves work behind (under load it keeps
//! it while the queue refills, and submitters only queue), for timed chores,
//! and to drain the queue when the store closes.
//!
//! Backpressure: at most [`QUEUE_CAPACITY`] jobs wait; further submitters wait
//! asynchronously for a slot instead of growing memory without bound.
//!
//! Not every write must reach the disk before its caller hears back: a lease
//! taken by a receive ([`Commit::Lazy`]) that is lost to a power failure only
//! makes the message visible early, which at-least-once delivery allows. A
//! group made only of lazy jobs commits without an fsync; the next durable
//! commit's fsync covers it, since the WAL is synced as a whole.
//!
//! When no job came for a while, the writer returns the file's free pages to
//! the file system a step at a time (`PRAGMA incremental_vacuum`), so that a
//! store that drained appends its next messages instead of scattering them
//! over old pages. Under load it leaves them: inserts reuse them anyway.
//!
//! The writer thread also makes the backstop checkpoint once a commit leaves
//! [`BACKSTOP_CHECKPOINT_FRAMES`] in the WAL (the checkpointer thread's
//! passive checkpoints copy most of it before): SQLite's own auto-checkpoint
//! would run inside the commit, on whichever request thread committed.

use std::cell::Cell;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::later_file::LaterFile;
use crate::store::StoreError;
use crate::store::data_dir::DiskReserve;

/// Jobs committed together at most; bounds the latency one commit adds.
const MAX_JOBS_PER_COMMIT: usize = 512;
/// Jobs waiting for the writer at most.
const QUEUE_CAPACITY: usize = 4_096;
/// Free pages are left alone below this many (4 MiB of 4 KiB pages)…
const RECLAIM_MIN_FREE_PAGES: i64 = 1_024;
/// …or below this fraction of the file (1/8).
const RECLAIM_MIN_FREE_SHARE_DIVISOR: i64 = 8;
/// Pages returned per step; bounds how long a job arriving meanwhile waits.
const RECLAIM_PAGES_PER_STEP: i64 = 1_024;
/// A step is taken only after this long without a commit: a steady trickle
/// of jobs (1,000 a second) never waits behind one.
const RECLAIM_AFTER_IDLE: Duration = Duration::from_millis(50);
/// How soon the writer thread looks again for a due chore while a
/// submitter holds the committer role.
const CHORE_RETRY: Duration = Duration::from_millis(1);
/// WAL frames (of 4 KiB pages: 32 MiB) after which the writer thread
/// checkpoints on the writer connection, as the backstop under the
/// checkpointer thread's passive checkpoints: only a checkpoint made while
/// no commit can append catches the WAL's last frames, which lets SQLite
/// write the WAL again from its start instead of growing it.
const BACKSTOP_CHECKPOINT_FRAMES: i32 = 8_192;

thread_local! {
    /// Frames in the WAL after this thread's last commit, as SQLite's WAL
    /// hook reported them; -1 when the commit wrote none.
    static WAL_FRAMES: Cell<i32> = const { Cell::new(-1) };
}

/// The writer connection's WAL hook, in place of SQLite's auto-checkpoint,
/// which would copy the WAL and fsync the database file inside the commit,
/// on the request thread that committed (5–12 % of its time under load,
/// measured).
/// The hook only notes the WAL's size; the writer thread checkpoints.
#[expect(
    clippy::unnecessary_wraps,
    reason = "the signature rusqlite's wal_hook takes"
)]
fn note_wal_frames(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|noted| noted.set(frames));
    Ok(())
}

/// How hard a commit is pushed to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Every commit fsyncs the WAL before any caller is answered.
    Fsync,
    /// Commits reach the OS at once (a process crash loses nothing) but are
    /// fsynced at most every `sync_interval`: a power loss or kernel crash
    /// can lose the acknowledged writes of that last interval.
    Relaxed {
        /// Longest time an acknowledged write stays un-fsynced.
        sync_interval: Duration,
    },
}

/// Whether a job's caller may be answered before its commit is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    /// Answer only after the commit is on disk (per the [`Durability`] mode).
    Durable,
    /// Answer after the commit reaches the OS; a power loss may undo it.
    Lazy,
}

/// Called once the job's transaction has committed (`true`) or failed (`false`).
type Completion = Box<dyn FnOnce(bool) + Send>;

/// How running a group's jobs went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ran {
    /// Every job ran; this many succeeded (the others changed nothing).
    Completed { succeeded: usize },
    /// A job failed after changing rows, which only a rollback undoes.
    FailedAfterWriting,
    /// The group cannot commit: a job panicked or the transaction is gone.
    Abandoned,
}

/// A mutation waiting for its group commit. It can run twice: first beside
/// the rest of its group, and again in a savepoint of its own when a group
/// mate failed after writing (see [`Committer::commit`]).
trait Job: Send {
    /// Runs the mutation and keeps its result; `true` if it succeeded.
    fn run(&mut self, connection: &Connection) -> bool;
    /// How to answer the caller with the result of the last run.
    fn into_completion(self: Box<Self>) -> Completion;
}

/// A caller's mutation and the channel its answer goes back on.
struct Submitted<T, F> {
    work: F,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Submitted<T, F>
where
    T: Send + 'static,
    F: FnMut(&Connection) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, connection: &Connection) -> bool {
        let result = (self.work)(connection);
        let succeeded = result.is_ok();
        self.result = Some(result);
        succeeded
    }

    fn into_completion(self: Box<Self>) -> Completion {
        let Self { result, reply, .. } = *self;
        Box::new(move |committed| {
            let outcome = match result {
                Some(result) if committed => result,
                _ => Err(StoreError::Unavailable {
                    reason: "the write transaction failed to commit",
                }),
            };
            // The caller may have gone away (request cancelled); the write stands.
            let _ = reply.send(outcome);
        })
    }
}

struct Pending {
    job: Box<dyn Job>,
    commit: Commit,
    /// Released when the writer takes the job, making room for another.
    _slot: OwnedSemaphorePermit,
}

/// State shared between submitters and the writer thread.
struct Shared {
    jobs: Mutex<Queue>,
    /// Signalled when the writer thread must act: the committer role was
    /// handed to it, a timer changed, or the store closes.
    wake: Condvar,
    /// The connection and its bookkeeping; locked only by the role holder.
    committer: Mutex<Committer>,
}

/// Who runs the queued jobs now. Exactly one holder at a time, so the
/// connection is never contended and no job waits without someone bound to
/// drain it: every push happens under the queue lock and every release
/// re-checks the queue under the same lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Nobody: the next submitter commits its own job (and whatever joined it).
    Free,
    /// A submitting task commits one group on its own thread.
    Submitter,
    /// The writer thread commits until the queue is empty.
    Thread,
}

struct Queue {
    pending: VecDeque<Pending>,
    closing: bool,
    role: Role,
    /// The writer thread waits on `wake`; only then is a signal needed.
    writer_waiting: bool,
    /// When the writer thread must next take the role for a timed chore (a
    /// relaxed-mode fsync, a free-page step), as last computed by a holder.
    chore_at: Option<Instant>,
}

impl Queue {
    /// The next group: every queued job, up to [`MAX_JOBS_PER_COMMIT`].
    fn take_group(&mut self) -> Vec<Pending> {
        let take = self.pending.len().min(MAX_JOBS_PER_COMMIT);
        self.pending.drain(..take).collect()
    }

    /// Gives the role up: to the writer thread when work is left (or the
    /// store closes), otherwise to whoever submits next. Records when the
    /// writer's next chore is due and wakes it if that is sooner than it knew.
    fn release(&mut self, chore_at: Option<Instant>, wake: &Condvar) {
        let sooner = match (chore_at, self.chore_at) {
            (Some(new), Some(known)) => new < known,
            (new, _) => new.is_some(),
        };
        self.chore_at = chore_at;
        if !self.pending.is_empty() || self.closing {
            self.role = Role::Thread;
            wake.notify_one();
        } else {
            self.role = Role::Free;
            if sooner && self.writer_waiting {
                wake.notify_one();
            }
        }
    }
}

/// Where a submitted job may be committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Committed {
    /// On the submitting thread, when nobody else is committing.
    WhereSubmitted,
    /// On the writer thread.
    OnWriterThread,
}

/// Handle to the writer thread. Dropping it without [`Writer::close`] tells
/// the thread to commit what is queued and exit, without waiting for it.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set when a write fails for want of space, cleared when a durable
    /// write commits again; shared with the committer.
    disk_full: Arc<AtomicBool>,
    /// Released when a write finds the disk full, so that what is not a
    /// send goes on.
    reserve: Arc<DiskReserve>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

/// A submitter's hold on [`Role::Submitter`]. If the submitting task is
/// dropped before it commits (its request was cancelled while it yielded),
/// the role passes to the writer thread so the queued jobs still commit.
struct SubmitterRole<'a> {
    shared: &'a Shared,
    held: bool,
}

impl SubmitterRole<'_> {
    /// Commits one group (the jobs queued now, this submitter's among them)
    /// on the calling thread, then gives the role up.
    fn commit_one_group(mut self) {
        let batch = self
            .shared
            .jobs
            .lock()
            .expect("writer queue lock poisoned")
            .take_group();
        let chore_at = {
            let mut committer = self
                .shared
                .committer
                .lock()
                .expect("writer state lock poisoned");
            committer.commit(batch);
            committer.sync_if_due(false);
            committer.chore_at()
        };
        self.held = false;
        self.shared
            .jobs
            .lock()
            .expect("writer queue lock poisoned")
            .release(chore_at, &self.shared.wake);
    }
}

impl Drop for SubmitterRole<'_> {
    fn drop(&mut self) {
        if self.held
            && let Ok(mut queue) = self.shared.jobs.lock()
        {
            queue.role = Role::Thread;
            self.shared.wake.notify_one();
        }
    }
}

impl Writer {
    /// Starts the writer thread on `connection`.
    pub(crate) fn start(
        connection: Connection,
        wal_path: PathBuf,
        durability: Durability,
        reserve: Arc<DiskReserve>,
    ) -> Result<Self, StoreError> {
        let thread_error = |source| StoreError::Io {
            path: "ackbox-sqlite-writer thread".to_owned(),
            source,
        };
        let flusher = match durability {
            Durability::Fsync => {
                Some(Flusher::start(WalFile::new(wal_path.clone())).map_err(thread_error)?)
            }
            Durability::Relaxed { .. } => None,
        };
        connection.wal_hook(Some(note_wal_frames));
        let reclaim = Reclaim {
            enabled: connection
                .query_row("PRAGMA auto_vacuum", [], |row| row.get::<_, i64>(0))
                .map_err(|source| StoreError::Database {
                    operation: "read auto_vacuum",
                    source,
                })?
                == super::AUTO_VACUUM_INCREMENTAL,
            ..Reclaim::default()
        };
        let disk_full = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            jobs: Mutex::new(Queue {
                pending: VecDeque::new(),
                closing: false,
                role: Role::Free,
                writer_waiting: false,
                chore_at: None,
            }),
            wake: Condvar::new(),
            committer: Mutex::new(Committer {
                disk_full: Arc::clone(&disk_full),
                connection,
                wal: WalFile::new(wal_path),
                durability,
                unsynced_since: None,
                flusher,
                reclaim,
                checkpoint_due: false,
            }),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ackbox-sqlite-writer".to_owned())
            .spawn(move || run_writer_thread(&thread_shared))
            .map_err(thread_error)?;
        Ok(Self {
            shared,
            slots: Arc::new(Semaphore::new(QUEUE_CAPACITY)),
            thread: Mutex::new(Some(thread)),
            disk_full,
            reserve,
        })
    }

    /// Runs `work` in the next group commit and returns its result once durable.
    ///
    /// When nobody is committing, the submitting task commits the group
    /// itself, on its own thread, after yielding once so that the other
    /// requests ready on this thread join the group: a hand-over to the
    /// writer thread and back costs two thread wake-ups per request, more
    /// than the commit of a small group.
    pub(crate) async fn submit<T, F>(&self, commit: Commit, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.enqueue(commit, Committed::WhereSubmitted, work).await
    }

    /// Like [`Writer::submit`], but the job always runs on the writer thread:
    /// for bulk background work (sweeps of thousands of rows) that would
    /// otherwise hold a request thread, and every request waiting on it,
    /// for its whole run.
    pub(crate) async fn submit_in_background<T, F>(
        &self,
        commit: Commit,
        work: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.enqueue(commit, Committed::OnWriterThread, work).await
    }

    async fn enqueue<T, F>(
        &self,
        commit: Commit,
        place: Committed,
        work: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let slot =
            Arc::clone(&self.slots)
                .acquire_owned()
                .await
                .map_err(|_| StoreError::Unavailable {
                    reason: "the store is closed",
                })?;
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Submitted {
            work,
            result: None,
            reply,
        });
        let commits_itself = {
            let mut queue = self.shared.jobs.lock().expect("writer queue lock poisoned");
            if queue.closing {
                return Err(StoreError::Unavailable {
                    reason: "the store is closed",
                });
            }
            queue.pending.push_back(Pending {
                job,
                commit,
                _slot: slot,
            });
            // A holder re-checks the queue before releasing: no signal needed.
            match (queue.role, place) {
                (Role::Free, Committed::WhereSubmitted) => {
                    queue.role = Role::Submitter;
                    true
                }
                (Role::Free, Committed::OnWriterThread) => {
                    queue.role = Role::Thread;
                    self.shared.wake.notify_one();
                    false
                }
                _ => false,
            }
        };
        if commits_itself {
            let role = SubmitterRole {
                shared: &self.shared,
                held: true,
            };
            tokio::task::yield_now().await;
            role.commit_one_group();
        }
        let outcome = answer.await.map_err(|_| StoreError::Unavailable {
            reason: "the writer stopped before answering",
        })?;
        // A commit that failed for space answers `Unavailable`; the flag
        // it set says why.
        if outcome.is_err() && self.disk_full.load(Ordering::Acquire) {
            self.reserve.release();
        }
        match &outcome {
            Err(StoreError::DiskFull { .. }) => {
                self.disk_full.store(true, Ordering::Release);
                self.reserve.release();
            }
            // A durable write that commits is what a full disk refuses first.
            Ok(_) if commit == Commit::Durable => self.disk_full.store(false, Ordering::Release),
            _ => {}
        }
        outcome
    }

    /// Whether the last writes failed for want of space (and no durable
    /// write has committed since).
    pub(crate) fn disk_full(&self) -> bool {
        self.disk_full.load(Ordering::Acquire)
    }

    /// Commits what is queued, stops the thread and waits for it. Idempotent.
    pub(crate) fn close(&self) {
        self.slots.close();
        {
            let mut queue = self.shared.jobs.lock().expect("writer queue lock poisoned");
            queue.closing = true;
        }
        self.shared.wake.notify_one();
        let thread = self
            .thread
            .lock()
            .expect("writer thread lock poisoned")
            .take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the SQLite writer thread panicked");
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Ok(mut queue) = self.shared.jobs.lock() {
            queue.closing = true;
        }
        self.shared.wake.notify_one();
    }
}

/// The WAL as the fsyncs see it. The connection runs with
/// `synchronous=NORMAL` (no fsync inside COMMIT), so the writer decides per
/// group whether to wait for the disk; a sync of the WAL covers every commit
/// before it. fsync acts on the inode, so a second descriptor flushes what
/// SQLite's own descriptor wrote. The descriptor is kept: opening the file
/// by name for every fsync cost two more system calls and a path lookup per
/// group, and a kept descriptor also hears of a write-back error that
/// happened before the next fsync, which a freshly opened one would not.
/// SQLite removes the WAL only when its last connection closes, after
/// every fsync.
struct WalFile(LaterFile);

impl WalFile {
    fn new(path: PathBuf) -> Self {
        Self(LaterFile::new(path))
    }

    fn display(&self) -> std::path::Display<'_> {
        self.0.path().display()
    }

    /// Syncs the WAL; nothing to sync while it does not exist.
    fn sync(&mut self) -> std::io::Result<()> {
        let started = Instant::now();
        let synced = self
            .0
            .get()
            .and_then(|wal| wal.map_or(Ok(()), std::fs::File::sync_data));
        // The floor under every durable write's latency: the disk's, not ours.
        metrics::histogram!("ackbox_store_fsync_seconds").record(started.elapsed());
        synced
    }
}

/// The fsync thread of [`Durability::Fsync`] mode.
struct Flusher {
    /// Committed groups waiting for an fsync; written by the writer thread,
    /// read by the flusher thread. Dropping it stops the flusher.
    groups: mpsc::Sender<Vec<Completion>>,
    thread: JoinHandle<()>,
}

impl Flusher {
    fn start(mut wal: WalFile) -> std::io::Result<Self> {
        let (groups, committed) = mpsc::channel::<Vec<Completion>>();
        let thread = std::thread::Builder::new()
            .name("ackbox-sqlite-flusher".to_owned())
            .spawn(move || {
                let (mut fsyncs, mut groups, mut jobs) = (0u64, 0u64, 0u64);
                while let Ok(first) = committed.recv() {
                    // Every group already committed rides on this one fsync.
                    let mut ready = vec![first];
                    ready.extend(committed.try_iter());
                    fsyncs += 1;
                    groups += ready.len() as u64;
                    jobs += ready.iter().map(|group| group.len() as u64).sum::<u64>();
                    let synced = wal.sync();
                    if let Err(error) = &synced {
                        // The commits are visible but may not survive a power
                        // loss: do not tell anyone they are safe.
                        tracing::error!(%error, path = %wal.display(), "WAL fsync failed; groups are not acknowledged");
                    }
                    for complete in ready.into_iter().flatten() {
                        complete(synced.is_ok());
                    }
                }
                tracing::info!(fsyncs, groups, jobs, "flusher stopped");
            })?;
        Ok(Self { groups, thread })
    }

    /// Waits for every handed-over group to be synced and answered.
    fn finish(self) {
        drop(self.groups);
        if self.thread.join().is_err() {
            tracing::error!("the SQLite flusher thread panicked");
        }
    }
}

/// The writer connection and what committing needs to remember between
/// groups; used by whoever holds the committer [`Role`].
struct Committer {
    /// The writer's disk-full flag: a commit that fails with `SQLITE_FULL`
    /// sets it.
    disk_full: Arc<AtomicBool>,
    connection: Connection,
    wal: WalFile,
    durability: Durability,
    /// When the oldest durable commit not yet fsynced was made (relaxed mode).
    unsynced_since: Option<Instant>,
    /// In fsync mode, the thread that syncs committed groups and answers them.
    flusher: Option<Flusher>,
    reclaim: Reclaim,
    /// A commit left [`BACKSTOP_CHECKPOINT_FRAMES`] in the WAL; the writer
    /// thread checkpoints next.
    checkpoint_due: bool,
}

/// When the writer last looked at free pages, and whether commits since may
/// have freed more.
#[derive(Debug, Default)]
struct Reclaim {
    /// The file was made with `auto_vacuum = INCREMENTAL`; otherwise free
    /// pages cannot be returned and are never looked at.
    enabled: bool,
    /// Set by a commit, cleared once the free pages are below the thresholds.
    pending: bool,
    /// When the writer last committed or took a step.
    last_busy: Option<Instant>,
}

impl Reclaim {
    fn busy(&mut self) {
        self.pending = true;
        self.last_busy = Some(Instant::now());
    }

    fn due_at(&self) -> Option<Instant> {
        if !(self.enabled && self.pending) {
            return None;
        }
        Some(
            self.last_busy
                .map_or_else(Instant::now, |last| last + RECLAIM_AFTER_IDLE),
        )
    }
}

/// The writer thread: takes the committer role when a submitter hands it
/// over (work was left), when a timed chore is due, and to drain the queue
/// when the store closes.
fn run_writer_thread(shared: &Shared) {
    let mut queue = shared.jobs.lock().expect("writer queue lock poisoned");
    loop {
        let now = Instant::now();
        let chore_due = queue.chore_at.is_some_and(|at| at <= now);
        let takes_role = queue.role == Role::Thread
            || (queue.role == Role::Free
                && (queue.closing || chore_due || !queue.pending.is_empty()));
        if !takes_role {
            queue.writer_waiting = true;
            // A submitter holding the role releases it without a signal
            // unless work is left: look again shortly for a chore that is due.
            let wait = if chore_due {
                Some(CHORE_RETRY)
            } else {
                queue.chore_at.map(|at| at - now)
            };
            queue = match wait {
                Some(wait) => {
                    shared
                        .wake
                        .wait_timeout(queue, wait)
                        .expect("writer queue lock poisoned")
                        .0
                }
                None => shared.wake.wait(queue).expect("writer queue lock poisoned"),
            };
            queue.writer_waiting = false;
            continue;
        }
        queue.role = Role::Thread;
        let batch = queue.take_group();
        let closing = queue.closing;
        drop(queue);
        let mut committer = shared.committer.lock().expect("writer state lock poisoned");
        if !batch.is_empty() {
            committer.commit(batch);
        }
        committer.sync_if_due(closing);
        committer.checkpoint_if_due();
        if !closing {
            committer.reclaim_free_pages_if_idle(shared);
        }
        let chore_at = committer.chore_at();
        drop(committer);
        queue = shared.jobs.lock().expect("writer queue lock poisoned");
        if closing && queue.pending.is_empty() {
            break;
        }
        if queue.pending.is_empty() {
            queue.role = Role::Free;
            queue.chore_at = chore_at;
        }
    }
    drop(queue);
    let mut committer = shared.committer.lock().expect("writer state lock poisoned");
    if let Some(flusher) = committer.flusher.take() {
        flusher.finish();
    }
    if let Err(error) = committer
        .connection
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
    {
        tracing::warn!(%error, "final WAL checkpoint failed; the WAL will be replayed at next start");
    }
}

impl Committer {
    /// When the writer thread must next take the role: a backstop
    /// checkpoint, a relaxed-mode fsync or a free-page step.
    fn chore_at(&self) -> Option<Instant> {
        if self.checkpoint_due {
            return Some(Instant::now());
        }
        let sync_at = match (self.durability, self.unsynced_since) {
            (Durability::Relaxed { sync_interval }, Some(since)) => Some(since + sync_interval),
            _ => None,
        };
        match (sync_at, self.reclaim.due_at()) {
            (Some(sync), Some(reclaim)) => Some(sync.min(reclaim)),
            (sync, reclaim) => sync.or(reclaim),
        }
    }

    /// Runs one cached statement; transaction control is prepared once, not
    /// parsed on every commit.
    fn execute(&self, sql: &str) -> rusqlite::Result<()> {
        self.connection.prepare_cached(sql)?.execute([]).map(|_| ())
    }

    fn commit(&mut self, batch: Vec<Pending>) {
        self.reclaim.busy();
        let started = std::time::Instant::now();
        let jobs = batch.len();
        let durable = batch
            .iter()
            .any(|pending| pending.commit == Commit::Durable);
        // Taking the jobs frees their queue slots.
        let mut group: Vec<Box<dyn Job>> = batch.into_iter().map(|pending| pending.job).collect();
        if let Err(error) = self.execute("BEGIN IMMEDIATE") {
            // Dropping the jobs unrun drops their reply channels: every caller
            // hears "unavailable" and nothing is acknowledged.
            tracing::error!(%error, jobs, "could not begin a write transaction");
            return;
        }
        let ran = match self.run_together(&mut group) {
            Ran::FailedAfterWriting => self.run_again_isolated(&mut group),
            ran => ran,
        };
        let answer = |group: Vec<Box<dyn Job>>, committed: bool| {
            for job in group {
                job.into_completion()(committed);
            }
        };
        match ran {
            Ran::Abandoned | Ran::FailedAfterWriting => {
                if !self.connection.is_autocommit()
                    && let Err(error) = self.execute("ROLLBACK")
                {
                    tracing::error!(%error, "rollback of an abandoned group failed");
                }
                answer(group, false);
                return;
            }
            Ran::Completed { succeeded: 0 } => {
                // Nothing of the group stays, and each caller hears its own error.
                if let Err(error) = self.execute("ROLLBACK") {
                    tracing::error!(%error, "rollback of a failed group failed");
                }
                answer(group, true);
                return;
            }
            Ran::Completed { .. } => {}
        }
        let completions: Vec<Completion> =
            group.into_iter().map(|job| job.into_completion()).collect();
        WAL_FRAMES.with(|noted| noted.set(-1));
        let committed = match self.execute("COMMIT") {
            Ok(()) => {
                if WAL_FRAMES.with(Cell::get) >= BACKSTOP_CHECKPOINT_FRAMES {
                    self.checkpoint_due = true;
                }
                metrics::histogram!("ackbox_store_commit_seconds").record(started.elapsed());
                metrics::histogram!("ackbox_store_group_commit_jobs").record(jobs as f64);
                true
            }
            Err(error) => {
                if super::database_error::is_disk_full(&error) {
                    self.disk_full.store(true, Ordering::Release);
                }
                tracing::error!(%error, jobs = completions.len(), "group commit failed; no job is acknowledged");
                if let Err(error) = self.execute("ROLLBACK") {
                    tracing::error!(%error, "rollback after a failed commit failed");
                }
                false
            }
        };
        if !(committed && durable) {
            for complete in completions {
                complete(committed);
            }
            return;
        }
        match (&self.flusher, self.durability) {
            (Some(flusher), _) => {
                if let Err(mpsc::SendError(completions)) = flusher.groups.send(completions) {
                    // The flusher is gone; sync here rather than acknowledge unsynced.
                    let synced = self.wal.sync().is_ok();
                    for complete in completions {
                        complete(synced);
                    }
                }
            }
            (None, Durability::Fsync) => {
                let synced = self.wal.sync().is_ok();
                for complete in completions {
                    complete(synced);
                }
            }
            (None, Durability::Relaxed { .. }) => {
                self.unsynced_since.get_or_insert_with(Instant::now);
                for complete in completions {
                    complete(true);
                }
            }
        }
    }

    /// Runs every job of the group in the open transaction, without
    /// savepoints. SQLite copies each page a savepoint's job first touches
    /// into the statement journal, in case it rolls back: a job per request,
    /// each touching the same hot pages, paid that copy again and again.
    /// A job that fails before changing a row needs nothing undone; one that
    /// fails after changing rows stops the run ([`Ran::FailedAfterWriting`]).
    fn run_together(&self, group: &mut [Box<dyn Job>]) -> Ran {
        let mut succeeded = 0;
        for job in group {
            let changes_before = self.connection.total_changes();
            let Some(ok) = self.run_guarded(job) else {
                return Ran::Abandoned;
            };
            if ok {
                succeeded += 1;
            } else if self.connection.total_changes() != changes_before {
                return Ran::FailedAfterWriting;
            }
        }
        Ran::Completed { succeeded }
    }

    /// Rolls back what the group did together and runs every job again in a
    /// savepoint of its own, so that a failed job's changes are undone and
    /// its group mates' kept: only a savepoint can undo one job alone.
    fn run_again_isolated(&self, group: &mut [Box<dyn Job>]) -> Ran {
        if let Err(error) = self
            .execute("ROLLBACK")
            .and_then(|()| self.execute("BEGIN IMMEDIATE"))
        {
            tracing::error!(%error, "could not restart the group's transaction");
            return Ran::Abandoned;
        }
        let mut succeeded = 0;
        for job in group {
            if let Err(error) = self.execute("SAVEPOINT job") {
                tracing::error!(%error, "could not open a savepoint; abandoning the group");
                return Ran::Abandoned;
            }
            let Some(ok) = self.run_guarded(job) else {
                return Ran::Abandoned;
            };
            let closed = if ok {
                succeeded += 1;
                self.execute("RELEASE job")
            } else {
                self.execute("ROLLBACK TO job")
                    .and_then(|()| self.execute("RELEASE job"))
            };
            if let Err(error) = closed {
                tracing::error!(%error, "savepoint handling failed; abandoning the group");
                return Ran::Abandoned;
            }
        }
        Ran::Completed { succeeded }
    }

    /// Runs one job: whether it succeeded, or `None` when the group cannot
    /// go on (the job panicked, or SQLite rolled the transaction back).
    fn run_guarded(&self, job: &mut Box<dyn Job>) -> Option<bool> {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(&self.connection)));
        let Ok(succeeded) = outcome else {
            tracing::error!("a store job panicked; abandoning the group");
            return None;
        };
        // SQLite rolls a whole transaction back on some errors (disk full,
        // I/O); no further job may then run outside the transaction.
        if self.connection.is_autocommit() {
            tracing::error!(
                "the write transaction was rolled back by SQLite; abandoning the group"
            );
            return None;
        }
        Some(succeeded)
    }

    /// Returns one step of free pages to the file system when no job waits
    /// and enough of the file is free; see the module documentation.
    fn reclaim_free_pages_if_idle(&mut self, shared: &Shared) {
        let idle = self.reclaim.due_at().is_some_and(|at| at <= Instant::now())
            && shared
                .jobs
                .lock()
                .expect("writer queue lock poisoned")
                .pending
                .is_empty();
        if !idle {
            return;
        }
        let pages = |pragma: &str| -> rusqlite::Result<i64> {
            self.connection
                .prepare_cached(pragma)?
                .query_row([], |row| row.get(0))
        };
        let (free, total) = match (pages("PRAGMA freelist_count"), pages("PRAGMA page_count")) {
            (Ok(free), Ok(total)) => (free, total),
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "could not count free pages");
                self.reclaim.pending = false;
                return;
            }
        };
        if free < RECLAIM_MIN_FREE_PAGES || free * RECLAIM_MIN_FREE_SHARE_DIVISOR < total {
            self.reclaim.pending = false;
            return;
        }
        let started = Instant::now();
        // Runs as its own transaction: it changes where rows live, not what
        // they say, so it needs no fsync of its own. Each step of the
        // statement returns one page, so it is stepped to the end.
        let vacuum = || -> rusqlite::Result<()> {
            // A pragma takes no bound parameters.
            let mut statement = self.connection.prepare_cached(&format!(
                "PRAGMA incremental_vacuum({RECLAIM_PAGES_PER_STEP})"
            ))?;
            let mut steps = statement.query([])?;
            while steps.next()?.is_some() {}
            Ok(())
        };
        let stepped = vacuum();
        self.reclaim.busy();
        match stepped {
            Ok(()) => {
                metrics::histogram!("ackbox_store_reclaim_seconds").record(started.elapsed());
                tracing::debug!(free, total, "returned free pages to the file system");
            }
            Err(error) => {
                // The next commit arms it again.
                self.reclaim.pending = false;
                tracing::warn!(%error, "incremental vacuum failed; will retry after the next commit");
            }
        }
    }

    /// The backstop checkpoint, on the writer thread only: it holds the
    /// connection while it copies and fsyncs, and a request thread doing
    /// it would hold every request it serves as well.
    fn checkpoint_if_due(&mut self) {
        if !self.checkpoint_due {
            return;
        }
        self.checkpoint_due = false;
        let started = Instant::now();
        match self
            .connection
            .execute_batch("PRAGMA wal_checkpoint(PASSIVE);")
        {
            Ok(_) => {
                metrics::histogram!("ackbox_store_backstop_checkpoint_seconds")
                    .record(started.elapsed());
            }
            // The next commit past the threshold asks again.
            Err(error) => tracing::warn!(%error, "backstop WAL checkpoint failed"),
        }
    }

    fn sync_if_due(&mut self, force: bool) {
        let Durability::Relaxed { sync_interval } = self.durability else {
            return;
        };
        let Some(since) = self.unsynced_since else {
            return;
        };
        if !force && since.elapsed() < sync_interval {
            return;
        }
        match self.wal.sync() {
            Ok(()) => self.unsynced_since = None,
            Err(error) => {
                tracing::error!(%error, path = %self.wal.display(), "periodic WAL fsync failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::database_error::database_error;

    fn open_writer(dir: &tempfile::TempDir, durability: Durability) -> Writer {
        open_writer_with(dir, durability, "")
    }

    fn open_writer_with(dir: &tempfile::TempDir, durability: Durability, pragmas: &str) -> Writer {
        let path = dir.path().join("db.sqlite");
        let connection = Connection::open(&path).unwrap();
        connection
            .execute_batch(&format!(
                "{pragmas} PRAGMA journal_mode=WAL; CREATE TABLE t (v INTEGER NOT NULL);"
            ))
            .unwrap();
        Writer::start(
            connection,
            dir.path().join("db.sqlite-wal"),
            durability,
            Arc::new(DiskReserve::new(dir.path())),
        )
        .unwrap()
    }

    /// (free pages, all pages) of the file.
    fn pages(dir: &tempfile::TempDir) -> (i64, i64) {
        let connection = Connection::open(dir.path().join("db.sqlite")).unwrap();
        let count = |pragma: &str| connection.query_row(pragma, [], |row| row.get(0)).unwrap();
        (count("PRAGMA freelist_count"), count("PRAGMA page_count"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_writer_returns_the_pages_a_drain_freed() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open_writer_with(&dir, Durability::Fsync, "PRAGMA auto_vacuum = INCREMENTAL;");
        // 6,000 rows of 4,000 bytes: a page each.
        writer
            .submit(Commit::Durable, |connection| {
                connection
                    .execute_batch(
                        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6000)
                         INSERT INTO t (v) SELECT zeroblob(4000) FROM n;",
                    )
                    .unwrap();
                Ok(())
            })
            .await
            .unwrap();
        let (_, filled) = pages(&dir);
        assert!(filled >= 6_000, "the fill took {filled} pages");
        writer
            .submit(Commit::Durable, |connection| {
                connection.execute("DELETE FROM t", []).unwrap();
                Ok(())
            })
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut free, mut total) = pages(&dir);
        while free >= RECLAIM_MIN_FREE_PAGES && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            (free, total) = pages(&dir);
        }
        writer.close();
        assert!(
            free < RECLAIM_MIN_FREE_PAGES && total < filled / 4,
            "{free} free pages of {total} are left of the {filled} the fill took"
        );
    }

    fn insert_value(connection: &Connection, value: i64) -> Result<(), StoreError> {
        connection
            .execute("INSERT INTO t (v) VALUES (?1)", [value])
            .map(|_| ())
            .map_err(|source| StoreError::Database {
                operation: "insert",
                source,
            })
    }

    fn count(dir: &tempfile::TempDir) -> i64 {
        let connection = Connection::open(dir.path().join("db.sqlite")).unwrap();
        connection
            .query_row("SELECT COUNT(*) FROM t", [], |row| row.get(0))
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_jobs_all_commit_and_a_failed_job_rolls_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Arc::new(open_writer(&dir, Durability::Fsync));
        let mut tasks = Vec::new();
        for value in 0..64i64 {
            let writer = Arc::clone(&writer);
            tasks.push(tokio::spawn(async move {
                writer
                    .submit(Commit::Durable, move |connection| {
                        insert_value(connection, value)?;
                        if value == 13 {
                            return Err(StoreError::Corrupt {
                                detail: "unlucky".into(),
                            });
                        }
                        Ok(value)
                    })
                    .await
            }));
        }
        let mut failures = 0;
        for task in tasks {
            if task.await.unwrap().is_err() {
                failures += 1;
            }
        }
        writer.close();
        assert_eq!(failures, 1);
        assert_eq!(count(&dir), 63);
    }

    #[tokio::test]
    async fn a_job_failing_alone_in_its_group_leaves_nothing_and_hears_its_own_error() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open_writer(&dir, Durability::Fsync);
        let failed = writer
            .submit(Commit::Durable, |connection| {
                insert_value(connection, 1)?;
                Err::<(), _>(StoreError::Corrupt {
                    detail: "refused after writing".into(),
                })
            })
            .await;
        assert!(
            matches!(&failed, Err(StoreError::Corrupt { detail }) if detail == "refused after writing"),
            "{failed:?}"
        );
        writer
            .submit(Commit::Durable, |connection| insert_value(connection, 2))
            .await
            .unwrap();
        writer.close();
        assert_eq!(count(&dir), 1, "the failed job's row was rolled back");
    }

    fn values(dir: &tempfile::TempDir) -> Vec<i64> {
        let connection = Connection::open(dir.path().join("db.sqlite")).unwrap();
        let mut select = connection.prepare("SELECT v FROM t ORDER BY v").unwrap();
        select
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Where a job refuses, relative to its write.
    #[derive(Debug, Clone, Copy)]
    enum Refusal {
        BeforeWriting,
        AfterWriting,
    }

    /// A job that inserts `value`, counting its runs, and fails with
    /// "refused VALUE" where `refusal` says.
    fn counted_insert(
        runs: &Arc<std::sync::atomic::AtomicUsize>,
        value: i64,
        refusal: Option<Refusal>,
    ) -> impl FnMut(&Connection) -> Result<i64, StoreError> + Send + 'static {
        let runs = Arc::clone(runs);
        move |connection| {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let refused = || StoreError::Corrupt {
                detail: format!("refused {value}"),
            };
            if let Some(Refusal::BeforeWriting) = refusal {
                return Err(refused());
            }
            insert_value(connection, value)?;
            if let Some(Refusal::AfterWriting) = refusal {
                return Err(refused());
            }
            Ok(value)
        }
    }

    /// Commits one group of three inserts (1, 2, 3) whose middle one is
    /// refused where `refusal` says, and checks that each caller heard its
    /// own outcome. One task submits all three, so they form one group: the
    /// first takes the committer role and yields, the others queue behind
    /// it. Returns the values stored and how many times the jobs ran.
    async fn group_with_a_refused_middle(refusal: Refusal) -> (Vec<i64>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let writer = open_writer(&dir, Durability::Fsync);
        let runs = Arc::default();
        let (first, refused, last) = tokio::join!(
            writer.submit(Commit::Durable, counted_insert(&runs, 1, None)),
            writer.submit(Commit::Durable, counted_insert(&runs, 2, Some(refusal))),
            writer.submit(Commit::Lazy, counted_insert(&runs, 3, None)),
        );
        writer.close();
        assert_eq!((first.unwrap(), last.unwrap()), (1, 3));
        assert!(
            matches!(&refused, Err(StoreError::Corrupt { detail }) if detail == "refused 2"),
            "{refused:?}"
        );
        (values(&dir), runs.load(std::sync::atomic::Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_job_failing_after_writing_is_undone_alone_and_its_group_mates_commit() {
        // Two ran before the failure was seen, then all three in savepoints.
        assert_eq!(
            group_with_a_refused_middle(Refusal::AfterWriting).await,
            (vec![1, 3], 5)
        );
    }

    #[tokio::test]
    async fn a_job_refused_before_writing_does_not_make_its_group_run_again() {
        assert_eq!(
            group_with_a_refused_middle(Refusal::BeforeWriting).await,
            (vec![1, 3], 3)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_commits_nothing_of_its_group_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Arc::new(open_writer(&dir, Durability::Fsync));
        let insert = |value: i64| {
            move |connection: &Connection| {
                insert_value(connection, value)?;
                if value < 0 {
                    panic!("a bug in a job");
                }
                Ok(())
            }
        };
        let panicking = writer.submit(Commit::Durable, insert(-1)).await;
        assert!(
            matches!(panicking, Err(StoreError::Unavailable { .. })),
            "{panicking:?}"
        );
        writer.submit(Commit::Durable, insert(1)).await.unwrap();
        writer.close();
        assert_eq!(count(&dir), 1, "the panicking job's row was rolled back");
    }

    fn committing_thread(_: &Connection) -> Result<Option<String>, StoreError> {
        Ok(std::thread::current().name().map(str::to_owned))
    }

    #[tokio::test]
    async fn requests_commit_on_their_own_thread_and_background_work_on_the_writers() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open_writer(&dir, Durability::Fsync);
        let here = std::thread::current().name().map(str::to_owned);
        let request = writer
            .submit(Commit::Durable, committing_thread)
            .await
            .unwrap();
        assert_eq!(request, here, "an uncontended job skips the hand-over");
        let background = writer
            .submit_in_background(Commit::Lazy, committing_thread)
            .await
            .unwrap();
        assert_eq!(background.as_deref(), Some("ackbox-sqlite-writer"));
        writer.close();
    }

    #[tokio::test]
    async fn a_submitter_cancelled_before_it_commits_leaves_its_group_to_the_writer_thread() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open_writer(&dir, Durability::Fsync);
        let mut cancelled =
            Box::pin(writer.submit(Commit::Durable, |connection| insert_value(connection, 1)));
        // The first poll queues the job, takes the committer role and yields.
        let first_poll = std::future::poll_fn(|context| {
            std::task::Poll::Ready(cancelled.as_mut().poll(context))
        })
        .await;
        assert!(first_poll.is_pending(), "{first_poll:?}");
        drop(cancelled);
        tokio::time::timeout(
            Duration::from_secs(10),
            writer.submit(Commit::Durable, |connection| insert_value(connection, 2)),
        )
        .await
        .expect("a job queued after the cancelled committer must still commit")
        .unwrap();
        writer.close();
        assert_eq!(count(&dir), 2, "the cancelled request's write stands");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn relaxed_commits_are_fsynced_by_the_writer_thread_within_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        // Long enough that the check right after the answer sees the commit
        // still unsynced even on a loaded machine.
        let interval = Duration::from_millis(500);
        let writer = open_writer(
            &dir,
            Durability::Relaxed {
                sync_interval: interval,
            },
        );
        writer
            .submit(Commit::Durable, |connection| insert_value(connection, 1))
            .await
            .unwrap();
        let unsynced = || {
            writer
                .shared
                .committer
                .lock()
                .unwrap()
                .unsynced_since
                .is_some()
        };
        assert!(unsynced(), "a relaxed commit is answered before its fsync");
        let deadline = Instant::now() + Duration::from_secs(10);
        while unsynced() && Instant::now() < deadline {
            tokio::time::sleep(interval).await;
        }
        assert!(!unsynced(), "no fsync followed the relaxed commit");
        writer.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_thread_checkpoints_a_long_wal_so_that_it_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        // Small pages keep the backstop's 8,192 frames to 4 MiB of WAL.
        let page_bytes = 512;
        let writer = open_writer_with(
            &dir,
            Durability::Fsync,
            &format!("PRAGMA page_size = {page_bytes}; CREATE TABLE b (x BLOB NOT NULL);"),
        );
        // Each commit writes ~200 overflow pages; 100 of them write the
        // backstop's frames about 2.4 times over.
        for _ in 0..100 {
            writer
                .submit(Commit::Durable, |connection| {
                    connection
                        .execute("INSERT INTO b VALUES (zeroblob(100000))", [])
                        .map(|_| ())
                        .map_err(database_error("insert a blob"))
                })
                .await
                .unwrap();
        }
        // SQLite never shrinks the WAL file: its size is the longest the
        // WAL got. Without the backstop it would hold every frame written.
        let wal_bytes = std::fs::metadata(dir.path().join("db.sqlite-wal"))
            .unwrap()
            .len();
        let frame_bytes = u64::try_from(page_bytes + 24).unwrap();
        let backstop_bytes = u64::try_from(BACKSTOP_CHECKPOINT_FRAMES).unwrap() * frame_bytes;
        assert!(
            wal_bytes < backstop_bytes * 3 / 2,
            "the WAL grew to {wal_bytes} bytes; the backstop checkpoint is at {backstop_bytes}"
        );
        writer.close();
    }

    #[tokio::test]
    async fn submit_after_close_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open_writer(
            &dir,
            Durability::Relaxed {
                sync_interval: Duration::from_millis(5),
            },
        );
        writer.submit(Commit::Lazy, |_| Ok(())).await.unwrap();
        writer.close();
        writer.close();
        let error = writer
            .submit(Commit::Durable, |_| Ok(()))
            .await
            .unwrap_err();
        assert!(error.is_retryable());
    }
}
