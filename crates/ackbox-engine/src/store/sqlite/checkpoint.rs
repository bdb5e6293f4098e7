//! The checkpointer: copies the WAL back into the database file on its own
//! thread and connection.
//!
//! SQLite's auto-checkpoint runs inside a writer commit and stalls every
//! request behind a multi-megabyte copy and a database fsync. A PASSIVE
//! checkpoint on a separate connection takes no write lock, so the writer
//! keeps committing while it copies. Under steady writes a passive checkpoint
//! never catches the last frames, so the WAL could not restart; the writer's
//! own auto-checkpoint stays on as a backstop at a larger size, and finds
//! almost everything already copied, so its stall is short.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

/// Checkpoint once the WAL holds this many bytes (a quarter of the writer's
/// backstop, `wal_autocheckpoint` in `mod.rs`).
const CHECKPOINT_AT_BYTES: u64 = 8 * 1_048_576;
/// How often the WAL size is looked at.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Handle to the checkpointer thread; [`Checkpointer::stop`] ends it.
pub(crate) struct Checkpointer {
    /// `true` once stopping was requested; written by `stop`, read by the thread.
    stopping: Arc<(Mutex<bool>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer").finish_non_exhaustive()
    }
}

impl Checkpointer {
    /// Starts checkpointing `connection`'s database whenever `wal_path` grows
    /// past the threshold.
    pub(crate) fn start(connection: Connection, wal_path: PathBuf) -> std::io::Result<Self> {
        let stopping = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_stopping = Arc::clone(&stopping);
        let thread = std::thread::Builder::new()
            .name("ackbox-sqlite-checkpoint".to_owned())
            .spawn(move || {
                let (stop, wake) = &*thread_stopping;
                let mut stopped = stop.lock().expect("checkpointer lock poisoned");
                while !*stopped {
                    stopped = wake
                        .wait_timeout(stopped, POLL_INTERVAL)
                        .expect("checkpointer lock poisoned")
                        .0;
                    let wal_bytes = std::fs::metadata(&wal_path).map_or(0, |meta| meta.len());
                    if wal_bytes >= CHECKPOINT_AT_BYTES
                        && let Err(error) =
                            connection.execute_batch("PRAGMA wal_checkpoint(PASSIVE);")
                    {
                        tracing::warn!(%error, "WAL checkpoint failed; will retry");
                    }
                }
            })?;
        Ok(Self {
            stopping,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops the thread and waits for it. Idempotent.
    pub(crate) fn stop(&self) {
        let (stop, wake) = &*self.stopping;
        *stop.lock().expect("checkpointer lock poisoned") = true;
        wake.notify_one();
        let thread = self
            .thread
            .lock()
            .expect("checkpointer lock poisoned")
            .take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the SQLite checkpointer thread panicked");
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}
