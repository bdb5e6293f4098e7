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
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::store::StoreError;
use crate::store::data_dir::DiskReserve;

mod committer;
mod flusher;
#[cfg(test)]
mod tests;

use committer::{Committer, Reclaim, run_writer_thread};
use flusher::{Flusher, WalFile};

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

/// As an operator writes it (logs): `fsync`, or `relaxed (fsync every 10 ms)`.
impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fsync => f.write_str("fsync"),
            Self::Relaxed { sync_interval } => {
                write!(f, "relaxed (fsync every {} ms)", sync_interval.as_millis())
            }
        }
    }
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
        // Registered now, so the series is there, empty, before the first
        // step: a rate over it is zero, not "no data".
        let _registered = metrics::histogram!("ackbox_store_reclaim_seconds");
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
            // A due chore (the backstop checkpoint above all) sends the group
            // to the writer thread: back-to-back submitters would otherwise
            // take the free role before the woken thread does, every time.
            let chore_due = queue.chore_at.is_some_and(|at| at <= Instant::now());
            match (queue.role, place) {
                (Role::Free, Committed::WhereSubmitted) if !chore_due => {
                    queue.role = Role::Submitter;
                    true
                }
                (Role::Free, _) => {
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
