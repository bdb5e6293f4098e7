//! Group commit: callers append to the log themselves, and one flusher
//! thread covers everything appended so far with one `fdatasync`, again and
//! again, answering each caller once the sync passes its records.
//!
//! Callers append on their own thread because they need their records'
//! positions at once: a store decides what to write and applies it to its
//! [`Ledger`](crate::ledger::Ledger) under one lock, and taking the log's
//! lock inside it keeps the ledger and the log in one order. Only the wait
//! for the disk is shared. A caller that needs durability (a send) waits for
//! the flusher; one that does not (a lease, a delete: a crash only delivers
//! the message again) goes on, and the flusher syncs its records within
//! [`GroupCommitOptions::sync_interval`] or with the next durable append.
//!
//! Appends are counted in bytes since the log was opened (the LSN); a
//! segment is fsync'd whole before the next begins, so syncing the newest
//! segment up to an LSN makes everything before it durable.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::disk::DiskFile;
use crate::frame::Payload;
use crate::log::{Log, LogError, LogPosition};

/// Why records were not made durable. Every waiter of a failed sync gets the
/// same error, and so does every later append: the log is poisoned.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct CommitError(Arc<LogError>);

impl CommitError {
    /// The log's error.
    pub fn log_error(&self) -> &LogError {
        &self.0
    }
}

impl From<LogError> for CommitError {
    fn from(error: LogError) -> Self {
        Self(Arc::new(error))
    }
}

/// A point in the log: bytes appended since it was opened.
pub type Lsn = u64;

/// Called once the records before an LSN are durable, or with why not.
pub type DurableCallback = Box<dyn FnOnce(Result<(), CommitError>) + Send>;

/// How the flusher treats appends nobody waits to see durable.
#[derive(Debug, Clone, Copy)]
pub struct GroupCommitOptions {
    /// The longest an append stays un-fsync'd when nobody waits for it.
    pub sync_interval: Duration,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        Self {
            sync_interval: Duration::from_millis(100),
        }
    }
}

struct Progress {
    appended: Lsn,
    synced: Lsn,
    /// The file holding `appended`'s bytes: the newest segment.
    file: Arc<dyn DiskFile>,
    /// `file`'s segment number.
    segment: u64,
    /// The segment the latest completed sync covered.
    synced_segment: u64,
    /// When `synced` last fell behind `appended`.
    unsynced_since: Option<Instant>,
    waiters: Vec<(Lsn, DurableCallback)>,
    failed: Option<CommitError>,
    closing: bool,
}

struct Shared {
    progress: Mutex<Progress>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Progress> {
        // A panic while holding it leaves plain numbers behind, still true.
        self.progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A log shared by appending threads, with a flusher thread behind it.
pub struct GroupCommit {
    log: RwLock<Log>,
    shared: Arc<Shared>,
    flusher: Flusher,
}

/// The flusher thread, stopped (after a last sync) when dropped.
struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    fn stop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take()
            && let Err(panic) = thread.join()
        {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let progress = self.shared.lock();
        formatter
            .debug_struct("GroupCommit")
            .field("appended", &progress.appended)
            .field("synced", &progress.synced)
            .finish_non_exhaustive()
    }
}

impl GroupCommit {
    /// Starts the flusher for `log`, everything in which is taken as durable
    /// (it was recovered from disk or just created).
    pub fn start(log: Log, options: GroupCommitOptions) -> Result<Self, LogError> {
        let shared = Arc::new(Shared {
            progress: Mutex::new(Progress {
                appended: 0,
                synced: 0,
                file: log.active_file(),
                segment: log.active_segment(),
                synced_segment: log.active_segment(),
                unsynced_since: None,
                waiters: Vec::new(),
                failed: None,
                closing: false,
            }),
            wake: Condvar::new(),
        });
        let flusher_shared = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name("ackbox-log-flush".to_owned())
            .spawn(move || flush(&flusher_shared, options))
            .map_err(|source| LogError::Io {
                operation: "spawn the flusher for",
                path: std::path::PathBuf::new(),
                source,
            })?;
        Ok(Self {
            log: RwLock::new(log),
            shared: Arc::clone(&shared),
            flusher: Flusher {
                shared,
                thread: Some(thread),
            },
        })
    }

    /// Appends `payloads` as one write and returns where each went and the
    /// LSN they end at; durable once [`GroupCommit::when_durable`] says so.
    pub fn append<P: Payload>(
        &self,
        payloads: impl IntoIterator<Item = P>,
        seq_floor: u64,
    ) -> Result<(Vec<LogPosition>, Lsn), CommitError> {
        self.with_log(|log| log.append(payloads, seq_floor))
    }

    /// Runs `change` on the log alone (no append or read beside it):
    /// appends, rolls, segment removal — compaction, say. Whatever it
    /// appended counts towards the LSN it returns, and a segment it began is
    /// the one the flusher syncs from then on.
    pub fn with_log<R>(
        &self,
        change: impl FnOnce(&mut Log) -> Result<R, LogError>,
    ) -> Result<(R, Lsn), CommitError> {
        let mut log = self
            .log
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(error) = &self.shared.lock().failed {
            return Err(error.clone());
        }
        let segment = log.active_segment();
        let before = log.active_len();
        // Counted even when the change fails: an append that rolled to a new
        // segment and then found the disk full leaves the new segment the
        // one to sync.
        let changed = change(&mut log);
        let rolled = log.active_segment() != segment;
        // A roll synced the old segments whole; only the new one's bytes count.
        let written = if rolled {
            log.active_len()
        } else {
            log.active_len() - before
        };
        let file = rolled.then(|| (log.active_file(), log.active_segment()));
        let mut progress = self.shared.lock();
        progress.appended += written;
        if let Some((file, segment)) = file {
            progress.file = file;
            progress.segment = segment;
        }
        // The flusher sleeps until someone waits or the interval runs out;
        // only the first unsynced append starts that interval's clock.
        let starts_interval = progress.unsynced_since.is_none() && written > 0;
        if starts_interval {
            progress.unsynced_since = Some(Instant::now());
        }
        let lsn = progress.appended;
        drop(progress);
        if starts_interval {
            self.shared.wake.notify_one();
        }
        Ok((changed?, lsn))
    }

    /// Calls `done` once everything up to `lsn` is durable (at once if it is
    /// already), on the flusher thread or this one.
    pub fn when_durable(&self, lsn: Lsn, done: DurableCallback) {
        let mut progress = self.shared.lock();
        if let Some(error) = &progress.failed {
            let error = error.clone();
            drop(progress);
            return done(Err(error));
        }
        if progress.synced >= lsn {
            drop(progress);
            return done(Ok(()));
        }
        // A flusher that is asleep has no waiters; one with waiters is
        // syncing and looks for more when it is done.
        let flusher_asleep = progress.waiters.is_empty();
        progress.waiters.push((lsn, done));
        drop(progress);
        if flusher_asleep {
            self.shared.wake.notify_one();
        }
    }

    /// The LSN after everything appended so far: wait on it to make all of
    /// it durable.
    pub fn appended(&self) -> Lsn {
        self.shared.lock().appended
    }

    /// Blocks until everything up to `lsn` is durable.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), CommitError> {
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        self.when_durable(
            lsn,
            Box::new(move |result| {
                let _ = answer.send(result);
            }),
        );
        answered.recv().unwrap_or_else(|_| {
            Err(CommitError::from(LogError::Poisoned(
                "the flusher stopped".to_owned(),
            )))
        })
    }

    /// The newest segment a completed sync covered: once a durable append
    /// returns, its segment (an older one was fsync'd whole when it was
    /// sealed).
    pub fn synced_segment(&self) -> u64 {
        self.shared.lock().synced_segment
    }

    /// The log, for reads (several at once, beside no append).
    pub fn read_log(&self) -> RwLockReadGuard<'_, Log> {
        self.log
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Syncs what was appended, answers every waiter, stops the flusher and
    /// hands the log back.
    pub fn close(self) -> Log {
        let Self {
            log, mut flusher, ..
        } = self;
        flusher.stop();
        log.into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The flusher: whenever someone waits for an LSN not yet synced, or an
/// append has waited `sync_interval`, fsync the newest segment up to what
/// was appended by then, and answer the waiters it covers.
fn flush(shared: &Shared, options: GroupCommitOptions) {
    let mut progress = shared.lock();
    loop {
        let behind = progress.appended > progress.synced;
        let waited_long = progress
            .unsynced_since
            .is_some_and(|since| since.elapsed() >= options.sync_interval);
        let due = behind
            && (!progress.waiters.is_empty() || waited_long || progress.closing)
            && progress.failed.is_none();
        if !due {
            // Waiters the sync already covers (or a failure answers) go now.
            let ready = answerable(&mut progress);
            if !ready.is_empty() {
                drop(progress);
                call(ready);
                progress = shared.lock();
                continue;
            }
            if progress.closing {
                return;
            }
            let wait = match progress.unsynced_since {
                Some(since) if behind => options.sync_interval.saturating_sub(since.elapsed()),
                _ => Duration::from_secs(3600),
            };
            progress = shared
                .wake
                .wait_timeout(progress, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            continue;
        }
        let target = progress.appended;
        let (file, segment) = (Arc::clone(&progress.file), progress.segment);
        drop(progress);
        let synced = file.sync_data();
        progress = shared.lock();
        match synced {
            Ok(()) => {
                progress.synced = progress.synced.max(target);
                progress.synced_segment = progress.synced_segment.max(segment);
                // What was appended during the sync waits its own interval,
                // not the one already spent: no back-to-back fsyncs for
                // writes nobody waits on.
                progress.unsynced_since = (progress.synced < progress.appended).then(Instant::now);
            }
            Err(source) => {
                progress.failed = Some(CommitError::from(LogError::Poisoned(format!(
                    "fdatasync of the newest segment failed: {source}"
                ))));
            }
        }
        let ready = answerable(&mut progress);
        drop(progress);
        call(ready);
        progress = shared.lock();
    }
}

/// Takes the waiters that the sync so far (or a failure) answers, to be
/// called once the lock is let go: a callback may append or wait again.
fn answerable(progress: &mut Progress) -> Vec<(DurableCallback, Result<(), CommitError>)> {
    let synced = progress.synced;
    let failed = progress.failed.clone();
    let mut ready = Vec::new();
    let mut index = 0;
    while index < progress.waiters.len() {
        if failed.is_some() || progress.waiters[index].0 <= synced {
            let (_, done) = progress.waiters.swap_remove(index);
            let result = match &failed {
                Some(error) => Err(error.clone()),
                None => Ok(()),
            };
            ready.push((done, result));
        } else {
            index += 1;
        }
    }
    ready
}

fn call(ready: Vec<(DurableCallback, Result<(), CommitError>)>) {
    for (done, result) in ready {
        done(result);
    }
}
