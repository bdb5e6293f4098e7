//! The fsync thread of `Durability::Fsync` mode and the WAL it syncs.

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::Completion;
use crate::store::sqlite::later_file::LaterFile;

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
pub(super) struct WalFile(LaterFile);

impl WalFile {
    pub(super) fn new(path: PathBuf) -> Self {
        Self(LaterFile::new(path))
    }

    pub(super) fn display(&self) -> std::path::Display<'_> {
        self.0.path().display()
    }

    /// Syncs the WAL; nothing to sync while it does not exist.
    pub(super) fn sync(&mut self) -> std::io::Result<()> {
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
pub(super) struct Flusher {
    /// Committed groups waiting for an fsync; written by the writer thread,
    /// read by the flusher thread. Dropping it stops the flusher.
    pub(super) groups: mpsc::Sender<Vec<Completion>>,
    pub(super) thread: JoinHandle<()>,
}

impl Flusher {
    pub(super) fn start(mut wal: WalFile) -> std::io::Result<Self> {
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
    pub(super) fn finish(self) {
        drop(self.groups);
        if self.thread.join().is_err() {
            tracing::error!("the SQLite flusher thread panicked");
        }
    }
}
