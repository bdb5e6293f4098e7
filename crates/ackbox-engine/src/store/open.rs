//! The one door to the stores: a configuration in, a [`Store`] and the
//! installation's receipt key out. Only this module names the concrete
//! stores; the server and the CLI pick one by configuration.

use std::path::PathBuf;
use std::sync::Arc;

use ackbox_core::receipt::ReceiptKey;

use super::log::LogStore;
use super::postgres::{PostgresOptions, PostgresStore};
use super::sqlite::{Durability, SqliteStore};
use super::{Store, StoreError};
use crate::secret::load_or_create_receipt_key;

/// Which store keeps queues and messages when PostgreSQL does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbeddedStore {
    /// Everything in one SQLite database.
    #[default]
    Sqlite,
    /// Standard queues' messages in an append-only log, everything else in
    /// SQLite beside it.
    Log,
}

/// Where a broker keeps its queues, and how.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Directory of the embedded store and the installation secret.
    pub data_dir: PathBuf,
    /// How commits reach the disk (embedded store).
    pub durability: Durability,
    /// Which embedded store, when `postgres` is `None`.
    pub embedded: EmbeddedStore,
    /// Keep queues, messages and the installation secret in this
    /// PostgreSQL database instead, shared with every node pointed at it.
    pub postgres: Option<PostgresOptions>,
    /// Bytes of the embedded store's disk held back, so that a full disk
    /// refuses sends but not receives and deletes (0: none).
    pub disk_reserve_bytes: u64,
}

impl StoreConfig {
    /// The default store in `data_dir`: SQLite, every acknowledged write
    /// fsync'd, no disk reserve.
    pub fn embedded(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            durability: Durability::Fsync,
            embedded: EmbeddedStore::Sqlite,
            postgres: None,
            disk_reserve_bytes: 0,
        }
    }
}

/// An open store and the secret its receipt handles are sealed with.
pub struct OpenedStore {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The installation's receipt key.
    pub receipt_key: ReceiptKey,
}

/// Opens the store `config` names, with its receipt key. An embedded store
/// takes its data directory first, so a second server on it stops here,
/// before touching anything.
///
/// # Errors
/// When the store cannot be opened or refuses the data directory, or the
/// receipt key cannot be read or made.
pub async fn open(config: &StoreConfig) -> Result<OpenedStore, StoreError> {
    if let Some(options) = &config.postgres {
        let store = PostgresStore::connect(options).await?;
        return Ok(OpenedStore {
            receipt_key: store.receipt_key().await?,
            store: Arc::new(store),
        });
    }
    let (store, reserved): (Arc<dyn Store>, _) = match config.embedded {
        EmbeddedStore::Sqlite => {
            let store = SqliteStore::open(&config.data_dir, config.durability)?;
            if let Err(refused) = LogStore::ensure_no_messages_left(&config.data_dir).await {
                let _ = store.close().await;
                return Err(refused);
            }
            let reserved = store.reserve_disk(config.disk_reserve_bytes);
            (Arc::new(store), reserved)
        }
        EmbeddedStore::Log => {
            let store = LogStore::open(&config.data_dir, config.durability).await?;
            let reserved = store.reserve_disk(config.disk_reserve_bytes);
            (Arc::new(store), reserved)
        }
    };
    match reserved {
        Ok(()) => {}
        // Serving reads and deletes beats not starting; sends wait for
        // room, as after any full disk.
        Err(StoreError::DiskFull { detail }) => tracing::warn!(
            bytes = config.disk_reserve_bytes,
            detail,
            "the disk has no room for the reserve: sends are refused until it has"
        ),
        Err(error) => {
            let _ = store.close().await;
            return Err(error);
        }
    }
    match load_or_create_receipt_key(&config.data_dir) {
        Ok(receipt_key) => Ok(OpenedStore { store, receipt_key }),
        Err(error) => {
            let _ = store.close().await;
            Err(error)
        }
    }
}
