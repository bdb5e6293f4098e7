//! `ackbox store check`: what an embedded store's files hold, read without
//! changing them — SQLite's own integrity check of the database, and every
//! segment of the log (whole, a torn tail the next open would cut, or damage
//! the store refuses to open over, with the byte where it starts).

use std::path::{Path, PathBuf};

use ackbox_log::log::{SegmentCheck, SegmentState};
use rusqlite::{Connection, OpenFlags};

use super::StoreError;
use super::data_dir::DataDirLock;
use super::log::LOG_DIR;
use super::sqlite::damage;
use super::sqlite::{DATABASE_FILE, mutation_error as database_error};

/// What a data directory's files hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCheck {
    /// The database, and the problems SQLite's `integrity_check` finds in
    /// it (none when sound); `None` when there is no database.
    pub database: Option<(PathBuf, Vec<String>)>,
    /// The log's directory and its segments, oldest first; `None` without a log.
    pub log: Option<(PathBuf, Vec<SegmentCheck>)>,
}

impl StoreCheck {
    /// Whether nothing is damaged (a torn tail is what a crash leaves, and
    /// the next open cuts it).
    pub fn is_sound(&self) -> bool {
        let database_ok = self
            .database
            .as_ref()
            .is_none_or(|(_, problems)| problems.is_empty());
        let log_ok = self.log.as_ref().is_none_or(|(_, segments)| {
            segments
                .iter()
                .all(|segment| !matches!(segment.state, SegmentState::Damaged { .. }))
        });
        database_ok && log_ok
    }
}

/// Checks the embedded store in `data_dir`, holding the directory while it
/// reads (a server must not be running there).
pub fn check(data_dir: &Path) -> Result<StoreCheck, StoreError> {
    if !data_dir.is_dir() {
        return Err(StoreError::Io {
            path: data_dir.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such data directory"),
        });
    }
    let _held = DataDirLock::acquire(data_dir)?;
    let database_path = data_dir.join(DATABASE_FILE);
    let database = if database_path.exists() {
        let connection =
            Connection::open_with_flags(&database_path, OpenFlags::SQLITE_OPEN_READ_ONLY)
                .map_err(database_error("open the database to check it"))?;
        let problems = damage::problems(&connection, damage::Thoroughness::Full)?;
        Some((database_path, problems))
    } else {
        None
    };
    let log_dir = data_dir.join(LOG_DIR);
    let log = if log_dir.is_dir() {
        let segments = ackbox_log::log::check(&log_dir).map_err(|source| StoreError::Log {
            operation: "check",
            source: source.into(),
        })?;
        Some((log_dir, segments))
    } else {
        None
    };
    Ok(StoreCheck { database, log })
}
