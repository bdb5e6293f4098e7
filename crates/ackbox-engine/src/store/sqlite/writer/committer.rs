//! The committer: the writer connection, one group per commit (with a
//! savepoint per job when one fails after writing), the chores between
//! groups (the backstop checkpoint, returning free pages) and the writer
//! thread that takes the role when no submitter does.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use rusqlite::Connection;

use super::flusher::{Flusher, WalFile};
use super::{
    BACKSTOP_CHECKPOINT_FRAMES, CHORE_RETRY, Commit, Completion, Durability, Job, Pending,
    RECLAIM_AFTER_IDLE, RECLAIM_MIN_FREE_PAGES, RECLAIM_MIN_FREE_SHARE_DIVISOR,
    RECLAIM_PAGES_PER_STEP, Ran, Role, Shared, WAL_FRAMES,
};

/// The writer connection and what committing needs to remember between
/// groups; used by whoever holds the committer [`Role`].
pub(super) struct Committer {
    /// The writer's disk-full flag: a commit that fails with `SQLITE_FULL`
    /// sets it.
    pub(super) disk_full: Arc<AtomicBool>,
    pub(super) connection: Connection,
    pub(super) wal: WalFile,
    pub(super) durability: Durability,
    /// When the oldest durable commit not yet fsynced was made (relaxed mode).
    pub(super) unsynced_since: Option<Instant>,
    /// In fsync mode, the thread that syncs committed groups and answers them.
    pub(super) flusher: Option<Flusher>,
    pub(super) reclaim: Reclaim,
    /// A commit left [`BACKSTOP_CHECKPOINT_FRAMES`] in the WAL; the writer
    /// thread checkpoints next.
    pub(super) checkpoint_due: bool,
}

/// When the writer last looked at free pages, and whether commits since may
/// have freed more.
#[derive(Debug, Default)]
pub(super) struct Reclaim {
    /// The file was made with `auto_vacuum = INCREMENTAL`; otherwise free
    /// pages cannot be returned and are never looked at.
    pub(super) enabled: bool,
    /// Set by a commit, cleared once the free pages are below the thresholds.
    pub(super) pending: bool,
    /// When the writer last committed or took a step.
    pub(super) last_busy: Option<Instant>,
}

impl Reclaim {
    pub(super) fn busy(&mut self) {
        self.pending = true;
        self.last_busy = Some(Instant::now());
    }

    pub(super) fn due_at(&self) -> Option<Instant> {
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
pub(super) fn run_writer_thread(shared: &Shared) {
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
    pub(super) fn chore_at(&self) -> Option<Instant> {
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
    pub(super) fn execute(&self, sql: &str) -> rusqlite::Result<()> {
        self.connection.prepare_cached(sql)?.execute([]).map(|_| ())
    }

    pub(super) fn commit(&mut self, batch: Vec<Pending>) {
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
                if crate::store::sqlite::database_error::is_disk_full(&error) {
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
    pub(super) fn run_together(&self, group: &mut [Box<dyn Job>]) -> Ran {
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
    pub(super) fn run_again_isolated(&self, group: &mut [Box<dyn Job>]) -> Ran {
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
    pub(super) fn run_guarded(&self, job: &mut Box<dyn Job>) -> Option<bool> {
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
    pub(super) fn reclaim_free_pages_if_idle(&mut self, shared: &Shared) {
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
    pub(super) fn checkpoint_if_due(&mut self) {
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

    pub(super) fn sync_if_due(&mut self, force: bool) {
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
