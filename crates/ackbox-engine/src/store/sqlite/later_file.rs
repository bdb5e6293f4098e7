//! A file SQLite creates on its first use of it (the WAL, the WAL index),
//! opened by us once it exists and then kept open: one open instead of a
//! path lookup on every use.

use std::fs::File;
use std::path::{Path, PathBuf};

pub(crate) struct LaterFile {
    path: PathBuf,
    file: Option<File>,
}

impl LaterFile {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self { path, file: None }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The open file, or `None` while it does not exist yet.
    pub(crate) fn get(&mut self) -> std::io::Result<Option<&File>> {
        if self.file.is_none() {
            match File::open(&self.path) {
                Ok(file) => self.file = Some(file),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(error) => return Err(error),
            }
        }
        Ok(self.file.as_ref())
    }
}
