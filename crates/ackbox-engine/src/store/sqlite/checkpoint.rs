//! The checkpointer: copies the WAL back into the database file on its own
//! thread and connection.
//!
//! SQLite's auto-checkpoint runs inside a writer commit and stalls every
//! request behind a multi-megabyte copy and a database fsync. A PASSIVE
//! checkpoint on a separate connection takes no write lock, so the writer
//! keeps committing while it copies. Under steady writes a passive checkpoint
//! never catches the last frames, so the WAL could not restart; the writer
//! thread checkpoints on the writer connection as a backstop
//! (`BACKSTOP_CHECKPOINT_FRAMES` in `writer/mod.rs`), and finds much already
//! copied, so its stall is shorter.
//!
//! What is due is read from the WAL index, not from the WAL file's size:
//! after a checkpoint SQLite writes the WAL again from its start and never
//! shrinks the file, so once the file had passed the threshold its size
//! said "due" at every poll, and a trickle of writes was checkpointed ten
//! times a second (two fsyncs each, and the same hot pages copied each time).

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use super::later_file::LaterFile;

/// Checkpoint once the WAL holds this many bytes not yet copied: as much as
/// the writer's backstop (`BACKSTOP_CHECKPOINT_FRAMES` in `writer/mod.rs`),
/// which thus often fires first, after the commit that crosses it. A
/// checkpoint copies each page once however often it was written since the
/// last one, and the same few hot pages take most writes: at 8 MiB (a
/// quarter of the backstop) checkpoints came four times as often, each with
/// a database fsync beside the commits' WAL fsyncs, and W1's and W2's p99
/// were twice as long (README, performance).
const CHECKPOINT_AT_BYTES: u64 = 32 * 1_048_576;
/// How often the WAL index is looked at.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Bytes of a WAL frame besides its page.
const FRAME_HEADER_BYTES: u64 = 24;

/// The WAL index (the `-shm` file) read for its counters, without SQLite's
/// locks: a read torn by a concurrent commit only moves a checkpoint by one
/// poll. Layout from <https://www.sqlite.org/walformat.html>, native byte
/// order: the page size (`u16`, 1 meaning 65,536) at byte 14, the last
/// valid frame (`mxFrame`, `u32`) at 16, the frames already copied into
/// the database (`nBackfill`, `u32`) at 96.
struct WalIndex(LaterFile);

impl WalIndex {
    fn new(path: PathBuf) -> Self {
        Self(LaterFile::new(path))
    }

    /// Bytes of WAL frames that a checkpoint would copy now; 0 when the
    /// index cannot be read.
    fn bytes_to_copy(&mut self) -> u64 {
        let mut header = [0u8; 100];
        let Ok(Some(file)) = self.0.get() else {
            return 0;
        };
        if file.read_exact_at(&mut header, 0).is_err() {
            return 0;
        }
        frames_bytes_to_copy(&header)
    }
}

/// See [`WalIndex`] for the layout.
fn frames_bytes_to_copy(header: &[u8; 100]) -> u64 {
    let page_size = match u16::from_ne_bytes([header[14], header[15]]) {
        1 => 65_536,
        size => u64::from(size),
    };
    let word = |at: usize| {
        u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let (last_frame, copied) = (word(16), word(96));
    u64::from(last_frame.saturating_sub(copied)) * (page_size + FRAME_HEADER_BYTES)
}

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
    /// Starts checkpointing `connection`'s database whenever its WAL index
    /// (`shm_path`) counts [`CHECKPOINT_AT_BYTES`] of frames not yet copied.
    pub(crate) fn start(connection: Connection, shm_path: PathBuf) -> std::io::Result<Self> {
        let stopping = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_stopping = Arc::clone(&stopping);
        let thread = std::thread::Builder::new()
            .name("ackbox-sqlite-checkpoint".to_owned())
            .spawn(move || {
                let (stop, wake) = &*thread_stopping;
                let mut index = WalIndex::new(shm_path);
                let mut stopped = stop.lock().expect("checkpointer lock poisoned");
                while !*stopped {
                    stopped = wake
                        .wait_timeout(stopped, POLL_INTERVAL)
                        .expect("checkpointer lock poisoned")
                        .0;
                    if index.bytes_to_copy() >= CHECKPOINT_AT_BYTES
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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn open(dir: &tempfile::TempDir) -> Connection {
        let connection = Connection::open(dir.path().join("db")).expect("open");
        connection
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t (v BLOB NOT NULL);",
            )
            .expect("configure");
        connection
    }

    fn write_pages(connection: &Connection, pages: usize) {
        connection
            .execute_batch("BEGIN")
            .and_then(|()| {
                for _ in 0..pages {
                    connection.execute("INSERT INTO t VALUES (zeroblob(3000))", [])?;
                }
                connection.execute_batch("COMMIT")
            })
            .expect("write");
    }

    fn index(dir: &tempfile::TempDir) -> WalIndex {
        WalIndex::new(dir.path().join("db-shm"))
    }

    fn wal_file_bytes(dir: &tempfile::TempDir) -> u64 {
        std::fs::metadata(dir.path().join("db-wal"))
            .expect("wal")
            .len()
    }

    #[test]
    fn the_index_counts_only_frames_no_checkpoint_copied_though_the_wal_file_stays_large() {
        let dir = tempfile::tempdir().expect("tempdir");
        let connection = open(&dir);
        write_pages(&connection, 200);
        let before = index(&dir).bytes_to_copy();
        assert!(
            before >= 200 * 4_120,
            "200 pages written, {before} bytes counted"
        );
        connection
            .execute_batch("PRAGMA wal_checkpoint(PASSIVE);")
            .expect("checkpoint");
        assert_eq!(index(&dir).bytes_to_copy(), 0);
        // The next commit writes the WAL again from its start.
        write_pages(&connection, 1);
        let after = index(&dir).bytes_to_copy();
        assert!(after > 0 && after < 10 * 4_120, "{after} bytes counted");
        assert!(
            wal_file_bytes(&dir) >= before,
            "the WAL file did not shrink"
        );
    }

    #[test]
    fn a_wal_that_once_passed_the_threshold_is_not_checkpointed_again_for_a_few_frames() {
        let dir = tempfile::tempdir().expect("tempdir");
        let connection = open(&dir);
        let checkpointer = Checkpointer::start(
            Connection::open(dir.path().join("db")).expect("open"),
            dir.path().join("db-shm"),
        )
        .expect("start");
        // A page of 4 KiB per row; a few more than the threshold holds.
        write_pages(&connection, (CHECKPOINT_AT_BYTES / 4_096) as usize + 100);
        let deadline = Instant::now() + Duration::from_secs(10);
        while index(&dir).bytes_to_copy() > 0 {
            assert!(
                Instant::now() < deadline,
                "a WAL past the threshold was never checkpointed"
            );
            std::thread::sleep(POLL_INTERVAL / 2);
        }
        assert!(wal_file_bytes(&dir) >= CHECKPOINT_AT_BYTES);
        write_pages(&connection, 1);
        std::thread::sleep(POLL_INTERVAL * 4);
        assert!(
            index(&dir).bytes_to_copy() > 0,
            "a few frames were checkpointed because the WAL file is large"
        );
        checkpointer.stop();
    }

    #[test]
    fn a_missing_index_counts_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(index(&dir).bytes_to_copy(), 0);
    }
}
