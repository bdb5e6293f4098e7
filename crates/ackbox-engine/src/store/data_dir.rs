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
