//! Group commit: one thread owns the [`Log`], takes every submission that
//! arrived while it was writing or fsyncing, appends them as one write and
//! covers them with one `fdatasync`.
//!
//! Callers are answered through a callback, so a blocking caller can wait on
//! a channel and an async one on a oneshot. Submissions are appended in the
//! order they were submitted: a caller that applies records to a
//! [`Ledger`](crate::ledger::Ledger) under a lock and submits under the same
//! lock keeps the ledger and the log in one order.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::log::{Log, LogError, LogPosition};

/// Why a submission was not appended (or not made durable). Every submission
/// of a failed group gets the same error.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct CommitError(Arc<LogError>);

impl CommitError {
    /// The log's error.
    pub fn log_error(&self) -> &LogError {
        &self.0
    }
}

/// What a submission's caller hears: where each payload was appended.
pub type CommitResult = Result<Vec<LogPosition>, CommitError>;

/// Records to append together, and who to tell.
pub struct Submission {
    /// The records' binary forms, in order.
    pub payloads: Vec<Vec<u8>>,
    /// The next sequence number the caller would hand out (see [`Log::append`]).
    pub seq_floor: u64,
    /// Answer only after an `fdatasync` covers the records (a send); otherwise
    /// after the write (a lease or delete, which a crash may lose: the message
    /// is only delivered again).
    pub durable: bool,
    /// Called once, on the commit thread.
    pub done: Box<dyn FnOnce(CommitResult) + Send>,
}

impl std::fmt::Debug for Submission {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Submission")
            .field("payloads", &self.payloads.len())
            .field("seq_floor", &self.seq_floor)
            .field("durable", &self.durable)
            .finish_non_exhaustive()
    }
}

/// How the commit thread treats writes nobody waits to see durable.
#[derive(Debug, Clone, Copy)]
pub struct GroupCommitOptions {
    /// The longest a non-durable write stays un-fsync'd while the log is idle.
    pub sync_interval: Duration,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        Self {
            sync_interval: Duration::from_millis(100),
        }
    }
}

/// The commit thread's handle. Dropping it (or [`GroupCommit::close`]) lets
/// the thread finish what was submitted and stop.
#[derive(Debug)]
pub struct GroupCommit {
    submissions: mpsc::Sender<Submission>,
    thread: JoinHandle<Log>,
}

impl GroupCommit {
    /// Starts the commit thread, which owns `log` until [`GroupCommit::close`].
    pub fn start(log: Log, options: GroupCommitOptions) -> Result<Self, LogError> {
        let (submissions, receiver) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("ackbox-log-commit".to_owned())
            .spawn(move || run(log, &receiver, options))
            .map_err(|source| LogError::Io {
                operation: "spawn the commit thread for",
                path: std::path::PathBuf::new(),
                source,
            })?;
        Ok(Self {
            submissions,
            thread,
        })
    }

    /// Queues `submission` for the next group. When the commit thread has
    /// stopped, the submission's callback hears why, at once.
    pub fn submit(&self, submission: Submission) {
        if let Err(mpsc::SendError(submission)) = self.submissions.send(submission) {
            (submission.done)(Err(CommitError(Arc::new(LogError::Poisoned(
                "the commit thread has stopped".to_owned(),
            )))));
        }
    }

    /// Waits for everything submitted to be written and fsync'd, and hands
    /// the log back.
    pub fn close(self) -> Log {
        drop(self.submissions);
        match self.thread.join() {
            Ok(log) => log,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

fn run(mut log: Log, receiver: &mpsc::Receiver<Submission>, options: GroupCommitOptions) -> Log {
    // When the oldest write nobody waited to see durable was made.
    let mut unsynced_since: Option<Instant> = None;
    let mut group = Vec::new();
    loop {
        let first = match unsynced_since {
            Some(since) => {
                let wait = options.sync_interval.saturating_sub(since.elapsed());
                match receiver.recv_timeout(wait) {
                    Ok(submission) => submission,
                    Err(RecvTimeoutError::Timeout) => {
                        // A failed sync poisons the log; the next group hears of it.
                        let _ = log.sync();
                        unsynced_since = None;
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            None => match receiver.recv() {
                Ok(submission) => submission,
                Err(mpsc::RecvError) => break,
            },
        };
        group.push(first);
        group.extend(receiver.try_iter());
        if commit_group(&mut log, &mut group) {
            let since = *unsynced_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= options.sync_interval {
                let _ = log.sync();
                unsynced_since = None;
            }
        } else {
            unsynced_since = None;
        }
    }
    if unsynced_since.is_some() {
        // Nobody is left to tell; a failure here is found by the next open.
        let _ = log.sync();
    }
    log
}

/// Appends a group as one write, fsyncs it if anyone waits for that, and
/// answers everyone. Returns whether writes are left un-fsync'd.
fn commit_group(log: &mut Log, group: &mut Vec<Submission>) -> bool {
    let seq_floor = group.iter().map(|s| s.seq_floor).max().unwrap_or(0);
    let durable = group.iter().any(|s| s.durable);
    let appended = log
        .append(
            group
                .iter()
                .flat_map(|s| s.payloads.iter().map(Vec::as_slice)),
            seq_floor,
        )
        .and_then(|positions| {
            if durable {
                log.sync()?;
            }
            Ok(positions)
        })
        .map_err(|error| CommitError(Arc::new(error)));
    match appended {
        Ok(positions) => {
            let mut positions = positions.into_iter();
            for submission in group.drain(..) {
                let mine = positions.by_ref().take(submission.payloads.len()).collect();
                (submission.done)(Ok(mine));
            }
            !durable
        }
        Err(error) => {
            for submission in group.drain(..) {
                (submission.done)(Err(error.clone()));
            }
            false
        }
    }
}
