//! What the log needs from a filesystem, as a seam: the real one
//! ([`RealDisk`]), or — with the feature `disk-model` — a model of a disk
//! that loses power (`model::ModelDisk`), so that tests can cut the power
//! at any point and check what recovery finds.
//!
//! The log's durability argument rests on exactly these calls: file data is
//! durable once the file is synced, and a file created or removed is
//! durable once its directory is synced. Nothing else is assumed.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

#[cfg(feature = "disk-model")]
pub mod model;
#[cfg(feature = "disk-model")]
pub mod power_cut;

/// A filesystem as the log uses it.
pub trait Disk: Send + Sync + std::fmt::Debug + 'static {
    /// Whether something is at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Creates the directory `dir` (its parent exists); durable once the
    /// parent is synced.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// The names of the entries in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// The whole content of the file at `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Creates a new, empty file at `path` (refused if one exists), open for
    /// reading and writing.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// Opens the existing file at `path` for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// Removes the file at `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` durable: files created or removed in it.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// An open file as the log uses it.
pub trait DiskFile: Send + Sync + std::fmt::Debug {
    /// Fills `bytes` from `offset` on; `UnexpectedEof` past the file's end.
    fn read_exact_at(&self, bytes: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `bytes` at `offset`.
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// Makes the file's data (and its length) durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Cuts the file to (or extends it with zeros to) `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealDisk;

impl RealDisk {
    /// The real filesystem, shared.
    pub fn shared() -> Arc<dyn Disk> {
        Arc::new(Self)
    }
}

impl Disk for RealDisk {
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        std::fs::read_dir(dir)?
            .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into_owned()))
            .collect()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(file))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(file))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

impl DiskFile for File {
    fn read_exact_at(&self, bytes: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, bytes, offset)
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(self, bytes, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}
