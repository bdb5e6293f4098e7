//! The data directory an embedded store lives in: created so that it
//! survives a power cut, and held by one server at a time.
//!
//! A new directory entry is on disk only once the directory holding it is
//! synced — POSIX promises no more, and ext4, XFS and btrfs can lose an
//! unsynced one. So each directory created here is synced into its parent,
//! up to the first one that already existed: without that, a power cut soon
//! after a first start could take the whole data directory, and every send
//! acknowledged in it, with it.
//!
//! Two servers on one directory would each keep part of what they
//! acknowledged where the other cannot see it. The first to open the
//! directory takes an exclusive lock (`flock`) on its lock file and holds it
//! until its store closes (or its process ends, which releases it whatever
//! the way); the file names the holder's pid, so the next one can say who
//! holds it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use super::StoreError;

/// The lock file inside the data directory.
pub const LOCK_FILE: &str = "ackbox.lock";

/// A data directory held by this process: released when dropped.
#[derive(Debug)]
pub struct DataDirLock {
    /// The open lock file; its `flock` is the lock.
    file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Creates `data_dir` if needed (durably) and takes its lock, or says
    /// which process holds it.
    pub fn acquire(data_dir: &Path) -> Result<Self, StoreError> {
        ackbox_log::log::create_dir_durably(&ackbox_log::disk::RealDisk, data_dir).map_err(
            |source| StoreError::Io {
                path: data_dir.display().to_string(),
                source,
            },
        )?;
        let path = data_dir.join(LOCK_FILE);
        let io_error = |source| StoreError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // Best effort: the holder writes its pid right after locking.
                let _ = file.read_to_string(&mut holder);
                return Err(StoreError::DataDirInUse {
                    data_dir: data_dir.display().to_string(),
                    holder: holder.trim().parse().ok(),
                });
            }
            Err(std::fs::TryLockError::Error(source)) => return Err(io_error(source)),
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()))
            .map_err(io_error)?;
        Ok(Self { file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DataDirLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first makes the
        // release not wait for every clone of the descriptor.
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_one_s_pid_until_it_lets_go() {
        let root = tempfile::tempdir().unwrap();
        let data_dir = root.path().join("new").join("data");
        let first = DataDirLock::acquire(&data_dir).unwrap();
        assert!(data_dir.is_dir(), "created with its missing parent");
        let refused = DataDirLock::acquire(&data_dir).unwrap_err();
        let StoreError::DataDirInUse {
            data_dir: named,
            holder,
        } = &refused
        else {
            panic!("not refused for the lock: {refused}");
        };
        assert_eq!(named, &data_dir.display().to_string());
        assert_eq!(*holder, Some(std::process::id()));
        assert!(
            refused
                .to_string()
                .contains(&std::process::id().to_string()),
            "{refused}"
        );
        drop(first);
        DataDirLock::acquire(&data_dir).expect("free again once the holder let go");
    }
}

/// The reserve file inside the data directory.
pub const RESERVE_FILE: &str = "ackbox.reserve";

/// Space held back in the data directory's filesystem, so that a full disk
/// refuses sends but not receives, deletes and visibility changes, which
/// write too (a lease is a row or a record). A write that finds the disk
/// full releases the reserve; sends are then refused without being tried,
/// while everything else goes on in the space released; a send tries to
/// take the reserve back (at most once a second) and is taken again once
/// that succeeds.
#[derive(Debug)]
pub struct DiskReserve {
    path: PathBuf,
    /// Written by sends, failed writes and `hold`; read by health checks.
    state: std::sync::Mutex<ReserveState>,
}

#[derive(Debug, Default)]
struct ReserveState {
    /// How much to hold back; 0 holds nothing.
    bytes: u64,
    /// The file holds `bytes` now.
    held: bool,
    /// When a send last tried to take the reserve back.
    last_attempt: Option<std::time::Instant>,
}

/// How often a refused send tries to take the reserve back.
const RESERVE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl DiskReserve {
    /// No reserve yet, for the data directory `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(RESERVE_FILE),
            state: std::sync::Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReserveState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds `bytes` back (0: none). Fails when the disk has not that much
    /// room; sends are refused then, as after a full disk.
    pub fn hold(&self, bytes: u64) -> Result<(), StoreError> {
        let mut state = self.lock();
        state.bytes = bytes;
        self.fill(&mut state)
    }

    fn fill(&self, state: &mut ReserveState) -> Result<(), StoreError> {
        let io_error = |source| StoreError::Io {
            path: self.path.display().to_string(),
            source,
        };
        if state.bytes == 0 {
            state.held = false;
            return match std::fs::remove_file(&self.path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(io_error(error)),
                _ => Ok(()),
            };
        }
        let written = write_zeros(&self.path, state.bytes);
        state.held = written.is_ok();
        written.map_err(|source| {
            // Half a reserve is space taken from the store for nothing.
            let _ = std::fs::remove_file(&self.path);
            if source.raw_os_error() == Some(28) {
                StoreError::DiskFull {
                    detail: format!("no room for a reserve of {} bytes", state.bytes),
                }
            } else {
                io_error(source)
            }
        })
    }

    /// Gives the reserve's space to the store: a write found the disk full.
    pub fn release(&self) {
        let mut state = self.lock();
        if !state.held {
            return;
        }
        state.held = false;
        state.last_attempt = Some(std::time::Instant::now());
        match std::fs::remove_file(&self.path) {
            Ok(()) => tracing::warn!(
                reserve = %self.path.display(),
                bytes = state.bytes,
                "the disk is full: released the reserve so that receives and deletes go on; \
                 sends are refused until there is room again"
            ),
            Err(error) => {
                tracing::error!(reserve = %self.path.display(), %error, "could not release the disk reserve");
            }
        }
    }

    /// Whether sends are refused: the reserve is given away (or could never
    /// be held) and has not been taken back.
    pub fn refusing_sends(&self) -> bool {
        let state = self.lock();
        state.bytes > 0 && !state.held
    }

    /// For a send: whether it may go ahead, taking the reserve back first if
    /// it was released and the last try is a second old.
    pub fn admit_send(&self) -> bool {
        let mut state = self.lock();
        if state.bytes == 0 || state.held {
            return true;
        }
        if state
            .last_attempt
            .is_some_and(|last| last.elapsed() < RESERVE_RETRY)
        {
            return false;
        }
        state.last_attempt = Some(std::time::Instant::now());
        if self.fill(&mut state).is_ok() {
            tracing::info!(reserve = %self.path.display(), "the disk has room again: the reserve is held and sends are taken");
            return true;
        }
        false
    }
}

/// Makes `path` a file of `bytes` zeros, written (not a sparse hole, which
/// would reserve nothing) and synced.
fn write_zeros(path: &Path, bytes: u64) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let mut length = file.metadata()?.len();
    if length > bytes {
        file.set_len(bytes)?;
        length = bytes;
    }
    file.seek(std::io::SeekFrom::Start(length))?;
    let chunk = vec![0u8; 1 << 20];
    while length < bytes {
        let next = usize::try_from((bytes - length).min(chunk.len() as u64)).unwrap_or(chunk.len());
        file.write_all(&chunk[..next])?;
        length += next as u64;
    }
    file.sync_data()
}
